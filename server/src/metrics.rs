//! Prometheus metrics through the `prometheus-client` crate: requests by route and status,
//! latency and pairs-per-request histograms, reloads and their failures, observations and what
//! they scored (counted as they happen, in a registry built once); and what is read when
//! `/metrics` is scraped: the model's version, the registry's size and store, the rolling drift
//! windows, the lifecycle and the guards.
//!
//! `/metrics` answers in the format the scraper asks for, as Prometheus' own client libraries
//! do: OpenMetrics to an `Accept` that prefers it (Prometheus does), else the classic text
//! format (0.0.4). Every series keeps the name it had before (the dashboard and the alert rules
//! read them): counters are registered without `_total`, which the crate appends; the running
//! sum of APEs, whose name ends in `_sum`, is typed `unknown` (`untyped`) so that it keeps
//! exactly its name.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use duet_core::api::Calibration;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabelSet, EncodeMetric, MetricEncoder, prometheus_text, text,
};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::{Metric, Registry, Unit};

/// The two text formats of `/metrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// OpenMetrics 1.0 (`# EOF` at the end, counters' families named without `_total`).
    OpenMetrics,
    /// The classic Prometheus text format, version 0.0.4.
    Text,
}

impl Format {
    /// The format an `Accept` header prefers: the media range of the highest quality (the
    /// first of equals) among OpenMetrics and plain text; plain text without one.
    pub fn negotiate(accept: Option<&str>) -> Format {
        let mut best = (Format::Text, 0.0_f32);
        for range in accept.unwrap_or_default().split(',') {
            let mut parts = range.split(';').map(str::trim);
            let format = match parts.next().map(str::to_ascii_lowercase).as_deref() {
                Some("application/openmetrics-text") => Format::OpenMetrics,
                Some("text/plain" | "text/*" | "*/*") => Format::Text,
                _ => continue,
            };
            let q = parts
                .find_map(|p| p.strip_prefix("q="))
                .map_or(Some(1.0), |q| q.parse::<f32>().ok())
                .unwrap_or(0.0);
            if q > best.1 {
                best = (format, q);
            }
        }
        best.0
    }

    /// The media type of the answer.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Format::Text => prometheus_text::CONTENT_TYPE,
        }
    }
}

/// Latency buckets, seconds.
const LATENCY: [f64; 14] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];
/// Pairs-per-request buckets.
const PAIRS: [f64; 9] = [
    1.0, 10.0, 100.0, 1000.0, 5000.0, 10000.0, 25000.0, 50000.0, 100000.0,
];

/// The outcomes of a reported observation, each always exported (0 until it happens).
const OUTCOMES: [&str; 3] = ["stored", "duplicate", "rejected"];

/// `route` (the route's pattern, never the raw path: a bounded set) and `status`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteStatus {
    route: String,
    status: u16,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Route {
    route: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Outcome {
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CalibrationClass {
    calibration: &'static str,
}

/// A group's class and how it was answered (`excess`, `excess+effects` or `network`: a
/// bounded set the server writes).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GroupAnswer {
    calibration: &'static str,
    composition: String,
}

/// `gpu` (the model's devices, or `other`: a bounded set) and `mode` (`solo` for solo runs).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DeviceMode {
    gpu: String,
    mode: String,
}

/// A running sum that only grows but whose name ends in `_sum`, not `_total`: typed `unknown`,
/// which OpenMetrics writes, and Prometheus stores, under exactly its name.
#[derive(Debug, Clone, Default)]
struct Sum(Gauge<f64, AtomicU64>);

impl TypedMetric for Sum {
    const TYPE: MetricType = MetricType::Unknown;
}

