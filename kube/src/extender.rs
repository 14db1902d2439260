//! `duet extender`: an HTTP extender of the stock kube-scheduler (filter, prioritize, bind).
//!
//! For a pod that asks for GPUs it judges each candidate node from duet's own view of the
//! cluster (`nodeCacheCapable`: calls carry node names only) with one `/v1/predict` call:
//! filter drops a node where nothing fits, naming why in `FailedNodes`; prioritize scores each
//! node 0 to 10 by the value of the best shape there; bind records the chosen GPU and sharing on
//! the binding. It is configured `ignorable`: when it or the duet server cannot answer, the
//! scheduler goes on without it. `/readyz` says whether the view is current.

use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use duet_scheduler::client::PredictClient;
use duet_scheduler::predictor::HttpPredictor;
use k8s_openapi::api::core::v1::Pod;
use kube::{Api, Client};

use crate::bind;
use crate::call_args;
use crate::cluster::{GpuUse, PodInfo};
use crate::contract::{self, Assignment, Identity};
use crate::known::{Known, REFRESH, SingleFlight};
use crate::listen::{self, Limits};
use crate::metrics::{self, Metrics};
use crate::placement::{self, Shape, Verdict};
use crate::watch::{Freshness, View};
use crate::wire::{self, BadBody, ExtenderBindingArgs, ExtenderFilterResult, HostPriority};

/// The extender's settings.
#[derive(Debug, Clone)]
pub struct ExtenderConfig {
    pub listen: SocketAddr,
    /// The duet server, `http://host:port`.
    pub predictor: String,
    pub token: Option<String>,
    /// How long one `/v1/predict` call may take (the scheduler waits 5 s by default).
    pub predict_timeout: Duration,
    /// What a call may make it hold, and for how long (`listen.rs`).
    pub limits: Limits,
    /// Pods one GPU may hold (2: pairs).
    pub gpu_jobs: usize,
    /// The schedulerNames of the pods it binds (empty: any pod the kube-scheduler asks for).
    pub bind_schedulers: Vec<String>,
}

/// What the extender's calls share.
pub struct Extender {
    pub view: View,
    pub metrics: Metrics,
    known: RwLock<Known>,
    /// The catalogue's refresh, one at a time.
    refreshing: SingleFlight,
    /// The schedulerNames of the pods it binds (empty: any).
    schedulers: Vec<String>,
    client: PredictClient,
    kube: Option<Client>,
    gpu_jobs: usize,
    /// Nodes one call may name (`--max-nodes`).
    max_nodes: usize,
}

impl std::fmt::Debug for Extender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Extender")
            .field("predictor", &self.client.url())
            .finish_non_exhaustive()
    }
}

impl Extender {
    /// An extender over `view`, predicting with `client`; `kube` binds (none: bind refuses).
    pub fn new(view: View, client: PredictClient, kube: Option<Client>) -> Extender {
        Extender {
            view,
            metrics: Metrics::default(),
            known: RwLock::new(Known::default()),
            refreshing: SingleFlight::default(),
            schedulers: Vec::new(),
            client,
            kube,
            gpu_jobs: 2,
            max_nodes: listen::MAX_NODES,
        }
    }

    /// Refuses a call that names more than `max_nodes` nodes.
    #[must_use]
    pub fn with_max_nodes(mut self, max_nodes: usize) -> Extender {
        self.max_nodes = max_nodes;
        self
    }

    /// Binds only pods whose schedulerName is one of `schedulers` (the kube-scheduler's profiles
    /// that call it; none given: any).
    #[must_use]
    pub fn with_schedulers(mut self, schedulers: Vec<String>) -> Extender {
        self.schedulers = schedulers;
        self
    }

    /// Lets a GPU hold up to `gpu_jobs` pods (2: pairs).
    #[must_use]
    pub fn with_gpu_jobs(mut self, gpu_jobs: usize) -> Extender {
        self.gpu_jobs = gpu_jobs;
        self
    }

    /// Replaces the catalogue of known workloads (tests and benchmarks).
    pub fn set_known(&self, known: Known) {
        *self
            .known
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = known;
    }

