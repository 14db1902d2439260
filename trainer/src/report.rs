//! `report.md` and its SVG figures: how far to trust the model, in numbers and pictures.

use std::fmt::Write as _;

use duet_core::svg;

use crate::corpus::Corpus;
use crate::eval::{HeldOut, MetricsRow, PREDICTORS, Split};
use burn::backend::Flex;
use duet_model::artifact::{ModelMeta, REPORT_FILE};
use duet_model::calibration::CROSS_CONFORMAL;
use duet_model::encoding::FeatureSpec;
use duet_model::network::{Mlp, OUT_LOG_SPEED, OUTPUTS, ensemble_forward};

/// The held-out predictions the figures plot, one CSV row each (split, gpu, a, b, measured and
/// predicted speed), so that the figures can be drawn again without refitting the folds.
pub const HELD_OUT_FILE: &str = "held-out.csv";

/// `rows` as the CSV of [`HELD_OUT_FILE`].
pub fn held_out_csv(rows: &[HeldOut]) -> String {
    let mut w = csv::Writer::from_writer(Vec::new());
    for r in rows {
        // Writing to memory cannot fail.
        let _ = w.serialize(r);
    }
    String::from_utf8(w.into_inner().unwrap_or_default()).unwrap_or_default()
}

/// The rows of a [`HELD_OUT_FILE`].
pub fn read_held_out(text: &str) -> Result<Vec<HeldOut>, String> {
    csv::Reader::from_reader(text.as_bytes())
        .deserialize()
        .enumerate()
        .map(|(k, r)| r.map_err(|e| format!("row {}: {e}", k + 1)))
        .collect()
}

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

/// The measured and predicted speed matrices of the corpus's first dataset (the ensemble
/// `nets` with the feature spec `spec`), for the heatmap.
pub fn matrix(corpus: &Corpus, spec: &FeatureSpec, nets: &[Mlp<Flex>]) -> Matrix {
    let d = &corpus.datasets[0];
    let ids: Vec<String> = d.workloads.iter().map(|w| w.workload.clone()).collect();
    let index: std::collections::BTreeMap<&str, usize> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| (id.as_str(), i))
        .collect();
    let n = ids.len();
    let mut measured = vec![vec![None; n]; n];
    let mut predicted = vec![vec![None; n]; n];
    let rows: Vec<usize> = (0..corpus.examples.len())
        .filter(|&i| corpus.examples[i].dataset == 0)
        .collect();
    let batch = corpus.encode(spec, &rows);
    let out = ensemble_forward(nets, batch.inputs, spec.pair_width(), &Default::default());
    for (k, &i) in rows.iter().enumerate() {
        let e = &corpus.examples[i];
        let (a, b) = (index[e.a.as_str()], index[e.b.as_str()]);
        measured[a][b] = e.speed;
        predicted[a][b] = e
            .speed
            .map(|_| f64::from(out[k * OUTPUTS + OUT_LOG_SPEED]).exp());
    }
    Matrix {
        title: format!(
            "Speed of the row job next to the column job, {} ({}): measured, and predicted by the final model",
            d.meta.name, d.meta.provenance.gpu
        ),
        ids,
        measured,
        predicted,
    }
}

