//! The training corpus: datasets loaded as directed examples with every job's raw features, and
//! what training on a subset of its rows produces (a feature spec fitted on those rows, the
//! ensemble, its conservative head calibrated on held-out rows).

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use burn::backend::{Autodiff, Flex};
use duet_core::dataset::Dataset;
use duet_model::encoding::{FeatureSpec, IDENTITY, JobFeatures, job_features};
use duet_model::network::{
    CONSERVATIVE_QUANTILE, Mlp, OUT_LOG_SPEED_P10, OUTPUTS, Rng, TrainConfig, TrainDevice,
    TrainOutcome, ensemble_forward, forward,
};

use crate::rows::{Example, examples};
use crate::training::{Batch, TrainError, fit};

/// Datasets loaded for training: their examples and every job's raw features.
#[derive(Debug)]
pub struct Corpus {
    pub datasets: Vec<Dataset>,
    pub jobs: Vec<BTreeMap<String, JobFeatures>>,
    pub examples: Vec<Example>,
}

impl Corpus {
    pub fn new(datasets: Vec<Dataset>) -> Corpus {
        let jobs = datasets.iter().map(job_features).collect();
        let examples = examples(&datasets);
        Corpus {
            datasets,
            jobs,
            examples,
        }
    }

    pub fn job(&self, e: &Example, id: &str) -> &JobFeatures {
        &self.jobs[e.dataset][id]
    }

    pub fn encode(&self, spec: &FeatureSpec, rows: &[usize]) -> Batch {
        self.encode_as(spec, rows, true)
    }

    /// The feature spec fitted on the jobs, devices and modes of `rows`.
    pub fn fit_spec(&self, rows: &[usize]) -> FeatureSpec {
        FeatureSpec::fit(
            &self.datasets.iter().collect::<Vec<_>>(),
            rows.iter().flat_map(|&i| {
                let e = &self.examples[i];
                [self.job(e, &e.a), self.job(e, &e.b)]
            }),
            rows.iter().map(|&i| self.examples[i].gpu.clone()),
            rows.iter().map(|&i| self.examples[i].mode),
        )
    }

    /// Training rows twice: as known workloads, and with their ids hidden, as a new job would
    /// look. The network learns to use identities without depending on them.
    pub fn encode_for_training(&self, spec: &FeatureSpec, rows: &[usize]) -> Batch {
        let mut batch = self.encode_as(spec, rows, true);
        if !spec.identities.is_empty() {
            batch.extend(&self.encode_as(spec, rows, false));
        }
        batch
    }

    fn encode_as(&self, spec: &FeatureSpec, rows: &[usize], identity: bool) -> Batch {
        let mut batch = Batch {
            width: spec.pair_width(),
            ..Batch::default()
        };
        let mut buf = Vec::with_capacity(batch.width);
        for &i in rows {
            let e = &self.examples[i];
            buf.clear();
            let (a, b) = (
                view(self.job(e, &e.a), identity),
                view(self.job(e, &e.b), identity),
            );
            spec.encode_pair(&a, &b, &e.gpu, e.mode, e.share_a, e.share_b, &mut buf);
            batch.push(&buf, e.speed);
        }
        batch
    }

    /// Fits the feature spec and the MLP on `rows`, holding out a share of their settings for
    /// early stopping.
    pub fn train(&self, rows: &[usize], config: &TrainConfig) -> Result<Trained, TrainError> {
        let spec = self.fit_spec(rows);
        let settings: BTreeSet<usize> = rows.iter().map(|&i| self.examples[i].setting).collect();
        let settings: Vec<usize> = settings.into_iter().collect();
        let mut nets = Vec::with_capacity(config.ensemble.max(1));
        let mut outcomes = Vec::new();
        for member in 0..config.ensemble.max(1) as u64 {
            let member_config = TrainConfig {
                seed: config.seed.wrapping_add(member.wrapping_mul(0x9E37_79B9)),
                ..config.clone()
            };
            let mut order = settings.clone();
            let mut rng = Rng::new(member_config.seed ^ 0x5EED);
            rng.shuffle(&mut order);
            #[allow(
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss,
                clippy::cast_precision_loss
            )]
            let held = ((order.len() as f64) * config.validation_fraction).round() as usize;
            let held: BTreeSet<usize> = order.into_iter().take(held).collect();
            let (validation, train): (Vec<usize>, Vec<usize>) = rows
                .iter()
                .partition(|&&i| held.contains(&self.examples[i].setting));
            let validation = self.encode_for_training(&spec, &validation);
            let train = self.encode_for_training(&spec, &train);
            let (net, outcome) = match config.device {
                TrainDevice::Cpu => {
                    fit::<Autodiff<Flex>>(&train, &validation, &member_config, &Default::default())?
                }
                TrainDevice::Cuda(index) => fit_cuda(&train, &validation, &member_config, index)?,
            };
            nets.push(calibrate(net, &validation));
            outcomes.push(outcome);
        }
        Ok(Trained {
            spec,
            nets,
            outcomes,
        })
    }
}

