//! The default model chooses its p90 calibration per pair: `known` for two training workloads
//! (both identity slots set), `new` when a job is unknown to it, `new_family` when a job's model
//! family is, `conservative` when a job lies far outside training's range, each shifted by its
//! device's conformal offset (the widest shift for `conservative`), and says which in the
//! answer; a new family's speed and p10 weighed with the model's effects prior first.

use std::path::PathBuf;

use duet_core::api::{Calibration, PredictRequest};
use duet_model::network::{OUT_LOG_SPEED, OUT_LOG_SPEED_P10, OUTPUTS};
use duet_model::{EngineKind, LoadedModel, Registry, predict};

fn root() -> PathBuf {
    PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into()),
    )
    .join("..")
}

#[test]
fn each_pair_uses_the_calibration_of_its_kind_and_device() {
    let model = LoadedModel::load(&root().join("models/default"), EngineKind::Burn)
        .expect("the default model loads");
    let meta = &model.meta;
    // The shipped model carries both calibrations, per device, fitted on held-out rows; a
    // device it never saw (a100) gets the pooled shift.
    for gpu in ["k80", "p100", "v100"] {
        let d = meta
            .calibration
            .by_device
            .get(gpu)
            .expect("a calibration per device");
        assert!(d.known.rows >= 9 && d.new.rows >= 9, "{gpu}: {d:?}");
        assert!(d.new_family.rows >= 9, "{gpu}: {d:?}");
    }
    assert_eq!(meta.spec.family.as_deref(), Some("model"));
    assert!(
        meta.calibration.families_calibrated(),
        "{:?}",
        meta.calibration
    );
    let ids = &meta.spec.identities;
    assert!(ids.len() >= 2);
    let (registry, _) = Registry::build(&model, Default::default());
    let request: PredictRequest = serde_json::from_value(serde_json::json!({
        "gpu": "v100",
        "pairs": [
            {"a": {"workload": ids[0]}, "b": {"workload": ids[1]}, "mode": "space"},
            {"a": {"workload": ids[0]},
             "b": {"features": {"solo_throughput": 9.7, "batch_size": 32, "model": "Unseen-Net"}},
             "mode": "space"},
            {"a": {"features": {"solo_throughput": 20.0, "batch_size": 64, "model": "A3C"}},
             "b": {"features": {"solo_throughput": 9.7, "batch_size": 32, "model": "Unseen-Net"}},
             "mode": "space", "gpu": "a100"},
            {"a": {"workload": ids[0]},
             "b": {"features": {"solo_throughput": 9.7, "batch_size": 32, "model": "LM"}},
             "mode": "space"},
            {"a": {"workload": ids[0]},
             "b": {"features": {"solo_throughput": 1.0e9, "batch_size": 32, "model": "LM"}},
             "mode": "space"},
        ]
    }))
    .expect("a valid request");
    let answer = predict::predict(&model, &registry, &request, None).expect("predictions");
    let kinds: Vec<Calibration> = answer.iter().map(|p| p.calibration).collect();
    assert_eq!(
        kinds,
        [
            Calibration::Known,
            Calibration::NewFamily,
            Calibration::NewFamily,
            Calibration::New,
            Calibration::Conservative
        ]
    );
    // Trust orders the shifts: a new family's p90 is at least as wide as a new workload's, and
    // the conservative one the widest of all.
    let c = &meta.calibration;
    assert!(
        c.shift(Calibration::NewFamily, Some("v100")) >= c.shift(Calibration::New, Some("v100"))
    );
    assert!(c.widest() >= c.shift(Calibration::NewFamily, Some("v100")));
    let raw = model
        .engine
        .run(predict::encode(&model, &registry, &request, None).expect("encode"))
        .expect("run");
    // A job of a new family next to a training workload on v100 is weighed with the effects
    // prior (the known job's own effect: its partner is the new one); on a device the prior
    // never measured (a100), and for every other pair, the network answers alone.
    let v100 = &c.family_prior.as_ref().expect("a family prior").devices["v100"];
    let prior = |k: usize| (k == 1).then(|| v100.mean + v100.own[&ids[0]]);
    for (k, (p, gpu)) in answer
        .iter()
        .zip([Some("v100"), Some("v100"), None, Some("v100"), Some("v100")])
        .enumerate()
    {
        let shift = meta.calibration.shift(p.calibration, gpu);
        let speed = f64::from(raw[2 * k * OUTPUTS + OUT_LOG_SPEED]);
        let p10 = f64::from(raw[2 * k * OUTPUTS + OUT_LOG_SPEED_P10]);
        let (speed, p10) = match prior(k) {
            Some(prior) => {
                let weighted = v100.weight * speed + (1.0 - v100.weight) * prior;
                (weighted, p10.min(weighted + p10 - speed))
            }
            None => (speed, p10),
        };
        let expected = (shift - p10).exp();
        assert!(
            (f64::from(p.slowdown_a_p90) - expected).abs() <= 1e-5 * expected,
            "pair {k}: {} against {expected}",
            p.slowdown_a_p90
        );
        let expected = speed.exp();
        assert!(
            (f64::from(p.speed_a) - expected).abs() <= 1e-5 * expected,
            "pair {k}: {} against {expected}",
            p.speed_a
        );
    }
}