/// The report and its figures: `(file name, contents)`; with held-out rows, also those rows
/// ([`HELD_OUT_FILE`]).
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
    let how = if meta.calibration.method == duet_model::calibration::FOLDED_CONFORMAL {
        "Cross-conformal over the final fit's own folds (`--final-only`): the rows are cut into 5 \
         folds, every workload's rows in one (`new`) and every other unordered pair in one \
         (`known`), and, with a family feature and 5 families or more, into 5 more folds of \
         whole families (`new_family`), and into 5 probed folds where every family (each \
         workload, without one) is held out but for 1 to 3 pair settings of each of its \
         workloads (`probed`); an ensemble trained without a fold scores its rows, so every \
         measured pair, workload and family calibrates once; the shipped ensemble is then \
         refitted on every row."
    } else if meta.calibration.method == CROSS_CONFORMAL {
        "Cross-conformal: the scores are the evaluation's out-of-fold ones, from the per-fold \
         refits of every seed on their own test rows (`known` from the unseen-pairs folds, where \
         every measured pair is held out once; `probed` from the probed-workloads folds, where \
         every family is held out but for 1 to 3 pair settings of each of its workloads; `new` \
         from the \
         leave-one-workload-out folds, where \
         every workload is; `new_family` from the leave-one-family-out folds, where every family \
         is), so no shift rests on a few held-out workloads. A row scored by several seeds' \
         refits counts once per seed."
    } else {
        "Split-conformal: the scores come from an ensemble trained without the calibration rows \
         (`known`: 10% of the unordered pairs of training workloads; `new`: every row of 15% of \
         the workloads, so the model has no identity for them); the shipped ensemble is then \
         refitted on every row."
    };
    let family = meta.spec.family.as_deref().unwrap_or("none");
    let min = duet_model::calibration::MIN_FAMILIES;
    let probed = duet_model::encoding::PROBED_MAX;
    let _ = writeln!(
        md,
        "\n## p90 calibration\n\nThe p90 slowdown is the network's 10th-percentile speed shifted by a \
         conformal offset (the ceil((n+1)·0.9)-th smallest of n held-out scores, each score the \
         raw ln p10 speed minus the measured ln speed of a row no member of the scoring ensemble \
         trained or early-stopped on), chosen per pair: `known` when the model has an identity \
         slot for both workloads, `probed` when one of them was measured in at most {probed} pair \
         settings on the pair's device, `new` otherwise, `new_family` where a new workload's family \
         (`{family}`) was never in training, and per device where the model knows several. \
         A new family with fewer than {min} families held out, or a job more than one training \
         standard deviation outside a feature's range, gets the widest shift, labelled \
         `conservative`. {how}\n\n\
         | device | kind | shift of ln p90 slowdown | scores | held-out groups | note |\n|---|---|---|---|---|---|"
    );
    let c = &meta.calibration;
    let devices = std::iter::once(("all", [&c.known, &c.probed, &c.new, &c.new_family])).chain(
        c.by_device
            .iter()
            .map(|(g, d)| (g.as_str(), [&d.known, &d.probed, &d.new, &d.new_family])),
    );
    for (gpu, offsets) in devices {
        let classes = ["known", "probed", "new", "new_family"]
            .into_iter()
            .zip(offsets);
        for (kind, o) in classes.into_iter().filter(|(_, o)| !o.is_empty()) {
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
    if let Some(prior) = &c.family_prior {
        let _ = writeln!(
            md,
            "\nA pair with a job of a new family is answered with its ln speed weighted between \
             the network's and an effects prior's (the device's mean ln speed plus the \
             partner's effect on the jobs that ran next to it plus the job's own, where training \
             measured them; where it did not, as the job's profile predicts them, on a device \
             whose training families, each held out in turn, agree that this beats the plain \
             prior by more than its standard error, below), its ln p10 speed the lower of the network's and the weighted \
             speed less the network's spread. The network's weight, of 0, 0.1, ..., 1, is \
             the one with the least MAPE of speed on the leave-one-family-out folds' rows, each \
             held-out family weighing the same (each family's fold is scored with the weight \
             the other families' rows chose; a `--final-only` fit's family folds the same way); \
             `new_family`'s shift above is \
             fitted on the weighted rows. A pair with a `probed` job (and no new one) is \
             weighted the same way with a weight of its own, chosen on the probed folds' rows \
             (each probed workload weighing the same), the probed workload's effects \
             backfitted on its few rows; `probed`'s shift is fitted on those weighted rows.\n\n\
             | device | the network's weight, new family | chosen on rows | the network's \
             weight, probed | chosen on rows | a new job's effects from its profile |\n\
             |---|---|---|---|---|---|"
        );
        for (gpu, d) in &prior.devices {
            let profile = d.profile.as_ref().map_or_else(
                || "none: the plain prior".to_string(),
                |p| {
                    format!(
                        "ridge, penalty {} a workload, on {} workloads of {} families",
                        p.penalty, p.workloads, p.families
                    )
                },
            );
            let _ = writeln!(
                md,
                "| {gpu} | {:.1} | {} | {:.1} | {} | {profile} |",
                d.weight, d.chosen_on, d.probed_weight, d.probed_chosen_on
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
    for split in splits_of(&meta.metrics) {
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
    for split in splits_of(&meta.metrics) {
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
             ![Cumulative distribution of absolute percentage error of speed, per split](error-cdf.svg)\n\n\
             The held-out predictions they plot (the first seed's evaluation: every split's \
             feasible test rows, each held out once): [`{HELD_OUT_FILE}`]({HELD_OUT_FILE})."
        );
        files.push(("scatter.svg".to_string(), scatter(held_out)));
        files.push(("error-cdf.svg".to_string(), error_cdf(held_out)));
        files.push((HELD_OUT_FILE.to_string(), held_out_csv(held_out)));
    }
    if let Some(m) = matrix {
        let _ = writeln!(md, "\n![{}](heatmap.svg)", m.title);
        files.push(("heatmap.svg".to_string(), heatmap(m)));
    }
    files.push((REPORT_FILE.to_string(), md));
    files
}

/// The splits of a metrics table in report order: the fixed ones, then any other it holds
/// (`unseen_<feature>` of `--group-by`).
fn splits_of(metrics: &[MetricsRow]) -> Vec<Split> {
    let mut out = Split::ALL.to_vec();
    for r in metrics {
        if !out.contains(&r.split) {
            out.push(r.split);
        }
    }
    out
}

const COLOURS: [&str; 4] = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"];

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
    let (w, h) = (540.0, 500.0);
    let top = held_out
        .iter()
        .flat_map(|r| [r.speed, r.predicted])
        .fold(1.0f64, f64::max)
        .min(3.0);
    let axes = svg::Axes::new(
        w,
        h,
        svg::Scale::linear(0.0, top),
        svg::Scale::linear(0.0, top),
    );
    let mut svg = svg::open(w, h);
    axes.grid(&mut svg);
    let _ = writeln!(
        svg,
        "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#888\"/>",
        axes.px(0.0),
        axes.py(0.0),
        axes.px(top),
        axes.py(top)
    );
    for (i, split) in Split::ALL.iter().enumerate() {
        for r in held_out.iter().filter(|r| r.split == *split) {
            let _ = writeln!(
                svg,
                "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"2\" fill=\"{}\" fill-opacity=\"0.5\"/>",
                axes.px(r.speed),
                axes.py(r.predicted),
                COLOURS[i]
            );
        }
    }
    axes.frame(
        &mut svg,
        "measured speed (throughput next to the other job / alone)",
        "predicted speed",
    );
    legend(&mut svg, axes.left + 12.0, axes.top + 20.0);
    svg.push_str("</svg>\n");
    svg
}

/// Cumulative share of held-out rows by absolute percentage error of speed, one line per split.
fn error_cdf(held_out: &[HeldOut]) -> String {
    let (w, h) = (540.0, 420.0);
    let max_err = 0.5;
    let axes = svg::Axes::new(
        w,
        h,
        svg::Scale::linear(0.0, max_err).percent(),
        svg::Scale::linear(0.0, 1.0).percent(),
    );
    let mut svg = svg::open(w, h);
    axes.grid(&mut svg);
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
                let share = (k + 1) as f64 / errs.len() as f64;
                format!("{:.1},{:.1}", axes.px(*e), axes.py(share))
            })
            .collect();
        let _ = writeln!(
            svg,
            "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\" points=\"{}\"/>",
            COLOURS[i],
            points.join(" ")
        );
    }
    axes.frame(
        &mut svg,
        "absolute error of speed / measured speed (larger errors at the right edge)",
        "share of held-out rows at or below",
    );
    legend(&mut svg, axes.right - 150.0, axes.bottom - 60.0);
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

/// Measured and predicted speed matrices side by side (row: job a, column: job b), each job
/// named along both edges, and the colour scale with its ticks.
fn heatmap(m: &Matrix) -> String {
    let n = m.ids.len();
    let cell = 12.0;
    // Room for the longest id at 9 px (about 5.5 px a character).
    let longest = m.ids.iter().map(|id| id.chars().count()).max().unwrap_or(0);
    #[allow(clippy::cast_precision_loss)]
    let label = (5.5 * longest as f64 + 30.0).max(60.0);
    #[allow(clippy::cast_precision_loss)]
    let side = cell * n as f64;
    let top = 66.0;
    let bar_x = label + 2.0 * side + 70.0;
    let width = (bar_x + 60.0).max(620.0);
    let height = top + side + label + 20.0;
    let mut svg = svg::open(width, height);
    let _ = writeln!(
        svg,
        "<text x=\"10\" y=\"16\">{}</text>",
        svg::escape(&m.title)
    );
    let _ = writeln!(
        svg,
        "<text x=\"10\" y=\"32\" font-size=\"10\">row: job a, column: job b, colour: speed of a \
         next to b (scale on the right); dark: infeasible or not measured</text>"
    );
    for (panel, (name, matrix)) in [("measured", &m.measured), ("predicted", &m.predicted)]
        .iter()
        .enumerate()
    {
        #[allow(clippy::cast_precision_loss)]
        let x0 = label + panel as f64 * (side + 40.0);
        let _ = writeln!(svg, "<text x=\"{x0}\" y=\"{}\">{name}</text>", top - 6.0);
        for (i, row) in matrix.iter().enumerate() {
            for (j, v) in row.iter().enumerate() {
                #[allow(clippy::cast_precision_loss)]
                let _ = writeln!(
                    svg,
                    "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{cell}\" height=\"{cell}\" fill=\"{}\"/>",
                    x0 + j as f64 * cell,
                    top + i as f64 * cell,
                    speed_colour(*v)
                );
            }
        }
        let _ = writeln!(
            svg,
            "<rect x=\"{x0}\" y=\"{top}\" width=\"{side}\" height=\"{side}\" fill=\"none\" stroke=\"black\"/>"
        );
        for (j, id) in m.ids.iter().enumerate() {
            #[allow(clippy::cast_precision_loss)]
            let x = x0 + (j as f64 + 0.5) * cell + 3.0;
            let y = top + side + 4.0;
            let _ = writeln!(
                svg,
                "<text x=\"{x:.1}\" y=\"{y:.1}\" transform=\"rotate(-90 {x:.1} {y:.1})\" text-anchor=\"end\" font-size=\"9\">{}</text>",
                svg::escape(id)
            );
        }
    }
    for (i, id) in m.ids.iter().enumerate() {
        #[allow(clippy::cast_precision_loss)]
        let _ = writeln!(
            svg,
            "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\" font-size=\"9\">{}</text>",
            label - 4.0,
            top + 9.0 + i as f64 * cell,
            svg::escape(id)
        );
    }
    // The colour scale: speed 0 at the bottom, 1.2 at the top, with round ticks.
    let scale = svg::Scale::linear(0.0, 1.2);
    let y_of = |v: f64| top + side - scale.fraction(v) * side;
    let steps = 60;
    for k in 0..steps {
        #[allow(clippy::cast_precision_loss)]
        let (v0, v1) = (
            1.2 * k as f64 / f64::from(steps),
            1.2 * (k + 1) as f64 / f64::from(steps),
        );
        let _ = writeln!(
            svg,
            "<rect x=\"{bar_x}\" y=\"{:.2}\" width=\"14\" height=\"{:.2}\" fill=\"{}\"/>",
            y_of(v1),
            y_of(v0) - y_of(v1) + 0.3,
            speed_colour(Some(f64::midpoint(v0, v1)))
        );
    }
    let _ = writeln!(
        svg,
        "<rect x=\"{bar_x}\" y=\"{top}\" width=\"14\" height=\"{side}\" fill=\"none\" stroke=\"black\"/>"
    );
    for t in scale.ticks(7) {
        let y = y_of(t.value);
        let _ = writeln!(
            svg,
            "<line x1=\"{}\" y1=\"{y:.1}\" x2=\"{}\" y2=\"{y:.1}\" stroke=\"black\"/><text x=\"{}\" y=\"{:.1}\">{}</text>",
            bar_x + 14.0,
            bar_x + 19.0,
            bar_x + 22.0,
            y + 4.0,
            t.label.unwrap_or_default()
        );
    }
    let _ = writeln!(svg, "<text x=\"{bar_x}\" y=\"{}\">speed</text>", top - 6.0);
    svg.push_str("</svg>\n");
    svg
}

#[cfg(test)]
mod tests {
    use super::{held_out_csv, read_held_out};

    #[test]
    fn held_out_rows_read_back_and_older_files_still_read() {
        let older = "split,gpu,a,b,speed,predicted\nunseen_model,v100,a3c,lm-bs5,0.5,0.6\n";
        let rows = read_held_out(older).expect("an older file reads");
        assert_eq!(rows.len(), 1);
        assert_eq!(
            (
                rows[0].predicted_p10,
                rows[0].held.as_deref(),
                rows[0].shift
            ),
            (None, None, None)
        );
        let mut row = rows[0].clone();
        row.predicted_p10 = Some(0.4);
        row.held = Some("LM".to_string());
        row.shift = Some(0.25);
        let text = held_out_csv(&[row.clone(), rows[0].clone()]);
        assert!(
            text.starts_with("split,gpu,a,b,speed,predicted,predicted_p10,held,shift\n"),
            "{text}"
        );
        assert_eq!(
            read_held_out(&text).expect("reads back"),
            vec![row, rows[0].clone()]
        );
    }
}