impl EncodeMetric for Sum {
    fn encode(&self, encoder: MetricEncoder) -> fmt::Result {
        self.0.encode(encoder)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

type Latency = Family<Route, Histogram, fn() -> Histogram>;

/// Every metric the server counts as things happen, and the registry that exports them.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    requests: Family<RouteStatus, Counter>,
    latency: Latency,
    pairs: Histogram,
    /// Pairs predicted, by the calibration class of their p90 (`known`, `new`, `new_family`,
    /// `conservative`).
    predicted: Family<CalibrationClass, Counter>,
    /// Groups of three or more predicted, by class and how they were answered.
    predicted_groups: Family<GroupAnswer, Counter>,
    /// KServe v2 rows answered, by the calibration class of the pair each encodes.
    kserve_rows: Family<CalibrationClass, Counter>,
    reloads: Counter,
    reload_failures: Counter,
    observations: Family<Outcome, Counter>,
    /// Stored observations by device and mode, and their jobs scored on arrival by the model
    /// then serving.
    observed: Family<DeviceMode, Counter>,
    jobs_scored: Family<DeviceMode, Counter>,
    ape_sum: Family<DeviceMode, Sum>,
    covered: Family<DeviceMode, Counter>,
    /// What the guards refused or stopped (shed, timed out, panicked, over the connection
    /// limit); read at scrape time with the limiter's gauges.
    pub guards: crate::shed::Counters,
}

/// Registers `metric` under `name`; `help` ends with a full stop, which the crate adds.
fn register(registry: &mut Registry, name: &str, help: &str, metric: impl Metric) {
    registry.register(name, help.strip_suffix('.').unwrap_or(help), metric);
}

impl Default for Metrics {
    fn default() -> Self {
        let m = Metrics {
            registry: Registry::default(),
            requests: Family::default(),
            latency: Latency::new_with_constructor(|| Histogram::new(LATENCY)),
            pairs: Histogram::new(PAIRS),
            predicted: Family::default(),
            predicted_groups: Family::default(),
            kserve_rows: Family::default(),
            reloads: Counter::default(),
            reload_failures: Counter::default(),
            observations: Family::default(),
            observed: Family::default(),
            jobs_scored: Family::default(),
            ape_sum: Family::default(),
            covered: Family::default(),
            guards: crate::shed::Counters::default(),
        };
        for outcome in OUTCOMES {
            let _ = m.observations.get_or_create(&Outcome { outcome });
        }
        for class in Calibration::ALL {
            let label = CalibrationClass {
                calibration: class.as_str(),
            };
            let _ = m.predicted.get_or_create(&label);
            let _ = m.kserve_rows.get_or_create(&label);
        }
        let mut registry = Registry::default();
        let r = &mut registry;
        register(
            r,
            "duet_requests",
            "Requests answered, by route and status.",
            m.requests.clone(),
        );
        r.register_with_unit(
            "duet_request_duration",
            "Time to answer, by route",
            Unit::Seconds,
            m.latency.clone(),
        );
        register(
            r,
            "duet_predict_pairs",
            "Pairs per prediction request.",
            m.pairs.clone(),
        );
        register(
            r,
            "duet_predicted_pairs",
            "Pairs predicted, by the calibration class of their p90 slowdowns (conservative: no \
             calibrated class covers them; the widest p90 the model has).",
            m.predicted.clone(),
        );
        register(
            r,
            "duet_predicted_groups",
            "Groups of three or more jobs predicted, by the calibration class of their p90 \
             slowdowns and how they were answered (excess, excess+effects: composed from their \
             pairs, which duet_predicted_pairs counts too; network: by the network, one row per \
             job, not counted as pairs).",
            m.predicted_groups.clone(),
        );
        register(
            r,
            "duet_kserve_rows",
            "KServe v2 rows answered (HTTP and gRPC), by the calibration class of the pair each \
             row encodes.",
            m.kserve_rows.clone(),
        );
        register(
            r,
            "duet_model_reloads",
            "Successful model reloads.",
            m.reloads.clone(),
        );
        register(
            r,
            "duet_model_reload_failures",
            "Reloads refused (the old model kept serving).",
            m.reload_failures.clone(),
        );
        register(
            r,
            "duet_observations",
            "Observations reported, by outcome (stored, duplicate: stored before, rejected).",
            m.observations.clone(),
        );
        register(
            r,
            "duet_observed",
            "Observations stored, by device and mode (solo: solo runs).",
            m.observed.clone(),
        );
        register(
            r,
            "duet_observed_jobs_scored",
            "Jobs of observed pairs scored against the prediction made on arrival.",
            m.jobs_scored.clone(),
        );
        register(
            r,
            "duet_observed_speed_ape_sum",
            "Sum of |predicted - observed| / observed speed over the scored jobs: divided by \
             duet_observed_jobs_scored_total, the MAPE.",
            m.ape_sum.clone(),
        );
        register(
            r,
            "duet_observed_p90_covered",
            "Scored jobs whose observed slowdown stayed at or below the predicted p90.",
            m.covered.clone(),
        );
        Metrics { registry, ..m }
    }
}

impl Metrics {
    /// Counts one finished request on `route` (the route's pattern, never the raw path).
    pub fn request(&self, route: &str, status: u16, seconds: f64) {
        let key = RouteStatus {
            route: route.to_string(),
            status,
        };
        self.requests.get_or_create(&key).inc();
        self.latency
            .get_or_create(&Route { route: key.route })
            .observe(seconds);
    }

