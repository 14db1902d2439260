//! The simulation report: a table per policy, the JCT CDF and utilisation over time (SVG), and
//! every figure as JSON, written as one folder (complete or not at all).

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Result, anyhow};
use serde::Serialize;

use duet_core::svg;

use crate::sim::{Outcome, PolicyKind, Workload};

pub const REPORT_FILE: &str = "report.md";
pub const JSON_FILE: &str = "report.json";
pub const JCT_PLOT: &str = "jct-cdf.svg";
pub const UTILISATION_PLOT: &str = "utilisation.svg";

/// Everything one `duet simulate` run measured.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The command line that produced it.
    pub command: String,
    pub date: String,
    pub trace: String,
    pub dataset: String,
    pub gpus: u32,
    pub nodes: usize,
    /// GPUs of the drawn nodes by the trace's GPU model (every one runs at the dataset's speeds).
    pub gpu_models: std::collections::BTreeMap<String, u32>,
    pub seed: u64,
    pub slo: f64,
    /// Jobs one GPU may hold under the pricing policies.
    pub gpu_jobs: usize,
    /// Distinct groups of three or more the dataset measured (the truth where one is formed).
    pub measured_groups: usize,
    pub workload: Workload,
    pub outcomes: Vec<Outcome>,
    /// With `--feedback`: how the model learnt from what the cluster observed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub feedback: Option<FeedbackSummary>,
}

/// What a feedback run learnt: the held-out workloads and the model after each retraining.
#[derive(Debug, Clone, Serialize)]
pub struct FeedbackSummary {
    pub held_out: Vec<String>,
    /// Workloads in the ground truth.
    pub workloads: usize,
    pub retrain_hours: f64,
    pub noise: f64,
    pub checkpoints: Vec<crate::sim::feedback::Checkpoint>,
}

const COLOURS: [&str; 6] = [
    "#7f7f7f", "#ff7f0e", "#1f77b4", "#2ca02c", "#d62728", "#9467bd",
];

fn hours(seconds: f64) -> String {
    format!("{:.2}", seconds / 3600.0)
}

impl Report {
    /// The outcome of the policy `kind`, if it ran.
    pub fn outcome(&self, kind: PolicyKind) -> Option<&Outcome> {
        self.outcomes.iter().find(|o| o.kind == kind)
    }

