//! The trace-driven cluster simulator: the trace's pods as jobs on a cluster drawn from the
//! trace's nodes, placed by a policy, progressing at the speeds the oracle (a dataset's measured
//! pairs) says, never at the speeds a model predicts.

mod cluster;
pub mod feedback;
mod jobs;
mod outcome;
mod world;

pub use cluster::Cluster;
use duet_core::progress::{self, Progress};
pub use jobs::{DatasetWorkload, Job, MAX_COMPRESSION, MIN_COMPRESSION, Workload, jobs};
pub use outcome::Outcome;
use outcome::{class_mean, quantile};
use world::{Event, RoundLog, World};

use std::cmp::Reverse;
use std::time::Instant;

use anyhow::{Result, bail};

use crate::predictor::{Oracle, Predictor};
use crate::pricing::PricingConfig;

/// How jobs are placed.
#[derive(Debug)]
pub enum Policy<'p> {
    /// Whole GPUs only, first come first served (a later job that fits may start first).
    Exclusive,
    /// One-GPU pods that asked for part of a GPU are packed best-fit by their request, blind to
    /// interference; others take whole GPUs.
    Packing,
    /// The pricing loop, its slowdowns from this predictor.
    Pricing(&'p mut dyn Predictor),
    /// The pricing loop on a predictor that learns from what the cluster observes.
    Learning(&'p mut dyn feedback::Learner),
}

/// Knobs of one simulation.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// The minimum speed of inference jobs.
    pub slo: f64,
    /// Priority weight of inference (LS) jobs; training jobs weigh 1.
    pub inference_weight: f64,
    /// A waiting job's weight grows by its own size every this many seconds.
    pub aging: f64,
    pub pricing: PricingConfig,
    /// Points of the utilisation series kept for the report.
    pub series_points: usize,
    /// Give the pricing loop the queue's state (GPU release rate, typical runtime).
    pub queue_aware: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            slo: 0.6,
            inference_weight: 2.0,
            aging: 3600.0,
            pricing: PricingConfig::default(),
            series_points: 400,
            queue_aware: true,
        }
    }
}

/// Which policy an outcome is, as the report tells them apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PolicyKind {
    Exclusive,
    Packing,
    /// The pricing loop on a predictor's slowdowns.
    Duet,
    /// The pricing loop on the measured slowdowns.
    Oracle,
    /// The pricing loop on duet's predictions, retrained on what the cluster observed.
    Learning,
}

impl PolicyKind {
    /// Its name in legends.
    pub fn label(self) -> &'static str {
        match self {
            PolicyKind::Exclusive => "exclusive",
            PolicyKind::Packing => "packing",
            PolicyKind::Duet => "pricing + duet",
            PolicyKind::Oracle => "pricing + oracle",
            PolicyKind::Learning => "pricing + duet, learning",
        }
    }
}

/// Runs every job to completion under `policy`; utilisation is reported over `window`.
pub fn simulate(
    cluster: &Cluster,
    jobs: &[Job],
    window: (f64, f64),
    oracle: &Oracle,
    policy: Policy<'_>,
    settings: &Settings,
) -> Result<Outcome> {
    simulate_with(
        cluster,
        jobs,
        window,
        oracle,
        policy,
        settings,
        &mut progress::Lines(|_: &str| {}),
    )
}