    #[allow(clippy::cast_precision_loss)]
    pub fn pairs(&self, n: usize) {
        self.pairs.observe(n as f64);
    }

    /// Counts predicted pairs, one class each.
    pub fn predicted(&self, classes: impl IntoIterator<Item = Calibration>) {
        by_class(&self.predicted, classes);
    }

    /// Counts predicted groups by class and composition (each series' total added once).
    pub fn predicted_groups<'a>(&self, groups: impl IntoIterator<Item = (Calibration, &'a str)>) {
        let mut counts: std::collections::BTreeMap<(&'static str, &'a str), u64> =
            std::collections::BTreeMap::new();
        for (class, composition) in groups {
            *counts.entry((class.as_str(), composition)).or_default() += 1;
        }
        for ((calibration, composition), n) in counts {
            self.predicted_groups
                .get_or_create(&GroupAnswer {
                    calibration,
                    composition: composition.to_string(),
                })
                .inc_by(n);
        }
    }

    /// Counts answered KServe rows, one class each.
    pub fn kserve_rows(&self, classes: impl IntoIterator<Item = Calibration>) {
        by_class(&self.kserve_rows, classes);
    }

    pub fn reload(&self, ok: bool) {
        if ok {
            self.reloads.inc();
        } else {
            self.reload_failures.inc();
        }
    }

    /// Counts the outcome of one reported observation: `stored`, `duplicate` or `rejected`.
    pub fn observation(&self, outcome: &'static str) {
        self.observations.get_or_create(&Outcome { outcome }).inc();
    }

    /// Counts a stored observation of `gpu` under `mode` (`solo` for a solo run) and, for a
    /// pair, its two jobs' scores against the prediction made on arrival.
    pub fn observed(&self, gpu: &str, mode: &str, scores: &[crate::drift::JobScore]) {
        let key = DeviceMode {
            gpu: gpu.to_string(),
            mode: mode.to_string(),
        };
        self.observed.get_or_create(&key).inc();
        let jobs = scores.len() as u64;
        let covered = scores.iter().filter(|s| s.covered).count() as u64;
        self.jobs_scored.get_or_create(&key).inc_by(jobs);
        self.covered.get_or_create(&key).inc_by(covered);
        self.ape_sum
            .get_or_create(&key)
            .0
            .inc_by(scores.iter().map(|s| s.ape).sum());
    }

    /// The whole exposition in `format`: what was counted, then what `now` read from the
    /// server.
    pub fn render(&self, now: Scrape, format: Format) -> String {
        let mut out = String::with_capacity(16 * 1024);
        let mut scrape = Registry::default();
        let guards = &self.guards;
        scrape.register_collector(Box::new(Now {
            scrape: now,
            guards: [
                &guards.shed,
                &guards.timeouts,
                &guards.panics,
                &guards.given_up,
                &guards.connections_refused,
                &guards.header_timeouts,
                &guards.connections_open,
            ]
            .map(|c| c.load(Ordering::Relaxed)),
        }));
        // Writing into a String cannot fail, nor can encoding what the registries hold.
        let _ = match format {
            Format::OpenMetrics => text::encode_registry(&mut out, &self.registry)
                .and_then(|()| text::encode_registry(&mut out, &scrape))
                .and_then(|()| text::encode_eof(&mut out)),
            Format::Text => prometheus_text::encode(&mut out, &self.registry)
                .and_then(|()| prometheus_text::encode(&mut out, &scrape)),
        };
        out
    }
}

