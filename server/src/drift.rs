//! Drift: how the loaded model does on what the cluster observed. Each observed pair or group
//! is scored for every one of its jobs (a group as `/v1/predict` answers it): the absolute
//! percentage error of the predicted speed against the observed one, whether the observed
//! slowdown stayed at or below the predicted p90, and the signed error (bias). `/metrics`
//! carries a rolling window of the latest pairs per device and mode this replica received
//! (rescored when a model is loaded); `GET /v1/drift` scores the store's newest observations,
//! every replica's, with the loaded model, per workload.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use duet_core::api::{
    DriftEntry, Features, GroupQuery, JobRef, ObservationRecord, ObservedPrediction, PairQuery,
    PredictRequest,
};
use duet_core::dataset::Mode;
use duet_model::{LoadedModel, Registry};

use crate::service::observations::{observed_group_prediction, observed_prediction};

/// Pairs per device and mode in the rolling window `/metrics` reports.
pub const WINDOW: usize = 1000;
/// The most rolling windows kept (devices times modes): with devices outside the model's list
/// counted as one, a bound the model's own devices never reach.
pub const MAX_WINDOWS: usize = 64;
/// The label of every observed device the serving model does not know, in `/metrics` and the
/// rolling windows: a client cannot add series by naming new devices.
pub const OTHER_DEVICE: &str = "other";

/// How `/metrics` and the rolling windows name an observed device: itself when the serving
/// model was trained on it, else `other`.
pub fn device_label<'a>(model: &LoadedModel, gpu: &'a str) -> &'a str {
    if model.meta.spec.gpus.iter().any(|g| g == gpu) {
        gpu
    } else {
        OTHER_DEVICE
    }
}

/// One job of one observed pair, scored.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct JobScore {
    /// |predicted - observed| / observed speed.
    pub ape: f64,
    /// The observed slowdown is at or below the predicted p90 slowdown.
    pub covered: bool,
    /// (predicted - observed) / observed speed.
    pub bias: f64,
}

/// Every co-located job of `record` (`a`, `b`, then a group's others) scored against
/// `prediction`; `None` without observed speeds, or where the prediction has another number of
/// jobs.
pub fn scores(
    record: &ObservationRecord,
    prediction: &ObservedPrediction,
) -> Option<Vec<JobScore>> {
    let observed = record.observed_group_speeds()?;
    let predicted: Vec<(f64, f64)> = [
        (prediction.speed_a, prediction.slowdown_a_p90),
        (prediction.speed_b, prediction.slowdown_b_p90),
    ]
    .into_iter()
    .chain(prediction.others.iter().map(|j| (j.speed, j.slowdown_p90)))
    .collect();
    if observed.len() != predicted.len() || observed.iter().any(|v| !(v.is_finite() && *v > 0.0)) {
        return None;
    }
    let all: Vec<JobScore> = observed
        .iter()
        .zip(&predicted)
        .map(|(&observed, &(speed, p90))| JobScore {
            ape: (speed - observed).abs() / observed,
            covered: 1.0 / observed <= p90,
            bias: (speed - observed) / observed,
        })
        .collect();
    all.iter()
        .all(|s| s.ape.is_finite() && s.bias.is_finite())
        .then_some(all)
}

