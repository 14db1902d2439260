//! The model artifact, a folder: `model.json` (everything needed to encode inputs and judge the
//! model), `member-<k>.mpk` (the Burn record of each ensemble member), `model.onnx` (the same
//! ensemble as an ONNX graph) and `report.md` with its figures. `model.json` lists the length
//! and digest of each network file, checked before the file is read.

use std::fs;
use std::path::{Path, PathBuf};

use burn::backend::Flex;
use burn::module::Module;
use burn::record::{FullPrecisionSettings, NamedMpkFileRecorder};
use serde::{Deserialize, Serialize};

use crate::accuracy::MetricsRow;
use crate::calibration::Calibration;
use crate::encoding::FeatureSpec;
use crate::network::{Mlp, Rng, TrainConfig, TrainOutcome, init};
use duet_core::dataset::TableDigest;

pub const MODEL_JSON: &str = "model.json";
/// The Burn record of ensemble member `k`, without the extension Burn's recorder adds.
pub fn record_stem(k: usize) -> String {
    format!("member-{k}")
}

/// The file Burn writes for [`record_stem`].
pub fn record_file(k: usize) -> String {
    format!("member-{k}.mpk")
}
pub const REPORT_FILE: &str = "report.md";
pub const ONNX_FILE: &str = "model.onnx";
pub const FORMAT: &str = "duet-model/1";

/// A dataset the model was trained on, with a fingerprint of its files.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainingData {
    pub name: String,
    pub path: String,
    pub gpu: String,
    /// FNV-1a 64 of `dataset.json`, `workloads.parquet` and `pairs.parquet`, in that order.
    pub fingerprint: String,
    pub workloads: usize,
    pub pairs: usize,
}

/// The contents of `model.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelMeta {
    pub format: String,
    pub name: String,
    /// `<duet version>+<fingerprint of data, configuration, member outcomes and p90 shifts>`:
    /// changes whenever any of them does (models written before the outcomes and shifts were
    /// included fingerprint data and configuration alone).
    pub version: String,
    pub duet_version: String,
    pub created: String,
    /// The network predicts `ln(speed of a)`; speed = exp(output), slowdown = 1 / speed.
    pub target_transform: String,
    pub outputs: Vec<String>,
    pub config: TrainConfig,
    pub spec: FeatureSpec,
    pub data: Vec<TrainingData>,
    /// How training ended, per ensemble member.
    pub training: Vec<TrainOutcome>,
    pub folds: std::collections::BTreeMap<String, usize>,
    /// Mean over the evaluation's seeds (one seed: its values).
    pub metrics: Vec<MetricsRow>,
    /// The shifts of the p90 slowdown per kind of pair, applied at prediction time. Absent in a
    /// `model.json` from before them: both 0, as that model's conservative head already
    /// carries its single shift (so old folders still load and predict as before).
    #[serde(default)]
    pub calibration: Calibration,
    /// Where the metrics come from: the protocol, seeds and split definitions. Absent in older
    /// files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evaluation: Option<EvaluationInfo>,
    /// Standard deviation of every metric across the evaluation's seeds (same rows as
    /// `metrics`); empty with a single seed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub metrics_sd: Vec<MetricsRow>,
    /// The command line that wrote this model (`duet train ...`), to retrain it the same way.
    /// Absent in older files and where a library call, not the command, trained it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// Each network file (`member-<k>.mpk`, `model.onnx`) as [`write`] wrote it, by file name:
    /// checked by [`load`] before the file is decoded, so a damaged or changed network is
    /// named instead of served. Absent from models written before it (their files are read
    /// unchecked). Only writing and reading fill it: `write` lists the files it wrote whatever
    /// this holds, `load` checks them and leaves it empty, so a model's meta is the same
    /// whichever folder it came from.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub files: std::collections::BTreeMap<String, TableDigest>,
}

