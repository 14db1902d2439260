//! `duet dataset ...`: import, inspect, validate, merge.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow};
use duet_core::Provenance;
use duet_core::dataset::{Dataset, Quantiles, Status, Summary, merge};
use duet_core::import::csv::{self, CsvImport};
use duet_core::import::gavel::{self, GavelImport};

use crate::args::{DatasetCommand, ImportSource};
use crate::date::today;

pub fn run(command: DatasetCommand) -> Result<()> {
    match command {
        DatasetCommand::Import { source } => import(source),
        DatasetCommand::Inspect { dir, json } => inspect(&dir, json),
        DatasetCommand::Validate { dir } => {
            let dataset = Dataset::read(&dir)?;
            println!(
                "{}: valid ({} workloads, {} pairs)",
                dir.display(),
                dataset.workloads.len(),
                dataset.pairs.len()
            );
            Ok(())
        }
        DatasetCommand::Merge { shards, out, name } => {
            refuse_existing(&out)?;
            let mut parts: Vec<(PathBuf, Dataset)> = Vec::with_capacity(shards.len());
            for dir in shards {
                let dataset = Dataset::read(&dir)?;
                parts.push((dir, dataset));
            }
            let merged = merge(&name.unwrap_or_else(|| folder_name(&out)), &parts)?;
            merged.write(&out)?;
            report_written(&out, &merged);
            Ok(())
        }
    }
}

/// Checked before any work, so a long import does not end in "already exists".
fn refuse_existing(out: &Path) -> Result<()> {
    duet_core::atomic::refuse_existing(out, |p, m| anyhow!("{}: {m}", p.display()))
}

fn folder_name(out: &Path) -> String {
    out.file_name().map_or_else(
        || "dataset".to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

fn report_written(out: &Path, dataset: &Dataset) {
    println!(
        "wrote {} ({} workloads, {} pairs)",
        out.display(),
        dataset.workloads.len(),
        dataset.pairs.len()
    );
}

fn import(source: ImportSource) -> Result<()> {
    match source {
        ImportSource::Gavel {
            json,
            gpu,
            out,
            name,
            source,
            licence_file,
            date,
        } => {
            refuse_existing(&out)?;
            let text = fs::read_to_string(&json)
                .with_context(|| format!("{}: cannot read", json.display()))?;
            let licence_path = licence_file.or_else(|| {
                let beside = json.with_file_name("LICENSE");
                beside.is_file().then_some(beside)
            });
            let licence_text = match licence_path {
                Some(path) => Some(
                    fs::read_to_string(&path)
                        .with_context(|| format!("{}: cannot read", path.display()))?,
                ),
                None => None,
            };
            let file_name = json
                .file_name()
                .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
            let options = GavelImport {
                gpu,
                name: name.unwrap_or_else(|| folder_name(&out)),
                source: source.unwrap_or_else(|| {
                    format!("Gavel (Narayanan et al., OSDI 2020), file {file_name}")
                }),
                licence_text,
                date: date.unwrap_or_else(today),
            };
            let dataset = gavel::import(&text, &json, &options)?;
            dataset.write(&out)?;
            report_written(&out, &dataset);
            Ok(())
        }
        ImportSource::Csv {
            workloads,
            pairs,
            out,
            gpu,
            name,
            description,
            source,
            measured_by,
            licence,
            date,
        } => {
            refuse_existing(&out)?;
            let options = CsvImport {
                name: name.unwrap_or_else(|| folder_name(&out)),
                description,
                provenance: Provenance {
                    source,
                    gpu,
                    driver: None,
                    host: None,
                    measured_by,
                    tool: format!(
                        "imported by duet {} (`duet dataset import csv`)",
                        env!("CARGO_PKG_VERSION")
                    ),
                    command: None,
                    date: date.unwrap_or_else(today),
                    licence,
                    licence_text: None,
                },
            };
            let dataset = csv::import(&workloads, &pairs, &options)?;
            dataset.write(&out)?;
            report_written(&out, &dataset);
            Ok(())
        }
    }
}

fn inspect(dir: &Path, json: bool) -> Result<()> {
    let dataset = Dataset::read(dir)?;
    let summary = Summary::of(&dataset);
    if json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        print!("{}", render(&summary));
    }
    Ok(())
}

fn speed_cells(q: Option<&Quantiles>) -> String {
    match q {
        Some(q) => format!(
            "{:>7.3} {:>7.3} {:>7.3} {:>7.3}",
            q.min, q.p10, q.median, q.p90
        ),
        None => format!("{:>7} {:>7} {:>7} {:>7}", "-", "-", "-", "-"),
    }
}

/// The human-readable summary table.
pub fn render(s: &Summary) -> String {
    let mut out = String::new();
    let kinds: Vec<String> = s
        .workloads_by_kind
        .iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    let _ = writeln!(out, "dataset     {} (gpu {})", s.name, s.gpu);
    let _ = writeln!(out, "source      {}", s.source);
    let _ = writeln!(out, "workloads   {} ({})", s.workloads, kinds.join(", "));
    let _ = writeln!(out, "features    {}", s.workload_features.join(", "));
    let _ = writeln!(
        out,
        "pairs       {} (feasible {}, infeasible {}, failed {})",
        s.pairs, s.feasible, s.infeasible, s.failed
    );
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{:<10} {:>6} {:>6} {:>6} {:>6} {:>8}   speed: {:>3} {:>7} {:>7} {:>7}",
        "mode", "pairs", "ok", "oom", "crash", "timeout", "min", "p10", "median", "p90"
    );
    let row = |out: &mut String, label: &str, pairs: usize, by: &BTreeMap<Status, usize>, q| {
        let n = |status: Status| by.get(&status).copied().unwrap_or(0);
        let _ = writeln!(
            out,
            "{:<10} {:>6} {:>6} {:>6} {:>6} {:>8}   {}",
            label,
            pairs,
            n(Status::Ok),
            n(Status::Oom),
            n(Status::Crash),
            n(Status::Timeout),
            speed_cells(q)
        );
    };
    for m in &s.by_mode {
        row(
            &mut out,
            m.mode.as_str(),
            m.pairs,
            &m.by_status,
            m.speed.as_ref(),
        );
    }
    row(&mut out, "all", s.pairs, &s.by_status, s.speed.as_ref());
    let speeds = s.speed.as_ref().map_or(0, |q| q.count);
    let _ = writeln!(
        out,
        "\nspeed = co-located throughput / solo throughput, both jobs of every ok pair ({speeds} values)"
    );
    out
}