/// [`simulate`], telling `watch` how many jobs have completed, and at which simulated hour.
pub fn simulate_with(
    cluster: &Cluster,
    jobs: &[Job],
    window: (f64, f64),
    oracle: &Oracle,
    policy: Policy<'_>,
    settings: &Settings,
    watch: &mut dyn Progress,
) -> Result<Outcome> {
    let wall = Instant::now();
    cluster.check_fits(jobs)?;
    let (kind, name, mut predictor, mut learner) = match policy {
        Policy::Exclusive => (PolicyKind::Exclusive, "exclusive".to_string(), None, None),
        Policy::Packing => (PolicyKind::Packing, "packing".to_string(), None, None),
        Policy::Pricing(p) => {
            let kind = if p.is_measured() {
                PolicyKind::Oracle
            } else {
                PolicyKind::Duet
            };
            (kind, format!("pricing ({})", p.describe()), Some(p), None)
        }
        Policy::Learning(l) => (
            PolicyKind::Learning,
            "pricing, learning".to_string(),
            None,
            Some(l),
        ),
    };
    let mut world = World::new(cluster, jobs, window, oracle, settings);
    if learner.is_some() {
        world.seen = Some(Vec::new());
    }
    let mut log = RoundLog::default();
    let mut placement_times = Vec::new();
    watch.event(progress::Event::Start {
        stage: &name,
        total: jobs.len() as u64,
        unit: "jobs",
    });
    let mut completed = 0u64;
    while let Some(Reverse((now, _))) = world.events.peek().copied() {
        #[allow(clippy::cast_precision_loss)]
        let t = now as f64 / 1e6;
        world.advance_to(t);
        let mut changed = false;
        while let Some(Reverse((at, event))) = world.events.peek().copied() {
            if at != now {
                break;
            }
            world.events.pop();
            match event {
                Event::Arrive { job } => {
                    world.waiting.push(job);
                    changed = true;
                }
                Event::Done { job, version } => {
                    if world.running[job]
                        .as_ref()
                        .is_some_and(|r| r.version == version)
                    {
                        world.finish(job, t);
                        changed = true;
                        completed += 1;
                        watch.event(progress::Event::Step {
                            done: completed,
                            now: &format!("simulated hour {:.1}", t / 3600.0),
                        });
                    }
                }
            }
        }
        if !changed || world.waiting.is_empty() {
            continue;
        }
        let round_started = Instant::now();
        if let Some(l) = learner.as_deref_mut() {
            if let Some(seen) = world.seen.as_mut() {
                l.observe(std::mem::take(seen));
            }
            l.tick(t)?;
        }
        let active: Option<&mut dyn Predictor> = match predictor.as_deref_mut() {
            Some(p) => Some(p),
            None => learner.as_deref_mut().map(|l| l as &mut dyn Predictor),
        };
        match (kind, active) {
            (_, Some(p)) => world.pricing_round(t, p, &oracle.gpu, &mut log)?,
            (PolicyKind::Exclusive, None) => world.exclusive_round(t),
            (_, None) => world.packing_round(t),
        }
        placement_times.push(round_started.elapsed().as_secs_f64() * 1e3);
        if world.running.iter().all(Option::is_none) && !world.waiting.is_empty() {
            let j = world.waiting[0];
            bail!(
                "policy {name}: pod `{}` cannot be placed on an idle cluster",
                jobs[j].pod
            );
        }
    }
    watch.event(progress::Event::Finish);
    let makespan = world.last_t;
    let jct: Vec<f64> = jobs
        .iter()
        .enumerate()
        .map(|(j, job)| world.finished[j].unwrap_or(makespan) - job.arrival)
        .collect();
    let waits: Vec<f64> = jobs
        .iter()
        .enumerate()
        .map(|(j, job)| world.started[j].unwrap_or(makespan) - job.arrival)
        .collect();
    let mut sorted = jct.clone();
    sorted.sort_by(f64::total_cmp);
    let n = jobs.len().max(1) as f64;
    let span = makespan.max(1e-9);
    let window_span = (window.1.min(makespan) - window.0).max(1e-9);
    // Described at the end: a learning predictor has changed its model along the way.
    let described = predictor
        .as_ref()
        .map(|p| p.describe())
        .or_else(|| learner.as_ref().map(|l| l.describe()));
    let name = match (&learner, &described) {
        (Some(_), Some(d)) => format!("pricing ({d}), learning"),
        _ => name,
    };
    let rounds = if described.is_some() {
        &log.times
    } else {
        &placement_times
    };
    let mut round_sorted = rounds.clone();
    round_sorted.sort_by(f64::total_cmp);
    // The series at evenly spaced instants over the arrival window and a quarter beyond it
    // (the weeks after, with a few long jobs left, would flatten the picture).
    let plot_end = (window.1 + 0.25 * (window.1 - window.0)).min(makespan);
    let points = settings.series_points.max(2);
    let series = (0..points)
        .filter_map(|k| {
            #[allow(clippy::cast_precision_loss)]
            let t = window.0 + (plot_end - window.0) * k as f64 / (points - 1) as f64;
            let i = world.trace.partition_point(|(at, _, _)| *at <= t);
            i.checked_sub(1)
                .map(|i| (t, world.trace[i].1, world.trace[i].2))
        })
        .collect();
    let inference_jobs = jobs.iter().filter(|j| j.inference).count();
    Ok(Outcome {
        kind,
        policy: name,
        predictor: described,
        avg_jct: jct.iter().sum::<f64>() / n,
        p50_jct: quantile(&sorted, 0.5),
        p99_jct: quantile(&sorted, 0.99),
        avg_wait: waits.iter().sum::<f64>() / n,
        avg_jct_inference: class_mean(&jct, jobs, true),
        avg_jct_training: class_mean(&jct, jobs, false),
        jct,
        jobs: jobs.len(),
        makespan,
        jobs_per_hour: world
            .finished
            .iter()
            .flatten()
            .filter(|&&t| t >= window.0 && t <= window.1)
            .count() as f64
            / (window_span / 3600.0),
        busy: world.window_busy_area / window_span,
        goodput: world.window_goodput_area / window_span,
        busy_makespan: world.busy_area / span,
        inference_jobs,
        slo_violations: world.slo_jobs_violated.len(),
        slo_violation_time: if world.slo_run_time > 0.0 {
            world.slo_below_time / world.slo_run_time
        } else {
            0.0
        },
        co_located: world.co_located,
        joined: world.joined,
        joined_measured: world.joined_measured,
        peak_gpu_jobs: world.peak_gpu_jobs,
        failed_placements: world.failed_placements,
        rounds: rounds.len(),
        round_mean_ms: rounds.iter().sum::<f64>() / rounds.len().max(1) as f64,
        round_p99_ms: quantile(&round_sorted, 0.99),
        predictor_calls: log.calls,
        predictor_ms: log.predictor.as_secs_f64() * 1e3,
        queries: log.queries,
        wall_s: wall.elapsed().as_secs_f64(),
        series,
    })
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use duet_core::dataset::Dataset;

    use crate::trace::Trace;

    use super::*;

    fn repo(path: &str) -> PathBuf {
        Path::new(
            &std::env::var_os("CARGO_MANIFEST_DIR")
                .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into()),
        )
        .join("..")
        .join(path)
    }

    struct Setup {
        cluster: Cluster,
        jobs: Vec<Job>,
        workload: Workload,
        oracle: Oracle,
    }

    /// The real trace's first `n` jobs on `gpus` GPUs at `load`, truth from gavel-v100.
    fn setup(n: usize, gpus: u32, load: f64) -> Setup {
        let dir = repo("datasets/gavel-v100");
        let dataset = Dataset::read(&dir).expect("test input");
        setup_on(&dir, &dataset, Some(n), gpus, load)
    }

    /// The real trace's first `n` jobs (all with `None`) on `gpus` GPUs at `load`, truth from
    /// `dataset` (read from `dir`).
    fn setup_on(dir: &Path, dataset: &Dataset, n: Option<usize>, gpus: u32, load: f64) -> Setup {
        let trace = Trace::read(&repo("traces/alibaba-gpu-v2023"), None).expect("test input");
        let oracle = Oracle::new(dir, dataset).expect("test input");
        let kinds = DatasetWorkload::of(dataset);
        let cluster = Cluster::draw(&trace, gpus, 7).expect("test input");
        let (jobs, workload) =
            jobs(&trace, gpus, Some(load), None, &kinds, 7, n).expect("test input");
        Setup {
            cluster,
            jobs,
            workload,
            oracle,
        }
    }

    fn run(s: &Setup, policy: Policy<'_>) -> Outcome {
        run_with(s, policy, &Settings::default())
    }

    fn run_with(s: &Setup, policy: Policy<'_>, settings: &Settings) -> Outcome {
        simulate(
            &s.cluster,
            &s.jobs,
            s.workload.window,
            &s.oracle,
            policy,
            settings,
        )
        .expect("test input")
    }

    #[test]
    fn the_load_asked_for_is_the_load_offered_and_the_draw_is_seeded() {
        let s = setup(1500, 64, 1.3);
        assert!((s.workload.load - 1.3).abs() < 1e-3, "{:?}", s.workload);
        assert_eq!(s.jobs.len(), 1500);
        assert_eq!(s.cluster.gpus(), 64);
        let again = setup(1500, 64, 1.3);
        assert_eq!(again.jobs, s.jobs);
        assert_eq!(again.cluster, s.cluster);
    }

    #[test]
    fn every_policy_finishes_every_job_no_faster_than_alone() {
        let s = setup(1500, 64, 1.3);
        let mut oracle = s.oracle.clone();
        for policy in [
            Policy::Exclusive,
            Policy::Packing,
            Policy::Pricing(&mut oracle),
        ] {
            let o = run(&s, policy);
            assert_eq!(o.jct.len(), s.jobs.len());
            for (jct, job) in o.jct.iter().zip(&s.jobs) {
                assert!(
                    *jct >= job.work - 1e-3,
                    "{}: {jct} < {}",
                    o.policy,
                    job.work
                );
            }
            assert!(o.busy > 0.0 && o.busy <= 1.0, "{o:?}");
        }
    }

    #[test]
    fn exclusive_never_shares_and_the_oracle_pricing_never_breaks_an_objective() {
        let s = setup(1500, 64, 1.3);
        let exclusive = run(&s, Policy::Exclusive);
        assert_eq!(exclusive.co_located, 0);
        assert_eq!(exclusive.slo_violations, 0);
        assert!((exclusive.goodput - exclusive.busy).abs() < 1e-9);
        let mut oracle = s.oracle.clone();
        let priced = run(&s, Policy::Pricing(&mut oracle));
        assert!(priced.co_located > 0, "{priced:?}");
        assert_eq!(priced.slo_violations, 0);
        assert_eq!(
            priced.failed_placements, 0,
            "the oracle knows which pairs fail"
        );
        assert!(priced.rounds > 0 && priced.predictor_calls > 0);
        // Interference-blind packing pairs jobs that break their objective.
        let packing = run(&s, Policy::Packing);
        assert!(packing.slo_violations > 0, "{packing:?}");
        // Under load, pricing with the truth beats both.
        assert!(
            priced.avg_jct < exclusive.avg_jct,
            "{priced:?} {exclusive:?}"
        );
        assert!(priced.avg_jct < packing.avg_jct);
    }

    #[test]
    fn footprints_that_do_not_fit_together_keep_jobs_apart() {
        let dir = repo("datasets/gavel-v100");
        let mut dataset = Dataset::read(&dir).expect("gavel");
        for w in &mut dataset.workloads {
            w.features.insert(
                "mem_used_mib".into(),
                duet_core::dataset::FeatureValue::Number(Some(30_000.0)),
            );
        }
        assert!(
            DatasetWorkload::of(&dataset)
                .iter()
                .all(|w| w.memory_mib == Some(30_000.0))
        );
        let s = setup_on(&dir, &dataset, Some(1500), 64, 1.3);
        let co_located = |memory: f64| {
            let mut settings = Settings::default();
            settings.pricing.gpu_memory_mib = Some(memory);
            let mut p = s.oracle.clone();
            run_with(&s, Policy::Pricing(&mut p), &settings).co_located
        };
        assert_eq!(co_located(50_000.0), 0);
        assert!(co_located(80_000.0) > 0);
    }

    #[test]
    fn where_sharing_barely_pays_the_queue_estimate_keeps_the_loop_from_losing() {
        // cpu-dev2c: every pair but one does 0.7 to 1.2 jobs' work.
        let dir = repo("datasets/cpu-dev2c");
        let dataset = Dataset::read(&dir).expect("cpu-dev2c");
        let s = setup_on(&dir, &dataset, None, 64, 1.0);
        let avg_jct = |policy: Policy<'_>, queue_aware: bool| {
            let settings = Settings {
                queue_aware,
                ..Settings::default()
            };
            run_with(&s, policy, &settings).avg_jct
        };
        let exclusive = avg_jct(Policy::Exclusive, true);
        let mut p = s.oracle.clone();
        let aware = avg_jct(Policy::Pricing(&mut p), true);
        let mut p = s.oracle.clone();
        let blind = avg_jct(Policy::Pricing(&mut p), false);
        assert!(aware < exclusive, "{aware} >= {exclusive}");
        assert!(blind > 1.5 * exclusive, "{blind} vs {exclusive}");
    }

    #[test]
    fn a_gpu_takes_a_third_job_only_when_allowed_and_its_truth_says_where_it_came_from() {
        let dir = repo("datasets/cpu-dev2c-triples");
        let dataset = Dataset::read(&dir).expect("cpu-dev2c-triples");
        let s = setup_on(&dir, &dataset, None, 64, 1.3);
        let with = |gpu_jobs: usize, s: &Setup| {
            let mut settings = Settings::default();
            settings.pricing.gpu_jobs = gpu_jobs;
            let mut p = s.oracle.clone();
            run_with(s, Policy::Pricing(&mut p), &settings)
        };
        let pairs = with(2, &s);
        assert_eq!((pairs.joined, pairs.peak_gpu_jobs), (0, 2), "{pairs:?}");
        let triples = with(3, &s);
        assert!(triples.joined > 0, "{triples:?}");
        assert_eq!(triples.peak_gpu_jobs, 3);
        // Every triple is measured in this dataset, and the oracle knows which fail.
        assert_eq!(triples.joined_measured, triples.joined);
        assert_eq!(triples.failed_placements, 0);
        assert_eq!(triples.slo_violations, 0);
        for (jct, job) in triples.jct.iter().zip(&s.jobs) {
            assert!(*jct >= job.work - 1e-3, "{jct} < {}", job.work);
        }
        // Four to a GPU: groups of four were never measured, so their truth is composed.
        let fours = with(4, &s);
        assert_eq!(fours.peak_gpu_jobs, 4);
        assert!(fours.joined_measured < fours.joined, "{fours:?}");
        // A dataset of pairs alone: every group's truth is composed.
        let gavel = setup(1500, 64, 1.3);
        let composed = with(3, &gavel);
        assert!(
            composed.joined > 0 && composed.joined_measured == 0,
            "{composed:?}"
        );
    }

    /// The oracle's prices, recording what a learner would be shown.
    #[derive(Debug)]
    struct Recorder {
        oracle: Oracle,
        seen: Vec<feedback::Seen>,
    }

    impl Predictor for Recorder {
        fn describe(&self) -> String {
            "a recording oracle".into()
        }

        fn predict(
            &mut self,
            gpu: &str,
            queries: &[crate::predictor::Query<'_>],
        ) -> Result<Vec<crate::predictor::Outlook>> {
            self.oracle.predict(gpu, queries)
        }

        fn predict_groups(
            &mut self,
            gpu: &str,
            groups: &[crate::predictor::GroupQuery<'_>],
        ) -> Result<Vec<crate::predictor::GroupOutlook>> {
            self.oracle.predict_groups(gpu, groups)
        }
    }

    impl feedback::Learner for Recorder {
        fn observe(&mut self, seen: Vec<feedback::Seen>) {
            self.seen.extend(seen);
        }

        fn tick(&mut self, _t: f64) -> Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_learner_is_shown_every_measured_group_that_forms_at_its_measured_speeds() {
        let dir = repo("datasets/cpu-dev2c-triples");
        let dataset = Dataset::read(&dir).expect("cpu-dev2c-triples");
        let s = setup_on(&dir, &dataset, None, 64, 1.3);
        let mut settings = Settings::default();
        settings.pricing.gpu_jobs = 3;
        let mut recorder = Recorder {
            oracle: s.oracle.clone(),
            seen: Vec::new(),
        };
        let outcome = run_with(&s, Policy::Learning(&mut recorder), &settings);
        let groups: Vec<&feedback::Seen> = recorder
            .seen
            .iter()
            .filter(|x| !x.others.is_empty())
            .collect();
        assert!(outcome.joined_measured > 0, "{outcome:?}");
        assert_eq!(groups.len(), outcome.joined_measured);
        for g in groups {
            let (b, sharing) = g.b.as_ref().expect("a group has `b`");
            assert_eq!(g.others.len(), 1, "{g:?}");
            let (c, share, speed_c) = &g.others[0];
            let q = crate::predictor::GroupQuery {
                jobs: vec![g.a.as_str(), b.as_str(), c.as_str()],
                mode: sharing.mode,
                shares: None,
            };
            assert!(share.is_none());
            let (truth, source) = s.oracle.lookup_group(&q).expect("measured");
            assert_eq!(source, crate::predictor::Truth::Measured);
            assert_eq!(truth.speeds, [g.speed_a, g.speed_b, *speed_c], "{g:?}");
        }
    }

    #[test]
    fn a_simulation_is_reproducible() {
        let s = setup(1500, 64, 1.3);
        let mut a = s.oracle.clone();
        let mut b = s.oracle.clone();
        let first = run(&s, Policy::Pricing(&mut a));
        let second = run(&s, Policy::Pricing(&mut b));
        assert_eq!(first.jct, second.jct);
    }

    #[test]
    fn a_cluster_smaller_than_the_largest_job_is_refused() {
        let s = setup(6203, 64, 1.0);
        let small = Cluster {
            nodes: vec![4, 4],
            models: vec!["V100M16".into(); 2],
        };
        let e = simulate(
            &small,
            &s.jobs,
            s.workload.window,
            &s.oracle,
            Policy::Exclusive,
            &Settings::default(),
        )
        .expect_err("must fail")
        .to_string();
        assert!(
            e.contains("smaller than the largest job") && e.contains("needs 8 GPUs"),
            "{e}"
        );
        let trace = Trace::read(&repo("traces/alibaba-gpu-v2023"), None).expect("test input");
        let e = Cluster::draw(&trace, 1_000_000, 1)
            .expect_err("must fail")
            .to_string();
        assert!(e.contains("--gpus 1000000"), "{e}");
    }
}
