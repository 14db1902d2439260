//! The evaluation's folds and features written out for other tools (the scikit-learn reference
//! in `benchmarks/histgb/`): every fold of every split, for each seed, with the rows encoded by
//! the feature spec fitted on that fold's training rows, exactly as the MLP sees its test rows
//! (`eval`): identity slots for the fold's training workloads only.
//!
//! Layout under the output folder:
//!
//! - `rows.csv`: one line per directed row of the corpus (`row`, `dataset`, `gpu`, `mode`, `a`,
//!   `b`, `pair`, `setting`, `feasible`, `speed`; `speed` empty for an infeasible row);
//! - `seed-<s>/<split>/fold-<k>.json`: the fold's `columns` (names, see [`column_names`]),
//!   `width`, `rows`, and its `train` and `test` row indexes;
//! - `seed-<s>/<split>/fold-<k>.f32`: every row of the corpus (`rows` x `width`, row-major,
//!   little-endian f32, in `rows.csv` order) encoded with the fold's spec.

use std::fmt::Write as _;
use std::io;
use std::path::Path;

use duet_model::encoding::FeatureSpec;
use serde::{Deserialize, Serialize};

use crate::corpus::Corpus;
use crate::eval::{Fold, Split, folds};

/// Marks a workload-identity column in [`column_names`]: `a.id=<workload>`.
pub const IDENTITY_COLUMN: &str = ".id=";

/// The name of every input column of `spec`'s pair encoding, in `encode_pair`'s order: per job
/// (`a.`, then `b.`) each numeric feature and its missing flag (`<name>`, `<name>.missing`),
/// each categorical value and the unknown slot (`<name>=<value>`, `<name>=?`) and each identity
/// (`id=<workload>`); then the device (`gpu=<gpu>`, `gpu=?`), the mode (`mode=<mode>`) and the
/// shares (`share_a`, `share_b`).
pub fn column_names(spec: &FeatureSpec) -> Vec<String> {
    let mut names = Vec::with_capacity(spec.pair_width());
    for side in ["a", "b"] {
        for f in &spec.numeric {
            names.push(format!("{side}.{}", f.name));
            names.push(format!("{side}.{}.missing", f.name));
        }
        for c in &spec.categorical {
            names.extend(
                c.vocabulary
                    .iter()
                    .map(|v| format!("{side}.{}={v}", c.name)),
            );
            names.push(format!("{side}.{}=?", c.name));
        }
        names.extend(
            spec.identities
                .iter()
                .map(|id| format!("{side}{IDENTITY_COLUMN}{id}")),
        );
    }
    names.extend(spec.gpus.iter().map(|g| format!("gpu={g}")));
    names.push("gpu=?".to_string());
    names.extend(spec.modes.iter().map(|m| format!("mode={m}")));
    names.push("share_a".to_string());
    names.push("share_b".to_string());
    names
}

/// One fold's description, as `fold-<k>.json` holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FoldFile {
    pub seed: u64,
    pub split: Split,
    pub fold: usize,
    pub rows: usize,
    pub width: usize,
    pub columns: Vec<String>,
    pub train: Vec<usize>,
    pub test: Vec<usize>,
}

/// One fold encoded: its description and every corpus row under the fold's spec.
#[derive(Debug, Clone)]
pub struct EncodedFold {
    pub file: FoldFile,
    pub inputs: Vec<f32>,
}

/// Encodes every row of the corpus with the spec fitted on `fold`'s training rows.
pub fn encode_fold(
    corpus: &Corpus,
    seed: u64,
    split: Split,
    index: usize,
    fold: &Fold,
) -> EncodedFold {
    let spec = corpus.fit_spec(&fold.train);
    let all: Vec<usize> = (0..corpus.examples.len()).collect();
    let batch = corpus.encode(&spec, &all);
    EncodedFold {
        file: FoldFile {
            seed,
            split,
            fold: index,
            rows: batch.rows(),
            width: batch.width,
            columns: column_names(&spec),
            train: fold.train.clone(),
            test: fold.test.clone(),
        },
        inputs: batch.inputs,
    }
}

/// The directed rows of the corpus as `rows.csv` holds them.
pub fn rows_csv(corpus: &Corpus) -> String {
    let mut out = String::from("row,dataset,gpu,mode,a,b,pair,setting,feasible,speed\n");
    for (i, e) in corpus.examples.iter().enumerate() {
        // Workload ids and device names are plain tokens in the duet format; quote anyway.
        let _ = writeln!(
            out,
            "{i},{},\"{}\",{},\"{}\",\"{}\",{},{},{},{}",
            e.dataset,
            e.gpu,
            e.mode,
            e.a,
            e.b,
            e.pair,
            e.setting,
            u8::from(e.feasible),
            e.speed.map_or(String::new(), |s| format!("{s:.17e}"))
        );
    }
    out
}

/// Writes `rows.csv` and every fold of each of `splits` for each of `seeds` under `dir`
/// (created); `progress` hears each fold written. Returns the number of folds written.
pub fn write(
    corpus: &Corpus,
    splits: &[Split],
    seeds: &[u64],
    dir: &Path,
    mut progress: impl FnMut(&FoldFile),
) -> io::Result<usize> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("rows.csv"), rows_csv(corpus))?;
    let mut written = 0;
    for &seed in seeds {
        for &split in splits {
            let folder = dir.join(format!("seed-{seed}")).join(split.as_str());
            std::fs::create_dir_all(&folder)?;
            for (k, fold) in folds(split, corpus, seed).iter().enumerate() {
                let encoded = encode_fold(corpus, seed, split, k, fold);
                let bytes: Vec<u8> = encoded
                    .inputs
                    .iter()
                    .flat_map(|v| v.to_le_bytes())
                    .collect();
                std::fs::write(folder.join(format!("fold-{k}.f32")), bytes)?;
                let json = serde_json::to_string(&encoded.file).map_err(io::Error::other)?;
                std::fs::write(folder.join(format!("fold-{k}.json")), json)?;
                progress(&encoded.file);
                written += 1;
            }
        }
    }
    Ok(written)
}
