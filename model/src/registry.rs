//! The workload registry in memory: solo profiles by id, so the pricing loop sends ids instead
//! of features.
//!
//! It starts with the workloads of the model's training datasets (`source: dataset:<name>`);
//! clients add, replace and delete entries (`source: client`). Each entry keeps its profiles
//! encoded for the loaded model; a reload re-encodes them all. Where client entries are stored
//! durably is the caller's business: the server writes them to its store, then `apply`s each
//! change here in sequence order (its own and other replicas').

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use duet_core::Dataset;
use duet_core::api::{FeatureInput, Features, RegisteredWorkload, WorkloadBody};
use duet_core::dataset::FeatureValue;

use crate::encoding::SOLO_THROUGHPUT;
use crate::error::ModelError;
use crate::layered::Layered;
use crate::loaded::LoadedModel;

pub const SOURCE_CLIENT: &str = "client";

/// The longest workload id accepted.
pub const MAX_ID: usize = 200;

/// One workload with its profiles encoded for the loaded model, by device (a short list: a
/// scan beats hashing).
#[derive(Debug, Clone)]
pub struct Entry {
    pub registered: RegisteredWorkload,
    pub encoded: Vec<(String, Box<[f32]>)>,
}

impl Entry {
    /// The encoded profile on `gpu`.
    pub fn encoded(&self, gpu: &str) -> Option<&[f32]> {
        self.encoded
            .iter()
            .find(|(g, _)| g == gpu)
            .map(|(_, e)| &e[..])
    }
}

/// The registry in memory. Cloned to build the next version of a server's registry aside
/// while the current one keeps answering.
#[derive(Debug, Default, Clone)]
pub struct Registry {
    /// The model's dataset workloads, as loaded (shared by every copy).
    seeds: Arc<BTreeMap<String, RegisteredWorkload>>,
    /// What is registered now: the dataset workloads not deleted, and the client entries over
    /// them. Cheap to copy (`Layered`): the server copies the registry on every write.
    entries: Layered<Arc<Entry>>,
}

impl Registry {
    /// The registry for `model`: its datasets' workloads, then the client entries over them.
    pub fn build(
        model: &LoadedModel,
        client: BTreeMap<String, Option<WorkloadBody>>,
    ) -> (Registry, Vec<String>) {
        let (seeds, warnings) = seeds(model);
        let mut all: BTreeMap<String, RegisteredWorkload> = seeds.clone();
        for (id, body) in client {
            match body {
                Some(body) => {
                    let entry = client_entry(&id, body);
                    all.insert(id, entry);
                }
                None => {
                    all.remove(&id);
                }
            }
        }
        let entries = all
            .into_values()
            .map(|w| (w.workload.clone(), Arc::new(encode(model, w))))
            .collect();
        let registry = Registry {
            seeds: Arc::new(seeds),
            entries,
        };
        (registry, warnings)
    }

    /// The same client entries, re-encoded for a new model and its datasets.
    pub fn rebuild(&self, model: &LoadedModel) -> (Registry, Vec<String>) {
        Registry::build(model, self.client())
    }

    /// The client entries (`Some`) and the deleted dataset workloads (`None`): what a registry
    /// for another model is built over.
    pub fn client(&self) -> BTreeMap<String, Option<WorkloadBody>> {
        let mut client: BTreeMap<String, Option<WorkloadBody>> = self
            .entries
            .values()
            .filter(|e| e.registered.source == SOURCE_CLIENT)
            .map(|e| {
                (
                    e.registered.workload.clone(),
                    Some(e.registered.body.clone()),
                )
            })
            .collect();
        for id in self.seeds.keys() {
            if !self.entries.contains_key(id) {
                client.insert(id.clone(), None);
            }
        }
        client
    }

    pub fn get(&self, id: &str) -> Option<&Entry> {
        self.entries.get(id).map(|e| &**e)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Every entry, by id.
    pub fn list(&self) -> Vec<&RegisteredWorkload> {
        let mut all: Vec<&RegisteredWorkload> =
            self.entries.values().map(|e| &e.registered).collect();
        all.sort_by(|a, b| a.workload.cmp(&b.workload));
        all
    }

    /// Whether `id` is one of the model's dataset workloads (deleting it leaves a tombstone).
    pub fn is_seed(&self, id: &str) -> bool {
        self.seeds.contains_key(id)
    }

    /// Checks `body` for `id` against `model` without changing anything: what a registration must pass.
    pub fn check(model: &LoadedModel, id: &str, body: &WorkloadBody) -> Result<(), ModelError> {
        check_id(id)?;
        check_body(model, body)
    }

    /// Applies a stored change without checking it (it was checked when it was written,
    /// perhaps by another replica): `Some` registers or replaces `id`, `None` deletes it (nothing
    /// to do when it does not exist). A profile this model cannot read keeps its raw form.
    pub fn apply(&mut self, model: &LoadedModel, id: &str, body: Option<WorkloadBody>) {
        match body {
            Some(body) => {
                let registered = client_entry(id, body);
                self.entries
                    .insert(id.to_string(), Arc::new(encode(model, registered)));
            }
            None => self.entries.remove(id),
        }
    }
}

/// A client's registration of `body` as `id`, as the registry lists it.
pub fn client_entry(id: &str, body: WorkloadBody) -> RegisteredWorkload {
    RegisteredWorkload {
        workload: id.to_string(),
        source: SOURCE_CLIENT.to_string(),
        body,
    }
}

/// Whether `id` may name a workload (or an observation): 1 to `MAX_ID` letters, digits and
/// `- _ . : +`, not dots alone (`.` and `..` are path steps a URL's `/v1/workloads/{id}` loses
/// to normalisation).
pub fn is_valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_ID
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':' | '+'))
        && !id.chars().all(|c| c == '.')
}

