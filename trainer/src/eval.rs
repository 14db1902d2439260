//! Honest evaluation: k-fold over three splits (four with `--group-by`), the MLP and every
//! baseline on the same folds.
//!
//! - `random`: directed rows in random folds (a pair's mirror may be in training).
//! - `unseen_pairs`: folds of unordered pairs of workloads; a pair leaves with its mirror and
//!   with its measurements on every other device, mode and share.
//! - `unseen_workloads`: leave one workload out; test rows touch it, training rows do not (a
//!   new job that was only profiled alone).
//! - `probed_workloads`: folds of families (of workloads without a family feature), every
//!   workload of them held out but for 1 to `PROBED_MAX` of its pair settings (with partners
//!   outside the fold); test rows are their other settings (a new job after its probes, `duet
//!   profile --onto DIR --probes K`, its family new but for those probes).
//! - `unseen_<feature>` (`--group-by`): leave one value of a categorical workload feature out,
//!   say one `model`; test rows touch a workload with that value, training rows do not (a new
//!   kind of job, not a new size of a known one).

use std::collections::{BTreeMap, BTreeSet};

use duet_core::api::Calibration as Kind;
use duet_model::accuracy::{Metrics, Scored};
pub use duet_model::accuracy::{MetricsRow, Split};
use duet_model::calibration::{CROSS_CONFORMAL, Calibration};
use duet_model::encoding::PROBED_MAX;
use duet_model::network::{
    OUT_FEASIBLE_LOGIT, OUT_LOG_SPEED, OUT_LOG_SPEED_P10, OUTPUTS, Rng, TrainConfig,
    calibrated_ln_p10,
};
use duet_model::prior::{Basis, Candidate, Weights};
use serde::{Deserialize, Serialize};

use crate::baselines::{LowRank, Ridge, constant, utilisation_sum};
use crate::conformal::Scores;
use crate::corpus::{Corpus, Measured};
use crate::rows::Example;
use crate::training::TrainError;

/// Number of folds of the random and unseen-pairs splits.
pub const FOLDS: usize = 5;

/// The predictors every report compares, in table order.
pub const PREDICTORS: [&str; 5] = ["mlp", "ridge", "low_rank", "utilisation_sum", "constant"];