    /// Reads the server's catalogue again where it is old, or where `pod` names a workload it
    /// lacks and it is more than two seconds old (a workload registered just now). One read at a
    /// time: calls that need one while it runs wait for it and use what it read.
    async fn refresh_known(&self, pod: &PodInfo) {
        let (stale, missing) = {
            let known = self
                .known
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let missing = match pod.job.as_ref().map(|j| &j.identity) {
                Ok(Identity::Workload(id)) => {
                    !known.has_any(id) && known.older_than(Duration::from_secs(2))
                }
                _ => false,
            };
            (known.older_than(REFRESH), missing)
        };
        if !(stale || missing) {
            return;
        }
        let client = self.client.clone();
        self.refreshing
            .run(async move {
                match tokio::task::spawn_blocking(move || Known::fetch(&client)).await {
                    Ok(Ok(known)) => self.set_known(known),
                    Ok(Err(e)) => tracing::warn!("workload catalogue: {e:#}"),
                    Err(e) => tracing::warn!("workload catalogue: {e}"),
                }
            })
            .await;
    }

    /// Every candidate node's verdict for `pod`, with at most one predictor call.
    pub async fn judge(&self, pod: &PodInfo, nodes: &[String]) -> Result<Vec<(String, Verdict)>> {
        self.refresh_known(pod).await;
        let survey = {
            let cluster = self.view.read();
            let known = self
                .known
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            placement::survey(&cluster, &self.view.map, &known, pod, nodes, self.gpu_jobs)
        };
        if let Some(why) = &survey.unknown {
            self.metrics.unknown(why);
        }
        if survey.query_count() == 0 {
            return Ok(survey.verdicts(&placement::Predicted::default()));
        }
        let client = self.client.clone();
        tokio::task::spawn_blocking(move || {
            let mut predictor = HttpPredictor::from_client(client);
            predictor.inline = survey.inline.clone();
            let outlooks = survey.predict(&mut predictor)?;
            Ok(survey.verdicts(&outlooks))
        })
        .await
        .context("the prediction task")?
    }

    /// The pod a binding names: from the view, else from the API server.
    async fn pod_to_bind(&self, args: &ExtenderBindingArgs) -> Result<PodInfo> {
        if let Some(pod) = self.view.read().pod(&args.pod_uid) {
            return Ok(pod.clone());
        }
        let kube = self.kube.as_ref().context("no Kubernetes client")?;
        let api: Api<Pod> = Api::namespaced(kube.clone(), &args.pod_namespace);
        let pod = api
            .get(&args.pod_name)
            .await
            .with_context(|| format!("pod {}/{}", args.pod_namespace, args.pod_name))?;
        Ok(PodInfo::read(&pod, &self.view.map.resource))
    }

    /// Where `pod` goes on `node` and what to record: the best shape duet sees, else (duet
    /// cannot judge it, or the predictor is unreachable) a free GPU where there is one.
    async fn choose(&self, pod: &PodInfo, node: &str) -> (Option<Assignment>, Option<Shape>) {
        let verdict = self
            .judge(pod, &[node.to_string()])
            .await
            .ok()
            .and_then(|mut v| v.pop())
            .map(|(_, v)| v);
        if let Some(Verdict::Fits { shape, .. }) = verdict {
            return (Some(shape.assignment()), Some(shape));
        }
        let cluster = self.view.read();
        let Some(info) = cluster.node(node) else {
            return (None, None);
        };
        #[allow(clippy::cast_possible_truncation)]
        let free: Vec<u32> = cluster
            .gpus_of(info)
            .iter()
            .enumerate()
            .filter(|(_, u)| **u == GpuUse::Free)
            .map(|(g, _)| g as u32)
            .take(pod.gpus as usize)
            .collect();
        if pod.gpus > 0 && free.len() == pod.gpus as usize {
            let whole_share = self
                .view
                .map
                .strategy(&info.strategy)
                .and_then(|s| s.whole_share);
            return (
                Some(Assignment {
                    gpus: free,
                    sharing: None,
                    mps_share: whole_share,
                }),
                None,
            );
        }
        (None, None)
    }
}

