//! `duet train` end to end: read datasets, evaluate on every split, fit the final model, write
//! the artifact.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use duet_core::dataset::{Dataset, DatasetError};

use crate::corpus::{Corpus, Trained};
use crate::eval::{Split, evaluate};
use duet_model::artifact::{
    self, ArtifactError, FORMAT, ModelMeta, TrainingData, fingerprint, fnv1a,
};
use duet_model::network::{OUT_LOG_SPEED, OUTPUTS, TrainConfig};

use crate::report::{self, Matrix};
use crate::training::TrainError;

#[derive(Debug, Clone)]
pub struct TrainOptions {
    pub data: Vec<PathBuf>,
    pub out: PathBuf,
    pub name: String,
    pub config: TrainConfig,
    /// Date for `model.json`, YYYY-MM-DD.
    pub created: String,
}

#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    #[error(transparent)]
    Dataset(#[from] DatasetError),
    #[error("{0}")]
    Data(String),
    #[error(transparent)]
    Train(#[from] TrainError),
    #[error(transparent)]
    Artifact(#[from] ArtifactError),
}

/// What happened, for the command to print.
#[derive(Debug, Clone)]
pub struct TrainSummary {
    pub meta: ModelMeta,
    pub warnings: Vec<String>,
}

fn check_usable(dir: &Path, d: &Dataset) -> Result<(), PipelineError> {
    let problem = if d.pairs.is_empty() {
        Some("has no pairs: nothing to learn from")
    } else if d.workloads.len() < 2 {
        Some("has a single workload: at least two are needed to learn interference")
    } else if !d.pairs.iter().any(|p| p.status == duet_core::Status::Ok) {
        Some("has no feasible pair (every pair is oom, crash or timeout): no speed to learn")
    } else {
        None
    };
    match problem {
        Some(p) => Err(PipelineError::Data(format!(
            "{}: dataset {p}",
            dir.display()
        ))),
        None => Ok(()),
    }
}

/// Reads and checks the datasets of `paths`.
pub fn load(paths: &[PathBuf]) -> Result<(Vec<Dataset>, Vec<TrainingData>), PipelineError> {
    if paths.is_empty() {
        return Err(PipelineError::Data(
            "--data: name at least one dataset".into(),
        ));
    }
    let mut datasets = Vec::new();
    let mut data = Vec::new();
    for dir in paths {
        let d = Dataset::read(dir)?;
        check_usable(dir, &d)?;
        data.push(TrainingData {
            name: d.meta.name.clone(),
            path: dir.display().to_string(),
            gpu: d.meta.provenance.gpu.clone(),
            fingerprint: fingerprint(dir)
                .map_err(|e| PipelineError::Data(format!("{}: {e}", dir.display())))?,
            workloads: d.workloads.len(),
            pairs: d.pairs.len(),
        });
        datasets.push(d);
    }
    Ok((datasets, data))
}

/// The measured and predicted speed matrices of the first dataset, for the heatmap.
fn matrix(corpus: &Corpus, trained: &Trained) -> Matrix {
    let d = &corpus.datasets[0];
    let ids: Vec<String> = d.workloads.iter().map(|w| w.workload.clone()).collect();
    let index: BTreeMap<&str, usize> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| (id.as_str(), i))
        .collect();
    let n = ids.len();
    let mut measured = vec![vec![None; n]; n];
    let mut predicted = vec![vec![None; n]; n];
    let rows: Vec<usize> = (0..corpus.examples.len())
        .filter(|&i| corpus.examples[i].dataset == 0)
        .collect();
    let out = trained.outputs(corpus, &rows);
    for (k, &i) in rows.iter().enumerate() {
        let e = &corpus.examples[i];
        let (a, b) = (index[e.a.as_str()], index[e.b.as_str()]);
        measured[a][b] = e.speed;
        predicted[a][b] = e
            .speed
            .map(|_| f64::from(out[k * OUTPUTS + OUT_LOG_SPEED]).exp());
    }
    Matrix {
        title: format!(
            "Speed of the row job next to the column job, {} ({}): measured, and predicted by the final model",
            d.meta.name, d.meta.provenance.gpu
        ),
        ids,
        measured,
        predicted,
    }
}

/// Trains, evaluates and writes the artifact. `progress` hears one line per step.
pub fn run(
    options: &TrainOptions,
    mut progress: impl FnMut(&str),
) -> Result<TrainSummary, PipelineError> {
    duet_core::atomic::refuse_existing(&options.out, |p, m| {
        PipelineError::Data(format!("{}: {m}", p.display()))
    })?;
    let (datasets, data) = load(&options.data)?;
    let corpus = Corpus::new(datasets);
    progress(&format!(
        "{} directed rows from {} dataset(s)",
        corpus.examples.len(),
        data.len()
    ));
    let evaluation = evaluate(&corpus, &options.config, |split: Split, done, total| {
        progress(&format!("evaluated {} fold {done}/{total}", split.as_str()));
    })?;
    let all: Vec<usize> = (0..corpus.examples.len()).collect();
    let trained = corpus.train(&all, &options.config)?;
    for (k, o) in trained.outcomes.iter().enumerate() {
        progress(&format!(
            "final model, member {k}: {} epochs, best {}",
            o.epochs, o.best_epoch
        ));
    }
    let mut warnings: Vec<String> = trained
        .spec
        .dropped
        .iter()
        .map(|d| format!("feature left out: {d}"))
        .collect();
    if trained.spec.numeric.len() + trained.spec.categorical.len() <= 1 {
        warnings.push(
            "only solo throughput describes the jobs; expect weak unseen-workload accuracy".into(),
        );
    }
    let config_json = serde_json::to_string(&options.config).unwrap_or_default();
    let mut hash = fnv1a(config_json.as_bytes(), artifact::FNV_OFFSET);
    for d in &data {
        hash = fnv1a(d.fingerprint.as_bytes(), hash);
    }
    let duet_version = env!("CARGO_PKG_VERSION").to_string();
    let meta = ModelMeta {
        format: FORMAT.to_string(),
        name: options.name.clone(),
        version: format!("{duet_version}+{hash:016x}"),
        duet_version,
        created: options.created.clone(),
        target_transform: "ln(speed)".to_string(),
        outputs: vec![
            "ln(speed of a)".to_string(),
            "ln(p10 speed of a) = -ln(p90 slowdown of a)".to_string(),
            "logit(pair is feasible)".to_string(),
        ],
        config: options.config.clone(),
        spec: trained.spec.clone(),
        data,
        training: trained.outcomes.clone(),
        folds: evaluation.folds.clone(),
        metrics: evaluation.table.clone(),
    };
    let files = report::render(
        &meta,
        &evaluation.held_out,
        Some(&matrix(&corpus, &trained)),
    );
    artifact::write(&options.out, &meta, &trained.nets, &files)?;
    Ok(TrainSummary { meta, warnings })
}
