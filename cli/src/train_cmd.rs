//! `duet train`.

use anyhow::{Result, bail};
use duet_model::network::{DEFAULT_SEEDS, GroupNetwork, PointLoss, TrainConfig, TrainDevice};
use duet_trainer::pipeline::{self, TrainOptions};

use crate::args::TrainArgs;
use duet_core::timestamp::today;

pub fn run(args: TrainArgs) -> Result<()> {
    let options = options(args, Some(command_line()))?;
    let summary = pipeline::run_with(&options, &mut crate::progress::Shown::stderr())?;
    report(&options, &summary);
    Ok(())
}

/// This process's command line as one shell line (`duet train ...`), for `model.json` (and
/// a replay's report).
pub fn command_line() -> String {
    let quote = |a: String| {
        let plain = !a.is_empty()
            && a.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./,:=+@%".contains(c));
        if plain {
            a
        } else {
            format!("'{}'", a.replace('\'', "'\\''"))
        }
    };
    std::iter::once("duet".to_string())
        .chain(std::env::args().skip(1).map(quote))
        .collect::<Vec<_>>()
        .join(" ")
}

/// What `duet train` trains from its flags: with only `--data` and `--out`, the recipe of the
/// shipped default model (`TrainConfig::default()` and `DEFAULT_SEEDS`). Checks the flags.
pub fn options(args: TrainArgs, command: Option<String>) -> Result<TrainOptions> {
    let device = match args.device.as_str() {
        "cpu" => TrainDevice::Cpu,
        "cuda" => TrainDevice::Cuda(0),
        d => match d.strip_prefix("cuda:").map(str::parse::<usize>) {
            Some(Ok(index)) => TrainDevice::Cuda(index),
            _ => bail!("--device {d}: unknown device, expected cpu, cuda or cuda:N"),
        },
    };
    if let TrainDevice::Cuda(index) = device
        && !cfg!(feature = "cuda")
    {
        bail!(
            "--device {}: this duet was built without the `cuda` feature; rebuild with `cargo build --release --features cuda` (cuda:{index})",
            args.device
        );
    }
    if args.hidden.is_empty() || args.hidden.contains(&0) {
        bail!("--hidden: give one or more positive layer widths, for example 64,64");
    }
    if args.ensemble == 0 {
        bail!("--ensemble: must be at least 1");
    }
    crate::flags::network_size(&args.hidden, args.ensemble)?;
    if !(args.learning_rate.is_finite() && args.learning_rate > 0.0) {
        bail!("--learning-rate: must be a positive number");
    }
    if args.max_epochs == 0 {
        bail!("--max-epochs: must be at least 1");
    }
    // --seed N: that one seed; --final-only fits with the first seed and evaluates nothing.
    let seeds = match args.seed {
        Some(seed) => vec![seed],
        None => args.seeds,
    };
    let mut distinct = seeds.clone();
    distinct.sort_unstable();
    distinct.dedup();
    if distinct.len() != seeds.len() {
        bail!("--seeds: each seed once (a repeated seed repeats the same folds and weights)");
    }
    let config = TrainConfig {
        hidden: args.hidden,
        max_epochs: args.max_epochs,
        ensemble: args.ensemble,
        device,
        learning_rate: args.learning_rate,
        patience: args.patience,
        identities: !args.no_identities,
        family_dropout: !args.no_family_dropout,
        group_network: match args.group_network.as_str() {
            "always" => GroupNetwork::Always,
            "never" => GroupNetwork::Never,
            _ => GroupNetwork::Auto,
        },
        loss: if args.loss == "squared" {
            PointLoss::Squared
        } else {
            PointLoss::Absolute
        },
        seed: seeds.first().copied().unwrap_or(DEFAULT_SEEDS[0]),
        ..TrainConfig::default()
    };
    let name = args.name.unwrap_or_else(|| {
        args.out
            .file_name()
            .map_or_else(|| "model".into(), |n| n.to_string_lossy().into_owned())
    });
    Ok(TrainOptions {
        data: args.data,
        out: args.out,
        name,
        config,
        // One seed is evaluated as `config.seed` alone; --final-only evaluates nothing.
        seeds: if seeds.len() > 1 && !args.final_only {
            seeds
        } else {
            Vec::new()
        },
        created: today(),
        final_only: args.final_only,
        command,
        group_by: args.group_by,
        family: args.family,
    })
}