/// The MLP's prediction for one row from its network outputs `o` (`OUTPUTS` values) and the
/// conformal shift of the row's kind: the p10 calibrated as served (`calibrated_ln_p10`).
pub fn mlp_scored(o: &[f32], speed: Option<f64>, shift: f64) -> Scored {
    let ln_speed = f64::from(o[OUT_LOG_SPEED]);
    Scored {
        speed,
        predicted: ln_speed.exp(),
        conservative: Some(
            calibrated_ln_p10(ln_speed, f64::from(o[OUT_LOG_SPEED_P10]), shift).exp(),
        ),
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

/// How each of `splits` forms its folds, for `model.json`.
pub fn split_definitions(splits: &[Split]) -> BTreeMap<String, String> {
    let group = splits.iter().filter_map(|s| match s {
        Split::UnseenGroup(g) => Some((
            *s,
            format!(
                "leave one value of the workload feature `{}` out (by value, on every device): \
                 test rows touch a workload with it, training rows do not, and the model has no \
                 identity slot for any of those workloads",
                g.feature()
            ),
        )),
        _ => None,
    });
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
        (
            Split::ProbedWorkloads,
            format!(
                "{FOLDS} folds of model families (of workloads where there is no family \
                 feature): each workload of a fold leaves training but for 1 to {PROBED_MAX} of \
                 its pair settings (drawn, with partners outside the fold), and its other \
                 settings are the test rows"
            ),
        ),
    ]
    .into_iter()
    .filter(|(s, _)| splits.contains(s))
    .chain(group)
    .map(|(s, d)| (s.as_str().to_string(), d))
    .collect()
}

/// The evaluation's splits: the fixed ones, `unseen_<family>` where the corpus has a family
/// feature (its folds calibrate the new-family p90), and `unseen_<feature>` where `group_by`
/// names another.
pub fn splits(group_by: Option<&str>, family: Option<&str>) -> Vec<Split> {
    let mut out = Split::ALL.to_vec();
    for feature in [family, group_by].into_iter().flatten() {
        let split = Split::unseen(feature);
        if !out.contains(&split) {
            out.push(split);
        }
    }
    out
}

/// The family feature of `corpus` that `--family` names, or by default `model` where every
/// dataset declares it as a categorical feature with at least two values among the workloads of
/// its pairs (`None` where it does not: no new-family class then). `none` turns it off.
pub fn family_feature(corpus: &Corpus, named: Option<&str>) -> Result<Option<String>, String> {
    match named {
        Some("none") => Ok(None),
        Some(feature) => {
            check_split_feature(corpus, "--family", feature).map(|()| Some(feature.to_string()))
        }
        None => Ok(check_split_feature(corpus, "--family", DEFAULT_FAMILY)
            .ok()
            .map(|()| DEFAULT_FAMILY.to_string())),
    }
}

/// The family feature where `--family` names none and the datasets declare it.
pub const DEFAULT_FAMILY: &str = "model";

/// Why `--group-by feature` cannot split `corpus`, if it cannot: the feature must be a
/// declared categorical workload feature of every dataset with at least two values among the
/// workloads of its pairs.
pub fn check_group_by(corpus: &Corpus, feature: &str) -> Result<(), String> {
    check_split_feature(corpus, "--group-by", feature)
}

/// Why `flag feature` (`--group-by`, `--family`) cannot leave one value of `feature` out of
/// `corpus` at a time, if it cannot; every message names the flag.
fn check_split_feature(corpus: &Corpus, flag: &str, feature: &str) -> Result<(), String> {
    if Split::ALL
        .iter()
        .any(|s| s.as_str() == format!("unseen_{feature}"))
    {
        return Err(format!(
            "{flag} {feature}: `unseen_{feature}` is the name of a fixed split; name a \
             workload feature such as `model`"
        ));
    }
    for d in &corpus.datasets {
        let Some(column) = d.meta.workload_features.iter().find(|f| f.name == feature) else {
            let categorical: Vec<&str> = d
                .meta
                .workload_features
                .iter()
                .filter(|f| f.kind == duet_core::dataset::FeatureKind::Categorical)
                .map(|f| f.name.as_str())
                .collect();
            return Err(format!(
                "{flag} {feature}: dataset `{}` declares no workload feature `{feature}`; \
                 its categorical features: {}",
                d.meta.name,
                if categorical.is_empty() {
                    "none".to_string()
                } else {
                    categorical.join(", ")
                }
            ));
        };
        if column.kind != duet_core::dataset::FeatureKind::Categorical {
            return Err(format!(
                "{flag} {feature}: `{feature}` is a {} feature in dataset `{}`; leaving \
                 one value out needs a categorical one (such as `model`)",
                column.kind.as_str(),
                d.meta.name
            ));
        }
    }
    let values = corpus.values_of(feature);
    let present: BTreeSet<&str> = corpus
        .examples
        .iter()
        .flat_map(|e| [&e.a, &e.b].map(|id| values[e.dataset].get(id.as_str())))
        .flatten()
        .map(String::as_str)
        .collect();
    if present.len() < 2 {
        return Err(format!(
            "{flag} {feature}: the workloads in pairs have {} value{} of `{feature}` ({}); \
             leaving one out needs at least 2",
            present.len(),
            if present.len() == 1 { "" } else { "s" },
            present.into_iter().collect::<Vec<_>>().join(", ")
        ));
    }
    Ok(())
}

/// The train and test rows of one fold.
#[derive(Debug, Clone)]
pub struct Fold {
    pub train: Vec<usize>,
    pub test: Vec<usize>,
    /// The workload a leave-one-workload-out fold holds out (none for the other splits).
    pub workload: Option<String>,
    /// The feature value an `unseen_<feature>` fold holds out (none for the other splits).
    pub value: Option<String>,
    /// The workloads a `probed_workloads` fold holds out but for their probes (empty for the
    /// other splits).
    pub probed: BTreeSet<String>,
}

/// The folds of `split` over the corpus' examples.
pub fn folds(split: Split, corpus: &Corpus, seed: u64) -> Vec<Fold> {
    let examples = &corpus.examples[..];
    let all: Vec<usize> = (0..examples.len()).collect();
    let from_groups = |group_of: &dyn Fn(usize) -> usize, groups: usize| -> Vec<Fold> {
        (0..groups)
            .map(|g| {
                let (test, train) = all.iter().partition(|&&i| group_of(i) == g);
                Fold {
                    train,
                    test,
                    workload: None,
                    value: None,
                    probed: BTreeSet::new(),
                }
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
                    Fold {
                        train,
                        test,
                        workload: Some(id.to_string()),
                        value: None,
                        probed: BTreeSet::new(),
                    }
                })
                .filter(|f| !f.test.is_empty() && !f.train.is_empty())
                .collect()
        }
        Split::ProbedWorkloads => probed_folds(corpus, &mut rng),
        Split::UnseenGroup(group) => {
            let values = corpus.values_of(group.feature());
            let value = |i: usize, id: &str| values[examples[i].dataset].get(id);
            let present: BTreeSet<&String> = all
                .iter()
                .flat_map(|&i| [value(i, &examples[i].a), value(i, &examples[i].b)])
                .flatten()
                .collect();
            present
                .into_iter()
                .map(|v| {
                    let (test, train) = all.iter().partition(|&&i| {
                        value(i, &examples[i].a) == Some(v) || value(i, &examples[i].b) == Some(v)
                    });
                    Fold {
                        train,
                        test,
                        workload: None,
                        value: Some(v.clone()),
                        probed: BTreeSet::new(),
                    }
                })
                .filter(|f| !f.test.is_empty() && !f.train.is_empty())
                .collect()
        }
    }
}

