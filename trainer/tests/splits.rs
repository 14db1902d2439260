//! The evaluation's and the calibration's split invariants on the committed datasets, checked
//! from the rows' workload ids (not from the indexes the splits themselves use): nothing a test
//! fold or a calibration set stands for reaches training.

use std::collections::BTreeSet;

use duet_core::api::Calibration;
use duet_model::encoding::PROBED_MAX;
use duet_trainer::corpus::Corpus;
use duet_trainer::eval::{FOLDS, Split, folds};
use duet_trainer::rows::Example;

mod support;
use support::dataset;

/// The three Gavel devices together, as the default model is trained.
fn gavel() -> Corpus {
    Corpus::new(
        ["gavel-k80", "gavel-p100", "gavel-v100"]
            .into_iter()
            .map(dataset)
            .collect(),
    )
}

/// The unordered pair of workload ids of a row, whatever the device, mode or shares.
fn unordered(e: &Example) -> (String, String) {
    if e.a <= e.b {
        (e.a.clone(), e.b.clone())
    } else {
        (e.b.clone(), e.a.clone())
    }
}

fn pairs_of(corpus: &Corpus, rows: &[usize]) -> BTreeSet<(String, String)> {
    rows.iter()
        .map(|&i| unordered(&corpus.examples[i]))
        .collect()
}

/// Each fold's train and test rows partition all rows; every row is tested once (unseen
/// workloads: once per distinct workload it touches, as each leaves in its own fold).
fn assert_partition(corpus: &Corpus, split: Split, seed: u64) {
    let folds = folds(split, corpus, seed);
    let mut tested = vec![0usize; corpus.examples.len()];
    for f in &folds {
        assert_eq!(f.train.len() + f.test.len(), corpus.examples.len());
        let train: BTreeSet<usize> = f.train.iter().copied().collect();
        assert!(
            f.test.iter().all(|i| !train.contains(i)),
            "{split:?}: row in train and test"
        );
        for &i in &f.test {
            tested[i] += 1;
        }
    }
    for (i, &n) in tested.iter().enumerate() {
        let e = &corpus.examples[i];
        if split == Split::ProbedWorkloads {
            // Once per fold of its two jobs, but not in a fold where it is a probe.
            assert!(n <= 2, "{split:?}: row {i} tested {n} times");
            continue;
        }
        let expected = if split == Split::UnseenWorkloads && e.a != e.b {
            2
        } else {
            1
        };
        assert_eq!(
            n, expected,
            "{split:?}: row {i} ({} next to {}) tested {n} times",
            e.a, e.b
        );
    }
}

#[test]
fn every_split_tests_each_row_once() {
    let corpus = gavel();
    for split in Split::ALL {
        assert_partition(&corpus, split, 7);
    }
}

#[test]
fn probed_workloads_keep_a_few_settings_each_and_test_the_rest() {
    for family in [None, Some("model")] {
        probed_folds_hold(family);
    }
}

/// `probed_workloads` on the Gavel corpus with `family` as its family feature: whole families
/// held out (each workload its own without one), every held workload probed.
fn probed_folds_hold(family: Option<&str>) {
    let mut corpus = gavel();
    corpus.family = family.map(str::to_string);
    let folds = folds(Split::ProbedWorkloads, &corpus, 7);
    assert_eq!(folds.len(), FOLDS);
    let model_of = |id: &str| -> String {
        corpus.datasets[0]
            .workload(id)
            .and_then(|w| w.features.get("model"))
            .and_then(|v| v.as_category())
            .expect("a model")
            .to_string()
    };
    for f in &folds {
        let families: BTreeSet<String> = f.probed.iter().map(|w| model_of(w)).collect();
        if family.is_some() {
            // Every workload of a held family is held: the family is new but for its probes.
            for (id, m) in corpus
                .examples
                .iter()
                .flat_map(|e| [&e.a, &e.b])
                .map(|id| (id, model_of(id)))
            {
                assert_eq!(families.contains(&m), f.probed.contains(id), "{id} ({m})");
            }
        }
    }
    let mut held_once = BTreeSet::new();
    let mut kept = Vec::new();
    for f in &folds {
        for w in &f.probed {
            assert!(held_once.insert(w.clone()), "{w} held out twice");
            let settings = |rows: &[usize]| -> BTreeSet<usize> {
                rows.iter()
                    .map(|&i| &corpus.examples[i])
                    .filter(|e| e.a == *w || e.b == *w)
                    .map(|e| e.setting)
                    .collect()
            };
            let (train, test) = (settings(&f.train), settings(&f.test));
            let k = train.len();
            assert!((1..=PROBED_MAX as usize).contains(&k), "{w}: {k} probes");
            assert!(!test.is_empty() && train.is_disjoint(&test));
            kept.push(k);
        }
        // The fold's model sees its held workloads as probed.
        let spec = corpus.fit_spec(&f.train);
        let batch = corpus.encode(&spec, &f.test);
        for (k, &i) in f.test.iter().enumerate() {
            let row = &batch.inputs[k * batch.width..(k + 1) * batch.width];
            let kind = spec.calibration_kind(row);
            let e = &corpus.examples[i];
            assert_eq!(kind, Calibration::Probed, "{} next to {}", e.a, e.b);
        }
    }
    // Every workload held out once; the kept counts are drawn, not one constant.
    let workloads: BTreeSet<&str> = corpus
        .examples
        .iter()
        .flat_map(|e| [e.a.as_str(), e.b.as_str()])
        .collect();
    assert_eq!(held_once.len(), workloads.len());
    assert!(kept.iter().min() < kept.iter().max(), "{kept:?}");
}

