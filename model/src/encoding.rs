//! Turning workloads and pairs into model inputs.
//!
//! A job's vector: every numeric column standardised (log first where the column is positive and
//! spans orders of magnitude) followed by a "missing" flag, and every categorical column one-hot
//! with a final "unknown" slot (a missing value is all zeros, but for the family feature, where
//! no family declared is a new one: the unknown slot); a missing numeric is all zeros plus its
//! flag, never invented; then
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

/// How far beyond the training range a standardised value may lie (in training standard
/// deviations, past the smallest or the largest value training saw) before its job is taken
/// as out of range: the network then extrapolates, and no calibration holds for it.
pub const EXTRAPOLATION_MARGIN: f64 = 1.0;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NumericFeature {
    pub name: String,
    /// `ln(x)` before standardising.
    pub log: bool,
    pub mean: f64,
    pub std: f64,
    /// The smallest and the largest standardised value in training (absent in files written
    /// before they were recorded: no value is then out of range).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lo: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hi: Option<f64>,
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
    /// The categorical feature that names a workload's model family (`--family`), when one of
    /// `categorical` does: a job whose value of it is not in the vocabulary (or who declares
    /// none) is of a new family.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub family: Option<String>,
    /// The pair settings each of `identities` was measured in among the training rows, all
    /// devices together (in its order; both directions of a setting count once). Empty in
    /// files written before it was recorded: every training workload is then `known`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub measured: Vec<u32>,
    /// The same counts on each device of the training rows (device -> counts in `identities`'
    /// order). Where recorded, a job's class and count are those of the device asked: a
    /// workload fully measured on one device and probed on another is `probed` on the second,
    /// and on a device training never had it was measured in none. Empty in files written
    /// before it was recorded: `measured`, all devices together, tells them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub measured_by_device: BTreeMap<String, Vec<u32>>,
    /// The network was trained on measured groups too, one row per job of a group: the job in
    /// the first job's place, the mean of its co-runners' encodings in the second's, and one
    /// more column after the context, ln(its co-runners) (0 for a pair). Absent (a model
    /// trained on pairs alone, and files written before it): no such column.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub groups: bool,
}

/// A training workload measured in at most this many pair settings (on the device asked, where
/// the model records counts per device) is `probed`: its pairs are
/// calibrated on families held out with 1 to `PROBED_MAX` settings of each workload kept
/// (a new job's probes, `duet profile --onto DIR --probes K`, whose default K it is), not on
/// fully measured ones. An absolute count, not a share of the grid: what the class promises is
/// how few measurements back the job, and a small campaign's fully measured workloads (6 pair
/// settings in `cpu-dev2c`) stay `known` in its unseen-pairs folds.
pub const PROBED_MAX: u32 = 3;

/// What the model knows of one job, from its encoding, in order of trust.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Novelty {
    /// A training workload (its identity slot is set).
    Known,
    /// A training workload measured in at most [`PROBED_MAX`] pair settings on the device.
    Probed,
    /// A new workload of a family training had.
    New,
    /// A workload of a family training never had, or that declares none.
    NewFamily,
    /// A numeric feature lies more than [`EXTRAPOLATION_MARGIN`] beyond training's range.
    OutOfRange,
}

impl Novelty {
    /// The calibration class a pair with this novelty (its less known job's) asks for.
    pub fn class(self) -> duet_core::api::Calibration {
        use duet_core::api::Calibration as C;
        match self {
            Novelty::Known => C::Known,
            Novelty::Probed => C::Probed,
            Novelty::New => C::New,
            Novelty::NewFamily => C::NewFamily,
            Novelty::OutOfRange => C::Conservative,
        }
    }
}

/// A job's raw inputs: its solo throughput and declared features, by name.
pub type JobFeatures = BTreeMap<String, FeatureValue>;

