//! Groups of three or more jobs in `POST /v1/predict`, in process on the shipped default
//! model: answered from their pairs, in any order, beside pairs answered as ever, and every bad
//! group named by its field.

use axum::Router;
use axum::http::StatusCode;
use duet_server::Config;
use serde_json::{Value, json};

#[path = "support/http.rs"]
mod http;
use http::{app_with, call, model_dir};

fn app() -> Router {
    app_with(Config {
        max_pairs: 1000,
        max_body_bytes: 200_000,
        ..Config::new(model_dir())
    })
    .0
}

fn pair(a: &str, b: &str) -> Value {
    json!({"a": {"workload": a}, "b": {"workload": b}, "mode": "space"})
}

/// Asserts a 4xx JSON error whose field is `field` and whose message contains `says`.
fn assert_error(got: &(StatusCode, Value), status: StatusCode, field: Option<&str>, says: &str) {
    let (s, body) = got;
    assert_eq!(*s, status, "{body}");
    assert_eq!(body["field"].as_str(), field, "{body}");
    let error = body["error"].as_str().expect("error message");
    assert!(error.contains(says), "`{error}` does not say `{says}`");
}

fn group(jobs: &[&str]) -> Value {
    let jobs: Vec<Value> = jobs.iter().map(|j| json!({"workload": j})).collect();
    json!({"jobs": jobs, "mode": "space"})
}

/// A job's speed among `co_runners` by the excess rule from its pairwise speeds.
fn excess(pairwise: &[f64]) -> f64 {
    1.0 / (1.0 + pairwise.iter().map(|s| 1.0 / s - 1.0).sum::<f64>())
}

#[tokio::test]
async fn groups_are_answered_from_their_pairs_in_any_order_and_pairs_as_ever() {
    let app = app();
    let (a, b, c) = ("resnet-50-bs64", "transformer-bs32", "a3c");
    let pairs = [pair(a, b), pair(a, c), pair(b, c)];
    let (status, alone) = call(
        &app,
        "POST",
        "/v1/predict",
        Some(json!({"gpu": "v100", "pairs": pairs})),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{alone}");
    assert!(
        alone.get("groups").is_none(),
        "a request of pairs is answered as ever: {alone}"
    );
    let body =
        json!({"gpu": "v100", "pairs": pairs, "groups": [group(&[a, b, c]), group(&[c, a, b])]});
    let (status, answer) = call(&app, "POST", "/v1/predict", Some(body), None).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["predictions"], alone["predictions"]);
    let p = |i: usize, k: &str| alone["predictions"][i][k].as_f64().expect(k);
    let g = &answer["groups"][0];
    let speed = |g: &Value, j: usize| g["jobs"][j]["speed"].as_f64().expect("speed");
    // a next to b (pair 0, a) and c (pair 1, a); b next to a (0, b) and c (2, a); c (1, b), (2, b).
    let expected = [
        excess(&[p(0, "speed_a"), p(1, "speed_a")]),
        excess(&[p(0, "speed_b"), p(2, "speed_a")]),
        excess(&[p(1, "speed_b"), p(2, "speed_b")]),
    ];
    for (j, e) in expected.iter().enumerate() {
        assert!(
            (speed(g, j) - e).abs() < 1e-4,
            "job {j}: {} vs {e}",
            speed(g, j)
        );
        let job = &g["jobs"][j];
        let p90 = job["slowdown_p90"].as_f64().expect("p90");
        assert!(
            p90 >= job["slowdown"].as_f64().expect("slowdown") * 0.999,
            "{job}"
        );
    }
    assert_eq!(g["composition"], "excess");
    // The shipped model was trained without groups: its p90 is the pairs' composed, calibrated
    // on no measured group, and says so.
    assert_eq!(g["p90_groups"], 0);
    assert_eq!(g["calibration"], "known");
    let combined: f64 = (0..3).map(|j| speed(g, j)).sum();
    assert!((g["combined"].as_f64().expect("combined") - combined).abs() < 1e-4);
    // The same jobs in another order: the same answers, in that order.
    let again = &answer["groups"][1];
    for (j, k) in [(0, 2), (1, 0), (2, 1)] {
        assert!((speed(again, j) - speed(g, k)).abs() < 1e-5);
    }
    // Groups alone; a group of four with a job twice.
    let body = json!({"gpu": "v100", "groups": [group(&[a, a, b, c])]});
    let (status, answer) = call(&app, "POST", "/v1/predict", Some(body), None).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["predictions"], json!([]));
    assert_eq!(
        answer["groups"][0]["jobs"].as_array().map(Vec::len),
        Some(4)
    );
}

