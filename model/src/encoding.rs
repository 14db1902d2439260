//! Turning workloads and pairs into model inputs.
//!
//! A job's vector: every numeric column standardised (log first where the column is positive and
//! spans orders of magnitude) followed by a "missing" flag, and every categorical column one-hot
//! with a final "unknown" slot; a missing value is all zeros plus its flag, never invented; then
//! one slot per training workload id (all zeros for a workload the model never saw). A
//! pair's vector: job a, job b, the device one-hot (plus unknown), the mode one-hot, and the two
//! shares as fractions (0 where the mode has none). The spec is fitted on training data only and
//! stored in `model.json`, so the server encodes exactly as training did.

use std::collections::{BTreeMap, BTreeSet};

use duet_core::dataset::{Dataset, FeatureKind, FeatureValue, Mode};
use serde::{Deserialize, Serialize};

/// The column that carries a workload's solo throughput in the feature vector.
pub const SOLO_THROUGHPUT: &str = "solo_throughput";

/// The key that carries a workload's id: a job the model was trained on is recognised by it (one
/// slot per training workload); any other job leaves those slots at zero.
pub const IDENTITY: &str = "workload";

/// A positive column whose max/min ratio reaches this is log-transformed before standardising.
const LOG_SPAN: f64 = 20.0;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NumericFeature {
    pub name: String,
    /// `ln(x)` before standardising.
    pub log: bool,
    pub mean: f64,
    pub std: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CategoricalFeature {
    pub name: String,
    /// One slot per value, then one for values never seen in training.
    pub vocabulary: Vec<String>,
}

/// Everything needed to encode a pair exactly as training did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FeatureSpec {
    pub numeric: Vec<NumericFeature>,
    pub categorical: Vec<CategoricalFeature>,
    /// Ids of the training workloads, one-hot; an unknown id is all zeros.
    #[serde(default)]
    pub identities: Vec<String>,
    /// Devices seen in training, one-hot plus an unknown slot.
    pub gpus: Vec<String>,
    pub modes: Vec<Mode>,
    /// What fitting left out, and why (constant columns, columns with no values).
    pub dropped: Vec<String>,
}

/// A job's raw inputs: its solo throughput and declared features, by name.
pub type JobFeatures = BTreeMap<String, FeatureValue>;

/// The raw features of every workload of `dataset`, solo throughput included.
pub fn job_features(dataset: &Dataset) -> BTreeMap<String, JobFeatures> {
    dataset
        .workloads
        .iter()
        .map(|w| {
            let mut f = w.features.clone();
            f.insert(
                SOLO_THROUGHPUT.to_string(),
                FeatureValue::Number(Some(w.solo_throughput)),
            );
            f.insert(
                IDENTITY.to_string(),
                FeatureValue::Category(Some(w.workload.clone())),
            );
            (w.workload.clone(), f)
        })
        .collect()
}

