//! `duet dataset ...`: import, inspect, validate, merge.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use duet_core::Provenance;
use duet_core::dataset::{CAMPAIGN_FILE, Dataset, Quantiles, Status, Summary, merge};
use duet_core::import::csv::{self, CsvImport};
use duet_core::import::gavel::{self, GavelImport};
use duet_core::import::observed::{self, ObservedExport};
use duet_server::store::StateLocation;

use crate::args::{DatasetCommand, ImportSource};
use crate::flags;
use duet_core::timestamp::today;

pub fn run(command: DatasetCommand) -> Result<()> {
    match command {
        DatasetCommand::Import { source } => import(source),
        DatasetCommand::Inspect { dir, json } => inspect(&dir, json),
        DatasetCommand::Validate { dir } => {
            // The raw counter series too, where the folder has them: read whole or named.
            let (dataset, samples) = Dataset::read_with_samples(&dir)?;
            let series = if samples.is_empty() {
                String::new()
            } else {
                format!(", {} counter samples", samples.len())
            };
            println!(
                "{}: valid ({} workloads, {} pairs{series})",
                dir.display(),
                dataset.workloads.len(),
                dataset.pairs.len()
            );
            Ok(())
        }
        DatasetCommand::Export {
            state,
            state_file,
            out,
            gpu,
            each_device,
            since,
            until,
            name,
            json,
        } => {
            refuse_existing(&out)?;
            let time = |flag: &str, value: Option<String>| {
                value
                    .map(|v| {
                        duet_core::timestamp::parse_rfc3339(&v).map_err(|e| anyhow!("{flag}: {e}"))
                    })
                    .transpose()
            };
            let location = crate::serve_cmd::read_state(state.as_deref(), state_file.as_deref())?
                .ok_or_else(|| {
                anyhow!(
                    "no store: give --state, --state-file or {}",
                    crate::serve_cmd::STATE_ENV
                )
            })?;
            let options = ObservedExport {
                name: flags::dataset_name(name, &out, "dataset")?,
                gpu,
                since_s: time("--since", since)?,
                until_s: time("--until", until)?,
                store: location.describe(),
                command: Some(redacted_command(state.as_deref(), &location)),
                date: today(),
            };
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let records = runtime
                .block_on(duet_server::store::all_observations(&location))
                .map_err(|e| anyhow!(e))?;
            if !each_device {
                return export(&records, &options, &out, json);
            }
            let devices: std::collections::BTreeSet<&str> =
                records.iter().map(|r| r.observation.gpu.as_str()).collect();
            if devices.is_empty() {
                return Err(anyhow!(
                    "{}: no observations to export",
                    location.describe()
                ));
            }
            fs::create_dir_all(&out).with_context(|| out.display().to_string())?;
            for device in devices {
                let folder = device
                    .chars()
                    .map(|c| {
                        if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                            c
                        } else {
                            '_'
                        }
                    })
                    .collect::<String>();
                let options = ObservedExport {
                    gpu: Some(device.to_string()),
                    name: format!("{}-{folder}", options.name),
                    ..options.clone()
                };
                export(&records, &options, &out.join(folder), json)?;
            }
            Ok(())
        }
        DatasetCommand::Merge { shards, out, name } => {
            refuse_existing(&out)?;
            let mut parts: Vec<(PathBuf, Dataset)> = Vec::with_capacity(shards.len());
            for dir in shards {
                let dataset = Dataset::read(&dir)?;
                parts.push((dir, dataset));
            }
            let merged = merge(&flags::dataset_name(name, &out, "dataset")?, &parts)?;
            merged.write(&out)?;
            for (dir, _) in &parts {
                let record = dir.join(CAMPAIGN_FILE);
                if record.is_file() {
                    eprintln!(
                        "note: {} (a budgeted campaign's record) is not carried into the merged \
                         dataset: its audit speaks for that shard's unmeasured settings only",
                        record.display()
                    );
                }
                let samples = dir.join(duet_core::dataset::SAMPLES_FILE);
                if samples.is_file() {
                    eprintln!(
                        "note: {} (the shard's raw counter series) is not carried into the merged \
                         dataset: a workload profiled in several shards has its repetitions \
                         pooled, so its runs' names would collide; keep the shard for them",
                        samples.display()
                    );
                }
            }
            report_written(&out, &merged);
            Ok(())
        }
    }
}