/// The extender's routes, behind the guards of `limits` (`listen::guarded`).
pub fn router(extender: Arc<Extender>, limits: &Limits) -> Router {
    let routes = Router::new()
        .route("/filter", post(filter))
        .route("/prioritize", post(prioritize))
        .route("/bind", post(bind_pod))
        .merge(probe_routes())
        .with_state(extender.clone());
    listen::guarded(routes, limits, &extender.metrics.guards)
}

/// `/healthz`, `/readyz` and `/metrics`, for any state that holds a view and metrics.
pub fn probe_routes<S: Probed + Send + Sync + 'static>() -> Router<Arc<S>> {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz::<S>))
        .route("/metrics", get(metrics_text::<S>))
}

/// What the probes read.
pub trait Probed {
    fn view(&self) -> &View;
    fn metrics(&self) -> &Metrics;
}

impl Probed for Extender {
    fn view(&self) -> &View {
        &self.view
    }
    fn metrics(&self) -> &Metrics {
        &self.metrics
    }
}

async fn readyz<S: Probed>(State(s): State<Arc<S>>) -> Response {
    match s.view().health.freshness() {
        Freshness::Current => (StatusCode::OK, "ready\n".to_string()).into_response(),
        Freshness::Syncing => (
            StatusCode::SERVICE_UNAVAILABLE,
            "syncing: the node and pod watches have not listed yet\n".to_string(),
        )
            .into_response(),
        Freshness::Stale { for_s, error } => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "stale: the view has not been kept current for {for_s:.0} s ({error}); answering from the cache\n"
            ),
        )
            .into_response(),
    }
}

async fn metrics_text<S: Probed>(State(s): State<Arc<S>>) -> Response {
    let text = s.metrics().render(&s.view().health.freshness());
    ([(header::CONTENT_TYPE, metrics::CONTENT_TYPE)], text).into_response()
}

fn bad_request(x: &Extender, verb: &str, bad: BadBody, started: Instant) -> Response {
    x.metrics
        .request(verb, "bad_request", started.elapsed().as_secs_f64());
    let status = if bad.too_large {
        StatusCode::PAYLOAD_TOO_LARGE
    } else {
        StatusCode::BAD_REQUEST
    };
    if bad.too_large {
        x.metrics.guards.refused("max_nodes");
    }
    listen::refusal(status, bad.error, bad.field)
}

fn unavailable(x: &Extender, verb: &str, e: &anyhow::Error, started: Instant) -> Response {
    x.metrics
        .request(verb, "unavailable", started.elapsed().as_secs_f64());
    tracing::warn!("{verb}: {e:#}");
    listen::refusal(StatusCode::SERVICE_UNAVAILABLE, format!("{e:#}"), None)
}

async fn filter(State(x): State<Arc<Extender>>, body: Bytes) -> Response {
    let started = Instant::now();
    let (info, names, list) = match call_args::read(&body, x.max_nodes, &x.view.map.resource) {
        Ok(v) => v,
        Err(bad) => return bad_request(&x, "filter", bad, started),
    };
    let verdicts = match x.judge(&info, &names).await {
        Ok(v) => v,
        Err(e) => return unavailable(&x, "filter", &e, started),
    };
    let mut result = ExtenderFilterResult::default();
    let mut passed = Vec::new();
    for (name, verdict) in verdicts {
        match verdict {
            Verdict::Fails(why) => {
                result
                    .failed_nodes
                    .entry(name)
                    .or_insert_with(|| format!("duet: {why}"));
            }
            _ => passed.push(name),
        }
    }
    match list {
        Some(mut list) => {
            let keep: std::collections::HashSet<&str> = passed.iter().map(String::as_str).collect();
            list.retain(|n| keep.contains(n));
            result.nodes = Some(list);
        }
        None => result.node_names = Some(passed),
    }
    x.metrics
        .request("filter", "ok", started.elapsed().as_secs_f64());
    axum::Json(result).into_response()
}

