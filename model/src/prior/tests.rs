use duet_core::dataset::Mode;

use super::*;
use crate::encoding::JobFeatures;

/// The encoding tests' spec with a second device (k80), one the prior below never measured.
fn spec() -> FeatureSpec {
    FeatureSpec {
        gpus: vec!["k80".to_string(), "v100".to_string()],
        ..crate::encoding::tests::spec()
    }
}

fn job(id: Option<&str>, family: Option<&str>) -> JobFeatures {
    crate::encoding::tests::job(id, family, 1.0)
}

fn row(a: &JobFeatures, b: &JobFeatures, gpu: &str) -> Vec<f32> {
    let mut out = Vec::new();
    spec().encode_pair(a, b, gpu, Mode::Space, None, None, &mut out);
    out
}

fn prior() -> FamilyPrior {
    let r = |a, b, ln_speed| EffectRow {
        gpu: "v100",
        a,
        b,
        ln_speed,
    };
    // Mean -0.5; next to resnet-16 jobs run at -0.9 (effect -0.4), next to lm-8 at -0.1.
    FamilyPrior::fit([
        r("lm-8", "resnet-16", -0.8),
        r("resnet-16", "resnet-16", -1.0),
        r("resnet-16", "lm-8", -0.2),
        r("lm-8", "lm-8", 0.0),
        r("lm-8", "gone", f64::NAN),
    ])
}

#[test]
fn effects_are_the_devices_means_by_partner_and_by_job() {
    let p = prior();
    let v100 = &p.devices["v100"];
    assert!((v100.mean + 0.5).abs() < 1e-12);
    assert!((v100.partner["resnet-16"] + 0.4).abs() < 1e-12);
    assert!((v100.partner["lm-8"] - 0.4).abs() < 1e-12);
    // lm-8 ran at -0.8 and 0.0 (mean -0.4), resnet-16 at -1.0 and -0.2 (-0.6).
    assert!((v100.own["lm-8"] - 0.1).abs() < 1e-12);
    assert!((v100.own["resnet-16"] + 0.1).abs() < 1e-12);
    // The non-finite row counts nowhere; until weighed the network answers alone.
    assert!(!v100.partner.contains_key("gone"));
    assert_eq!((v100.weight, v100.chosen_on), (1.0, 0));
}

#[test]
fn only_a_pair_with_a_new_family_on_a_known_device_has_a_prior() {
    let p = prior();
    let s = spec();
    let known = job(Some("lm-8"), Some("LM"));
    let new_workload = job(None, Some("LM"));
    let new_family = job(None, Some("Unseen-Net"));
    let resnet = job(Some("resnet-16"), Some("ResNet-50"));
    assert_eq!(p.for_row(&s, &row(&known, &resnet, "v100")), None);
    assert_eq!(p.for_row(&s, &row(&new_workload, &resnet, "v100")), None);
    // The new job next to resnet-16: the mean and resnet-16's effect as a partner.
    let (ln, weight) = p
        .for_row(&s, &row(&new_family, &resnet, "v100"))
        .expect("a prior");
    assert!((ln + 0.9).abs() < 1e-12, "{ln}");
    assert_eq!(weight, 1.0);
    // resnet-16 next to the new job: the mean and resnet-16's own effect.
    let (ln, _) = p
        .for_row(&s, &row(&resnet, &new_family, "v100"))
        .expect("a prior");
    assert!((ln + 0.6).abs() < 1e-12, "{ln}");
    // Two jobs of new families: the device's mean.
    let (ln, _) = p
        .for_row(&s, &row(&new_family, &job(None, None), "v100"))
        .expect("a prior");
    assert!((ln + 0.5).abs() < 1e-12, "{ln}");
    // A device the prior never measured: the network alone.
    assert_eq!(p.for_row(&s, &row(&new_family, &resnet, "k80")), None);
    assert_eq!(p.for_row(&s, &row(&new_family, &resnet, "a100")), None);
}

#[test]
fn the_weight_is_the_one_with_the_least_error_per_device() {
    let candidate = |gpu: &str, network: f64, prior: f64| Candidate {
        family: "LM".to_string(),
        gpu: gpu.to_string(),
        network,
        prior,
        ln_speed: 0.0,
    };
    let mut p = prior();
    p.devices
        .insert("k80".to_string(), DeviceEffects::default());
    // On v100 the prior is right and the network far off; on k80 (too few rows for a weight
    // of its own) the pooled choice.
    let mut rows: Vec<Candidate> = (0..MIN_WEIGHT_ROWS)
        .map(|_| candidate("v100", 1.0, 0.0))
        .collect();
    rows.push(candidate("k80", 0.0, 1.0));
    p.weigh(&rows);
    assert_eq!(p.devices["v100"].weight, 0.0);
    assert_eq!(p.devices["v100"].chosen_on, MIN_WEIGHT_ROWS);
    assert_eq!(p.devices["k80"].weight, 0.0);
    assert_eq!(p.devices["k80"].chosen_on, MIN_WEIGHT_ROWS + 1);
    // Where the network is right it keeps its whole weight; in between, a mix.
    assert_eq!(best_weight([candidate("v100", 0.0, 2.0)].iter()), (1.0, 1));
    let (w, _) = best_weight([candidate("v100", 0.5, -0.5), candidate("v100", -0.1, 0.3)].iter());
    assert!(w > 0.0 && w < 1.0, "{w}");
    // No rows: the network alone.
    assert_eq!(best_weight(std::iter::empty()), (1.0, 0));
    assert!((blend(0.25, 1.0, 0.0) - 0.25).abs() < 1e-12);
}

