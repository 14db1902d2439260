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
    Ok(())
}
