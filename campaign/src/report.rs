//! A replay's report folder: report.md (the tables a person reads), report.json (everything,
//! [`Replay`]), budget.svg (test-set MAPE against the share measured) and, where it has probe
//! curves, probes.svg.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use duet_core::svg;

use crate::CampaignError;
use crate::choose::{Rule, Select};
use crate::replay::{Curve, Replay, Stat};

pub const REPORT_FILE: &str = "report.md";
pub const JSON_FILE: &str = "report.json";
pub const BUDGET_PLOT: &str = "budget.svg";
pub const PROBES_PLOT: &str = "probes.svg";

const COLOURS: [&str; 4] = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728"];
const FULL_COLOUR: &str = "#7f7f7f";

fn colour(select: Select) -> &'static str {
    match select {
        Select::Uncertainty => COLOURS[0],
        Select::Random => COLOURS[1],
    }
}

/// Writes the report folder `out` (which must not exist), all at once or not at all.
pub fn write(replay: &Replay, out: &Path) -> Result<(), CampaignError> {
    let json = serde_json::to_string_pretty(replay).map_err(|e| CampaignError::Io {
        path: out.join(JSON_FILE),
        message: e.to_string(),
    })?;
    let mut files = vec![
        (REPORT_FILE, markdown(replay)),
        (JSON_FILE, json + "\n"),
        (BUDGET_PLOT, budget_plot(replay)),
    ];
    // A replay without probe curves (`--probe-units 0`) has no plot of them, as its report.md
    // has no section.
    if !replay.probes.is_empty() {
        files.push((PROBES_PLOT, probes_plot(replay)));
    }
    duet_core::atomic::write_folder(
        out,
        |p, message| CampaignError::Io {
            path: p.to_path_buf(),
            message,
        },
        |dir| {
            for (name, text) in &files {
                let path = dir.join(name);
                std::fs::write(&path, text).map_err(|e| CampaignError::Io {
                    path: path.clone(),
                    message: format!("cannot write: {e}"),
                })?;
            }
            Ok(())
        },
    )
}

fn pct(x: f64) -> String {
    if x.is_finite() {
        format!("{:.2}%", 100.0 * x)
    } else {
        "-".to_string()
    }
}

/// `4.12% ± 0.20` (sd in percentage points), or `4.12%` for one value.
fn pct_sd(s: &Stat) -> String {
    if s.n == 0 {
        "-".to_string()
    } else if s.n == 1 {
        pct(s.mean)
    } else {
        format!("{} ± {:.2}", pct(s.mean), 100.0 * s.sd)
    }
}

/// The per-seed difference of two curves' MAPE at budget `j` (paired by seed).
fn paired(a: &Curve, b: &Curve, j: usize) -> Stat {
    let diffs: Vec<f64> = a.points[j]
        .seeds
        .iter()
        .zip(&b.points[j].seeds)
        .filter_map(|(x, y)| Some(x.mape? - y.mape?))
        .collect();
    Stat::of(&diffs)
}

