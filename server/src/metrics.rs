//! Prometheus metrics, in the text exposition format: requests by route and status, latency and
//! pairs-per-request histograms, the model's version, reloads and their failures; observations
//! and drift (what the model predicted against what the cluster observed).

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// Latency buckets, seconds.
const LATENCY: [f64; 14] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];
/// Pairs-per-request buckets.
const PAIRS: [f64; 9] = [
    1.0, 10.0, 100.0, 1000.0, 5000.0, 10000.0, 25000.0, 50000.0, 100000.0,
];

#[derive(Debug)]
struct Histogram {
    bounds: &'static [f64],
    counts: Vec<AtomicU64>,
    /// Sum in micro-units, so it stays an atomic integer.
    sum_micro: AtomicU64,
    count: AtomicU64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            counts: bounds.iter().map(|_| AtomicU64::new(0)).collect(),
            sum_micro: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }

    fn observe(&self, v: f64) {
        if let Some(i) = self.bounds.iter().position(|b| v <= *b) {
            self.counts[i].fetch_add(1, Ordering::Relaxed);
        }
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        self.sum_micro
            .fetch_add((v * 1e6).round() as u64, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let mut cumulative = 0;
        let sep = if labels.is_empty() { "" } else { "," };
        for (bound, count) in self.bounds.iter().zip(&self.counts) {
            cumulative += count.load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels}{sep}le=\"{bound}\"}} {cumulative}"
            );
        }
        let count = self.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {count}");
        #[allow(clippy::cast_precision_loss)]
        let sum = self.sum_micro.load(Ordering::Relaxed) as f64 / 1e6;
        let braces = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{labels}}}")
        };
        let _ = writeln!(out, "{name}_sum{braces} {sum}");
        let _ = writeln!(out, "{name}_count{braces} {count}");
    }
}

/// Every metric the server exports.
#[derive(Debug)]
pub struct Metrics {
    /// route -> status -> count
    requests: Mutex<BTreeMap<String, BTreeMap<u16, u64>>>,
    latency: Mutex<BTreeMap<String, Histogram>>,
    pairs: Histogram,
    reloads: AtomicU64,
    reload_failures: AtomicU64,
    /// outcome (stored, duplicate, rejected) -> observations
    observations: Mutex<BTreeMap<&'static str, u64>>,
    /// (gpu, mode or `solo`) -> what was stored and scored on arrival
    observed: Mutex<BTreeMap<(String, String), Observed>>,
    /// What the guards refused or stopped (shed, timed out, panicked, over the connection
    /// limit); rendered with the limiter's gauges by `Counters::render`.
    pub guards: crate::shed::Counters,
}

/// Stored observations of one device and mode, scored on arrival by the model then serving.
#[derive(Debug, Default, Clone, Copy)]
struct Observed {
    stored: u64,
    jobs_scored: u64,
    ape_sum: f64,
    covered: u64,
}

/// A counter of stored observations: name, type, help, and its value.
type ObservedSeries = (
    &'static str,
    &'static str,
    &'static str,
    fn(&Observed) -> f64,
);
/// A rolling drift gauge: name, help, and its value from the window's tally.
type DriftGauge = (
    &'static str,
    &'static str,
    fn(&duet_core::api::DriftEntry) -> f64,
);

/// A label value as the exposition format quotes it.
fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            requests: Mutex::default(),
            latency: Mutex::default(),
            pairs: Histogram::new(&PAIRS),
            reloads: AtomicU64::new(0),
            reload_failures: AtomicU64::new(0),
            observations: Mutex::default(),
            observed: Mutex::default(),
            guards: crate::shed::Counters::default(),
        }
    }
}

impl Metrics {
    /// Counts one finished request on `route` (the route's pattern, never the raw path).
    pub fn request(&self, route: &str, status: u16, seconds: f64) {
        if let Ok(mut r) = self.requests.lock() {
            let by_status = match r.get_mut(route) {
                Some(m) => m,
                None => r.entry(route.to_string()).or_default(),
            };
            *by_status.entry(status).or_insert(0) += 1;
        }
        if let Ok(mut l) = self.latency.lock() {
            match l.get(route) {
                Some(h) => h.observe(seconds),
                None => l
                    .entry(route.to_string())
                    .or_insert_with(|| Histogram::new(&LATENCY))
                    .observe(seconds),
            }
        }
    }

    #[allow(clippy::cast_precision_loss)]
    pub fn pairs(&self, n: usize) {
        self.pairs.observe(n as f64);
    }

