//! A workload measured in only a few pair settings (a new job after its probes), end to end:
//! `duet train` records every training workload's count and calibrates the `probed` class on
//! its `probed_workloads` folds, and `duet serve` answers that workload's pairs and groups as
//! `probed`, with the p90 of that class and the count of measurements behind each job, on the
//! device asked.

mod support;

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

use duet_core::api::{Calibration as Class, PredictRequest};
use duet_core::dataset::{Dataset, Status};
use duet_model::encoding::PROBED_MAX;
use duet_model::{EngineKind, LoadedModel, Registry, predict};
use serde_json::{Value, json};
use support::{Server, train_quick};

/// The committed CPU campaign with `thin`'s pair settings cut to its first `keep` with another
/// workload (its other pairs dropped): what merging a new job's probes into a dataset gives.
fn thinned(out: &Path, thin: &str, keep: usize) -> Dataset {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../datasets/cpu-dev2c");
    let full = Dataset::read(&root).expect("the committed dataset");
    let mut kept = 0;
    let pairs = full
        .pairs
        .iter()
        .filter(|p| {
            if p.a != thin && p.b != thin {
                return true;
            }
            let probe = p.a != p.b && p.status == Status::Ok && kept < keep;
            kept += usize::from(probe);
            probe
        })
        .cloned()
        .collect();
    let d = full.with_pairs(pairs);
    d.write(out).expect("write the thinned dataset");
    d
}

/// The pair settings `id` is measured in.
fn settings_of(d: &Dataset, id: &str) -> u32 {
    let n = d.pairs.iter().filter(|p| p.a == id || p.b == id).count();
    u32::try_from(n).expect("few")
}

#[test]
fn a_probed_workload_is_answered_with_its_class_and_its_count() {
    let tmp = tempfile::tempdir().expect("tmp");
    let data = tmp.path().join("thin");
    let thin = "conv-train";
    let dataset = thinned(&data, thin, 2);
    let ids: Vec<String> = dataset
        .workloads
        .iter()
        .map(|w| w.workload.clone())
        .collect();
    assert!(ids.iter().any(|i| i == thin), "{ids:?}");
    let others: Vec<&String> = ids.iter().filter(|i| *i != thin).collect();
    let model = tmp.path().join("model");
    train_quick(&data, &model, &["--name", "probed"]);

    // model.json: every training workload's count, the split's figures and the class's shift.
    let meta: Value =
        serde_json::from_str(&fs::read_to_string(model.join("model.json")).expect("model.json"))
            .expect("json");
    let spec = &meta["spec"];
    let counts: Vec<(String, u64)> = spec["identities"]
        .as_array()
        .expect("identities")
        .iter()
        .zip(spec["measured"].as_array().expect("measured counts"))
        .map(|(id, n)| (id.as_str().expect("id").to_string(), n.as_u64().expect("n")))
        .collect();
    assert_eq!(counts.len(), ids.len());
    for (id, n) in &counts {
        assert_eq!(*n, u64::from(settings_of(&dataset, id)), "{id}");
    }
    let splits: BTreeSet<&str> = meta["metrics"]
        .as_array()
        .expect("metrics")
        .iter()
        .filter_map(|r| r["split"].as_str())
        .collect();
    assert!(splits.contains("probed_workloads"), "{splits:?}");
    assert!(
        meta["folds"]["probed_workloads"].as_u64().expect("folds") >= 2,
        "{}",
        meta["folds"]
    );
    let probed = &meta["calibration"]["probed"];
    assert!(probed["rows"].as_u64().expect("rows") > 0, "{probed}");
    let report = fs::read_to_string(model.join("report.md")).expect("report.md");
    assert!(report.contains("probed_workloads"), "{report}");

    // The same answers in process, for the shifts.
    let loaded = LoadedModel::load(&model, EngineKind::Burn).expect("the model loads");
    let calibration = &loaded.meta.calibration;
    let (registry, _) = Registry::build(&loaded, Default::default());

    let server = Server::start_model(&model, &[]);
    let pair =
        |a: &str, b: &str| json!({"a": {"workload": a}, "b": {"workload": b}, "mode": "cpu"});
    let body = json!({
        "pairs": [pair(thin, others[0]), pair(others[0], others[1]), pair(others[1], thin)],
        "groups": [{"jobs": [{"workload": others[0]}, {"workload": thin}, {"workload": others[1]}],
                    "mode": "cpu"}],
    });
    let answer: Value = ureq::post(&server.url("/v1/predict"))
        .send_json(body.clone())
        .expect("200")
        .into_json()
        .expect("json");
    let p = &answer["predictions"];
    let n = |id: &str| u64::from(settings_of(&dataset, id));
    assert_eq!(n(thin), 2);
    assert!(n(others[0]) > u64::from(PROBED_MAX));
    assert_eq!(p[0]["calibration"], "probed", "{answer}");
    assert_eq!(p[0]["measured_a"], n(thin));
    assert_eq!(p[0]["measured_b"], n(others[0]));
    assert_eq!(p[1]["calibration"], "known", "{answer}");
    assert_eq!(p[1]["measured_a"], n(others[0]));
    assert_eq!(p[2]["calibration"], "probed");
    assert_eq!(p[2]["measured_b"], n(thin));
    let g = &answer["groups"][0];
    assert_eq!(g["calibration"], "probed", "{answer}");
    assert_eq!(g["jobs"][1]["measured"], n(thin));
    assert_eq!(g["jobs"][0]["measured"], n(others[0]));

    // The p90s carry the probed shift (never narrower than the known one); the server's
    // answers are the in-process ones to the bit.
    let request: PredictRequest = serde_json::from_value(body).expect("request");
    let expected = predict::predict(&loaded, &registry, &request, None).expect("in process");
    let (class, shift) = calibration.resolve(Class::Probed, Some("cpu"));
    assert_eq!(class, Class::Probed);
    let (_, known) = calibration.resolve(Class::Known, Some("cpu"));
    assert!(shift >= known, "{shift} < {known}");
    assert!(!calibration.probed.is_empty());
    for (k, e) in expected.iter().enumerate() {
        let got = &p[k];
        let f = |key: &str| got[key].as_f64().expect(key);
        #[allow(clippy::cast_possible_truncation)]
        let bits = |v: f64| (v as f32).to_bits();
        assert_eq!(bits(f("slowdown_a_p90")), e.slowdown_a_p90.to_bits(), "{k}");
        assert_eq!(bits(f("slowdown_b_p90")), e.slowdown_b_p90.to_bits(), "{k}");
        assert_eq!(got["measured_a"].as_u64(), e.measured_a.map(u64::from));
    }
    let inputs = predict::encode(&loaded, &registry, &request, None).expect("encode");
    let kinds = predict::kinds(&loaded.meta.spec, calibration, &inputs);
    assert_eq!(kinds[0].class, Class::Probed);
    assert!((kinds[0].shift - shift).abs() < 1e-12);
    assert_eq!(kinds[0].measured, [Some(2), Some(n(others[0]) as u32)]);
}

