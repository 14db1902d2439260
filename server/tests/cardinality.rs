//! A client cannot add Prometheus series or drift windows by naming new devices: observations
//! on devices outside the serving model's list are counted under `gpu="other"`.

use axum::http::StatusCode;
use serde_json::json;

#[path = "support/http.rs"]
mod http;
use http::{call, default_app};

const TOKEN: &str = "cardinality-token";

#[tokio::test]
async fn unknown_devices_are_counted_as_one_label() {
    let app = default_app(TOKEN);
    let features = json!({"solo_throughput": 10.0, "model": "ResNet-50", "batch_size": 64});
    let observations: Vec<_> = (0..50)
        .map(|i| {
            json!({"id": format!("unknown-{i}"), "gpu": format!("made-up-gpu-{i}"),
                   "mode": "space", "a": {"features": features}, "b": {"features": features},
                   "throughput_a": 6.0, "throughput_b": 6.0, "window_s": 10,
                   "observed_at": "2026-12-01T12:00:00Z"})
        })
        .chain(std::iter::once(
            json!({"id": "known", "gpu": "v100", "mode": "space",
            "a": {"features": features}, "b": {"features": features},
            "throughput_a": 6.0, "throughput_b": 6.0, "window_s": 10,
            "observed_at": "2026-12-01T12:00:00Z"}),
        ))
        .collect();
    let (s, answer) = call(
        &app,
        "POST",
        "/v1/observations",
        Some(json!({ "observations": observations })),
        Some(TOKEN),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{answer}");
    assert_eq!(answer["stored"].as_array().map(Vec::len), Some(51));
    let (_, text) = call(&app, "GET", "/metrics", None, None).await;
    let text = text.as_str().expect("text");
    assert!(!text.contains("made-up-gpu"), "{text}");
    for line in [
        "duet_observed_total{gpu=\"other\",mode=\"space\"} 50",
        "duet_observed_total{gpu=\"v100\",mode=\"space\"} 1",
    ] {
        assert!(text.contains(line), "no `{line}` in\n{text}");
    }
    // One rolling window for all of them.
    let windows = text
        .lines()
        .filter(|l| l.starts_with("duet_drift_window_jobs{"))
        .count();
    assert_eq!(windows, 2, "{text}");
}
