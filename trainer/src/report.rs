//! `report.md` and its SVG figures: how far to trust the model, in numbers and pictures.

use std::fmt::Write as _;

use duet_core::svg;

use crate::eval::{HeldOut, MetricsRow, PREDICTORS, Split};
use duet_model::artifact::{ModelMeta, REPORT_FILE};
use duet_model::calibration::CROSS_CONFORMAL;

fn pct(x: f64) -> String {
    if x.is_finite() {
        format!("{:.1}%", x * 100.0)
    } else {
        "n/a".into()
    }
}

fn num(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.3}")
    } else {
        "n/a".into()
    }
}

const HEADER: &str = "| split | predictor | device | mode | rows | MAPE speed | MAPE slowdown | MAE speed | Spearman | precision@0.8 | recall@0.8 | feasibility acc. | p90 coverage | p90/median |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";

/// `value`, and `± sd` in the same unit where several seeds give one.
fn with_sd(value: f64, sd: Option<f64>, show: fn(f64) -> String) -> String {
    match sd {
        Some(sd) if sd.is_finite() && value.is_finite() => {
            format!("{} ± {}", show(value), show(sd).trim_end_matches('%'))
        }
        _ => show(value),
    }
}

fn table_row(out: &mut String, r: &MetricsRow, sd: Option<&MetricsRow>) {
    let m = &r.metrics;
    let s = sd.map(|s| &s.metrics);
    let opt = |v: Option<f64>, d: Option<Option<f64>>, show: fn(f64) -> String| {
        v.map_or_else(|| "n/a".into(), |v| with_sd(v, d.flatten(), show))
    };
    let _ = writeln!(
        out,
        "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
        r.split.as_str(),
        r.predictor,
        r.gpu,
        r.mode,
        m.rows,
        with_sd(m.mape_speed, s.map(|s| s.mape_speed), pct),
        with_sd(m.mape_slowdown, s.map(|s| s.mape_slowdown), pct),
        with_sd(m.mae_speed, s.map(|s| s.mae_speed), num),
        with_sd(m.spearman, s.map(|s| s.spearman), num),
        with_sd(m.precision_at_08, s.map(|s| s.precision_at_08), pct),
        with_sd(m.recall_at_08, s.map(|s| s.recall_at_08), pct),
        opt(
            m.feasibility_accuracy,
            s.map(|s| s.feasibility_accuracy),
            pct
        ),
        opt(m.p90_coverage, s.map(|s| s.p90_coverage), pct),
        opt(m.p90_width, s.map(|s| s.p90_width), num),
    );
}

/// The standard-deviation row matching `r`, where several seeds were run.
fn sd_of<'a>(meta: &'a ModelMeta, r: &MetricsRow) -> Option<&'a MetricsRow> {
    meta.metrics_sd.iter().find(|s| {
        (s.split, &s.predictor, &s.gpu, &s.mode) == (r.split, &r.predictor, &r.gpu, &r.mode)
    })
}

/// A measured-against-predicted matrix for the heatmap figure.
#[derive(Debug, Clone)]
pub struct Matrix {
    pub title: String,
    pub ids: Vec<String>,
    /// `[a][b]`: speed of a next to b; `None` where infeasible or not measured.
    pub measured: Vec<Vec<Option<f64>>>,
    pub predicted: Vec<Vec<Option<f64>>>,
}

