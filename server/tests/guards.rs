//! The app in process: the guards that bound a request (bodies refused by their declared
//! length and by count while parsed, each limit listed and named when exceeded; shedding when
//! every place of work is taken; the guards' counters in `/metrics`).

use axum::body::Body;
use axum::http::{Request, StatusCode};
use duet_server::Config;
use serde_json::{Value, json};
use tower::ServiceExt;

#[path = "support/http.rs"]
mod http;
use http::{app_with, call, call_raw, model_dir};

fn pair() -> Value {
    json!({"a": {"workload": "a3c"}, "b": {"workload": "cyclegan"}, "mode": "space"})
}

#[tokio::test]
async fn limits_are_listed_and_each_names_its_flag() {
    let (app, _) = app_with(Config {
        max_pairs: 100,
        max_body_bytes: Config::body_bytes_for(100),
        max_infer_rows: 10,
        max_observations: 3,
        max_inflight: 3,
        max_queue: 5,
        ..Config::new(model_dir())
    });
    let (status, limits) = call(&app, "GET", "/v1/limits", None, None).await;
    assert_eq!(status, StatusCode::OK);
    for (name, value) in [
        ("max_pairs", 100.0),
        ("max_body_bytes", (100 * 256 + 64 * 1024) as f64),
        ("max_infer_rows", 10.0),
        ("max_observations", 3.0),
        ("max_inflight", 3.0),
        ("max_queue", 5.0),
        ("header_timeout_s", 5.0),
        ("idle_timeout_s", 10.0),
        ("max_connections", 1024.0),
    ] {
        assert_eq!(limits[name].as_f64(), Some(value), "{name}: {limits}");
    }
    // The OpenAPI document says the same.
    let (_, doc) = call(&app, "GET", "/openapi.json", None, None).await;
    let schemas = &doc["components"]["schemas"];
    assert_eq!(
        schemas["ObservationBatch"]["properties"]["observations"]["maxItems"],
        3
    );
    assert_eq!(
        schemas["InferInput"]["properties"]["shape"]["prefixItems"][0]["maximum"],
        10
    );
    assert_eq!(
        schemas["PredictRequest"]["properties"]["pairs"]["maxItems"],
        100
    );

    // Pairs past the limit: refused at the first one over it, whatever follows (here, not even
    // JSON).
    let pairs = vec![pair().to_string(); 101].join(",");
    let body = format!(r#"{{"gpu": "v100", "pairs": [{pairs}, oops"#);
    let (status, over) = call_raw(&app, "POST", "/v1/predict", Some(body), None).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{over}");
    assert_eq!(over["field"], "pairs");
    assert!(
        over["error"]
            .as_str()
            .is_some_and(|e| e.contains("limit of 100") && e.contains("--max-pairs"))
    );
    // Exactly at it: answered.
    let at = json!({"gpu": "v100", "pairs": vec![pair(); 100]});
    let (status, ok) = call(&app, "POST", "/v1/predict", Some(at), None).await;
    assert_eq!(status, StatusCode::OK, "{ok}");
    assert_eq!(ok["predictions"].as_array().map(Vec::len), Some(100));

    // KServe rows: 11 rows of the model's width.
    let (_, models) = call(&app, "GET", "/v1/models", None, None).await;
    let name = models[0]["name"].as_str().expect("name").to_string();
    let (_, meta) = call(&app, "GET", &format!("/v2/models/{name}"), None, None).await;
    let width = meta["inputs"][0]["shape"][1].as_u64().expect("width") as usize;
    let infer = |rows: usize| {
        json!({"inputs": [{"name": "pairs", "shape": [rows, width], "datatype": "FP32",
                           "data": vec![0.0; rows * width]}]})
    };
    let uri = format!("/v2/models/{name}/infer");
    let (status, over) = call(&app, "POST", &uri, Some(infer(11)), None).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{over}");
    assert!(
        over["error"]
            .as_str()
            .is_some_and(|e| e.contains("--max-infer-rows")),
        "{over}"
    );
    let (status, ok) = call(&app, "POST", &uri, Some(infer(10)), None).await;
    assert_eq!(status, StatusCode::OK, "{ok}");

    // Observations: 4 of 3, refused before any is checked.
    let batch = json!({"observations": [{}, {}, {}, {}]});
    let (status, over) = call(&app, "POST", "/v1/observations", Some(batch), None).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{over}");
    assert!(
        over["error"]
            .as_str()
            .is_some_and(|e| e.contains("--max-observations")),
        "{over}"
    );
}

#[tokio::test]
async fn a_declared_length_over_the_limit_is_refused_before_the_body_is_read() {
    let (app, _) = app_with(Config {
        max_body_bytes: 1000,
        ..Config::new(model_dir())
    });
    // The length says 60 MiB: refused on the header alone (over loopback, the real server
    // answers so before the body arrives: cli/tests/serve_abuse.rs).
    let request = Request::builder()
        .method("POST")
        .uri("/v1/predict")
        .header("content-type", "application/json")
        .header("content-length", (60 * 1024 * 1024).to_string())
        .body(Body::from("{}"))
        .expect("request");
    let response = tokio::time::timeout(std::time::Duration::from_secs(5), app.oneshot(request))
        .await
        .expect("answered without the body")
        .expect("response");
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .expect("body");
    let text = String::from_utf8_lossy(&bytes);
    assert!(
        text.contains("limit of 1000 bytes (--max-body-bytes)"),
        "{text}"
    );
}

#[tokio::test]
async fn work_over_the_places_is_shed_at_once_with_retry_after() {
    let (app, state) = app_with(Config {
        max_inflight: 1,
        max_queue: 0,
        ..Config::new(model_dir())
    });
    // A large request takes the one place; while it runs, another is shed.
    let big = json!({"gpu": "v100", "pairs": vec![pair(); 60_000]}).to_string();
    let runner = {
        let app = app.clone();
        tokio::spawn(async move { call_raw(&app, "POST", "/v1/predict", Some(big), None).await })
    };
    let mut shed = None;
    for _ in 0..2000 {
        if state.limiter.running() == 1 {
            let request = Request::builder()
                .method("POST")
                .uri("/v1/predict")
                .header("content-type", "application/json")
                .body(Body::from(
                    json!({"gpu": "v100", "pairs": [pair()]}).to_string(),
                ))
                .expect("request");
            let response = app.clone().oneshot(request).await.expect("response");
            shed = Some((
                response.status(),
                response
                    .headers()
                    .get("retry-after")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string),
            ));
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    let (status, _) = runner.await.expect("runner");
    assert_eq!(status, StatusCode::OK);
    let (status, retry) = shed.expect("the large request was seen in flight");
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(retry.as_deref(), Some("1"));
    // Counted once; the place is free again, and /healthz never took one.
    let (_, metrics) = call(&app, "GET", "/metrics", None, None).await;
    let text = metrics.as_str().expect("text");
    assert!(text.contains("duet_requests_shed_total 1"), "{text}");
    assert!(text.contains("duet_work_in_flight 0"), "{text}");
    assert_eq!(state.limiter.running(), 0);
}

/// A job's feature map with more than 8 entries past the names the model accepts is refused
/// while it is read (its entries are never held), on one thread and over the cores alike; one
/// within that is checked as ever once parsed.
#[tokio::test]
async fn a_feature_map_past_the_names_the_model_accepts_is_refused_as_it_is_read() {
    let (app, state) = app_with(Config::new(model_dir()));
    let accepted = state.model().expect("a model").accepted_feature_count();
    assert!(accepted >= 3, "{accepted}");
    let ask = |entries: usize, pairs: usize| {
        let app = app.clone();
        // Known names, `solo_throughput` given again past the other two.
        let mut map = String::from(r#""batch_size": 64, "model": "ResNet-50""#);
        for _ in 2..entries {
            map.push_str(r#", "solo_throughput": 11.2"#);
        }
        let hostile = format!(
            r#"{{"a": {{"features": {{{map}}}}}, "b": {{"workload": "a3c"}}, "mode": "space"}}"#
        );
        let fine = pair().to_string();
        let mut items = vec![fine; pairs];
        items.push(hostile);
        let body = format!(r#"{{"gpu": "v100", "pairs": [{}]}}"#, items.join(", "));
        async move { call_raw(&app, "POST", "/v1/predict", Some(body), None).await }
    };
    let limit = accepted + duet_server::bounded::FEATURE_ENTRIES_PAST_ACCEPTED;
    // As many entries as that (`solo_throughput` given again): answered, the last value kept.
    let (status, answer) = ask(limit, 0).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    // One more: refused at it, by the parse, naming the map.
    for pairs in [0, 4_000] {
        let (status, answer) = ask(limit + 1, pairs).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
        let error = answer["error"].as_str().expect("an error");
        assert!(
            error.contains(&format!("more than {limit} entries in one job's features")),
            "{error}"
        );
        let field = answer["field"].as_str().expect("a field");
        assert!(
            field.starts_with(&format!("pairs[{pairs}].a.features")),
            "{field}"
        );
    }
}

/// An error that quotes what the client sent is clipped: serde quotes a string of the wrong
/// type escaping each control byte into several (a 60 KB string answered about 360 KB), and a
/// workload id or a field path is the client's own text.
#[tokio::test]
async fn an_error_quoting_a_large_input_is_clipped() {
    let (app, _) = app_with(Config {
        max_body_bytes: 200_000,
        ..Config::new(model_dir())
    });
    let limit = duet_core::api::ERROR_TEXT_BYTES;
    let control = "\u{7f}".repeat(60_000);
    let long_id = "j".repeat(60_000);
    let cases = [
        (
            json!({"gpu": "v100", "pairs": control}).to_string(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid type: string",
        ),
        (
            json!({"gpu": "v100", "pairs": [json!({"a": {"workload": "a3c"}, "b": {"workload": long_id}, "mode": "space"})]}).to_string(),
            StatusCode::NOT_FOUND,
            "jjjj",
        ),
    ];
    for (body, status, says) in cases {
        let (s, answer) = call_raw(&app, "POST", "/v1/predict", Some(body), None).await;
        assert_eq!(s, status, "{}", &answer.to_string()[..200]);
        let error = answer["error"].as_str().expect("error");
        assert!(error.contains(says), "{}", &error[..200]);
        assert!(error.len() <= limit + 40, "{} bytes", error.len());
        assert!(
            error.ends_with("bytes more)"),
            "{}",
            &error[error.len() - 60..]
        );
    }
    // A short error is whole, and the server goes on answering.
    let short = json!({"gpu": "v100", "pairs": [{"a": {"workload": "a3c"}, "b": {"workload": "no-such-job"}, "mode": "space"}]});
    let (s, answer) = call(&app, "POST", "/v1/predict", Some(short), None).await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{answer}");
    assert_eq!(answer["field"], "pairs[0].b.workload", "{answer}");
    assert!(
        answer["error"]
            .as_str()
            .expect("error")
            .contains("`no-such-job`"),
        "{answer}"
    );
}

/// A body holding a string longer than any field takes (`max_string_bytes`) is refused
/// unparsed on every JSON route, by the string's length, place and field: parsed, serde's
/// message for it where another type belongs would quote it whole.
#[tokio::test]
async fn a_string_longer_than_any_field_is_refused_unparsed() {
    let (app, _) = app_with(Config {
        token: Some("t".into()),
        ..Config::new(model_dir())
    });
    let (_, limits) = call(&app, "GET", "/v1/limits", None, None).await;
    let most = limits["max_string_bytes"].as_u64().expect("listed");
    let most = usize::try_from(most).expect("usize");
    let long = "\u{7f}".repeat(most + 1);
    let (_, models) = call(&app, "GET", "/v1/models", None, None).await;
    let name = models[0]["name"].as_str().expect("a model").to_string();
    let infer = format!("/v2/models/{name}/infer");
    let cases = [
        (
            "POST",
            "/v1/predict",
            json!({"gpu": "v100", "pairs": long}),
            "pairs",
        ),
        (
            "POST",
            "/v1/predict",
            json!({"gpu": "v100", "pairs": [pair(), {"a": {"workload": long}, "b": {"workload": "a3c"}, "mode": "space"}]}),
            "pairs[1].a.workload",
        ),
        (
            "POST",
            "/v1/observations",
            json!({"observations": [{"id": "o", "gpu": "v100", "a": long}]}),
            "observations[0].a",
        ),
        (
            "POST",
            &infer,
            json!({"inputs": [{"name": "pairs", "shape": [1, 2], "datatype": "FP32", "data": long}]}),
            "inputs[0].data",
        ),
        (
            "PUT",
            "/v1/workloads/w",
            json!({"kind": "train", "profiles": {"v100": {long.clone(): 1}}}),
            "profiles.v100",
        ),
    ];
    for (method, uri, body, field) in cases {
        let body = body.to_string();
        let at = body.find('\u{7f}').expect("the string") - 1;
        let (status, answer) = call_raw(&app, method, uri, Some(body), Some("t")).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{uri}: {answer}");
        assert_eq!(answer["field"], field, "{uri}: {answer}");
        let error = answer["error"].as_str().expect("error");
        let kind = if uri.starts_with("/v1/workloads") {
            "key"
        } else {
            "string"
        };
        assert!(
            error.contains(&format!("a {kind} of {} bytes at byte {at} ", most + 1)),
            "{uri}: {error}"
        );
        assert!(
            error.contains(&format!("({most} bytes at most)")),
            "{error}"
        );
        assert!(error.len() < 200, "{uri}: {error}");
    }
    // A string at the limit is parsed as before (a workload id that long is not known).
    let at_limit = "j".repeat(most);
    let body = json!({"gpu": "v100", "pairs": [{"a": {"workload": at_limit}, "b": {"workload": "a3c"}, "mode": "space"}]});
    let (status, answer) = call(&app, "POST", "/v1/predict", Some(body), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{answer}");
    assert_eq!(answer["field"], "pairs[0].a.workload");
}

/// A route asked with a method it does not answer gets a 405 in the API's error shape with the
/// methods it does answer in `Allow`; a path no route has, a 404 in the same shape.
#[tokio::test]
async fn a_wrong_method_or_path_is_answered_as_an_api_error() {
    let (app, _) = app_with(Config::new(model_dir()));
    for (method, uri, status, allow) in [
        (
            "GET",
            "/v1/predict",
            StatusCode::METHOD_NOT_ALLOWED,
            Some("POST"),
        ),
        (
            "DELETE",
            "/v1/limits",
            StatusCode::METHOD_NOT_ALLOWED,
            Some("GET,HEAD"),
        ),
        (
            "POST",
            "/healthz",
            StatusCode::METHOD_NOT_ALLOWED,
            Some("GET,HEAD"),
        ),
        ("GET", "/v1/no-such-route", StatusCode::NOT_FOUND, None),
    ] {
        let request = Request::builder()
            .method(method)
            .uri(uri)
            .body(Body::empty())
            .expect("request");
        let response = app.clone().oneshot(request).await.expect("response");
        assert_eq!(response.status(), status, "{method} {uri}");
        let allowed = response
            .headers()
            .get("allow")
            .map(|v| v.to_str().expect("ascii").replace(' ', ""));
        assert_eq!(allowed.as_deref(), allow, "{method} {uri}");
        let bytes = axum::body::to_bytes(response.into_body(), 4096)
            .await
            .expect("body");
        let error: duet_core::api::ApiError = serde_json::from_slice(&bytes).expect("an ApiError");
        assert!(error.error.contains("/openapi.json"), "{}", error.error);
    }
}
