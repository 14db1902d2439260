//! The watches that keep duet's view of the cluster (`Cluster`): nodes and pods, listed once
//! and then followed, never listed per request. While the API server cannot be reached the view
//! is kept as it was and marked stale; a probe of the API server every few seconds clears that
//! once it answers again (a resumed watch says nothing until something changes).

use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};

use crate::cluster::{Cluster, PodInfo};
use crate::devices::{DeviceMap, NodeInfo};

/// How often the API server is probed while the watches are quiet.
pub const PROBE: Duration = Duration::from_secs(2);

#[derive(Debug, Default)]
struct HealthState {
    nodes_listed: bool,
    pods_listed: bool,
    /// The last time the API server answered (an event, a list, a probe).
    last_ok: Option<Instant>,
    /// The first failure since then, and what it said.
    failing: Option<(Instant, String)>,
}

/// Whether the view is complete and current.
#[derive(Debug, Default)]
pub struct Health(Mutex<HealthState>);

/// The view's health as `/readyz` reports it.
#[derive(Debug, Clone, PartialEq)]
pub enum Freshness {
    /// Both watches have listed once and the API server answers.
    Current,
    /// Not listed yet.
    Syncing,
    /// The API server has not answered for this long; the view is what it was then.
    Stale { for_s: f64, error: String },
}

impl Health {
    fn update(&self, f: impl FnOnce(&mut HealthState)) {
        let mut state = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut state);
    }

    fn ok(&self) {
        self.update(|s| {
            s.last_ok = Some(Instant::now());
            s.failing = None;
        });
    }

    fn failed(&self, error: String) {
        self.update(|s| {
            if s.failing.is_none() {
                s.failing = Some((Instant::now(), error));
            }
        });
    }

    pub fn freshness(&self) -> Freshness {
        let s = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((since, error)) = &s.failing {
            return Freshness::Stale {
                for_s: since.elapsed().as_secs_f64(),
                error: error.clone(),
            };
        }
        if s.nodes_listed && s.pods_listed {
            Freshness::Current
        } else {
            Freshness::Syncing
        }
    }
}

/// The view and its health, shared by the watches and whoever reads them.
#[derive(Debug, Clone)]
pub struct View {
    pub cluster: Arc<RwLock<Cluster>>,
    pub health: Arc<Health>,
    pub map: Arc<DeviceMap>,
}

impl View {
    pub fn new(map: DeviceMap) -> View {
        View {
            cluster: Arc::new(RwLock::new(Cluster::default())),
            health: Arc::new(Health::default()),
            map: Arc::new(map),
        }
    }

    /// Reads the view (a poisoned lock still holds a consistent view: every writer replaces
    /// whole entries).
    pub fn read(&self) -> std::sync::RwLockReadGuard<'_, Cluster> {
        self.cluster
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn write(&self) -> std::sync::RwLockWriteGuard<'_, Cluster> {
        self.cluster
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Starts the node and pod watches and the API server probe on the current runtime.
    pub fn spawn_watches(&self, client: &Client) {
        let nodes: Api<Node> = Api::all(client.clone());
        let pods: Api<Pod> = Api::all(client.clone());
        let view = self.clone();
        tokio::spawn(async move {
            let map = view.map.clone();
            follow(
                nodes,
                &view,
                move |n| NodeInfo::read(n, &map),
                |c, list| c.replace_nodes(list),
                |c, n| c.apply_node(n),
                |c, n| c.remove_node(&n.name),
                |s| s.nodes_listed = true,
            )
            .await;
        });
        let view = self.clone();
        tokio::spawn(async move {
            let resource = view.map.resource.clone();
            follow(
                pods,
                &view,
                move |p| PodInfo::read(p, &resource),
                |c, list| c.replace_pods(list),
                |c, p| c.apply_pod(p),
                |c, p| c.remove_pod(&p.uid),
                |s| s.pods_listed = true,
            )
            .await;
        });
        let health = self.health.clone();
        let client = client.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(PROBE).await;
                match client.apiserver_version().await {
                    Ok(_) => health.ok(),
                    Err(e) => health.failed(format!("the API server: {e}")),
                }
            }
        });
    }
}

/// Follows one kind of object into the view.
#[allow(clippy::too_many_arguments)]
async fn follow<K, T>(
    api: Api<K>,
    view: &View,
    read: impl Fn(&K) -> T,
    replace: impl Fn(&mut Cluster, Vec<T>),
    apply: impl Fn(&mut Cluster, T),
    remove: impl Fn(&mut Cluster, T),
    listed: impl Fn(&mut HealthState),
) where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let mut stream = watcher::watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    let mut buffer: Vec<T> = Vec::new();
    while let Some(event) = stream.next().await {
        match event {
            Ok(Event::Init) => buffer.clear(),
            Ok(Event::InitApply(object)) => buffer.push(read(&object)),
            Ok(Event::InitDone) => {
                replace(&mut view.write(), std::mem::take(&mut buffer));
                view.health.update(&listed);
            }
            Ok(Event::Apply(object)) => apply(&mut view.write(), read(&object)),
            Ok(Event::Delete(object)) => remove(&mut view.write(), read(&object)),
            Err(e) => {
                view.health.failed(format!("watch: {e}"));
                continue;
            }
        }
        view.health.ok();
    }
}
