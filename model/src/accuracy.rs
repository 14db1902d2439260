//! Accuracy measures of predicted speeds against measured ones, and the metrics table of
//! `model.json` (one row per split, predictor, device and mode).

use serde::{Deserialize, Serialize};

/// One held-out prediction of one directed row.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scored {
    /// Measured speed (None: the pair is infeasible).
    pub speed: Option<f64>,
    /// Predicted speed.
    pub predicted: f64,
    /// Predicted conservative (p10) speed, where the predictor has one.
    pub conservative: Option<f64>,
    /// Predicted feasibility, where the predictor has one.
    pub feasible: Option<bool>,
}

/// The metrics of one predictor on one group of held-out rows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Metrics {
    /// Feasible rows scored.
    pub rows: usize,
    #[serde(with = "undefined_as_null")]
    pub mape_speed: f64,
    #[serde(with = "undefined_as_null")]
    pub mape_slowdown: f64,
    #[serde(with = "undefined_as_null")]
    pub mae_speed: f64,
    #[serde(with = "undefined_as_null")]
    pub spearman: f64,
    /// Of rows predicted to keep speed >= 0.8, the share that did.
    #[serde(with = "undefined_as_null")]
    pub precision_at_08: f64,
    /// Of rows that kept speed >= 0.8, the share predicted to.
    #[serde(with = "undefined_as_null")]
    pub recall_at_08: f64,
    /// Share of all rows (feasible or not) whose feasibility was predicted right.
    pub feasibility_accuracy: Option<f64>,
    /// Share of feasible rows whose measured slowdown is at or below the predicted p90 slowdown.
    pub p90_coverage: Option<f64>,
    /// Mean over feasible rows of the predicted p90 slowdown over the predicted median slowdown:
    /// how much the p90 costs in width (1 = none). Absent in older files.
    #[serde(default)]
    pub p90_width: Option<f64>,
}

/// An undefined metric (NaN: no rows, or a constant side) is `null` in JSON and NaN again when
/// read back.
mod undefined_as_null {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(value: &f64, s: S) -> Result<S::Ok, S::Error> {
        if value.is_finite() {
            s.serialize_f64(*value)
        } else {
            s.serialize_none()
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
    }
}

/// Speed threshold of "this pair is worth co-locating".
pub const GOOD_SPEED: f64 = 0.8;

#[allow(clippy::cast_precision_loss)]
fn mean(xs: impl Iterator<Item = f64>) -> f64 {
    let (sum, n) = xs.fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
    if n == 0 { f64::NAN } else { sum / n as f64 }
}

/// Average ranks (ties share their mean rank).
fn ranks(xs: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..xs.len()).collect();
    order.sort_by(|&i, &j| xs[i].total_cmp(&xs[j]));
    let mut out = vec![0.0; xs.len()];
    let mut i = 0;
    while i < order.len() {
        let mut j = i;
        while j + 1 < order.len() && xs[order[j + 1]] == xs[order[i]] {
            j += 1;
        }
        #[allow(clippy::cast_precision_loss)]
        let rank = (i + j) as f64 / 2.0;
        for &k in &order[i..=j] {
            out[k] = rank;
        }
        i = j + 1;
    }
    out
}

/// Spearman's rank correlation; NaN when either side is constant.
pub fn spearman(xs: &[f64], ys: &[f64]) -> f64 {
    let (rx, ry) = (ranks(xs), ranks(ys));
    let (mx, my) = (mean(rx.iter().copied()), mean(ry.iter().copied()));
    let cov: f64 = rx.iter().zip(&ry).map(|(a, b)| (a - mx) * (b - my)).sum();
    let vx: f64 = rx.iter().map(|a| (a - mx).powi(2)).sum();
    let vy: f64 = ry.iter().map(|b| (b - my).powi(2)).sum();
    cov / (vx * vy).sqrt()
}