/// The folds of `probed_workloads`: the workloads' families (the corpus' family feature; each
/// workload its own where there is none, or it declares none) in [`FOLDS`] random folds; in
/// each, every workload of the fold's families keeps 1 to [`PROBED_MAX`] of its pair settings
/// with a partner outside the fold in training (the count and the settings drawn), and its
/// other rows are the test: a new job probed after its whole family was new, the hardest state
/// the `probed` class covers (a probed size of a well-measured family is easier).
fn probed_folds(corpus: &Corpus, rng: &mut Rng) -> Vec<Fold> {
    let examples = &corpus.examples[..];
    let all: Vec<usize> = (0..examples.len()).collect();
    corpus
        .probed_shares(&all, rng, FOLDS, 0)
        .into_iter()
        .filter_map(|(held, probes)| {
            let (mut train, mut test) = (Vec::new(), Vec::new());
            for (i, e) in examples.iter().enumerate() {
                let touches = held.contains(&e.a) || held.contains(&e.b);
                if !touches || probes.contains(&e.setting) {
                    train.push(i);
                } else {
                    test.push(i);
                }
            }
            (!test.is_empty() && !train.is_empty()).then_some(Fold {
                train,
                test,
                workload: None,
                value: None,
                probed: held,
            })
        })
        .collect()
}

/// One held-out MLP prediction, kept for the report's plots and for reading coverage by what
/// a fold held out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HeldOut {
    pub split: Split,
    pub gpu: String,
    pub a: String,
    pub b: String,
    pub speed: f64,
    pub predicted: f64,
    /// The predicted p10 speed (`1 / p90 slowdown`), calibrated as the report's coverage is
    /// and as served (never above `predicted`); absent in files written before it.
    #[serde(default)]
    pub predicted_p10: Option<f64>,
    /// What the row's fold held out: the workload of an unseen-workloads fold, the feature
    /// value of an `unseen_<feature>` fold (a family for `unseen_model`); absent for the other
    /// splits and in files written before it. A pair of two held-out units' jobs is in both
    /// folds, once each.
    #[serde(default)]
    pub held: Option<String>,
    /// The ln shift the row's class took in its fold (the other folds' scores), so that its
    /// raw p10, the one its conformity score is of, is `ln predicted_p10 + shift` where
    /// `predicted_p10` is below `predicted` (at it, the p10 may have been lowered to the point);
    /// absent in files written before it.
    #[serde(default)]
    pub shift: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Evaluation {
    pub folds: BTreeMap<String, usize>,
    pub table: Vec<MetricsRow>,
    #[serde(skip)]
    pub held_out: Vec<HeldOut>,
    /// The MLP's held-out conformity scores, for the shipped model's calibration.
    #[serde(skip)]
    pub out_of_fold: OutOfFold,
    /// The leave-one-family-out folds' rows with a job of the held-out family: the network's
    /// and the fold's effects prior's ln speed, for the shipped model's weights
    /// (`duet_model::prior`).
    #[serde(skip)]
    pub family_candidates: Vec<Candidate>,
    /// Each held-out family and the weights its fold's rows were scored with (chosen on the
    /// other families' rows).
    #[serde(skip)]
    pub family_weights: BTreeMap<String, Weights>,
    /// The probed-workloads folds' rows with a probed job: the network's and the fold's
    /// effects prior's ln speed, for the shipped model's probed weights.
    #[serde(skip)]
    pub probed_candidates: Vec<Candidate>,
}

