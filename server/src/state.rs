//! The server's shared state: its configuration, the serving model with the registry encoded
//! for it (swapped together), the durable store, the metrics, and the model's lifecycle (load,
//! probe, warm-up, reload). Registry writes go through here: durable in the store first.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::http::StatusCode;
use duet_core::api::{RegisteredWorkload, WorkloadBody};
use duet_model::{EngineKind, LoadedModel, Registry};

use crate::error::Failure;
use crate::metrics::Metrics;
use crate::store::Store;

/// How the server runs; `duet serve` fills it from its flags.
#[derive(Debug, Clone)]
pub struct Config {
    pub model: PathBuf,
    pub engine: EngineKind,
    /// The SQLite file of client registrations; `None` keeps them in memory only.
    pub state: Option<PathBuf>,
    /// The bearer token write endpoints require; `None` leaves them open.
    pub token: Option<String>,
    /// Require the token on read endpoints too (health, readiness and metrics stay open).
    pub protect_reads: bool,
    /// The device of pairs that name none.
    pub gpu: Option<String>,
    pub max_body_bytes: usize,
    pub max_pairs: usize,
    pub request_timeout: Duration,
    /// The folder whose subfolders are the models a client may reload by name; `None`: the
    /// parent of `model`.
    pub model_repo: Option<PathBuf>,
}

impl Config {
    pub fn new(model: PathBuf) -> Config {
        Config {
            model,
            engine: EngineKind::Burn,
            state: None,
            token: None,
            protect_reads: false,
            gpu: None,
            max_body_bytes: 64 * 1024 * 1024,
            max_pairs: 100_000,
            request_timeout: Duration::from_secs(30),
            model_repo: None,
        }
    }

    /// The model repository: `model_repo`, else the folder that holds `model`.
    pub fn repository(&self) -> PathBuf {
        self.model_repo.clone().unwrap_or_else(|| {
            self.model
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .map_or_else(|| PathBuf::from("."), std::path::Path::to_path_buf)
        })
    }

    /// The models of the repository a client may name: subfolders holding a `model.json`,
    /// sorted.
    pub fn repository_models(&self) -> Vec<String> {
        let repo = self.repository();
        let mut names: Vec<String> = std::fs::read_dir(&repo)
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .filter(|e| e.path().join(duet_model::artifact::MODEL_JSON).is_file())
            .filter_map(|e| e.file_name().into_string().ok())
            .collect();
        names.sort();
        names
    }

    /// The folder of the model a client names: only a plain name listed in the repository,
    /// never a path.
    pub fn resolve_model_name(&self, name: &str) -> Result<PathBuf, Failure> {
        let plain = !name.is_empty()
            && name.len() <= 200
            && name != "."
            && name != ".."
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '+'));
        if !plain {
            return Err(Failure::field(
                "model",
                format!(
                    "`{name}` is not a model name: give the name of a folder of the model \
                     repository (letters, digits and - _ . +), never a path"
                ),
            ));
        }
        let known = self.repository_models();
        if known.iter().any(|k| k == name) {
            Ok(self.repository().join(name))
        } else {
            Err(Failure::field(
                "model",
                format!(
                    "no model `{name}` in the server's model repository; it has {}",
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                ),
            )
            .with_status(StatusCode::NOT_FOUND))
        }
    }
}

/// The loaded model and the registry encoded for it; swapped together on reload.
#[derive(Debug)]
pub struct Serving {
    pub model: Arc<LoadedModel>,
    pub registry: Registry,
}

/// Everything the handlers share.
#[derive(Debug)]
pub struct AppState {
    pub config: Config,
    pub serving: RwLock<Option<Serving>>,
    pub store: Option<Store>,
    pub metrics: Metrics,
    ready: AtomicBool,
    /// One reload at a time.
    reloading: tokio::sync::Mutex<()>,
    /// The path of the model being served (reload may point at another folder).
    model_dir: RwLock<PathBuf>,
}

impl AppState {
    /// The state before any model is loaded: opens the registry database.
    pub fn new(config: Config) -> Result<Arc<AppState>, String> {
        let store = config.state.as_deref().map(Store::open).transpose()?;
        Ok(Arc::new(AppState {
            model_dir: RwLock::new(config.model.clone()),
            config,
            serving: RwLock::new(None),
            store,
            metrics: Metrics::default(),
            ready: AtomicBool::new(false),
            reloading: tokio::sync::Mutex::new(()),
        }))
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    pub(crate) fn read(&self) -> Result<std::sync::RwLockReadGuard<'_, Option<Serving>>, Failure> {
        self.serving
            .read()
            .map_err(|_| Failure::new(StatusCode::INTERNAL_SERVER_ERROR, "state lock poisoned"))
    }