/// The report and its figures: `(file name, contents)`.
pub fn render(
    meta: &ModelMeta,
    held_out: &[HeldOut],
    matrix: Option<&Matrix>,
) -> Vec<(String, String)> {
    let mut md = String::new();
    let _ = writeln!(md, "# duet model `{}`\n", meta.name);
    let _ = writeln!(
        md,
        "Version `{}`, trained by duet {} on {} with seed {}. Target: ln(speed of job a next to \
         job b); every pair trains in both orders. Outputs: {}.\n",
        meta.version,
        meta.duet_version,
        meta.created,
        meta.config.seed,
        meta.outputs.join(", ")
    );
    let _ = writeln!(
        md,
        "## Data\n\n| dataset | device | workloads | pairs | fingerprint |\n|---|---|---|---|---|"
    );
    for d in &meta.data {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | `{}` |",
            d.name, d.gpu, d.workloads, d.pairs, d.fingerprint
        );
    }
    let _ = writeln!(
        md,
        "\nInputs per pair: {} values (numeric features standardised, log where they span orders of \
         magnitude, each with a missing flag; categorical one-hot with an unknown slot; one slot per \
         training workload; device, mode and shares).",
        meta.spec.pair_width()
    );
    for d in &meta.spec.dropped {
        let _ = writeln!(md, "\nLeft out: {d}.");
    }
    let _ = writeln!(
        md,
        "\n## Training\n\nAn ensemble of {} MLPs with {:?} hidden units, outputs averaged; each \
         trained by full-batch Adam (learning rate {}, weight decay {}) from its own seed, with early \
         stopping on its own {}% of the pair settings.\n\n| member | epochs | best epoch | validation loss |\n|---|---|---|---|",
        meta.training.len(),
        meta.config.hidden,
        meta.config.learning_rate,
        meta.config.weight_decay,
        meta.config.validation_fraction * 100.0,
    );
    for (k, t) in meta.training.iter().enumerate() {
        let _ = writeln!(
            md,
            "| {k} | {} | {} | {:.4} |",
            t.epochs, t.best_epoch, t.best_validation_loss
        );
    }
    let how = if meta.calibration.method == CROSS_CONFORMAL {
        "Cross-conformal: the scores are the evaluation's out-of-fold ones, from the per-fold \
         refits of every seed on their own test rows (`known` from the unseen-pairs folds, where \
         every measured pair is held out once; `new` from the leave-one-workload-out folds, where \
         every workload is), so no shift rests on a few held-out workloads. A row scored by \
         several seeds' refits counts once per seed."
    } else {
        "Split-conformal: the scores come from an ensemble trained without the calibration rows \
         (`known`: 10% of the unordered pairs of training workloads; `new`: every row of 15% of \
         the workloads, so the model has no identity for them); the shipped ensemble is then \
         refitted on every row."
    };
    let _ = writeln!(
        md,
        "\n## p90 calibration\n\nThe p90 slowdown is the network's 10th-percentile speed shifted by a \
         conformal offset (the ceil((n+1)·0.9)-th smallest of n held-out scores, each score the \
         raw ln p10 speed minus the measured ln speed of a row no member of the scoring ensemble \
         trained or early-stopped on), chosen per pair: `known` when the model has an identity \
         slot for both workloads, `new` otherwise, and per device where the model knows several. \
         {how}\n\n\
         | device | kind | shift of ln p90 slowdown | scores | held-out groups | note |\n|---|---|---|---|---|---|"
    );
    let devices = std::iter::once(("all", &meta.calibration.known, &meta.calibration.new)).chain(
        meta.calibration
            .by_device
            .iter()
            .map(|(g, d)| (g.as_str(), &d.known, &d.new)),
    );
    for (gpu, known, new) in devices {
        for (kind, o) in [("known", known), ("new", new)] {
            let _ = writeln!(
                md,
                "| {gpu} | {kind} | {:+.4} | {} | {} | {} |",
                o.shift,
                o.rows,
                o.groups,
                o.fallback.as_deref().unwrap_or("")
            );
        }
    }
    if let Some(e) = meta.evaluation.as_ref().filter(|e| e.final_only) {
        let _ = writeln!(
            md,
            "\n## Accuracy\n\nNot measured: this model was trained with `--final-only` (seed {}), so \
             no cross-validated evaluation was run and model.json holds no metrics. The spec, the \
             ensemble were fitted exactly as a full run with the same seed fits them; the p90 \
             calibrations split-conformally, on rows held out of a second fit. Score it \
             with `duet evaluate` on data it did not train on, or judge the procedure by a full \
             `duet train` on the same data.",
            e.seeds.first().copied().unwrap_or(meta.config.seed),
        );
        let mut files = Vec::new();
        if let Some(m) = matrix {
            let _ = writeln!(md, "\n![{}](heatmap.svg)", m.title);
            files.push(("heatmap.svg".to_string(), heatmap(m)));
        }
        files.push((REPORT_FILE.to_string(), md));
        return files;
    }
    let folds: Vec<String> = meta.folds.iter().map(|(k, v)| format!("{k} {v}")).collect();
    let _ = writeln!(
        md,
        "\n## Accuracy on held-out rows\n\nFolds: {}. Every predictor is fitted on the same training \
         rows and scored on the same held-out rows. MAPE and MAE are over feasible rows; \
         precision and recall are of \"speed >= 0.8\"; p90 coverage is the share of held-out rows \
         whose measured slowdown is at or below the predicted p90 slowdown (0.9 is the target); \
         p90/median is the mean ratio of the predicted p90 slowdown to the predicted median one.\n",
        folds.join(", ")
    );
    if let Some(e) = &meta.evaluation {
        let seeds: Vec<String> = e.seeds.iter().map(u64::to_string).collect();
        let _ = writeln!(
            md,
            "Seeds: {}{}. Where the numbers come from: {}.\n",
            seeds.join(", "),
            if e.seeds.len() > 1 {
                " (figures are the mean ± the standard deviation over seeds)"
            } else {
                ""
            },
            e.protocol
        );
        for (split, definition) in &e.splits {
            let _ = writeln!(md, "- `{split}`: {definition}");
        }
        md.push('\n');
    }
    md.push_str(HEADER);
    for split in Split::ALL {
        for predictor in PREDICTORS {
            for r in meta
                .metrics
                .iter()
                .filter(|r| r.split == split && r.predictor == predictor && r.gpu == "all")
            {
                table_row(&mut md, r, sd_of(meta, r));
            }
        }
    }
    let _ = writeln!(md, "\n### By device and mode\n");
    md.push_str(HEADER);
    for split in Split::ALL {
        for predictor in ["mlp", "ridge", "low_rank"] {
            for r in meta
                .metrics
                .iter()
                .filter(|r| r.split == split && r.predictor == predictor && r.gpu != "all")
            {
                table_row(&mut md, r, sd_of(meta, r));
            }
        }
    }
    let mut files = Vec::new();
    if !held_out.is_empty() {
        let _ = writeln!(
            md,
            "\n## Figures\n\n![Predicted against measured speed, held-out rows](scatter.svg)\n\n\
             ![Cumulative distribution of absolute percentage error of speed, per split](error-cdf.svg)"
        );
        files.push(("scatter.svg".to_string(), scatter(held_out)));
        files.push(("error-cdf.svg".to_string(), error_cdf(held_out)));
    }
    if let Some(m) = matrix {
        let _ = writeln!(md, "\n![{}](heatmap.svg)", m.title);
        files.push(("heatmap.svg".to_string(), heatmap(m)));
    }
    files.push((REPORT_FILE.to_string(), md));
    files
}

