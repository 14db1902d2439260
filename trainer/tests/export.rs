//! The folds and features `export_folds` writes for the scikit-learn reference are the
//! evaluation's own: the same test rows per fold, the split invariants visible in the written
//! rows, and columns named in the encoder's order.

use std::collections::BTreeSet;

use duet_model::encoding::PROBED_MAX;
use duet_trainer::corpus::Corpus;
use duet_trainer::eval::{Split, folds};
use duet_trainer::export::{self, FoldFile, IDENTITY_COLUMN, column_names};

mod support;
use support::dataset;

fn corpus() -> Corpus {
    Corpus::new(vec![dataset("gavel-k80"), dataset("gavel-p100")])
}

fn unordered(corpus: &Corpus, i: usize) -> (String, String) {
    let e = &corpus.examples[i];
    if e.a <= e.b {
        (e.a.clone(), e.b.clone())
    } else {
        (e.b.clone(), e.a.clone())
    }
}

#[test]
fn column_names_follow_the_encoder() {
    let corpus = corpus();
    let all: Vec<usize> = (0..corpus.examples.len()).collect();
    let spec = corpus.fit_spec(&all);
    let names = column_names(&spec);
    assert_eq!(names.len(), spec.pair_width());
    assert_eq!(
        names.iter().collect::<BTreeSet<_>>().len(),
        names.len(),
        "names are unique"
    );
    let batch = corpus.encode(&spec, &all);
    let col = |name: &str| names.iter().position(|n| n == name).expect(name);
    for (k, e) in corpus.examples.iter().enumerate().step_by(37) {
        let row = &batch.inputs[k * batch.width..(k + 1) * batch.width];
        for (i, n) in names.iter().enumerate() {
            if let Some(id) = n.strip_prefix("a.id=") {
                assert_eq!(row[i] == 1.0, *id == e.a, "{n} on row {k}");
            }
            if let Some(id) = n.strip_prefix("b.id=") {
                assert_eq!(row[i] == 1.0, *id == e.b, "{n} on row {k}");
            }
        }
        assert_eq!(row[col(&format!("gpu={}", e.gpu))], 1.0);
        assert_eq!(row[col(&format!("mode={}", e.mode))], 1.0);
        assert_eq!(row[col("gpu=?")], 0.0);
    }
}

#[test]
fn written_folds_are_the_evaluation_folds_with_their_invariants() {
    let corpus = corpus();
    let dir = tempfile::tempdir().expect("tmp");
    let seed = 11;
    let mut heard = 0;
    let written =
        export::write(&corpus, &Split::ALL, &[seed], dir.path(), |_| heard += 1).expect("write");
    assert_eq!(written, heard);
    let rows_csv = std::fs::read_to_string(dir.path().join("rows.csv")).expect("rows.csv");
    assert_eq!(rows_csv.lines().count(), corpus.examples.len() + 1);
    let mut count = 0;
    for split in Split::ALL {
        let expected = folds(split, &corpus, seed);
        let mut tested = vec![0usize; corpus.examples.len()];
        for (k, fold) in expected.iter().enumerate() {
            let base = dir
                .path()
                .join(format!("seed-{seed}"))
                .join(split.as_str())
                .join(format!("fold-{k}"));
            let file: FoldFile = serde_json::from_str(
                &std::fs::read_to_string(base.with_extension("json")).expect("json"),
            )
            .expect("fold json");
            assert_eq!((file.seed, file.split, file.fold), (seed, split, k));
            assert_eq!(file.train, fold.train);
            assert_eq!(file.test, fold.test);
            assert_eq!(file.rows, corpus.examples.len());
            assert_eq!(file.columns.len(), file.width);
            // Train and test partition the rows.
            let train: BTreeSet<usize> = file.train.iter().copied().collect();
            assert!(file.test.iter().all(|i| !train.contains(i)));
            assert_eq!(train.len() + file.test.len(), corpus.examples.len());
            for &i in &file.test {
                tested[i] += 1;
            }
            // The features are the fold's spec's encoding of every row.
            let bytes = std::fs::read(base.with_extension("f32")).expect("f32");
            assert_eq!(bytes.len(), file.rows * file.width * 4);
            let spec = corpus.fit_spec(&file.train);
            assert_eq!(file.columns, column_names(&spec));
            let all: Vec<usize> = (0..corpus.examples.len()).collect();
            let batch = corpus.encode(&spec, &all);
            let values: Vec<f32> = bytes
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            assert_eq!(values, batch.inputs);
            let ids: BTreeSet<&str> = file
                .columns
                .iter()
                .filter_map(|c| c.split_once(IDENTITY_COLUMN).map(|(_, id)| id))
                .collect();
            match split {
                Split::Random => {}
                Split::UnseenPairs => {
                    // No test pair trains, on any device, in either order.
                    let trained: BTreeSet<_> =
                        file.train.iter().map(|&i| unordered(&corpus, i)).collect();
                    assert!(
                        file.test
                            .iter()
                            .all(|&i| !trained.contains(&unordered(&corpus, i)))
                    );
                }
                // `--group-by` splits are not exported (only the fixed ones are).
                Split::UnseenGroup(_) => {}
                Split::ProbedWorkloads => {
                    // Every test row touches a held workload; each held workload trains in 1
                    // to PROBED_MAX settings, all with a partner outside the fold, and keeps
                    // its identity column.
                    let held = &fold.probed;
                    assert!(!held.is_empty());
                    assert!(file.test.iter().all(|&i| {
                        let e = &corpus.examples[i];
                        held.contains(&e.a) || held.contains(&e.b)
                    }));
                    for w in held {
                        let settings: BTreeSet<usize> = file
                            .train
                            .iter()
                            .map(|&i| &corpus.examples[i])
                            .filter(|e| e.a == *w || e.b == *w)
                            .inspect(|e| assert!(!(held.contains(&e.a) && held.contains(&e.b))))
                            .map(|e| e.setting)
                            .collect();
                        assert!(
                            (1..=PROBED_MAX as usize).contains(&settings.len()),
                            "{w}: {settings:?}"
                        );
                        assert!(ids.contains(w.as_str()), "{w} has no column");
                    }
                }
                Split::UnseenWorkloads => {
                    // The held-out workload touches every test row, no training row, and has
                    // no identity column.
                    let e = &corpus.examples[file.test[0]];
                    let held = [&e.a, &e.b]
                        .into_iter()
                        .find(|id| {
                            file.test.iter().all(|&i| {
                                corpus.examples[i].a == **id || corpus.examples[i].b == **id
                            })
                        })
                        .expect("one workload in every test row");
                    assert!(file.train.iter().all(|&i| {
                        corpus.examples[i].a != *held && corpus.examples[i].b != *held
                    }));
                    assert!(!ids.contains(held.as_str()), "{held} has a column");
                }
            }
            count += 1;
        }
        // Every row is tested once (unseen workloads: once per workload it touches; probed
        // workloads: at most once per fold of its two jobs, not where it is a probe).
        for (i, &n) in tested.iter().enumerate() {
            let e = &corpus.examples[i];
            if split == Split::ProbedWorkloads {
                assert!(n <= 2, "{split:?} row {i}");
                continue;
            }
            let once = split != Split::UnseenWorkloads || e.a == e.b;
            assert_eq!(n, if once { 1 } else { 2 }, "{split:?} row {i}");
        }
    }
    assert_eq!(count, written);
}
