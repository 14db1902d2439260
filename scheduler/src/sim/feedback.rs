//! Learning from what the cluster observes, in simulation: the pricing loop runs on a model that
//! never saw some of the workloads; the jobs it places report what they really did (true
//! speeds, with the noise of a short measurement window) as a scheduler would report them to
//! `POST /v1/observations`; every few simulated hours the observations become a dataset (the
//! same pooling `duet dataset export` does), a model is retrained on it beside the campaign
//! data, and the pricing loop continues on the new model.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use anyhow::{Result, anyhow};
use duet_core::api::{
    FeatureInput, Features, JobRef, Observation, ObservationRecord, ObservedJob, ObservedJobRecord,
    WorkloadBody,
};
use duet_core::dataset::{Dataset, FeatureValue, Status, speed};
use duet_core::import::observed::{self, ObservedExport};
use duet_core::rng::Rng;
use duet_model::EngineKind;

use crate::predictor::{ModelPredictor, Outlook, Predictor, Query, Sharing};

/// What the cluster saw when a one-GPU job started: alone (`b` none), next to `b` under a
/// sharing, or in a measured group with `b` and `others`, at the jobs' true speeds.
#[derive(Debug, Clone, PartialEq)]
pub struct Seen {
    pub t: f64,
    pub a: String,
    pub b: Option<(String, Sharing)>,
    pub speed_a: f64,
    pub speed_b: f64,
    /// A group's further jobs: workload, MPS share, true speed.
    pub others: Vec<(String, Option<f64>, f64)>,
}

/// A predictor that learns from what the simulated cluster sees.
pub trait Learner: Predictor {
    /// What the cluster saw since the last call.
    fn observe(&mut self, seen: Vec<Seen>);
    /// Called before each placement round at simulated time `t`: may retrain and swap the model.
    fn tick(&mut self, t: f64) -> Result<()>;
}

/// How the model did on the held-out workloads' pairs at one point of the run.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Checkpoint {
    /// Simulated hours since the first arrival (0: the model trained without them).
    pub hours: f64,
    /// Observations reported so far (solo runs and co-locations).
    pub observations: usize,
    /// Settings (pairs), groups and workloads of the observed dataset this model was trained
    /// on.
    pub observed_settings: usize,
    pub observed_groups: usize,
    pub observed_workloads: usize,
    /// MAPE of speed over both jobs of every measured pair with a held-out workload.
    pub held_out_mape: f64,
    /// Share of those jobs whose true slowdown is at or below the predicted p90.
    pub held_out_coverage: f64,
    /// The same on the pairs of the workloads the model was trained on from the start.
    pub known_mape: f64,
    /// Seconds the retraining took (0 for the first model).
    pub train_s: f64,
}

/// Trains a model on the observed dataset (beside the campaign data the caller holds) and returns
/// its folder; the argument is the retraining's number, from 1.
pub type Retrain<'r> = Box<dyn FnMut(&Dataset, usize) -> Result<PathBuf> + 'r>;

/// The settings of a feedback run.
#[derive(Debug, Clone, PartialEq)]
pub struct FeedbackSettings {
    /// Simulated seconds between retrainings.
    pub every_s: f64,
    /// Coefficient of variation of an observed throughput (a short window's noise).
    pub noise: f64,
    pub seed: u64,
    pub engine: EngineKind,
}

/// The learning predictor of `duet simulate --feedback`.
pub struct FeedbackLearner<'r> {
    current: ModelPredictor,
    truth: &'r Dataset,
    held_out: BTreeSet<String>,
    /// Profiles of every workload of the truth dataset, registered with each model (the
    /// held-out ones are new to the first).
    profiles: BTreeMap<String, Option<WorkloadBody>>,
    records: Vec<ObservationRecord>,
    since_retrain: usize,
    next_retrain: f64,
    settings: FeedbackSettings,
    rng: Rng,
    retrain: Retrain<'r>,
    retrains: usize,
    pub checkpoints: Vec<Checkpoint>,
}

impl std::fmt::Debug for FeedbackLearner<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FeedbackLearner")
            .field("current", &self.current)
            .field("held_out", &self.held_out)
            .field("records", &self.records.len())
            .field("checkpoints", &self.checkpoints)
            .finish_non_exhaustive()
    }
}