fn check_id(id: &str) -> Result<(), ModelError> {
    if is_valid_id(id) {
        Ok(())
    } else {
        Err(ModelError::field(
            "id",
            format!(
                "workload id `{id}` must be 1 to {MAX_ID} characters of letters, digits and - _ . : +, not dots alone"
            ),
        ))
    }
}

fn check_body(model: &LoadedModel, body: &WorkloadBody) -> Result<(), ModelError> {
    if body.profiles.is_empty() {
        return Err(ModelError::field(
            "profiles",
            "no profile: give the solo features measured on at least one device",
        ));
    }
    for (gpu, features) in &body.profiles {
        if gpu.trim().is_empty() {
            return Err(ModelError::field("profiles", "a device name is empty"));
        }
        model.job_features(features, &format!("profiles.{gpu}"))?;
    }
    Ok(())
}

/// Encodes every profile of `w` for `model`. A profile the model cannot read (a client entry
/// from before a reload that changed the features) keeps its raw form and is reported at
/// prediction time.
fn encode(model: &LoadedModel, w: RegisteredWorkload) -> Entry {
    let encoded = w
        .body
        .profiles
        .iter()
        .filter_map(|(gpu, features)| {
            let job = model.job_features(features, "").ok()?;
            Some((
                gpu.clone(),
                model.encode_registered(&w.workload, job).into_boxed_slice(),
            ))
        })
        .collect();
    Entry {
        registered: w,
        encoded,
    }
}

/// The workloads of the model's training datasets, with their profile on each device.
fn seeds(model: &LoadedModel) -> (BTreeMap<String, RegisteredWorkload>, Vec<String>) {
    let mut out: BTreeMap<String, RegisteredWorkload> = BTreeMap::new();
    let mut warnings = Vec::new();
    let used: BTreeSet<String> = model.feature_names().into_iter().collect();
    for data in &model.meta.data {
        let Some(dir) = locate(&model.dir, &data.path) else {
            warnings.push(format!(
                "dataset `{}` ({}) not found next to the model or the working directory; its \
                 workloads are not registered",
                data.name, data.path
            ));
            continue;
        };
        let dataset = match Dataset::read(&dir) {
            Ok(d) => d,
            Err(e) => {
                warnings.push(format!("dataset `{}`: {e}", data.name));
                continue;
            }
        };
        for w in &dataset.workloads {
            let mut features: Features = w
                .features
                .iter()
                .filter(|(name, _)| used.contains(*name))
                .map(|(name, v)| {
                    let input = match v {
                        FeatureValue::Number(Some(x)) => FeatureInput::Number(*x),
                        FeatureValue::Category(Some(c)) => FeatureInput::Text(c.clone()),
                        _ => FeatureInput::Null,
                    };
                    (name.as_str().into(), input)
                })
                .collect();
            for name in &used {
                if !features.contains_key(name) {
                    features.insert(name.as_str().into(), FeatureInput::Null);
                }
            }
            features.insert(
                SOLO_THROUGHPUT.into(),
                FeatureInput::Number(w.solo_throughput),
            );
            let entry = out
                .entry(w.workload.clone())
                .or_insert_with(|| RegisteredWorkload {
                    workload: w.workload.clone(),
                    source: format!("dataset:{}", data.name),
                    body: WorkloadBody {
                        kind: Some(w.kind),
                        profiles: BTreeMap::new(),
                    },
                });
            let tag = format!("dataset:{}", data.name);
            if !entry.source.split(',').any(|s| s == tag) {
                entry.source = format!("{},{tag}", entry.source);
            }
            entry
                .body
                .profiles
                .insert(dataset.meta.provenance.gpu.clone(), features);
        }
    }
    (out, warnings)
}

/// A training dataset's folder: as recorded, else under the working directory, else under
/// one of the model folder's ancestors.
fn locate(model_dir: &Path, recorded: &str) -> Option<PathBuf> {
    let recorded = Path::new(recorded);
    let candidates = std::iter::once(recorded.to_path_buf())
        .chain(model_dir.ancestors().map(|a| a.join(recorded)));
    candidates
        .into_iter()
        .find(|p| p.join(duet_core::dataset::META_FILE).is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_is_refused_where_a_url_could_not_address_it() {
        for good in ["a", "resnet-50:bs64", "v1.2", ".hidden", "a..b", "x+y_z"] {
            assert!(is_valid_id(good), "{good}");
        }
        // `.` and `..` are path steps clients normalise away; spaces and slashes need escapes.
        let long = "a".repeat(MAX_ID + 1);
        for bad in ["", ".", "..", "...", "a b", "a/b", long.as_str()] {
            assert!(!is_valid_id(bad), "{bad}");
        }
        assert!(check_id("..").is_err_and(|e| e.message.contains("not dots alone")));
    }
}