const COLOURS: [&str; 3] = ["#1f77b4", "#d62728", "#2ca02c"];

fn legend(svg: &mut String, x: f64, y: f64) {
    let entries: Vec<(&str, &str)> = Split::ALL
        .iter()
        .enumerate()
        .map(|(i, split)| (COLOURS[i], split.as_str()))
        .collect();
    svg::legend(svg, x, y, &entries);
}

/// Predicted against measured speed, one colour per split, with the diagonal.
fn scatter(held_out: &[HeldOut]) -> String {
    let (w, h, m) = (520.0, 480.0, 50.0);
    let top = held_out
        .iter()
        .flat_map(|r| [r.speed, r.predicted])
        .fold(1.0f64, f64::max)
        .min(3.0);
    let sx = |v: f64| m + (v / top).min(1.0) * (w - 2.0 * m);
    let sy = |v: f64| h - m - (v / top).min(1.0) * (h - 2.0 * m);
    let mut svg = svg::open(520.0, 480.0);
    let _ = writeln!(
        svg,
        "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#888\"/>",
        sx(0.0),
        sy(0.0),
        sx(top),
        sy(top)
    );
    svg::frame(&mut svg, w, h, m);
    for (i, split) in Split::ALL.iter().enumerate() {
        for r in held_out.iter().filter(|r| r.split == *split) {
            let _ = writeln!(
                svg,
                "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"2\" fill=\"{}\" fill-opacity=\"0.5\"/>",
                sx(r.speed),
                sy(r.predicted),
                COLOURS[i]
            );
        }
    }
    svg::axis_titles(&mut svg, w, h, "measured speed", "predicted speed");
    let _ = writeln!(
        svg,
        "<text x=\"{m}\" y=\"{}\">0</text><text x=\"{}\" y=\"{}\">{top:.2}</text>",
        h - m + 14.0,
        w - m - 20.0,
        h - m + 14.0
    );
    legend(&mut svg, m + 10.0, m + 20.0);
    svg.push_str("</svg>\n");
    svg
}