/// A workload's solo profile on `gpu` as a client registers it.
fn profile(w: &duet_core::dataset::Workload, gpu: &str) -> WorkloadBody {
    let mut features: Features = w
        .features
        .iter()
        .map(|(name, v)| {
            let value = match v {
                FeatureValue::Number(Some(x)) => FeatureInput::Number(*x),
                FeatureValue::Category(Some(c)) => FeatureInput::Text(c.clone()),
                _ => FeatureInput::Null,
            };
            (name.as_str().into(), value)
        })
        .collect();
    features.insert(
        "solo_throughput".into(),
        FeatureInput::Number(w.solo_throughput),
    );
    WorkloadBody {
        kind: Some(w.kind),
        profiles: BTreeMap::from([(gpu.to_string(), features)]),
    }
}

/// Every workload of `truth` registered by its solo profile on the truth's device, as clients
/// register them with a server: the held-out ones are new to a model that never saw them.
pub fn profiles(truth: &Dataset) -> Result<BTreeMap<String, Option<WorkloadBody>>> {
    let gpu = truth
        .pairs
        .first()
        .map(|p| p.gpu.clone())
        .ok_or_else(|| anyhow!("the truth dataset has no pairs"))?;
    Ok(truth
        .workloads
        .iter()
        .map(|w| (w.workload.clone(), Some(profile(w, &gpu))))
        .collect())
}

impl<'r> FeedbackLearner<'r> {
    /// Starts on the model in `first` (trained without `held_out`), scoring it at hour 0.
    pub fn new(
        first: PathBuf,
        truth: &'r Dataset,
        held_out: BTreeSet<String>,
        settings: FeedbackSettings,
        retrain: Retrain<'r>,
    ) -> Result<FeedbackLearner<'r>> {
        let profiles = profiles(truth)?;
        let current = ModelPredictor::load_with(&first, settings.engine, &profiles)?;
        let mut learner = FeedbackLearner {
            current,
            truth,
            held_out,
            profiles,
            records: Vec::new(),
            since_retrain: 0,
            next_retrain: settings.every_s,
            rng: Rng::new(settings.seed),
            settings,
            retrain,
            retrains: 0,
            checkpoints: Vec::new(),
        };
        let first = learner.checkpoint(0.0, [0, 0, 0], 0.0)?;
        learner.checkpoints.push(first);
        Ok(learner)
    }

    /// A multiplicative measurement error: log-normal with the configured spread.
    fn noise(&mut self) -> f64 {
        // Box-Muller from two uniform draws in (0, 1].
        let u1 = 1.0 - self.rng.unit();
        let u2 = self.rng.unit();
        let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
        (self.settings.noise * z).exp()
    }

    fn record(&mut self, seen: &Seen) -> Option<ObservationRecord> {
        let (noise_a, noise_b) = (self.noise(), self.noise());
        let noises: Vec<f64> = seen.others.iter().map(|_| self.noise()).collect();
        let truth = self.truth;
        let gpu = truth.pairs.first()?.gpu.clone();
        let solo = |id: &str| truth.workload(id).map(|w| w.solo_throughput);
        let features = |id: &str| -> Option<Features> {
            Some(self.profiles.get(id)?.as_ref()?.profiles.get(&gpu)?.clone())
        };
        let kind = |id: &str| truth.workload(id).map(|w| w.kind);
        let (b, mode, share_a, share_b) = match &seen.b {
            Some((b, sharing)) => (
                Some(b.clone()),
                Some(sharing.mode),
                sharing.share_a,
                sharing.share_b,
            ),
            None => (None, None, None, None),
        };
        let throughput_b = match &b {
            Some(b) => Some(solo(b)? * seen.speed_b * noise_b),
            None => None,
        };
        let features_b = match &b {
            Some(b) => Some(features(b)?),
            None => None,
        };
        let mut others = Vec::with_capacity(seen.others.len());
        let mut other_records = Vec::with_capacity(seen.others.len());
        for ((id, share, speed), noise) in seen.others.iter().zip(noises) {
            others.push(ObservedJob {
                job: JobRef::workload(id),
                throughput: solo(id)? * speed * noise,
                solo_throughput: None,
                share: *share,
            });
            other_records.push(ObservedJobRecord {
                workload: id.clone(),
                features: features(id)?,
                kind: kind(id),
            });
        }
        Some(ObservationRecord {
            observation: Observation {
                id: format!("sim-{}", self.records.len()),
                gpu: gpu.clone(),
                mode,
                share_a,
                share_b,
                a: JobRef::workload(&seen.a),
                b: b.as_deref().map(JobRef::workload),
                throughput_a: solo(&seen.a)? * seen.speed_a * noise_a,
                throughput_b,
                solo_throughput_a: None,
                solo_throughput_b: None,
                others,
                window_s: 10.0,
                observed_at: duet_core::timestamp::rfc3339(seen.t),
            },
            workload_a: seen.a.clone(),
            features_a: features(&seen.a)?,
            kind_a: kind(&seen.a),
            kind_b: b.as_deref().and_then(kind),
            workload_b: b,
            features_b,
            others: other_records,
            prediction: None,
            observed_at_s: seen.t,
            received_at_s: seen.t,
            server: "simulation".into(),
        })
    }

    /// The current model scored on the truth's pairs: held-out workloads' pairs, and the rest.
    fn checkpoint(
        &mut self,
        hours: f64,
        [observed_settings, observed_groups, observed_workloads]: [usize; 3],
        train_s: f64,
    ) -> Result<Checkpoint> {
        let truth = self.truth;
        let solo: BTreeMap<&str, f64> = truth
            .workloads
            .iter()
            .map(|w| (w.workload.as_str(), w.solo_throughput))
            .collect();
        let mut scored: [(f64, usize, usize); 2] = [(0.0, 0, 0); 2];
        let gpu = truth.pairs.first().map_or("", |p| p.gpu.as_str());
        let pairs: Vec<_> = truth
            .pairs
            .iter()
            .filter(|p| p.status == Status::Ok)
            .filter_map(|p| {
                let (sa, sb) = (solo.get(p.a.as_str())?, solo.get(p.b.as_str())?);
                Some((p, speed(p.throughput_a, *sa), speed(p.throughput_b, *sb)))
            })
            .collect();
        let queries: Vec<Query<'_>> = pairs
            .iter()
            .map(|(p, _, _)| Query {
                a: &p.a,
                b: &p.b,
                sharing: Sharing {
                    mode: p.mode,
                    share_a: p.share_a,
                    share_b: p.share_b,
                },
            })
            .collect();
        let outlooks = self.current.predict(gpu, &queries)?;
        for ((p, true_a, true_b), o) in pairs.iter().zip(&outlooks) {
            let side = usize::from(!(self.held_out.contains(&p.a) || self.held_out.contains(&p.b)));
            for (truth, predicted, safe) in [
                (*true_a, o.speed_a, o.safe_speed_a),
                (*true_b, o.speed_b, o.safe_speed_b),
            ] {
                let s = &mut scored[side];
                s.0 += (predicted - truth).abs() / truth;
                s.1 += 1;
                s.2 += usize::from(truth >= safe);
            }
        }
        #[allow(clippy::cast_precision_loss)]
        let mean = |(sum, n, _): (f64, usize, usize)| sum / n.max(1) as f64;
        #[allow(clippy::cast_precision_loss)]
        let coverage = |(_, n, covered): (f64, usize, usize)| covered as f64 / n.max(1) as f64;
        Ok(Checkpoint {
            hours,
            observations: self.records.len(),
            observed_settings,
            observed_groups,
            observed_workloads,
            held_out_mape: mean(scored[0]),
            held_out_coverage: coverage(scored[0]),
            known_mape: mean(scored[1]),
            train_s,
        })
    }
}