#[test]
fn unseen_pairs_never_train_on_the_pair_on_any_device() {
    let corpus = gavel();
    let devices: BTreeSet<&str> = corpus.examples.iter().map(|e| e.gpu.as_str()).collect();
    assert_eq!(devices.len(), 3, "the corpus spans three devices");
    for seed in [7, 8] {
        let folds = folds(Split::UnseenPairs, &corpus, seed);
        assert_eq!(folds.len(), FOLDS);
        for f in &folds {
            let test = pairs_of(&corpus, &f.test);
            let train = pairs_of(&corpus, &f.train);
            let shared: Vec<_> = test.intersection(&train).collect();
            assert!(shared.is_empty(), "pairs in train and test: {shared:?}");
            // Mirrors: a test row's reverse direction is tested too.
            let directed: BTreeSet<(&str, &str, &str)> = f
                .test
                .iter()
                .map(|&i| {
                    let e = &corpus.examples[i];
                    (e.a.as_str(), e.b.as_str(), e.gpu.as_str())
                })
                .collect();
            for &(a, b, gpu) in &directed {
                assert!(
                    directed.contains(&(b, a, gpu)),
                    "mirror of {a},{b} on {gpu} not tested"
                );
            }
        }
    }
}

#[test]
fn random_folds_keep_no_row_in_both_sides_and_may_split_mirrors() {
    // The random split is the optimistic one: it is allowed to train on a test row's mirror, and
    // does on this corpus (which is what makes it different from unseen_pairs).
    let corpus = gavel();
    let folds = folds(Split::Random, &corpus, 7);
    let straddles = folds.iter().any(|f| {
        let train: BTreeSet<usize> = f
            .train
            .iter()
            .map(|&i| corpus.examples[i].setting)
            .collect();
        f.test
            .iter()
            .any(|&i| train.contains(&corpus.examples[i].setting))
    });
    assert!(straddles);
}

#[test]
fn unseen_workload_is_absent_from_training_and_from_the_spec() {
    let corpus = gavel();
    let folds = folds(Split::UnseenWorkloads, &corpus, 7);
    let ids: BTreeSet<&str> = corpus
        .examples
        .iter()
        .flat_map(|e| [e.a.as_str(), e.b.as_str()])
        .collect();
    assert_eq!(folds.len(), ids.len());
    for f in folds.iter().take(4) {
        // The held-out workload: the one every test row touches.
        let held: Vec<&str> = ids
            .iter()
            .copied()
            .filter(|id| {
                f.test
                    .iter()
                    .all(|&i| corpus.examples[i].a == *id || corpus.examples[i].b == *id)
            })
            .collect();
        assert_eq!(held.len(), 1, "one workload per fold");
        let held = held[0];
        assert!(
            f.train
                .iter()
                .all(|&i| corpus.examples[i].a != held && corpus.examples[i].b != held)
        );
        let spec = corpus.fit_spec(&f.train);
        assert!(
            !spec.identities.iter().any(|id| id == held),
            "{held} has an identity slot"
        );
        // And what the fold's model calibrates and trains on leaves it out too.
        let split = corpus.calibration_split(&f.train, 7);
        assert!(
            !corpus
                .fit_spec(&split.train)
                .identities
                .iter()
                .any(|id| id == held)
        );
    }
}

