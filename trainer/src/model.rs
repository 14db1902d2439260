//! The degradation regressor: a Burn MLP with three outputs per pair, the log speed of job a
//! (point estimate), its 10th percentile (the conservative estimate: p90 of slowdown) and the
//! logit of "the pair fits on the device together".

use burn::module::{AutodiffModule, Module, Param};
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::tensor::activation::{log_sigmoid, relu};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Tensor, TensorData};
use serde::{Deserialize, Serialize};

/// Output columns of the network.
pub const OUT_LOG_SPEED: usize = 0;
pub const OUT_LOG_SPEED_P10: usize = 1;
pub const OUT_FEASIBLE_LOGIT: usize = 2;
pub const OUTPUTS: usize = 3;

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

/// Hyper-parameters of one training run.
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
}

impl Default for TrainConfig {
    fn default() -> Self {
        TrainConfig {
            hidden: vec![64, 64],
            learning_rate: 1e-2,
            weight_decay: 1e-4,
            max_epochs: 800,
            patience: 50,
            validation_fraction: 0.15,
            seed: 7,
            ensemble: 5,
            device: TrainDevice::Cpu,
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

/// A matrix of `rows` encoded pairs, with targets.
#[derive(Debug, Clone, Default)]
pub struct Batch {
    pub inputs: Vec<f32>,
    pub width: usize,
    /// ln(speed) for feasible rows, 0 otherwise.
    pub log_speed: Vec<f32>,
    /// 1 for feasible rows.
    pub feasible: Vec<f32>,
}

impl Batch {
    pub fn rows(&self) -> usize {
        self.feasible.len()
    }

    /// Appends the rows of `other` (of the same width).
    pub fn extend(&mut self, other: &Batch) {
        self.inputs.extend_from_slice(&other.inputs);
        self.log_speed.extend_from_slice(&other.log_speed);
        self.feasible.extend_from_slice(&other.feasible);
    }

    pub fn push(&mut self, encoded: &[f32], speed: Option<f64>) {
        self.inputs.extend_from_slice(encoded);
        #[allow(clippy::cast_possible_truncation)]
        self.log_speed.push(speed.map_or(0.0, |s| s.ln() as f32));
        self.feasible.push(if speed.is_some() { 1.0 } else { 0.0 });
    }
}

struct Tensors<B: Backend> {
    x: Tensor<B, 2>,
    y: Tensor<B, 2>,
    m: Tensor<B, 2>,
    feasible_count: f64,
}

fn tensors<B: Backend>(batch: &Batch, device: &B::Device) -> Tensors<B> {
    let n = batch.rows();
    Tensors {
        x: Tensor::from_data(
            TensorData::new(batch.inputs.clone(), [n, batch.width]),
            device,
        ),
        y: Tensor::from_data(TensorData::new(batch.log_speed.clone(), [n, 1]), device),
        m: Tensor::from_data(TensorData::new(batch.feasible.clone(), [n, 1]), device),
        feasible_count: batch
            .feasible
            .iter()
            .map(|&v| f64::from(v))
            .sum::<f64>()
            .max(1.0),
    }
}

/// The training objective: absolute error of log speed (close to the relative error of speed,
/// which is what MAPE measures) and pinball loss of its 10th percentile on feasible rows, plus
/// the cross-entropy of feasibility on all rows.
fn loss<B: Backend>(out: Tensor<B, 2>, t: &Tensors<B>) -> Tensor<B, 1> {
    let n = out.dims()[0];
    let point = out.clone().slice([0..n, OUT_LOG_SPEED..OUT_LOG_SPEED + 1]);
    let p10 = out
        .clone()
        .slice([0..n, OUT_LOG_SPEED_P10..OUT_LOG_SPEED_P10 + 1]);
    let logit = out.slice([0..n, OUT_FEASIBLE_LOGIT..OUT_FEASIBLE_LOGIT + 1]);
    let err = t.y.clone() - point;
    let absolute = (err.abs() * t.m.clone()).sum() / t.feasible_count;
    let e = t.y.clone() - p10;
    let pinball = ((e.clone() * CONSERVATIVE_QUANTILE + relu(e.neg())) * t.m.clone()).sum()
        / t.feasible_count;
    let bce = (log_sigmoid(logit.clone()) * t.m.clone()
        + log_sigmoid(logit.neg()) * (t.m.clone().neg() + 1.0))
        .mean()
        .neg();
    absolute + pinball + bce * 0.1
}

fn scalar<B: Backend>(t: Tensor<B, 1>) -> f64 {
    t.into_data()
        .to_vec::<f32>()
        .ok()
        .and_then(|v| v.first().copied())
        .map_or(f64::NAN, f64::from)
}

/// How a training run ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainOutcome {
    pub epochs: usize,
    pub best_epoch: usize,
    pub best_validation_loss: f64,
}

/// Why training produced no model.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TrainError {
    #[error("training diverged: the loss became {loss} at epoch {epoch}; nothing was written")]
    Diverged { epoch: usize, loss: f64 },
    #[error("no training rows")]
    Empty,
    #[error(
        "--device cuda:{index}: this duet was built without the `cuda` feature; rebuild with `cargo build --release --features cuda`"
    )]
    NoCuda { index: usize },
}

/// Full-batch Adam with early stopping on `validation`; returns the best network seen.
pub fn fit<B: AutodiffBackend>(
    train: &Batch,
    validation: &Batch,
    config: &TrainConfig,
    device: &B::Device,
) -> Result<(Mlp<B::InnerBackend>, TrainOutcome), TrainError> {
    if train.rows() == 0 {
        return Err(TrainError::Empty);
    }
    let mut rng = Rng::new(config.seed);
    let mut model: Mlp<B> = init(train.width, &config.hidden, &mut rng, device);
    let mut optimizer = AdamConfig::new()
        .with_weight_decay(Some(burn::optim::decay::WeightDecayConfig::new(
            #[allow(clippy::cast_possible_truncation)]
            {
                config.weight_decay as f32
            },
        )))
        .init::<B, Mlp<B>>();
    let t = tensors::<B>(train, device);
    let inner_device = device.clone();
    let v = (validation.rows() > 0).then(|| tensors::<B::InnerBackend>(validation, &inner_device));
    let mut best = (f64::INFINITY, 0, model.valid());
    let mut epoch = 0;
    while epoch < config.max_epochs {
        epoch += 1;
        let l = loss(model.forward(t.x.clone()), &t);
        let value = scalar(l.clone().inner());
        if !value.is_finite() {
            return Err(TrainError::Diverged { epoch, loss: value });
        }
        let grads = GradientsParams::from_grads(l.backward(), &model);
        model = optimizer.step(config.learning_rate, model, grads);
        let inner = model.valid();
        let check = match &v {
            Some(v) => scalar(loss(inner.forward(v.x.clone()), v)),
            None => value,
        };
        if !check.is_finite() {
            return Err(TrainError::Diverged { epoch, loss: check });
        }
        if check < best.0 {
            best = (check, epoch, inner);
        } else if epoch - best.1 >= config.patience {
            break;
        }
    }
    let (best_loss, best_epoch, net) = best;
    Ok((
        net,
        TrainOutcome {
            epochs: epoch,
            best_epoch,
            best_validation_loss: best_loss,
        },
    ))
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
