//! The OpenAPI document says what the server checks of an observation's own fields: a solo run
//! and a co-location are two shapes (`oneOf`), and what one shape forbids the server refuses.

use axum::http::StatusCode;
use serde_json::{Value, json};

#[path = "support/http.rs"]
mod http;
use http::{call, default_app};

const TOKEN: &str = "contract-token";

#[tokio::test]
async fn observations_are_a_solo_run_or_a_co_location_in_the_document_and_the_server() {
    let app = default_app(TOKEN);
    let (_, doc) = call(&app, "GET", "/openapi.json", None, None).await;
    let schemas = &doc["components"]["schemas"];
    assert_eq!(
        schemas["Observation"]["oneOf"],
        json!([
            {"$ref": "#/components/schemas/CoLocation"},
            {"$ref": "#/components/schemas/SoloRun"}
        ])
    );
    let solo = &schemas["SoloRun"];
    for name in [
        "b",
        "mode",
        "share_a",
        "share_b",
        "throughput_b",
        "solo_throughput_a",
    ] {
        assert_eq!(solo["properties"][name]["type"], "null", "SoloRun.{name}");
    }
    assert_eq!(solo["additionalProperties"], false);
    let pair = &schemas["CoLocation"];
    let required: Vec<&str> = pair["required"]
        .as_array()
        .expect("required")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for name in ["b", "mode", "throughput_b", "a", "throughput_a"] {
        assert!(required.contains(&name), "CoLocation requires {name}");
    }
    assert_eq!(pair["properties"]["mode"]["enum"], json!(["space"]));
    assert_eq!(
        pair["properties"]["b"]["$ref"],
        "#/components/schemas/JobRef"
    );

    // What each shape forbids, the server refuses, naming the field.
    let solo = json!({"id": "solo-1", "gpu": "v100", "a": {"workload": "a3c"},
                      "throughput_a": 2.0, "window_s": 10,
                      "observed_at": "2026-12-01T12:00:00Z"});
    let mut with_share = solo.clone();
    with_share["share_a"] = json!(50);
    let mut pair_without_b_throughput = solo.clone();
    pair_without_b_throughput["id"] = json!("pair-1");
    pair_without_b_throughput["b"] = json!({"workload": "a3c"});
    pair_without_b_throughput["mode"] = json!("space");
    for (body, field) in [
        (with_share, "observations[0].share_a"),
        (pair_without_b_throughput, "observations[0].throughput_b"),
    ] {
        let (s, answer) = call(
            &app,
            "POST",
            "/v1/observations",
            Some(json!({"observations": [body]})),
            Some(TOKEN),
        )
        .await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
        assert_eq!(answer["rejected"][0]["field"], field, "{answer}");
    }
    // And what the solo shape allows, it takes: nulls where a co-location has values.
    let mut with_nulls = solo;
    for name in ["b", "mode", "share_a", "throughput_b"] {
        with_nulls[name] = Value::Null;
    }
    let (s, answer) = call(
        &app,
        "POST",
        "/v1/observations",
        Some(json!({"observations": [with_nulls]})),
        Some(TOKEN),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{answer}");
    assert_eq!(answer["stored"], json!(["solo-1"]));
}
