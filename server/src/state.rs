//! The server's shared state: its configuration, the serving model with the registry encoded
//! for it (swapped together), the durable store, the metrics, and the model's lifecycle (load,
//! probe, warm-up, reload). Registry writes go through here: durable in the store first, then
//! applied in memory by sequence number, the same way changes from other replicas are.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::http::StatusCode;
use duet_core::api::{RegisteredWorkload, WorkloadBody};
use duet_model::{EngineKind, LoadedModel, Registry};

use crate::error::Failure;
use crate::metrics::Metrics;
use crate::store::{Change, RegistryStore, StateLocation, Store, StoreError};
use crate::sync::SyncStatus;

/// How the server runs; `duet serve` fills it from its flags.
#[derive(Debug, Clone)]
pub struct Config {
    pub model: PathBuf,
    pub engine: EngineKind,
    /// Where client registrations are kept: an SQLite file or a PostgreSQL database shared by
    /// replicas; `None` keeps them in memory only. Its `Debug` never shows a password.
    pub state: Option<StateLocation>,
    /// The bearer token write endpoints require; `None` leaves them open. Never in `Debug`.
    pub token: Option<crate::auth::Token>,
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
    /// After SIGTERM, how long `/readyz` answers 503 while requests are still served, before
    /// the listener closes (the time a Service takes to stop routing here).
    pub drain: Duration,
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
            drain: Duration::from_secs(5),
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
    /// The sequence number of the change applied last to each id: an older change (a catch-up
    /// that reads a write this replica already applied, or lost a race) never overwrites it.
    applied: HashMap<String, i64>,
}

impl Serving {
    /// Applies `change` unless a later one for the same id already was.
    fn apply(&mut self, change: Change) {
        let last = self.applied.get(&change.id).copied().unwrap_or(0);
        if change.seq > last {
            self.registry.apply(&self.model, &change.id, change.body);
            self.applied.insert(change.id, change.seq);
        }
    }
}

/// Everything the handlers share.
#[derive(Debug)]
pub struct AppState {
    pub config: Config,
    pub serving: RwLock<Option<Serving>>,
    pub store: RegistryStore,
    /// Where the registry stands against the store.
    pub sync: SyncStatus,
    pub metrics: Metrics,
    /// The latest observed pairs this replica received, scored by the serving model.
    pub drift: crate::drift::Windows,
    ready: AtomicBool,
    /// Held by the first load: reloads wait for it.
    pub(crate) reloading: tokio::sync::Mutex<()>,
    /// Reloads single-flight, the fallback to `previous`, the drain.
    pub lifecycle: crate::lifecycle::Lifecycle,
    /// The path of the model being served (reload may point at another folder).
    model_dir: RwLock<PathBuf>,
}

