//! `/metrics` of the extender and the scheduler (OpenMetrics, through `prometheus-client`).

use prometheus_client::encoding::text;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::known::Unknown;
use crate::watch::Freshness;

type Labels = Vec<(String, String)>;

/// Every series the Kubernetes side reports.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    /// Extender calls by verb and outcome (`ok`, `bad_request`, `unavailable`).
    pub requests: Family<Labels, Counter>,
    /// Their time, by verb.
    pub seconds: Family<Labels, Histogram>,
    /// Pods duet does not know, by why (each time one is judged).
    pub unknown_pods: Family<Labels, Counter>,
    /// Bindings made, by shape (`whole`, `beside`, `unjudged`), and ones the API server refused.
    pub bound: Family<Labels, Counter>,
    pub bind_failures: Counter,
    /// Pods bound whose record in their status could not be written (`bind::bind`).
    pub record_failures: Counter,
    /// Scheduling rounds, pods left pending after the last one.
    pub rounds: Counter,
    pub unplaced: Gauge,
    /// Bindings of `duet schedule` sent and not yet answered, and pods it holds back after a
    /// failed binding, at the end of its last step.
    pub in_flight: Gauge,
    pub held_back: Gauge,
    /// 1 while the view of the cluster is stale (the API server unreachable), else 0.
    pub stale: Gauge,
    /// What the listener's guards refused, and the connections being served.
    pub guards: Guards,
    /// The permissions of duet's role checked at start: 1 each that is missing (`access`).
    pub permission_missing: Family<Labels, Gauge>,
}

/// The listener's guard counters (`listen.rs`), cloned into its layers and its connection loop:
/// each clone counts into the same series.
#[derive(Debug, Clone, Default)]
pub struct Guards {
    refused: Family<Labels, Counter>,
    open: Gauge,
}

impl Guards {
    /// One call or connection refused by `guard`: the flag it enforces, in snake case
    /// (`max_body_bytes`), or `panic`.
    pub fn refused(&self, guard: &str) {
        self.refused.get_or_create(&label("guard", guard)).inc();
    }
}

impl duet_listen::ConnectionEvents for Guards {
    fn refused(&self) {
        Guards::refused(self, "max_connections");
    }

    fn opened(&self) {
        self.open.inc();
    }

    fn closed(&self) {
        self.open.dec();
    }

    fn header_timed_out(&self) {
        Guards::refused(self, "header_timeout");
    }
}

impl Default for Metrics {
    fn default() -> Metrics {
        let mut registry = Registry::default();
        let requests = Family::<Labels, Counter>::default();
        let seconds = Family::<Labels, Histogram>::new_with_constructor(|| {
            Histogram::new([0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0])
        });
        let unknown_pods = Family::<Labels, Counter>::default();
        let bound = Family::<Labels, Counter>::default();
        let bind_failures = Counter::default();
        let record_failures = Counter::default();
        let rounds = Counter::default();
        let unplaced = Gauge::default();
        let in_flight = Gauge::default();
        let held_back = Gauge::default();
        let stale = Gauge::default();
        let guards = Guards::default();
        let permission_missing = Family::<Labels, Gauge>::default();
        registry.register(
            "duet_extender_requests",
            "kube-scheduler extender calls, by verb and outcome",
            requests.clone(),
        );
        registry.register(
            "duet_extender_request_seconds",
            "time to answer an extender call, by verb",
            seconds.clone(),
        );
        registry.register(
            "duet_kube_unknown_pods",
            "pods judged that duet does not know (neutral score), by reason",
            unknown_pods.clone(),
        );
        registry.register(
            "duet_kube_bound",
            "pods bound by duet, by shape",
            bound.clone(),
        );
        registry.register(
            "duet_kube_bind_failures",
            "bindings the API server refused or could not take",
            bind_failures.clone(),
        );
        registry.register(
            "duet_kube_record_failures",
            "pods bound whose placement record (a duet.io/placement condition) could not be \
             written to their status: a restarted scheduler reads their annotations instead",
            record_failures.clone(),
        );
        registry.register(
            "duet_schedule_rounds",
            "pricing rounds of duet schedule",
            rounds.clone(),
        );
        registry.register(
            "duet_schedule_unplaced",
            "pods of duet schedule left pending by its last round",
            unplaced.clone(),
        );
        registry.register(
            "duet_schedule_bindings_in_flight",
            "bindings of duet schedule sent and not yet answered, at the end of its last step",
            in_flight.clone(),
        );
        registry.register(
            "duet_schedule_held_back",
            "pods duet schedule holds back from its rounds after a failed binding (1 s, doubling \
             to 10 s), at its last step",
            held_back.clone(),
        );
        registry.register(
            "duet_kube_view_stale",
            "1 while duet's view of the cluster is stale (the API server does not answer)",
            stale.clone(),
        );
        registry.register(
            "duet_kube_guard_refusals",
            "calls and connections the listener's guards refused, by guard (the flag it \
             enforces, or panic)",
            guards.refused.clone(),
        );
        registry.register(
            "duet_kube_connections_open",
            "client connections being served",
            guards.open.clone(),
        );
        registry.register(
            "duet_kube_permission_missing",
            "1 for each permission duet needs that its identity lacked at start (by the \
             permission, as kubectl auth can-i takes it), 0 for each it has",
            permission_missing.clone(),
        );
        Metrics {
            registry,
            requests,
            seconds,
            unknown_pods,
            bound,
            bind_failures,
            record_failures,
            rounds,
            unplaced,
            in_flight,
            held_back,
            stale,
            guards,
            permission_missing,
        }
    }
}

fn label(name: &str, value: &str) -> Labels {
    vec![(name.to_string(), value.to_string())]
}

impl Metrics {
    pub fn request(&self, verb: &str, outcome: &str, seconds: f64) {
        self.requests
            .get_or_create(&vec![
                ("verb".to_string(), verb.to_string()),
                ("outcome".to_string(), outcome.to_string()),
            ])
            .inc();
        self.seconds
            .get_or_create(&label("verb", verb))
            .observe(seconds);
    }

    pub fn unknown(&self, why: &Unknown) {
        let reason = match why {
            Unknown::Unannotated => "unannotated",
            Unknown::Unreadable(_) => "unreadable",
            Unknown::NotRegistered { .. } => "not_registered",
            Unknown::NoProfile { .. } => "no_profile",
            Unknown::ProfileRefused { .. } => "profile_refused",
        };
        self.unknown_pods
            .get_or_create(&label("reason", reason))
            .inc();
    }

    /// Whether duet's identity lacks `permission` (`access::check`).
    pub fn permission_missing(&self, permission: &str, missing: bool) {
        self.permission_missing
            .get_or_create(&label("permission", permission))
            .set(i64::from(missing));
    }

    pub fn bound(&self, shape: &str) {
        self.bound.get_or_create(&label("shape", shape)).inc();
    }

    /// The OpenMetrics text, with the view's freshness as of now.
    pub fn render(&self, freshness: &Freshness) -> String {
        self.stale
            .set(i64::from(matches!(freshness, Freshness::Stale { .. })));
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = text::encode(&mut out, &self.registry);
        out
    }
}

/// The content type of `render`'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