#[test]
fn calibration_rows_never_train_and_are_grouped_as_used() {
    let corpus = gavel();
    let all: Vec<usize> = (0..corpus.examples.len()).collect();
    for seed in [7, 8, 9] {
        let split = corpus.calibration_split(&all, seed);
        let train: BTreeSet<usize> = split.train.iter().copied().collect();
        assert!(split.calibration.iter().all(|i| !train.contains(i)));
        assert_eq!(split.train.len() + split.calibration.len(), all.len());
        // 15% of 26 workloads, rounded up.
        assert_eq!(split.held_workloads.len(), 4);
        // New-workload calibration: no training row touches a held-out workload, so the spec
        // (fitted on training rows) has no identity for any of them.
        assert!(split.train.iter().all(|&i| {
            let e = &corpus.examples[i];
            !split.held_workloads.contains(&e.a) && !split.held_workloads.contains(&e.b)
        }));
        let spec = corpus.fit_spec(&split.train);
        assert!(
            spec.identities
                .iter()
                .all(|id| !split.held_workloads.contains(id))
        );
        // Known-workload calibration: its pairs are unmeasured on every device in training.
        let calibration_pairs = pairs_of(&corpus, &split.calibration);
        let training_pairs = pairs_of(&corpus, &split.train);
        assert!(calibration_pairs.is_disjoint(&training_pairs));
        assert!(split.known_pairs > 0);
        // Both kinds are present, as the encoder classifies them.
        let batch = corpus.encode(&spec, &split.calibration);
        let known = (0..split.calibration.len())
            .filter(|&k| {
                let row = &batch.inputs[k * batch.width..(k + 1) * batch.width];
                spec.calibration_kind(row) == Calibration::Known
            })
            .count();
        assert!(
            known > 0 && known < split.calibration.len(),
            "known {known}"
        );
    }
}

#[test]
fn too_few_workloads_hold_none_out_for_the_new_calibration() {
    let corpus = gavel();
    // Rows among the first five workloads only.
    let first: BTreeSet<String> = corpus.datasets[0]
        .workloads
        .iter()
        .take(5)
        .map(|w| w.workload.clone())
        .collect();
    let rows: Vec<usize> = (0..corpus.examples.len())
        .filter(|&i| first.contains(&corpus.examples[i].a) && first.contains(&corpus.examples[i].b))
        .collect();
    assert!(!rows.is_empty());
    let split = corpus.calibration_split(&rows, 7);
    assert!(split.held_workloads.is_empty());
    assert!(!split.train.is_empty());
}

/// Each workload's `model`, by dataset and id.
fn models(corpus: &Corpus) -> Vec<std::collections::BTreeMap<String, String>> {
    corpus
        .datasets
        .iter()
        .map(|d| {
            d.workloads
                .iter()
                .filter_map(|w| {
                    let m = w.features.get("model")?.as_category()?;
                    Some((w.workload.clone(), m.to_string()))
                })
                .collect()
        })
        .collect()
}

#[test]
fn an_unseen_model_leaves_with_every_workload_of_it_and_no_identity_slot() {
    let corpus = gavel();
    let split = Split::unseen("model");
    let models = models(&corpus);
    let model = |e: &Example, id: &str| models[e.dataset][id].clone();
    let all: BTreeSet<String> = corpus
        .examples
        .iter()
        .flat_map(|e| [model(e, &e.a), model(e, &e.b)])
        .collect();
    assert!(all.len() >= 5, "{all:?}");
    let folds = folds(split, &corpus, 7);
    assert_eq!(folds.len(), all.len(), "one fold per model");
    let mut tested = vec![0usize; corpus.examples.len()];
    for f in &folds {
        assert_eq!(f.train.len() + f.test.len(), corpus.examples.len());
        let held = f.value.clone().expect("the held-out model");
        assert!(f.test.iter().all(|&i| {
            let e = &corpus.examples[i];
            model(e, &e.a) == held || model(e, &e.b) == held
        }));
        assert!(f.train.iter().all(|&i| {
            let e = &corpus.examples[i];
            model(e, &e.a) != held && model(e, &e.b) != held
        }));
        // No workload of the model has an identity slot, and several left together.
        let spec = corpus.fit_spec(&f.train);
        let gone: BTreeSet<&str> = corpus
            .examples
            .iter()
            .filter(|e| model(e, &e.a) == held)
            .map(|e| e.a.as_str())
            .collect();
        assert!(!gone.is_empty());
        assert!(
            !spec.identities.iter().any(|id| gone.contains(id.as_str())),
            "{held}: an identity slot of {gone:?}"
        );
        for &i in &f.test {
            tested[i] += 1;
        }
    }
    // A row is tested once per distinct model it touches.
    for (i, &n) in tested.iter().enumerate() {
        let e = &corpus.examples[i];
        let expected = if model(e, &e.a) == model(e, &e.b) {
            1
        } else {
            2
        };
        assert_eq!(n, expected, "row {i}: {} next to {}", e.a, e.b);
    }
    // Some model has several workloads (batch sizes), and they left together.
    let sizes: Vec<usize> = folds
        .iter()
        .map(|f| {
            let held = f.value.as_deref().unwrap_or_default();
            f.test
                .iter()
                .flat_map(|&i| {
                    let t = &corpus.examples[i];
                    [t.a.clone(), t.b.clone()]
                        .into_iter()
                        .filter(move |id| model(t, id) == held)
                })
                .collect::<BTreeSet<String>>()
                .len()
        })
        .collect();
    assert!(sizes.iter().any(|&n| n > 1), "{sizes:?}");
}

