//! Honest evaluation: k-fold over three splits, the MLP and every baseline on the same folds.
//!
//! - `random`: directed rows in random folds (a pair's mirror may be in training).
//! - `unseen_pairs`: folds of unordered pair settings; a pair and its mirror leave together.
//! - `unseen_workloads`: leave one workload out; test rows touch it, training rows do not (a
//!   new job that was only profiled alone).

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use burn::backend::{Autodiff, Flex};
use duet_core::dataset::Dataset;
use serde::{Deserialize, Serialize};

use crate::baselines::{LowRank, Ridge, constant, utilisation_sum};
use crate::features::{FeatureSpec, IDENTITY, JobFeatures, job_features};
use crate::metrics::{Metrics, Scored};
use crate::model::{
    Batch, CONSERVATIVE_QUANTILE, Mlp, OUT_FEASIBLE_LOGIT, OUT_LOG_SPEED, OUT_LOG_SPEED_P10,
    OUTPUTS, Rng, TrainConfig, TrainDevice, TrainError, TrainOutcome, ensemble_forward, fit,
    forward,
};
use crate::rows::{Example, examples};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Split {
    Random,
    UnseenPairs,
    UnseenWorkloads,
}

impl Split {
    pub const ALL: [Split; 3] = [Split::Random, Split::UnseenPairs, Split::UnseenWorkloads];

    pub fn as_str(self) -> &'static str {
        match self {
            Split::Random => "random",
            Split::UnseenPairs => "unseen_pairs",
            Split::UnseenWorkloads => "unseen_workloads",
        }
    }
}

/// Number of folds of the random and unseen-pairs splits.
pub const FOLDS: usize = 5;

/// The predictors every report compares, in table order.
pub const PREDICTORS: [&str; 5] = ["mlp", "ridge", "low_rank", "utilisation_sum", "constant"];

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

    fn job(&self, e: &Example, id: &str) -> &JobFeatures {
        &self.jobs[e.dataset][id]
    }

    fn encode(&self, spec: &FeatureSpec, rows: &[usize]) -> Batch {
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

    use crate::model::to_cpu;
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

/// The MLP's prediction for one row from its network outputs `o` (`OUTPUTS` values).
pub fn mlp_scored(o: &[f32], speed: Option<f64>) -> Scored {
    Scored {
        speed,
        predicted: f64::from(o[OUT_LOG_SPEED]).exp(),
        conservative: Some(f64::from(o[OUT_LOG_SPEED_P10]).exp()),
        feasible: Some(o[OUT_FEASIBLE_LOGIT] > 0.0),
    }
}

/// The metrics-table groups a row counts in: its device and mode, and `all`.
pub fn metric_groups(e: &Example) -> [(String, String); 2] {
    [
        (e.gpu.clone(), e.mode.to_string()),
        ("all".to_string(), "all".to_string()),
    ]
}

/// The train and test rows of one fold.
#[derive(Debug, Clone)]
pub struct Fold {
    pub train: Vec<usize>,
    pub test: Vec<usize>,
}

/// The folds of `split` over the corpus' examples.
pub fn folds(split: Split, examples: &[Example], seed: u64) -> Vec<Fold> {
    let all: Vec<usize> = (0..examples.len()).collect();
    let from_groups = |group_of: &dyn Fn(usize) -> usize, groups: usize| -> Vec<Fold> {
        (0..groups)
            .map(|g| {
                let (test, train) = all.iter().partition(|&&i| group_of(i) == g);
                Fold { train, test }
            })
            .filter(|f: &Fold| !f.test.is_empty() && !f.train.is_empty())
            .collect()
    };
    let mut rng = Rng::new(seed);
    match split {
        Split::Random => {
            let mut order = all.clone();
            rng.shuffle(&mut order);
            let mut fold_of = vec![0; examples.len()];
            for (k, &i) in order.iter().enumerate() {
                fold_of[i] = k % FOLDS;
            }
            from_groups(&|i| fold_of[i], FOLDS)
        }
        Split::UnseenPairs => {
            let settings: BTreeSet<usize> = examples.iter().map(|e| e.setting).collect();
            let mut order: Vec<usize> = settings.into_iter().collect();
            rng.shuffle(&mut order);
            let fold_of: BTreeMap<usize, usize> = order
                .iter()
                .enumerate()
                .map(|(k, &s)| (s, k % FOLDS))
                .collect();
            from_groups(&|i| fold_of[&examples[i].setting], FOLDS)
        }
        Split::UnseenWorkloads => {
            let ids: BTreeSet<&str> = examples
                .iter()
                .flat_map(|e| [e.a.as_str(), e.b.as_str()])
                .collect();
            ids.into_iter()
                .map(|id| {
                    let (test, train) = all
                        .iter()
                        .partition(|&&i| examples[i].a == id || examples[i].b == id);
                    Fold { train, test }
                })
                .filter(|f| !f.test.is_empty() && !f.train.is_empty())
                .collect()
        }
    }
}

/// One line of the metrics table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricsRow {
    pub split: Split,
    pub predictor: String,
    /// A device, or `all`.
    pub gpu: String,
    /// A mode, or `all`.
    pub mode: String,
    pub metrics: Metrics,
}

/// One held-out MLP prediction, kept for the report's plots.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HeldOut {
    pub split: Split,
    pub gpu: String,
    pub a: String,
    pub b: String,
    pub speed: f64,
    pub predicted: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Evaluation {
    pub folds: BTreeMap<String, usize>,
    pub table: Vec<MetricsRow>,
    #[serde(skip)]
    pub held_out: Vec<HeldOut>,
}