/// What `/metrics` reads from the server when it is scraped, beside what `Metrics` counted.
#[derive(Debug, Clone, Default)]
pub struct Scrape {
    /// The loaded model's version (empty while none is loaded) and engine.
    pub model_version: String,
    pub engine: &'static str,
    pub workloads: usize,
    /// The rolling drift windows, by device and mode.
    pub drift: Vec<(crate::drift::Group, crate::drift::Tally)>,
    /// The registry's store (`memory`, `sqlite`, `postgres`) and where this replica stands
    /// against it.
    pub store: &'static str,
    pub sequence: i64,
    pub last_sync_age_s: Option<f64>,
    pub database_errors: u64,
    pub degraded: bool,
    /// The repository's `previous` model serves in place of the configured one.
    pub fallback: bool,
    pub draining: bool,
    pub work_in_flight: usize,
    pub work_waiting: usize,
    /// Bytes of request bodies held now, and bodies refused for the budget
    /// (`--max-inflight-body-bytes`).
    pub body_bytes_in_flight: usize,
    pub bodies_refused: u64,
}

/// The scrape-time part of the exposition, for one scrape.
#[derive(Debug)]
struct Now {
    scrape: Scrape,
    /// `Counters`' values: shed, timeouts, panics, given up, connections refused, header
    /// timeouts, connections open.
    guards: [u64; 7],
}

/// Writes one family of one series without labels.
fn constant(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    metric: &impl EncodeMetric,
) -> fmt::Result {
    metric.encode(encoder.encode_descriptor(name, help, unit, metric.metric_type())?)
}

impl Collector for Now {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let s = &self.scrape;
        let e = &mut encoder;
        let mut info = e.encode_descriptor(
            "duet_model_info",
            "The loaded model (always 1).",
            None,
            MetricType::Gauge,
        )?;
        ConstGauge::new(1).encode(
            info.encode_family(&[("version", s.model_version.as_str()), ("engine", s.engine)])?,
        )?;
        let workloads = ConstGauge::new(s.workloads);
        constant(
            e,
            "duet_registered_workloads",
            "Workloads in the registry.",
            None,
            &workloads,
        )?;
        self.drift(e)?;
        let mut sequence = e.encode_descriptor(
            "duet_registry_sequence",
            "The highest registry change sequence number this replica has applied from its \
             store.",
            None,
            MetricType::Gauge,
        )?;
        ConstGauge::new(s.sequence).encode(sequence.encode_family(&[("store", s.store)])?)?;
        if let Some(age) = s.last_sync_age_s {
            constant(
                e,
                "duet_registry_last_sync_age",
                "Seconds since this replica last caught up with the shared registry.",
                Some(&Unit::Seconds),
                &ConstGauge::new((age * 1000.0).round() / 1000.0),
            )?;
        }
        constant(
            e,
            "duet_registry_database_errors",
            "Failed registry database operations (connections, catch-ups, writes).",
            None,
            &ConstCounter::new(s.database_errors),
        )?;
        let flags = [
            (
                "duet_registry_degraded",
                "1 while the registry's store cannot be reached (predictions serve the last \
                 synced registry; writes answer 503).",
                s.degraded,
            ),
            (
                "duet_model_fallback",
                "1 while the model repository's `previous` model serves because the configured \
                 one could not be loaded at start.",
                s.fallback,
            ),
            (
                "duet_draining",
                "1 after SIGTERM, while /readyz answers 503 and requests finish.",
                s.draining,
            ),
        ];
        for (name, help, on) in flags {
            constant(e, name, help, None, &ConstGauge::new(i64::from(on)))?;
        }
        self.guards(e)
    }
}