#[tokio::test]
async fn bad_groups_name_the_field_within_the_group() {
    let app = app();
    let ask = |body: Value| {
        let app = app.clone();
        async move { call(&app, "POST", "/v1/predict", Some(body), None).await }
    };
    let with = |g: Value| json!({"gpu": "v100", "groups": [group(&["a3c", "a3c", "a3c"]), g]});
    assert_error(
        &ask(with(group(&["a3c", "cyclegan"]))).await,
        StatusCode::UNPROCESSABLE_ENTITY,
        Some("groups[1].jobs"),
        "two jobs are a pair",
    );
    assert_error(
        &ask(with(group(&["a3c", "cyclegan", "no-such-job"]))).await,
        StatusCode::NOT_FOUND,
        Some("groups[1].jobs[2].workload"),
        "no-such-job",
    );
    let mut shares = group(&["a3c", "a3c", "a3c"]);
    shares["shares"] = json!([50, 50]);
    assert_error(
        &ask(with(shares)).await,
        StatusCode::UNPROCESSABLE_ENTITY,
        Some("groups[1].shares"),
        "2 shares for 3 jobs",
    );
    let mut mode = group(&["a3c", "a3c", "a3c"]);
    mode["mode"] = json!("mps");
    mode["shares"] = json!([30, 30, 30]);
    assert_error(
        &ask(with(mode)).await,
        StatusCode::UNPROCESSABLE_ENTITY,
        Some("groups[1].mode"),
        "not trained on mode `mps`",
    );
    assert_error(
        &ask(json!({"gpu": "v100"})).await,
        StatusCode::UNPROCESSABLE_ENTITY,
        Some("pairs"),
        "no pairs or groups",
    );
    // 200 groups of four are 1,200 pairs: over --max-pairs 1000.
    let many: Vec<Value> = (0..200)
        .map(|_| group(&["a3c", "a3c", "a3c", "a3c"]))
        .collect();
    assert_error(
        &ask(json!({"gpu": "v100", "groups": many})).await,
        StatusCode::PAYLOAD_TOO_LARGE,
        Some("pairs"),
        "--max-pairs",
    );
    let one = json!({"gpu": "v100", "pairs": [pair("a3c", "a3c")]});
    let (status, _) = call(&app, "POST", "/v1/predict", Some(one), None).await;
    assert_eq!(status, StatusCode::OK, "the server keeps serving");
}

#[tokio::test]
async fn groups_count_their_pairs_against_the_limit_exactly() {
    let app = app();
    let ask = |pairs: usize, groups: Vec<Value>| {
        let app = app.clone();
        let pairs: Vec<Value> = (0..pairs).map(|_| pair("a3c", "lm-bs20")).collect();
        async move {
            let body = json!({"gpu": "v100", "pairs": pairs, "groups": groups});
            call(&app, "POST", "/v1/predict", Some(body), None).await
        }
    };
    let threes = |n: usize| vec![group(&["a3c", "lm-bs20", "cyclegan"]); n];
    let fives = |n: usize| vec![group(&["a3c", "lm-bs20", "cyclegan", "a3c", "a3c"]); n];
    // --max-pairs 1000: 333 groups of three (999 pairs) and one pair are 1,000, answered; so
    // are 100 groups of five (1,000 pairs) and 100 groups of three beside 700 pairs.
    for (pairs, groups, answered) in [
        (1, threes(333), 333),
        (0, fives(100), 100),
        (700, threes(100), 100),
    ] {
        let (status, body) = ask(pairs, groups).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["groups"].as_array().map(Vec::len), Some(answered));
    }
    // One pair more, whichever way, is over.
    for (pairs, groups) in [(2, threes(333)), (1, fives(100)), (0, threes(334))] {
        assert_error(
            &ask(pairs, groups).await,
            StatusCode::PAYLOAD_TOO_LARGE,
            Some("pairs"),
            "--max-pairs",
        );
    }
}