    pub(crate) fn write(
        &self,
    ) -> Result<std::sync::RwLockWriteGuard<'_, Option<Serving>>, Failure> {
        self.serving
            .write()
            .map_err(|_| Failure::new(StatusCode::INTERNAL_SERVER_ERROR, "state lock poisoned"))
    }

    /// The loaded model, or 503 while none is.
    pub fn model(&self) -> Result<Arc<LoadedModel>, Failure> {
        self.read()?
            .as_ref()
            .map(|s| s.model.clone())
            .ok_or_else(not_ready)
    }

    /// Loads the model at `dir` (the current one when `None`), checks it, warms it up and swaps
    /// it in with the registry re-encoded for it. On any failure the serving model stays.
    /// Blocking: call from a blocking thread.
    pub fn load_model(&self, dir: Option<PathBuf>) -> Result<String, Failure> {
        let dir = match dir {
            Some(d) => d,
            None => self
                .model_dir
                .read()
                .map_err(|_| Failure::new(StatusCode::INTERNAL_SERVER_ERROR, "lock poisoned"))?
                .clone(),
        };
        let loaded = LoadedModel::load(&dir, self.config.engine)
            .and_then(|m| warm_up(&m).map(|()| m))
            .map_err(|e| {
                Failure::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    format!("model {} refused: {e}", dir.display()),
                )
            })?;
        let model = Arc::new(loaded);
        let mut serving = self.write()?;
        let (registry, warnings) = match serving.as_ref() {
            Some(current) => current.registry.rebuild(&model),
            // The first load: the client entries come from the registry database.
            None => {
                let client = match &self.store {
                    Some(store) => store
                        .entries()
                        .map_err(|e| Failure::new(StatusCode::INTERNAL_SERVER_ERROR, e))?
                        .into_iter()
                        .collect(),
                    None => Default::default(),
                };
                Registry::build(&model, client)
            }
        };
        for w in warnings {
            tracing::warn!(model = %dir.display(), "{w}");
        }
        let version = model.version().to_string();
        tracing::info!(
            model = %dir.display(),
            version = %version,
            engine = %model.engine.kind(),
            workloads = registry.len(),
            "model loaded"
        );
        *serving = Some(Serving { model, registry });
        drop(serving);
        if let Ok(mut d) = self.model_dir.write() {
            *d = dir;
        }
        self.ready.store(true, Ordering::Release);
        Ok(version)
    }

    /// The first load, from async code.
    pub async fn start(self: &Arc<Self>) -> Result<String, Failure> {
        let _one = self.reloading.lock().await;
        self.load_blocking(None).await
    }

    async fn load_blocking(self: &Arc<Self>, dir: Option<PathBuf>) -> Result<String, Failure> {
        let state = self.clone();
        tokio::task::spawn_blocking(move || state.load_model(dir))
            .await
            .unwrap_or_else(|e| {
                Err(Failure::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("model load panicked: {e}"),
                ))
            })
    }

    /// `load_model` from async code, one at a time, counted and logged.
    pub async fn reload(self: &Arc<Self>, dir: Option<PathBuf>) -> Result<String, Failure> {
        let _one = self.reloading.lock().await;
        let result = self.load_blocking(dir).await;
        self.metrics.reload(result.is_ok());
        match &result {
            Ok(version) => tracing::info!(version = %version, "model reloaded"),
            Err(f) => {
                tracing::error!(error = %f.error, "model reload failed; the previous model keeps serving")
            }
        }
        result
    }
    /// Registers or replaces workload `id`: checked against the serving model, durable in the
    /// store, then visible. Returns whether it is new, and the entry as stored.
    pub fn put_workload(
        &self,
        id: &str,
        body: WorkloadBody,
    ) -> Result<(bool, RegisteredWorkload), Failure> {
        let mut guard = self.write()?;
        let serving = guard.as_mut().ok_or_else(not_ready)?;
        let model = serving.model.clone();
        Registry::check(&model, id, &body)?;
        if let Some(store) = &self.store {
            store.write(id, Some(&body)).map_err(store_failure)?;
        }
        let created = serving.registry.put(&model, id, body)?;
        let registered = serving
            .registry
            .get(id)
            .map(|e| e.registered.clone())
            .ok_or_else(|| Failure::new(StatusCode::INTERNAL_SERVER_ERROR, "lost a write"))?;
        Ok((created, registered))
    }

    /// Deletes workload `id`: durable in the store (a dataset workload as a tombstone), then
    /// gone from memory.
    pub fn delete_workload(&self, id: &str) -> Result<(), Failure> {
        let mut guard = self.write()?;
        let serving = guard.as_mut().ok_or_else(not_ready)?;
        if serving.registry.get(id).is_none() {
            return Err(duet_model::ModelError::not_found(id, "workload").into());
        }
        if let Some(store) = &self.store {
            if serving.registry.is_seed(id) {
                store.write(id, None)
            } else {
                store.forget(id)
            }
            .map_err(store_failure)?;
        }
        serving.registry.delete(id)?;
        Ok(())
    }
}

fn store_failure(message: String) -> Failure {
    tracing::error!(error = %message, "registry write failed");
    Failure::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        format!("the registry could not be written: {message}"),
    )
}

/// Runs a batch the size of a large request once, so the first real one finds warm allocators.
fn warm_up(model: &LoadedModel) -> Result<(), String> {
    let rows = 2048;
    let inputs = vec![0.0f32; rows * model.meta.spec.pair_width()];
    let out = model.engine.run(inputs)?;
    if out.iter().all(|v| v.is_finite()) {
        Ok(())
    } else {
        Err("a non-finite output while warming up".into())
    }
}

pub(crate) fn not_ready() -> Failure {
    Failure::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "no model is loaded yet; retry when /readyz answers 200",
    )
}