/// What `model.json`'s metrics are.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvaluationInfo {
    /// How the numbers were produced.
    pub protocol: String,
    /// The seeds of the evaluation: each draws its own folds and initial weights, and the
    /// out-of-fold scores of all of them calibrate the p90. The shipped networks are trained
    /// with the first (with `--final-only`, also its calibration hold-outs).
    pub seeds: Vec<u64>,
    /// Split name -> how its folds are formed.
    pub splits: std::collections::BTreeMap<String, String>,
    /// Trained with `--final-only`: no cross-validated evaluation was run, so `metrics` and
    /// `folds` are empty and nothing in the file measures accuracy. Absent (false) otherwise.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub final_only: bool,
}

pub use duet_core::hash::{FNV_OFFSET, fnv1a};

/// Fingerprint of a dataset folder's three files.
pub fn fingerprint(dir: &Path) -> std::io::Result<String> {
    let mut hash = FNV_OFFSET;
    for file in ["dataset.json", "workloads.parquet", "pairs.parquet"] {
        hash = fnv1a(&fs::read(dir.join(file))?, hash);
    }
    Ok(format!("{hash:016x}"))
}

/// Two of `dirs` that are one dataset, as (later, first, copied): the same folder by two paths,
/// or (`copied`) the same files in two folders, whose rows would count twice. A folder that
/// cannot be resolved or read is passed over (reading it says why).
pub fn given_twice(dirs: &[PathBuf]) -> Option<(usize, usize, bool)> {
    let mut seen: Vec<(Option<PathBuf>, Option<String>)> = Vec::new();
    for (k, dir) in dirs.iter().enumerate() {
        let folder = dir.canonicalize().ok();
        let print = fingerprint(dir).ok();
        for (first, (f, p)) in seen.iter().enumerate() {
            if folder.is_some() && *f == folder {
                return Some((k, first, false));
            }
            if print.is_some() && *p == print {
                return Some((k, first, true));
            }
        }
        seen.push((folder, print));
    }
    None
}

fn recorder() -> NamedMpkFileRecorder<FullPrecisionSettings> {
    NamedMpkFileRecorder::<FullPrecisionSettings>::new()
}

/// Why an artifact could not be written or read; always names the file.
#[derive(Debug, thiserror::Error)]
#[error("{}: {message}", path.display())]
pub struct ArtifactError {
    pub path: PathBuf,
    pub message: String,
}

