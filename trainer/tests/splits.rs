//! The evaluation's and the calibration's split invariants on the committed datasets, checked
//! from the rows' workload ids (not from the indexes the splits themselves use): nothing a test
//! fold or a calibration set stands for reaches training.

use std::collections::BTreeSet;

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
    let folds = folds(split, &corpus.examples, seed);
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
fn unseen_pairs_never_train_on_the_pair_on_any_device() {
    let corpus = gavel();
    let devices: BTreeSet<&str> = corpus.examples.iter().map(|e| e.gpu.as_str()).collect();
    assert_eq!(devices.len(), 3, "the corpus spans three devices");
    for seed in [7, 8] {
        let folds = folds(Split::UnseenPairs, &corpus.examples, seed);
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
    let folds = folds(Split::Random, &corpus.examples, 7);
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
    let folds = folds(Split::UnseenWorkloads, &corpus.examples, 7);
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
            .filter(|&k| spec.pair_known(&batch.inputs[k * batch.width..(k + 1) * batch.width]))
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