async fn prioritize(State(x): State<Arc<Extender>>, body: Bytes) -> Response {
    let started = Instant::now();
    let (info, names, _) = match call_args::read(&body, x.max_nodes, &x.view.map.resource) {
        Ok(v) => v,
        Err(bad) => return bad_request(&x, "prioritize", bad, started),
    };
    let verdicts = match x.judge(&info, &names).await {
        Ok(v) => v,
        Err(e) => return unavailable(&x, "prioritize", &e, started),
    };
    let list: Vec<HostPriority> = verdicts
        .iter()
        .map(|(name, v)| HostPriority {
            host: name.clone(),
            score: v.score(),
        })
        .collect();
    x.metrics
        .request("prioritize", "ok", started.elapsed().as_secs_f64());
    axum::Json(list).into_response()
}

async fn bind_pod(State(x): State<Arc<Extender>>, body: Bytes) -> Response {
    let started = Instant::now();
    let args: ExtenderBindingArgs = match wire::read(&body) {
        Ok(v) => v,
        Err(bad) => return bad_request(&x, "bind", bad, started),
    };
    let answer = |error: String| axum::Json(wire::ExtenderBindingResult { error });
    let pod = match x.pod_to_bind(&args).await {
        Ok(p) => p,
        Err(e) => {
            x.metrics
                .request("bind", "unavailable", started.elapsed().as_secs_f64());
            return answer(format!("{e:#}")).into_response();
        }
    };
    let request = bind::Request {
        namespace: &args.pod_namespace,
        name: &args.pod_name,
        uid: &args.pod_uid,
        node: &args.node,
    };
    let refused = bind::refusal(request, &pod, &x.view.read(), &x.schedulers);
    if let Some(why) = refused {
        tracing::warn!("bind refused: {why}");
        x.metrics
            .request("bind", "refused", started.elapsed().as_secs_f64());
        return answer(format!("duet refuses to bind: {why}")).into_response();
    }
    let Some(kube) = x.kube.clone() else {
        return answer("this extender has no Kubernetes client".into()).into_response();
    };
    let (assignment, shape) = x.choose(&pod, &args.node).await;
    let annotations = match (&assignment, &shape) {
        (Some(a), Some(shape)) => {
            let (beside, speed) = shape.beside();
            contract::assignment_annotations(a, beside.as_deref(), speed)
        }
        (Some(a), None) => contract::assignment_annotations(a, None, None),
        (None, _) => Default::default(),
    };
    match bind::bind(&kube, &pod, &args.node, annotations).await {
        Ok(recorded) => {
            if !recorded {
                x.metrics.record_failures.inc();
            }
            if let Some(a) = assignment {
                x.view.write().assume(pod, &args.node, a);
            }
            x.metrics
                .bound(shape.as_ref().map_or("unjudged", Shape::kind));
            x.metrics
                .request("bind", "ok", started.elapsed().as_secs_f64());
            answer(String::new()).into_response()
        }
        Err(e) => {
            x.metrics.bind_failures.inc();
            x.metrics
                .request("bind", "unavailable", started.elapsed().as_secs_f64());
            answer(e.to_string()).into_response()
        }
    }
}

/// Serves the extender until SIGTERM or Ctrl-C: the watches, the catalogue refresh, the routes.
pub async fn serve(config: ExtenderConfig, view: View, kube: Client) -> Result<()> {
    let client = PredictClient::new(
        &config.predictor,
        config.token.clone(),
        config.predict_timeout,
    );
    view.spawn_watches(&kube);
    let extender = Arc::new(
        Extender::new(view, client, Some(kube.clone()))
            .with_gpu_jobs(config.gpu_jobs)
            .with_max_nodes(config.limits.max_nodes)
            .with_schedulers(config.bind_schedulers.clone()),
    );
    let mut needed = crate::access::VIEW.to_vec();
    if !config.bind_schedulers.is_empty() {
        needed.extend(crate::access::BIND);
    }
    let (checked, asking) = (extender.clone(), kube.clone());
    tokio::spawn(async move { crate::access::check(&asking, &needed, &checked.metrics).await });
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("--listen {}", config.listen))?;
    tracing::info!(
        "duet extender on http://{} (filter, prioritize, bind), predicting with {}",
        listener.local_addr().unwrap_or(config.listen),
        config.predictor
    );
    let guards = extender.metrics.guards.clone();
    let app = router(extender, &config.limits);
    listen::serve(
        listener,
        app,
        &config.limits,
        &guards,
        crate::shutdown_signal(),
    )
    .await;
    Ok(())
}
