use std::path::PathBuf;

use duet_core::dataset::Dataset;

use super::*;

fn corpus(names: &[&str]) -> Corpus {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../datasets");
    Corpus::new(
        names
            .iter()
            .map(|n| Dataset::read(&root.join(n)).expect("a committed dataset"))
            .collect(),
    )
}

/// Every feasible row of the unseen-pairs, unseen-workloads and unseen-family folds as a
/// score, as an evaluation would record it (known in the first, new in the second, new
/// family in the third).
fn every_score(corpus: &Corpus, seed: u64) -> OutOfFold {
    let mut oof = OutOfFold::default();
    for (split, kind) in [
        (Split::UnseenPairs, Kind::Known),
        (Split::UnseenWorkloads, Kind::New),
        (Split::ProbedWorkloads, Kind::Probed),
        (Split::unseen("model"), Kind::NewFamily),
    ] {
        for fold in folds(split, corpus, seed) {
            let mlp = vec![
                MlpRow {
                    out: [0.0; OUTPUTS],
                    kind,
                    prior: None,
                };
                fold.test.len()
            ];
            oof.add(corpus, split, &fold, &mlp);
        }
    }
    oof
}

#[test]
fn no_test_row_calibrates_itself() {
    let mut corpus = corpus(&["gavel-k80", "gavel-v100"]);
    corpus.family = family_feature(&corpus, None).expect("a family feature");
    assert_eq!(corpus.family.as_deref(), Some(DEFAULT_FAMILY));
    let oof = every_score(&corpus, 7);
    let feasible = corpus.examples.iter().filter(|e| e.speed.is_some()).count();
    // Every feasible row once as a known score, and once per workload it touches as a new
    // one (a workload's self-pair once).
    let (known, rest) = oof
        .scores
        .iter()
        .partition::<Vec<_>, _>(|s| s.kind == Kind::Known);
    let (new, rest) = rest
        .into_iter()
        .partition::<Vec<_>, _>(|s| s.kind == Kind::New);
    let (probed, family) = rest
        .into_iter()
        .partition::<Vec<_>, _>(|s| s.kind == Kind::Probed);
    // A feasible row at most once per probed fold of its two jobs.
    assert!(!probed.is_empty() && probed.len() <= 2 * feasible);
    // Every feasible row once per family it touches.
    assert!(family.len() >= feasible && family.len() <= 2 * feasible);
    assert_eq!(known.len(), feasible);
    assert!(new.len() > feasible && new.len() <= 2 * feasible);
    let models = corpus.values_of("model");
    for split in splits(None, corpus.family.as_deref()) {
        for fold in folds(split, &corpus, 7) {
            let tests: Vec<&Example> = fold.test.iter().map(|&i| &corpus.examples[i]).collect();
            let kept = oof.kept_for(&corpus, split, &fold);
            // A probed fold holds a fifth of the families out at once: more scores stay out.
            let least = if split == Split::ProbedWorkloads {
                4
            } else {
                2
            };
            assert!(
                kept.len() > oof.scores.len() / least,
                "{split:?}: {} of {}",
                kept.len(),
                oof.scores.len()
            );
            for s in kept {
                let e = &corpus.examples[s.row];
                assert!(
                    !fold.test.contains(&s.row),
                    "{split:?}: a test row calibrates"
                );
                match split {
                    Split::Random => {
                        assert!(tests.iter().all(|t| t.setting != e.setting));
                    }
                    Split::UnseenPairs => assert!(tests.iter().all(|t| t.pair != e.pair)),
                    Split::UnseenWorkloads => {
                        let held = fold.workload.as_deref().expect("one workload per fold");
                        assert!(tests.iter().all(|t| t.a == held || t.b == held));
                        assert!(e.a != held && e.b != held);
                    }
                    Split::ProbedWorkloads => {
                        let held = &fold.probed;
                        assert!(
                            tests
                                .iter()
                                .all(|t| held.contains(&t.a) || held.contains(&t.b))
                        );
                        assert!(!held.contains(&e.a) && !held.contains(&e.b));
                    }
                    Split::UnseenGroup(_) => {
                        let held = fold.value.as_ref().expect("one value per fold");
                        let model = |t: &Example, id: &str| models[t.dataset].get(id);
                        assert!(tests.iter().all(|t| {
                            model(t, &t.a) == Some(held) || model(t, &t.b) == Some(held)
                        }));
                        assert!(model(e, &e.a) != Some(held) && model(e, &e.b) != Some(held));
                    }
                }
            }
        }
    }
    // The shipped shifts use every score, grouped by pair and by workload.
    let c = OutOfFold::pooled(&corpus, &[&oof]);
    assert_eq!(c.known.rows, known.len());
    assert_eq!(c.new.rows, new.len());
    assert_eq!(c.probed.rows, probed.len());
    assert!(c.by_device.values().all(|d| !d.probed.is_empty()));
    let workloads: BTreeSet<&str> = corpus
        .examples
        .iter()
        .flat_map(|e| [e.a.as_str(), e.b.as_str()])
        .collect();
    assert_eq!(c.new.groups, workloads.len());
    assert_eq!(c.by_device.len(), 2);
    let families: BTreeSet<String> = corpus
        .values_of("model")
        .into_iter()
        .flat_map(|d| d.into_values())
        .collect();
    assert_eq!(c.new_family.rows, family.len());
    assert_eq!(c.new_family.groups, families.len());
    assert!(c.families_calibrated(), "{:?}", c.new_family);
    assert!(c.by_device.values().all(|d| !d.new_family.is_empty()));
}

