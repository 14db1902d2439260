//! A model folder loaded for serving: its metadata, an engine, and the rules that turn a client's
//! features into the model's inputs.

use std::path::{Path, PathBuf};

use crate::artifact::{self, ModelMeta};
use crate::encoding::{IDENTITY, JobFeatures, SOLO_THROUGHPUT};
use crate::engine::{BurnEngine, Engine, EngineKind, OnnxEngine};
use crate::error::ModelError;
use crate::network::OUTPUTS;
use duet_core::api::{FeatureInput, Features};
use duet_core::dataset::validate::MAX_RATE;
use duet_core::dataset::{FeatureValue, Mode};

/// How far the ONNX engine may stray from Burn on the probe batch before a model is refused.
const ENGINE_AGREEMENT: f32 = 1e-3;

/// A model ready to answer: loaded, run once on a probe batch, its outputs checked.
#[derive(Debug)]
pub struct LoadedModel {
    pub meta: ModelMeta,
    pub dir: PathBuf,
    pub engine: Box<dyn Engine>,
    /// Unix seconds when it was loaded.
    pub loaded_at: u64,
    /// The feature names clients may send, sorted, for checking a job's features in one pass.
    accepted: crate::compat::Accepted,
}

impl LoadedModel {
    /// Loads the artifact at `dir`, builds the engine and checks it on a probe batch; nothing
    /// half-loaded ever comes back.
    pub fn load(dir: &Path, kind: EngineKind) -> Result<LoadedModel, String> {
        let (meta, nets) = artifact::load(dir).map_err(|e| e.to_string())?;
        if !meta.calibration.group_network.is_empty() && !meta.spec.groups {
            return Err(format!(
                "{}: calibration.group_network names group sizes the network answers, but \
                 spec.groups says it never learned groups",
                dir.join(artifact::MODEL_JSON).display()
            ));
        }
        let width = meta.spec.pair_width();
        let burn = BurnEngine::new(nets, width);
        let probe = probe_batch(&meta);
        let reference = burn.run(probe.clone())?;
        check_outputs(&reference, probe.len() / width, "Burn")?;
        let engine: Box<dyn Engine> = match kind {
            EngineKind::Burn => Box::new(burn),
            EngineKind::Onnx => {
                let onnx = OnnxEngine::load(dir, width)?;
                let got = onnx.run(probe.clone())?;
                check_outputs(&got, probe.len() / width, "ONNX Runtime")?;
                let worst = reference
                    .iter()
                    .zip(&got)
                    .map(|(r, g)| (r - g).abs())
                    .fold(0.0f32, f32::max);
                if worst > ENGINE_AGREEMENT {
                    return Err(format!(
                        "{}: ONNX Runtime differs from the Burn records by {worst} on the probe \
                         batch (at most {ENGINE_AGREEMENT} allowed)",
                        dir.join(artifact::ONNX_FILE).display()
                    ));
                }
                Box::new(onnx)
            }
        };
        let loaded_at = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        Ok(LoadedModel {
            accepted: crate::compat::Accepted::of(&meta.spec),
            meta,
            dir: dir.to_path_buf(),
            engine,
            loaded_at,
        })
    }

    pub fn version(&self) -> &str {
        &self.meta.version
    }

    /// The feature names a client may send: the model's inputs, and dataset columns the
    /// trainer found no signal in (accepted, unused).
    pub fn knows_feature(&self, name: &str) -> bool {
        self.accepted.role(name).is_some()
    }

    /// How many feature names a client may send (`knows_feature`): a job's map with more
    /// entries than this holds an unknown name or one given twice.
    pub fn accepted_feature_count(&self) -> usize {
        self.accepted.count()
    }

    /// A client's features as the model's job features, checked (`check_features`).
    pub fn job_features(
        &self,
        features: &Features,
        field: &str,
    ) -> Result<JobFeatures, ModelError> {
        use crate::compat::Role;
        self.check_features(features, field)?;
        let mut job = JobFeatures::new();
        let roles = self.accepted.roles(features.keys().map(|n| n.as_str()));
        for ((name, role), value) in roles.zip(features.values()) {
            // Checked above: every name is accepted; an unused one is not the model's.
            let numeric = match role {
                Some(Role::Numeric) => true,
                Some(Role::Categorical) => false,
                Some(Role::Unused) | None => continue,
            };
            let value = match value {
                FeatureInput::Number(v) => FeatureValue::Number(Some(*v)),
                FeatureInput::Text(v) => FeatureValue::Category(Some(v.clone())),
                FeatureInput::Null if numeric => FeatureValue::Number(None),
                FeatureInput::Null => FeatureValue::Category(None),
            };
            job.insert(name.to_string(), value);
        }
        Ok(job)
    }

    /// Checks a client's features: every feature the model uses present (`null` where not
    /// measured), no unknown name, numbers where numbers belong, `solo_throughput` a positive
    /// number. A dataset column the trainer found no signal in is accepted, unused. `field`
    /// prefixes the paths of errors.
    pub fn check_features(&self, features: &Features, field: &str) -> Result<(), ModelError> {
        self.check_features_at(features, &|| field.to_string())
    }

