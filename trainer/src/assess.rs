//! `duet evaluate`: how a trained model does on datasets it may never have seen.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use duet_core::dataset::compose::{CompositionError, composition_errors};
use duet_core::dataset::{DatasetError, FeatureKind, META_FILE};
use serde::Serialize;

use crate::corpus::{Corpus, Trained};
use crate::eval::{self, mlp_scored};
use crate::pipeline::{PipelineError, load};
use duet_model::accuracy::{Metrics, Scored};
use duet_model::artifact;
use duet_model::encoding::SOLO_THROUGHPUT;
use duet_model::network::OUTPUTS;

/// Metrics of one device and mode (or `all`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Assessment {
    pub gpu: String,
    pub mode: String,
    pub metrics: Metrics,
}

/// How the model's pairwise predictions, composed by [`duet_model::group::RULE`], do on the measured groups
/// of one device, mode and size, beside the two rules composing the measured pairs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroupAssessment {
    pub gpu: String,
    pub mode: String,
    /// Jobs in the group.
    pub size: usize,
    /// The model composed (`rows`: jobs of successful groups).
    pub metrics: Metrics,
    /// Each rule on the measured pairs, over the jobs whose every pair was measured.
    pub baselines: Vec<CompositionError>,
}

/// The outcome of `duet evaluate`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub model: String,
    pub version: String,
    pub table: Vec<Assessment>,
    /// Groups of three or more jobs, where the datasets have them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<GroupAssessment>,
    /// What the model could not use or did not know, in words.
    pub warnings: Vec<String>,
}

/// Every feature the model encodes must be declared by each dataset with the same kind.
fn check_columns(
    spec: &duet_model::encoding::FeatureSpec,
    dir: &Path,
    declared: &BTreeMap<String, FeatureKind>,
) -> Result<(), DatasetError> {
    let expected = spec
        .numeric
        .iter()
        .filter(|f| f.name != SOLO_THROUGHPUT)
        .map(|f| (&f.name, FeatureKind::Numeric))
        .chain(
            spec.categorical
                .iter()
                .map(|c| (&c.name, FeatureKind::Categorical)),
        );
    for (name, kind) in expected {
        match declared.get(name) {
            Some(k) if *k == kind => {}
            Some(k) => {
                return Err(DatasetError::new(
                    dir.join(META_FILE),
                    format!(
                        "the model reads `{name}` as {}, the dataset declares it {}",
                        kind.as_str(),
                        k.as_str()
                    ),
                )
                .column("workload_features"));
            }
            None => {
                return Err(DatasetError::new(
                    dir.join(META_FILE),
                    format!(
                        "the model needs feature `{name}` ({}), the dataset does not declare it",
                        kind.as_str()
                    ),
                )
                .column("workload_features"));
            }
        }
    }
    Ok(())
}

