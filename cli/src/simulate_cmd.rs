//! `duet simulate`: the trace replayed under each policy, one report.

use std::time::Duration;

use anyhow::{Context, Result, bail};
use duet_core::dataset::Dataset;
use duet_model::EngineKind;
use duet_scheduler::predictor::{HttpPredictor, ModelPredictor, Oracle, Predictor, Query};
use duet_scheduler::report::{REPORT_FILE, Report};
use duet_scheduler::sim::{
    self, Cluster, DatasetWorkload, MAX_COMPRESSION, MIN_COMPRESSION, Policy, Settings,
};
use duet_scheduler::trace::Trace;

use crate::args::SimulateArgs;
use crate::serve_cmd::read_token;

const POLICIES: [&str; 4] = ["exclusive", "packing", "duet", "oracle"];

pub fn run(args: &SimulateArgs) -> Result<()> {
    duet_core::atomic::refuse_existing(&args.out, |p, e| {
        anyhow::anyhow!("--out {}: {e}", p.display())
    })?;
    for p in &args.policies {
        if !POLICIES.contains(&p.as_str()) {
            bail!(
                "--policies: unknown policy `{p}`; choose among {}",
                POLICIES.join(", ")
            );
        }
    }
    if !(args.slo > 0.0 && args.slo <= 1.0) {
        bail!("--slo {}: a minimum speed is in (0, 1]", args.slo);
    }
    if !(args.load.is_finite() && args.load > 0.0) {
        bail!("--load {}: must be above 0", args.load);
    }
    if let Some(c) = args.compression
        && !(MIN_COMPRESSION..=MAX_COMPRESSION).contains(&c)
    {
        bail!(
            "--compression {c:?}: arrivals are compressed {MIN_COMPRESSION} to {MAX_COMPRESSION} times"
        );
    }
    if !(args.aging.is_finite() && args.aging > 0.0) {
        bail!("--aging {}: must be above 0 seconds", args.aging);
    }
    if !(args.min_gain.is_finite() && args.min_gain >= 0.0) {
        bail!("--min-gain {}: must be 0 or more", args.min_gain);
    }
    if let Some(m) = args.gpu_memory_mib
        && !(m.is_finite() && m > 0.0)
    {
        bail!("--gpu-memory-mib {m}: must be above 0");
    }
    if !(2..=duet_core::dataset::MAX_GROUP_SIZE).contains(&args.gpu_jobs) {
        bail!(
            "--gpu-jobs {}: a GPU holds 2 to {} jobs (the largest group duet answers)",
            args.gpu_jobs,
            duet_core::dataset::MAX_GROUP_SIZE
        );
    }
    if args.window == 0 {
        bail!("--window: at least one waiting job per round");
    }
    let trace = Trace::read(&args.trace, args.pods.as_deref())?;
    let dataset = Dataset::read(&args.dataset)
        .with_context(|| format!("--dataset {}", args.dataset.display()))?;
    let oracle = Oracle::new(&args.dataset, &dataset)?;
    let kinds = DatasetWorkload::of(&dataset);
    let cluster = Cluster::draw(&trace, args.gpus, args.seed)?;
    let (jobs, workload) = sim::jobs(
        &trace,
        args.gpus,
        args.compression.is_none().then_some(args.load),
        args.compression,
        &kinds,
        args.seed,
        args.max_jobs,
    )?;
    cluster.check_fits(&jobs)?;
    // The predictor is set up (and a server reached) before any simulation runs.
    let mut duet: Option<Box<dyn Predictor>> = None;
    if !args.feedback && args.policies.iter().any(|p| p == "duet") {
        duet = Some(match &args.predictor_url {
            Some(url) => Box::new(HttpPredictor::new(
                url,
                read_token(args.token_file.as_deref())?,
                Duration::from_secs(60),
            )),
            None => {
                let engine: EngineKind = args
                    .engine
                    .parse()
                    .map_err(|e: String| anyhow::anyhow!("--engine: {e}"))?;
                Box::new(
                    ModelPredictor::load(&args.model, engine)
                        .with_context(|| format!("--model {}", args.model.display()))?,
                )
            }
        });
    }
    // One call over every pair of the dataset's workloads and every sharing it measured: a
    // predictor that cannot answer for them stops the run before any policy is simulated.
    if let Some(p) = duet.as_deref_mut() {
        let ids: Vec<&str> = dataset
            .workloads
            .iter()
            .map(|w| w.workload.as_str())
            .collect();
        let mut queries = Vec::new();
        for a in &ids {
            for b in &ids {
                for sharing in oracle.sharings() {
                    queries.push(Query {
                        a,
                        b,
                        sharing: *sharing,
                    });
                }
            }
        }
        p.predict(&oracle.gpu, &queries).with_context(|| {
            format!(
                "the duet policy's predictor ({}) cannot answer for the pairs of {}",
                p.describe(),
                args.dataset.display()
            )
        })?;
    }
    let settings = Settings {
        slo: args.slo,
        aging: args.aging,
        pricing: duet_scheduler::pricing::PricingConfig {
            window: args.window,
            min_gain: args.min_gain,
            gpu_memory_mib: args.gpu_memory_mib,
            gpu_jobs: args.gpu_jobs,
            ..Default::default()
        },
        queue_aware: !args.queue_blind,
        ..Settings::default()
    };
    eprintln!(
        "{} jobs from {} pods on {} GPUs ({} nodes), load {:.2} (arrivals compressed {:.1}x), truth from {}",
        jobs.len(),
        workload.pods,
        cluster.gpus(),
        cluster.nodes.len(),
        workload.load,
        workload.compression,
        args.dataset.display()
    );
    let mut outcomes = Vec::new();
    let mut feedback = None;
    if args.feedback {
        let (ran, summary) = crate::simulate_feedback::FeedbackRun {
            args,
            dataset: &dataset,
            oracle: &oracle,
            cluster: &cluster,
            jobs: &jobs,
            window: workload.window,
            settings: &settings,
        }
        .run()?;
        outcomes = ran;
        feedback = Some(summary);
    }
    for name in POLICIES
        .iter()
        .filter(|p| !args.feedback && args.policies.iter().any(|q| q == *p))
    {
        let mut oracle_predictor = oracle.clone();
        let policy = match *name {
            "exclusive" => Policy::Exclusive,
            "packing" => Policy::Packing,
            "duet" => Policy::Pricing(duet.as_deref_mut().expect("set up above")),
            _ => Policy::Pricing(&mut oracle_predictor),
        };
        let outcome = sim::simulate_with(
            &cluster,
            &jobs,
            workload.window,
            &oracle,
            policy,
            &settings,
            &mut crate::progress::Shown::stderr(),
        )
        .with_context(|| format!("policy {name}"))?;
        eprintln!(
            "{:<10} avg JCT {:>8.2} h  p99 {:>8.2} h  busy {:>5.1}%  SLO violations {:>4}  rounds {:>6}  ({:.1} s)",
            name,
            outcome.avg_jct / 3600.0,
            outcome.p99_jct / 3600.0,
            outcome.busy * 100.0,
            outcome.slo_violations,
            outcome.rounds,
            outcome.wall_s
        );
        outcomes.push(outcome);
    }
    let report = Report {
        command: std::env::args().collect::<Vec<_>>().join(" "),
        date: duet_core::timestamp::today(),
        trace: args.trace.display().to_string(),
        dataset: args.dataset.display().to_string(),
        gpus: cluster.gpus(),
        nodes: cluster.nodes.len(),
        gpu_models: cluster.nodes.iter().zip(&cluster.models).fold(
            std::collections::BTreeMap::new(),
            |mut m, (n, model)| {
                *m.entry(model.clone()).or_insert(0) += n;
                m
            },
        ),
        seed: args.seed,
        slo: args.slo,
        gpu_jobs: args.gpu_jobs,
        measured_groups: oracle.measured_groups(),
        workload,
        outcomes,
        feedback,
    };
    report.write(&args.out)?;
    println!("{}", args.out.join(REPORT_FILE).display());
    Ok(())
}