/// Writes the dataset of `records` that `options` choose into `out`, and says what it kept.
fn export(
    records: &[duet_core::api::ObservationRecord],
    options: &ObservedExport,
    out: &Path,
    json: bool,
) -> Result<()> {
    let (dataset, summary) =
        observed::dataset(records, options).map_err(|e| anyhow!("{}: {e}", options.store))?;
    if dataset.pairs.is_empty() {
        bail!(
            "{}: none of the {} co-locations observed{} has an observed solo throughput for both \
             jobs ({} settings left out), so there is nothing to learn from yet; report solo runs \
             or `solo_throughput_a`/`_b` with the co-locations",
            options.store,
            summary.co_locations,
            options
                .gpu
                .as_deref()
                .map_or_else(String::new, |g| format!(" on {g}")),
            summary.settings_without_solo
        );
    }
    dataset.write(out)?;
    if json {
        println!("{}", serde_json::to_string(&summary)?);
    } else {
        report_written(out, &dataset);
        println!(
            "read {} observations ({} outside the device or time range): {} co-locations of \
             two jobs in {} settings, {} of three or more in {}, {} settings left out without \
             observed solo throughputs for every job; {} solo runs; {} workloads of unknown \
             kind written as train",
            summary.read,
            summary.outside,
            summary.co_locations,
            summary.settings,
            summary.group_runs,
            summary.group_settings,
            summary.settings_without_solo,
            summary.solo_runs,
            summary.kind_unknown
        );
    }
    Ok(())
}

/// The command line for the provenance, with a database's password left out.
fn redacted_command(state: Option<&str>, location: &StateLocation) -> String {
    std::env::args()
        .map(|a| {
            let Some(state) = state else {
                return a;
            };
            if a == state {
                location.describe()
            } else if let Some(v) = a.strip_prefix("--state=")
                && v == state
            {
                format!("--state={}", location.describe())
            } else {
                a
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Checked before any work, so a long import does not end in "already exists".
fn refuse_existing(out: &Path) -> Result<()> {
    duet_core::atomic::refuse_existing(out, |p, m| anyhow!("{}: {m}", p.display()))
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
            let text = duet_core::input::read_text(&json)
                .map_err(|e| anyhow!("{}: {e}", json.display()))?;
            let licence_path = licence_file.or_else(|| {
                let beside = json.with_file_name("LICENSE");
                beside.is_file().then_some(beside)
            });
            let licence_text = match licence_path {
                Some(path) => Some(
                    duet_core::input::read_text(&path)
                        .map_err(|e| anyhow!("{}: {e}", path.display()))?,
                ),
                None => None,
            };
            let file_name = json
                .file_name()
                .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
            let options = GavelImport {
                gpu,
                name: flags::dataset_name(name, &out, "dataset")?,
                source: source.unwrap_or_else(|| {
                    format!("Gavel (Narayanan et al., OSDI 2020), file {file_name}")
                }),
                licence_text,
                date: flags::date(date)?,
            };
            let dataset = gavel::import(&text, &json, &options)?;
            dataset.write(&out)?;
            report_written(&out, &dataset);
            Ok(())
        }
        ImportSource::Csv {
            workloads,
            pairs,
            groups,
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
            flags::not_empty("--gpu", &gpu)?;
            let options = CsvImport {
                name: flags::dataset_name(name, &out, "dataset")?,
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
                    date: flags::date(date)?,
                    licence,
                    licence_text: None,
                },
            };
            let dataset = csv::import(&workloads, &pairs, groups.as_deref(), &options)?;
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
    if s.by_group_size.iter().any(|g| g.size > 2) {
        let _ = writeln!(
            out,
            "\n{:<10} {:>6} {:>6} {:>6} {:>6} {:>8}   speed: {:>3} {:>7} {:>7} {:>7}",
            "jobs", "sets", "ok", "oom", "crash", "timeout", "min", "p10", "median", "p90"
        );
        for g in &s.by_group_size {
            let label = if g.size == 2 {
                "2 (pairs)".to_string()
            } else {
                g.size.to_string()
            };
            row(&mut out, &label, g.settings, &g.by_status, g.speed.as_ref());
        }
    }
    if !s.compositions.is_empty() {
        let _ = writeln!(out);
    }
    for c in &s.compositions {
        // `-` where no job had every pair measured: nothing was scored.
        let mape = c
            .mape_speed
            .map_or_else(|| format!("{:>6}", "-"), |m| format!("{:>5.1}%", m * 100.0));
        let bias = c
            .bias_speed
            .map_or_else(|| "-".to_string(), |b| format!("{b:+.3}"));
        let _ = writeln!(
            out,
            "groups of {} ({} {}) from their measured pairs by {:<7}: MAPE {mape}, bias {bias} ({} jobs{})",
            c.size,
            c.gpu,
            c.mode,
            c.rule.as_str(),
            c.jobs,
            if c.without_pairs > 0 {
                format!(", {} without every pair", c.without_pairs)
            } else {
                String::new()
            }
        );
    }
    let speeds = s.speed.as_ref().map_or(0, |q| q.count);
    let _ = writeln!(
        out,
        "\nspeed = co-located throughput / solo throughput, both jobs of every ok pair ({speeds} values)"
    );
    if let Some(e) = &s.speed_relative_se {
        let _ = writeln!(
            out,
            "measured to a relative standard error of {:.2}% (median; p90 {:.2}%, max {:.2}%) in \
             the {} speeds whose windows estimated one",
            e.median * 100.0,
            e.p90 * 100.0,
            e.max * 100.0,
            e.count
        );
    }
    out
}
