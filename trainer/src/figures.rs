//! A model folder's report and figures drawn again from what the folder stores, without
//! training: `model.json` (the metrics, the spec and the datasets it names, by path and
//! fingerprint), the networks (the heatmap's predictions) and `held-out.csv` (the held-out
//! predictions the scatter and error plots show).
//!
//! A folder written before `held-out.csv` existed gets it by running its first seed's evaluation
//! again: the same folds, refitted from the same seeds (the evaluation is deterministic), and
//! scored; the shipped ensemble and `model.json` are left untouched.

use std::path::{Path, PathBuf};

use duet_core::progress::{Event, Progress};
use duet_model::artifact;
use duet_model::network::TrainConfig;

use crate::corpus::Corpus;
use crate::eval::{Split, evaluate_splits};
use crate::pipeline::{self, PipelineError};
use crate::report::{self, HELD_OUT_FILE};

/// Writes the report and figures of the model folder `dir` again; returns the files written.
/// The datasets are read from the paths `model.json` names (relative to the current folder)
/// and must still have the fingerprints it records.
pub fn render(dir: &Path, progress: &mut dyn Progress) -> Result<Vec<String>, PipelineError> {
    let (meta, nets) = artifact::load(dir)?;
    let paths: Vec<PathBuf> = meta.data.iter().map(|d| PathBuf::from(&d.path)).collect();
    let (datasets, data) = pipeline::load(&paths)?;
    for (then, now) in meta.data.iter().zip(&data) {
        if then.fingerprint != now.fingerprint {
            return Err(PipelineError::Data(format!(
                "{}: the dataset changed since the model was trained (fingerprint {} in \
                 model.json, {} now); its figures would not show this model's data",
                now.path, then.fingerprint, now.fingerprint
            )));
        }
    }
    let mut corpus = Corpus::new(datasets);
    corpus.family = meta.spec.family.clone();
    let evaluated = meta.evaluation.as_ref().is_some_and(|e| !e.final_only);
    let stored = dir.join(HELD_OUT_FILE);
    let held_out = if !evaluated {
        Vec::new()
    } else if stored.exists() {
        let text = std::fs::read_to_string(&stored)
            .map_err(|e| PipelineError::Data(format!("{}: {e}", stored.display())))?;
        report::read_held_out(&text)
            .map_err(|e| PipelineError::Data(format!("{}: {e}", stored.display())))?
    } else {
        let seed = meta
            .evaluation
            .as_ref()
            .and_then(|e| e.seeds.first().copied())
            .unwrap_or(meta.config.seed);
        let config = TrainConfig {
            seed,
            ..meta.config.clone()
        };
        let members = config.ensemble.max(1) as u64;
        // The splits the model was evaluated on, in the order training ran them: the fixed
        // ones, the family's, then `--group-by`'s.
        let named = meta.evaluation.as_ref().map(|e| &e.splits);
        let group_by = named.into_iter().flat_map(|s| s.keys()).find_map(|k| {
            let fixed = Split::ALL.iter().any(|s| s.as_str() == k);
            k.strip_prefix("unseen_")
                .filter(|f| !fixed && Some(*f) != meta.spec.family.as_deref())
        });
        let splits = crate::eval::splits(group_by, meta.spec.family.as_deref());
        let total: u64 = splits
            .iter()
            .map(|&split| crate::eval::folds(split, &corpus, seed).len() as u64)
            .sum::<u64>()
            * members;
        progress.line(&format!(
            "{} has no {HELD_OUT_FILE}: running seed {seed}'s evaluation again for it (the \
             shipped ensemble is not refitted)",
            dir.display()
        ));
        progress.event(Event::Start {
            stage: "evaluate",
            total,
            unit: "members",
        });
        let mut fitted = 0;
        let e = evaluate_splits(&corpus, &config, &splits, |split, done, of| {
            let line = format!("seed {seed}: evaluated {} fold {done}/{of}", split.as_str());
            fitted += members;
            progress.line(&line);
            progress.event(Event::Step {
                done: fitted,
                now: &line,
            });
        })?;
        progress.event(Event::Finish);
        // With one seed, model.json's metrics are this evaluation's: the rerun must give them.
        if meta.evaluation.as_ref().is_some_and(|e| e.seeds.len() == 1)
            && serde_json::to_value(&e.table).ok() != serde_json::to_value(&meta.metrics).ok()
        {
            return Err(PipelineError::Data(format!(
                "{}: seed {seed}'s evaluation run again scores differently from model.json's \
                 metrics (another duet version or machine?); its figures would not show this \
                 model's evaluation",
                dir.display()
            )));
        }
        e.held_out
    };
    let matrix = report::matrix(&corpus, &meta.spec, &nets);
    let files = report::render(&meta, &held_out, Some(&matrix));
    let mut written = Vec::new();
    for (name, text) in &files {
        // Each file whole or not at all: written beside, then renamed over the old one.
        let path = dir.join(name);
        let part = dir.join(format!(".{name}.part"));
        std::fs::write(&part, text)
            .and_then(|()| std::fs::rename(&part, &path))
            .map_err(|e| PipelineError::Data(format!("{}: cannot write: {e}", path.display())))?;
        progress.line(&format!("wrote {}", path.display()));
        written.push(name.clone());
    }
    Ok(written)
}
