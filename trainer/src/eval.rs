//! Honest evaluation: k-fold over three splits, the MLP and every baseline on the same folds.
//!
//! - `random`: directed rows in random folds (a pair's mirror may be in training).
//! - `unseen_pairs`: folds of unordered pairs of workloads; a pair leaves with its mirror and
//!   with its measurements on every other device, mode and share.
//! - `unseen_workloads`: leave one workload out; test rows touch it, training rows do not (a
//!   new job that was only profiled alone).

use std::collections::{BTreeMap, BTreeSet};

use duet_model::accuracy::{Metrics, Scored};
pub use duet_model::accuracy::{MetricsRow, Split};
use duet_model::network::{
    OUT_FEASIBLE_LOGIT, OUT_LOG_SPEED, OUT_LOG_SPEED_P10, OUTPUTS, Rng, TrainConfig,
};
use serde::{Deserialize, Serialize};

use crate::baselines::{LowRank, Ridge, constant, utilisation_sum};
use crate::corpus::Corpus;
use crate::rows::Example;
use crate::training::TrainError;

/// Number of folds of the random and unseen-pairs splits.
pub const FOLDS: usize = 5;

/// The predictors every report compares, in table order.
pub const PREDICTORS: [&str; 5] = ["mlp", "ridge", "low_rank", "utilisation_sum", "constant"];

/// The MLP's prediction for one row from its network outputs `o` (`OUTPUTS` values) and the
/// conformal shift of the row's kind.
pub fn mlp_scored(o: &[f32], speed: Option<f64>, shift: f64) -> Scored {
    Scored {
        speed,
        predicted: f64::from(o[OUT_LOG_SPEED]).exp(),
        conservative: Some((f64::from(o[OUT_LOG_SPEED_P10]) - shift).exp()),
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

/// How each split's folds are formed, for `model.json`.
pub fn split_definitions() -> BTreeMap<String, String> {
    [
        (
            Split::Random,
            format!("{FOLDS} folds of directed rows drawn at random (a pair's mirror may train)"),
        ),
        (
            Split::UnseenPairs,
            format!(
                "{FOLDS} folds of unordered workload pairs: a pair's rows leave together in both \
                 orders and on every device, mode and share"
            ),
        ),
        (
            Split::UnseenWorkloads,
            "leave one workload out (by id, on every device): test rows touch it, training rows \
             do not, and the model has no identity slot for it"
                .to_string(),
        ),
    ]
    .into_iter()
    .map(|(s, d)| (s.as_str().to_string(), d))
    .collect()
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
            let pairs: BTreeSet<usize> = examples.iter().map(|e| e.pair).collect();
            let mut order: Vec<usize> = pairs.into_iter().collect();
            rng.shuffle(&mut order);
            let fold_of: BTreeMap<usize, usize> = order
                .iter()
                .enumerate()
                .map(|(k, &s)| (s, k % FOLDS))
                .collect();
            from_groups(&|i| fold_of[&examples[i].pair], FOLDS)
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
            ("mlp", Some(mlp_scored(o, e.speed, trained.shift(row)))),
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
