//! `/metrics` read by real parsers: Prometheus' Python client (pinned in
//! scripts/requirements.txt) parses the scrape of a server that predicted and stored an
//! observation, in OpenMetrics (what Prometheus asks for) and in the classic text format (what
//! a plain request gets), and every family keeps the names, type, labels and buckets it had.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use duet_server::store::StateLocation;
use duet_server::{AppState, Config};
use serde_json::{Value, json};
use tower::ServiceExt;

#[path = "support/http.rs"]
mod http;
use http::{call, model_dir};

const TOKEN: &str = "scraper-token";

/// Every family as OpenMetrics names it, its type, and its series' label names.
const FAMILIES: [(&str, &str, &[&str]); 35] = [
    ("duet_requests", "counter", &["route", "status"]),
    ("duet_request_duration_seconds", "histogram", &["route"]),
    ("duet_predict_pairs", "histogram", &[]),
    ("duet_predicted_pairs", "counter", &["calibration"]),
    (
        "duet_predicted_groups",
        "counter",
        &["calibration", "composition"],
    ),
    ("duet_kserve_rows", "counter", &["calibration"]),
    ("duet_model_reloads", "counter", &[]),
    ("duet_model_reload_failures", "counter", &[]),
    ("duet_observations", "counter", &["outcome"]),
    ("duet_observed", "counter", &["gpu", "mode"]),
    ("duet_observed_jobs_scored", "counter", &["gpu", "mode"]),
    ("duet_observed_speed_ape_sum", "unknown", &["gpu", "mode"]),
    ("duet_observed_p90_covered", "counter", &["gpu", "mode"]),
    ("duet_model_info", "gauge", &["version", "engine"]),
    ("duet_registered_workloads", "gauge", &[]),
    ("duet_drift_speed_mape", "gauge", &["gpu", "mode"]),
    ("duet_drift_p90_coverage", "gauge", &["gpu", "mode"]),
    ("duet_drift_window_jobs", "gauge", &["gpu", "mode"]),
    ("duet_registry_sequence", "gauge", &["store"]),
    ("duet_registry_last_sync_age_seconds", "gauge", &[]),
    ("duet_registry_database_errors", "counter", &[]),
    ("duet_registry_degraded", "gauge", &[]),
    ("duet_model_fallback", "gauge", &[]),
    ("duet_draining", "gauge", &[]),
    ("duet_requests_shed", "counter", &[]),
    ("duet_request_timeouts", "counter", &[]),
    ("duet_panics", "counter", &[]),
    ("duet_work_given_up", "counter", &[]),
    ("duet_connections_refused", "counter", &[]),
    ("duet_header_timeouts", "counter", &[]),
    ("duet_bodies_refused", "counter", &[]),
    ("duet_work_in_flight", "gauge", &[]),
    ("duet_work_waiting", "gauge", &[]),
    ("duet_body_bytes_in_flight", "gauge", &[]),
    ("duet_connections_open", "gauge", &[]),
];

/// The buckets of the classic format, +Inf last.
const LATENCY: [f64; 15] = [
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    5.0,
    f64::INFINITY,
];
const PAIRS: [f64; 10] = [
    1.0,
    10.0,
    100.0,
    1000.0,
    5000.0,
    10000.0,
    25000.0,
    50000.0,
    100000.0,
    f64::INFINITY,
];

/// Parses `text` with `prometheus_client`'s OpenMetrics parser (`openmetrics`: the strict one)
/// or its classic text parser: its families as JSON (name, type, unit, samples with name,
/// labels and value), counters named as OpenMetrics names them by both.
fn parse_with_prometheus_client(text: &str, openmetrics: bool) -> Vec<Value> {
    let venv = std::env::var_os("DUET_VENV").map_or_else(
        || PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/duet-venv"),
        PathBuf::from,
    );
    let script = r#"
import json, sys
if sys.argv[1] == "openmetrics":
    from prometheus_client.openmetrics.parser import text_string_to_metric_families
else:
    from prometheus_client.parser import text_string_to_metric_families
print(json.dumps([
    {"name": f.name, "type": f.type, "unit": f.unit,
     "samples": [{"name": s.name, "labels": s.labels, "value": s.value} for s in f.samples]}
    for f in text_string_to_metric_families(sys.stdin.read())]))
"#;
    let mut child = Command::new(venv.join("bin/python"))
        .args(["-c", script])
        .arg(if openmetrics { "openmetrics" } else { "text" })
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("no Python in {venv:?} ({e}): run the tests through scripts/test.sh")
        });
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("python");
    assert!(
        out.status.success(),
        "prometheus_client refused the scrape:\n{}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
}

fn bounds(family: &Value, labels: &[(&str, &str)]) -> Vec<f64> {
    family["samples"]
        .as_array()
        .expect("samples")
        .iter()
        .filter(|s| s["name"].as_str().is_some_and(|n| n.ends_with("_bucket")))
        .filter(|s| labels.iter().all(|(k, v)| s["labels"][*k] == *v))
        .map(|s| {
            let le = s["labels"]["le"].as_str().expect("le");
            le.parse().unwrap_or_else(|_| panic!("le {le}"))
        })
        .collect()
}

