//! The axum app in process on the shipped default model: every route, and every kind of bad
//! input answered with a 4xx naming the field while the server keeps serving.

use std::sync::Arc;

use axum::Router;
use axum::http::StatusCode;
use duet_server::store::StateLocation;
use duet_server::{AppState, Config, EngineKind};
use serde_json::{Value, json};

#[path = "support/http.rs"]
mod http;
use http::{app_with, call, call_raw, model_dir};

const TOKEN: &str = "s3cret-token";

/// The app as `duet serve` starts it: the store read, the model loaded.
async fn app_started(config: Config) -> (Router, Arc<AppState>) {
    let state = AppState::new(config).expect("state");
    state.start().await.expect("the default model loads");
    (duet_server::router(state.clone()), state)
}

fn app() -> Router {
    app_with(Config {
        token: Some(TOKEN.into()),
        max_pairs: 1000,
        max_body_bytes: 200_000,
        ..Config::new(model_dir())
    })
    .0
}

/// `pairs` on V100, answered by `app`.
async fn predict_v100(app: &Router, pairs: &[Value]) -> (StatusCode, Value) {
    let body = json!({"gpu": "v100", "pairs": pairs});
    call(app, "POST", "/v1/predict", Some(body), None).await
}

/// The smallest valid prediction request, answered by `app`.
async fn predict_one(app: &Router) -> (StatusCode, Value) {
    let body = json!({"gpu": "v100", "pairs": [pair("a3c", "a3c")]});
    call(app, "POST", "/v1/predict", Some(body), None).await
}

fn pair(a: &str, b: &str) -> Value {
    json!({"a": {"workload": a}, "b": {"workload": b}, "mode": "space"})
}

fn resnet_features() -> Value {
    json!({"solo_throughput": 11.2, "model": "ResNet-50", "batch_size": 64})
}

/// Asserts a 4xx JSON error whose field is `field` and whose message contains `says`.
fn assert_error(got: &(StatusCode, Value), status: StatusCode, field: Option<&str>, says: &str) {
    let (s, body) = got;
    assert_eq!(*s, status, "{body}");
    assert_eq!(body["field"].as_str(), field, "{body}");
    let error = body["error"].as_str().expect("error message");
    assert!(error.contains(says), "`{error}` does not say `{says}`");
}

