//! `duet train`.

use anyhow::{Result, bail};
use duet_model::network::{PointLoss, TrainConfig, TrainDevice};
use duet_trainer::pipeline::{self, TrainOptions};

use crate::args::TrainArgs;
use duet_core::timestamp::today;

pub fn run(args: TrainArgs) -> Result<()> {
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
    if !(args.learning_rate.is_finite() && args.learning_rate > 0.0) {
        bail!("--learning-rate: must be a positive number");
    }
    if args.max_epochs == 0 {
        bail!("--max-epochs: must be at least 1");
    }
    let mut distinct = args.seeds.clone();
    distinct.sort_unstable();
    distinct.dedup();
    if distinct.len() != args.seeds.len() {
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
        loss: if args.loss == "squared" {
            PointLoss::Squared
        } else {
            PointLoss::Absolute
        },
        seed: args.seeds.first().copied().unwrap_or(args.seed),
        ..TrainConfig::default()
    };
    let name = args.name.unwrap_or_else(|| {
        args.out
            .file_name()
            .map_or_else(|| "model".into(), |n| n.to_string_lossy().into_owned())
    });
    let options = TrainOptions {
        data: args.data,
        out: args.out,
        name,
        config,
        seeds: args.seeds,
        created: today(),
        final_only: args.final_only,
        group_by: args.group_by,
    };
    let summary = pipeline::run_with(&options, &mut crate::progress::Shown::stderr())?;
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
    Ok(())
}
