//! The axum application: shared state, routes, authentication, limits and the model's
//! lifecycle (load, warm-up, reload).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, MatchedPath, Path, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use duet_core::api::{PredictRequest, RegisteredWorkload, WorkloadBody};
use serde::{Deserialize, Serialize};
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::timeout::TimeoutLayer;

use crate::engine::EngineKind;
use crate::error::{Failure, parse_json};
use crate::kserve;
use crate::metrics::Metrics;
use crate::model::LoadedModel;
use crate::predict;
use crate::registry::{Registry, Store};

/// Requests with a body larger than this are answered on a blocking thread, so a 10,000-pair
/// request never stalls the small ones.
const INLINE_BODY_BYTES: usize = 16 * 1024;

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

    fn read(&self) -> Result<std::sync::RwLockReadGuard<'_, Option<Serving>>, Failure> {
        self.serving
            .read()
            .map_err(|_| Failure::new(StatusCode::INTERNAL_SERVER_ERROR, "state lock poisoned"))
    }

    fn write(&self) -> Result<std::sync::RwLockWriteGuard<'_, Option<Serving>>, Failure> {
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

fn not_ready() -> Failure {
    Failure::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "no model is loaded yet; retry when /readyz answers 200",
    )
}

/// Checks the bearer token where one is configured.
fn authorize(state: &AppState, headers: &HeaderMap, write: bool) -> Result<(), Failure> {
    let Some(token) = &state.config.token else {
        return Ok(());
    };
    if !write && !state.config.protect_reads {
        return Ok(());
    }
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match given {
        Some(g) if constant_time_eq(g.as_bytes(), token.as_bytes()) => Ok(()),
        Some(_) => Err(Failure::field("Authorization", "wrong bearer token")
            .with_status(StatusCode::UNAUTHORIZED)),
        None => Err(Failure::field(
            "Authorization",
            "this endpoint needs `Authorization: Bearer <token>`",
        )
        .with_status(StatusCode::UNAUTHORIZED)),
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A body that could not be read: too large (413) or broken.
fn body_failure(e: &BytesRejection, limit: usize) -> Failure {
    if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
        Failure::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "the body is larger than the server's limit of {limit} bytes (--max-body-bytes)"
            ),
        )
    } else {
        Failure::new(e.status(), format!("cannot read the body: {e}"))
    }
}

/// The whole app with its middleware.
pub fn router(state: Arc<AppState>) -> Router {
    let limit = state.config.max_body_bytes;
    let timeout = state.config.request_timeout;
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/openapi.json", get(openapi))
        .route("/v1/predict", post(predict_route))
        .route("/predict", post(predict_route))
        .route("/v1/workloads", get(list_workloads))
        .route(
            "/v1/workloads/{id}",
            get(get_workload).put(put_workload).delete(delete_workload),
        )
        .route("/v1/models", get(models))
        .route("/v1/models/reload", post(reload_route))
        .merge(kserve::routes())
        .fallback(fallback)
        .layer(middleware::from_fn_with_state(state.clone(), observe))
        .layer(CatchPanicLayer::custom(panicked))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::SERVICE_UNAVAILABLE,
            timeout,
        ))
        .layer(DefaultBodyLimit::max(limit))
        .with_state(state)
}

fn panicked(_: Box<dyn std::any::Any + Send + 'static>) -> Response {
    tracing::error!("a request handler panicked");
    Failure::new(StatusCode::INTERNAL_SERVER_ERROR, "internal error").into_response()
}

/// Counts and times every request by its route pattern.
async fn observe(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    let start = Instant::now();
    let response = next.run(request).await;
    let status = response.status();
    state
        .metrics
        .request(&route, status.as_u16(), start.elapsed().as_secs_f64());
    if status.is_server_error() {
        tracing::warn!(route = %route, status = status.as_u16(), "request failed");
    }
    response
}

async fn fallback() -> Failure {
    Failure::new(
        StatusCode::NOT_FOUND,
        "no such route; /openapi.json lists them",
    )
}

#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Health {
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_version: Option<String>,
}

#[utoipa::path(get, path = "/healthz", responses((status = 200, body = Health)))]
async fn healthz() -> Json<Health> {
    Json(Health {
        status: "ok".into(),
        model_version: None,
    })
}

#[utoipa::path(get, path = "/readyz", responses(
    (status = 200, body = Health), (status = 503, body = duet_core::api::ApiError)))]
async fn readyz(State(state): State<Arc<AppState>>) -> Result<Json<Health>, Failure> {
    if !state.is_ready() {
        return Err(not_ready());
    }
    let model = state.model()?;
    Ok(Json(Health {
        status: "ready".into(),
        model_version: Some(model.version().to_string()),
    }))
}