pub use crate::source::FeatureSource;

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
            family: None,
            measured: Vec::new(),
            measured_by_device: BTreeMap::new(),
            groups: false,
        }
    }

    /// Records how many pair settings each training workload was measured in (`counts` by
    /// id; an identity absent from it was measured in none).
    pub fn with_measured(mut self, counts: &BTreeMap<String, u32>) -> FeatureSpec {
        self.measured = self
            .identities
            .iter()
            .map(|id| counts.get(id).copied().unwrap_or(0))
            .collect();
        self
    }

    /// Records how many pair settings each training workload was measured in on each device
    /// (`counts`: device -> id -> settings; an identity absent from a device's counts was
    /// measured in none there), and their sum over devices as `measured` (a setting is on one
    /// device, so the sum counts each once).
    pub fn with_measured_by_device(
        self,
        counts: &BTreeMap<String, BTreeMap<String, u32>>,
    ) -> FeatureSpec {
        let mut total: BTreeMap<String, u32> = BTreeMap::new();
        for on_device in counts.values() {
            for (id, n) in on_device {
                let t = total.entry(id.clone()).or_default();
                *t = t.saturating_add(*n);
            }
        }
        let mut spec = self.with_measured(&total);
        spec.measured_by_device = counts
            .iter()
            .map(|(gpu, on_device)| {
                let n = spec
                    .identities
                    .iter()
                    .map(|id| on_device.get(id).copied().unwrap_or(0))
                    .collect();
                (gpu.clone(), n)
            })
            .collect();
        spec
    }

    /// The pair settings the job encoded in `job` was measured in among the training rows on
    /// `gpu` (all devices together where the spec records no per-device counts; a device
    /// training never had, or `None`, counts 0): 0 for a job without an identity slot, `None`
    /// where the spec records no counts.
    pub fn measured_of(&self, job: &[f32], gpu: Option<&str>) -> Option<u32> {
        self.measured_at(self.identity_index(job), gpu)
    }

    /// `measured_of` for the job whose identity slot is `identity`.
    fn measured_at(&self, identity: Option<usize>, gpu: Option<&str>) -> Option<u32> {
        if self.measured.is_empty() {
            return None;
        }
        let counts = if self.measured_by_device.is_empty() {
            Some(&self.measured)
        } else {
            gpu.and_then(|g| self.measured_by_device.get(g))
        };
        Some(
            identity
                .and_then(|i| counts.and_then(|c| c.get(i)).copied())
                .unwrap_or(0),
        )
    }

    /// Names `feature` as the model family, where it is one of the spec's categorical features
    /// (a family feature fitting dropped, say with one value in training, names none).
    pub fn with_family(mut self, feature: Option<&str>) -> FeatureSpec {
        self.family = feature
            .filter(|f| self.categorical.iter().any(|c| c.name == *f))
            .map(str::to_string);
        self
    }

    /// What the model knows of the job encoded in `job` (one job's slice, `job_width` long)
    /// on `gpu` (`measured_of`'s device).
    pub fn novelty(&self, job: &[f32], gpu: Option<&str>) -> Novelty {
        let identity = self.identity_index(job);
        self.novelty_at(job, identity, self.measured_at(identity, gpu))
    }

    /// `novelty` for the job encoded in `job`, whose identity slot is `identity` and whose
    /// count on the device is `measured` (`measured_at`).
    fn novelty_at(&self, job: &[f32], identity: Option<usize>, measured: Option<u32>) -> Novelty {
        let mut at = 0;
        for f in &self.numeric {
            let (z, missing) = (job[at], job[at + 1]);
            at += 2;
            if missing != 0.0 {
                continue;
            }
            let z = f64::from(z);
            if f.lo.is_some_and(|lo| z < lo - EXTRAPOLATION_MARGIN)
                || f.hi.is_some_and(|hi| z > hi + EXTRAPOLATION_MARGIN)
            {
                return Novelty::OutOfRange;
            }
        }
        if identity.is_some() {
            match measured {
                Some(n) if n <= PROBED_MAX => Novelty::Probed,
                _ => Novelty::Known,
            }
        } else if self.family_is_new(job) {
            Novelty::NewFamily
        } else {
            Novelty::New
        }
    }

    /// The training workload whose identity slot is set in the job encoded in `job`, if any.
    pub fn identity_of(&self, job: &[f32]) -> Option<&str> {
        let i = self.identity_index(job)?;
        Some(self.identities[i].as_str())
    }

    /// The index in `identities` of the slot set in the job encoded in `job`, if any.
    fn identity_index(&self, job: &[f32]) -> Option<usize> {
        let slots = job.get(job.len().checked_sub(self.identities.len())?..)?;
        slots.iter().position(|&x| x != 0.0)
    }

    /// Whether the job encoded in `job` is of a family training never had: the spec has a
    /// family feature and the job's is none of its values (or it declares none).
    pub fn family_is_new(&self, job: &[f32]) -> bool {
        let Some(family) = self.family.as_deref() else {
            return false;
        };
        let mut at = self.numeric.len() * 2;
        for c in &self.categorical {
            let Some(slots) = job.get(at..at + c.vocabulary.len() + 1) else {
                return false;
            };
            at += slots.len();
            if c.name == family {
                // The unknown slot (a value not in the vocabulary, or none declared).
                return !slots[..c.vocabulary.len()].iter().any(|&x| x != 0.0);
            }
        }
        false
    }

    /// The columns of a job's encoding that describe its profile rather than name it: every
    /// numeric feature and its missing flag, and every categorical slot but the family's; never
    /// the identity slots. What the effects prior reads of a job training never measured.
    pub fn profile_columns(&self) -> Vec<usize> {
        let mut columns: Vec<usize> = (0..self.numeric.len() * 2).collect();
        let mut at = columns.len();
        for c in &self.categorical {
            let slots = c.vocabulary.len() + 1;
            if self.family.as_deref() != Some(c.name.as_str()) {
                columns.extend(at..at + slots);
            }
            at += slots;
        }
        columns
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

    /// The device of an encoded pair row, where it is one of the spec's (its one-hot slot).
    pub fn row_gpu(&self, row: &[f32]) -> Option<&str> {
        let start = 2 * self.job_width();
        let slots = row.get(start..start + self.gpus.len())?;
        let g = slots.iter().position(|&x| x != 0.0)?;
        Some(self.gpus[g].as_str())
    }

    /// The calibration class an encoded pair row asks for: that of its less known job
    /// (`Novelty::class`). Without identity slots no workload is known.
    pub fn calibration_kind(&self, row: &[f32]) -> duet_core::api::Calibration {
        self.pair_view(row).0
    }

    /// `calibration_kind` of an encoded pair row and the pair settings each of its two jobs
    /// was measured in on the row's device (`measured_of`), each job's identity slot looked
    /// for once.
    pub fn pair_view(&self, row: &[f32]) -> (duet_core::api::Calibration, [Option<u32>; 2]) {
        let job = self.job_width();
        if row.len() < 2 * job {
            return (duet_core::api::Calibration::New, [None, None]);
        }
        let gpu = self.row_gpu(row);
        let [a, b] = [&row[..job], &row[job..2 * job]].map(|j| {
            let identity = self.identity_index(j);
            let measured = self.measured_at(identity, gpu);
            (self.novelty_at(j, identity, measured), measured)
        });
        (a.0.max(b.0).class(), [a.1, b.1])
    }

    /// Length of one pair's encoding.
    pub fn pair_width(&self) -> usize {
        2 * self.job_width() + self.context_width()
    }

    /// Appends the encoding of one job to `out`.
    pub fn encode_job(&self, job: &JobFeatures, out: &mut Vec<f32>) {
        self.encode_from(job, out);
    }

    /// Appends the encoding of the job whose features `job` gives to `out`.
    pub fn encode_from(&self, job: &impl FeatureSource, out: &mut Vec<f32>) {
        for f in &self.numeric {
            match job.number(&f.name) {
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
            let value = job.category(&c.name);
            let slot = match value {
                Some(v) => Some(c.vocabulary.iter().position(|x| x == v)),
                // A job that declares no family is of a new one: the unknown slot.
                None if self.family.as_deref() == Some(c.name.as_str()) => Some(None),
                None => None,
            };
            for i in 0..=c.vocabulary.len() {
                let hot = match slot {
                    Some(Some(s)) => s == i,
                    Some(None) => i == c.vocabulary.len(),
                    None => false,
                };
                out.push(if hot { 1.0 } else { 0.0 });
            }
        }
        let id = job.category(IDENTITY);
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

    /// Length of the context that follows the two jobs: device, mode and shares (and the
    /// co-runners' column where the network learned groups).
    pub fn context_width(&self) -> usize {
        self.gpus.len() + 1 + self.modes.len() + 2 + usize::from(self.groups)
    }

    /// Appends the context of a pair (device one-hot, mode one-hot, shares; where the network
    /// learned groups, ln(1 co-runner) = 0) to `out`.
    pub fn encode_context(
        &self,
        gpu: &str,
        mode: Mode,
        share_a: Option<f64>,
        share_b: Option<f64>,
        out: &mut Vec<f32>,
    ) {
        self.encode_group_context(gpu, mode, share_a, share_b, 1, out);
    }

    /// Appends one job's row of a group of `co_runners + 1` jobs to `out` (a spec whose
    /// network learned groups): `job`, the mean of the encodings in `others` (each
    /// `job_width` long), the context with the job's share and its co-runners' mean share, and
    /// ln(co_runners). With one co-runner, exactly the pair's row.
    #[allow(clippy::too_many_arguments)]
    pub fn encode_group_row(
        &self,
        job: &[f32],
        others: &[&[f32]],
        gpu: &str,
        mode: Mode,
        share: Option<f64>,
        others_share: Option<f64>,
        out: &mut Vec<f32>,
    ) {
        Self::encode_group_jobs(job, others, out);
        self.encode_group_context(gpu, mode, share, others_share, others.len(), out);
    }

    /// The part of a group row before its context: `job`, then the mean of `others`.
    fn encode_group_jobs(job: &[f32], others: &[&[f32]], out: &mut Vec<f32>) {
        out.extend_from_slice(job);
        let start = out.len();
        out.resize(start + job.len(), 0.0);
        for other in others {
            for (sum, x) in out[start..].iter_mut().zip(*other) {
                *sum += x;
            }
        }
        #[allow(clippy::cast_precision_loss)]
        let n = others.len().max(1) as f32;
        if others.len() > 1 {
            for x in &mut out[start..] {
                *x /= n;
            }
        }
    }

    /// Appends the row of every job of a group to `out`, in the group's order
    /// (`encode_group_row`): `jobs` holds each job's encoding, `share(k)` job `k`'s share; a
    /// job's co-runners' share is their mean where every one has a share. Rows whose shares
    /// are alike (every row of a group without shares) have one context, encoded once.
    pub fn encode_group(
        &self,
        jobs: &[&[f32]],
        share: impl Fn(usize) -> Option<f64>,
        gpu: &str,
        mode: Mode,
        out: &mut Vec<f32>,
    ) {
        let mut others: Vec<&[f32]> = Vec::with_capacity(jobs.len());
        let mut context = Vec::with_capacity(self.context_width());
        let mut context_of = None;
        for k in 0..jobs.len() {
            others.clear();
            others.extend((0..jobs.len()).filter(|&o| o != k).map(|o| jobs[o]));
            let mut sum = Some(0.0);
            for o in (0..jobs.len()).filter(|&o| o != k) {
                sum = sum.zip(share(o)).map(|(total, s)| total + s);
            }
            #[allow(clippy::cast_precision_loss)]
            let others_share = sum.map(|total| total / others.len().max(1) as f64);
            let key = (share(k).map(f64::to_bits), others_share.map(f64::to_bits));
            if context_of != Some(key) {
                context.clear();
                self.encode_group_context(
                    gpu,
                    mode,
                    share(k),
                    others_share,
                    others.len(),
                    &mut context,
                );
                context_of = Some(key);
            }
            Self::encode_group_jobs(jobs[k], &others, out);
            out.extend_from_slice(&context);
        }
    }

    fn encode_group_context(
        &self,
        gpu: &str,
        mode: Mode,
        share_a: Option<f64>,
        share_b: Option<f64>,
        co_runners: usize,
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
        if self.groups {
            #[allow(clippy::cast_precision_loss, clippy::cast_possible_truncation)]
            out.push((co_runners.max(1) as f64).ln() as f32);
        }
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
    let (lo, hi) = xs
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| {
            (lo.min((x - mean) / std), hi.max((x - mean) / std))
        });
    Ok(NumericFeature {
        name: name.to_string(),
        log,
        mean,
        std,
        lo: Some(lo),
        hi: Some(hi),
    })
}

#[cfg(test)]
pub(crate) mod tests;
