//! `duet campaign replay`.

use std::path::PathBuf;

use anyhow::{Context, Result, anyhow, bail};
use duet_campaign::Select;
use duet_campaign::replay::{self, Budget, Replay, ReplayOptions, Stat};
use duet_core::dataset::Dataset;
use duet_model::network::TrainConfig;

use crate::args::{CampaignCommand, ReplayArgs};

pub fn run(command: CampaignCommand) -> Result<()> {
    match command {
        CampaignCommand::Replay(args) => replay_cmd(args),
    }
}

/// What `duet campaign replay` replays from its flags. Checks the flags.
pub fn options(args: &ReplayArgs, command: Option<String>) -> Result<ReplayOptions> {
    let budgets = args
        .budget
        .iter()
        .map(|b| b.parse::<Budget>().map_err(|e| anyhow!("--budget: {e}")))
        .collect::<Result<Vec<_>>>()?;
    let mut selects = Vec::new();
    for s in &args.select {
        let select: Select = s.parse().map_err(|e| anyhow!("--select: {e}"))?;
        if selects.contains(&select) {
            bail!("--select: each method once ({select} is named twice)");
        }
        selects.push(select);
    }
    if args.hidden.is_empty() || args.hidden.contains(&0) {
        bail!("--hidden: give one or more positive layer widths, for example 32,32");
    }
    if args.ensemble < 2 {
        bail!("--ensemble: at least 2 (the members' disagreement is the score)");
    }
    crate::flags::network_size(&args.hidden, args.ensemble)?;
    if args.max_epochs == 0 {
        bail!("--max-epochs: must be at least 1");
    }
    let mut options = ReplayOptions::new(budgets, args.seeds.clone());
    options.selects = selects;
    options.noise = args.noise;
    options.rounds = args.rounds;
    options.audit = args.audit;
    options.min_pairs = args.min_pairs;
    options.probe_units = args.probe_units;
    options.max_probes = args.max_probes;
    options.probe_coverage = args.probe_coverage;
    options.group_by = args.group_by.clone();
    options.config = TrainConfig {
        hidden: args.hidden.clone(),
        ensemble: args.ensemble,
        max_epochs: args.max_epochs,
        patience: args.patience,
        ..TrainConfig::default()
    };
    options.command = command;
    Ok(options)
}

fn replay_cmd(args: ReplayArgs) -> Result<()> {
    duet_core::atomic::refuse_existing(&args.out, |p, m| anyhow!("{}: {m}", p.display()))?;
    let mut options = options(&args, Some(crate::train_cmd::command_line()))?;
    let read = |flag: &str, dirs: &[PathBuf]| {
        dirs.iter()
            .map(|dir| {
                Dataset::read(dir)
                    .with_context(|| format!("{flag} {}", dir.display()))
                    .map(|d| (dir.clone(), d))
            })
            .collect::<Result<Vec<(PathBuf, Dataset)>>>()
    };
    let data = read("--data", &args.data)?;
    options.priors = read("--prior", &args.prior)?;
    // A dataset given twice (the same folder or a copy of its files) would count its settings
    // twice: refused, as `duet train` refuses it (a prior holding replayed settings is refused
    // by the replay, naming them).
    if let Some((later, first, copied)) = duet_model::artifact::given_twice(&args.data) {
        bail!(
            "--data {}: the same dataset as --data {}{}, given twice (its settings would count \
             twice)",
            args.data[later].display(),
            args.data[first].display(),
            if copied {
                " (the same files, copied)"
            } else {
                ""
            }
        );
    }
    let result = replay::replay(&data, &options, &mut crate::progress::Shown::stderr())?;
    duet_campaign::report::write(&result, &args.out)?;
    summary(&result);
    println!("wrote {}", args.out.display());
    Ok(())
}

fn pct(x: f64) -> String {
    if x.is_finite() {
        format!("{:.2}%", 100.0 * x)
    } else {
        "-".to_string()
    }
}

/// The report's main figures on stdout.
fn summary(r: &Replay) {
    for c in &r.curves {
        for p in &c.points {
            println!(
                "{:<12} {:>6} ({:>4} settings)  test MAPE {:>7} ± {:.2}  p90 coverage {}",
                c.select.as_str(),
                p.budget,
                p.settings,
                pct(p.mape.mean),
                100.0 * p.mape.sd,
                pct(p.p90_coverage.mean)
            );
        }
        println!(
            "{:<12} audit interval held the truth in {} of {} replays",
            c.select.as_str(),
            c.audit_held,
            c.audits
        );
    }
    println!(
        "{:<12} {:>6} ({:>4} settings)  test MAPE {:>7} ± {:.2}  p90 coverage {}",
        "full data",
        "",
        r.full.settings,
        pct(r.full.mape.mean),
        100.0 * r.full.mape.sd,
        pct(r.full.p90_coverage.mean)
    );
    for p in &r.probes {
        let at = |s: &[Stat]| s.iter().map(|x| pct(x.mean)).collect::<Vec<_>>().join(" ");
        println!(
            "probes, {} held out, K = 0..: chosen {} | random {}",
            p.held_out,
            at(&p.chosen),
            at(&p.random)
        );
        if !p.chosen_coverage.is_empty() {
            println!(
                "probes, {} held out, p90 coverage at K = 0..: chosen {} | random {}",
                p.held_out,
                at(&p.chosen_coverage),
                at(&p.random_coverage)
            );
        }
    }
}