async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    let (version, engine, workloads) = match state.read() {
        Ok(guard) => match guard.as_ref() {
            Some(s) => (
                s.model.version().to_string(),
                s.model.engine.kind().as_str(),
                s.registry.len(),
            ),
            None => (String::new(), state.config.engine.as_str(), 0),
        },
        Err(f) => return f.into_response(),
    };
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(&version, engine, workloads),
    )
        .into_response()
}

async fn openapi() -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        crate::openapi::document(),
    )
        .into_response()
}

/// Parses, checks, encodes and runs one prediction request; the JSON answer.
pub fn answer(state: &AppState, body: &[u8]) -> Result<Vec<u8>, Failure> {
    let request: PredictRequest = parse_json(body)?;
    if request.pairs.is_empty() {
        return Err(Failure::field("pairs", "no pairs to predict"));
    }
    if request.pairs.len() > state.config.max_pairs {
        return Err(Failure::field(
            "pairs",
            format!(
                "{} pairs is over the server's limit of {} per request (--max-pairs)",
                request.pairs.len(),
                state.config.max_pairs
            ),
        )
        .with_status(StatusCode::PAYLOAD_TOO_LARGE));
    }
    let guard = state.read()?;
    let serving = guard.as_ref().ok_or_else(not_ready)?;
    let model = &serving.model;
    let default_gpu = state.config.gpu.as_deref();
    let n = request.pairs.len();
    // A large request is cut into one part per core; each part is encoded, run and written on
    // its own thread, and the parts' JSON arrays are joined in order.
    let parts = if n >= PARALLEL_PAIRS {
        cores().min(n)
    } else {
        1
    };
    let size = n.div_ceil(parts);
    let part = |range: std::ops::Range<usize>, serial: bool| -> Result<Vec<u8>, Failure> {
        let inputs = predict::encode_pairs(model, &serving.registry, &request, range, default_gpu)?;
        let outputs = if serial {
            model.engine.run_serial(inputs)
        } else {
            model.engine.run(inputs)
        }
        .map_err(|e| {
            tracing::error!(error = %e, "inference failed");
            Failure::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("inference failed: {e}"),
            )
        })?;
        serde_json::to_vec(&predict::predictions(&outputs))
            .map_err(|e| Failure::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))
    };
    let arrays: Vec<Vec<u8>> = if parts == 1 {
        vec![part(0..n, false)?]
    } else {
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..parts)
                .map(|k| {
                    let range = (k * size)..((k + 1) * size).min(n);
                    scope.spawn(move || part(range, true))
                })
                .collect();
            // Joined in order: the first failing part names the first bad pair.
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(Failure::new(
                            StatusCode::INTERNAL_SERVER_ERROR,
                            "a prediction worker panicked",
                        ))
                    })
                })
                .collect::<Result<Vec<_>, Failure>>()
        })?
    };
    state.metrics.pairs(n);
    let version = serde_json::to_string(model.version())
        .map_err(|e| Failure::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    let mut out = Vec::with_capacity(arrays.iter().map(Vec::len).sum::<usize>() + 64);
    out.extend_from_slice(b"{\"model_version\":");
    out.extend_from_slice(version.as_bytes());
    out.extend_from_slice(b",\"predictions\":[");
    for (k, array) in arrays.iter().enumerate() {
        // Each part is a JSON array `[...]`: its items go in, separated by a comma.
        let items = &array[1..array.len() - 1];
        if k > 0 && !items.is_empty() {
            out.push(b',');
        }
        out.extend_from_slice(items);
    }
    out.extend_from_slice(b"]}");
    Ok(out)
}

/// Requests with at least this many pairs are split over the cores.
const PARALLEL_PAIRS: usize = 2048;

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

#[utoipa::path(post, path = "/v1/predict", request_body = PredictRequest, responses(
    (status = 200, body = duet_core::api::PredictResponse),
    (status = 400, body = duet_core::api::ApiError, description = "malformed JSON"),
    (status = 404, body = duet_core::api::ApiError, description = "unknown workload id"),
    (status = 413, body = duet_core::api::ApiError, description = "over the body or pairs limit"),
    (status = 422, body = duet_core::api::ApiError, description = "a field the model cannot use"),
    (status = 503, body = duet_core::api::ApiError, description = "no model loaded yet")))]
async fn predict_route(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, Failure> {
    authorize(&state, &headers, false)?;
    let body = body.map_err(|e| body_failure(&e, state.config.max_body_bytes))?;
    let bytes = if body.len() <= INLINE_BODY_BYTES {
        answer(&state, &body)?
    } else {
        let state = state.clone();
        tokio::task::spawn_blocking(move || answer(&state, &body))
            .await
            .map_err(|e| {
                Failure::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("prediction panicked: {e}"),
                )
            })??
    };
    Ok(([(header::CONTENT_TYPE, "application/json")], bytes).into_response())
}