/// The MLP's raw outputs for one test row of a fold, and the kind of pair its fold's model
/// sees it as (both identity slots set: known).
#[derive(Debug, Clone)]
struct MlpRow {
    out: [f32; OUTPUTS],
    kind: Kind,
    /// The fold's effects prior's ln speed, where a job of the row is of a new family or
    /// probed, and which of the two.
    prior: Option<(f64, Basis)>,
}

/// One fold's test rows: the baselines' predictions and the MLP's uncalibrated outputs (its p90
/// shift comes from the other folds' scores, `OutOfFold`).
#[derive(Debug, Clone)]
struct FoldScores {
    baselines: BTreeMap<&'static str, Vec<Option<Scored>>>,
    mlp: Vec<MlpRow>,
}

/// Predictions of every predictor for the test rows of one fold.
/// `counts`: every workload's measured settings in the whole corpus, what the shipped model
/// records (`Corpus::served_kind`).
fn score_fold(
    corpus: &Corpus,
    fold: &Fold,
    config: &TrainConfig,
    counts: &Measured,
) -> Result<FoldScores, TrainError> {
    let trained = corpus.fit(&fold.train, config, 1)?;
    let prior = corpus.family_prior(&fold.train, &trained.spec);
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

    let mut baselines: BTreeMap<&'static str, Vec<Option<Scored>>> = BTreeMap::new();
    let mut mlp = Vec::with_capacity(fold.test.len());
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
        let row = &test_batch.inputs[k * test_batch.width..(k + 1) * test_batch.width];
        let mut o = [0.0; OUTPUTS];
        o.copy_from_slice(&out[k * OUTPUTS..(k + 1) * OUTPUTS]);
        mlp.push(MlpRow {
            out: o,
            kind: Corpus::served_kind(
                trained.spec.calibration_kind(row),
                e,
                counts,
                fold.probed.contains(&e.a) || fold.probed.contains(&e.b),
            ),
            prior: prior
                .lookup(&trained.spec, row)
                .map(|(ln, basis, _)| (ln, basis)),
        });
        let entries = [
            ("ridge", plain(ridge.predict(row).exp())),
            ("low_rank", plain(low_rank.predict(e).exp())),
            (
                "utilisation_sum",
                utilisation_sum(corpus.job(e, &e.a), corpus.job(e, &e.b)).and_then(plain),
            ),
            ("constant", plain(mean)),
        ];
        for (name, s) in entries {
            baselines.entry(name).or_default().push(s);
        }
    }
    Ok(FoldScores { baselines, mlp })
}

/// One held-out conformity score: a feasible test row of an unseen-pairs or unseen-workloads
/// fold, scored by that fold's refit.
#[derive(Debug, Clone, PartialEq)]
struct HeldScore {
    row: usize,
    kind: Kind,
    score: f64,
    /// The held-out unordered pair or workload it stands for.
    group: String,
}

/// The evaluation's out-of-fold conformity scores: `known` from the unseen-pairs folds (a pair
/// of training workloads never measured together), `probed` from the probed-workloads folds (and
/// unseen-pairs rows of a workload measured in few settings), `new` from the leave-one-workload-out folds
/// (a pair with a workload the model has no identity for), `new_family` from the
/// leave-one-family-out folds (a pair with a workload of a family the model never saw). Each
/// row is counted in the kind its fold's model sees it as (a row out of range in none).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OutOfFold {
    scores: Vec<HeldScore>,
}