impl Metrics {
    pub fn of(rows: &[Scored]) -> Metrics {
        let feasible: Vec<(f64, &Scored)> = rows
            .iter()
            .filter_map(|r| r.speed.map(|s| (s, r)))
            .collect();
        let truth: Vec<f64> = feasible.iter().map(|(s, _)| *s).collect();
        let pred: Vec<f64> = feasible.iter().map(|(_, r)| r.predicted).collect();
        let pairs = || truth.iter().zip(&pred);
        let predicted_good = pairs().filter(|(_, p)| **p >= GOOD_SPEED).count();
        let actually_good = pairs().filter(|(t, _)| **t >= GOOD_SPEED).count();
        let both = pairs()
            .filter(|(t, p)| **t >= GOOD_SPEED && **p >= GOOD_SPEED)
            .count();
        #[allow(clippy::cast_precision_loss)]
        let share = |n: usize, d: usize| {
            if d == 0 {
                f64::NAN
            } else {
                n as f64 / d as f64
            }
        };
        let with_feasibility: Vec<(bool, bool)> = rows
            .iter()
            .filter_map(|r| r.feasible.map(|f| (f, r.speed.is_some())))
            .collect();
        let widths: Vec<f64> = feasible
            .iter()
            .filter_map(|(_, r)| r.conservative.map(|c| r.predicted / c))
            .collect();
        let covered: Vec<bool> = feasible
            .iter()
            .filter_map(|(s, r)| r.conservative.map(|c| *s >= c))
            .collect();
        Metrics {
            rows: truth.len(),
            mape_speed: mean(pairs().map(|(t, p)| (p - t).abs() / t)),
            mape_slowdown: mean(pairs().map(|(t, p)| (1.0 / p - 1.0 / t).abs() * t)),
            mae_speed: mean(pairs().map(|(t, p)| (p - t).abs())),
            spearman: spearman(&truth, &pred),
            precision_at_08: share(both, predicted_good),
            recall_at_08: share(both, actually_good),
            feasibility_accuracy: (!with_feasibility.is_empty()).then(|| {
                share(
                    with_feasibility.iter().filter(|(p, t)| p == t).count(),
                    with_feasibility.len(),
                )
            }),
            p90_coverage: (!covered.is_empty())
                .then(|| share(covered.iter().filter(|c| **c).count(), covered.len())),
            p90_width: (!widths.is_empty()).then(|| mean(widths.iter().copied())),
        }
    }

    /// Every metric of `runs` (one per seed, same rows) combined by `f` (mean, standard
    /// deviation); an optional metric present in some runs only combines the runs that have it.
    pub fn combine(runs: &[&Metrics], f: fn(&[f64]) -> f64) -> Metrics {
        let all = |g: fn(&Metrics) -> f64| f(&runs.iter().map(|m| g(m)).collect::<Vec<_>>());
        let some = |g: fn(&Metrics) -> Option<f64>| {
            let xs: Vec<f64> = runs.iter().filter_map(|m| g(m)).collect();
            (!xs.is_empty()).then(|| f(&xs))
        };
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        Metrics {
            rows: runs.first().map_or(0, |m| m.rows),
            mape_speed: all(|m| m.mape_speed),
            mape_slowdown: all(|m| m.mape_slowdown),
            mae_speed: all(|m| m.mae_speed),
            spearman: all(|m| m.spearman),
            precision_at_08: all(|m| m.precision_at_08),
            recall_at_08: all(|m| m.recall_at_08),
            feasibility_accuracy: some(|m| m.feasibility_accuracy),
            p90_coverage: some(|m| m.p90_coverage),
            p90_width: some(|m| m.p90_width),
        }
    }
}

/// Mean of `xs` (NaN when empty or any is NaN).
pub fn mean_of(xs: &[f64]) -> f64 {
    mean(xs.iter().copied())
}

/// Sample standard deviation of `xs` (n - 1; 0 for a single value, NaN when empty).
pub fn sd_of(xs: &[f64]) -> f64 {
    match xs.len() {
        0 => f64::NAN,
        1 => 0.0,
        n => {
            let m = mean_of(xs);
            #[allow(clippy::cast_precision_loss)]
            let var = xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1) as f64;
            var.sqrt()
        }
    }
}

