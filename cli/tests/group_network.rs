//! A network that learns measured groups, end to end: `duet train` on the committed triples
//! trains it beside the pairs (one row per job: the job, its co-runners' mean encoding,
//! ln(co-runners)), compares it with the composition on groups it was not trained on and says
//! so; with `--group-network always` model.json records it (`spec.groups`,
//! `calibration.group_network`), and `duet serve` answers a group of three with it (`composition:
//! network`), whatever the order of its jobs, exactly as the model answers in process, while a
//! group of four (no measured size) is still composed from the pairs.

mod support;

use std::fs;
use std::path::Path;

use duet_core::api::{GroupQuery, JobRef};
use duet_core::dataset::Mode;
use duet_model::{EngineKind, LoadedModel, Registry, predict};
use serde_json::{Value, json};
use support::{Server, train_quick};

fn triples() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../datasets/cpu-dev2c-triples")
}

#[test]
fn training_compares_the_network_that_learns_groups_with_the_composition() {
    let tmp = tempfile::tempdir().expect("tmp");
    let model = tmp.path().join("model");
    let said = train_quick(&triples(), &model, &[]);
    let line = said
        .lines()
        .find(|l| l.contains("groups of 3: the network that learns groups"))
        .unwrap_or_else(|| panic!("no comparison: {said}"));
    assert!(line.contains("the composition"), "{line}");
    let meta: Value =
        serde_json::from_str(&fs::read_to_string(model.join("model.json")).expect("model.json"))
            .expect("json");
    // Whichever won, model.json says it consistently.
    let chosen = line.contains("the network answers them");
    assert_eq!(meta["spec"]["groups"] == true, chosen, "{line}");
    assert_eq!(
        meta["calibration"]["group_network"] == json!(["3"]),
        chosen,
        "{line}"
    );
    assert_eq!(
        meta["calibration"]["group_effects"].get("3").is_some(),
        !chosen && said.contains("group effect (penalty"),
        "{line}"
    );
}