#[tokio::test]
async fn predicts_in_request_order_with_mirrored_pairs_consistent() {
    let app = app();
    let body = json!({"gpu": "v100", "pairs": [
        pair("resnet-50-bs64", "transformer-bs32"),
        pair("a3c", "cyclegan"),
        pair("transformer-bs32", "resnet-50-bs64"),
    ]});
    let (status, answer) = call(&app, "POST", "/v1/predict", Some(body.clone()), None).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let p = answer["predictions"].as_array().expect("predictions");
    assert_eq!(p.len(), 3);
    assert_eq!(p[0]["speed_a"], p[2]["speed_b"]);
    assert_eq!(p[0]["speed_b"], p[2]["speed_a"]);
    assert_ne!(p[0]["speed_a"], p[1]["speed_a"]);
    for q in p {
        let f = |k: &str| q[k].as_f64().expect(k);
        assert!(f("speed_a") > 0.0 && f("speed_b") > 0.0);
        assert!((f("slowdown_a") * f("speed_a") - 1.0).abs() < 1e-5);
        assert!((f("combined") - f("speed_a") - f("speed_b")).abs() < 1e-5);
        assert!(f("slowdown_a_p90") >= f("slowdown_a") * 0.999, "{q}");
        assert!((0.0..=1.0).contains(&f("feasible_probability")));
    }
    assert!(
        answer["model_version"]
            .as_str()
            .expect("version")
            .starts_with("0.1.0+")
    );
    // The path users try first answers the same.
    let (status, again) = call(&app, "POST", "/predict", Some(body), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(again, answer);
}

#[tokio::test]
async fn a_registered_workload_predicts_like_its_inline_features() {
    let app = app();
    let put = json!({"kind": "train", "profiles": {"v100": resnet_features()}});
    let created = call(
        &app,
        "PUT",
        "/v1/workloads/my-resnet",
        Some(put.clone()),
        Some(TOKEN),
    )
    .await;
    assert_eq!(created.0, StatusCode::CREATED, "{}", created.1);
    assert_eq!(created.1["source"], "client");
    let replaced = call(
        &app,
        "PUT",
        "/v1/workloads/my-resnet",
        Some(put),
        Some(TOKEN),
    )
    .await;
    assert_eq!(replaced.0, StatusCode::OK);
    let by_id = json!({"gpu": "v100", "pairs": [pair("my-resnet", "a3c")]});
    let inline = json!({"pairs": [{"a": {"features": resnet_features()}, "b": {"workload": "a3c"},
        "mode": "space", "gpu": "v100"}]});
    let (s1, a1) = call(&app, "POST", "/v1/predict", Some(by_id), None).await;
    let (s2, a2) = call(&app, "POST", "/v1/predict", Some(inline), None).await;
    assert_eq!((s1, s2), (StatusCode::OK, StatusCode::OK), "{a1} {a2}");
    assert_eq!(a1["predictions"], a2["predictions"]);

    let (s, got) = call(&app, "GET", "/v1/workloads/my-resnet", None, None).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(got["profiles"]["v100"]["batch_size"], 64.0);
    let (_, list) = call(&app, "GET", "/v1/workloads", None, None).await;
    assert_eq!(list.as_array().expect("list").len(), 27);
    let gone = call(&app, "DELETE", "/v1/workloads/my-resnet", None, Some(TOKEN)).await;
    assert_eq!(gone.0, StatusCode::NO_CONTENT);
    let missing = call(&app, "GET", "/v1/workloads/my-resnet", None, None).await;
    assert_error(&missing, StatusCode::NOT_FOUND, Some("id"), "my-resnet");
}

#[tokio::test]
async fn writes_need_the_token_reads_do_not() {
    let app = app();
    let put = json!({"profiles": {"v100": resnet_features()}});
    let none = call(&app, "PUT", "/v1/workloads/x", Some(put.clone()), None).await;
    assert_error(
        &none,
        StatusCode::UNAUTHORIZED,
        Some("Authorization"),
        "Bearer",
    );
    let wrong = call(&app, "PUT", "/v1/workloads/x", Some(put), Some("nope")).await;
    assert_error(
        &wrong,
        StatusCode::UNAUTHORIZED,
        Some("Authorization"),
        "wrong",
    );
    let reload = call(&app, "POST", "/v1/models/reload", None, None).await;
    assert_eq!(reload.0, StatusCode::UNAUTHORIZED);
    let delete = call(&app, "DELETE", "/v1/workloads/a3c", None, None).await;
    assert_eq!(delete.0, StatusCode::UNAUTHORIZED);
    assert_eq!(
        call(&app, "GET", "/v1/workloads/a3c", None, None).await.0,
        StatusCode::OK
    );
    assert_eq!(
        call(&app, "GET", "/v1/models", None, None).await.0,
        StatusCode::OK
    );

    let (closed, _) = app_with(Config {
        token: Some(TOKEN.into()),
        protect_reads: true,
        ..Config::new(model_dir())
    });
    assert_eq!(
        call(&closed, "GET", "/v1/models", None, None).await.0,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        call(&closed, "GET", "/v1/models", None, Some(TOKEN))
            .await
            .0,
        StatusCode::OK
    );
    assert_eq!(
        call(&closed, "GET", "/healthz", None, None).await.0,
        StatusCode::OK
    );
}

#[tokio::test]
async fn bad_predictions_name_the_field_and_the_server_keeps_serving() {
    let app = app();
    let one = |p: Value| Some(json!({"gpu": "v100", "pairs": [p]}));
    let cases: Vec<(Option<String>, StatusCode, Option<&str>, &str)> = vec![
        (Some("{\"pairs\": [".into()), StatusCode::BAD_REQUEST, Some("pairs"), "EOF"),
        (Some("not json".into()), StatusCode::BAD_REQUEST, None, "expected ident"),
        (Some("42".into()), StatusCode::UNPROCESSABLE_ENTITY, None, "expected an object (PredictRequest)"),
        (
            one(json!({"a": {"workload": "a3c"}, "b": {"workload": "a3c"}, "mode": "space", "share_a": "half"})).map(|v| v.to_string()),
            StatusCode::UNPROCESSABLE_ENTITY,
            Some("pairs[0].share_a"),
            "invalid type",
        ),
        (
            one(json!({"a": {"workload": "a3c"}, "b": {"workload": "a3c"}, "mode": "warp"})).map(|v| v.to_string()),
            StatusCode::UNPROCESSABLE_ENTITY,
            Some("pairs[0].mode"),
            "unknown variant `warp`",
        ),
        (
            one(json!({"a": {"workload": "a3c"}, "b": {"workload": "a3c"}, "mode": "mps"})).map(|v| v.to_string()),
            StatusCode::UNPROCESSABLE_ENTITY,
            Some("pairs[0].mode"),
            "not trained on mode `mps`",
        ),
        (
            one(json!({"a": {"workload": "a3c"}, "b": {"workload": "a3c"}, "mode": "space", "share_a": 150})).map(|v| v.to_string()),
            StatusCode::UNPROCESSABLE_ENTITY,
            Some("pairs[0].share_a"),
            "outside (0, 100]",
        ),
        (
            one(json!({"a": {"workload": "a3c"}, "b": {"workload": "a3c"}, "mode": "space", "share_b": 0})).map(|v| v.to_string()),
            StatusCode::UNPROCESSABLE_ENTITY,
            Some("pairs[0].share_b"),
            "outside (0, 100]",
        ),
        (
            one(pair("a3c", "no-such-job")).map(|v| v.to_string()),
            StatusCode::NOT_FOUND,
            Some("pairs[0].b.workload"),
            "no-such-job",
        ),
        (
            one(json!({"a": {"features": {"solo_throughput": 3.0, "model": "A3C"}}, "b": {"workload": "a3c"}, "mode": "space"})).map(|v| v.to_string()),
            StatusCode::UNPROCESSABLE_ENTITY,
            Some("pairs[0].a.features.batch_size"),
            "missing feature `batch_size`",
        ),
        (
            Some(r#"{"gpu": "v100", "pairs": [{"a": {"features": {"solo_throughput": 1e999, "model": "A3C", "batch_size": null}}, "b": {"workload": "a3c"}, "mode": "space"}]}"#.into()),
            StatusCode::BAD_REQUEST,
            Some("pairs[0].a.features.solo_throughput"),
            "number out of range",
        ),
        (
            one(json!({"a": {"features": {"solo_throughput": "NaN", "model": "A3C", "batch_size": null}}, "b": {"workload": "a3c"}, "mode": "space"})).map(|v| v.to_string()),
            StatusCode::UNPROCESSABLE_ENTITY,
            Some("pairs[0].a.features.solo_throughput"),
            "numeric",
        ),
        (
            one(json!({"a": {"features": {"solo_throughput": -2.0, "model": "A3C", "batch_size": null}}, "b": {"workload": "a3c"}, "mode": "space"})).map(|v| v.to_string()),
            StatusCode::UNPROCESSABLE_ENTITY,
            Some("pairs[0].a.features.solo_throughput"),
            "must be positive",
        ),
        (
            one(json!({"a": {"features": {"solo_throughput": 2.0, "model": "A3C", "batch_size": null, "flops": 3}}, "b": {"workload": "a3c"}, "mode": "space"})).map(|v| v.to_string()),
            StatusCode::UNPROCESSABLE_ENTITY,
            Some("pairs[0].a.features.flops"),
            "unknown feature `flops`",
        ),
        (
            one(json!({"a": {"workload": "a3c", "features": {}}, "b": {"workload": "a3c"}, "mode": "space"})).map(|v| v.to_string()),
            StatusCode::UNPROCESSABLE_ENTITY,
            Some("pairs[0].a"),
            "exactly one",
        ),
        (
            Some(json!({"pairs": [pair("a3c", "a3c")]}).to_string()),
            StatusCode::UNPROCESSABLE_ENTITY,
            Some("pairs[0].gpu"),
            "no device",
        ),
        (
            Some(json!({"pairs": []}).to_string()),
            StatusCode::UNPROCESSABLE_ENTITY,
            Some("pairs"),
            "no pairs",
        ),
        (
            Some(json!({"gpu": "v100", "pairs": vec![pair("a3c", "a3c"); 1001]}).to_string()),
            StatusCode::PAYLOAD_TOO_LARGE,
            Some("pairs"),
            "limit of 1000",
        ),
        (
            Some(format!("{{\"pad\": \"{}\"}}", "x".repeat(300_000))),
            StatusCode::PAYLOAD_TOO_LARGE,
            None,
            "--max-body-bytes",
        ),
        (
            one(json!({"a": {"workload": "a3c"}, "b": {"workload": "a3c"}, "mode": "space", "gpu": "h200"})).map(|v| v.to_string()),
            StatusCode::NOT_FOUND,
            Some("pairs[0].a.workload"),
            "no profile on `h200`",
        ),
    ];
    for (body, status, field, says) in cases {
        let got = call_raw(&app, "POST", "/v1/predict", body.clone(), None).await;
        assert_error(&got, status, field, says);
    }
    // Still serving.
    let ok = call(&app, "POST", "/v1/predict", one(pair("a3c", "a3c")), None).await;
    assert_eq!(ok.0, StatusCode::OK);
}

#[tokio::test]
async fn bad_registrations_leave_the_registry_as_it_was() {
    let app = app();
    let put = |body: Value| {
        call(
            &app,
            "PUT",
            "/v1/workloads/new-job",
            Some(body),
            Some(TOKEN),
        )
    };
    assert_error(
        &put(json!({"profiles": {"v100": {"solo_throughput": 2.0, "model": "A3C", "batch_size": 8, "color": "red"}}})).await,
        StatusCode::UNPROCESSABLE_ENTITY,
        Some("profiles.v100.color"),
        "unknown feature `color`",
    );
    assert_error(
        &put(json!({"profiles": {"v100": {"solo_throughput": 2.0, "model": 7, "batch_size": 8}}}))
            .await,
        StatusCode::UNPROCESSABLE_ENTITY,
        Some("profiles.v100.model"),
        "categorical",
    );
    assert_error(
        &put(json!({"profiles": {}})).await,
        StatusCode::UNPROCESSABLE_ENTITY,
        Some("profiles"),
        "no profile",
    );
    assert_error(
        &put(json!({"profile": {}})).await,
        StatusCode::UNPROCESSABLE_ENTITY,
        Some("profile"),
        "unknown field `profile`",
    );
    let bad_id = call(
        &app,
        "PUT",
        "/v1/workloads/a%20b",
        Some(json!({"profiles": {"v100": resnet_features()}})),
        Some(TOKEN),
    )
    .await;
    assert_error(
        &bad_id,
        StatusCode::UNPROCESSABLE_ENTITY,
        Some("id"),
        "must be 1 to 200",
    );
    let missing = call(&app, "GET", "/v1/workloads/new-job", None, None).await;
    assert_eq!(missing.0, StatusCode::NOT_FOUND);
    let delete_missing = call(&app, "DELETE", "/v1/workloads/new-job", None, Some(TOKEN)).await;
    assert_eq!(delete_missing.0, StatusCode::NOT_FOUND);
    let (_, list) = call(&app, "GET", "/v1/workloads", None, None).await;
    assert_eq!(list.as_array().expect("list").len(), 26);
}

/// A model repository in a temporary folder: `default` (a copy of the shipped model) and
/// `broken` (the same with a corrupt record).
fn repository() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tmp");
    for name in ["default", "broken"] {
        let to = dir.path().join(name);
        std::fs::create_dir(&to).expect("mkdir");
        for f in std::fs::read_dir(model_dir()).expect("model") {
            let f = f.expect("entry").path();
            std::fs::copy(&f, to.join(f.file_name().expect("name"))).expect("copy");
        }
    }
    std::fs::write(dir.path().join("broken/member-0.mpk"), b"not a record").expect("corrupt");
    dir
}

#[tokio::test]
async fn a_broken_model_never_replaces_the_working_one() {
    let repo = repository();
    let app = app_with(Config {
        token: Some(TOKEN.into()),
        model_repo: Some(repo.path().to_path_buf()),
        ..Config::new(model_dir())
    })
    .0;
    let (_, before) = call(&app, "GET", "/v1/models", None, None).await;
    let refused = call(
        &app,
        "POST",
        "/v1/models/reload",
        Some(json!({"model": "broken"})),
        Some(TOKEN),
    )
    .await;
    assert_error(
        &refused,
        StatusCode::UNPROCESSABLE_ENTITY,
        None,
        "member-0.mpk",
    );
    let (_, after) = call(&app, "GET", "/v1/models", None, None).await;
    assert_eq!(before, after);
    let ok = predict_one(&app).await;
    assert_eq!(ok.0, StatusCode::OK);
    let (_, metrics) = call(&app, "GET", "/metrics", None, None).await;
    let text = metrics.as_str().expect("text");
    assert!(
        text.contains("duet_model_reload_failures_total 1"),
        "{text}"
    );
    // A good reload of the serving folder goes through, with no body, `null` or `{}`.
    for body in [None, Some("null"), Some("{}")] {
        let reloaded = call_raw(
            &app,
            "POST",
            "/v1/models/reload",
            body.map(str::to_string),
            Some(TOKEN),
        )
        .await;
        assert_eq!(reloaded.0, StatusCode::OK, "{body:?}: {}", reloaded.1);
    }
    // And by name from the repository.
    let by_name = call(
        &app,
        "POST",
        "/v1/models/reload",
        Some(json!({"model": "default"})),
        Some(TOKEN),
    )
    .await;
    assert_eq!(by_name.0, StatusCode::OK, "{}", by_name.1);
    let (_, models) = call(&app, "GET", "/v1/models", None, None).await;
    assert_eq!(
        models[0]["path"],
        repo.path().join("default").display().to_string()
    );
}

#[tokio::test]
async fn reload_never_reads_a_path_a_client_gives() {
    let repo = repository();
    let app = app_with(Config {
        token: Some(TOKEN.into()),
        model_repo: Some(repo.path().to_path_buf()),
        ..Config::new(model_dir())
    })
    .0;
    let (_, before) = call(&app, "GET", "/v1/models", None, None).await;
    let outside = model_dir().display().to_string();
    for name in [
        outside.as_str(),
        "../default",
        "..",
        ".",
        "default/",
        "/etc",
        "",
        "sub/default",
    ] {
        let refused = call(
            &app,
            "POST",
            "/v1/models/reload",
            Some(json!({ "model": name })),
            Some(TOKEN),
        )
        .await;
        assert_error(
            &refused,
            StatusCode::UNPROCESSABLE_ENTITY,
            Some("model"),
            "never a path",
        );
    }
    let unknown = call(
        &app,
        "POST",
        "/v1/models/reload",
        Some(json!({"model": "nope"})),
        Some(TOKEN),
    )
    .await;
    assert_error(
        &unknown,
        StatusCode::NOT_FOUND,
        Some("model"),
        "broken, default",
    );
    let (_, after) = call(&app, "GET", "/v1/models", None, None).await;
    assert_eq!(before, after);
}

#[tokio::test]
async fn limits_are_listed_and_named_when_exceeded() {
    let app = app();
    let (status, limits) = call(&app, "GET", "/v1/limits", None, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(limits["max_pairs"], 1000);
    assert_eq!(limits["max_body_bytes"], 200_000);
    assert_eq!(limits["request_timeout_s"], 30.0);
    assert_eq!(limits["max_workload_id_length"], 200);
    assert_eq!(limits["max_string_bytes"], 65_536);
    let pairs: Vec<Value> = (0..1001).map(|_| pair("a3c", "lm-bs80")).collect();
    let over = predict_v100(&app, &pairs).await;
    assert_error(
        &over,
        StatusCode::PAYLOAD_TOO_LARGE,
        Some("pairs"),
        "--max-pairs",
    );
    assert!(over.1["error"].as_str().is_some_and(|e| e.contains("1000")));
}

#[tokio::test]
async fn health_models_metrics_and_openapi() {
    let app = app();
    assert_eq!(
        call(&app, "GET", "/healthz", None, None).await.0,
        StatusCode::OK
    );
    let (s, ready) = call(&app, "GET", "/readyz", None, None).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(ready["status"], "ready");
    let (_, models) = call(&app, "GET", "/v1/models", None, None).await;
    assert_eq!(models[0]["name"], "default");
    assert_eq!(models[0]["engine"], "burn");
    assert!(
        models[0]["meta"]["metrics"]
            .as_array()
            .is_some_and(|m| !m.is_empty())
    );
    predict_one(&app).await;
    call(
        &app,
        "POST",
        "/v1/predict",
        Some(json!({"pairs": []})),
        None,
    )
    .await;
    let (_, metrics) = call(&app, "GET", "/metrics", None, None).await;
    let text = metrics.as_str().expect("text");
    for line in [
        "duet_requests_total{route=\"/v1/predict\",status=\"200\"} 1",
        "duet_requests_total{route=\"/v1/predict\",status=\"422\"} 1",
        "duet_request_duration_seconds_count{route=\"/v1/predict\"} 2",
        "duet_predict_pairs_count 1",
        "duet_model_info{version=\"0.1.0+",
        "duet_registered_workloads 26",
    ] {
        assert!(text.contains(line), "missing `{line}` in\n{text}");
    }
    let (_, doc) = call(&app, "GET", "/openapi.json", None, None).await;
    assert_eq!(doc["info"]["title"], "duet");
    for path in [
        "/v1/predict",
        "/v1/workloads/{id}",
        "/v1/models/reload",
        "/v1/limits",
        "/readyz",
    ] {
        assert!(doc["paths"][path].is_object(), "{path} missing");
    }
    assert!(doc["components"]["schemas"]["PairQuery"]["properties"]["share_a"].is_object());
    // The document states what this server and its model check.
    for path in [
        "/v2/models/{name}/infer",
        "/v2/models/{name}",
        "/v2/health/ready",
        "/v2",
        "/v2/models/{name}/versions/{version}",
        "/v2/models/{name}/versions/{version}/ready",
        "/v2/models/{name}/versions/{version}/infer",
    ] {
        assert!(doc["paths"][path].is_object(), "{path} missing");
    }
    // Every operation that reads a body declares the 408 of a body that pauses past
    // --idle-timeout and the 413 of one past its limit.
    let mut with_bodies = 0;
    for (path, operations) in doc["paths"].as_object().expect("paths") {
        for (method, operation) in operations.as_object().expect("operations") {
            if operation.get("requestBody").is_none() {
                continue;
            }
            with_bodies += 1;
            for status in ["408", "413"] {
                assert!(
                    operation["responses"][status].is_object(),
                    "{method} {path} does not declare {status}"
                );
            }
        }
    }
    assert!(with_bodies >= 6, "{with_bodies} operations read a body");
    // A KServe parameter is a scalar, in the document as in the server.
    let scalar = json!(["boolean", "number", "string", "null"]);
    for schema in ["InferInput", "InferRequest", "InferRequestedOutput"] {
        let parameters = &doc["components"]["schemas"][schema]["properties"]["parameters"];
        assert_eq!(
            parameters["additionalProperties"]["type"], scalar,
            "{schema}"
        );
        assert_eq!(parameters["maxProperties"], 64, "{schema}");
    }
    let id = &doc["paths"]["/v1/workloads/{id}"]["put"]["parameters"][0];
    assert_eq!(id["name"], "id");
    assert_eq!(id["in"], "path");
    assert_eq!(id["schema"]["maxLength"], 200);
    let features = &doc["components"]["schemas"]["Features"];
    assert_eq!(
        features["required"],
        json!(["solo_throughput", "batch_size", "model"])
    );
    assert_eq!(features["additionalProperties"], false);
    assert_eq!(
        doc["components"]["schemas"]["PairQuery"]["properties"]["mode"]["enum"],
        json!(["space"])
    );
    assert_eq!(
        doc["components"]["schemas"]["PredictRequest"]["properties"]["pairs"]["maxItems"],
        1000
    );
    // Pairs or groups, and (three devices, no --gpu) the device named.
    let rules = &doc["components"]["schemas"]["PredictRequest"]["allOf"];
    assert_eq!(rules.as_array().map(Vec::len), Some(2), "{rules}");
    assert_eq!(
        doc["components"]["schemas"]["GroupQuery"]["properties"]["jobs"]["maxItems"],
        8
    );
    assert_eq!(
        doc["components"]["schemas"]["WorkloadBody"]["properties"]["profiles"]["minProperties"],
        1
    );
    let put = &doc["paths"]["/v1/workloads/{id}"]["put"]["responses"];
    for status in ["400", "401", "413", "422"] {
        assert!(put[status].is_object(), "PUT {status} undocumented");
    }
    let (s, body) = call(&app, "GET", "/v1/nothing", None, None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert!(body["error"].as_str().is_some());
}

/// Each pair says which calibration its p90 comes from (the shifts themselves:
/// model/tests/calibration.rs), and `/metrics` counts pairs by class; the OpenAPI document lists
/// every class.
#[tokio::test]
async fn each_pair_says_its_calibration_class_and_metrics_count_them() {
    let app = app();
    let inline = |model: &str, solo: f64| json!({"features": {"solo_throughput": solo, "model": model, "batch_size": 64}});
    let with = |b: Value| json!({"a": {"workload": "a3c"}, "b": b, "mode": "space"});
    let (s, answer) = predict_v100(
        &app,
        &[
            pair("a3c", "resnet-50-bs64"),
            with(inline("ResNet-50", 11.2)),
            with(inline("Unseen-Net", 11.2)),
            with(json!({"features": {"solo_throughput": 11.2, "batch_size": 64, "model": null}})),
            with(inline("ResNet-50", 1.0e9)),
        ],
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{answer}");
    let p = answer["predictions"].as_array().expect("predictions");
    let classes: Vec<&str> = p
        .iter()
        .map(|p| p["calibration"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        classes,
        ["known", "new", "new_family", "new_family", "conservative"],
        "a job that declares no family is taken as a new one"
    );
    let (_, metrics) = call(&app, "GET", "/metrics", None, None).await;
    let text = metrics.as_str().expect("text");
    for line in [
        "duet_predicted_pairs_total{calibration=\"known\"} 1",
        "duet_predicted_pairs_total{calibration=\"new\"} 1",
        "duet_predicted_pairs_total{calibration=\"new_family\"} 2",
        "duet_predicted_pairs_total{calibration=\"conservative\"} 1",
    ] {
        assert!(text.contains(line), "missing `{line}` in\n{text}");
    }
    let (_, doc) = call(&app, "GET", "/openapi.json", None, None).await;
    let classes = &doc["components"]["schemas"]["Calibration"];
    let listed = classes.to_string();
    for class in ["known", "new", "new_family", "conservative"] {
        assert!(listed.contains(&format!("\"{class}\"")), "{classes}");
    }
}

#[tokio::test]
async fn the_registry_survives_a_new_server_on_the_same_state_file() {
    let dir = tempfile::tempdir().expect("tmp");
    let config = Config {
        state: Some(StateLocation::Sqlite(dir.path().join("registry.sqlite"))),
        ..Config::new(model_dir())
    };
    {
        let (app, _) = app_started(config.clone()).await;
        let put = json!({"profiles": {"v100": resnet_features(), "k80": {"solo_throughput": 2.0, "model": "ResNet-50", "batch_size": 64}}});
        assert_eq!(
            call(&app, "PUT", "/v1/workloads/kept", Some(put), None)
                .await
                .0,
            StatusCode::CREATED
        );
        assert_eq!(
            call(&app, "DELETE", "/v1/workloads/a3c", None, None)
                .await
                .0,
            StatusCode::NO_CONTENT
        );
    }
    let (app, _) = app_started(config).await;
    let (s, kept) = call(&app, "GET", "/v1/workloads/kept", None, None).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(kept["profiles"]["k80"]["solo_throughput"], 2.0);
    assert_eq!(
        call(&app, "GET", "/v1/workloads/a3c", None, None).await.0,
        StatusCode::NOT_FOUND
    );
}

/// Both engines give the same predictions for the same request (ONNX Runtime comes from
/// `scripts/python-env.sh`, which the test command runs).
#[tokio::test]
async fn burn_and_onnx_engines_agree() {
    assert!(
        std::env::var_os("ORT_DYLIB_PATH").is_some(),
        "ORT_DYLIB_PATH names ONNX Runtime's shared library; run the tests through scripts/test.sh"
    );
    let (burn, _) = app_with(Config::new(model_dir()));
    let (onnx, _) = app_with(Config {
        engine: EngineKind::Onnx,
        ..Config::new(model_dir())
    });
    let ids = [
        "a3c",
        "cyclegan",
        "resnet-50-bs64",
        "transformer-bs32",
        "lm-bs80",
    ];
    // 26 pairs run on one session; the same plus 300 more (652 rows) run in slices, one per
    // core. Both must match Burn.
    let mut pairs = Vec::new();
    for round in 0..13 {
        for a in ids {
            for b in ids {
                let gpu = ["k80", "p100", "v100"][round % 3];
                pairs.push(json!({"a": {"workload": a}, "b": {"workload": b}, "mode": "space", "gpu": gpu}));
            }
        }
    }
    pairs.insert(
        25,
        json!({"a": {"features": resnet_features()}, "b": {"workload": "a3c"}, "mode": "space"}),
    );
    for n in [26, pairs.len()] {
        let body = json!({"gpu": "p100", "pairs": pairs[..n].to_vec()});
        let (s1, a) = call(&burn, "POST", "/v1/predict", Some(body.clone()), None).await;
        let (s2, b) = call(&onnx, "POST", "/v1/predict", Some(body), None).await;
        assert_eq!((s1, s2), (StatusCode::OK, StatusCode::OK), "{a} {b}");
        let (pa, pb) = (
            a["predictions"].as_array().expect("a"),
            b["predictions"].as_array().expect("b"),
        );
        assert_eq!((pa.len(), pb.len()), (n, n));
        for (x, y) in pa.iter().zip(pb) {
            assert_eq!(x["feasible"], y["feasible"]);
            for k in [
                "speed_a",
                "speed_b",
                "slowdown_a_p90",
                "slowdown_b_p90",
                "combined",
            ] {
                let (u, v) = (x[k].as_f64().expect("x"), y[k].as_f64().expect("y"));
                assert!(
                    (u - v).abs() <= 1e-4 * u.abs().max(1.0),
                    "{k}: burn {u} onnx {v}"
                );
            }
        }
    }
}

#[tokio::test]
async fn not_ready_until_a_model_is_loaded() {
    let state = AppState::new(Config::new(model_dir())).expect("state");
    let app = duet_server::router(state.clone());
    assert_eq!(
        call(&app, "GET", "/healthz", None, None).await.0,
        StatusCode::OK
    );
    let not_yet = call(&app, "GET", "/readyz", None, None).await;
    assert_error(
        &not_yet,
        StatusCode::SERVICE_UNAVAILABLE,
        None,
        "no model is loaded yet",
    );
    let (s, ready) = call(&app, "GET", "/v2/health/ready", None, None).await;
    assert_eq!(
        (s, ready["ready"].as_bool()),
        (StatusCode::SERVICE_UNAVAILABLE, Some(false))
    );
    let predict = predict_one(&app).await;
    assert_eq!(predict.0, StatusCode::SERVICE_UNAVAILABLE);
    state.load_model(None, Vec::new()).expect("load");
    assert_eq!(
        call(&app, "GET", "/readyz", None, None).await.0,
        StatusCode::OK
    );
}

#[tokio::test]
async fn a_request_over_the_timeout_is_answered_503() {
    let (app, _) = app_with(Config {
        request_timeout: std::time::Duration::from_nanos(1),
        ..Config::new(model_dir())
    });
    let pairs: Vec<Value> = (0..5000).map(|_| pair("a3c", "lm-bs80")).collect();
    let answer = predict_v100(&app, &pairs).await;
    assert_error(
        &answer,
        StatusCode::SERVICE_UNAVAILABLE,
        None,
        "--request-timeout",
    );
}

#[tokio::test]
async fn a_large_request_split_over_the_cores_answers_like_small_ones() {
    let app = app_with(Config::new(model_dir())).0;
    let ids = [
        "a3c",
        "cyclegan",
        "resnet-50-bs64",
        "transformer-bs32",
        "lm-bs80",
        "resnet-18-bs16",
    ];
    let pairs: Vec<Value> = (0..3000)
        .map(|i| pair(ids[i % ids.len()], ids[(i * 7 + 1) % ids.len()]))
        .collect();
    let (s, whole) = predict_v100(&app, &pairs).await;
    assert_eq!(s, StatusCode::OK);
    let whole = whole["predictions"]
        .as_array()
        .expect("predictions")
        .clone();
    assert_eq!(whole.len(), 3000);
    let mut pieces = Vec::new();
    for chunk in pairs.chunks(1000) {
        let (s, part) = predict_v100(&app, chunk).await;
        assert_eq!(s, StatusCode::OK);
        pieces.extend(part["predictions"].as_array().expect("predictions").clone());
    }
    assert_eq!(whole, pieces);
    // A bad pair in a later part is named by its place in the whole request.
    let mut bad = pairs.clone();
    bad[2500] = pair("a3c", "nobody");
    bad[2900] = pair("nobody-else", "a3c");
    let got = predict_v100(&app, &bad).await;
    assert_error(
        &got,
        StatusCode::NOT_FOUND,
        Some("pairs[2500].b.workload"),
        "nobody",
    );
}