/// `d` as if measured on `gpu`: the same runs under another device's name.
fn on_device(d: &Dataset, gpu: &str) -> Dataset {
    let mut d = d.clone();
    d.meta.provenance.gpu = gpu.to_string();
    d.meta.name = format!("{}-{gpu}", d.meta.name);
    for p in &mut d.pairs {
        p.gpu = gpu.to_string();
    }
    d
}

#[test]
fn a_workload_is_counted_and_classed_on_the_device_asked() {
    // `conv-train` fully measured on `cpu`, probed twice on `cpu-b`: what probing a job on a
    // second device of a model that knows it on the first gives.
    let tmp = tempfile::tempdir().expect("tmp");
    let full_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../datasets/cpu-dev2c");
    let full = Dataset::read(&full_dir).expect("the committed dataset");
    let thin = "conv-train";
    let probed_dir = tmp.path().join("thin-b");
    let probed = on_device(&thinned(&tmp.path().join("thin"), thin, 2), "cpu-b");
    probed
        .write(&probed_dir)
        .expect("write the second device's dataset");
    let model = tmp.path().join("model");
    train_quick(
        &full_dir,
        &model,
        &[
            "--data",
            probed_dir.to_str().expect("utf-8"),
            "--name",
            "two",
        ],
    );
    let others: Vec<&str> = full
        .workloads
        .iter()
        .map(|w| w.workload.as_str())
        .filter(|w| *w != thin)
        .collect();
    let other = others[0];
    let (n_full, n_probed) = (settings_of(&full, thin), settings_of(&probed, thin));
    assert_eq!(n_probed, 2);
    assert!(n_full > PROBED_MAX, "{n_full}");

    // model.json: the counts on each device, and their sum.
    let meta: Value =
        serde_json::from_str(&fs::read_to_string(model.join("model.json")).expect("model.json"))
            .expect("json");
    let spec = &meta["spec"];
    let at = spec["identities"]
        .as_array()
        .expect("identities")
        .iter()
        .position(|id| id == thin)
        .expect("an identity slot");
    let by_device = &spec["measured_by_device"];
    assert_eq!(by_device["cpu"][at], u64::from(n_full), "{by_device}");
    assert_eq!(by_device["cpu-b"][at], u64::from(n_probed), "{by_device}");
    assert_eq!(spec["measured"][at], u64::from(n_full + n_probed));

    // The server: known with its full count on `cpu`, probed with its two probes on `cpu-b`,
    // for a pair and for a group.
    let server = Server::start_model(&model, &[]);
    let pair = |gpu: &str| json!({"a": {"workload": thin}, "b": {"workload": other}, "mode": "cpu", "gpu": gpu});
    let answer: Value = ureq::post(&server.url("/v1/predict"))
        .send_json(json!({
            "pairs": [pair("cpu"), pair("cpu-b")],
            "groups": [{"jobs": [{"workload": other}, {"workload": thin},
                                 {"workload": others[1]}],
                        "mode": "cpu", "gpu": "cpu-b"}],
        }))
        .expect("200")
        .into_json()
        .expect("json");
    let p = &answer["predictions"];
    assert_eq!(p[0]["calibration"], "known", "{answer}");
    assert_eq!(p[0]["measured_a"], u64::from(n_full));
    assert_eq!(p[1]["calibration"], "probed", "{answer}");
    assert_eq!(p[1]["measured_a"], u64::from(n_probed));
    let g = &answer["groups"][0];
    assert_eq!(g["calibration"], "probed", "{answer}");
    assert_eq!(g["jobs"][1]["measured"], u64::from(n_probed));
}
