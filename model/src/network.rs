//! The degradation regressor's network: a Burn MLP with three outputs per pair, the log speed of
//! job a (point estimate), its 10th percentile (the conservative estimate: p90 of slowdown) and
//! the logit of "the pair fits on the device together"; its initialisation, forward passes and
//! the training configuration `model.json` records. Training itself is the trainer's.

use burn::module::{Module, Param};
use burn::tensor::activation::relu;
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};
use serde::{Deserialize, Serialize};

/// Output columns of the network.
pub const OUT_LOG_SPEED: usize = 0;
pub const OUT_LOG_SPEED_P10: usize = 1;
pub const OUT_FEASIBLE_LOGIT: usize = 2;
pub const OUTPUTS: usize = 3;

/// The largest |ln speed| an answer carries: `e^LOG_BOUND` and its inverse are finite in single
/// precision. Only inputs far outside anything the model was trained on get near it; JSON has no
/// infinity, so an answer is bounded rather than null.
pub const LOG_BOUND: f64 = 80.0;

/// `exp(x)` with `x` clamped to `[-LOG_BOUND, LOG_BOUND]` (a NaN, which finite inputs never
/// produce, is taken as 0: speed 1): how an output in ln becomes an answer.
pub fn bounded_exp(x: impl Into<f64>) -> f64 {
    let x: f64 = x.into();
    if x.is_nan() {
        return 1.0;
    }
    x.clamp(-LOG_BOUND, LOG_BOUND).exp()
}

/// The calibrated ln p10 speed (`-ln` of the p90 slowdown answered): the network's ln p10 less
/// its calibration class's `shift`, never above the ln speed. The p10 head is a quantile of its
/// own and a shift may narrow it (a class whose held-out p10s were too wide has a negative
/// shift), so the shifted p10 can land above the point; a p90 slowdown below the median one
/// would say the job is surely faster than expected.
pub fn calibrated_ln_p10(ln_speed: f64, ln_p10: f64, shift: f64) -> f64 {
    (ln_p10 - shift).min(ln_speed)
}

/// The quantile of log speed the conservative head learns (0.1: p90 of slowdown).
pub const CONSERVATIVE_QUANTILE: f64 = 0.1;

/// One fully connected layer, `y = x W + b`, with W stored as `[inputs, outputs]`.
#[derive(Module, Debug)]
pub struct Dense<B: Backend> {
    pub weight: Param<Tensor<B, 2>>,
    pub bias: Param<Tensor<B, 1>>,
}

impl<B: Backend> Dense<B> {
    fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        x.matmul(self.weight.val()) + self.bias.val().unsqueeze::<2>()
    }
}

/// ReLU between layers, none after the last.
#[derive(Module, Debug)]
pub struct Mlp<B: Backend> {
    pub layers: Vec<Dense<B>>,
}

impl<B: Backend> Mlp<B> {
    pub fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        let last = self.layers.len() - 1;
        self.layers.iter().enumerate().fold(x, |h, (i, layer)| {
            let y = layer.forward(h);
            if i == last { y } else { relu(y) }
        })
    }
}

/// Where the networks are trained. Inference and the artifact always use the CPU (`Flex`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TrainDevice {
    /// Burn's pure-Rust `Flex` backend.
    #[default]
    Cpu,
    /// GPU `N` through burn-cuda (built with the `cuda` feature).
    Cuda(usize),
}

/// The seeds of the shipped recipe's evaluation (`duet train` without `--seed` or `--seeds`):
/// each draws its own folds and initial weights, every metric is their mean and standard
/// deviation, and the shipped networks use the first.
pub const DEFAULT_SEEDS: [u64; 3] = [7, 8, 9];

/// Hyper-parameters of one training run. `TrainConfig::default()` is the recipe of the shipped
/// default model (`models/default`), and `duet train`'s flags default to it: hidden layers of 32
/// lose nothing measurable against 64 and answer large requests a third faster (BENCHMARKS.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainConfig {
    pub hidden: Vec<usize>,
    pub learning_rate: f64,
    pub weight_decay: f64,
    pub max_epochs: usize,
    /// Stop when the validation loss has not improved for this many epochs.
    pub patience: usize,
    /// Share of training settings held out for early stopping.
    pub validation_fraction: f64,
    pub seed: u64,
    /// Networks trained from different seeds and validation splits; outputs are averaged.
    pub ensemble: usize,
    #[serde(default)]
    pub device: TrainDevice,
    /// One identity slot per training workload (the default); off, the network sees features
    /// alone, as for a new job, for every pair.
    #[serde(default = "identities_on", skip_serializing_if = "Clone::clone")]
    pub identities: bool,
    /// The loss of the point estimate of ln(speed); recorded only when not the default, so
    /// existing models keep their versions.
    #[serde(default, skip_serializing_if = "PointLoss::is_default")]
    pub loss: PointLoss,
    /// Train also on a copy of three rows of four with the ids and the family feature of one
    /// job or both hidden (the default, where the spec has a family), so that the network
    /// learns to answer for a job of a new family from its measured profile; off (and in files
    /// written before it), the family's unknown slot never trains.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub family_dropout: bool,
    /// Where the training data has measured groups of three or more, whether a network that
    /// also learns them (one row per job) answers their sizes: where it beats the composition of
    /// pairs on groups it was not trained on (the default), always, or never. Recorded only when
    /// not the default.
    #[serde(default, skip_serializing_if = "GroupNetwork::is_default")]
    pub group_network: GroupNetwork,
}