#[test]
fn the_p10_is_the_more_pessimistic_of_the_networks_and_the_weighted_speeds() {
    // The prior below the network: the weighted speed less the network's spread (0.2).
    let (speed, p10) = weigh_outputs(0.25, 1.0, 0.8, 0.0);
    assert!((speed - 0.25).abs() < 1e-12);
    assert!((p10 - 0.05).abs() < 1e-12);
    // The prior above it: the network's own p10, lower than the weighted speed's.
    let (speed, p10) = weigh_outputs(0.25, 1.0, 0.8, 2.0);
    assert!((speed - 1.75).abs() < 1e-12);
    assert_eq!(p10, 0.8);
    // The network alone: its own outputs.
    assert_eq!(weigh_outputs(1.0, 1.0, 0.8, -3.0), (1.0, 0.8));
}

#[test]
fn each_family_weighs_the_same_in_the_choice() {
    let row = |family: &str, network: f64, prior: f64| Candidate {
        family: family.to_string(),
        gpu: "v100".to_string(),
        network,
        prior,
        ln_speed: 0.0,
    };
    // Fifty rows of a family the network gets right and the prior 35% off; one row of a family
    // the network gets 172% off and the prior right. By rows the network would win (0 against
    // 17.5 in all); each family weighing the same, the prior does (0.35 against 1.72).
    let mut rows: Vec<Candidate> = (0..50).map(|_| row("LM", 0.0, 0.3)).collect();
    rows.push(row("ResNet-50", 1.0, 0.0));
    assert_eq!(best_weight(rows.iter()), (0.0, 51));
    // Without the far-off family, the network.
    assert_eq!(best_weight(rows[..50].iter()), (1.0, 50));
}

/// A workload measured in a few settings met a few partners, so its plain mean is mostly
/// theirs: its own and partner effects are backfitted on its rows, the others' kept as means.
#[test]
fn a_sparse_workloads_effects_are_what_its_partners_do_not_explain() {
    let r = |a, b, ln_speed| EffectRow {
        gpu: "v100",
        a,
        b,
        ln_speed,
    };
    // lm-8 and resnet-16 on a full grid, twice; probe-1 once next to resnet-16 (which slows
    // everyone) and once as resnet-16's partner.
    let mut rows = Vec::new();
    for (a, b, ln) in [
        ("lm-8", "lm-8", -0.1),
        ("lm-8", "resnet-16", -0.9),
        ("resnet-16", "lm-8", -0.3),
        ("resnet-16", "resnet-16", -1.1),
    ] {
        rows.push(r(a, b, ln));
        rows.push(r(a, b, ln + 0.1));
    }
    rows.push(r("probe-1", "resnet-16", -1.2));
    rows.push(r("resnet-16", "probe-1", -0.5));
    let p = FamilyPrior::fit(rows.clone());
    let v100 = &p.devices["v100"];
    let plain = |a: Option<&str>, b: Option<&str>| -> f64 {
        let xs: Vec<f64> = rows
            .iter()
            .filter(|x| a.is_none_or(|a| x.a == a) && b.is_none_or(|b| x.b == b))
            .map(|x| x.ln_speed)
            .collect();
        #[allow(clippy::cast_precision_loss)]
        let n = xs.len() as f64;
        xs.iter().sum::<f64>() / n
    };
    let m = plain(None, None);
    // Well measured: plain means.
    assert!((v100.own["lm-8"] - (plain(Some("lm-8"), None) - m)).abs() < 1e-12);
    assert!((v100.partner["resnet-16"] - (plain(None, Some("resnet-16")) - m)).abs() < 1e-12);
    // Sparse: its one row less the mean and its partner's effect, both ways.
    let own = -1.2 - m - v100.partner["resnet-16"];
    assert!((v100.own["probe-1"] - own).abs() < 1e-12, "{v100:?}");
    let partner = -0.5 - m - v100.own["resnet-16"];
    assert!(
        (v100.partner["probe-1"] - partner).abs() < 1e-12,
        "{v100:?}"
    );
    // Far from its plain mean, which is resnet-16's slowdown as much as its own.
    assert!((v100.own["probe-1"] - (-1.2 - m)).abs() > 0.2);
}