    /// The Markdown report.
    pub fn markdown(&self) -> String {
        let mut md = String::new();
        let w = &self.workload;
        let _ = writeln!(md, "# Cluster simulation\n");
        let _ = writeln!(md, "Command: `{}` ({})\n", self.command, self.date);
        let _ = writeln!(
            md,
            "Trace `{}`: {} pods, {} simulated as jobs ({} CPU-only and {} GPU pods that never \
             ran left out); arrivals compressed {:.2}x for an offered load of {:.2} on {} GPUs ({} nodes \
             drawn with seed {}; their GPUs by model in the trace: {}, every one simulated at the \
             dataset's speeds). Ground truth: the measured pairs of `{}`. Inference (LS) jobs \
             must keep speed >= {}.\n",
            self.trace,
            w.pods,
            w.jobs,
            w.cpu_only,
            w.never_ran,
            w.compression,
            w.load,
            self.gpus,
            self.nodes,
            self.seed,
            self.gpu_models
                .iter()
                .map(|(m, n)| format!("{m} {n}"))
                .collect::<Vec<_>>()
                .join(", "),
            self.dataset,
            self.slo
        );
        let _ = writeln!(
            md,
            "| policy | avg JCT (h) | inference / training (h) | p50 JCT (h) | p99 JCT (h) | avg wait (h) | makespan (h) | jobs/h | GPUs busy | goodput/GPU | SLO violations | co-located | failed placements | rounds | round mean / p99 (ms) | predictor (s) | wall (s) |"
        );
        let _ = writeln!(
            md,
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
        );
        for o in &self.outcomes {
            let _ = writeln!(
                md,
                "| {} | {} | {} / {} | {} | {} | {} | {} | {:.1} | {:.1}% | {:.3} | {} of {} ({:.2}% of time) | {} | {} | {} | {:.2} / {:.2} | {:.2} | {:.1} |",
                o.policy,
                hours(o.avg_jct),
                hours(o.avg_jct_inference),
                hours(o.avg_jct_training),
                hours(o.p50_jct),
                hours(o.p99_jct),
                hours(o.avg_wait),
                hours(o.makespan),
                o.jobs_per_hour,
                o.busy * 100.0,
                o.goodput,
                o.slo_violations,
                o.inference_jobs,
                o.slo_violation_time * 100.0,
                o.co_located,
                o.failed_placements,
                o.rounds,
                o.round_mean_ms,
                o.round_p99_ms,
                o.predictor_ms / 1e3,
                o.wall_s
            );
        }
        if self.gpu_jobs > 2 {
            let _ = writeln!(
                md,
                "\nA GPU holds up to {} jobs under the pricing policies (packing pairs at most). \
                 Truth for a GPU of three or more: the group as `{}` measured it where it did \
                 ({} groups measured), else composed from its measured pairs, each co-runner's \
                 excess slowdown added (a model's figure, not a measurement).\n",
                self.gpu_jobs, self.dataset, self.measured_groups
            );
            for o in self.outcomes.iter().filter(|o| o.joined > 0) {
                let _ = writeln!(
                    md,
                    "- {}: {} placements joined two or more residents; truth measured for {}, \
                     composed for {}; at most {} jobs on one GPU",
                    o.policy,
                    o.joined,
                    o.joined_measured,
                    o.joined - o.joined_measured,
                    o.peak_gpu_jobs
                );
            }
        }
        if let Some(exclusive) = self.outcome(PolicyKind::Exclusive) {
            let _ = writeln!(md, "\nAgainst exclusive allocation:\n");
            for o in self
                .outcomes
                .iter()
                .filter(|o| o.kind != PolicyKind::Exclusive)
            {
                let _ = writeln!(
                    md,
                    "- {}: average JCT {:.2}x lower, {:.2}x the jobs per hour, GPUs busy {:.1}% \
                     -> {:.1}%",
                    o.policy,
                    exclusive.avg_jct / o.avg_jct.max(1e-9),
                    o.jobs_per_hour / exclusive.jobs_per_hour.max(1e-9),
                    exclusive.busy * 100.0,
                    o.busy * 100.0
                );
            }
        }
        if let (Some(d), Some(o)) = (
            self.outcome(PolicyKind::Duet),
            self.outcome(PolicyKind::Oracle),
        ) {
            let _ = writeln!(
                md,
                "\nPricing with duet's predictions against pricing with the oracle: average JCT \
                 {:+.2}%.",
                (d.avg_jct / o.avg_jct - 1.0) * 100.0
            );
        }
        if let Some(f) = &self.feedback {
            self.feedback_section(&mut md, f);
        }
        let _ = writeln!(
            md,
            "\nJCT: completion minus arrival. Makespan: the last completion (a pod of months \
             sets it). Jobs/h, GPUs busy and goodput are measured over the arrival window \
             ({:.1} h to {:.1} h after the first arrival). GPUs busy: time-average share of GPUs \
             running a job. Goodput/GPU: time-average of the jobs' true normalised throughput (times their \
             GPUs) per GPU; above the busy share where pairs do more than one job alone. Rounds: \
             placement rounds (pricing rounds for the pricing policies), wall-clock latency on \
             this machine; predictor: time inside the predictor's calls.\n",
            w.window.0 / 3600.0,
            w.window.1 / 3600.0
        );
        let _ = writeln!(
            md,
            "![JCT CDF]({JCT_PLOT})\n\n![GPU utilisation]({UTILISATION_PLOT})"
        );
        md
    }