/// The loaded model's predictions for observed pairs and groups (`None` for a solo run, or a
/// setting it cannot predict); `None` in all where `cancelled` was set before the last. A job
/// still in the registry with a profile on the device is named by its id (the model's identity
/// slot applies); any other is given by the features stored with it.
pub fn predict(
    model: &LoadedModel,
    registry: &Registry,
    records: &[&ObservationRecord],
    cancelled: &AtomicBool,
) -> Option<Vec<Option<ObservedPrediction>>> {
    let queries: Vec<Option<PairQuery>> = records
        .iter()
        .map(|r| {
            if r.observation.others.is_empty() {
                query(registry, r)
            } else {
                None
            }
        })
        .collect();
    let pairs: Vec<PairQuery> = queries.iter().flatten().cloned().collect();
    let mut batch = None;
    if !pairs.is_empty() {
        let request = PredictRequest {
            gpu: None,
            pairs,
            groups: Vec::new(),
        };
        batch = duet_model::predict::predict(model, registry, &request, None).ok();
    }
    let mut next = 0;
    let mut out = Vec::with_capacity(records.len());
    for (q, record) in queries.into_iter().zip(records) {
        // Each group, and each pair asked alone, runs the model: given up between them once
        // nobody waits for the answer.
        if cancelled.load(Ordering::Relaxed) {
            return None;
        }
        let Some(q) = q else {
            // A group (its own pairs in one pass), or a solo run.
            out.push(group_query(registry, record).and_then(|query| {
                let answer =
                    duet_model::predict::predict_group(model, registry, &query, None).ok()?;
                Some(observed_group_prediction(model.version(), &answer))
            }));
            continue;
        };
        let p = match &batch {
            Some(all) => all.get(next).copied(),
            // One pair the model refuses fails the batch: then each on its own.
            None => duet_model::predict::predict(
                model,
                registry,
                &PredictRequest {
                    gpu: None,
                    pairs: vec![q],
                    groups: Vec::new(),
                },
                None,
            )
            .ok()
            .and_then(|v| v.first().copied()),
        };
        next += 1;
        out.push(p.map(|p| observed_prediction(model.version(), &p)));
    }
    Some(out)
}

/// How the loaded model is asked about one stored job: by its id where the registry still
/// holds the same profile on `gpu`, else by the features stored with it.
fn job_ref(registry: &Registry, gpu: &str, id: &str, features: &Features) -> JobRef {
    let known = registry
        .get(id)
        .and_then(|e| e.registered.body.profiles.get(gpu))
        .is_some_and(|p| p == features);
    if known {
        JobRef::workload(id)
    } else {
        JobRef {
            workload: None,
            features: Some(features.clone()),
        }
    }
}

fn query(registry: &Registry, r: &ObservationRecord) -> Option<PairQuery> {
    let o = &r.observation;
    let gpu = &o.gpu;
    Some(PairQuery {
        a: job_ref(registry, gpu, &r.workload_a, &r.features_a),
        b: job_ref(
            registry,
            gpu,
            r.workload_b.as_deref()?,
            r.features_b.as_ref()?,
        ),
        mode: o.mode?,
        share_a: o.share_a,
        share_b: o.share_b,
        gpu: Some(gpu.clone()),
    })
}

/// A stored group as the loaded model is asked about it (its jobs as [`job_ref`] names them).
fn group_query(registry: &Registry, r: &ObservationRecord) -> Option<GroupQuery> {
    let pair = query(registry, r)?;
    let gpu = &r.observation.gpu;
    let mut jobs = vec![pair.a, pair.b];
    jobs.extend(
        r.others
            .iter()
            .map(|j| job_ref(registry, gpu, &j.workload, &j.features)),
    );
    Some(crate::service::observations::group_query(
        &r.observation,
        jobs,
    ))
}

/// Running sums of scores, turned into a `DriftEntry`.
#[derive(Debug, Default, Clone)]
pub struct Tally {
    jobs: usize,
    ape: f64,
    covered: usize,
    bias: f64,
    last_observed_at_s: f64,
}

impl Tally {
    pub fn add(&mut self, score: JobScore, observed_at_s: f64) {
        self.jobs += 1;
        self.ape += score.ape;
        self.covered += usize::from(score.covered);
        self.bias += score.bias;
        self.last_observed_at_s = self.last_observed_at_s.max(observed_at_s);
    }

    #[allow(clippy::cast_precision_loss)]
    pub fn entry(&self, key: String) -> DriftEntry {
        let n = self.jobs.max(1) as f64;
        DriftEntry {
            key,
            observations: self.jobs,
            mape: self.ape / n,
            p90_coverage: self.covered as f64 / n,
            bias: self.bias / n,
            last_observed_at: duet_core::timestamp::rfc3339(self.last_observed_at_s),
        }
    }
}

/// A device and mode, as `/metrics` labels and `/v1/drift` keys name them.
pub type Group = (String, Mode);

pub fn group_key(group: &Group) -> String {
    format!("{}/{}", group.0, group.1)
}

/// Scored records tallied three ways.
#[derive(Debug, Clone, PartialEq)]
pub struct Tallies {
    /// Per device and mode.
    pub devices: Vec<DriftEntry>,
    /// Per number of jobs on the device (`2` for pairs).
    pub sizes: Vec<DriftEntry>,
    /// Per workload, the worst MAPE first.
    pub workloads: Vec<DriftEntry>,
    /// Co-locations scored.
    pub scored: usize,
}