/// A pair with a probed job (and no new one) has a prior too, with the probed weight; a pair
/// of well-measured jobs, or one where a job is new, has none of that kind.
#[test]
fn a_probed_pair_has_a_prior_with_its_own_weight() {
    let mut p = prior();
    let v100 = p.devices.get_mut("v100").expect("v100");
    (v100.weight, v100.probed_weight) = (0.3, 0.6);
    let counts = BTreeMap::from([("lm-8".to_string(), 1), ("resnet-16".to_string(), 40)]);
    let s = spec().with_measured(&counts);
    let row = |a: &JobFeatures, b: &JobFeatures| {
        let mut out = Vec::new();
        s.encode_pair(a, b, "v100", Mode::Space, None, None, &mut out);
        out
    };
    let probed = job(Some("lm-8"), Some("LM"));
    let resnet = job(Some("resnet-16"), Some("ResNet-50"));
    let (ln, basis, _) = p.lookup(&s, &row(&probed, &resnet)).expect("a prior");
    assert_eq!(basis, Basis::Probed);
    // The mean, resnet-16's partner effect and lm-8's own.
    assert!((ln - (-0.5 - 0.4 + 0.1)).abs() < 1e-12, "{ln}");
    assert_eq!(
        p.for_row(&s, &row(&probed, &resnet)).map(|x| x.1),
        Some(0.6)
    );
    assert_eq!(
        p.for_row(&s, &row(&resnet, &probed)).map(|x| x.1),
        Some(0.6)
    );
    // Two well-measured jobs: none.
    assert_eq!(p.for_row(&s, &row(&resnet, &resnet)), None);
    // A new workload of a known family beside the probed one: the network alone (its class is
    // `new`); a new family: the new-family weight.
    assert_eq!(p.for_row(&s, &row(&job(None, Some("LM")), &probed)), None);
    let new_family = job(None, Some("Unseen-Net"));
    assert_eq!(
        p.for_row(&s, &row(&new_family, &probed)).map(|x| x.1),
        Some(0.3)
    );
    // Weighing the probed rows sets the probed weight only.
    let candidate = |network: f64| Candidate {
        family: "probed lm-8".to_string(),
        gpu: "v100".to_string(),
        network,
        prior: 0.0,
        ln_speed: 0.0,
    };
    let rows: Vec<Candidate> = (0..MIN_WEIGHT_ROWS).map(|_| candidate(1.0)).collect();
    p.weigh_probed(&rows);
    let v100 = &p.devices["v100"];
    assert_eq!(
        (v100.probed_weight, v100.probed_chosen_on),
        (0.0, MIN_WEIGHT_ROWS)
    );
    assert_eq!(v100.weight, 0.3);
}

#[test]
fn an_older_model_json_has_the_network_alone_for_probed_jobs() {
    let old = r#"{"weight":0.4,"chosen_on":31,"mean":-0.5,"partner":{},"own":{}}"#;
    let d: DeviceEffects = serde_json::from_str(old).expect("an older device's effects");
    assert_eq!((d.probed_weight, d.probed_chosen_on), (1.0, 0));
    assert_eq!(d.weight_of(Basis::NewFamily), 0.4);
    // Nor a new job's effects from its profile: the plain prior, and written back without.
    assert_eq!(d.profile, None);
    assert!(!serde_json::to_string(&d).expect("json").contains("profile"));
}

#[test]
fn a_job_training_never_measured_takes_its_profiles_effects() {
    let mut p = prior();
    let s = spec();
    // The spec's profile: ln solo throughput and its missing flag (the family's slots are not).
    assert_eq!(s.profile_columns(), vec![0, 1]);
    let linear = |intercept: f64, slope: f64| profile::Linear {
        intercept,
        weights: vec![slope, 0.0],
    };
    p.devices.get_mut("v100").expect("v100").profile = Some(ProfileEffects {
        columns: s.profile_columns(),
        penalty: 0.3,
        workloads: 2,
        families: 2,
        own: linear(0.05, 0.1),
        partner: linear(-0.02, -0.2),
    });
    let resnet = job(Some("resnet-16"), Some("ResNet-50"));
    // Solo throughput e^2: ln 2 standardised by the spec's mean 0 and sd 1.
    let new_family = crate::encoding::tests::job(None, Some("Unseen-Net"), 2f64.exp());
    // The new job next to resnet-16: the mean, resnet-16's partner effect, its profile's own.
    let (ln, _) = p
        .for_row(&s, &row(&new_family, &resnet, "v100"))
        .expect("a prior");
    assert!((ln - (-0.5 - 0.4 + 0.05 + 0.2)).abs() < 1e-6, "{ln}");
    // resnet-16 next to it: the mean, resnet-16's own effect, the profile's partner effect.
    let (ln, _) = p
        .for_row(&s, &row(&resnet, &new_family, "v100"))
        .expect("a prior");
    assert!((ln - (-0.5 - 0.1 - 0.02 - 0.4)).abs() < 1e-6, "{ln}");
    // Measured jobs keep their measured effects: a probed pair's prior is unchanged.
    let known = job(Some("lm-8"), Some("LM"));
    assert_eq!(p.for_row(&s, &row(&known, &resnet, "v100")), None);
    // It reads back from model.json as written.
    let text = serde_json::to_string(&p).expect("json");
    let back: FamilyPrior = serde_json::from_str(&text).expect("read back");
    assert_eq!(back, p);
}