    /// `check_features` with the errors' path prefix written only for an error.
    pub fn check_features_at(
        &self,
        features: &Features,
        field: &dyn Fn() -> String,
    ) -> Result<(), ModelError> {
        use crate::compat::Role;
        let mut required = 0;
        // The map's names and the accepted ones, both sorted, walked once together.
        let roles = self.accepted.roles(features.keys().map(|n| n.as_str()));
        for ((name, role), value) in roles.zip(features.values()) {
            let numeric = match role {
                None => {
                    return Err(ModelError::field(
                        format!("{}.{name}", field()),
                        format!(
                            "unknown feature `{name}`; this model knows {}",
                            self.feature_names().join(", ")
                        ),
                    ));
                }
                // A dataset column the trainer found no signal in: accepted as measured (a
                // number where the dataset had numbers), unused.
                Some(Role::Unused) => continue,
                Some(Role::Numeric) => true,
                Some(Role::Categorical) => false,
            };
            required += 1;
            match (value, numeric) {
                (FeatureInput::Text(_), true) => {
                    return Err(ModelError::field(
                        format!("{}.{name}", field()),
                        format!("`{name}` is numeric: send a number or null"),
                    ));
                }
                (FeatureInput::Number(_), false) => {
                    return Err(ModelError::field(
                        format!("{}.{name}", field()),
                        format!("`{name}` is categorical: send a string or null"),
                    ));
                }
                // A log-scaled feature has no encoding at 0 or below: it would be read as
                // missing without a word (the solo throughput has its own rule below).
                (FeatureInput::Number(v), true)
                    if *v <= 0.0
                        && name != SOLO_THROUGHPUT
                        && self
                            .meta
                            .spec
                            .numeric
                            .iter()
                            .any(|f| f.log && f.name == name) =>
                {
                    return Err(ModelError::field(
                        format!("{}.{name}", field()),
                        format!(
                            "`{name}` is on a log scale in this model: give a value above 0 (or \
                             null where it is not known), got {v}"
                        ),
                    ));
                }
                _ => {}
            }
        }
        match features.get(SOLO_THROUGHPUT) {
            // Past it, its ratios to ordinary rates leave the range the model answers in (a
            // p90 below its slowdown by f32 rounding).
            Some(FeatureInput::Number(v)) if *v > MAX_RATE => {
                return Err(ModelError::field(
                    format!("{}.{SOLO_THROUGHPUT}", field()),
                    format!(
                        "{SOLO_THROUGHPUT} {v:e} is more than the {MAX_RATE:e} a second any \
                         measurement gives"
                    ),
                ));
            }
            Some(FeatureInput::Number(v)) if *v > 0.0 => {}
            Some(FeatureInput::Number(v)) => {
                return Err(ModelError::field(
                    format!("{}.{SOLO_THROUGHPUT}", field()),
                    format!("{SOLO_THROUGHPUT} must be positive, got {v}"),
                ));
            }
            _ => {
                return Err(ModelError::field(
                    format!("{}.{SOLO_THROUGHPUT}", field()),
                    format!(
                        "missing feature `{SOLO_THROUGHPUT}` (iterations per second alone on the \
                         pair's device)"
                    ),
                ));
            }
        }
        // Every required name was met above where as many were; otherwise the first missing.
        if let Some(name) = (required < self.accepted.required())
            .then(|| {
                crate::compat::feature_name_refs(&self.meta.spec)
                    .find(|n| !features.contains_key(n))
            })
            .flatten()
        {
            return Err(ModelError::field(
                format!("{}.{name}", field()),
                format!("missing feature `{name}` (send null if it was not measured)"),
            ));
        }
        Ok(())
    }

    /// The features the model uses, `solo_throughput` first.
    pub fn feature_names(&self) -> Vec<String> {
        crate::compat::feature_names(&self.meta.spec)
    }

    /// The encoding of a registered workload's profile (its id marks it as a training
    /// workload where it is one).
    pub fn encode_registered(&self, id: &str, mut job: JobFeatures) -> Vec<f32> {
        job.insert(
            IDENTITY.to_string(),
            FeatureValue::Category(Some(id.to_string())),
        );
        let mut out = Vec::with_capacity(self.meta.spec.job_width());
        self.meta.spec.encode_job(&job, &mut out);
        out
    }

    /// The modes the model was trained on, for error messages.
    pub fn modes(&self) -> String {
        let names: Vec<&str> = self.meta.spec.modes.iter().map(|m| m.as_str()).collect();
        names.join(", ")
    }

    pub fn knows_mode(&self, mode: Mode) -> bool {
        self.meta.spec.modes.contains(&mode)
    }
}

/// A few pairs covering every device and mode the model knows, with missing and present
/// features, so a model is exercised before it serves.
fn probe_batch(meta: &ModelMeta) -> Vec<f32> {
    let spec = &meta.spec;
    let empty = JobFeatures::new();
    let mut typical = JobFeatures::new();
    for f in &spec.numeric {
        let x = if f.log { f.mean.exp() } else { f.mean };
        typical.insert(f.name.clone(), FeatureValue::Number(Some(x)));
    }
    for c in &spec.categorical {
        if let Some(v) = c.vocabulary.first() {
            typical.insert(c.name.clone(), FeatureValue::Category(Some(v.clone())));
        }
    }
    let mut out = Vec::new();
    let gpus = spec.gpus.iter().map(String::as_str).chain(["unseen"]);
    for gpu in gpus {
        for &mode in &spec.modes {
            for (a, b) in [(&typical, &empty), (&empty, &typical), (&typical, &typical)] {
                spec.encode_pair(a, b, gpu, mode, Some(50.0), Some(50.0), &mut out);
            }
        }
    }
    out
}

fn check_outputs(outputs: &[f32], rows: usize, engine: &str) -> Result<(), String> {
    if outputs.len() != rows * OUTPUTS {
        return Err(format!(
            "{engine} returned {} outputs for {rows} probe rows",
            outputs.len()
        ));
    }
    if let Some(bad) = outputs.iter().find(|v| !v.is_finite()) {
        return Err(format!(
            "{engine} returned a non-finite output ({bad}) on the probe batch"
        ));
    }
    Ok(())
}