#[tokio::test]
async fn prometheus_client_reads_every_family_under_its_classic_name_type_labels_and_buckets() {
    let dir = tempfile::tempdir().expect("tmp");
    let state = AppState::new(Config {
        token: Some(TOKEN.into()),
        state: Some(StateLocation::Sqlite(dir.path().join("registry.sqlite"))),
        ..Config::new(model_dir())
    })
    .expect("state");
    state.start().await.expect("the default model loads");
    let app = duet_server::router(state.clone());
    // A prediction (a pair and a group) and a scored pair, so that every family has a series.
    let pair = json!({"gpu": "v100", "pairs": [
        {"a": {"workload": "a3c"}, "b": {"workload": "cyclegan"}, "mode": "space"}],
        "groups": [{"jobs": [{"workload": "a3c"}, {"workload": "cyclegan"},
                             {"workload": "resnet-50-bs64"}], "mode": "space"}]});
    let (status, answer) = call(&app, "POST", "/v1/predict", Some(pair), None).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let observation = json!({"id": "pair-1", "gpu": "v100", "mode": "space",
        "a": {"workload": "a3c"}, "b": {"workload": "cyclegan"},
        "throughput_a": 6.0, "throughput_b": 14.0,
        "solo_throughput_a": 10.0, "solo_throughput_b": 20.0,
        "window_s": 10.0, "observed_at": "2026-12-01T12:00:00Z"});
    let (status, answer) = call(
        &app,
        "POST",
        "/v1/observations",
        Some(json!({"observations": [observation]})),
        Some(TOKEN),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    // A label value that needs every escape the format has.
    let odd = "a \"quoted\" \\ route\nwith a line feed";
    state.metrics.request(odd, 200, 0.003);

    let open = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5";
    for (accept, content_type) in [
        (
            Some(open),
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        ),
        (None, "text/plain; version=0.0.4; charset=utf-8"),
    ] {
        let mut request = Request::get("/metrics");
        if let Some(accept) = accept {
            request = request.header(header::ACCEPT, accept);
        }
        let response = app
            .clone()
            .oneshot(request.body(Body::empty()).expect("request"))
            .await
            .expect("response");
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()[header::CONTENT_TYPE], content_type);
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .expect("body");
        let text = String::from_utf8(body.to_vec()).expect("UTF-8");
        let families = parse_with_prometheus_client(&text, accept.is_some());
        check(&families, &text, odd, accept.is_some());
    }
}

/// Every family of `families` as `FAMILIES` says, with the buckets of the classic format and
/// the values the server counted.
fn check(families: &[Value], text: &str, odd: &str, openmetrics: bool) {
    let by_name: BTreeMap<&str, &Value> = families
        .iter()
        .map(|f| (f["name"].as_str().expect("name"), f))
        .collect();
    let want: BTreeSet<&str> = FAMILIES.iter().map(|f| f.0).collect();
    let got: BTreeSet<&str> = by_name.keys().copied().collect();
    assert_eq!(got, want, "{text}");
    for (name, kind, labels) in FAMILIES {
        let family = by_name[name];
        assert_eq!(family["type"], kind, "{name}");
        let samples = family["samples"].as_array().expect("samples");
        assert!(!samples.is_empty(), "{name}");
        // The names Prometheus stores, exactly those of the classic format: no `_created`.
        let names: &[&str] = match kind {
            "counter" => &["_total"],
            "histogram" => &["_bucket", "_sum", "_count"],
            _ => &[""],
        };
        for sample in samples {
            let sample_name = sample["name"].as_str().expect("name");
            assert!(
                names.iter().any(|s| sample_name == format!("{name}{s}")),
                "{sample_name} in {name}"
            );
            let mut keys: Vec<&str> = sample["labels"]
                .as_object()
                .expect("labels")
                .keys()
                .map(String::as_str)
                .filter(|k| !(*k == "le" && sample_name.ends_with("_bucket")))
                .collect();
            keys.sort_unstable();
            let mut want = labels.to_vec();
            want.sort_unstable();
            assert_eq!(keys, want, "{sample}");
        }
    }
    if openmetrics {
        assert_eq!(
            by_name["duet_request_duration_seconds"]["unit"], "seconds",
            "{text}"
        );
    }
    assert_eq!(
        bounds(
            by_name["duet_request_duration_seconds"],
            &[("route", "/v1/predict")]
        ),
        LATENCY
    );
    assert_eq!(bounds(by_name["duet_predict_pairs"], &[]), PAIRS);
    // The escaped route reads back as it was recorded.
    let requests = by_name["duet_requests"]["samples"]
        .as_array()
        .expect("samples");
    assert!(
        requests.iter().any(|s| s["labels"]["route"] == odd),
        "{requests:?}"
    );
    let value = |family: &str, labels: &[(&str, &str)]| -> f64 {
        by_name[family]["samples"]
            .as_array()
            .expect("samples")
            .iter()
            .find(|s| labels.iter().all(|(k, v)| s["labels"][*k] == *v))
            .and_then(|s| s["value"].as_f64())
            .unwrap_or_else(|| panic!("{family} {labels:?}"))
    };
    let device = [("gpu", "v100"), ("mode", "space")];
    assert_eq!(value("duet_observed", &device), 1.0);
    assert_eq!(value("duet_observed_jobs_scored", &device), 2.0);
    assert_eq!(value("duet_drift_window_jobs", &device), 2.0);
    assert!(value("duet_observed_speed_ape_sum", &device) > 0.0);
    assert_eq!(value("duet_observations", &[("outcome", "stored")]), 1.0);
    assert_eq!(
        value(
            "duet_requests",
            &[("route", "/v1/predict"), ("status", "200")]
        ),
        1.0
    );
}