/// Predictions of every predictor for the test rows of one fold.
fn score_fold(
    corpus: &Corpus,
    fold: &Fold,
    config: &TrainConfig,
) -> Result<FoldScores, TrainError> {
    let trained = corpus.train(&fold.train, config)?;
    let test_batch = corpus.encode(&trained.spec, &fold.test);
    let out = trained.forward(&test_batch.inputs);
    let train_rows: Vec<&Example> = fold.train.iter().map(|&i| &corpus.examples[i]).collect();
    let feasible_train: Vec<usize> = fold
        .train
        .iter()
        .copied()
        .filter(|&i| corpus.examples[i].speed.is_some())
        .collect();
    let ridge_batch = corpus.encode(&trained.spec, &feasible_train);
    let ridge_y: Vec<f64> = feasible_train
        .iter()
        .filter_map(|&i| corpus.examples[i].speed.map(f64::ln))
        .collect();
    let ridge = Ridge::fit(&ridge_batch.inputs, ridge_batch.width, &ridge_y, 1.0);
    let low_rank = LowRank::fit(&train_rows, config.seed);
    let mean = constant(&train_rows);

    let mut scored: BTreeMap<&'static str, Vec<Option<Scored>>> = BTreeMap::new();
    for (k, &i) in fold.test.iter().enumerate() {
        let e = &corpus.examples[i];
        let plain = |predicted: f64| {
            Some(Scored {
                speed: e.speed,
                predicted,
                conservative: None,
                feasible: None,
            })
        };
        let o = &out[k * OUTPUTS..(k + 1) * OUTPUTS];
        let row = &test_batch.inputs[k * test_batch.width..(k + 1) * test_batch.width];
        let entries = [
            ("mlp", Some(mlp_scored(o, e.speed))),
            ("ridge", plain(ridge.predict(row).exp())),
            ("low_rank", plain(low_rank.predict(e).exp())),
            (
                "utilisation_sum",
                utilisation_sum(corpus.job(e, &e.a), corpus.job(e, &e.b)).and_then(plain),
            ),
            ("constant", plain(mean)),
        ];
        for (name, s) in entries {
            scored.entry(name).or_default().push(s);
        }
    }
    Ok(scored)
}

type FoldScores = BTreeMap<&'static str, Vec<Option<Scored>>>;

/// Scores every fold, on as many threads as the machine has cores. Results come back in fold
/// order, so the outcome does not depend on scheduling; `progress` hears the count done.
fn run_folds(
    corpus: &Corpus,
    folds: &[Fold],
    config: &TrainConfig,
    mut progress: impl FnMut(usize),
) -> Vec<Result<FoldScores, TrainError>> {
    let workers = std::thread::available_parallelism()
        .map_or(1, std::num::NonZeroUsize::get)
        .min(folds.len().max(1));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let (send, receive) = std::sync::mpsc::channel();
    let mut results: Vec<Option<Result<FoldScores, TrainError>>> = Vec::new();
    results.resize_with(folds.len(), || None);
    std::thread::scope(|scope| {
        for _ in 0..workers {
            let send = send.clone();
            let next = &next;
            scope.spawn(move || {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(fold) = folds.get(i) else { break };
                    if send.send((i, score_fold(corpus, fold, config))).is_err() {
                        break;
                    }
                }
            });
        }
        drop(send);
        for (done, (i, result)) in receive.iter().enumerate() {
            results[i] = Some(result);
            progress(done + 1);
        }
    });
    results
        .into_iter()
        .map(|r| r.unwrap_or(Err(TrainError::Empty)))
        .collect()
}

/// Runs every split's folds; `progress` hears about each finished fold.
pub fn evaluate(
    corpus: &Corpus,
    config: &TrainConfig,
    mut progress: impl FnMut(Split, usize, usize),
) -> Result<Evaluation, TrainError> {
    let mut table = Vec::new();
    let mut held_out = Vec::new();
    let mut fold_counts = BTreeMap::new();
    for split in Split::ALL {
        let folds = folds(split, &corpus.examples, config.seed);
        fold_counts.insert(split.as_str().to_string(), folds.len());
        // predictor -> (gpu, mode) -> scored rows
        let mut groups: BTreeMap<&str, BTreeMap<(String, String), Vec<Scored>>> = BTreeMap::new();
        let results = run_folds(corpus, &folds, config, |done| {
            progress(split, done, folds.len())
        });
        for (fold, scored) in folds.iter().zip(results) {
            let scored = scored?;
            for (name, rows) in scored {
                for (k, s) in rows.into_iter().enumerate() {
                    let Some(s) = s else { continue };
                    let e = &corpus.examples[fold.test[k]];
                    if name == "mlp"
                        && let Some(speed) = e.speed
                    {
                        held_out.push(HeldOut {
                            split,
                            gpu: e.gpu.clone(),
                            a: e.a.clone(),
                            b: e.b.clone(),
                            speed,
                            predicted: s.predicted,
                        });
                    }
                    let g = groups.entry(name).or_default();
                    for key in metric_groups(e) {
                        g.entry(key).or_default().push(s);
                    }
                }
            }
        }
        for predictor in PREDICTORS {
            let Some(g) = groups.get(predictor) else {
                continue;
            };
            for ((gpu, mode), rows) in g {
                table.push(MetricsRow {
                    split,
                    predictor: predictor.to_string(),
                    gpu: gpu.clone(),
                    mode: mode.clone(),
                    metrics: Metrics::of(rows),
                });
            }
        }
    }
    Ok(Evaluation {
        folds: fold_counts,
        table,
        held_out,
    })
}