impl AppState {
    /// The state before any model is loaded: opens an SQLite registry (a PostgreSQL one is
    /// connected by `start`).
    pub fn new(config: Config) -> Result<Arc<AppState>, String> {
        let store = RegistryStore::open(config.state.as_ref())?;
        Ok(Arc::new(AppState {
            model_dir: RwLock::new(config.model.clone()),
            config,
            serving: RwLock::new(None),
            store,
            sync: SyncStatus::default(),
            metrics: Metrics::default(),
            drift: crate::drift::Windows::default(),
            ready: AtomicBool::new(false),
            reloading: tokio::sync::Mutex::new(()),
            lifecycle: crate::lifecycle::Lifecycle::default(),
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
    /// Blocking: call from a blocking thread. `initial`: the store's changes, for the first
    /// load.
    pub fn load_model(
        &self,
        dir: Option<PathBuf>,
        initial: Vec<Change>,
    ) -> Result<String, Failure> {
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
        let (registry, applied, warnings) = match serving.as_ref() {
            Some(current) => {
                let (registry, warnings) = current.registry.rebuild(&model);
                (registry, current.applied.clone(), warnings)
            }
            // The first load: the client entries come from the store.
            None => {
                let applied: HashMap<String, i64> =
                    initial.iter().map(|c| (c.id.clone(), c.seq)).collect();
                let client: BTreeMap<String, Option<_>> =
                    initial.into_iter().map(|c| (c.id, c.body)).collect();
                let (registry, warnings) = Registry::build(&model, client);
                (registry, applied, warnings)
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
        *serving = Some(Serving {
            model,
            registry,
            applied,
        });
        drop(serving);
        // The drift windows are rescored under a read lock: predictions go on meanwhile.
        if let Ok(guard) = self.read()
            && let Some(s) = guard.as_ref()
        {
            self.drift.rescore(&s.model, &s.registry);
        }
        if let Ok(mut d) = self.model_dir.write() {
            *d = dir;
        }
        self.ready.store(true, Ordering::Release);
        Ok(version)
    }

    /// The first load, from async code: reads the store's registrations (a PostgreSQL store is
    /// connected first, and one that cannot be reached leaves the registry degraded: the
    /// model's dataset workloads only, until the sync task catches up), loads the model, and
    /// starts the sync task for a shared store.
    pub async fn start(self: &Arc<Self>) -> Result<String, Failure> {
        let _one = self.reloading.lock().await;
        let mut notifications = None;
        if let Some(pg) = self.store.postgres() {
            match pg.connect().await {
                Ok(rx) => notifications = Some(rx),
                Err(e) => {
                    tracing::error!(error = %e, "registry database unreachable at start; serving the model's dataset workloads until it returns");
                    pg.disconnected(&e.to_string());
                    self.sync.failed(&e, true);
                }
            }
        }
        let initial = match self.store.changes_since(0).await {
            Ok(changes) => {
                self.sync.synced();
                changes
            }
            Err(e) if self.store.postgres().is_some() => {
                self.sync.failed(&e, true);
                Vec::new()
            }
            Err(e) => {
                return Err(Failure::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("the registry store cannot be read: {e}"),
                ));
            }
        };
        if let Some(last) = initial.iter().map(|c| c.seq).max() {
            self.sync.advance(last);
        }
        let version = match self.load_blocking(None, initial.clone()).await {
            Ok(version) => version,
            Err(failed) => self.load_previous(failed, initial).await?,
        };
        if self.store.postgres().is_some() {
            tokio::spawn(crate::sync::run(self.clone(), notifications));
        }
        Ok(version)
    }

    pub(crate) async fn load_blocking(
        self: &Arc<Self>,
        dir: Option<PathBuf>,
        initial: Vec<Change>,
    ) -> Result<String, Failure> {
        let state = self.clone();
        tokio::task::spawn_blocking(move || state.load_model(dir, initial))
            .await
            .unwrap_or_else(|e| {
                Err(Failure::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("model load panicked: {e}"),
                ))
            })
    }

    /// Registers or replaces workload `id`: checked against the serving model, durable in the
    /// store, then applied in memory. Returns whether it is new, and the entry as written (the
    /// answer to this call, even if another replica's later write replaces it at once).
    pub async fn put_workload(
        &self,
        id: &str,
        body: WorkloadBody,
    ) -> Result<(bool, RegisteredWorkload), Failure> {
        let (model, seed) = {
            let guard = self.read()?;
            let serving = guard.as_ref().ok_or_else(not_ready)?;
            (serving.model.clone(), serving.registry.is_seed(id))
        };
        Registry::check(&model, id, &body)?;
        let written = self
            .store
            .write(id, Some(&body), seed)
            .await
            .map_err(|e| self.store_failure(&e))?;
        let seq = written.seq.ok_or_else(|| {
            Failure::new(StatusCode::INTERNAL_SERVER_ERROR, "the store lost a write")
        })?;
        self.apply_local(Change {
            id: id.to_string(),
            body: Some(body.clone()),
            seq,
        })?;
        Ok((
            !written.existed,
            duet_model::registry::client_entry(id, body),
        ))
    }

    /// Deletes workload `id`: a tombstone durable in the store, then gone from memory. 404 when
    /// the store says it does not exist.
    pub async fn delete_workload(&self, id: &str) -> Result<(), Failure> {
        let seed = {
            let guard = self.read()?;
            let serving = guard.as_ref().ok_or_else(not_ready)?;
            serving.registry.is_seed(id)
        };
        let written = self
            .store
            .write(id, None, seed)
            .await
            .map_err(|e| self.store_failure(&e))?;
        let Some(seq) = written.seq else {
            return Err(duet_model::ModelError::not_found(id, "workload").into());
        };
        self.apply_local(Change {
            id: id.to_string(),
            body: None,
            seq,
        })
    }

    /// A write of this replica, applied after the store acknowledged it.
    fn apply_local(&self, change: Change) -> Result<(), Failure> {
        let seq = change.seq;
        self.apply_changes(vec![change])?;
        // Only a store with one writer has no gaps below a local write's number: a shared
        // store's sequence advances by catch-up alone.
        if self.store.postgres().is_none() {
            self.sync.advance(seq);
        }
        Ok(())
    }

    /// Applies changes from the store in sequence order, each unless a later one for its id
    /// already was.
    pub(crate) fn apply_changes(&self, changes: Vec<Change>) -> Result<(), Failure> {
        if changes.is_empty() {
            return Ok(());
        }
        let mut guard = self.write()?;
        if let Some(serving) = guard.as_mut() {
            for change in changes {
                serving.apply(change);
            }
        }
        Ok(())
    }

    /// Reads the store's changes after the last applied one and applies them.
    pub(crate) async fn catch_up(&self) -> Result<(), StoreError> {
        let changes = self.store.changes_since(self.sync.seq()).await?;
        let last = changes.iter().map(|c| c.seq).max();
        self.apply_changes(changes)
            .map_err(|f| StoreError::Broken(f.error))?;
        if let Some(last) = last {
            self.sync.advance(last);
        }
        self.sync.synced();
        Ok(())
    }

    pub(crate) fn store_failure(&self, error: &StoreError) -> Failure {
        self.sync.failed(error, false);
        tracing::error!(error = %error, "registry write failed");
        match error {
            StoreError::Unavailable(m) => Failure::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "the registry database cannot be reached ({m}); writes are refused until it \
                     returns, predictions keep serving"
                ),
            ),
            StoreError::Broken(m) => Failure::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("the registry could not be written: {m}"),
            ),
        }
    }
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
