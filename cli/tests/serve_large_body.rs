//! A large prediction body sent to the real `duet serve` over loopback: parsed over the cores
//! (a body of 256 KiB and more), answered exactly as the same pairs and groups asked in small
//! bodies (parsed in one pass), and refused with the same errors, naming the same items. A body
//! of one long string costs the server its bytes, not the parser's quote of it.

use serde_json::{Value, json};

mod support;
use support::{Server, peak_rss_mib};

const IDS: [&str; 6] = [
    "a3c",
    "cyclegan",
    "resnet-50-bs64",
    "transformer-bs32",
    "lm-bs80",
    "recommendation-bs2048",
];

fn job(k: usize) -> Value {
    if k.is_multiple_of(3) {
        #[allow(clippy::cast_precision_loss)]
        let solo = 5.0 + (k % 97) as f64 / 10.0;
        json!({"features": {"solo_throughput": solo, "model": "LM", "batch_size": 20 + k % 60}})
    } else {
        json!({"workload": IDS[k % IDS.len()]})
    }
}

fn post(server: &Server, path: &str, body: &Value) -> (u16, Value) {
    match ureq::post(&server.url(path)).send_json(body.clone()) {
        Ok(r) => (r.status(), r.into_json().expect("json answer")),
        Err(ureq::Error::Status(code, r)) => (code, r.into_json().expect("json error")),
        Err(e) => panic!("{e}"),
    }
}

/// Every number of `got` within a millionth of `want`'s (the rows run in other batches), the
/// rest equal.
fn assert_close(got: &Value, want: &Value, at: &str) {
    match (got, want) {
        (Value::Number(g), Value::Number(w)) => {
            let (g, w) = (g.as_f64().expect("f64"), w.as_f64().expect("f64"));
            assert!((g - w).abs() <= 1e-6 * w.abs().max(1.0), "{at}: {g} != {w}");
        }
        (Value::Array(g), Value::Array(w)) => {
            assert_eq!(g.len(), w.len(), "{at}");
            for (k, (g, w)) in g.iter().zip(w).enumerate() {
                assert_close(g, w, &format!("{at}[{k}]"));
            }
        }
        (Value::Object(g), Value::Object(w)) => {
            assert_eq!(
                g.keys().collect::<Vec<_>>(),
                w.keys().collect::<Vec<_>>(),
                "{at}"
            );
            for (k, v) in g {
                assert_close(v, &w[k], &format!("{at}.{k}"));
            }
        }
        _ => assert_eq!(got, want, "{at}"),
    }
}

#[test]
fn a_large_body_is_answered_as_its_items_are_in_small_ones() {
    let dir = tempfile::tempdir().expect("tmp");
    std::fs::write(dir.path().join("token"), "a-token\n").expect("token");
    let server = Server::start(dir.path());
    let pairs: Vec<Value> = (0..3_000)
        .map(|k| json!({"a": job(k), "b": job(k + 1), "mode": "space"}))
        .collect();
    let groups: Vec<Value> = (0..600)
        .map(|g| json!({"jobs": (0..3 + g % 3).map(|j| job(7 * g + j)).collect::<Vec<_>>(), "mode": "space"}))
        .collect();
    let body = json!({"gpu": "v100", "pairs": pairs, "groups": groups});
    let bytes = serde_json::to_vec(&body).expect("json").len();
    assert!(bytes >= 256 * 1024, "{bytes} bytes");
    let (status, large) = post(&server, "/v1/predict", &body);
    assert_eq!(status, 200, "{large}");

    // The same items, 100 at a time: small bodies, each parsed in one pass.
    let mut predictions = Vec::new();
    for chunk in pairs.chunks(100) {
        let (status, small) = post(
            &server,
            "/v1/predict",
            &json!({"gpu": "v100", "pairs": chunk}),
        );
        assert_eq!(status, 200, "{small}");
        predictions.extend(
            small["predictions"]
                .as_array()
                .expect("pairs")
                .iter()
                .cloned(),
        );
    }
    let mut answered = Vec::new();
    for chunk in groups.chunks(100) {
        let (status, small) = post(
            &server,
            "/v1/predict",
            &json!({"gpu": "v100", "groups": chunk}),
        );
        assert_eq!(status, 200, "{small}");
        answered.extend(small["groups"].as_array().expect("groups").iter().cloned());
    }
    assert_close(
        &large["predictions"],
        &Value::Array(predictions),
        "predictions",
    );
    assert_close(&large["groups"], &Value::Array(answered), "groups");

    // A bad item deep in the large body is named as the one-pass parse names it.
    let mut bad = body.clone();
    bad["pairs"][2345]["mode"] = json!("spaec");
    let (status, error) = post(&server, "/v1/predict", &bad);
    assert_eq!(status, 422, "{error}");
    assert_eq!(error["field"], "pairs[2345].mode", "{error}");
    let mut bad = body.clone();
    bad["groups"][444]["jobs"][0]["features"]["solo_throughput"] = json!(true);
    let (status, error) = post(&server, "/v1/predict", &bad);
    assert_eq!(status, 422, "{error}");
    assert_eq!(
        error["field"], "groups[444].jobs[0].features.solo_throughput",
        "{error}"
    );
}

/// A 20 MiB string of control bytes where an array belongs, at the default body limit: refused
/// by its length before it is parsed, on the prediction and the KServe route, and the server's
/// peak grows by about the body (the parser's message quoting it cost +310 MiB for 23 MiB).
#[test]
fn a_long_string_costs_the_server_its_bytes_not_a_quote_of_them() {
    let server = Server::start_with(&[]);
    let pid = server.child.id();
    let name = server.model_name();
    let control = "\u{7f}".repeat(20 << 20);
    let at_rest = peak_rss_mib(pid);
    for (path, body, field) in [
        (
            "/v1/predict".to_string(),
            json!({"gpu": "v100", "pairs": control}),
            "pairs",
        ),
        (
            format!("/v2/models/{name}/infer"),
            json!({"inputs": [{"name": "pairs", "shape": [1, 2], "datatype": "FP32", "data": control}]}),
            "inputs[0].data",
        ),
    ] {
        let (status, error) = post(&server, &path, &body);
        assert_eq!(status, 422, "{path}: {error}");
        assert_eq!(error["field"], field, "{path}: {error}");
        let text = error["error"].as_str().expect("error");
        assert!(
            text.contains(&format!("a string of {} bytes", 20 << 20)),
            "{text}"
        );
    }
    let grown = peak_rss_mib(pid) - at_rest;
    eprintln!("peak grew {grown:.1} MiB for two 20 MiB bodies");
    assert!(grown < 64.0, "peak grew {grown:.1} MiB");
}
