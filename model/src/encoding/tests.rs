//! The feature spec's tests: fitting, encoding, novelty and the group rows.

use super::*;
use duet_core::api::Calibration as Class;

/// A spec with one numeric feature, the family `model` (LM, ResNet-50), two training
/// workloads and one device (v100); also the prior's tests'.
pub(crate) fn spec() -> FeatureSpec {
    FeatureSpec {
        numeric: vec![NumericFeature {
            name: SOLO_THROUGHPUT.to_string(),
            log: true,
            mean: 0.0,
            std: 1.0,
            lo: Some(-2.0),
            hi: Some(2.0),
        }],
        categorical: vec![CategoricalFeature {
            name: "model".to_string(),
            vocabulary: vec!["LM".to_string(), "ResNet-50".to_string()],
        }],
        identities: vec!["lm-8".to_string(), "resnet-16".to_string()],
        gpus: vec!["v100".to_string()],
        modes: vec![Mode::Space],
        dropped: Vec::new(),
        family: None,
        measured: Vec::new(),
        measured_by_device: BTreeMap::new(),
        groups: false,
    }
    .with_family(Some("model"))
}

pub(crate) fn job(id: Option<&str>, family: Option<&str>, solo: f64) -> JobFeatures {
    let mut j = JobFeatures::new();
    j.insert(
        SOLO_THROUGHPUT.to_string(),
        FeatureValue::Number(Some(solo)),
    );
    if let Some(f) = family {
        j.insert("model".to_string(), FeatureValue::Category(Some(f.into())));
    }
    if let Some(id) = id {
        j.insert(
            IDENTITY.to_string(),
            FeatureValue::Category(Some(id.into())),
        );
    }
    j
}

fn novelty(spec: &FeatureSpec, j: &JobFeatures) -> Novelty {
    let mut out = Vec::new();
    spec.encode_job(j, &mut out);
    assert_eq!(out.len(), spec.job_width());
    spec.novelty(&out, None)
}

#[test]
fn a_training_workload_measured_in_few_settings_is_probed() {
    let e = std::f64::consts::E;
    let plain = spec();
    let lm = job(Some("lm-8"), Some("LM"), e);
    let mut out = Vec::new();
    plain.encode_job(&lm, &mut out);
    // No counts recorded (an older model.json): known, and no count to tell.
    assert_eq!(plain.novelty(&out, None), Novelty::Known);
    assert_eq!(plain.measured_of(&out, None), None);
    let counts = BTreeMap::from([("lm-8".to_string(), PROBED_MAX)]);
    let s = spec().with_measured(&counts);
    assert_eq!(s.measured, vec![PROBED_MAX, 0]);
    assert_eq!(s.novelty(&out, None), Novelty::Probed);
    assert_eq!(s.measured_of(&out, None), Some(PROBED_MAX));
    let s = spec().with_measured(&BTreeMap::from([("lm-8".to_string(), PROBED_MAX + 1)]));
    assert_eq!(s.novelty(&out, None), Novelty::Known);
    // A new job was measured in none; a pair takes its less known job's class.
    let mut new = Vec::new();
    s.encode_job(&job(None, Some("LM"), e), &mut new);
    assert_eq!(s.measured_of(&new, None), Some(0));
    let s = spec().with_measured(&counts);
    let mut row = Vec::new();
    let resnet = job(Some("resnet-16"), Some("ResNet-50"), e);
    s.encode_pair(&lm, &resnet, "v100", Mode::Space, None, None, &mut row);
    assert_eq!(s.calibration_kind(&row), Class::Probed);
    row.clear();
    s.encode_pair(
        &lm,
        &job(None, Some("LM"), e),
        "v100",
        Mode::Space,
        None,
        None,
        &mut row,
    );
    assert_eq!(s.calibration_kind(&row), Class::New);
}