/// Each held-out family is weighed with the weight the other families' rows chose, never its
/// own: the other families' network is right and their prior 1% off (alone they choose the
/// network), the LM fold's network is 65% off and its prior right (counted with the others, it
/// would choose the prior). A new-family row of another split (a3c, the one workload of its
/// family, held out by `unseen_workloads`) is weighed as its family's fold was.
#[test]
fn a_held_out_family_is_weighed_by_the_other_families_choice() {
    let mut corpus = corpus(&["gavel-k80"]);
    corpus.family = family_feature(&corpus, None).expect("a family feature");
    let rows = |split: Split, off: &dyn Fn(&Fold) -> (f64, f64)| {
        let folds = folds(split, &corpus, 7);
        let scores: Vec<FoldScores> = folds
            .iter()
            .map(|fold| {
                let (network, prior) = off(fold);
                let mlp = fold
                    .test
                    .iter()
                    .map(|&i| {
                        let truth = corpus.examples[i].speed.map_or(0.0, f64::ln);
                        #[allow(clippy::cast_possible_truncation)]
                        let out = [
                            (truth + network) as f32,
                            (truth + network - 0.1) as f32,
                            0.0,
                        ];
                        MlpRow {
                            out,
                            kind: Kind::NewFamily,
                            prior: Some((truth + prior, Basis::NewFamily)),
                        }
                    })
                    .collect();
                FoldScores {
                    baselines: BTreeMap::new(),
                    mlp,
                }
            })
            .collect();
        (split, folds, scores)
    };
    let family = |fold: &Fold| {
        if fold.value.as_deref() == Some("LM") {
            (0.5, 0.0)
        } else {
            (0.0, 0.01)
        }
    };
    let workload = |fold: &Fold| {
        if fold.workload.as_deref() == Some("a3c") {
            (0.2, 0.0)
        } else {
            (0.0, 0.0)
        }
    };
    let mut runs = vec![
        rows(Split::UnseenWorkloads, &workload),
        rows(Split::unseen("model"), &family),
    ];
    let (candidates, weights) = priors::weigh_family_priors(&corpus, &mut runs);
    let feasible: usize = runs[1]
        .1
        .iter()
        .map(|f| {
            f.test
                .iter()
                .filter(|&&i| corpus.examples[i].speed.is_some())
                .count()
        })
        .sum();
    assert_eq!(candidates.len(), feasible);
    assert_eq!(weights.len(), 7, "{weights:?}");
    assert_eq!(weights["LM"].of("k80").0, 1.0);
    // The six others are scored with a weight LM's rows chose among others'.
    assert!(weights["A3C"].of("k80").0 < 1.0, "{:?}", weights["A3C"]);
    let (_, folds, scores) = &runs[1];
    for (fold, s) in folds.iter().zip(scores) {
        let (w, _) = weights[fold.value.as_deref().expect("a family")].of("k80");
        let (network, prior) = family(fold);
        for (&i, r) in fold.test.iter().zip(&s.mlp) {
            let truth = corpus.examples[i].speed.map_or(0.0, f64::ln);
            let want = truth + w * network + (1.0 - w) * prior;
            assert!(
                (f64::from(r.out[OUT_LOG_SPEED]) - want).abs() < 1e-5,
                "{fold:?}"
            );
        }
    }
    // a3c's rows in unseen_workloads: A3C's fold's weight.
    let (_, folds, scores) = &runs[0];
    let (w, _) = weights["A3C"].of("k80");
    let (fold, s) = folds
        .iter()
        .zip(scores)
        .find(|(f, _)| f.workload.as_deref() == Some("a3c"))
        .expect("a3c's fold");
    for (&i, r) in fold.test.iter().zip(&s.mlp) {
        let truth = corpus.examples[i].speed.map_or(0.0, f64::ln);
        let want = truth + w * 0.2;
        assert!((f64::from(r.out[OUT_LOG_SPEED]) - want).abs() < 1e-5);
    }
}

