//! A job sent by its features is encoded straight from the request's map: the same encoding
//! as the model's own job features give, and the same errors, naming the same fields.

use std::path::PathBuf;

use duet_core::api::{FeatureInput, Features};
use duet_model::{EngineKind, LoadedModel};

fn model() -> LoadedModel {
    let root = PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into()),
    )
    .join("../models/default");
    LoadedModel::load(&root, EngineKind::Burn).expect("the default model loads")
}

fn features(pairs: &[(&str, FeatureInput)]) -> Features {
    pairs
        .iter()
        .map(|(k, v)| ((*k).into(), v.clone()))
        .collect()
}

#[test]
fn a_request_map_encodes_as_the_model_job_features_do() {
    let model = model();
    let spec = &model.meta.spec;
    let n = FeatureInput::Number;
    let t = |s: &str| FeatureInput::Text(s.to_string());
    for f in [
        features(&[
            ("solo_throughput", n(11.2)),
            ("batch_size", n(64.0)),
            ("model", t("LM")),
        ]),
        features(&[
            ("solo_throughput", n(3.0)),
            ("batch_size", FeatureInput::Null),
            ("model", t("Unseen-Net")),
        ]),
        features(&[
            ("solo_throughput", n(0.5)),
            ("batch_size", n(1e-300)),
            ("model", FeatureInput::Null),
        ]),
        features(&[
            ("solo_throughput", n(1e9)),
            ("batch_size", n(f64::NAN)),
            ("model", t("ResNet-50")),
        ]),
    ] {
        let mut direct = Vec::new();
        spec.encode_from(&f, &mut direct);
        let mut copied = Vec::new();
        spec.encode_job(&model.job_features(&f, "x").expect("valid"), &mut copied);
        assert_eq!(direct.len(), spec.job_width());
        assert!(
            direct
                .iter()
                .zip(&copied)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "{f:?}: {direct:?} vs {copied:?}"
        );
    }
    // Bad features: the check and the copy refuse them alike, naming the same field.
    for (f, field) in [
        (
            features(&[("batch_size", n(64.0)), ("model", t("LM"))]),
            "x.solo_throughput",
        ),
        (
            features(&[
                ("solo_throughput", n(-2.0)),
                ("batch_size", n(64.0)),
                ("model", t("LM")),
            ]),
            "x.solo_throughput",
        ),
        (
            features(&[("solo_throughput", n(2.0)), ("model", t("LM"))]),
            "x.batch_size",
        ),
        (
            features(&[
                ("solo_throughput", n(2.0)),
                ("batch_size", t("64")),
                ("model", t("LM")),
            ]),
            "x.batch_size",
        ),
        (
            features(&[
                ("solo_throughput", n(2.0)),
                ("batch_size", n(64.0)),
                ("model", n(1.0)),
            ]),
            "x.model",
        ),
        (
            features(&[
                ("solo_throughput", n(2.0)),
                ("batch_size", n(64.0)),
                ("model", t("LM")),
                ("flops", n(1.0)),
            ]),
            "x.flops",
        ),
        // Past any measured rate, and a log-scaled feature at 0 (read as missing before).
        (
            features(&[
                ("solo_throughput", n(1.7e308)),
                ("batch_size", n(64.0)),
                ("model", t("LM")),
            ]),
            "x.solo_throughput",
        ),
        (
            features(&[
                ("solo_throughput", n(2.0)),
                ("batch_size", n(0.0)),
                ("model", t("LM")),
            ]),
            "x.batch_size",
        ),
        // Unknown names sorting before and after every known one (the check walks the sorted
        // names once), and one longer than a name stored in place.
        (
            features(&[
                ("aaa", n(1.0)),
                ("solo_throughput", n(2.0)),
                ("batch_size", n(64.0)),
                ("model", t("LM")),
            ]),
            "x.aaa",
        ),
        (
            features(&[
                ("solo_throughput", n(2.0)),
                ("batch_size", n(64.0)),
                ("model", t("LM")),
                ("zzz_a_feature_name_longer_than_24_bytes", n(1.0)),
            ]),
            "x.zzz_a_feature_name_longer_than_24_bytes",
        ),
    ] {
        let checked = model.check_features(&f, "x").expect_err("refused");
        let copied = model.job_features(&f, "x").expect_err("refused");
        assert_eq!(checked.field.as_deref(), Some(field), "{f:?}: {checked:?}");
        assert_eq!(checked.message, copied.message);
        let lazy = model
            .check_features_at(&f, &|| "x".to_string())
            .expect_err("refused");
        assert_eq!(lazy.message, checked.message);
        assert_eq!(lazy.field, checked.field);
    }
}