impl Now {
    /// The rolling windows' gauges, for the windows that hold a scored job.
    fn drift(&self, e: &mut DescriptorEncoder) -> fmt::Result {
        type Value = fn(&duet_core::api::DriftEntry) -> f64;
        let windows: Vec<(String, String, duet_core::api::DriftEntry)> = self
            .scrape
            .drift
            .iter()
            .map(|((gpu, mode), tally)| (gpu.clone(), mode.to_string(), tally.entry(String::new())))
            .filter(|(_, _, entry)| entry.observations > 0)
            .collect();
        if windows.is_empty() {
            return Ok(());
        }
        let gauges: [(&str, &str, Value); 2] = [
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
        ];
        fn labels<'l>(gpu: &'l str, mode: &'l str) -> [(&'static str, &'l str); 2] {
            [("gpu", gpu), ("mode", mode)]
        }
        for (name, help, value) in gauges {
            let mut family = e.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for (gpu, mode, entry) in &windows {
                ConstGauge::new(value(entry)).encode(family.encode_family(&labels(gpu, mode))?)?;
            }
        }
        let mut family = e.encode_descriptor(
            "duet_drift_window_jobs",
            "Jobs in the rolling window (two per observed pair).",
            None,
            MetricType::Gauge,
        )?;
        for (gpu, mode, entry) in &windows {
            ConstGauge::new(entry.observations)
                .encode(family.encode_family(&labels(gpu, mode))?)?;
        }
        Ok(())
    }

    /// What the guards counted, and the limiter's and the listener's gauges.
    fn guards(&self, e: &mut DescriptorEncoder) -> fmt::Result {
        let [
            shed,
            timeouts,
            panics,
            given_up,
            refused,
            header_timeouts,
            open,
        ] = self.guards;
        let s = &self.scrape;
        let counters = [
            (
                "duet_requests_shed",
                "Requests answered 503 at once: every place of work in flight and waiting taken.",
                shed,
            ),
            (
                "duet_request_timeouts",
                "Requests answered 503 for taking longer than --request-timeout.",
                timeouts,
            ),
            (
                "duet_panics",
                "Panics caught while answering a request (answered 500).",
                panics,
            ),
            (
                "duet_work_given_up",
                "Model work stopped early: its client went away or its time ran out.",
                given_up,
            ),
            (
                "duet_connections_refused",
                "Connections closed at once: over --max-connections (and not a probe).",
                refused,
            ),
            (
                "duet_header_timeouts",
                "Connections closed for not sending a request's header (gRPC: the HTTP/2 preface) within --header-timeout.",
                header_timeouts,
            ),
            (
                "duet_bodies_refused",
                "Requests answered 503 because the bytes of request bodies in flight would pass --max-inflight-body-bytes.",
                s.bodies_refused,
            ),
        ];
        for (name, help, value) in counters {
            constant(e, name, help, None, &ConstCounter::new(value))?;
        }
        let gauges = [
            (
                "duet_work_in_flight",
                "Places of model work taken now (at most --max-inflight; a request split over every core takes one per core).",
                s.work_in_flight as u64,
            ),
            (
                "duet_work_waiting",
                "Places of model work waited for (at most --max-queue).",
                s.work_waiting as u64,
            ),
            (
                "duet_body_bytes_in_flight",
                "Bytes of request bodies held now, with what gRPC messages decode into (at most --max-inflight-body-bytes).",
                s.body_bytes_in_flight as u64,
            ),
            (
                "duet_connections_open",
                "Client connections open (at most --max-connections, and the probes' reserve).",
                open,
            ),
        ];
        for (name, help, value) in gauges {
            constant(e, name, help, None, &ConstGauge::new(value))?;
        }
        Ok(())
    }
}

/// Adds each of `classes` to its series of `family`, tallied first: one increment per class.
fn by_class(
    family: &Family<CalibrationClass, Counter>,
    classes: impl IntoIterator<Item = Calibration>,
) {
    let mut counts = [0u64; Calibration::ALL.len()];
    for class in classes {
        counts[class.code()] += 1;
    }
    for (class, n) in Calibration::ALL.into_iter().zip(counts) {
        if n > 0 {
            family
                .get_or_create(&CalibrationClass {
                    calibration: class.as_str(),
                })
                .inc_by(n);
        }
    }
}

#[cfg(test)]
mod tests;
