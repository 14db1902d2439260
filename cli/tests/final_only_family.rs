//! A `--final-only` fit of a dataset with model families, end to end: its own calibration
//! holds whole families out (not only workloads), so model.json carries a `new_family` shift
//! and the effects prior's weight fitted on them (and a `probed` shift from families held out
//! but for their probes), and `duet serve` answers a job of a family the data never had with that
//! class and its shift, not with the workload class's, and with its effects from its profile
//! where the device's families chose them.

mod support;

use std::fs;
use std::path::Path;

use duet_core::api::{Calibration as Class, PredictRequest};
use duet_model::calibration::MIN_FAMILIES;
use duet_model::{EngineKind, LoadedModel, Registry, predict};
use serde_json::{Value, json};
use support::{Server, train_quick};

fn train(data: &Path, out: &Path, extra: &[&str]) {
    train_quick(data, out, &[&["--final-only"], extra].concat());
}

fn meta(model: &Path) -> Value {
    serde_json::from_str(&fs::read_to_string(model.join("model.json")).expect("model.json"))
        .expect("json")
}

#[test]
fn a_final_only_fit_calibrates_and_serves_a_new_family() {
    let tmp = tempfile::tempdir().expect("tmp");
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("../datasets/gavel-k80");
    let model = tmp.path().join("model");
    train(&data, &model, &[]);

    // Seven families (`model`), every one held out whole in one fold: enough for a p90 of
    // their own, with no note.
    let m = meta(&model);
    assert_eq!(m["spec"]["family"], "model", "{}", m["spec"]);
    let calibration = &m["calibration"];
    assert_eq!(
        calibration["method"],
        "cross-conformal over the final fit's folds"
    );
    let family = &calibration["new_family"];
    assert_eq!(family["groups"], 7, "{calibration}");
    assert!(family["rows"].as_u64().expect("rows") > 0, "{family}");
    assert!(family.get("fallback").is_none(), "{family}");
    // The effects prior's weight, chosen on the family folds' rows.
    let prior = &calibration["family_prior"]["devices"]["k80"];
    let weight = prior["weight"].as_f64().expect("a weight");
    assert!((0.0..=1.0).contains(&weight), "{prior}");
    assert!(prior["chosen_on"].as_u64().expect("rows") > 0, "{prior}");
    // And the probed weight, chosen on the probed folds' rows.
    let probed_weight = prior["probed_weight"].as_f64().expect("a probed weight");
    assert!((0.0..=1.0).contains(&probed_weight), "{prior}");
    assert!(
        prior["probed_chosen_on"].as_u64().expect("rows") > 0,
        "{prior}"
    );
    let workloads = &calibration["new"];
    assert!(
        workloads["groups"].as_u64().expect("groups") > 7,
        "{workloads}"
    );
    // Every workload is well measured here, so `probed` rests on the probed folds alone: each
    // family held out again but for 1 to 3 probes, every workload of it a group of its own.
    let probed = &calibration["probed"];
    assert!(
        probed["groups"].as_u64().expect("groups") > 7,
        "{calibration}"
    );
    assert!(probed["rows"].as_u64().expect("rows") > 0, "{probed}");
    // Without a family feature the same fit has no family folds and no such class.
    let plain = tmp.path().join("plain");
    train(&data, &plain, &["--family", "none"]);
    let plain = meta(&plain);
    assert!(plain["calibration"].get("new_family").is_none());
    // Its prior has no new-family weight (the network alone), only a probed one.
    let prior = &plain["calibration"]["family_prior"]["devices"]["k80"];
    assert_eq!(
        (prior["weight"].as_f64(), prior["chosen_on"].as_u64()),
        (Some(1.0), Some(0))
    );
    assert!(
        prior["probed_chosen_on"].as_u64().expect("rows") > 0,
        "{prior}"
    );
    // Its probed folds hold single workloads out but for their probes.
    assert!(
        plain["calibration"]["probed"]["groups"]
            .as_u64()
            .expect("groups")
            > 7
    );

    // Served: a job of a family the data never had is answered `new_family` with that shift; a
    // new size of a known family stays `new`; the answers are the in-process ones to the bit.
    let loaded = LoadedModel::load(&model, EngineKind::Burn).expect("the model loads");
    let shifts = &loaded.meta.calibration;
    assert!(shifts.families_calibrated());
    assert!(shifts.new_family.groups >= MIN_FAMILIES);
    let (registry, _) = Registry::build(&loaded, Default::default());
    let server = Server::start_model(&model, &[]);
    let inline = |model: &str| json!({"features": {"solo_throughput": 3.1, "model": model, "batch_size": 64}});
    let pair = |b: Value| json!({"a": {"workload": "a3c"}, "b": b, "mode": "space"});
    let body = json!({"pairs": [pair(inline("Unseen-Net")), pair(inline("ResNet-50"))]});
    let answer: Value = ureq::post(&server.url("/v1/predict"))
        .send_json(body.clone())
        .expect("200")
        .into_json()
        .expect("json");
    let p = &answer["predictions"];
    assert_eq!(p[0]["calibration"], "new_family", "{answer}");
    assert_eq!(p[1]["calibration"], "new", "{answer}");
    let request: PredictRequest = serde_json::from_value(body).expect("request");
    let expected = predict::predict(&loaded, &registry, &request, None).expect("in process");
    for (k, e) in expected.iter().enumerate() {
        let f = |key: &str| p[k][key].as_f64().expect(key);
        #[allow(clippy::cast_possible_truncation)]
        let bits = |v: f64| (v as f32).to_bits();
        assert_eq!(bits(f("slowdown_b_p90")), e.slowdown_b_p90.to_bits(), "{k}");
    }
    // k80's families choose a new job's effects from its profile (`family_prior.devices.k80.
    // profile`), and the served new-family speeds are the ones it gives: the same model without
    // it answers the new family's pair otherwise, the known family's new size the same.
    let with_profile = &calibration["family_prior"]["devices"]["k80"]["profile"];
    assert!(with_profile["penalty"].as_f64().is_some(), "{calibration}");
    let plain_prior = tmp.path().join("plain-prior");
    fs::create_dir(&plain_prior).expect("dir");
    for entry in fs::read_dir(&model).expect("model dir") {
        let path = entry.expect("entry").path();
        fs::copy(&path, plain_prior.join(path.file_name().expect("name"))).expect("copy");
    }
    let mut without = m.clone();
    without["calibration"]["family_prior"]["devices"]["k80"]
        .as_object_mut()
        .expect("k80")
        .remove("profile");
    fs::write(plain_prior.join("model.json"), without.to_string()).expect("write");
    let plain_model = LoadedModel::load(&plain_prior, EngineKind::Burn).expect("loads");
    let (plain_registry, _) = Registry::build(&plain_model, Default::default());
    let plain_answer =
        predict::predict(&plain_model, &plain_registry, &request, None).expect("in process");
    for (k, e) in expected.iter().enumerate() {
        let served = [p[k]["speed_a"].as_f64(), p[k]["speed_b"].as_f64()];
        #[allow(clippy::cast_possible_truncation)]
        let bits = served.map(|v| (v.expect("speed") as f32).to_bits());
        assert_eq!(bits, [e.speed_a.to_bits(), e.speed_b.to_bits()], "{k}");
        let moved = (e.speed_a, e.speed_b) != (plain_answer[k].speed_a, plain_answer[k].speed_b);
        assert_eq!(
            moved,
            k == 0,
            "pair {k}: {e:?} against {:?}",
            plain_answer[k]
        );
    }
    let inputs = predict::encode(&loaded, &registry, &request, None).expect("encode");
    let kinds = predict::kinds(&loaded.meta.spec, shifts, &inputs);
    let (class, shift) = shifts.resolve(Class::NewFamily, Some("k80"));
    assert_eq!(class, Class::NewFamily);
    assert_eq!(kinds[0].class, Class::NewFamily);
    assert!((kinds[0].shift - shift).abs() < 1e-12);
    assert!((shift - family["shift"].as_f64().expect("shift")).abs() < 1e-9);
}