#[cfg(feature = "cuda")]
fn fit_cuda(
    train: &Batch,
    validation: &Batch,
    config: &TrainConfig,
    index: usize,
) -> Result<(Mlp<Flex>, TrainOutcome), TrainError> {
    use burn::backend::Cuda;
    use burn::backend::cuda::CudaDevice;

    use duet_model::network::to_cpu;
    let device = CudaDevice::new(index);
    let (net, outcome) = fit::<Autodiff<Cuda>>(train, validation, config, &device)?;
    Ok((to_cpu(&net), outcome))
}

#[cfg(not(feature = "cuda"))]
fn fit_cuda(
    _train: &Batch,
    _validation: &Batch,
    _config: &TrainConfig,
    index: usize,
) -> Result<(Mlp<Flex>, TrainOutcome), TrainError> {
    Err(TrainError::NoCuda { index })
}

/// Shifts the conservative head of `net` so that, on its held-out validation rows, 90% of
/// measured log speeds lie at or above it (split-conformal calibration). The shift goes into
/// the output bias, so Burn and the ONNX graph carry it alike.
fn calibrate(net: Mlp<Flex>, validation: &Batch) -> Mlp<Flex> {
    let out = forward(
        &net,
        &validation.inputs,
        validation.width,
        &Default::default(),
    );
    let mut residuals: Vec<f64> = (0..validation.rows())
        .filter(|&r| validation.feasible[r] > 0.0)
        .map(|r| {
            f64::from(validation.log_speed[r]) - f64::from(out[r * OUTPUTS + OUT_LOG_SPEED_P10])
        })
        .collect();
    if residuals.len() < 10 {
        return net;
    }
    residuals.sort_by(f64::total_cmp);
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let k = ((residuals.len() as f64) * CONSERVATIVE_QUANTILE).floor() as usize;
    let shift = residuals[k.min(residuals.len() - 1)];
    let mut net = net;
    if let Some(last) = net.layers.last_mut() {
        let mut bias = last
            .bias
            .val()
            .into_data()
            .to_vec::<f32>()
            .unwrap_or_default();
        if let Some(b) = bias.get_mut(OUT_LOG_SPEED_P10) {
            #[allow(clippy::cast_possible_truncation)]
            {
                *b += shift as f32;
            }
            let n = bias.len();
            last.bias = burn::module::Param::from_tensor(burn::tensor::Tensor::from_data(
                burn::tensor::TensorData::new(bias, [n]),
                &Default::default(),
            ));
        }
    }
    net
}

/// A job's features as the network sees them: as they are, or with the identity hidden (only
/// then is a copy needed).
fn view(job: &JobFeatures, identity: bool) -> Cow<'_, JobFeatures> {
    if identity {
        Cow::Borrowed(job)
    } else {
        let mut job = job.clone();
        job.remove(IDENTITY);
        Cow::Owned(job)
    }
}

/// A fitted feature spec and network.
#[derive(Debug)]
pub struct Trained {
    pub spec: FeatureSpec,
    /// The ensemble's members.
    pub nets: Vec<Mlp<Flex>>,
    pub outcomes: Vec<TrainOutcome>,
}

impl Trained {
    /// Network outputs for `rows` of the corpus.
    pub fn outputs(&self, corpus: &Corpus, rows: &[usize]) -> Vec<f32> {
        let batch = corpus.encode(&self.spec, rows);
        self.forward(&batch.inputs)
    }

    /// The ensemble's mean output for encoded rows.
    pub fn forward(&self, inputs: &[f32]) -> Vec<f32> {
        ensemble_forward(
            &self.nets,
            inputs.to_vec(),
            self.spec.pair_width(),
            &Default::default(),
        )
    }
}
