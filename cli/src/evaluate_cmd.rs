//! `duet evaluate`.

use std::path::{Path, PathBuf};

use anyhow::Result;
use duet_trainer::assess;

fn pct(x: f64) -> String {
    if x.is_finite() {
        format!("{:.2}%", x * 100.0)
    } else {
        "n/a".into()
    }
}

pub fn run(model: &Path, data: &[PathBuf], json: bool) -> Result<()> {
    let report = assess::evaluate(model, data)?;
    for w in &report.warnings {
        eprintln!("warning: {w}");
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    println!("model {} (version {})", report.model, report.version);
    println!(
        "{:<8} {:<10} {:>6} {:>11} {:>14} {:>9} {:>13} {:>13}",
        "device",
        "mode",
        "rows",
        "MAPE speed",
        "MAPE slowdown",
        "Spearman",
        "feasibility",
        "p90 coverage"
    );
    for a in &report.table {
        let m = &a.metrics;
        println!(
            "{:<8} {:<10} {:>6} {:>11} {:>14} {:>9.3} {:>13} {:>13}",
            a.gpu,
            a.mode,
            m.rows,
            pct(m.mape_speed),
            pct(m.mape_slowdown),
            m.spearman,
            m.feasibility_accuracy.map_or_else(|| "n/a".into(), pct),
            m.p90_coverage.map_or_else(|| "n/a".into(), pct),
        );
    }
    if report.groups.is_empty() {
        return Ok(());
    }
    println!(
        "\ngroups: the model's pairs composed by the {} rule; beside it, the measured pairs \
         composed by each rule",
        duet_model::group::RULE.as_str()
    );
    println!(
        "{:<8} {:<10} {:>4} {:>6} {:>11} {:>13}   measured pairs",
        "device", "mode", "jobs", "rows", "MAPE speed", "p90 coverage"
    );
    for g in &report.groups {
        let m = &g.metrics;
        let baselines: Vec<String> = g
            .baselines
            .iter()
            .map(|b| {
                let mape = b.mape_speed.map_or_else(|| "n/a".into(), pct);
                format!("{} {mape}", b.rule.as_str())
            })
            .collect();
        println!(
            "{:<8} {:<10} {:>4} {:>6} {:>11} {:>13}   {}",
            g.gpu,
            g.mode,
            g.size,
            m.rows,
            pct(m.mape_speed),
            m.p90_coverage.map_or_else(|| "n/a".into(), pct),
            baselines.join(", ")
        );
    }
    Ok(())
}