#[test]
fn group_by_names_the_flag_and_the_feature_when_it_cannot_split() {
    use duet_core::dataset::FeatureValue;
    use duet_trainer::eval::check_group_by;
    let cpu = Corpus::new(vec![dataset("cpu-dev2c")]);
    assert_eq!(check_group_by(&cpu, "model"), Ok(()));
    let unknown = check_group_by(&cpu, "family").expect_err("no such feature");
    assert!(
        unknown.starts_with("--group-by family:")
            && unknown.contains("categorical features: model"),
        "{unknown}"
    );
    let numeric = check_group_by(&cpu, "batch_size").expect_err("numeric");
    assert!(
        numeric.starts_with("--group-by batch_size:") && numeric.contains("numeric"),
        "{numeric}"
    );
    let fixed = check_group_by(&cpu, "pairs").expect_err("a fixed split's name");
    assert!(fixed.contains("unseen_pairs"), "{fixed}");
    let mut one = dataset("cpu-dev2c");
    for w in &mut one.workloads {
        w.features
            .insert("model".into(), FeatureValue::Category(Some("mlp".into())));
    }
    let single = check_group_by(&Corpus::new(vec![one]), "model").expect_err("one value");
    assert!(
        single.starts_with("--group-by model:") && single.contains("1 value of `model` (mlp)"),
        "{single}"
    );
}

/// With a family feature, the held-out family's rows are a new family to the fold's spec, and
/// training meets the family's unknown slot only in the copy that hides families (so a job of
/// a new family is no input the network never trained on); without the copy it never does.
#[test]
fn a_held_out_family_is_new_to_its_fold_and_training_hides_families() {
    use duet_core::api::Calibration as Class;
    let mut corpus = gavel();
    corpus.family = Some("model".to_string());
    let fold = folds(Split::unseen("model"), &corpus, 7)
        .into_iter()
        .next()
        .expect("a fold");
    let spec = corpus.fit_spec(&fold.train);
    assert_eq!(spec.family.as_deref(), Some("model"));
    let test = corpus.encode(&spec, &fold.test);
    let classes: BTreeSet<Class> = test
        .inputs
        .chunks_exact(test.width)
        .map(|row| spec.calibration_kind(row))
        .collect();
    assert!(classes.contains(&Class::NewFamily), "{classes:?}");
    assert!(!classes.contains(&Class::Known) && !classes.contains(&Class::New));
    // The unknown slot of `model` in job a's and job b's encodings.
    let job = spec.job_width();
    let mut at = 2 * spec.numeric.len();
    for c in &spec.categorical {
        if c.name == "model" {
            at += c.vocabulary.len();
            break;
        }
        at += c.vocabulary.len() + 1;
    }
    let unknown = |inputs: &[f32]| {
        inputs
            .chunks_exact(test.width)
            .filter(|row| row[at] != 0.0 || row[job + at] != 0.0)
            .count()
    };
    let rows = fold.train.len();
    let with = corpus.encode_for_training(&spec, &fold.train, true);
    let without = corpus.encode_for_training(&spec, &fold.train, false);
    assert_eq!(without.inputs.len(), 2 * rows * test.width);
    assert_eq!(unknown(&without.inputs), 0, "the slot never trains");
    let hidden = with.inputs.len() / test.width - 2 * rows;
    assert!(
        hidden * 4 >= rows * 3 - 4 && hidden * 4 <= rows * 3 + 4,
        "{hidden} of {rows}"
    );
    assert_eq!(unknown(&with.inputs), hidden);
    assert_eq!(&with.inputs[..without.inputs.len()], &without.inputs[..]);
}

