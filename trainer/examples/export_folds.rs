//! Writes duet's evaluation folds and encoded features for `benchmarks/histgb/histgb.py` (layout:
//! `duet_trainer::export`): every fold of the three splits (and with `--group-by FEATURE` the
//! leave-one-value-out split `unseen_<FEATURE>`) for each seed, each encoded with the feature
//! spec fitted on the fold's training rows.
//!
//! Usage: export_folds <dir> [--seeds 7,8,9] [--group-by model] [--data <dataset folder>]...
//! (default data: the three Gavel datasets, as the default model is trained)

use std::path::{Path, PathBuf};

use duet_core::dataset::Dataset;
use duet_trainer::corpus::Corpus;
use duet_trainer::eval::Split;
use duet_trainer::export;

const USAGE: &str =
    "usage: export_folds <dir> [--seeds 7,8,9] [--group-by model] [--data <dataset folder>]...";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let mut out = None;
    let mut seeds = vec![7, 8, 9];
    let mut data: Vec<PathBuf> = Vec::new();
    let mut splits = Split::ALL.to_vec();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--group-by" => splits.push(Split::unseen(&args.next().ok_or(USAGE)?)),
            "--seeds" => {
                seeds = args
                    .next()
                    .ok_or(USAGE)?
                    .split(',')
                    .map(str::parse)
                    .collect::<Result<_, _>>()?;
            }
            "--data" => data.push(args.next().ok_or(USAGE)?.into()),
            _ if out.is_none() && !arg.starts_with("--") => out = Some(PathBuf::from(arg)),
            _ => return Err(USAGE.into()),
        }
    }
    let out = out.ok_or(USAGE)?;
    if data.is_empty() {
        let root = Path::new(
            &std::env::var_os("CARGO_MANIFEST_DIR")
                .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into()),
        )
        .join("../datasets");
        data = ["gavel-k80", "gavel-p100", "gavel-v100"]
            .iter()
            .map(|n| root.join(n))
            .collect();
    }
    let datasets = data
        .iter()
        .map(|d| Dataset::read(d))
        .collect::<Result<Vec<_>, _>>()?;
    let corpus = Corpus::new(datasets);
    let folds = export::write(&corpus, &splits, &seeds, &out, |f| {
        eprintln!(
            "seed {} {} fold {}: {} train, {} test rows, {} inputs",
            f.seed,
            f.split.as_str(),
            f.fold,
            f.train.len(),
            f.test.len(),
            f.width
        );
    })?;
    std::fs::write(
        out.join("export.json"),
        serde_json::to_string_pretty(&serde_json::json!({
            "data": data.iter().map(|d| d.display().to_string()).collect::<Vec<_>>(),
            "seeds": seeds,
            "splits": splits.iter().map(|s| s.as_str()).collect::<Vec<_>>(),
            "rows": corpus.examples.len(),
            "folds": folds,
        }))?,
    )?;
    println!(
        "{} rows, {folds} folds over seeds {seeds:?} -> {}",
        corpus.examples.len(),
        out.display()
    );
    Ok(())
}