impl Predictor for FeedbackLearner<'_> {
    fn describe(&self) -> String {
        format!(
            "{}, retrained {} times on what it observed",
            self.current.describe(),
            self.retrains
        )
    }

    fn predict(&mut self, gpu: &str, queries: &[Query<'_>]) -> Result<Vec<Outlook>> {
        self.current.predict(gpu, queries)
    }
}

/// The first multiple of `every` after `t`, however many periods passed (found a period at a
/// time, a retraining every 3.6 µs of a trace of months did not end).
fn next_multiple_after(t: f64, every: f64) -> f64 {
    let next = ((t / every).floor() + 1.0) * every;
    // Rounding may land on `t` itself.
    if next > t { next } else { next + every }
}

impl Learner for FeedbackLearner<'_> {
    fn observe(&mut self, seen: Vec<Seen>) {
        for s in &seen {
            if let Some(record) = self.record(s) {
                self.records.push(record);
                self.since_retrain += 1;
            }
        }
    }

    fn tick(&mut self, t: f64) -> Result<()> {
        if t < self.next_retrain {
            return Ok(());
        }
        self.next_retrain = next_multiple_after(t, self.settings.every_s);
        if self.since_retrain == 0 {
            return Ok(());
        }
        let k = self.retrains + 1;
        let options = ObservedExport {
            name: format!("observed-{k}"),
            gpu: None,
            since_s: None,
            until_s: None,
            store: "simulation".into(),
            command: None,
            date: duet_core::timestamp::today(),
        };
        let (dataset, summary) = observed::dataset(&self.records, &options)
            .map_err(|e| anyhow!("retraining {k}: {e}"))?;
        if dataset.pairs.is_empty() {
            // No co-location with both solo throughputs observed yet: nothing to learn from.
            return Ok(());
        }
        self.retrains = k;
        let started = std::time::Instant::now();
        let dir = (self.retrain)(&dataset, k)?;
        let train_s = started.elapsed().as_secs_f64();
        self.current = ModelPredictor::load_with(&dir, self.settings.engine, &self.profiles)?;
        self.since_retrain = 0;
        let point = self.checkpoint(
            t / 3600.0,
            [
                summary.pairs_written,
                summary.groups_written,
                summary.workloads_written,
            ],
            train_s,
        )?;
        self.checkpoints.push(point);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use duet_core::dataset::Mode;

    use super::*;

    fn repo(path: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
    }

    #[test]
    fn the_next_retraining_is_the_next_period_however_short() {
        assert_eq!(next_multiple_after(0.0, 3600.0), 3600.0);
        assert_eq!(next_multiple_after(3600.0, 3600.0), 7200.0);
        assert_eq!(next_multiple_after(5000.0, 3600.0), 7200.0);
        let (t, every) = (6.0e6, 3.6e-6);
        let next = next_multiple_after(t, every);
        assert!(next > t && next <= t + every * 1.0001, "{next}");
    }

    #[test]
    fn a_seen_group_is_reported_whole_and_pooled_into_the_observed_dataset() {
        let truth = Dataset::read(&repo("datasets/gavel-v100")).expect("gavel-v100");
        let settings = FeedbackSettings {
            every_s: 3600.0,
            noise: 0.0,
            seed: 7,
            engine: EngineKind::Burn,
        };
        let retrain: Retrain<'_> = Box::new(|_, _| Err(anyhow!("not retrained here")));
        let mut learner = FeedbackLearner::new(
            repo("models/default"),
            &truth,
            BTreeSet::new(),
            settings,
            retrain,
        )
        .expect("the default model on gavel-v100");
        let jobs = ["a3c", "cyclegan", "lm-bs20"];
        let alone = |id: &str| Seen {
            t: 10.0,
            a: id.to_string(),
            b: None,
            speed_a: 1.0,
            speed_b: 1.0,
            others: Vec::new(),
        };
        let sharing = Sharing {
            mode: Mode::Space,
            share_a: None,
            share_b: None,
        };
        let group = Seen {
            t: 20.0,
            a: jobs[0].into(),
            b: Some((jobs[1].into(), sharing)),
            speed_a: 0.5,
            speed_b: 0.6,
            others: vec![(jobs[2].into(), None, 0.7)],
        };
        let mut seen: Vec<Seen> = jobs.iter().map(|id| alone(id)).collect();
        seen.push(group);
        learner.observe(seen);
        let record = learner.records.last().expect("the group's record");
        let solo = |id: &str| truth.workload(id).expect("a workload").solo_throughput;
        let o = &record.observation;
        assert_eq!(o.others.len(), 1);
        assert!((o.others[0].throughput - 0.7 * solo(jobs[2])).abs() < 1e-9);
        assert_eq!(record.others[0].workload, jobs[2]);
        let speeds = record.observed_group_speeds().expect("every speed");
        for (got, want) in speeds.iter().zip([0.5, 0.6, 0.7]) {
            assert!((got - want).abs() < 1e-9, "{speeds:?}");
        }
        let options = ObservedExport {
            name: "observed".into(),
            gpu: None,
            since_s: None,
            until_s: None,
            store: "simulation".into(),
            command: None,
            date: "2026-12-05".into(),
        };
        let (dataset, summary) = observed::dataset(&learner.records, &options).expect("dataset");
        assert_eq!((summary.group_runs, summary.groups_written), (1, 1));
        let g = &dataset.groups[0];
        let names: Vec<&str> = g.jobs.iter().map(|j| j.workload.as_str()).collect();
        assert_eq!(names, jobs);
        assert!((g.jobs[1].throughput - 0.6 * solo(jobs[1])).abs() < 1e-9);
    }
}