fn err(path: &Path, message: impl Into<String>) -> ArtifactError {
    ArtifactError {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

/// Writes the artifact folder `out` atomically.
/// `files` are the report and its figures: (file name, contents).
pub fn write(
    out: &Path,
    meta: &ModelMeta,
    nets: &[Mlp<Flex>],
    files: &[(String, String)],
) -> Result<(), ArtifactError> {
    duet_core::atomic::write_folder(out, err, |dir| {
        let mut meta = meta.clone();
        meta.files.clear();
        for (k, net) in nets.iter().enumerate() {
            let path = dir.join(record_file(k));
            net.clone()
                .save_file(dir.join(record_stem(k)), &recorder())
                .map_err(|e| err(&path, e.to_string()))?;
            // The digest of the bytes Burn's recorder put on disk, read back.
            let written = fs::read(&path).map_err(|e| err(&path, e.to_string()))?;
            meta.files.insert(record_file(k), TableDigest::of(&written));
        }
        let onnx = crate::onnx::export(nets, meta.spec.pair_width(), &meta.version)
            .map_err(|e| err(&dir.join(ONNX_FILE), e))?;
        meta.files
            .insert(ONNX_FILE.to_string(), TableDigest::of(&onnx));
        fs::write(dir.join(ONNX_FILE), onnx)
            .map_err(|e| err(&dir.join(ONNX_FILE), e.to_string()))?;
        let mut json = serde_json::to_string_pretty(&meta).map_err(|e| err(dir, e.to_string()))?;
        json.push('\n');
        fs::write(dir.join(MODEL_JSON), json)
            .map_err(|e| err(&dir.join(MODEL_JSON), e.to_string()))?;
        for (name, contents) in files {
            let path = dir.join(name);
            fs::write(&path, contents).map_err(|e| err(&path, e.to_string()))?;
        }
        Ok(())
    })
}

/// Reads `model.json` and the networks it describes.
pub fn load(dir: &Path) -> Result<(ModelMeta, Vec<Mlp<Flex>>), ArtifactError> {
    let path = dir.join(MODEL_JSON);
    let text = duet_core::input::read_text(&path).map_err(|e| err(&path, e))?;
    let meta: ModelMeta =
        serde_json::from_str(&text).map_err(|e| err(&path, format!("invalid: {e}")))?;
    if meta.format != FORMAT {
        return Err(err(
            &path,
            format!("format is `{}`, this duet reads `{FORMAT}`", meta.format),
        ));
    }
    if meta.training.is_empty() {
        return Err(err(&path, "`training` lists no ensemble member"));
    }
    check_files(dir, &meta)?;
    let mut meta = meta;
    meta.files.clear();
    let device = Default::default();
    let mut nets = Vec::with_capacity(meta.training.len());
    for k in 0..meta.training.len() {
        let skeleton: Mlp<Flex> = init(
            meta.spec.pair_width(),
            &meta.config.hidden,
            &mut Rng::new(0),
            &device,
        );
        let shapes = |net: &Mlp<Flex>| -> Vec<([usize; 2], [usize; 1])> {
            net.layers
                .iter()
                .map(|l| (l.weight.val().dims(), l.bias.val().dims()))
                .collect()
        };
        let expected = shapes(&skeleton);
        let net = skeleton
            .load_file(dir.join(record_stem(k)), &recorder(), &device)
            .map_err(|e| {
                err(
                    &dir.join(record_file(k)),
                    format!("cannot load the Burn record: {e}"),
                )
            })?;
        // The record's tensors replace the skeleton's whatever their shapes: a member of another
        // model (or a model.json edited) is refused here, not by a panic at the first answer.
        let found = shapes(&net);
        if found != expected {
            let widths = |s: &[([usize; 2], [usize; 1])]| {
                s.iter()
                    .map(|(w, _)| format!("{}x{}", w[0], w[1]))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            return Err(err(
                &dir.join(record_file(k)),
                format!(
                    "its layers are {}, where model.json's features and hidden sizes make {}: \
                     a member of another model?",
                    widths(&found),
                    widths(&expected)
                ),
            ));
        }
        nets.push(net);
    }
    Ok((meta, nets))
}

/// Checks each file `meta.files` lists against its digest before anything decodes it: a
/// listed name must be a member of this model or `model.onnx`.
fn check_files(dir: &Path, meta: &ModelMeta) -> Result<(), ArtifactError> {
    let path = dir.join(MODEL_JSON);
    let members = meta.training.len();
    for (name, digest) in &meta.files {
        let known = name == ONNX_FILE || (0..members).any(|k| *name == record_file(k));
        if !known {
            return Err(err(
                &path,
                format!(
                    "`files` lists `{name}`, which is not a network file of this model \
                     ({ONNX_FILE}, {} to {})",
                    record_file(0),
                    record_file(members - 1)
                ),
            ));
        }
        if !digest.is_well_formed() {
            return Err(err(
                &path,
                format!("`files`: `{name}`: fnv1a must be 16 lowercase hexadecimal digits"),
            ));
        }
        let file = dir.join(name);
        let bytes = fs::read(&file).map_err(|e| {
            err(
                &file,
                format!(
                    "cannot read: {e} (model.json `files` lists it: restore it, or delete its \
                     entry where it is left out on purpose)"
                ),
            )
        })?;
        digest
            .check_listed(&bytes, MODEL_JSON, "files")
            .map_err(|message| err(&file, message))?;
    }
    Ok(())
}
