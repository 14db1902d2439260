//! The server's shared state: its configuration, the serving model with the registry encoded
//! for it (swapped together), the durable store, the metrics, and the model's lifecycle (load,
//! probe, warm-up, reload). Registry writes go through here: durable in the store first, then
//! applied in memory by sequence number, the same way changes from other replicas are.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use arc_swap::ArcSwapOption;

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
    /// Largest request body (`--max-body-bytes`); by default `body_bytes_for(max_pairs)`.
    pub max_body_bytes: usize,
    /// Largest body of a registration or a reload (`--max-write-body-bytes`).
    pub max_write_body_bytes: usize,
    /// Bytes of request bodies held at once by the whole server, HTTP and gRPC, and what gRPC
    /// messages decode into (`--max-inflight-body-bytes`); beyond it, 503.
    pub max_inflight_body_bytes: usize,
    pub max_pairs: usize,
    /// Rows of one KServe `infer` request (`--max-infer-rows`; a pair is two rows).
    pub max_infer_rows: usize,
    /// Observations in one `POST /v1/observations` (`--max-observations`).
    pub max_observations: usize,
    /// Workloads registered at most, the model's own included (`--max-workloads`), and
    /// profiles (devices) in one registration (`--max-profiles`).
    pub max_workloads: usize,
    pub max_profiles: usize,
    /// Without `state`: observations kept in memory at most (`--max-memory-observations`).
    pub max_memory_observations: usize,
    /// Requests whose model work runs at once (`--max-inflight`), and requests that may wait
    /// for one of those places (`--max-queue`); beyond both, 503 with `Retry-After`.
    pub max_inflight: usize,
    pub max_queue: usize,
    /// Time a connection has to send a request's whole header, from its opening or the end of
    /// its previous answer (`--header-timeout`): an idle keep-alive connection closes then too.
    pub header_timeout: Duration,
    /// Longest pause in a request's body (`--idle-timeout`): the body is then cut off (408).
    pub idle_timeout: Duration,
    /// Client connections at once (`--max-connections`); probes have a reserve beyond it.
    pub max_connections: usize,
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
            max_body_bytes: Config::body_bytes_for(100_000),
            max_write_body_bytes: MAX_WRITE_BODY_BYTES,
            max_inflight_body_bytes: Config::inflight_body_bytes_for(Config::body_bytes_for(
                100_000,
            )),
            max_pairs: 100_000,
            max_infer_rows: 200_000,
            max_observations: 10_000,
            max_memory_observations: crate::store::MAX_MEMORY_OBSERVATIONS,
            max_workloads: MAX_WORKLOADS,
            max_profiles: MAX_PROFILES,
            max_inflight: cores(),
            max_queue: cores(),
            header_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(10),
            max_connections: 1024,
            request_timeout: Duration::from_secs(30),
            model_repo: None,
            drain: Duration::from_secs(5),
        }
    }

    /// The default body limit for `max_pairs`: room for every pair with its jobs' features
    /// inline (about 170 bytes with the shipped model's features; an id pair about 80), and
    /// for the rest of the request.
    pub fn body_bytes_for(max_pairs: usize) -> usize {
        max_pairs
            .saturating_mul(BODY_BYTES_PER_PAIR)
            .saturating_add(64 * 1024)
    }

    /// The default budget of body bytes in flight for `max_body_bytes`: four of the largest
    /// bodies, and never under 64 MiB.
    pub fn inflight_body_bytes_for(max_body_bytes: usize) -> usize {
        max_body_bytes.saturating_mul(4).max(64 << 20)
    }

    /// The resident memory above which a large request's freed memory is given back to the
    /// system after it (`crate::memory::trim_above`): the budget of body bytes in flight and
    /// 64 MiB for the model, the registry and the work of the requests running.
    pub fn memory_mark(&self) -> u64 {
        u64::try_from(self.max_inflight_body_bytes)
            .unwrap_or(u64::MAX)
            .saturating_add(64 << 20)
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

/// Bytes of body allowed per pair by default (`Config::body_bytes_for`).
pub const BODY_BYTES_PER_PAIR: usize = 256;

/// The default `--max-workloads`.
pub const MAX_WORKLOADS: usize = 100_000;

/// The default `--max-profiles`.
pub const MAX_PROFILES: usize = 64;

/// The default `--max-write-body-bytes`: a registration holds one workload's profiles.
pub const MAX_WRITE_BODY_BYTES: usize = 1 << 20;

pub use crate::shed::cores;

/// The loaded model and the registry encoded for it; swapped together on reload.
#[derive(Debug, Clone)]
pub struct Serving {
    pub model: Arc<LoadedModel>,
    pub registry: Registry,
    /// The sequence number of the change applied last to each id: an older change (a catch-up
    /// that reads a write this replica already applied, or lost a race) never overwrites it.
    applied: duet_model::layered::Layered<i64>,
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
    /// Readers take a snapshot without a lock; writers build the next one aside and swap it
    /// in (`rcu`: a write that raced another is built again on the newer one).
    pub serving: ArcSwapOption<Serving>,
    /// The places of model work in flight and waiting (`--max-inflight`, `--max-queue`).
    pub limiter: crate::shed::Limiter,
    /// The token and what it protects, for the handlers and the guards at the edge.
    pub access: Arc<crate::auth::Access>,
    /// The bytes of request bodies in flight (`--max-inflight-body-bytes`).
    pub body_budget: crate::intake::BodyBudget,
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
    pub lifecycle: Arc<crate::lifecycle::Lifecycle>,
    /// The path of the model being served (reload may point at another folder).
    model_dir: RwLock<PathBuf>,
}

impl AppState {
    /// The state before any model is loaded: opens an SQLite registry (a PostgreSQL one is
    /// connected by `start`).
    pub fn new(config: Config) -> Result<Arc<AppState>, String> {
        let store = RegistryStore::open(config.state.as_ref(), config.max_memory_observations)?;
        Ok(Arc::new(AppState {
            model_dir: RwLock::new(config.model.clone()),
            limiter: crate::shed::Limiter::new(config.max_inflight, config.max_queue),
            access: Arc::new(crate::auth::Access {
                token: config.token.clone(),
                protect_reads: config.protect_reads,
                max_write_body_bytes: config.max_write_body_bytes,
            }),
            body_budget: crate::intake::BodyBudget::new(config.max_inflight_body_bytes),
            config,
            serving: ArcSwapOption::empty(),
            store,
            sync: SyncStatus::default(),
            metrics: Metrics::default(),
            drift: crate::drift::Windows::default(),
            ready: AtomicBool::new(false),
            reloading: tokio::sync::Mutex::new(()),
            lifecycle: Arc::default(),
        }))
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// A snapshot of the serving model and registry (`None` before the first load); it stays
    /// whole while its holder uses it, whatever is swapped in meanwhile.
    pub(crate) fn read(&self) -> Result<Option<Arc<Serving>>, Failure> {
        Ok(self.serving.load_full())
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
        // The next snapshot is built aside and swapped in; a registry write that lands
        // meanwhile makes it be built again over that write.
        let mut warnings = Vec::new();
        let previous = self.serving.rcu(|serving| {
            let (registry, applied, w) = match serving.as_ref() {
                Some(current) => {
                    let (registry, w) = current.registry.rebuild(&model);
                    (registry, current.applied.clone(), w)
                }
                // The first load: the client entries come from the store.
                None => {
                    let applied: duet_model::layered::Layered<i64> =
                        initial.iter().map(|c| (c.id.clone(), c.seq)).collect();
                    let client: BTreeMap<String, Option<_>> = initial
                        .iter()
                        .map(|c| (c.id.clone(), c.body.clone()))
                        .collect();
                    let (registry, w) = Registry::build(&model, client);
                    (registry, applied, w)
                }
            };
            warnings = w;
            Some(Arc::new(Serving {
                model: model.clone(),
                registry,
                applied,
            }))
        });
        drop(previous);
        for w in warnings {
            tracing::warn!(model = %dir.display(), "{w}");
        }
        let version = model.version().to_string();
        tracing::info!(
            model = %dir.display(),
            version = %version,
            engine = %model.engine.kind(),
            workloads = self.read()?.as_ref().map_or(0, |s| s.registry.len()),
            "model loaded"
        );
        // The drift windows are rescored on a snapshot: predictions go on meanwhile.
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
    /// answer to this call, even if another replica's later write replaces it at once). The
    /// write and its application run in a task of their own (`whole`), so a request dropped
    /// after the commit (its client gone, its time up) never leaves them apart.
    pub async fn put_workload(
        self: &Arc<Self>,
        id: &str,
        body: WorkloadBody,
    ) -> Result<(bool, RegisteredWorkload), Failure> {
        let (state, id) = (self.clone(), id.to_string());
        self.whole(async move { state.put_workload_now(&id, body).await })
            .await
    }

    /// Deletes workload `id` (`delete_workload_now`), in a task of its own as `put_workload`.
    pub async fn delete_workload(self: &Arc<Self>, id: &str) -> Result<(), Failure> {
        let (state, id) = (self.clone(), id.to_string());
        self.whole(async move { state.delete_workload_now(&id).await })
            .await
    }

    /// Runs `unit` to its end in a task of its own, whether or not its caller still waits.
    async fn whole<T: Send + 'static>(
        &self,
        unit: impl Future<Output = Result<T, Failure>> + Send + 'static,
    ) -> Result<T, Failure> {
        tokio::spawn(unit)
            .await
            .unwrap_or_else(|e| Err(self.metrics.guards.join_failure(&e, "registry write")))
    }

    async fn put_workload_now(
        &self,
        id: &str,
        body: WorkloadBody,
    ) -> Result<(bool, RegisteredWorkload), Failure> {
        let (model, seed) = {
            let guard = self.read()?;
            let serving = guard.as_ref().ok_or_else(not_ready)?;
            let max = self.config.max_workloads;
            if serving.registry.get(id).is_none() && serving.registry.len() >= max {
                return Err(Failure::field(
                    "workload",
                    format!(
                        "the registry holds its limit of {max} workloads (--max-workloads); \
                         delete one first"
                    ),
                ));
            }
            (serving.model.clone(), serving.registry.is_seed(id))
        };
        let max = self.config.max_profiles;
        if body.profiles.len() > max {
            return Err(Failure::field(
                "profiles",
                format!(
                    "{} profiles: over the server's limit of {max} per workload (--max-profiles)",
                    body.profiles.len()
                ),
            ));
        }
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
    async fn delete_workload_now(&self, id: &str) -> Result<(), Failure> {
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
        self.serving.rcu(|serving| {
            serving.as_ref().map(|current| {
                let mut next = Serving::clone(current);
                for change in &changes {
                    next.apply(change.clone());
                }
                Arc::new(next)
            })
        });
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
        if let StoreError::Full(m) = error {
            tracing::warn!(error = %m, "a write refused: the store is full");
            return Failure::new(StatusCode::INSUFFICIENT_STORAGE, m.clone());
        }
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
            StoreError::Full(m) => Failure::new(StatusCode::INSUFFICIENT_STORAGE, m.clone()),
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

impl AppState {
    /// The folder a reload that names no model reads: the configured model while `previous`
    /// serves in its place (so that a fixed `current` is picked up), else the serving model's.
    pub fn reload_target(&self) -> PathBuf {
        if self.lifecycle.fallback().is_some() {
            return self.config.model.clone();
        }
        self.model()
            .map_or_else(|_| self.config.model.clone(), |m| m.dir.clone())
    }

    /// The repository's `previous` model, if there is one other than the configured model.
    pub(crate) fn previous_model(&self) -> Option<PathBuf> {
        let previous = self.config.repository().join(crate::lifecycle::PREVIOUS);
        let usable = previous.join(duet_model::artifact::MODEL_JSON).is_file()
            && crate::lifecycle::resolved(&previous)
                != crate::lifecycle::resolved(&self.config.model);
        usable.then_some(previous)
    }

    /// After the configured model failed its first load: serves the repository's `previous`
    /// model instead, when there is one, and says so in `/readyz` (degraded) rather than
    /// stopping the server; without one, or when it fails too, the server does not start.
    pub(crate) async fn load_previous(
        self: &Arc<Self>,
        failed: Failure,
        initial: Vec<Change>,
    ) -> Result<String, Failure> {
        let Some(previous) = self.previous_model() else {
            return Err(failed);
        };
        tracing::error!(
            model = %self.config.model.display(),
            error = %failed.error,
            previous = %previous.display(),
            "the configured model cannot be loaded; serving the model repository's previous model"
        );
        // Marked before the swap, so that /readyz never calls the fallback plainly ready.
        self.lifecycle.set_fallback(Some(failed.error.clone()));
        match self.load_blocking(Some(previous), initial).await {
            Ok(version) => Ok(version),
            Err(second) => {
                self.lifecycle.set_fallback(None);
                Err(Failure::new(
                    failed.status,
                    format!(
                        "{}; the model repository's `{}` model cannot be loaded either: {}",
                        failed.error,
                        crate::lifecycle::PREVIOUS,
                        second.error
                    ),
                ))
            }
        }
    }

    /// Loads `dir` (the reload target when `None`) and swaps it in, single-flight for the
    /// load's whole duration (`Lifecycle::single_flight`): after the first load (never beside
    /// it), counted and logged.
    pub async fn reload(self: &Arc<Self>, dir: Option<PathBuf>) -> Result<String, Failure> {
        let dir = dir.unwrap_or_else(|| self.reload_target());
        let state = self.clone();
        self.lifecycle
            .single_flight(dir, move |dir| async move {
                let result = {
                    let _first = state.reloading.lock().await;
                    state.load_blocking(Some(dir), Vec::new()).await
                };
                // A model a reload chose serves now: the fallback is over.
                if result.is_ok() {
                    state.lifecycle.set_fallback(None);
                }
                state.metrics.reload(result.is_ok());
                match &result {
                    Ok(version) => tracing::info!(version = %version, "model reloaded"),
                    Err(f) => {
                        tracing::error!(error = %f.error, "model reload failed; the previous model keeps serving");
                    }
                }
                result
            })
            .await
    }
}

impl AppState {
    /// What `/metrics` reads from the server now, beside what `Metrics` counted.
    pub fn scrape(&self) -> Result<crate::metrics::Scrape, Failure> {
        let (model_version, engine, workloads) = match self.read()?.as_ref() {
            Some(s) => (
                s.model.version().to_string(),
                s.model.engine.kind().as_str(),
                s.registry.len(),
            ),
            None => (String::new(), self.config.engine.as_str(), 0),
        };
        Ok(crate::metrics::Scrape {
            model_version,
            engine,
            workloads,
            drift: self.drift.tallies(),
            store: self.store.kind(),
            sequence: self.sync.seq(),
            last_sync_age_s: self.sync.last_sync_age(),
            database_errors: self.sync.errors(),
            degraded: self.sync.degraded().is_some(),
            fallback: self.lifecycle.fallback().is_some(),
            draining: self.lifecycle.draining(),
            work_in_flight: self.limiter.running(),
            work_waiting: self.limiter.waiting(),
            body_bytes_in_flight: self.body_budget.in_flight(),
            bodies_refused: self.body_budget.refused.load(Ordering::Relaxed),
        })
    }

    /// The text of `/metrics` in `format`.
    pub fn metrics_text(&self, format: crate::metrics::Format) -> Result<String, Failure> {
        Ok(self.metrics.render(self.scrape()?, format))
    }
}

impl crate::sync::Replica for AppState {
    fn postgres(&self) -> Option<&crate::store::PostgresStore> {
        self.store.postgres()
    }

    fn sync_status(&self) -> &SyncStatus {
        &self.sync
    }

    fn catch_up(&self) -> impl Future<Output = Result<(), StoreError>> + Send {
        AppState::catch_up(self)
    }
}