/// A final-only fit's own calibration folds: every workload held out in exactly one fold and no
/// training row touches it there, every unordered pair calibrates in at most one fold and is
/// then unmeasured in that fold's training, and each fold's rows split into calibration and
/// training.
#[test]
fn calibration_folds_hold_every_workload_out_once_and_never_train_on_what_they_score() {
    let corpus = gavel();
    let all: Vec<usize> = (0..corpus.examples.len()).collect();
    let workloads: BTreeSet<String> = corpus
        .examples
        .iter()
        .flat_map(|e| [e.a.clone(), e.b.clone()])
        .collect();
    let n = duet_trainer::final_fit::CALIBRATION_FOLDS;
    let mut folds = corpus.calibration_folds(&all, 7, n);
    // Without a family feature each workload is its own unit of the probed folds that follow.
    assert_eq!(folds.len(), 2 * n);
    assert!(folds[n..].iter().all(|f| f.probed));
    folds.truncate(n);
    let mut held_once: Vec<String> = folds
        .iter()
        .flat_map(|f| f.held_workloads.iter().cloned())
        .collect();
    held_once.sort();
    assert_eq!(
        held_once,
        workloads.iter().cloned().collect::<Vec<_>>(),
        "each workload held out exactly once"
    );
    let mut known_seen: BTreeSet<(String, String)> = BTreeSet::new();
    for f in &folds {
        let train: BTreeSet<usize> = f.train.iter().copied().collect();
        assert!(f.calibration.iter().all(|i| !train.contains(i)));
        assert_eq!(f.train.len() + f.calibration.len(), all.len());
        assert!(f.train.iter().all(|&i| {
            let e = &corpus.examples[i];
            !f.held_workloads.contains(&e.a) && !f.held_workloads.contains(&e.b)
        }));
        let known: Vec<usize> = f
            .calibration
            .iter()
            .copied()
            .filter(|&i| {
                let e = &corpus.examples[i];
                !f.held_workloads.contains(&e.a) && !f.held_workloads.contains(&e.b)
            })
            .collect();
        let known_pairs = pairs_of(&corpus, &known);
        assert!(!known_pairs.is_empty());
        assert!(known_pairs.is_disjoint(&pairs_of(&corpus, &f.train)));
        assert!(
            known_pairs.is_disjoint(&known_seen),
            "a pair calibrates in two folds"
        );
        known_seen.extend(known_pairs);
    }
}

/// With a family feature, a final-only fit's calibration adds family folds after the workload
/// ones: every family held out whole in exactly one of them, its workloads' every row in
/// calibration and none in training; the workload folds are those of the same seed without one.
#[test]
fn calibration_folds_hold_every_family_out_whole_once_where_the_corpus_names_one() {
    let without = gavel();
    let mut corpus = gavel();
    corpus.family = Some("model".to_string());
    let all: Vec<usize> = (0..corpus.examples.len()).collect();
    let n = duet_trainer::final_fit::CALIBRATION_FOLDS;
    let plain = without.calibration_folds(&all, 7, n);
    let folds = corpus.calibration_folds(&all, 7, n);
    assert_eq!(folds.len(), 3 * n);
    for (a, b) in plain.iter().zip(&folds[..n]) {
        assert_eq!((&a.calibration, &a.train), (&b.calibration, &b.train));
        assert!(b.held_families.is_empty());
    }
    let values = corpus.values_of("model");
    let family_of = |e: &Example, id: &str| values[e.dataset][id].clone();
    let families: BTreeSet<String> = corpus
        .examples
        .iter()
        .flat_map(|e| [family_of(e, &e.a), family_of(e, &e.b)])
        .collect();
    assert!(families.len() >= duet_model::calibration::MIN_FAMILIES);
    let mut held_once: Vec<String> = Vec::new();
    for f in &folds[n..2 * n] {
        assert!(!f.held_families.is_empty());
        assert_eq!(f.train.len() + f.calibration.len(), all.len());
        let held: BTreeSet<&String> = f.held_families.values().collect();
        held_once.extend(held.iter().map(|v| (*v).clone()));
        for &i in &f.train {
            let e = &corpus.examples[i];
            assert!(!held.contains(&family_of(e, &e.a)) && !held.contains(&family_of(e, &e.b)));
        }
        for &i in &f.calibration {
            let e = &corpus.examples[i];
            assert!(held.contains(&family_of(e, &e.a)) || held.contains(&family_of(e, &e.b)));
        }
        for (id, v) in &f.held_families {
            assert!(f.held_workloads.contains(id));
            assert!(
                corpus
                    .examples
                    .iter()
                    .any(|e| e.a == *id && family_of(e, id) == *v)
            );
        }
    }
    held_once.sort();
    assert_eq!(held_once, families.into_iter().collect::<Vec<_>>());
}