    fn feedback_section(&self, md: &mut String, f: &FeedbackSummary) {
        let _ = writeln!(
            md,
            "\n## Learning from what the cluster observes\n\nThe model of `pricing + duet` was \
             trained without {} of the dataset's {} workloads ({}). Under `pricing + duet, \
             learning`, every job the loop placed (alone, beside one job, or in a group the dataset \
             measured) reported its true speed (times a log-normal error of {:.1}%, a 10 s \
             window's noise) as `POST /v1/observations` would store it; \
             every {} simulated hours the observations were pooled into a dataset (`duet dataset \
             export`'s pooling) and the model retrained on it beside the other workloads' \
             measurements (`duet train --final-only`).\n",
            f.held_out.len(),
            f.workloads,
            f.held_out.join(", "),
            f.noise * 100.0,
            f.retrain_hours
        );
        let _ = writeln!(
            md,
            "| hour | observations | observed settings | observed groups | observed workloads | held-out pairs: MAPE | held-out pairs: p90 coverage | other pairs: MAPE | training (s) |"
        );
        let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|");
        for c in &f.checkpoints {
            let _ = writeln!(
                md,
                "| {:.1} | {} | {} | {} | {} | {:.2}% | {:.1}% | {:.2}% | {:.1} |",
                c.hours,
                c.observations,
                c.observed_settings,
                c.observed_groups,
                c.observed_workloads,
                c.held_out_mape * 100.0,
                c.held_out_coverage * 100.0,
                c.known_mape * 100.0,
                c.train_s
            );
        }
        if let (Some(first), Some(last)) = (f.checkpoints.first(), f.checkpoints.last()) {
            let _ = writeln!(
                md,
                "\nHeld-out workloads' pairs: MAPE {:.2}% before feedback, {:.2}% after the last \
                 retraining ({:.2}x lower).",
                first.held_out_mape * 100.0,
                last.held_out_mape * 100.0,
                first.held_out_mape / last.held_out_mape.max(1e-12)
            );
        }
        if let Some(o) = self.outcome(PolicyKind::Oracle) {
            for kind in [PolicyKind::Duet, PolicyKind::Learning] {
                if let Some(d) = self.outcome(kind) {
                    let _ = writeln!(
                        md,
                        "- {}: average JCT {:.3} h, {:+.2}% against the oracle's {:.3} h",
                        kind.label(),
                        d.avg_jct / 3600.0,
                        (d.avg_jct / o.avg_jct - 1.0) * 100.0,
                        o.avg_jct / 3600.0
                    );
                }
            }
        }
    }

    /// Writes the report folder `out` (which must not exist).
    pub fn write(&self, out: &Path) -> Result<()> {
        let json = serde_json::to_string_pretty(self)?;
        let files = [
            (REPORT_FILE, self.markdown()),
            (JSON_FILE, json),
            (JCT_PLOT, self.jct_cdf()),
            (UTILISATION_PLOT, self.utilisation()),
        ];
        duet_core::atomic::write_folder(
            out,
            |p, e| anyhow!("{}: {e}", p.display()),
            |dir| {
                for (name, text) in &files {
                    let path = dir.join(name);
                    std::fs::write(&path, text)
                        .map_err(|e| anyhow!("{}: cannot write: {e}", path.display()))?;
                }
                Ok(())
            },
        )
    }

    fn legend(&self, svg: &mut String, x: f64, y: f64) {
        let entries: Vec<(&str, &str)> = self
            .outcomes
            .iter()
            .enumerate()
            .map(|(i, o)| (COLOURS[i % COLOURS.len()], o.kind.label()))
            .collect();
        svg::legend(svg, x, y, &entries);
    }