/// Scores the model in `model_dir` on every feasible and infeasible pair of `data`.
pub fn evaluate(model_dir: &Path, data: &[PathBuf]) -> Result<Report, PipelineError> {
    let (meta, nets) = artifact::load(model_dir)?;
    let (datasets, data_info) = load(data)?;
    let mut warnings = Vec::new();
    for info in &data_info {
        if meta.data.iter().any(|d| d.fingerprint == info.fingerprint) {
            warnings.push(format!(
                "{}: the model was trained on this dataset; these figures are in-sample, not held out",
                info.path
            ));
        }
    }
    for (dir, d) in data.iter().zip(&datasets) {
        let declared: BTreeMap<String, FeatureKind> = d
            .meta
            .workload_features
            .iter()
            .map(|f| (f.name.clone(), f.kind))
            .collect();
        check_columns(&meta.spec, dir, &declared)?;
        for name in declared.keys() {
            let used = meta.spec.numeric.iter().any(|f| &f.name == name)
                || meta.spec.categorical.iter().any(|c| &c.name == name);
            if !used {
                warnings.push(format!(
                    "{}: feature `{name}` is not used by the model",
                    dir.display()
                ));
            }
        }
        if !meta.spec.gpus.contains(&d.meta.provenance.gpu) {
            warnings.push(format!(
                "{}: device `{}` was not in the training data; encoded as unknown",
                dir.display(),
                d.meta.provenance.gpu
            ));
        }
        for mode in &d.meta.modes {
            if !meta.spec.modes.contains(mode) {
                warnings.push(format!(
                    "{}: mode `{mode}` was not in the training data; its predictions are extrapolation",
                    dir.display()
                ));
            }
        }
    }
    let corpus = Corpus::new(datasets);
    let trained = Trained {
        spec: meta.spec.clone(),
        nets,
        outcomes: meta.training.clone(),
        calibration: meta.calibration.clone(),
    };
    let rows: Vec<usize> = (0..corpus.examples.len()).collect();
    let batch = corpus.encode(&trained.spec, &rows);
    let mut out = trained.forward(&batch.inputs);
    // As the server answers: a new family's weighed with the model's prior.
    let shifts = trained.decode(&batch.inputs, &mut out);
    let mut groups: BTreeMap<(String, String), Vec<Scored>> = BTreeMap::new();
    for (k, e) in corpus.examples.iter().enumerate() {
        let s = mlp_scored(&out[k * OUTPUTS..(k + 1) * OUTPUTS], e.speed, shifts[k]);
        for key in eval::metric_groups(e) {
            groups.entry(key).or_default().push(s);
        }
    }
    let table = groups
        .into_iter()
        .map(|((gpu, mode), rows)| Assessment {
            gpu,
            mode,
            metrics: Metrics::of(&rows),
        })
        .collect();
    let group_table = assess_groups(&corpus, &trained);
    Ok(Report {
        model: meta.name,
        version: meta.version,
        table,
        groups: group_table,
        warnings,
    })
}

/// Every successful group of the corpus: its pairs predicted as the corpus's rows are, composed
/// (with the model's group effects and shift where it has them for the size), or the network's
/// own answer for the sizes it learned, scored against the measured speeds, beside the two
/// rules on the measured pairs.
fn assess_groups(corpus: &Corpus, trained: &Trained) -> Vec<GroupAssessment> {
    let mut baselines: BTreeMap<(String, String, usize), Vec<CompositionError>> = BTreeMap::new();
    for d in corpus.datasets.iter().filter(|d| !d.groups.is_empty()) {
        for b in composition_errors(d) {
            let key = (b.gpu.clone(), b.mode.to_string(), b.size);
            baselines.entry(key).or_default().push(b);
        }
    }
    let mut rows: BTreeMap<(String, String, usize), Vec<Scored>> = BTreeMap::new();
    for (gpu, mode, size, measured, speed, p10) in crate::groups::network_answered(corpus, trained)
    {
        let s = Scored {
            speed: Some(measured),
            predicted: speed,
            conservative: Some(p10),
            feasible: None,
        };
        for key in [
            (gpu.clone(), mode.to_string(), size),
            ("all".to_string(), "all".to_string(), size),
        ] {
            rows.entry(key).or_default().push(s);
        }
    }
    for job in crate::groups::scored(corpus, trained) {
        if trained.calibration.network_answers(job.size) {
            continue;
        }
        let calibration = &trained.calibration;
        let shift = calibration.group_shift(job.size).map_or(0.0, |s| s.0);
        let moved = calibration
            .group_effect(job.size, &job.gpu, &job.workload)
            .exp();
        let point = job.point * moved;
        let s = Scored {
            speed: Some(job.measured),
            predicted: point,
            conservative: Some(duet_model::group::shifted_p10(
                job.ln_p10.exp() * moved,
                point,
                shift,
            )),
            feasible: None,
        };
        for key in [
            (job.gpu.clone(), job.mode.to_string(), job.size),
            ("all".to_string(), "all".to_string(), job.size),
        ] {
            rows.entry(key).or_default().push(s);
        }
    }
    rows.into_iter()
        .map(|((gpu, mode, size), rows)| {
            let key = (gpu.clone(), mode.clone(), size);
            GroupAssessment {
                baselines: baselines.get(&key).cloned().unwrap_or_default(),
                gpu,
                mode,
                size,
                metrics: Metrics::of(&rows),
            }
        })
        .collect()
}