/// After the family folds come the probed ones: every family held out once more, its
/// workloads each keeping 1 to `PROBED_MAX` settings with a partner of another family in
/// training (their only measurements there) and their other rows in calibration.
#[test]
fn calibration_folds_probe_every_family_once_after_the_family_folds() {
    let mut corpus = gavel();
    corpus.family = Some("model".to_string());
    let all: Vec<usize> = (0..corpus.examples.len()).collect();
    let n = duet_trainer::final_fit::CALIBRATION_FOLDS;
    let folds = corpus.calibration_folds(&all, 7, n);
    assert!(folds[..2 * n].iter().all(|f| !f.probed));
    let values = corpus.values_of("model");
    let family_of = |e: &Example, id: &str| values[e.dataset][id].clone();
    let mut families_held: Vec<String> = Vec::new();
    for f in &folds[2 * n..] {
        assert!(f.probed && f.held_families.is_empty() && !f.calibration.is_empty());
        assert_eq!(f.train.len() + f.calibration.len(), all.len());
        let touches = |i: usize| {
            let e = &corpus.examples[i];
            f.held_workloads.contains(&e.a) || f.held_workloads.contains(&e.b)
        };
        assert!(f.calibration.iter().all(|&i| touches(i)));
        let held: BTreeSet<String> = corpus
            .examples
            .iter()
            .flat_map(|e| [(e, &e.a), (e, &e.b)])
            .filter(|(_, id)| f.held_workloads.contains(*id))
            .map(|(e, id)| family_of(e, id))
            .collect();
        families_held.extend(held.iter().cloned());
        for w in &f.held_workloads {
            let probes: BTreeSet<usize> = f
                .train
                .iter()
                .map(|&i| &corpus.examples[i])
                .filter(|e| e.a == *w || e.b == *w)
                .map(|e| {
                    let partner = if e.a == *w { &e.b } else { &e.a };
                    assert!(
                        !f.held_workloads.contains(partner),
                        "a probe's partner is known"
                    );
                    e.setting
                })
                .collect();
            assert!(
                (1..=PROBED_MAX as usize).contains(&probes.len()),
                "{w}: {} probes",
                probes.len()
            );
        }
    }
    families_held.sort();
    let every: BTreeSet<String> = corpus
        .examples
        .iter()
        .flat_map(|e| [family_of(e, &e.a), family_of(e, &e.b)])
        .collect();
    assert_eq!(families_held, every.into_iter().collect::<Vec<_>>());
}

#[test]
fn folds_tell_known_from_probed_by_the_shipped_counts() {
    let corpus = gavel();
    let e = &corpus.examples[0];
    let on = |gpu: &str, a: u32, b: u32| {
        std::collections::BTreeMap::from([(
            gpu.to_string(),
            std::collections::BTreeMap::from([(e.a.clone(), a), (e.b.clone(), b)]),
        )])
    };
    let many = on(&e.gpu, 9, 4);
    // A fold's thinned view does not make a well-measured pair probed, nor the reverse.
    assert_eq!(
        Corpus::served_kind(Calibration::Probed, e, &many, false),
        Calibration::Known
    );
    let thin = on(&e.gpu, 9, PROBED_MAX);
    assert_eq!(
        Corpus::served_kind(Calibration::Known, e, &thin, false),
        Calibration::Probed
    );
    // Counted on the row's device: thin on another device leaves the pair known here.
    let mut elsewhere = on("another-device", 9, PROBED_MAX);
    elsewhere.extend(on(&e.gpu, 9, 4));
    assert_eq!(
        Corpus::served_kind(Calibration::Known, e, &elsewhere, false),
        Calibration::Known
    );
    // A probed fold's held workload is probed whatever its count; other classes stand.
    assert_eq!(
        Corpus::served_kind(Calibration::Known, e, &many, true),
        Calibration::Probed
    );
    for kind in [
        Calibration::New,
        Calibration::NewFamily,
        Calibration::Conservative,
    ] {
        assert_eq!(Corpus::served_kind(kind, e, &thin, true), kind);
    }
}