impl OutOfFold {
    fn add(&mut self, corpus: &Corpus, split: Split, fold: &Fold, mlp: &[MlpRow]) {
        let family_fold = match split {
            Split::UnseenGroup(g) if corpus.family.as_deref() == Some(g.feature()) => {
                fold.value.as_ref()
            }
            _ => None,
        };
        for (&i, r) in fold.test.iter().zip(mlp) {
            let e = &corpus.examples[i];
            let Some(speed) = e.speed else { continue };
            let group = match (split, r.kind, &fold.workload, family_fold) {
                (Split::UnseenPairs, Kind::Known | Kind::Probed, _, _) => {
                    format!("pair {}", e.pair)
                }
                (Split::ProbedWorkloads, Kind::Probed, _, _) => [&e.a, &e.b]
                    .into_iter()
                    .find(|id| fold.probed.contains(id.as_str()))
                    .map_or_else(|| format!("pair {}", e.pair), |id| format!("probed {id}")),
                (Split::UnseenWorkloads, Kind::New, Some(w), _) => w.clone(),
                (_, Kind::NewFamily, _, Some(family)) => format!("family {family}"),
                _ => continue,
            };
            self.scores.push(HeldScore {
                row: i,
                kind: r.kind,
                score: f64::from(r.out[OUT_LOG_SPEED_P10]) - speed.ln(),
                group,
            });
        }
    }

    /// The shifts of `scores`.
    fn calibration<'a>(
        corpus: &Corpus,
        scores: impl IntoIterator<Item = &'a HeldScore>,
    ) -> Calibration {
        let mut out = Scores::default();
        for s in scores {
            out.push(&corpus.examples[s.row].gpu, s.kind, s.score, &s.group);
        }
        out.calibration(CROSS_CONFORMAL)
    }

    /// The scores a fold's test rows are calibrated on: every other one, leaving out those that
    /// share the fold's held-out unit (its settings for `random`, its unordered pairs for
    /// `unseen_pairs`, its workload for `unseen_workloads`), so no test row calibrates itself.
    fn kept_for(&self, corpus: &Corpus, split: Split, fold: &Fold) -> Vec<&HeldScore> {
        let tests = fold.test.iter().map(|&i| &corpus.examples[i]);
        let keep: Box<dyn Fn(&Example) -> bool> = match split {
            Split::Random => {
                let settings: BTreeSet<usize> = tests.map(|e| e.setting).collect();
                Box::new(move |e| !settings.contains(&e.setting))
            }
            Split::UnseenPairs => {
                let pairs: BTreeSet<usize> = tests.map(|e| e.pair).collect();
                Box::new(move |e| !pairs.contains(&e.pair))
            }
            Split::UnseenWorkloads => {
                let held = fold.workload.clone().unwrap_or_default();
                Box::new(move |e| e.a != held && e.b != held)
            }
            Split::ProbedWorkloads => {
                let held = fold.probed.clone();
                Box::new(move |e| !held.contains(&e.a) && !held.contains(&e.b))
            }
            // Every score touching a workload with the held-out value stays out.
            Split::UnseenGroup(group) => {
                let values = corpus.values_of(group.feature());
                let held = fold.value.clone();
                Box::new(move |e| {
                    let value = |id: &str| values[e.dataset].get(id);
                    held.is_none() || (value(&e.a) != held.as_ref() && value(&e.b) != held.as_ref())
                })
            }
        };
        self.scores
            .iter()
            .filter(|s| keep(&corpus.examples[s.row]))
            .collect()
    }

    /// The shifts a fold's test rows are scored with (`kept_for`).
    fn calibration_for(&self, corpus: &Corpus, split: Split, fold: &Fold) -> Calibration {
        Self::calibration(corpus, self.kept_for(corpus, split, fold))
    }

    /// The shipped model's shifts: every score of every seed's evaluation.
    pub fn pooled(corpus: &Corpus, all: &[&OutOfFold]) -> Calibration {
        Self::calibration(corpus, all.iter().flat_map(|o| &o.scores))
    }
}