/// The metrics tables of several seeds (same rows in the same order) as their mean and their
/// standard deviation; `None` when the tables do not list the same rows.
pub fn mean_and_sd(tables: &[Vec<MetricsRow>]) -> Option<(Vec<MetricsRow>, Vec<MetricsRow>)> {
    let first = tables.first()?;
    let key = |r: &MetricsRow| (r.split, r.predictor.clone(), r.gpu.clone(), r.mode.clone());
    if tables
        .iter()
        .any(|t| t.len() != first.len() || t.iter().zip(first).any(|(a, b)| key(a) != key(b)))
    {
        return None;
    }
    let combined = |f: fn(&[f64]) -> f64| -> Vec<MetricsRow> {
        first
            .iter()
            .enumerate()
            .map(|(k, row)| MetricsRow {
                metrics: Metrics::combine(
                    &tables.iter().map(|t| &t[k].metrics).collect::<Vec<_>>(),
                    f,
                ),
                ..row.clone()
            })
            .collect()
    };
    Some((combined(mean_of), combined(sd_of)))
}

/// The evaluation splits `model.json`'s metrics table reports. Written as its name
/// ([`Split::as_str`]): `random`, `unseen_pairs`, `unseen_workloads`, `probed_workloads`, or
/// `unseen_<feature>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Split {
    Random,
    UnseenPairs,
    UnseenWorkloads,
    /// Folds of model families (of workloads without a family feature), every workload of
    /// them held out but for a few of its pair settings (a new job after its probes):
    /// `probed_workloads`.
    ProbedWorkloads,
    /// Leave one value of a categorical workload feature out (`duet train --group-by`): every
    /// workload with that value is held out together.
    UnseenGroup(Group),
}

/// The categorical feature of a [`Split::UnseenGroup`], with the split's name. The names are
/// interned (each distinct feature once per process, a few bytes), so that `Split` stays a
/// plain copyable value like the fixed splits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Group {
    feature: &'static str,
    split: &'static str,
}

impl Group {
    /// The feature whose values are held out, for example `model`.
    pub fn feature(self) -> &'static str {
        self.feature
    }
}

impl Split {
    /// The splits every evaluation runs, in report order.
    pub const ALL: [Split; 4] = [
        Split::Random,
        Split::UnseenPairs,
        Split::UnseenWorkloads,
        Split::ProbedWorkloads,
    ];

    /// The leave-one-value-out split of `feature`: `unseen_<feature>`.
    pub fn unseen(feature: &str) -> Split {
        static NAMES: std::sync::Mutex<Vec<Group>> = std::sync::Mutex::new(Vec::new());
        let mut names = NAMES
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(g) = names.iter().find(|g| g.feature == feature) {
            return Split::UnseenGroup(*g);
        }
        let group = Group {
            feature: Box::leak(feature.to_string().into_boxed_str()),
            split: Box::leak(format!("unseen_{feature}").into_boxed_str()),
        };
        names.push(group);
        Split::UnseenGroup(group)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Split::Random => "random",
            Split::UnseenPairs => "unseen_pairs",
            Split::UnseenWorkloads => "unseen_workloads",
            Split::ProbedWorkloads => "probed_workloads",
            Split::UnseenGroup(g) => g.split,
        }
    }

    /// The split a name stands for (`as_str` backwards); `None` for any other name.
    pub fn parse(name: &str) -> Option<Split> {
        if let Some(s) = Split::ALL.into_iter().find(|s| s.as_str() == name) {
            return Some(s);
        }
        name.strip_prefix("unseen_")
            .filter(|f| !f.is_empty())
            .map(Split::unseen)
    }
}

impl Serialize for Split {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Split {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Split, D::Error> {
        let name = String::deserialize(deserializer)?;
        Split::parse(&name).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "unknown split `{name}`, expected random, unseen_pairs, unseen_workloads, \
                 probed_workloads or unseen_<feature>"
            ))
        })
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