/// Prints the evaluation's summary and where the model went.
fn report(options: &TrainOptions, summary: &pipeline::TrainSummary) {
    for w in &summary.warnings {
        eprintln!("warning: {w}");
    }
    for r in summary
        .meta
        .metrics
        .iter()
        .filter(|r| r.gpu == "all" && r.predictor == "mlp")
    {
        let sd = summary.meta.metrics_sd.iter().find(|s| {
            (s.split, &s.predictor, &s.gpu, &s.mode) == (r.split, &r.predictor, &r.gpu, &r.mode)
        });
        let pm = |f: fn(&duet_model::accuracy::Metrics) -> f64, scale: f64| {
            sd.map_or(String::new(), |s| {
                format!(" ± {:.2}", f(&s.metrics) * scale)
            })
        };
        let percent = |x: Option<f64>| x.map_or("-".to_string(), |x| format!("{:.1}%", x * 100.0));
        println!(
            "{:<17} MAPE speed {:>6.2}%{}  Spearman {:.3}  p90 coverage {}  p90/median {:.3}",
            r.split.as_str(),
            r.metrics.mape_speed * 100.0,
            pm(|m| m.mape_speed, 100.0),
            r.metrics.spearman,
            percent(r.metrics.p90_coverage),
            r.metrics.p90_width.unwrap_or(f64::NAN),
        );
    }
    if options.final_only {
        println!("final only: no cross-validated evaluation was run; model.json has no metrics");
    }
    println!(
        "wrote {} (version {})",
        options.out.display(),
        summary.meta.version
    );
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use clap::Parser;
    use duet_model::artifact::ModelMeta;

    use super::*;
    use crate::args::{Cli, Command};

    fn parse(line: &[&str]) -> TrainOptions {
        let cli = Cli::try_parse_from(line).expect("the command line parses");
        let Command::Train(args) = cli.command else {
            panic!("not a train command: {line:?}");
        };
        options(args, None).expect("the flags are accepted")
    }

    /// The seeds a run evaluates: `seeds`, or `config.seed` alone.
    fn evaluated(o: &TrainOptions) -> Vec<u64> {
        if o.seeds.is_empty() {
            vec![o.config.seed]
        } else {
            o.seeds.clone()
        }
    }

    fn shipped() -> ModelMeta {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/default/model.json");
        let text = std::fs::read_to_string(&path).expect("models/default/model.json");
        serde_json::from_str(&text).expect("the shipped model.json")
    }

    #[test]
    fn data_and_out_alone_train_the_shipped_recipe() {
        let meta = shipped();
        let o = parse(&["duet", "train", "--data", "d", "--out", "m"]);
        assert_eq!(o.config, meta.config);
        let evaluation = meta
            .evaluation
            .expect("the shipped model records its evaluation");
        assert_eq!(evaluated(&o), evaluation.seeds);
        assert_eq!(o.final_only, evaluation.final_only);
    }

    #[test]
    fn the_recorded_command_is_the_recipe() {
        let meta = shipped();
        let command = meta
            .command
            .clone()
            .expect("models/default records its command");
        let words: Vec<&str> = command.split_whitespace().collect();
        assert_eq!(words[..2], ["duet", "train"], "{command}");
        let o = parse(&words);
        assert_eq!(o.config, meta.config);
        let evaluation = meta.evaluation.expect("evaluation");
        assert_eq!(evaluated(&o), evaluation.seeds);
    }

    #[test]
    fn one_seed_and_final_only_evaluate_one_seed() {
        let o = parse(&["duet", "train", "--data", "d", "--out", "m", "--seed", "11"]);
        assert_eq!(evaluated(&o), vec![11]);
        let o = parse(&["duet", "train", "--data", "d", "--out", "m", "--final-only"]);
        assert!(o.final_only);
        assert_eq!(evaluated(&o), vec![DEFAULT_SEEDS[0]]);
        let o = parse(&[
            "duet", "train", "--data", "d", "--out", "m", "--seeds", "3,4",
        ]);
        assert_eq!(evaluated(&o), vec![3, 4]);
        assert_eq!(o.config.seed, 3);
    }

    #[test]
    fn final_only_with_several_seeds_is_refused() {
        let line = [
            "duet",
            "train",
            "--data",
            "d",
            "--out",
            "m",
            "--final-only",
            "--seeds",
            "7,8",
        ];
        assert!(Cli::try_parse_from(line).is_err());
    }
}