#[utoipa::path(get, path = "/v1/workloads", responses((status = 200, body = Vec<RegisteredWorkload>)))]
async fn list_workloads(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
) -> Result<Json<Vec<RegisteredWorkload>>, Failure> {
    authorize(&state, &headers, false)?;
    let guard = state.read()?;
    let serving = guard.as_ref().ok_or_else(not_ready)?;
    Ok(Json(serving.registry.list().into_iter().cloned().collect()))
}

#[utoipa::path(get, path = "/v1/workloads/{id}", responses(
    (status = 200, body = RegisteredWorkload), (status = 404, body = duet_core::api::ApiError)))]
async fn get_workload(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Json<RegisteredWorkload>, Failure> {
    authorize(&state, &headers, false)?;
    let guard = state.read()?;
    let serving = guard.as_ref().ok_or_else(not_ready)?;
    serving
        .registry
        .get(&id)
        .map(|e| Json(e.registered.clone()))
        .ok_or_else(|| crate::registry::not_found(&id, "id"))
}

#[utoipa::path(put, path = "/v1/workloads/{id}", request_body = WorkloadBody, responses(
    (status = 200, body = RegisteredWorkload, description = "replaced"),
    (status = 201, body = RegisteredWorkload, description = "registered"),
    (status = 401, body = duet_core::api::ApiError),
    (status = 422, body = duet_core::api::ApiError)))]
async fn put_workload(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, Failure> {
    authorize(&state, &headers, true)?;
    let body = body.map_err(|e| body_failure(&e, state.config.max_body_bytes))?;
    let body: WorkloadBody = parse_json(&body)?;
    let mut guard = state.write()?;
    let serving = guard.as_mut().ok_or_else(not_ready)?;
    let model = serving.model.clone();
    let created = serving
        .registry
        .put(state.store.as_ref(), &model, &id, body)?;
    let registered = serving
        .registry
        .get(&id)
        .map(|e| e.registered.clone())
        .ok_or_else(|| Failure::new(StatusCode::INTERNAL_SERVER_ERROR, "lost a write"))?;
    drop(guard);
    tracing::info!(workload = %id, created, "workload registered");
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(registered)).into_response())
}

#[utoipa::path(delete, path = "/v1/workloads/{id}", responses(
    (status = 204), (status = 401, body = duet_core::api::ApiError),
    (status = 404, body = duet_core::api::ApiError)))]
async fn delete_workload(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<StatusCode, Failure> {
    authorize(&state, &headers, true)?;
    let mut guard = state.write()?;
    let serving = guard.as_mut().ok_or_else(not_ready)?;
    serving.registry.delete(state.store.as_ref(), &id)?;
    drop(guard);
    tracing::info!(workload = %id, "workload deleted");
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /v1/models`: the serving model.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ModelInfo {
    pub name: String,
    pub version: String,
    pub engine: String,
    pub path: String,
    /// Unix seconds.
    pub loaded_at: u64,
    /// `model.json`: feature spec, training data, configuration and metrics per split.
    #[schema(value_type = Object)]
    pub meta: serde_json::Value,
}

#[utoipa::path(get, path = "/v1/models", responses((status = 200, body = Vec<ModelInfo>)))]
async fn models(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
) -> Result<Json<Vec<ModelInfo>>, Failure> {
    authorize(&state, &headers, false)?;
    let model = state.model()?;
    let meta = serde_json::to_value(&model.meta)
        .map_err(|e| Failure::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    Ok(Json(vec![ModelInfo {
        name: model.meta.name.clone(),
        version: model.version().to_string(),
        engine: model.engine.kind().to_string(),
        path: model.dir.display().to_string(),
        loaded_at: model.loaded_at,
        meta,
    }]))
}

/// `POST /v1/models/reload`: optional body naming another model folder.
#[derive(Debug, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReloadRequest {
    /// A model folder on the server's disk; the current one when absent.
    #[serde(default)]
    pub model: Option<String>,
}

#[utoipa::path(post, path = "/v1/models/reload", request_body = Option<ReloadRequest>, responses(
    (status = 200, body = Health), (status = 401, body = duet_core::api::ApiError),
    (status = 422, body = duet_core::api::ApiError, description = "refused; the old model serves")))]
async fn reload_route(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Health>, Failure> {
    authorize(&state, &headers, true)?;
    let body = body.map_err(|e| body_failure(&e, state.config.max_body_bytes))?;
    let request: ReloadRequest = if body.iter().all(u8::is_ascii_whitespace) {
        ReloadRequest::default()
    } else {
        parse_json(&body)?
    };
    let version = state.reload(request.model.map(PathBuf::from)).await?;
    Ok(Json(Health {
        status: "reloaded".into(),
        model_version: Some(version),
    }))
}

/// Authorisation for the KServe routes, which are reads.
pub(crate) fn authorize_read(state: &AppState, headers: &HeaderMap) -> Result<(), Failure> {
    authorize(state, headers, false)
}

pub(crate) fn not_ready_failure() -> Failure {
    not_ready()
}
