//! A model trained with measured groups learns from them, end to end: `duet train` on the
//! committed triples fits each workload's group effect (model.json's
//! `calibration.group_effects`), and `duet serve` answers a group of registered workloads with
//! its pairs composed by the excess rule, each job moved by its effect; a job given by its
//! features has none.

mod support;

use std::fs;
use std::path::Path;

use serde_json::{Value, json};
use support::{Server, train_quick};

#[test]
fn a_model_trained_with_groups_corrects_each_job_by_its_group_effect() {
    let tmp = tempfile::tempdir().expect("tmp");
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("../datasets/cpu-dev2c-triples");
    let model = tmp.path().join("model");
    // Composed, as it would be without the network that learns groups (which beats the
    // composition on these triples: `group_network.rs`).
    let said = train_quick(&data, &model, &["--group-network", "never"]);
    assert!(said.contains("group effect (penalty"), "{said}");
    let meta: Value =
        serde_json::from_str(&fs::read_to_string(model.join("model.json")).expect("model.json"))
            .expect("json");
    let effects = &meta["calibration"]["group_effects"]["3"];
    let penalty = effects["penalty"].as_f64().expect("a penalty");
    assert!(
        duet_trainer::groups::PENALTIES.contains(&penalty),
        "{effects}"
    );
    assert_eq!(effects["jobs"], 168, "{effects}");
    let cpu = effects["by_device"]["cpu"].as_object().expect("cpu");
    assert_eq!(cpu.len(), 6, "every workload of the triples: {effects}");
    let effect = |id: &str| cpu[id].as_f64().expect("an effect");

    // The group and its three pairs in one request: each job's speed is its pairs' excess
    // rule times e^effect; the same job inline (its features, no id) is not moved.
    let ids = ["stream", "matmul", "conv-train"];
    let server = Server::start_model(&model, &[]);
    let job = |id: &str| json!({"workload": id});
    let pair = |a: &str, b: &str| json!({"a": job(a), "b": job(b), "mode": "cpu"});
    let workloads: Value = ureq::get(&server.url("/v1/workloads/stream"))
        .call()
        .expect("200")
        .into_json()
        .expect("json");
    let features = workloads["profiles"]["cpu"].clone();
    assert!(features.is_object(), "{workloads}");
    let inline = json!({"features": features});
    let body = json!({
        "pairs": [
            pair(ids[0], ids[1]),
            pair(ids[0], ids[2]),
            pair(ids[1], ids[2]),
            {"a": inline, "b": job(ids[1]), "mode": "cpu"},
            {"a": inline, "b": job(ids[2]), "mode": "cpu"},
        ],
        "groups": [
            {"jobs": ids.map(job), "mode": "cpu"},
            {"jobs": [inline, job(ids[1]), job(ids[2])], "mode": "cpu"},
        ],
    });
    let answer: Value = ureq::post(&server.url("/v1/predict"))
        .send_json(body)
        .expect("200")
        .into_json()
        .expect("json");
    let p = &answer["predictions"];
    let speed = |v: &Value| v.as_f64().expect("a speed");
    let excess = |s: [f64; 2]| 1.0 / (1.0 + s.iter().map(|x| 1.0 / x - 1.0).sum::<f64>());
    let close = |got: f64, want: f64, what: &str| {
        assert!((got - want).abs() < 1e-4 * want, "{what}: {got} vs {want}");
    };
    // Each job's pairwise speeds, for the group by ids and for the one with `stream` inline.
    let by_id = [
        [speed(&p[0]["speed_a"]), speed(&p[1]["speed_a"])],
        [speed(&p[0]["speed_b"]), speed(&p[2]["speed_a"])],
        [speed(&p[1]["speed_b"]), speed(&p[2]["speed_b"])],
    ];
    let with_inline = [
        [speed(&p[3]["speed_a"]), speed(&p[4]["speed_a"])],
        [speed(&p[3]["speed_b"]), speed(&p[2]["speed_a"])],
        [speed(&p[4]["speed_b"]), speed(&p[2]["speed_b"])],
    ];
    assert!(effect(ids[0]).abs() > 1e-3, "a visible effect: {effects}");
    assert_eq!(answer["groups"][0]["composition"], "excess+effects");
    for (g, pairwise) in [by_id, with_inline].iter().enumerate() {
        let jobs = &answer["groups"][g]["jobs"];
        for (k, id) in ids.iter().enumerate() {
            // The inline job is no registered workload: no effect.
            let moved = if g == 1 && k == 0 { 0.0 } else { effect(id) };
            let want = excess(pairwise[k]) * moved.exp();
            close(speed(&jobs[k]["speed"]), want, &format!("group {g}, {id}"));
        }
    }
}
