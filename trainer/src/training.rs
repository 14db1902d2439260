//! Training the degradation regressor: full-batch Adam on the absolute error of log speed, the
//! pinball loss of its 10th percentile and the cross-entropy of feasibility, with early stopping.

use burn::module::AutodiffModule;
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::tensor::activation::{log_sigmoid, relu};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Tensor, TensorData};
use duet_model::network::{
    CONSERVATIVE_QUANTILE, Mlp, OUT_FEASIBLE_LOGIT, OUT_LOG_SPEED, OUT_LOG_SPEED_P10, PointLoss,
    Rng, TrainConfig, TrainOutcome, init,
};

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
/// which is what MAPE measures; squared error with `PointLoss::Squared`) and pinball loss of its
/// 10th percentile on feasible rows, plus the cross-entropy of feasibility on all rows.
fn loss<B: Backend>(out: Tensor<B, 2>, t: &Tensors<B>, point_loss: PointLoss) -> Tensor<B, 1> {
    let n = out.dims()[0];
    let point = out.clone().slice([0..n, OUT_LOG_SPEED..OUT_LOG_SPEED + 1]);
    let p10 = out
        .clone()
        .slice([0..n, OUT_LOG_SPEED_P10..OUT_LOG_SPEED_P10 + 1]);
    let logit = out.slice([0..n, OUT_FEASIBLE_LOGIT..OUT_FEASIBLE_LOGIT + 1]);
    let err = t.y.clone() - point;
    let err = match point_loss {
        PointLoss::Absolute => err.abs(),
        PointLoss::Squared => err.clone() * err,
    };
    let absolute = (err * t.m.clone()).sum() / t.feasible_count;
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
    #[error(
        "--device cuda:{index}: burn-cuda stopped ({said}); CUDA needs the NVIDIA driver's libcuda, NVRTC and the toolkit's headers (CUDA_PATH): see the lines above"
    )]
    CudaFailed { index: usize, said: String },
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
        let l = loss(model.forward(t.x.clone()), &t, config.loss);
        let value = scalar(l.clone().inner());
        if !value.is_finite() {
            return Err(TrainError::Diverged { epoch, loss: value });
        }
        let grads = GradientsParams::from_grads(l.backward(), &model);
        model = optimizer.step(config.learning_rate, model, grads);
        let inner = model.valid();
        let check = match &v {
            Some(v) => scalar(loss(inner.forward(v.x.clone()), v, config.loss)),
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