/// Each probed-workloads fold is weighed with the weight the other folds' rows chose, never its
/// own: in the first fold the network is 65% off and the prior right, in the others the
/// network is right and the prior 1% off. The first fold keeps the network (the others chose
/// it); the others lean on the prior (the first fold's rows, among theirs, chose it). A probed
/// row of another split takes the weight every probed fold's rows chose together.
#[test]
fn a_probed_fold_is_weighed_by_the_other_folds_choice() {
    let corpus = corpus(&["gavel-k80"]);
    let rows = |split: Split, off: &dyn Fn(usize) -> (f64, f64)| {
        let folds = folds(split, &corpus, 7);
        let scores: Vec<FoldScores> = folds
            .iter()
            .enumerate()
            .map(|(k, fold)| {
                let (network, prior) = off(k);
                let mlp = fold
                    .test
                    .iter()
                    .map(|&i| {
                        let truth = corpus.examples[i].speed.map_or(0.0, f64::ln);
                        #[allow(clippy::cast_possible_truncation)]
                        let out = [
                            (truth + network) as f32,
                            (truth + network - 0.1) as f32,
                            0.0,
                        ];
                        MlpRow {
                            out,
                            kind: Kind::Probed,
                            prior: Some((truth + prior, Basis::Probed)),
                        }
                    })
                    .collect();
                FoldScores {
                    baselines: BTreeMap::new(),
                    mlp,
                }
            })
            .collect();
        (split, folds, scores)
    };
    let probed = |k: usize| if k == 0 { (0.5, 0.0) } else { (0.0, 0.01) };
    let mut runs = vec![
        rows(Split::ProbedWorkloads, &probed),
        rows(Split::UnseenPairs, &|_| (0.2, 0.0)),
    ];
    assert!(runs[0].1.len() > 2, "probed folds: {}", runs[0].1.len());
    let candidates = priors::weigh_probed_priors(&corpus, &mut runs);
    let feasible = |run: &(Split, Vec<Fold>, Vec<FoldScores>)| -> usize {
        run.1
            .iter()
            .map(|f| {
                f.test
                    .iter()
                    .filter(|&&i| corpus.examples[i].speed.is_some())
                    .count()
            })
            .sum()
    };
    assert_eq!(candidates.len(), feasible(&runs[0]));
    let moved = |truth: f64, out: &[f32; OUTPUTS], network: f64| {
        (f64::from(out[OUT_LOG_SPEED]) - (truth + network)).abs() > 1e-5
    };
    let (_, folds, scores) = &runs[0];
    for (k, (fold, s)) in folds.iter().zip(scores).enumerate() {
        let (network, _) = probed(k);
        let weighed = fold
            .test
            .iter()
            .zip(&s.mlp)
            .filter(|(i, r)| {
                moved(
                    corpus.examples[**i].speed.map_or(0.0, f64::ln),
                    &r.out,
                    network,
                )
            })
            .count();
        if k == 0 {
            assert_eq!(weighed, 0, "the first fold keeps the network");
        } else {
            assert!(weighed > 0, "fold {k} leans on the prior");
        }
    }
    // The unseen-pairs rows: the pooled weight, which leans on the prior (the first fold's
    // rows are a fifth of the rows, but each probed workload weighs the same).
    let (_, folds, scores) = &runs[1];
    let pooled = Weights::choose(&candidates).of("k80").0;
    for (fold, s) in folds.iter().zip(scores) {
        for (&i, r) in fold.test.iter().zip(&s.mlp) {
            let truth = corpus.examples[i].speed.map_or(0.0, f64::ln);
            let want = truth + pooled * 0.2;
            assert!((f64::from(r.out[OUT_LOG_SPEED]) - want).abs() < 1e-5);
        }
    }
}