/// When the network that learns measured groups answers a group size (`--group-network`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GroupNetwork {
    /// Where its MAPE on groups it was not trained on is below the composition's.
    #[default]
    Auto,
    /// For every measured size (for comparison).
    Always,
    /// Never: every group is composed from its pairs (for comparison).
    Never,
}

impl GroupNetwork {
    fn is_default(&self) -> bool {
        *self == GroupNetwork::default()
    }
}

/// The loss of the point estimate of ln(speed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PointLoss {
    /// Absolute error: tracks the relative error of speed, which MAPE measures.
    #[default]
    Absolute,
    /// Squared error (for comparison).
    Squared,
}

impl PointLoss {
    fn is_default(&self) -> bool {
        *self == PointLoss::default()
    }
}

fn identities_on() -> bool {
    true
}

impl Default for TrainConfig {
    fn default() -> Self {
        TrainConfig {
            hidden: vec![32, 32],
            learning_rate: 1e-2,
            weight_decay: 1e-4,
            max_epochs: 800,
            patience: 50,
            validation_fraction: 0.15,
            seed: DEFAULT_SEEDS[0],
            ensemble: 5,
            device: TrainDevice::Cpu,
            identities: true,
            loss: PointLoss::Absolute,
            family_dropout: true,
            group_network: GroupNetwork::Auto,
        }
    }
}

/// The seeded generator of weights, folds and baselines (SplitMix64, in core).
pub use duet_core::rng::Rng;

/// A freshly initialised network (He-uniform weights from `rng`, zero biases): deterministic
/// whatever else runs in the process.
pub fn init<B: Backend>(
    inputs: usize,
    hidden: &[usize],
    rng: &mut Rng,
    device: &B::Device,
) -> Mlp<B> {
    let mut sizes = vec![inputs];
    sizes.extend_from_slice(hidden);
    sizes.push(OUTPUTS);
    let layers = sizes
        .windows(2)
        .map(|w| {
            let (n_in, n_out) = (w[0], w[1]);
            #[allow(clippy::cast_precision_loss)]
            let bound = (6.0 / n_in.max(1) as f64).sqrt();
            #[allow(clippy::cast_possible_truncation)]
            let weights: Vec<f32> = (0..n_in * n_out)
                .map(|_| ((rng.unit() * 2.0 - 1.0) * bound) as f32)
                .collect();
            Dense {
                weight: Param::from_tensor(Tensor::from_data(
                    TensorData::new(weights, [n_in, n_out]),
                    device,
                )),
                bias: Param::from_tensor(Tensor::from_data(
                    TensorData::new(vec![0.0f32; n_out], [n_out]),
                    device,
                )),
            }
        })
        .collect();
    Mlp { layers }
}

/// How a training run ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainOutcome {
    pub epochs: usize,
    pub best_epoch: usize,
    pub best_validation_loss: f64,
}

/// Runs `net` on `rows` encoded pairs; returns `OUTPUTS` values per row.
pub fn forward<B: Backend>(
    net: &Mlp<B>,
    inputs: &[f32],
    width: usize,
    device: &B::Device,
) -> Vec<f32> {
    let rows = inputs.len().checked_div(width).unwrap_or(0);
    if rows == 0 {
        return Vec::new();
    }
    let x = Tensor::from_data(TensorData::new(inputs.to_vec(), [rows, width]), device);
    net.forward(x)
        .into_data()
        .to_vec::<f32>()
        .unwrap_or_default()
}

/// The mean of the ensemble `nets`' outputs on `inputs.len() / width` encoded rows, computed on
/// one input tensor; `OUTPUTS` values per row (empty without members).
pub fn ensemble_forward<B: Backend>(
    nets: &[Mlp<B>],
    inputs: Vec<f32>,
    width: usize,
    device: &B::Device,
) -> Vec<f32> {
    let rows = inputs.len().checked_div(width).unwrap_or(0);
    if rows == 0 || nets.is_empty() {
        return Vec::new();
    }
    let x: Tensor<B, 2> = Tensor::from_data(TensorData::new(inputs, [rows, width]), device);
    let sum = nets
        .iter()
        .map(|net| net.forward(x.clone()))
        .reduce(|s, out| s + out);
    #[allow(clippy::cast_precision_loss)]
    let members = nets.len() as f32;
    sum.map(|s| {
        (s / members)
            .into_data()
            .to_vec::<f32>()
            .unwrap_or_default()
    })
    .unwrap_or_default()
}

/// A copy of `net` on the CPU backend, for inference and the artifact wherever it was trained.
pub fn to_cpu<B: Backend>(net: &Mlp<B>) -> Mlp<burn::backend::Flex> {
    let device = Default::default();
    let copy = |data: TensorData| data.convert::<f32>();
    Mlp {
        layers: net
            .layers
            .iter()
            .map(|layer| Dense {
                weight: Param::from_tensor(Tensor::from_data(
                    copy(layer.weight.val().into_data()),
                    &device,
                )),
                bias: Param::from_tensor(Tensor::from_data(
                    copy(layer.bias.val().into_data()),
                    &device,
                )),
            })
            .collect(),
    }
}