/// How much worse than the constant predictor (the training data's mean speed) the network
/// may be on the `random` split before its fit is called broken. Where held-out rows resemble
/// the training rows, a network that learned anything is below the mean's MAPE; twice it (or
/// an undefined MAPE) is what a diverged or collapsed training leaves (100% against 16% for a
/// learning rate of 1e6), not noise.
pub const BROKEN_FIT_RATIO: f64 = 2.0;

/// Why the metrics table says the network did not learn: on the `random` split over every
/// device and mode, a MAPE of speed that is undefined or above [`BROKEN_FIT_RATIO`] times the
/// constant predictor's. A device's or a mode's row alone is not judged: a slice of a few rows
/// (6 pairs of one mode) crossed the ratio on some seeds where the network ranked its speeds
/// best. Empty for a table without that row (`--final-only`).
pub fn fit_problems(metrics: &[MetricsRow]) -> Vec<String> {
    let mut problems = Vec::new();
    for mlp in metrics.iter().filter(|r| {
        r.split == Split::Random && r.predictor == "mlp" && r.gpu == "all" && r.mode == "all"
    }) {
        let Some(constant) = metrics.iter().find(|r| {
            (r.split, r.predictor.as_str(), &r.gpu, &r.mode)
                == (Split::Random, "constant", &mlp.gpu, &mlp.mode)
        }) else {
            continue;
        };
        let (got, mean) = (mlp.metrics.mape_speed, constant.metrics.mape_speed);
        if !mean.is_finite() || mlp.metrics.rows == 0 {
            continue;
        }
        if !got.is_finite() || got > BROKEN_FIT_RATIO * mean {
            let got = if got.is_finite() {
                format!("{:.1}%", 100.0 * got)
            } else {
                "undefined".to_string()
            };
            problems.push(format!(
                "split random (gpu {}, mode {}): the network's MAPE of speed is {got}, where \
                 predicting the mean speed scores {:.1}%: training did not fit (diverged? a \
                 learning rate too large?)",
                mlp.gpu,
                mlp.mode,
                100.0 * mean
            ));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(speed: f64, predicted: f64) -> Scored {
        Scored {
            speed: Some(speed),
            predicted,
            conservative: Some(predicted * 0.9),
            feasible: Some(true),
        }
    }

    #[test]
    fn metrics_of_known_predictions() {
        let m = Metrics::of(&[row(0.5, 0.6), row(1.0, 0.9), row(0.9, 0.7)]);
        assert_eq!(m.rows, 3);
        // |0.1|/0.5, |0.1|/1.0, |0.2|/0.9
        assert!((m.mape_speed - (0.2 + 0.1 + 0.2 / 0.9) / 3.0).abs() < 1e-12);
        assert!((m.mae_speed - 0.4 / 3.0).abs() < 1e-12);
        assert!((m.spearman - 1.0).abs() < 1e-12, "same order on both sides");
        // predicted good: 0.9 only (true 1.0) -> precision 1; actually good: 1.0, 0.9 -> recall 1/2
        assert_eq!((m.precision_at_08, m.recall_at_08), (1.0, 0.5));
        assert_eq!(m.feasibility_accuracy, Some(1.0));
        // coverage: 0.5 >= 0.54? no; 1.0 >= 0.81 yes; 0.9 >= 0.63 yes
        assert!((m.p90_coverage.expect("coverage") - 2.0 / 3.0).abs() < 1e-12);
        // every conservative speed is 0.9 of the predicted one
        assert!((m.p90_width.expect("width") - 1.0 / 0.9).abs() < 1e-12);
    }

    #[test]
    fn mean_and_sd_across_seeds() {
        let table = |speeds: [f64; 2]| {
            vec![MetricsRow {
                split: Split::Random,
                predictor: "mlp".into(),
                gpu: "all".into(),
                mode: "all".into(),
                metrics: Metrics::of(&[row(speeds[0], 0.5), row(speeds[1], 0.5)]),
            }]
        };
        // MAPE 0 (speeds = predicted) and MAPE 1 (speeds 0.25)
        let (mean, sd) = mean_and_sd(&[table([0.5, 0.5]), table([0.25, 0.25])]).expect("same rows");
        assert!((mean[0].metrics.mape_speed - 0.5).abs() < 1e-12);
        assert!((sd[0].metrics.mape_speed - 0.5f64.sqrt()).abs() < 1e-12);
        let mut other = table([0.5, 0.5]);
        other[0].gpu = "k80".into();
        assert!(mean_and_sd(&[table([0.5, 0.5]), other]).is_none());
    }

    #[test]
    fn a_network_far_worse_than_the_mean_is_a_broken_fit() {
        let line = |split: Split, predictor: &str, gpu: &str, mape: f64| {
            let mut metrics = Metrics::of(&[row(0.5, 0.5)]);
            metrics.mape_speed = mape;
            MetricsRow {
                split,
                predictor: predictor.into(),
                gpu: gpu.into(),
                mode: "all".into(),
                metrics,
            }
        };
        let table = |mlp: f64| {
            vec![
                line(Split::Random, "mlp", "all", mlp),
                line(Split::Random, "constant", "all", 0.16),
                // A device's slice alone is not judged, however far off.
                line(Split::Random, "mlp", "k80", 0.50),
                line(Split::Random, "constant", "k80", 0.16),
                // Other splits may be worse than the mean (a new family): not judged.
                line(Split::UnseenWorkloads, "mlp", "all", 0.9),
                line(Split::UnseenWorkloads, "constant", "all", 0.16),
            ]
        };
        assert!(fit_problems(&table(0.05)).is_empty());
        assert!(fit_problems(&table(0.30)).is_empty(), "worse, not broken");
        let broken = fit_problems(&table(1.0));
        assert_eq!(broken.len(), 1, "{broken:?}");
        assert!(
            broken[0].contains("(gpu all, mode all)")
                && broken[0].contains("100.0%")
                && broken[0].contains("16.0%"),
            "{broken:?}"
        );
        assert!(fit_problems(&table(f64::NAN))[0].contains("undefined"));
        assert!(fit_problems(&[]).is_empty());
    }

    #[test]
    fn splits_are_written_by_name_and_read_back() {
        for split in Split::ALL {
            let text = serde_json::to_string(&split).expect("serialise");
            assert_eq!(text, format!("\"{}\"", split.as_str()));
            assert_eq!(serde_json::from_str::<Split>(&text).expect("read"), split);
        }
        let by_model = Split::unseen("model");
        assert_eq!(by_model.as_str(), "unseen_model");
        assert_eq!(by_model, Split::unseen("model"), "one name per feature");
        assert_ne!(by_model, Split::unseen("family"));
        assert!(matches!(by_model, Split::UnseenGroup(g) if g.feature() == "model"));
        let back: Split = serde_json::from_str("\"unseen_model\"").expect("read");
        assert_eq!(back, by_model);
        assert!(serde_json::from_str::<Split>("\"held_out\"").is_err());
        assert!(serde_json::from_str::<Split>("\"unseen_\"").is_err());
    }

    #[test]
    fn undefined_metrics_survive_json() {
        let m = Metrics::of(&[row(0.5, 0.6)]);
        assert!(m.spearman.is_nan());
        let text = serde_json::to_string(&m).expect("serialise");
        assert!(text.contains("\"spearman\":null"), "{text}");
        let back: Metrics = serde_json::from_str(&text).expect("read back");
        assert!(back.spearman.is_nan());
        assert_eq!(back.mape_speed, m.mape_speed);
    }

    #[test]
    fn spearman_handles_ties_and_reversal() {
        assert!((spearman(&[1.0, 2.0, 3.0], &[3.0, 2.0, 1.0]) + 1.0).abs() < 1e-12);
        assert!((spearman(&[1.0, 1.0, 2.0], &[1.0, 1.0, 2.0]) - 1.0).abs() < 1e-12);
    }
}
