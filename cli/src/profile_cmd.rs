//! `duet profile` and `duet workload run`.

use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use duet_core::dataset::Mode;
use duet_profiler::builtin::{self, Device};
use duet_profiler::campaign::{Campaign, GroupBudget, WARM_ITERATIONS, parse_shard};
use duet_profiler::catalog::{Catalog, Source};
use duet_profiler::process::{ITERATION_LINE, Launcher, Running};

use duet_campaign::budgeted::{self, BudgetOptions};
use duet_campaign::probes::{self, ProbeOptions};
use duet_campaign::replay::Budget;
use duet_campaign::{Select, choose::MIN_PAIRS};
use duet_core::dataset::Dataset;
use duet_model::network::TrainConfig;

use crate::args::{ProfileArgs, WorkloadCommand};
use crate::flags;

pub fn workload(command: WorkloadCommand) -> Result<()> {
    let WorkloadCommand::Run {
        name,
        catalog,
        device,
        seconds: run_for,
        timeout,
        progress,
    } = command;
    let catalog = Catalog::read(&catalog)?;
    let spec = catalog
        .get(&name)
        .ok_or_else(|| anyhow!("{}: no workload `{name}`", catalog.path.display()))?
        .clone();
    let device: Device = device
        .parse()
        .map_err(|e: String| anyhow!("--device: {e}"))?;
    let run_for = flags::seconds("--seconds", run_for, flags::MEASURE)?;
    let warm_limit = flags::seconds("--timeout", timeout, flags::MEASURE)?;
    match &spec.source {
        Source::Builtin { builtin, size } if progress => {
            let mut out = std::io::stdout().lock();
            builtin::run(*builtin, spec.kind, *size, device, &mut || {
                writeln!(out, "{ITERATION_LINE}")
                    .and_then(|()| out.flush())
                    .is_ok()
            })
            .map_err(|e| anyhow!("workload `{name}`: {e}"))
        }
        Source::Builtin { builtin, size } => {
            let start = Instant::now();
            // Warm (the first iterations compile kernels and autotune, seconds on a GPU), then
            // the measured window: every iteration's finishing time within it.
            let (mut done, mut opened, mut arrivals) = (0usize, None, Vec::new());
            let mut late = false;
            builtin::run(*builtin, spec.kind, *size, device, &mut || {
                let now = start.elapsed();
                done += 1;
                match opened {
                    None if done >= WARM_ITERATIONS && now >= WARM_UP => {
                        opened = Some(now);
                        arrivals.push(0.0);
                        true
                    }
                    None => {
                        late = now >= warm_limit;
                        !late
                    }
                    Some(at) => {
                        arrivals.push((now - at).as_secs_f64());
                        now - at < run_for
                    }
                }
            })
            .map_err(|e| anyhow!("workload `{name}`: {e}"))?;
            if late {
                bail!(
                    "workload `{name}` was not warm within its {:.1} s limit (--timeout): {done} \
                     iterations finished; a warm-up is at least {WARM_ITERATIONS} iterations and \
                     {:.0} s",
                    warm_limit.as_secs_f64(),
                    WARM_UP.as_secs_f64()
                );
            }
            let rate =
                duet_profiler::process::rate(&arrivals).ok_or_else(|| too_few(&name, run_for))?;
            println!(
                "{name}: {:.2} iterations/s ({builtin}, {}, {}, {device}, {} iterations in the \
                 {:.2} s window after a {:.2} s warm-up)",
                rate.per_second,
                spec.kind,
                size.precision,
                rate.intervals,
                arrivals.last().copied().unwrap_or(0.0),
                opened.unwrap_or_default().as_secs_f64(),
            );
            Ok(())
        }
        Source::Command { .. } => {
            if progress {
                bail!("--progress is for built-ins; `{name}` is a command");
            }
            let launcher = Launcher {
                duet: std::env::current_exe()?,
                catalog: catalog.path.clone(),
                device,
                cpu_set: None,
            };
            let mut running = Running::start(&launcher, &spec, &[]).map_err(|e| anyhow!(e))?;
            let start = Instant::now();
            let exited = |running: &mut Running| {
                running.exited().map(|how| {
                    anyhow!(
                        "workload `{name}` exited ({how}) after {:.1} s\n{}",
                        start.elapsed().as_secs_f64(),
                        running.stderr_tail()
                    )
                })
            };
            let opened = loop {
                if let Some(e) = exited(&mut running) {
                    return Err(e);
                }
                let now = Instant::now();
                if running.iterations() >= WARM_ITERATIONS && now - start >= WARM_UP {
                    break now;
                }
                if now - start >= warm_limit {
                    let done = running.iterations();
                    running.stop();
                    bail!(
                        "workload `{name}` was not warm within its {:.1} s limit (--timeout): \
                         {done} progress lines matched; a warm-up is at least {WARM_ITERATIONS} \
                         iterations and {:.0} s. Does its `progress` pattern match what it prints?",
                        warm_limit.as_secs_f64(),
                        WARM_UP.as_secs_f64()
                    );
                }
                std::thread::sleep(Duration::from_millis(10));
            };
            while opened.elapsed() < run_for {
                if let Some(e) = exited(&mut running) {
                    return Err(e);
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            let end = Instant::now();
            let rate = running.rate_between(opened, end);
            running.stop();
            let rate = rate.ok_or_else(|| too_few(&name, run_for))?;
            println!(
                "{name}: {:.2} iterations/s (command, {} iterations in the {:.2} s window after a \
                 {:.2} s warm-up)",
                rate.per_second,
                rate.intervals,
                (end - opened).as_secs_f64(),
                (opened - start).as_secs_f64()
            );
            Ok(())
        }
    }
}

/// The warm-up of `duet workload run`: at least this long, and [`WARM_ITERATIONS`] iterations.
const WARM_UP: Duration = Duration::from_secs(1);

fn too_few(name: &str, run_for: Duration) -> anyhow::Error {
    anyhow!(
        "workload `{name}` finished fewer than 2 iterations in the {:.1} s window, too few for a \
         rate; give more --seconds",
        run_for.as_secs_f64()
    )
}

pub fn profile(args: ProfileArgs) -> Result<()> {
    // Each workload's own process reads the catalog again (and a resume compares its bytes):
    // a pipe would give them nothing.
    if !std::fs::metadata(&args.catalog).map_or(true, |m| m.is_file()) {
        bail!(
            "--catalog {}: not a regular file (a pipe or a device?); each workload's process reads \
             the catalog again: save it to a file",
            args.catalog.display()
        );
    }
    let catalog = Catalog::read(&args.catalog)?;
    let modes = args
        .modes
        .iter()
        .map(|m| {
            m.trim()
                .parse::<Mode>()
                .map_err(|e| anyhow!("--modes: {e}"))
        })
        .collect::<Result<Vec<_>>>()?;
    // A mode or share named twice would measure every pair of it twice.
    if let Some((k, m)) = modes
        .iter()
        .enumerate()
        .find(|(k, m)| modes[..*k].contains(m))
    {
        bail!("--modes: `{m}` is given twice (as mode {})", k + 1);
    }
    for (k, s) in args.shares.iter().enumerate() {
        if !(*s > 0.0 && *s <= 100.0) {
            bail!("--shares: {s} is outside (0, 100]");
        }
        if args.shares[..k].contains(s) {
            bail!("--shares: {s} is given twice");
        }
    }
    let device: Device = args
        .device
        .parse()
        .map_err(|e: String| anyhow!("--device: {e}"))?;
    let shard = match (&args.shard, std::env::var("JOB_COMPLETION_INDEX")) {
        (Some(s), _) if args.shards.is_some() => {
            bail!(
                "--shard {s} with --shards: give the shard as i/n, or its count alone with JOB_COMPLETION_INDEX"
            )
        }
        (Some(s), _) => Some(parse_shard(s).map_err(|e| anyhow!(e))?),
        (None, Ok(index)) => {
            let count = args.shards.ok_or_else(|| {
                anyhow!("JOB_COMPLETION_INDEX is set: give the shard count with --shards")
            })?;
            Some(
                parse_shard(&format!("{index}/{count}"))
                    .map_err(|e| anyhow!("JOB_COMPLETION_INDEX: {e}"))?,
            )
        }
        // Ignored, the whole grid ran where one shard of it was meant.
        (None, Err(_)) if args.shards.is_some() => bail!(
            "--shards {}: the shard's index comes from JOB_COMPLETION_INDEX, which is not set (a \
             Kubernetes Indexed Job sets it); give --shard i/n to run one shard here",
            args.shards.unwrap_or_default()
        ),
        (None, Err(_)) => None,
    };
    let name = flags::dataset_name(args.name.clone(), &args.out, "campaign")?;
    if let Some(gpu) = &args.gpu {
        flags::not_empty("--gpu", gpu)?;
    }
    let gpu = args.gpu.clone().unwrap_or_else(|| match device {
        Device::Cpu => "cpu".into(),
        Device::Cuda(_) => "gpu".into(),
    });
    let campaign = Campaign {
        launcher: Launcher {
            duet: std::env::current_exe().context("cannot find the duet binary")?,
            catalog: args.catalog.clone(),
            device,
            cpu_set: args.cpu_set.clone(),
        },
        catalog,
        modes,
        shares: args.shares.clone(),
        warmup: flags::seconds("--warmup", args.warmup, flags::MEASURE)?,
        warm_iterations: WARM_ITERATIONS,
        window: flags::seconds("--window", args.window, flags::MEASURE)?,
        window_max: flags::seconds("--window-max", args.window_max, flags::MEASURE)?,
        precision: args.precision,
        repetitions: args.repetitions,
        solo_repetitions: args.solo_repetitions.unwrap_or(args.repetitions),
        timeout: flags::seconds("--timeout", args.timeout, flags::MEASURE)?,
        sample_interval: Duration::from_millis(args.sample_ms),
        seed: args.seed,
        shard,
        out: args.out.clone(),
        resume: args.resume,
        name,
        gpu,
        command_line: std::env::args().collect::<Vec<_>>().join(" "),
        date: flags::date(args.date.clone())?,
        host: std::fs::read_to_string("/etc/hostname")
            .ok()
            .map(|h| h.trim().to_string()),
        group_size: args.group_size,
        group_budget: args.group_budget.as_deref().map(group_budget).transpose()?,
        known_solos: Vec::new(),
    };
    if let Some(dir) = &args.onto {
        let onto = Dataset::read(dir).map_err(|e| anyhow!("--onto {}: {e}", dir.display()))?;
        let options = ProbeOptions {
            onto: (dir.clone(), onto),
            probes: args.probes,
            select: select(&args)?,
            remeasure_solo: args.remeasure_solo,
            priors: priors(&args)?,
            config: fit_config(&args)?,
            workers: workers(),
        };
        let outcome = probes::run(&campaign, &options, &mut crate::progress::Shown::stderr())?;
        for line in probes::summary(&outcome) {
            eprintln!("{line}");
        }
        eprintln!(
            "wrote {} ({} workloads, {} pair settings; probes in {}); merge it with `duet \
             dataset merge --out MERGED {} {}`",
            args.out.display(),
            outcome.dataset.workloads.len(),
            outcome.dataset.pairs.len(),
            duet_core::dataset::CAMPAIGN_FILE,
            dir.display(),
            args.out.display()
        );
        return Ok(());
    }
    if let Some(budget) = &args.budget {
        let options = budget_options(&args, budget)?;
        let outcome = budgeted::run(&campaign, &options, &mut crate::progress::Shown::stderr())?;
        for line in budgeted::summary(&outcome) {
            eprintln!("{line}");
        }
        eprintln!(
            "wrote {} ({} workloads, {} pair settings; choices and audit in {})",
            args.out.display(),
            outcome.dataset.workloads.len(),
            outcome.dataset.pairs.len(),
            duet_core::dataset::CAMPAIGN_FILE
        );
        return Ok(());
    }
    let dataset = campaign.run_with(&mut crate::progress::Shown::stderr())?;
    eprintln!(
        "wrote {} ({} workloads, {} pair settings{})",
        args.out.display(),
        dataset.workloads.len(),
        dataset.pairs.len(),
        if dataset.groups.is_empty() {
            String::new()
        } else {
            format!(", {} group settings", dataset.groups.len())
        }
    );
    Ok(())
}

/// The options of `duet profile --budget`, from the flags.
/// `--group-budget`: a count of groups of each size or a share of them, read as `--budget` is.
fn group_budget(text: &str) -> Result<GroupBudget> {
    let budget: Budget = text
        .parse()
        .map_err(|e: String| anyhow!("--group-budget: {e}"))?;
    Ok(match budget {
        Budget::Fraction(share) => GroupBudget::Share(share),
        Budget::Settings(n) => GroupBudget::Groups(n),
    })
}

fn budget_options(args: &ProfileArgs, budget: &str) -> Result<BudgetOptions> {
    let budget: Budget = budget
        .parse()
        .map_err(|e: String| anyhow!("--budget: {e}"))?;
    let target_mape = match &args.target_mape {
        None => None,
        Some(text) => {
            let t = text.trim();
            let value: f64 = t
                .strip_suffix('%')
                .unwrap_or(t)
                .trim()
                .parse()
                .map_err(|_| {
                    anyhow!("--target-mape `{text}`: expected a percentage such as 8 or 8%")
                })?;
            Some(value / 100.0)
        }
    };
    Ok(BudgetOptions {
        budget,
        select: select(args)?,
        round_size: args.round_size,
        audit: args.audit,
        target_mape,
        priors: priors(args)?,
        config: fit_config(args)?,
        min_pairs: MIN_PAIRS,
        workers: workers(),
    })
}

fn select(args: &ProfileArgs) -> Result<Select> {
    args.select
        .parse()
        .map_err(|e: String| anyhow!("--select: {e}"))
}

/// The recipe of the fits between rounds.
fn fit_config(args: &ProfileArgs) -> Result<TrainConfig> {
    if args.ensemble == 0 || args.max_epochs == 0 {
        bail!("--ensemble and --max-epochs: at least 1");
    }
    if args.ensemble < 2 && select(args)? == Select::Uncertainty {
        bail!(
            "--ensemble {}: --select uncertainty scores a candidate by the members' \
             disagreement, which one member cannot have (every score was 0): at least 2, or \
             --select random",
            args.ensemble
        );
    }
    flags::network_size(&TrainConfig::default().hidden, args.ensemble)?;
    Ok(TrainConfig {
        ensemble: args.ensemble,
        max_epochs: args.max_epochs,
        seed: args.seed,
        ..TrainConfig::default()
    })
}

fn priors(args: &ProfileArgs) -> Result<Vec<(std::path::PathBuf, Dataset)>> {
    args.prior
        .iter()
        .map(|dir| {
            Dataset::read(dir)
                .map(|d| (dir.clone(), d))
                .map_err(|e| anyhow!("--prior {}: {e}", dir.display()))
        })
        .collect()
}

fn workers() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
}