/// report.md.
pub fn markdown(r: &Replay) -> String {
    let mut md = String::new();
    let names: Vec<&str> = r.data.iter().map(|d| d.name.as_str()).collect();
    let _ = writeln!(md, "# Budgeted campaign replay: {}\n", names.join(" + "));
    if let Some(c) = &r.command {
        let _ = writeln!(md, "`{c}` ({}, {:.0} s)\n", r.date, r.wall_seconds);
    }
    let _ = writeln!(
        md,
        "The oracle is the complete dataset{}: measuring a setting reads its row{}. Of its {} \
         settings, each seed sets {} aside at random as its test set, which no method may \
         select; the other {} are selectable, and every solo run is known. Seeds {}; the \
         first round, before any pair is known, spreads over workloads and modes (as many \
         settings as workloads), then {} rounds to the largest \
         budget; coverage: every workload in at least {} settings before the score ranks; the \
         audit takes {} settings of each budget, at most a third. Every model is the trainer's \
         final-only fit (hidden {:?}, {} members, at most {} epochs, patience {}) with the \
         seed's own seed.\n",
        if r.data.len() > 1 { "s" } else { "" },
        if r.noise > 0.0 {
            format!(
                ", every throughput times exp({} z), z standard normal",
                r.noise
            )
        } else {
            String::new()
        },
        r.settings,
        r.test,
        r.selectable,
        r.seeds
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(", "),
        r.rounds,
        r.min_pairs,
        r.audit,
        r.config.hidden,
        r.config.ensemble,
        r.config.max_epochs,
        r.config.patience,
    );
    if !r.priors.is_empty() {
        let _ = writeln!(
            md,
            "Every fit also learned from the earlier dataset{} {} (`--prior`: never candidates, \
             never scored; a probe curve's held-out workloads leave them too), and the first \
             round is scored by their model.\n",
            if r.priors.len() > 1 { "s" } else { "" },
            r.priors
                .iter()
                .map(|p| format!(
                    "`{}` ({}, {} settings)",
                    p.name,
                    p.gpus.join(", "),
                    p.settings
                ))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    budget_section(&mut md, r);
    audit_section(&mut md, r);
    probe_section(&mut md, r);
    choice_section(&mut md, r);
    md
}

fn budget_section(md: &mut String, r: &Replay) {
    let _ = writeln!(
        md,
        "## Test-set MAPE of speed against the share measured\n\nMean ± sd over seeds of the \
         model fitted on everything measured (chosen and audited); the full data is the same \
         fit on every selectable setting. p90 coverage: share of test rows at or above the \
         predicted p10 speed.\n"
    );
    let mut header = "| measured | settings |".to_string();
    let mut rule = "|---|---|".to_string();
    for c in &r.curves {
        let _ = write!(header, " {} | / full | p90 coverage |", c.select);
        rule.push_str("---|---|---|");
    }
    let pair = find(r, Select::Uncertainty).zip(find(r, Select::Random));
    if pair.is_some() {
        header.push_str(" uncertainty - random (paired) |");
        rule.push_str("---|");
    }
    let _ = writeln!(md, "{header}\n{rule}");
    let budgets = r.curves.first().map_or(0, |c| c.points.len());
    for j in 0..budgets {
        let p0 = &r.curves[0].points[j];
        let _ = write!(
            md,
            "| {} ({:.1}%) | {} ({} audited) |",
            p0.budget,
            100.0 * p0.fraction,
            p0.settings,
            p0.audited
        );
        for c in &r.curves {
            let p = &c.points[j];
            let _ = write!(
                md,
                " {} | {:.3} | {} |",
                pct_sd(&p.mape),
                p.mape.mean / r.full.mape.mean,
                pct_sd(&p.p90_coverage)
            );
        }
        if let Some((u, x)) = pair {
            let d = paired(u, x, j);
            let _ = write!(md, " {:+.2} ± {:.2} pp |", 100.0 * d.mean, 100.0 * d.sd);
        }
        md.push('\n');
    }
    let _ = write!(md, "| full data | {} |", r.full.settings);
    for _ in &r.curves {
        let _ = write!(
            md,
            " {} | 1 | {} |",
            pct_sd(&r.full.mape),
            pct_sd(&r.full.p90_coverage)
        );
    }
    if pair.is_some() {
        md.push_str(" |");
    }
    let _ = writeln!(
        md,
        "\n\n![test-set MAPE against the share measured]({BUDGET_PLOT})\n"
    );
}

fn find(r: &Replay, select: Select) -> Option<&Curve> {
    r.curves.iter().find(|c| c.select == select)
}

fn audit_section(md: &mut String, r: &Replay) {
    let _ = writeln!(
        md,
        "## The audit\n\nAt each budget the audit draws its settings uniformly from those \
         selection never chose and estimates the MAPE of the model fitted on the chosen \
         settings over every setting never chosen; the truth is that model's MAPE there. \
         Interval: {}.\n",
        r.interval
    );
    for c in &r.curves {
        let _ = writeln!(
            md,
            "{}: the interval held the truth in {} of {} replays ({}).\n",
            c.select,
            c.audit_held,
            c.audits,
            if c.audits > 0 {
                #[allow(clippy::cast_precision_loss)]
                let share = c.audit_held as f64 / c.audits as f64;
                format!("{:.0}%", 100.0 * share)
            } else {
                "none".to_string()
            }
        );
    }
    let _ = writeln!(
        md,
        "| method | measured | seed | audited | estimate | 90% interval | truth | held |\n|---|---|---|---|---|---|---|---|"
    );
    for c in &r.curves {
        for p in &c.points {
            for s in &p.seeds {
                let (estimate, interval, held) = match &s.audit {
                    Some(e) => (
                        pct(e.mape),
                        match (e.low, e.high) {
                            (Some(l), Some(h)) => format!("{} - {}", pct(l), pct(h)),
                            _ => "-".to_string(),
                        },
                        s.truth
                            .and_then(|t| e.holds(t))
                            .map_or("-", |h| if h { "yes" } else { "no" }),
                    ),
                    None => ("-".to_string(), "-".to_string(), "-"),
                };
                let _ = writeln!(
                    md,
                    "| {} | {} | {} | {} | {estimate} | {interval} | {} | {held} |",
                    c.select,
                    p.budget,
                    s.seed,
                    p.audited,
                    s.truth.map_or("-".to_string(), pct)
                );
            }
        }
    }
    md.push('\n');
}

fn probe_section(md: &mut String, r: &Replay) {
    if r.probes.is_empty() {
        return;
    }
    let _ = writeln!(
        md,
        "## Probe curves\n\nA held-out unit leaves the known settings (every setting of its \
         workloads); each of its workloads then gets K probes, settings with a known \
         workload, chosen one per K by the ensemble's disagreement (the same `choose`, refitted \
         after each) or drawn at random. MAPE of speed on the unit's other settings (those \
         neither method probed, test set included), mean ± sd over units and seeds; / full: \
         over the full data's test-set MAPE ({}).\n",
        pct(r.full.mape.mean)
    );
    for p in &r.probes {
        let units: Vec<String> = p
            .units
            .iter()
            .map(|u| format!("{} (seed {})", u.unit, u.seed))
            .collect();
        let _ = writeln!(
            md,
            "### Held out: {}\n\n{} units: {}.\n\n| K | chosen | / full | random | / full |\n|---|---|---|---|---|",
            p.held_out,
            p.units.len(),
            units.join(", ")
        );
        for (k, (c, x)) in p.chosen.iter().zip(&p.random).enumerate() {
            let _ = writeln!(
                md,
                "| {k} | {} | {:.2} | {} | {:.2} |",
                pct_sd(c),
                c.mean / r.full.mape.mean,
                pct_sd(x),
                x.mean / r.full.mape.mean
            );
        }
        md.push('\n');
        if !p.chosen_coverage.is_empty() {
            let _ = writeln!(
                md,
                "p90 coverage on the same settings (`--probe-coverage`: every fit calibrated as \
                 `duet train --final-only` ships it; a probed workload is answered in the class \
                 `probed`), mean ± sd:\n\n| K | chosen | random |\n|---|---|---|"
            );
            for (k, (c, x)) in p.chosen_coverage.iter().zip(&p.random_coverage).enumerate() {
                let _ = writeln!(md, "| {k} | {} | {} |", pct_sd(c), pct_sd(x));
            }
            md.push('\n');
        }
    }
    let _ = writeln!(md, "![probe curves]({PROBES_PLOT})\n");
}

fn choice_section(md: &mut String, r: &Replay) {
    let _ = writeln!(
        md,
        "## Choices\n\nEvery choice (setting, round, rule, score) is in report.json \
         (`choices`). Up to the largest budget:\n\n| seed | method | chosen | rounds | design | \
         coverage | uncertainty | random |\n|---|---|---|---|---|---|---|---|"
    );
    for s in &r.choices {
        let mut rules: BTreeMap<Rule, usize> = BTreeMap::new();
        for c in &s.choices {
            *rules.entry(c.rule).or_default() += 1;
        }
        let n = |rule| rules.get(&rule).copied().unwrap_or(0);
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            s.seed,
            s.select,
            s.choices.len(),
            s.choices.last().map_or(0, |c| c.round + 1),
            n(Rule::Design),
            n(Rule::Coverage),
            n(Rule::Uncertainty),
            n(Rule::Random)
        );
    }
}

/// A polyline through `points` (pixels).
fn polyline(svg: &mut String, points: &[(f64, f64)], colour: &str, dashed: bool) {
    let mut p = String::new();
    for (x, y) in points {
        let _ = write!(p, "{x:.1},{y:.1} ");
    }
    let _ = writeln!(
        svg,
        "<polyline points=\"{p}\" fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\"{}/>",
        if dashed {
            " stroke-dasharray=\"6 4\""
        } else {
            ""
        }
    );
    for (x, y) in points {
        let _ = writeln!(
            svg,
            "<circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"3\" fill=\"{colour}\"/>"
        );
    }
}

/// A vertical bar of ± one sd at `x` (pixels) between values `lo` and `hi`.
fn error_bar(svg: &mut String, x: f64, y_lo: f64, y_hi: f64, colour: &str) {
    let _ = writeln!(
        svg,
        "<line x1=\"{x:.1}\" y1=\"{y_lo:.1}\" x2=\"{x:.1}\" y2=\"{y_hi:.1}\" stroke=\"{colour}\"/>\
         <line x1=\"{:.1}\" y1=\"{y_lo:.1}\" x2=\"{:.1}\" y2=\"{y_lo:.1}\" stroke=\"{colour}\"/>\
         <line x1=\"{:.1}\" y1=\"{y_hi:.1}\" x2=\"{:.1}\" y2=\"{y_hi:.1}\" stroke=\"{colour}\"/>",
        x - 3.0,
        x + 3.0,
        x - 3.0,
        x + 3.0
    );
}

fn top_of(values: impl Iterator<Item = f64>) -> f64 {
    let top = values.filter(|v| v.is_finite()).fold(0.0f64, f64::max);
    if top > 0.0 { top * 1.1 } else { 0.1 }
}

/// Test-set MAPE (mean ± sd over seeds) against the share of selectable settings measured.
pub fn budget_plot(r: &Replay) -> String {
    let (w, h) = (660.0, 420.0);
    let x_hi = r
        .curves
        .iter()
        .flat_map(|c| c.points.iter().map(|p| p.fraction))
        .fold(0.0f64, f64::max)
        .max(0.1);
    let top = top_of(
        r.curves
            .iter()
            .flat_map(|c| c.points.iter().map(|p| p.mape.mean + p.mape.sd.max(0.0)))
            .chain([r.full.mape.mean + r.full.mape.sd.max(0.0)]),
    );
    let axes = svg::Axes::new(
        w,
        h,
        svg::Scale::linear(0.0, x_hi * 1.05).percent(),
        svg::Scale::linear(0.0, top).percent(),
    );
    let mut out = svg::open(w, h);
    axes.grid(&mut out);
    if r.full.mape.mean.is_finite() {
        let y = axes.py(r.full.mape.mean);
        let _ = writeln!(
            out,
            "<line x1=\"{}\" y1=\"{y:.1}\" x2=\"{}\" y2=\"{y:.1}\" stroke=\"{FULL_COLOUR}\" stroke-width=\"2\" stroke-dasharray=\"6 4\"/>",
            axes.left, axes.right
        );
    }
    for c in &r.curves {
        let points: Vec<(f64, f64)> = c
            .points
            .iter()
            .filter(|p| p.mape.mean.is_finite())
            .map(|p| (axes.px(p.fraction), axes.py(p.mape.mean)))
            .collect();
        for p in c.points.iter().filter(|p| p.mape.n > 1) {
            error_bar(
                &mut out,
                axes.px(p.fraction),
                axes.py(p.mape.mean - p.mape.sd),
                axes.py(p.mape.mean + p.mape.sd),
                colour(c.select),
            );
        }
        polyline(&mut out, &points, colour(c.select), false);
    }
    axes.frame(
        &mut out,
        "share of the selectable settings measured (audit included)",
        "test-set MAPE of speed (mean ± sd over seeds)",
    );
    let mut entries: Vec<(&str, String)> = r
        .curves
        .iter()
        .map(|c| (colour(c.select), c.select.to_string()))
        .collect();
    entries.push((FULL_COLOUR, "full data (dashed)".to_string()));
    let entries: Vec<(&str, &str)> = entries.iter().map(|(c, l)| (*c, l.as_str())).collect();
    svg::legend(&mut out, axes.right - 170.0, axes.top + 20.0, &entries);
    out.push_str("</svg>\n");
    out
}

/// The probe curves: MAPE on a held-out unit's other settings against K.
pub fn probes_plot(r: &Replay) -> String {
    let (w, h) = (660.0, 420.0);
    let max_k = r
        .probes
        .iter()
        .map(|p| p.chosen.len().saturating_sub(1))
        .max()
        .unwrap_or(1)
        .max(1);
    let top = top_of(
        r.probes
            .iter()
            .flat_map(|p| p.chosen.iter().chain(&p.random).map(|s| s.mean))
            .chain([r.full.mape.mean]),
    );
    #[allow(clippy::cast_precision_loss)]
    let axes = svg::Axes::new(
        w,
        h,
        svg::Scale::linear(0.0, max_k as f64),
        svg::Scale::linear(0.0, top).percent(),
    );
    let mut out = svg::open(w, h);
    axes.grid(&mut out);
    if r.full.mape.mean.is_finite() {
        let y = axes.py(r.full.mape.mean);
        let _ = writeln!(
            out,
            "<line x1=\"{}\" y1=\"{y:.1}\" x2=\"{}\" y2=\"{y:.1}\" stroke=\"{FULL_COLOUR}\" stroke-width=\"2\" stroke-dasharray=\"2 3\"/>",
            axes.left, axes.right
        );
    }
    let mut entries: Vec<(&str, String)> = Vec::new();
    for (i, p) in r.probes.iter().enumerate() {
        let colour = if i % 2 == 0 { COLOURS[0] } else { COLOURS[2] };
        for (stats, dashed, label) in [(&p.chosen, false, "chosen"), (&p.random, true, "random")] {
            #[allow(clippy::cast_precision_loss)]
            let points: Vec<(f64, f64)> = stats
                .iter()
                .enumerate()
                .filter(|(_, s)| s.mean.is_finite())
                .map(|(k, s)| (axes.px(k as f64), axes.py(s.mean)))
                .collect();
            polyline(&mut out, &points, colour, dashed);
            entries.push((
                colour,
                format!(
                    "{} held out, {label}{}",
                    p.held_out,
                    if dashed { " (dashed)" } else { "" }
                ),
            ));
        }
    }
    entries.push((FULL_COLOUR, "full data, test set (dotted)".to_string()));
    axes.frame(
        &mut out,
        "K: probes per held-out workload",
        "MAPE of speed on its other settings",
    );
    let entries: Vec<(&str, &str)> = entries.iter().map(|(c, l)| (*c, l.as_str())).collect();
    svg::legend(&mut out, axes.right - 250.0, axes.top + 20.0, &entries);
    out.push_str("</svg>\n");
    out
}