impl FeatureSpec {
    /// Fits the spec on the jobs, devices and modes of the training rows.
    pub fn fit<'a>(
        datasets: &[&Dataset],
        jobs: impl IntoIterator<Item = &'a JobFeatures>,
        gpus: impl IntoIterator<Item = String>,
        modes: impl IntoIterator<Item = Mode>,
    ) -> FeatureSpec {
        let mut kinds: BTreeMap<String, FeatureKind> =
            BTreeMap::from([(SOLO_THROUGHPUT.to_string(), FeatureKind::Numeric)]);
        for d in datasets {
            for f in &d.meta.workload_features {
                kinds.entry(f.name.clone()).or_insert(f.kind);
            }
        }
        let jobs: Vec<&JobFeatures> = jobs.into_iter().collect();
        let mut numeric = Vec::new();
        let mut categorical = Vec::new();
        let mut dropped = Vec::new();
        for (name, kind) in kinds {
            match kind {
                FeatureKind::Numeric => {
                    let values: Vec<f64> = jobs
                        .iter()
                        .filter_map(|j| j.get(&name).and_then(FeatureValue::as_number))
                        .filter(|v| v.is_finite())
                        .collect();
                    match fit_numeric(&name, &values) {
                        Ok(f) => numeric.push(f),
                        Err(why) => dropped.push(why),
                    }
                }
                FeatureKind::Categorical => {
                    let vocabulary: BTreeSet<String> = jobs
                        .iter()
                        .filter_map(|j| j.get(&name).and_then(|v| v.as_category()))
                        .map(str::to_string)
                        .collect();
                    if vocabulary.len() < 2 {
                        dropped.push(format!(
                            "{name}: fewer than two distinct values in the training data"
                        ));
                    } else {
                        categorical.push(CategoricalFeature {
                            name,
                            vocabulary: vocabulary.into_iter().collect(),
                        });
                    }
                }
            }
        }
        let identities: BTreeSet<String> = jobs
            .iter()
            .filter_map(|j| j.get(IDENTITY).and_then(|v| v.as_category()))
            .map(str::to_string)
            .collect();
        let gpus: BTreeSet<String> = gpus.into_iter().collect();
        let modes: BTreeSet<Mode> = modes.into_iter().collect();
        FeatureSpec {
            numeric,
            categorical,
            identities: identities.into_iter().collect(),
            gpus: gpus.into_iter().collect(),
            modes: modes.into_iter().collect(),
            dropped,
        }
    }

    /// Length of one job's encoding.
    pub fn job_width(&self) -> usize {
        self.numeric.len() * 2
            + self
                .categorical
                .iter()
                .map(|c| c.vocabulary.len() + 1)
                .sum::<usize>()
            + self.identities.len()
    }

    /// Whether an encoded pair row (as `encode_pair` writes it) has an identity slot set for
    /// both jobs: the model was trained on both workloads. Without identity slots no workload
    /// is known.
    pub fn pair_known(&self, row: &[f32]) -> bool {
        let (job, ids) = (self.job_width(), self.identities.len());
        ids > 0
            && row.len() >= 2 * job
            && [job, 2 * job]
                .iter()
                .all(|&end| row[end - ids..end].iter().any(|&x| x != 0.0))
    }

    /// The device of an encoded pair row, where it is one of the spec's (its one-hot slot).
    pub fn row_gpu(&self, row: &[f32]) -> Option<&str> {
        let start = 2 * self.job_width();
        let slots = row.get(start..start + self.gpus.len())?;
        let g = slots.iter().position(|&x| x != 0.0)?;
        Some(self.gpus[g].as_str())
    }

    /// The calibration that applies to an encoded pair row.
    pub fn calibration_kind(&self, row: &[f32]) -> duet_core::api::Calibration {
        if self.pair_known(row) {
            duet_core::api::Calibration::Known
        } else {
            duet_core::api::Calibration::New
        }
    }

    /// Length of one pair's encoding.
    pub fn pair_width(&self) -> usize {
        2 * self.job_width() + self.context_width()
    }

    /// Appends the encoding of one job to `out`.
    pub fn encode_job(&self, job: &JobFeatures, out: &mut Vec<f32>) {
        for f in &self.numeric {
            match job.get(&f.name).and_then(FeatureValue::as_number) {
                Some(v) if v.is_finite() && (!f.log || v > 0.0) => {
                    let x = if f.log { v.ln() } else { v };
                    #[allow(clippy::cast_possible_truncation)]
                    out.push(((x - f.mean) / f.std) as f32);
                    out.push(0.0);
                }
                _ => {
                    out.push(0.0);
                    out.push(1.0);
                }
            }
        }
        for c in &self.categorical {
            let value = job.get(&c.name).and_then(|v| v.as_category());
            let slot = value.map(|v| c.vocabulary.iter().position(|x| x == v));
            for i in 0..=c.vocabulary.len() {
                let hot = match slot {
                    Some(Some(s)) => s == i,
                    Some(None) => i == c.vocabulary.len(),
                    None => false,
                };
                out.push(if hot { 1.0 } else { 0.0 });
            }
        }
        let id = job.get(IDENTITY).and_then(|v| v.as_category());
        out.extend(
            self.identities
                .iter()
                .map(|known| if Some(known.as_str()) == id { 1.0 } else { 0.0 }),
        );
    }

    /// Appends the encoding of `a` running next to `b` on `gpu` under `mode` to `out`.
    #[allow(clippy::too_many_arguments)]
    pub fn encode_pair(
        &self,
        a: &JobFeatures,
        b: &JobFeatures,
        gpu: &str,
        mode: Mode,
        share_a: Option<f64>,
        share_b: Option<f64>,
        out: &mut Vec<f32>,
    ) {
        self.encode_job(a, out);
        self.encode_job(b, out);
        self.encode_context(gpu, mode, share_a, share_b, out);
    }

    /// Length of the context that follows the two jobs: device, mode and shares.
    pub fn context_width(&self) -> usize {
        self.gpus.len() + 1 + self.modes.len() + 2
    }

    /// Appends the context of a pair (device one-hot, mode one-hot, shares) to `out`.
    pub fn encode_context(
        &self,
        gpu: &str,
        mode: Mode,
        share_a: Option<f64>,
        share_b: Option<f64>,
        out: &mut Vec<f32>,
    ) {
        let g = self
            .gpus
            .iter()
            .position(|x| x == gpu)
            .unwrap_or(self.gpus.len());
        out.extend((0..=self.gpus.len()).map(|i| if i == g { 1.0 } else { 0.0 }));
        out.extend(
            self.modes
                .iter()
                .map(|m| if *m == mode { 1.0 } else { 0.0 }),
        );
        #[allow(clippy::cast_possible_truncation)]
        out.extend([share_a, share_b].map(|s| s.map_or(0.0, |s| (s / 100.0) as f32)));
    }
}

fn fit_numeric(name: &str, values: &[f64]) -> Result<NumericFeature, String> {
    if values.is_empty() {
        return Err(format!("{name}: no values in the training data"));
    }
    let (min, max) = values
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &v| {
            (lo.min(v), hi.max(v))
        });
    let log = min > 0.0 && max / min >= LOG_SPAN;
    let xs: Vec<f64> = values
        .iter()
        .map(|&v| if log { v.ln() } else { v })
        .collect();
    #[allow(clippy::cast_precision_loss)]
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let std = (xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n).sqrt();
    if std < 1e-12 {
        return Err(format!("{name}: constant ({min}) in the training data"));
    }
    Ok(NumericFeature {
        name: name.to_string(),
        log,
        mean,
        std,
    })
}