/// Cumulative share of held-out rows by absolute percentage error of speed, one line per split.
fn error_cdf(held_out: &[HeldOut]) -> String {
    let (w, h, m) = (520.0, 400.0, 50.0);
    let max_err = 0.5;
    let mut svg = svg::open(520.0, 400.0);
    svg::frame(&mut svg, w, h, m);
    for (i, split) in Split::ALL.iter().enumerate() {
        let mut errs: Vec<f64> = held_out
            .iter()
            .filter(|r| r.split == *split)
            .map(|r| (r.predicted - r.speed).abs() / r.speed)
            .collect();
        errs.sort_by(f64::total_cmp);
        #[allow(clippy::cast_precision_loss)]
        let points: Vec<String> = errs
            .iter()
            .enumerate()
            .map(|(k, e)| {
                let x = m + (e / max_err).min(1.0) * (w - 2.0 * m);
                let y = h - m - ((k + 1) as f64 / errs.len() as f64) * (h - 2.0 * m);
                format!("{x:.1},{y:.1}")
            })
            .collect();
        let _ = writeln!(
            svg,
            "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\" points=\"{}\"/>",
            COLOURS[i],
            points.join(" ")
        );
    }

    for (frac, label) in [(0.0, "0%"), (0.5, "25%"), (1.0, "50%")] {
        let _ = writeln!(
            svg,
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{label}</text>",
            m + frac * (w - 2.0 * m),
            h - m + 14.0
        );
    }
    for (frac, label) in [(0.0, "0"), (0.5, "0.5"), (1.0, "1")] {
        let _ = writeln!(
            svg,
            "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{label}</text>",
            m - 4.0,
            h - m - frac * (h - 2.0 * m) + 4.0
        );
    }
    svg::axis_titles(
        &mut svg,
        w,
        h,
        "absolute error of speed / measured speed",
        "share of held-out rows",
    );
    legend(&mut svg, w - m - 130.0, h - m - 50.0);
    svg.push_str("</svg>\n");
    svg
}

/// Colour of a speed in [0, 1.2]: red (slow) through yellow to green (no interference).
fn speed_colour(v: Option<f64>) -> String {
    let Some(v) = v else { return "#444".into() };
    let t = (v / 1.2).clamp(0.0, 1.0);
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let (r, g) = if t < 0.5 {
        (255, (t * 2.0 * 255.0) as u8)
    } else {
        (((1.0 - t) * 2.0 * 255.0) as u8, 255)
    };
    format!("#{r:02x}{g:02x}40")
}

/// Measured and predicted speed matrices side by side (row: job a, column: job b).
fn heatmap(m: &Matrix) -> String {
    let n = m.ids.len();
    let cell = 12.0;
    let label = 170.0;
    #[allow(clippy::cast_precision_loss)]
    let side = cell * n as f64;
    let width = label + 2.0 * side + 60.0;
    let height = side + 90.0;
    let mut svg = svg::open(width, height);
    let _ = writeln!(svg, "<text x=\"{label}\" y=\"16\">{}</text>", m.title);
    let _ = writeln!(
        svg,
        "<text x=\"{label}\" y=\"31\" font-size=\"10\">colour: speed, red 0 / orange 0.3 / yellow 0.6 / green 1.2; dark: infeasible or not measured</text>"
    );
    for (panel, (name, matrix)) in [("measured", &m.measured), ("predicted", &m.predicted)]
        .iter()
        .enumerate()
    {
        #[allow(clippy::cast_precision_loss)]
        let x0 = label + panel as f64 * (side + 40.0);
        let _ = writeln!(svg, "<text x=\"{x0}\" y=\"46\">{name}</text>");
        for (i, row) in matrix.iter().enumerate() {
            for (j, v) in row.iter().enumerate() {
                #[allow(clippy::cast_precision_loss)]
                let _ = writeln!(
                    svg,
                    "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{cell}\" height=\"{cell}\" fill=\"{}\"/>",
                    x0 + j as f64 * cell,
                    50.0 + i as f64 * cell,
                    speed_colour(*v)
                );
            }
        }
    }
    for (i, id) in m.ids.iter().enumerate() {
        #[allow(clippy::cast_precision_loss)]
        let _ = writeln!(
            svg,
            "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\" font-size=\"9\">{id}</text>",
            label - 4.0,
            59.0 + i as f64 * cell
        );
    }
    svg.push_str("</svg>\n");
    svg
}