#[test]
fn a_job_is_counted_and_classed_on_the_device_asked() {
    let e = std::f64::consts::E;
    let lm = job(Some("lm-8"), Some("LM"), e);
    let resnet = job(Some("resnet-16"), Some("ResNet-50"), e);
    // lm-8 fully measured on k80, probed twice on v100; resnet-16 on k80 alone.
    let counts = BTreeMap::from([
        (
            "k80".to_string(),
            BTreeMap::from([("lm-8".to_string(), 9), ("resnet-16".to_string(), 9)]),
        ),
        (
            "v100".to_string(),
            BTreeMap::from([("lm-8".to_string(), 2)]),
        ),
    ]);
    let s = FeatureSpec {
        gpus: vec!["k80".to_string(), "v100".to_string()],
        ..spec()
    }
    .with_measured_by_device(&counts);
    assert_eq!(s.measured, vec![11, 9]);
    assert_eq!(
        s.measured_by_device,
        BTreeMap::from([
            ("k80".to_string(), vec![9, 9]),
            ("v100".to_string(), vec![2, 0]),
        ])
    );
    let mut out = Vec::new();
    s.encode_job(&lm, &mut out);
    assert_eq!(s.novelty(&out, Some("k80")), Novelty::Known);
    assert_eq!(s.measured_of(&out, Some("k80")), Some(9));
    assert_eq!(s.novelty(&out, Some("v100")), Novelty::Probed);
    assert_eq!(s.measured_of(&out, Some("v100")), Some(2));
    // A device training never had: measured in none there.
    assert_eq!(s.novelty(&out, Some("a100")), Novelty::Probed);
    assert_eq!(s.measured_of(&out, None), Some(0));
    let mut row = Vec::new();
    s.encode_pair(&lm, &resnet, "k80", Mode::Space, None, None, &mut row);
    assert_eq!(s.pair_view(&row), (Class::Known, [Some(9), Some(9)]));
    row.clear();
    s.encode_pair(&resnet, &lm, "v100", Mode::Space, None, None, &mut row);
    assert_eq!(s.pair_view(&row), (Class::Probed, [Some(0), Some(2)]));
    // Read back from model.json, and a file written before the per-device counts (all
    // devices together).
    let back: FeatureSpec =
        serde_json::from_str(&serde_json::to_string(&s).expect("json")).expect("spec");
    assert_eq!(back, s);
    let older = FeatureSpec {
        measured_by_device: BTreeMap::new(),
        ..s
    };
    let text = serde_json::to_string(&older).expect("json");
    assert!(!text.contains("measured_by_device"), "{text}");
    assert_eq!(older.novelty(&out, Some("v100")), Novelty::Known);
    assert_eq!(older.measured_of(&out, Some("v100")), Some(11));
}

#[test]
fn a_job_is_known_new_of_a_new_family_or_out_of_range() {
    let s = spec();
    assert_eq!(s.family.as_deref(), Some("model"));
    let e = std::f64::consts::E;
    assert_eq!(
        novelty(&s, &job(Some("lm-8"), Some("LM"), e)),
        Novelty::Known
    );
    assert_eq!(novelty(&s, &job(None, Some("LM"), e)), Novelty::New);
    assert_eq!(
        novelty(&s, &job(None, Some("Unseen-Net"), e)),
        Novelty::NewFamily
    );
    // No family declared: nothing says the family is known.
    assert_eq!(novelty(&s, &job(None, None, e)), Novelty::NewFamily);
    // ln(solo) = 2.9: within the margin past training's largest (2); 3.1: past it.
    assert_eq!(
        novelty(&s, &job(None, Some("LM"), 2.9_f64.exp())),
        Novelty::New
    );
    assert_eq!(
        novelty(&s, &job(None, Some("LM"), 3.1_f64.exp())),
        Novelty::OutOfRange
    );
    assert_eq!(
        novelty(&s, &job(Some("lm-8"), Some("LM"), (-3.1_f64).exp())),
        Novelty::OutOfRange
    );
    // A pair takes the class of its less known job.
    let mut row = Vec::new();
    s.encode_pair(
        &job(Some("lm-8"), Some("LM"), e),
        &job(None, Some("Unseen-Net"), e),
        "v100",
        Mode::Space,
        None,
        None,
        &mut row,
    );
    assert_eq!(s.calibration_kind(&row), Class::NewFamily);
    // Without a family feature (older files, `--family none`) a new job is `new`.
    let plain = FeatureSpec {
        family: None,
        ..spec()
    };
    assert_eq!(
        novelty(&plain, &job(None, Some("Unseen-Net"), e)),
        Novelty::New
    );
    // A family feature fitting dropped names none.
    assert_eq!(spec().with_family(Some("framework")).family, None);
}