#[test]
fn a_model_that_learned_groups_answers_their_size_with_the_network() {
    let tmp = tempfile::tempdir().expect("tmp");
    let model = tmp.path().join("model");
    let said = train_quick(&triples(), &model, &["--group-network", "always"]);
    assert!(said.contains("the network answers them"), "{said}");
    assert!(
        !said.contains("are not training rows"),
        "the groups are training rows now: {said}"
    );
    let meta: Value =
        serde_json::from_str(&fs::read_to_string(model.join("model.json")).expect("model.json"))
            .expect("json");
    assert_eq!(meta["spec"]["groups"], true);
    assert_eq!(meta["calibration"]["group_network"], json!(["3"]));
    assert_eq!(meta["calibration"]["groups"]["3"]["groups"], 56, "{meta}");
    assert!(meta["calibration"]["group_effects"].get("3").is_none());

    let server = Server::start_model(&model, &[]);
    let job = |id: &str| json!({"workload": id});
    let ids = ["stream", "matmul", "conv-train"];
    let turned = [ids[2], ids[0], ids[1]];
    let four = ["stream", "matmul", "conv-train", "mlp-infer"];
    let workloads: Value = ureq::get(&server.url("/v1/workloads/stream"))
        .call()
        .expect("200")
        .into_json()
        .expect("json");
    let inline = json!({"features": workloads["profiles"]["cpu"].clone()});
    let body = json!({
        "pairs": [{"a": job(ids[0]), "b": job(ids[1]), "mode": "cpu"}],
        "groups": [
            {"jobs": ids.map(job), "mode": "cpu"},
            {"jobs": turned.map(job), "mode": "cpu"},
            {"jobs": four.map(job), "mode": "cpu"},
            {"jobs": [inline, job(ids[1]), job(ids[2])], "mode": "cpu"},
            {"jobs": [job("stream"), job("stream"), job("matmul")], "mode": "cpu"},
            {"jobs": [job("matmul"), job("stream"), job("stream")], "mode": "cpu"},
        ],
    });
    let answer: Value = ureq::post(&server.url("/v1/predict"))
        .send_json(body)
        .expect("200")
        .into_json()
        .expect("json");
    let groups = &answer["groups"];
    let speed = |g: usize, k: usize| groups[g]["jobs"][k]["speed"].as_f64().expect("a speed");
    let p90 = |g: usize, k: usize| {
        groups[g]["jobs"][k]["slowdown_p90"]
            .as_f64()
            .expect("a p90")
    };
    assert_eq!(groups[0]["composition"], "network", "{answer}");
    assert_eq!(groups[0]["p90_groups"], 56);
    assert_eq!(groups[0]["calibration"], "known");
    for k in 0..3 {
        assert!(speed(0, k) > 0.0 && speed(0, k) < 2.0, "{answer}");
        assert!(p90(0, k) >= 1.0 / speed(0, k) - 1e-5, "{answer}");
    }
    // The co-runners are pooled: the same jobs in another order, the same answers.
    for (k, t) in [2usize, 0, 1].iter().enumerate() {
        assert!((speed(1, k) - speed(0, *t)).abs() < 1e-5, "{answer}");
        assert!((p90(1, k) - p90(0, *t)).abs() < 1e-4, "{answer}");
    }
    // A workload twice, in two orders (the second run once, read from the first).
    assert!((speed(4, 0) - speed(4, 1)).abs() < 1e-6, "{answer}");
    for (k, t) in [2usize, 0, 1].iter().enumerate() {
        assert!((speed(5, k) - speed(4, *t)).abs() < 1e-6, "{answer}");
        assert!((p90(5, k) - p90(4, *t)).abs() < 1e-6, "{answer}");
    }
    // No group of four was measured: composed from its pairs.
    assert_eq!(groups[2]["composition"], "excess", "{answer}");
    // A job given by its features is new to the model: the group is, and its p90 no narrower.
    assert_eq!(groups[3]["composition"], "network");
    assert_eq!(groups[3]["calibration"], "new", "{answer}");
    // `/metrics` counts groups by class and by how they were answered.
    let metrics = ureq::get(&server.url("/metrics"))
        .call()
        .expect("200")
        .into_string()
        .expect("text");
    for line in [
        "duet_predicted_groups_total{calibration=\"known\",composition=\"network\"} 4",
        "duet_predicted_groups_total{calibration=\"new\",composition=\"network\"} 1",
        "duet_predicted_groups_total{calibration=\"known\",composition=\"excess\"} 1",
    ] {
        assert!(metrics.contains(line), "missing `{line}` in\n{metrics}");
    }
    // Pairs: the request's one and the six of the composed group of four; a group the network
    // answered counts none.
    let pairs: f64 = metrics
        .lines()
        .filter(|l| l.starts_with("duet_predicted_pairs_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert!(
        (pairs - 7.0).abs() < 1e-9,
        "{pairs} pairs counted:\n{metrics}"
    );

    // The same answer in process (what observations, drift and the pricing loop ask).
    let loaded = LoadedModel::load(&model, EngineKind::Burn).expect("the model loads");
    let (registry, _) = Registry::build(&loaded, Default::default());
    let query = GroupQuery {
        jobs: ids.iter().map(|&id| JobRef::workload(id)).collect(),
        mode: Mode::Cpu,
        shares: None,
        gpu: None,
    };
    let in_process =
        predict::predict_group(&loaded, &registry, &query, None).expect("a group's answer");
    assert_eq!(in_process.composition, "network");
    for k in 0..3 {
        let got = f64::from(in_process.jobs[k].speed);
        assert!((got - speed(0, k)).abs() < 1e-5, "{got} vs {answer}");
    }

    // The pricing loop's predictor in process: the same, a group of four composed beside it.
    use duet_scheduler::predictor::{GroupQuery as Candidate, ModelPredictor, Predictor};
    let mut predictor = ModelPredictor::load(&model, EngineKind::Burn).expect("the model loads");
    let outlooks = predictor
        .predict_groups(
            "cpu",
            &[
                Candidate {
                    jobs: four.to_vec(),
                    mode: Mode::Cpu,
                    shares: None,
                },
                Candidate {
                    jobs: ids.to_vec(),
                    mode: Mode::Cpu,
                    shares: None,
                },
            ],
        )
        .expect("groups");
    for k in 0..3 {
        assert!(
            (outlooks[1].speeds[k] - speed(0, k)).abs() < 1e-5,
            "{outlooks:?}"
        );
        assert!(
            (1.0 / outlooks[1].safe_speeds[k] - p90(0, k)).abs() < 1e-4,
            "{outlooks:?}"
        );
    }
    for k in 0..4 {
        assert!(
            (outlooks[0].speeds[k] - speed(2, k)).abs() < 1e-5,
            "{outlooks:?}"
        );
    }

    // `duet evaluate` scores the triples with the network's own answers.
    let out = support::duet()
        .args(["evaluate", "--model"])
        .arg(&model)
        .arg("--data")
        .arg(triples())
        .arg("--json")
        .output()
        .expect("duet evaluate");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("json");
    let cpu = report["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .find(|g| g["gpu"] == "cpu" && g["size"] == 3)
        .expect("the cpu triples");
    assert_eq!(cpu["metrics"]["rows"], 168, "{cpu}");
}