#[tokio::test]
async fn groups_sharing_pairs_are_answered_as_each_alone() {
    let app = app();
    let ask = |groups: Vec<Value>| {
        let app = app.clone();
        async move {
            let body = json!({"gpu": "v100", "groups": groups});
            let (status, answer) = call(&app, "POST", "/v1/predict", Some(body), None).await;
            assert_eq!(status, StatusCode::OK, "{answer}");
            answer["groups"].as_array().expect("groups").clone()
        }
    };
    let (a, b, c, d) = ("resnet-50-bs64", "transformer-bs32", "a3c", "cyclegan");
    let inline =
        json!({"features": {"solo_throughput": 11.2, "model": "ResNet-50", "batch_size": 64}});
    let mut with_inline = group(&[a, b]);
    with_inline["jobs"]
        .as_array_mut()
        .expect("jobs")
        .push(inline.clone());
    let mut inline_twice = group(&[c]);
    inline_twice["jobs"]
        .as_array_mut()
        .expect("jobs")
        .extend([inline.clone(), inline]);
    // The pairs of these groups repeat, in both orders; the inline jobs are their own.
    let groups = vec![
        group(&[a, b, c]),
        group(&[c, b, a]),
        group(&[b, d, a, c]),
        with_inline,
        group(&[d, d, d]),
        inline_twice,
        group(&[a, b, c]),
    ];
    let together = ask(groups.clone()).await;
    assert_eq!(together.len(), groups.len());
    for (k, g) in groups.into_iter().enumerate() {
        let alone = ask(vec![g]).await;
        let (x, y) = (&together[k], &alone[0]);
        assert_eq!(x["calibration"], y["calibration"], "group {k}");
        assert_eq!(x["feasible"], y["feasible"], "group {k}");
        let jobs = x["jobs"].as_array().expect("jobs");
        for (j, job) in jobs.iter().enumerate() {
            for field in ["speed", "slowdown", "slowdown_p90"] {
                let (u, v) = (job[field].as_f64(), y["jobs"][j][field].as_f64());
                let (u, v) = (u.expect(field), v.expect(field));
                assert!(
                    (u - v).abs() <= 1e-5 * v.abs(),
                    "group {k} job {j} {field}: {u} vs {v}"
                );
            }
        }
    }
    // The same group twice in one request: the same answer, bit for bit.
    assert_eq!(together[0], together[6]);
}

#[test]
fn a_large_answer_written_over_the_cores_is_what_serde_writes() {
    // Enough pairs and groups that both arrays are written in parts, one per core.
    let state = duet_server::AppState::new(Config {
        max_pairs: 100_000,
        ..Config::new(model_dir())
    })
    .expect("state");
    state.load_model(None, Vec::new()).expect("model");
    let ids = [
        "resnet-50-bs64",
        "transformer-bs32",
        "a3c",
        "cyclegan",
        "resnet-18-bs32",
    ];
    let n = duet_server::service::predict::PARALLEL_PAIRS + 3;
    let pairs: Vec<Value> = (0..n)
        .map(|i| pair(ids[i % 5], ids[(i / 5 + i + 1) % 5]))
        .collect();
    let groups: Vec<Value> = (0..n)
        .map(|i| group(&[ids[i % 5], ids[(i + 1) % 5], ids[(i / 5 + i + 2) % 5]]))
        .collect();
    let body = serde_json::to_vec(&json!({"gpu": "v100", "pairs": pairs, "groups": groups}))
        .expect("json");
    let written = duet_server::answer(&state, &body).expect("an answer");
    let request = duet_server::routes::predict::parse_request(&body, 100_000).expect("parsed");
    let (model_version, predictions, groups) = duet_server::service::predict::predict_with_groups(
        &state,
        request,
        &std::sync::atomic::AtomicBool::new(false),
        &mut duet_server::service::predict::Spent::default(),
    )
    .expect("predicted");
    assert_eq!(groups.len(), n);
    let whole = serde_json::to_vec(&duet_core::api::PredictResponse {
        model_version,
        predictions,
        groups,
    })
    .expect("json");
    assert!(written == whole, "the answers differ");
}