    pub fn reload(&self, ok: bool) {
        if ok {
            self.reloads.fetch_add(1, Ordering::Relaxed);
        } else {
            self.reload_failures.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts the outcome of one reported observation: `stored`, `duplicate` or `rejected`.
    pub fn observation(&self, outcome: &'static str) {
        if let Ok(mut o) = self.observations.lock() {
            *o.entry(outcome).or_insert(0) += 1;
        }
    }

    /// Counts a stored observation of `gpu` under `mode` (`solo` for a solo run) and, for a
    /// pair, its two jobs' scores against the prediction made on arrival.
    pub fn observed(&self, gpu: &str, mode: &str, scores: &[crate::drift::JobScore]) {
        if let Ok(mut o) = self.observed.lock() {
            let entry = o.entry((gpu.to_string(), mode.to_string())).or_default();
            entry.stored += 1;
            for score in scores {
                entry.jobs_scored += 1;
                entry.ape_sum += score.ape;
                entry.covered += u64::from(score.covered);
            }
        }
    }

    /// The exposition text, with the model's version, the registry's size and the rolling drift
    /// windows.
    pub fn render(
        &self,
        model_version: &str,
        engine: &str,
        workloads: usize,
        drift: &[(crate::drift::Group, crate::drift::Tally)],
    ) -> String {
        let mut out = String::new();
        out.push_str("# HELP duet_requests_total Requests answered, by route and status.\n");
        out.push_str("# TYPE duet_requests_total counter\n");
        if let Ok(r) = self.requests.lock() {
            for (route, by_status) in r.iter() {
                for (status, n) in by_status {
                    let _ = writeln!(
                        out,
                        "duet_requests_total{{route=\"{route}\",status=\"{status}\"}} {n}"
                    );
                }
            }
        }
        out.push_str("# HELP duet_request_duration_seconds Time to answer, by route.\n");
        out.push_str("# TYPE duet_request_duration_seconds histogram\n");
        if let Ok(l) = self.latency.lock() {
            for (route, h) in l.iter() {
                h.render(
                    &mut out,
                    "duet_request_duration_seconds",
                    &format!("route=\"{route}\""),
                );
            }
        }
        out.push_str("# HELP duet_predict_pairs Pairs per prediction request.\n");
        out.push_str("# TYPE duet_predict_pairs histogram\n");
        self.pairs.render(&mut out, "duet_predict_pairs", "");
        let escaped = label(model_version);
        let _ = writeln!(
            out,
            "# HELP duet_model_info The loaded model (always 1).\n# TYPE duet_model_info gauge\n\
             duet_model_info{{version=\"{escaped}\",engine=\"{engine}\"}} 1"
        );
        let _ = writeln!(
            out,
            "# HELP duet_model_reloads_total Successful model reloads.\n\
             # TYPE duet_model_reloads_total counter\nduet_model_reloads_total {}",
            self.reloads.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "# HELP duet_model_reload_failures_total Reloads refused (the old model kept serving).\n\
             # TYPE duet_model_reload_failures_total counter\nduet_model_reload_failures_total {}",
            self.reload_failures.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "# HELP duet_registered_workloads Workloads in the registry.\n\
             # TYPE duet_registered_workloads gauge\nduet_registered_workloads {workloads}"
        );
        self.render_observations(&mut out, drift);
        out
    }

    fn render_observations(
        &self,
        out: &mut String,
        drift: &[(crate::drift::Group, crate::drift::Tally)],
    ) {
        out.push_str(
            "# HELP duet_observations_total Observations reported, by outcome (stored, \
             duplicate: stored before, rejected).\n# TYPE duet_observations_total counter\n",
        );
        if let Ok(o) = self.observations.lock() {
            for outcome in ["stored", "duplicate", "rejected"] {
                let n = o.get(outcome).copied().unwrap_or(0);
                let _ = writeln!(out, "duet_observations_total{{outcome=\"{outcome}\"}} {n}");
            }
        }
        let observed: Vec<((String, String), Observed)> = self
            .observed
            .lock()
            .map(|o| o.iter().map(|(k, v)| (k.clone(), *v)).collect())
            .unwrap_or_default();
        let series: [ObservedSeries; 4] = [
            (
                "duet_observed_total",
                "counter",
                "Observations stored, by device and mode (solo: solo runs).",
                #[allow(clippy::cast_precision_loss)]
                |o| o.stored as f64,
            ),
            (
                "duet_observed_jobs_scored_total",
                "counter",
                "Jobs of observed pairs scored against the prediction made on arrival.",
                #[allow(clippy::cast_precision_loss)]
                |o| o.jobs_scored as f64,
            ),
            (
                "duet_observed_speed_ape_sum",
                "counter",
                "Sum of |predicted - observed| / observed speed over the scored jobs: \
                 divided by duet_observed_jobs_scored_total, the MAPE.",
                |o| o.ape_sum,
            ),
            (
                "duet_observed_p90_covered_total",
                "counter",
                "Scored jobs whose observed slowdown stayed at or below the predicted p90.",
                #[allow(clippy::cast_precision_loss)]
                |o| o.covered as f64,
            ),
        ];
        for (name, kind, help, value) in series {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for ((gpu, mode), o) in &observed {
                let _ = writeln!(
                    out,
                    "{name}{{gpu=\"{}\",mode=\"{}\"}} {}",
                    label(gpu),
                    label(mode),
                    value(o)
                );
            }
        }
        let gauges: [DriftGauge; 3] = [
            (
                "duet_drift_speed_mape",
                "MAPE of speed over the rolling window of observed pairs, scored by the loaded \
                 model (a fraction: 0.1 is 10%).",
                |e| e.mape,
            ),
            (
                "duet_drift_p90_coverage",
                "Share of the window's jobs whose observed slowdown stayed at or below the \
                 loaded model's p90 (0.9 promised).",
                |e| e.p90_coverage,
            ),
            (
                "duet_drift_window_jobs",
                "Jobs in the rolling window (two per observed pair).",
                #[allow(clippy::cast_precision_loss)]
                |e| e.observations as f64,
            ),
        ];
        for (name, help, value) in gauges {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
            for ((gpu, mode), tally) in drift {
                let entry = tally.entry(String::new());
                if entry.observations == 0 {
                    continue;
                }
                let _ = writeln!(
                    out,
                    "{name}{{gpu=\"{}\",mode=\"{mode}\"}} {}",
                    label(gpu),
                    value(&entry)
                );
            }
        }
    }
}
