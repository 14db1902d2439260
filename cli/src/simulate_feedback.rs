//! `duet simulate --feedback`: a model trained without some of the dataset's workloads, the
//! pricing loop run on it with and without learning from what the cluster observes, and on the
//! oracle. The learning itself is `duet_scheduler::sim::feedback`; this module only prepares
//! the datasets and trains the models (the scheduler does not depend on the trainer).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use duet_core::dataset::Dataset;
use duet_core::rng::Rng;
use duet_model::EngineKind;
use duet_model::network::TrainConfig;
use duet_scheduler::predictor::{ModelPredictor, Oracle};
use duet_scheduler::report::FeedbackSummary;
use duet_scheduler::sim::feedback::{self, FeedbackLearner, FeedbackSettings};
use duet_scheduler::sim::{self, Cluster, Job, Outcome, Policy, Settings};
use duet_trainer::pipeline::{self, TrainOptions};

use crate::args::SimulateArgs;

/// The runs of a feedback simulation: exclusive, pricing on the first model, the oracle, and
/// pricing while learning; with what the learning did.
pub struct FeedbackRun<'a> {
    pub args: &'a SimulateArgs,
    pub dataset: &'a Dataset,
    pub oracle: &'a Oracle,
    pub cluster: &'a Cluster,
    pub jobs: &'a [Job],
    pub window: (f64, f64),
    pub settings: &'a Settings,
}

/// Trains the default model's kind of ensemble on `data`, with no evaluation, into `out`.
fn train(data: Vec<PathBuf>, out: &Path, name: &str, seed: u64) -> Result<()> {
    let options = TrainOptions {
        data,
        out: out.to_path_buf(),
        name: name.to_string(),
        config: TrainConfig {
            seed,
            ..TrainConfig::default()
        },
        seeds: Vec::new(),
        created: duet_core::timestamp::today(),
        final_only: true,
        command: None,
        group_by: None,
        family: None,
    };
    pipeline::run(&options, |_| {}).with_context(|| format!("training {name}"))?;
    Ok(())
}

impl FeedbackRun<'_> {
    pub fn run(&self) -> Result<(Vec<Outcome>, FeedbackSummary)> {
        let args = self.args;
        if !(args.held_out > 0.0 && args.held_out < 1.0) {
            bail!("--held-out {}: a share in (0, 1)", args.held_out);
        }
        // Below a simulated second (a subnormal value made the next retraining infinitely far).
        if !(args.retrain_hours.is_finite() && args.retrain_hours * 3600.0 >= 1.0) {
            bail!(
                "--retrain-hours {}: must be at least a simulated second (1/3600)",
                args.retrain_hours
            );
        }
        if !(args.feedback_noise.is_finite() && args.feedback_noise >= 0.0) {
            bail!(
                "--feedback-noise {}: must be 0 or more",
                args.feedback_noise
            );
        }
        let engine: EngineKind = args
            .engine
            .parse()
            .map_err(|e: String| anyhow!("--engine: {e}"))?;
        let truth = self.dataset;
        let mut ids: Vec<String> = truth.workloads.iter().map(|w| w.workload.clone()).collect();
        Rng::new(args.seed).shuffle(&mut ids);
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss
        )]
        let n = ((ids.len() as f64 * args.held_out).round() as usize).clamp(1, ids.len() - 1);
        let held_out: BTreeSet<String> = ids[..n].iter().cloned().collect();
        let work = duet_core::atomic::working_folder("duet-feedback-")
            .context("a working folder for the feedback models")?;
        // The campaign data the first model sees: every pair and group without a held-out
        // workload.
        let mut known = truth.clone();
        known.meta.name = format!("{}-known", truth.meta.name);
        known.workloads.retain(|w| !held_out.contains(&w.workload));
        known
            .pairs
            .retain(|p| !held_out.contains(&p.a) && !held_out.contains(&p.b));
        known
            .groups
            .retain(|g| g.jobs.iter().all(|j| !held_out.contains(&j.workload)));
        known.meta.modes = duet_core::dataset::modes_of(&known.pairs, &known.groups);
        let known_dir = work.path().join("known");
        known.write(&known_dir)?;
        let first = work.path().join("model-0");
        eprintln!(
            "feedback: training the first model without {} of {} workloads",
            held_out.len(),
            ids.len()
        );
        train(vec![known_dir.clone()], &first, "feedback-0", args.seed)?;
        let retrain = Box::new(|observed: &Dataset, k: usize| -> Result<PathBuf> {
            let observed_dir = work.path().join(format!("observed-{k}"));
            observed.write(&observed_dir)?;
            let out = work.path().join(format!("model-{k}"));
            train(
                vec![known_dir.clone(), observed_dir],
                &out,
                &format!("feedback-{k}"),
                args.seed,
            )?;
            Ok(out)
        });
        let settings = FeedbackSettings {
            every_s: args.retrain_hours * 3600.0,
            noise: args.feedback_noise,
            seed: args.seed,
            engine,
        };
        let mut outcomes = Vec::new();
        let mut simulate = |name: &str, policy: Policy<'_>| -> Result<()> {
            let outcome = sim::simulate_with(
                self.cluster,
                self.jobs,
                self.window,
                self.oracle,
                policy,
                self.settings,
                &mut crate::progress::Shown::stderr(),
            )
            .with_context(|| format!("policy {name}"))?;
            eprintln!(
                "{name:<10} avg JCT {:>8.3} h  busy {:>5.1}%  SLO violations {:>4}  ({:.1} s)",
                outcome.avg_jct / 3600.0,
                outcome.busy * 100.0,
                outcome.slo_violations,
                outcome.wall_s
            );
            outcomes.push(outcome);
            Ok(())
        };
        simulate("exclusive", Policy::Exclusive)?;
        let mut fixed = ModelPredictor::load_with(&first, engine, &feedback::profiles(truth)?)?;
        simulate("duet", Policy::Pricing(&mut fixed))?;
        let mut oracle = self.oracle.clone();
        simulate("oracle", Policy::Pricing(&mut oracle))?;
        let mut learner = FeedbackLearner::new(first, truth, held_out.clone(), settings, retrain)?;
        simulate("learning", Policy::Learning(&mut learner))?;
        for c in &learner.checkpoints {
            eprintln!(
                "feedback: hour {:>6.1}  {:>6} observations  held-out MAPE {:>6.2}%  coverage {:>5.1}%",
                c.hours,
                c.observations,
                c.held_out_mape * 100.0,
                c.held_out_coverage * 100.0
            );
        }
        let summary = FeedbackSummary {
            held_out: held_out.into_iter().collect(),
            workloads: ids.len(),
            retrain_hours: args.retrain_hours,
            noise: args.feedback_noise,
            checkpoints: learner.checkpoints.clone(),
        };
        Ok((outcomes, summary))
    }
}