/// Scores every fold, on as many threads as the machine has cores. Results come back in fold
/// order, so the outcome does not depend on scheduling; `progress` hears the count done.
fn run_folds(
    corpus: &Corpus,
    folds: &[Fold],
    config: &TrainConfig,
    counts: &Measured,
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
                    if send
                        .send((i, score_fold(corpus, fold, config, counts)))
                        .is_err()
                    {
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

/// Runs every split's folds; `progress` hears about each finished fold. The MLP's p90 is
/// calibrated cross-conformally: each fold's test rows get the shifts of the other folds'
/// held-out scores (`OutOfFold::calibration_for`), exactly as the shipped model gets those of
/// all of them.
pub fn evaluate(
    corpus: &Corpus,
    config: &TrainConfig,
    progress: impl FnMut(Split, usize, usize),
) -> Result<Evaluation, TrainError> {
    evaluate_splits(corpus, config, &Split::ALL, progress)
}

/// [`evaluate`] on `splits` (for example with `unseen_<feature>`, [`splits`]). Only the
/// unseen-pairs, unseen-workloads, probed-workloads and (for the corpus' family feature)
/// unseen-family folds give out-of-fold scores, so another added split is calibrated like the others but changes neither
/// their figures nor the shipped calibration.
pub fn evaluate_splits(
    corpus: &Corpus,
    config: &TrainConfig,
    splits: &[Split],
    mut progress: impl FnMut(Split, usize, usize),
) -> Result<Evaluation, TrainError> {
    let mut runs = Vec::new();
    let mut fold_counts = BTreeMap::new();
    let mut out_of_fold = OutOfFold::default();
    let all: Vec<usize> = (0..corpus.examples.len()).collect();
    let counts = corpus.measured(&all);
    for &split in splits {
        let folds = folds(split, corpus, config.seed);
        fold_counts.insert(split.as_str().to_string(), folds.len());
        let results = run_folds(corpus, &folds, config, &counts, |done| {
            progress(split, done, folds.len())
        })
        .into_iter()
        .collect::<Result<Vec<_>, _>>()?;
        runs.push((split, folds, results));
    }
    let (family_candidates, family_weights) = priors::weigh_family_priors(corpus, &mut runs);
    let probed_candidates = priors::weigh_probed_priors(corpus, &mut runs);
    for (split, folds, results) in &runs {
        for (fold, scored) in folds.iter().zip(results) {
            out_of_fold.add(corpus, *split, fold, &scored.mlp);
        }
    }
    let mut table = Vec::new();
    let mut held_out = Vec::new();
    for (split, folds, results) in runs {
        // predictor -> (gpu, mode) -> scored rows
        let mut groups: BTreeMap<&str, BTreeMap<(String, String), Vec<Scored>>> = BTreeMap::new();
        for (fold, scored) in folds.iter().zip(results) {
            let calibration = out_of_fold.calibration_for(corpus, split, fold);
            for (k, r) in scored.mlp.iter().enumerate() {
                let e = &corpus.examples[fold.test[k]];
                let shift = calibration.shift(r.kind, Some(&e.gpu));
                let s = mlp_scored(&r.out, e.speed, shift);
                if let Some(speed) = e.speed {
                    held_out.push(HeldOut {
                        split,
                        gpu: e.gpu.clone(),
                        a: e.a.clone(),
                        b: e.b.clone(),
                        speed,
                        predicted: s.predicted,
                        predicted_p10: s.conservative,
                        held: fold.workload.clone().or_else(|| fold.value.clone()),
                        shift: Some(shift),
                    });
                }
                for key in metric_groups(e) {
                    groups
                        .entry("mlp")
                        .or_default()
                        .entry(key)
                        .or_default()
                        .push(s);
                }
            }
            for (name, rows) in scored.baselines {
                for (k, s) in rows.into_iter().enumerate() {
                    let Some(s) = s else { continue };
                    let g = groups.entry(name).or_default();
                    for key in metric_groups(&corpus.examples[fold.test[k]]) {
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
        out_of_fold,
        family_candidates,
        family_weights,
        probed_candidates,
    })
}

mod priors;
#[cfg(test)]
mod tests;