#[test]
fn a_group_row_pools_the_co_runners_and_is_a_pairs_row_for_one() {
    let pairs = spec();
    let groups = FeatureSpec {
        groups: true,
        ..spec()
    };
    assert_eq!(groups.pair_width(), pairs.pair_width() + 1);
    let encode = |j: &JobFeatures| {
        let mut out = Vec::new();
        groups.encode_job(j, &mut out);
        out
    };
    let (a, b, c) = (
        job(Some("lm-8"), Some("LM"), 1.0),
        job(Some("resnet-16"), Some("ResNet-50"), 3.0),
        job(None, Some("LM"), 2.0),
    );
    let (ea, eb, ec) = (encode(&a), encode(&b), encode(&c));
    // One co-runner: the pair's row, its co-runners' column ln 1 = 0.
    let mut pair = Vec::new();
    groups.encode_pair(&a, &b, "v100", Mode::Space, None, None, &mut pair);
    let mut row = Vec::new();
    groups.encode_group_row(&ea, &[&eb], "v100", Mode::Space, None, None, &mut row);
    assert_eq!(row, pair);
    assert_eq!(*row.last().expect("a column"), 0.0);
    // A model of pairs alone has no such column.
    let mut plain = Vec::new();
    pairs.encode_pair(&a, &b, "v100", Mode::Space, None, None, &mut plain);
    assert_eq!(plain[..], pair[..pair.len() - 1]);
    // Two co-runners: their mean in the second job's place, in either order, and ln 2.
    let mut two = Vec::new();
    groups.encode_group_row(&ea, &[&eb, &ec], "v100", Mode::Space, None, None, &mut two);
    let mut turned = Vec::new();
    groups.encode_group_row(
        &ea,
        &[&ec, &eb],
        "v100",
        Mode::Space,
        None,
        None,
        &mut turned,
    );
    assert_eq!(two, turned);
    let w = groups.job_width();
    assert_eq!(two[..w], ea[..]);
    for (k, x) in two[w..2 * w].iter().enumerate() {
        assert!((x - (eb[k] + ec[k]) / 2.0).abs() < 1e-6, "slot {k}");
    }
    assert!((two[two.len() - 1] - 2f32.ln()).abs() < 1e-6);
    assert_eq!(two.len(), groups.pair_width());
}

#[test]
fn a_groups_rows_are_its_jobs_rows_with_or_without_shares() {
    let groups = FeatureSpec {
        groups: true,
        ..spec()
    };
    let encode = |j: &JobFeatures| {
        let mut out = Vec::new();
        groups.encode_job(j, &mut out);
        out
    };
    let jobs = [
        encode(&job(Some("lm-8"), Some("LM"), 1.0)),
        encode(&job(Some("resnet-16"), Some("ResNet-50"), 3.0)),
        encode(&job(None, Some("LM"), 2.0)),
        encode(&job(Some("lm-8"), Some("LM"), 5.0)),
    ];
    let jobs: Vec<&[f32]> = jobs.iter().map(Vec::as_slice).collect();
    // No shares (one context for every row), every job its own share, two alike.
    let shares: [&[f64]; 3] = [&[], &[10.0, 20.0, 30.0, 40.0], &[25.0, 25.0, 25.0, 25.0]];
    for given in shares {
        let share = |k: usize| given.get(k).copied();
        let mut rows = Vec::new();
        groups.encode_group(&jobs, share, "v100", Mode::Mps, &mut rows);
        let mut one_by_one = Vec::new();
        for k in 0..jobs.len() {
            let others: Vec<&[f32]> = (0..jobs.len())
                .filter(|&o| o != k)
                .map(|o| jobs[o])
                .collect();
            let others_share = (!given.is_empty()).then(|| {
                let total: f64 = (0..jobs.len()).filter(|&o| o != k).map(|o| given[o]).sum();
                total / 3.0
            });
            groups.encode_group_row(
                jobs[k],
                &others,
                "v100",
                Mode::Mps,
                share(k),
                others_share,
                &mut one_by_one,
            );
        }
        assert_eq!(rows, one_by_one, "shares {given:?}");
        assert_eq!(rows.len(), 4 * groups.pair_width());
    }
}