    /// Cumulative share of jobs by completion time (hours, log scale), one line per policy.
    fn jct_cdf(&self) -> String {
        let (w, h) = (660.0, 440.0);
        // Hours; a job's completion time counts as at least one second.
        let jct = || {
            self.outcomes
                .iter()
                .flat_map(|o| o.jct.iter().map(|v| v.max(1.0) / 3600.0))
        };
        let lo = jct().fold(f64::INFINITY, f64::min);
        let hi = jct().fold(0.0f64, f64::max);
        let (lo, hi) = if lo.is_finite() && hi > 0.0 {
            (lo, hi)
        } else {
            (0.01, 1.0)
        };
        let axes = svg::Axes::new(
            w,
            h,
            svg::Scale::log(lo, hi),
            svg::Scale::linear(0.0, 1.0).percent(),
        );
        let mut svg = svg::open(w, h);
        axes.grid(&mut svg);
        for (i, o) in self.outcomes.iter().enumerate() {
            let mut sorted = o.jct.clone();
            sorted.sort_by(f64::total_cmp);
            let n = sorted.len().max(1);
            let step = (n / 400).max(1);
            let mut points = String::new();
            for (k, v) in sorted
                .iter()
                .enumerate()
                .step_by(step)
                .chain(sorted.iter().enumerate().next_back())
            {
                #[allow(clippy::cast_precision_loss)]
                let q = (k + 1) as f64 / n as f64;
                let _ = write!(
                    points,
                    "{:.1},{:.1} ",
                    axes.px(v.max(1.0) / 3600.0),
                    axes.py(q)
                );
            }
            let _ = writeln!(
                svg,
                "<polyline points=\"{points}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\"/>",
                COLOURS[i % COLOURS.len()]
            );
        }
        axes.frame(
            &mut svg,
            "job completion time (hours, log scale)",
            "share of jobs completed within",
        );
        // Top left: a CDF's lines are still low at the shortest times.
        self.legend(&mut svg, axes.left + 12.0, axes.top + 20.0);
        svg.push_str("</svg>\n");
        svg
    }

    /// Share of GPUs busy (solid) and goodput per GPU (dashed) over time, one colour per policy.
    fn utilisation(&self) -> String {
        let (w, h) = (660.0, 380.0);
        let times = || {
            self.outcomes
                .iter()
                .flat_map(|o| o.series.iter().map(|p| p.0))
        };
        let start = times().fold(f64::INFINITY, f64::min);
        let end = times().fold(f64::NEG_INFINITY, f64::max);
        let (start, end) = if start < end {
            (start, end)
        } else {
            (0.0, 1.0)
        };
        let top = self
            .outcomes
            .iter()
            .flat_map(|o| o.series.iter().map(|p| p.2))
            .fold(1.0f64, f64::max);
        let axes = svg::Axes::new(
            w,
            h,
            svg::Scale::linear(start / 3600.0, end / 3600.0),
            svg::Scale::linear(0.0, top),
        );
        let mut svg = svg::open(w, h);
        axes.grid(&mut svg);
        for (i, o) in self.outcomes.iter().enumerate() {
            for (dash, pick) in [("", 1usize), (" stroke-dasharray=\"4 3\"", 2)] {
                let mut points = String::new();
                for p in &o.series {
                    let v = if pick == 1 { p.1 } else { p.2 };
                    let _ = write!(points, "{:.1},{:.1} ", axes.px(p.0 / 3600.0), axes.py(v));
                }
                let _ = writeln!(
                    svg,
                    "<polyline points=\"{points}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1\"{dash}/>",
                    COLOURS[i % COLOURS.len()]
                );
            }
        }
        axes.frame(
            &mut svg,
            "hours since the first arrival (the arrival window and a quarter beyond)",
            "GPUs busy (solid), goodput per GPU (dashed)",
        );
        #[allow(clippy::cast_precision_loss)]
        let legend_y = axes.bottom - 8.0 - 16.0 * (self.outcomes.len() as f64 - 1.0);
        self.legend(&mut svg, axes.right - 220.0, legend_y);
        svg.push_str("</svg>\n");
        svg
    }
}