/// Per device and mode, per group size and per workload (worst MAPE first), of scored records.
pub fn tallies(scored: &[(&ObservationRecord, Option<ObservedPrediction>)]) -> Tallies {
    let mut groups: BTreeMap<Group, Tally> = BTreeMap::new();
    let mut sizes: BTreeMap<usize, Tally> = BTreeMap::new();
    let mut workloads: BTreeMap<String, Tally> = BTreeMap::new();
    let mut pairs = 0;
    for (record, prediction) in scored {
        let Some(prediction) = prediction else {
            continue;
        };
        let (Some(mode), Some(b)) = (record.observation.mode, record.workload_b.as_ref()) else {
            continue;
        };
        let Some(all) = scores(record, prediction) else {
            continue;
        };
        pairs += 1;
        let group = groups
            .entry((record.observation.gpu.clone(), mode))
            .or_default();
        let size = sizes.entry(all.len()).or_default();
        let ids = [&record.workload_a, b]
            .into_iter()
            .chain(record.others.iter().map(|j| &j.workload));
        for (score, id) in all.into_iter().zip(ids) {
            group.add(score, record.observed_at_s);
            size.add(score, record.observed_at_s);
            workloads
                .entry(id.clone())
                .or_default()
                .add(score, record.observed_at_s);
        }
    }
    let devices = groups.iter().map(|(g, t)| t.entry(group_key(g))).collect();
    let sizes = sizes.iter().map(|(k, t)| t.entry(k.to_string())).collect();
    let mut workloads: Vec<DriftEntry> = workloads.into_iter().map(|(id, t)| t.entry(id)).collect();
    workloads.sort_by(|x, y| y.mape.total_cmp(&x.mape).then_with(|| x.key.cmp(&y.key)));
    Tallies {
        devices,
        sizes,
        workloads,
        scored: pairs,
    }
}

/// The latest observed pairs this replica received, per device and mode, each with the loaded
/// model's prediction; what `/metrics` reports as rolling drift.
#[derive(Debug, Default)]
pub struct Windows {
    inner: Mutex<BTreeMap<Group, VecDeque<(ObservationRecord, ObservedPrediction)>>>,
}

impl Windows {
    /// Adds a stored pair and its prediction to the window of `device` (its label,
    /// `device_label`) and its mode; the oldest leaves a full window. A pair of a new group once
    /// `MAX_WINDOWS` are kept is not windowed (it is stored and counted all the same).
    pub fn push(&self, record: &ObservationRecord, device: &str) {
        let (Some(mode), Some(prediction)) = (record.observation.mode, &record.prediction) else {
            return;
        };
        if let Ok(mut w) = self.inner.lock() {
            let group = (device.to_string(), mode);
            if !w.contains_key(&group) && w.len() >= MAX_WINDOWS {
                return;
            }
            let window = w.entry(group).or_default();
            if window.len() == WINDOW {
                window.pop_front();
            }
            window.push_back((record.clone(), prediction.clone()));
        }
    }

    /// Scores every window's pairs again with a newly loaded model; pairs it cannot predict
    /// leave the window.
    pub fn rescore(&self, model: &LoadedModel, registry: &Registry) {
        let Ok(mut w) = self.inner.lock() else {
            return;
        };
        for window in w.values_mut() {
            let records: Vec<&ObservationRecord> = window.iter().map(|(r, _)| r).collect();
            let Some(fresh) = predict(model, registry, &records, &AtomicBool::new(false)) else {
                continue;
            };
            let old = std::mem::take(window);
            *window = old
                .into_iter()
                .zip(fresh)
                .filter_map(|((r, _), p)| Some((r, p?)))
                .collect();
        }
        w.retain(|_, window| !window.is_empty());
    }

    /// Per device and mode: the window's tally.
    pub fn tallies(&self) -> Vec<(Group, Tally)> {
        let Ok(w) = self.inner.lock() else {
            return Vec::new();
        };
        w.iter()
            .map(|(group, window)| {
                let mut tally = Tally::default();
                for (record, prediction) in window {
                    for score in scores(record, prediction).into_iter().flatten() {
                        tally.add(score, record.observed_at_s);
                    }
                }
                (group.clone(), tally)
            })
            .collect()
    }
}
