//! The watches that keep duet's view of the cluster (`Cluster`): nodes and pods, listed once
//! and then followed, never listed per request. While the API server cannot be reached the view
//! is kept as it was and marked stale; a probe of the API server every few seconds clears that
//! once it answers again (a resumed watch says nothing until something changes). A watch task
//! that ends or panics is started again after a backoff, and the view is stale from then until
//! the new watch has listed.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
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

/// The watches the view needs listed.
const WATCHES: [&str; 2] = ["node", "pod"];

/// How long a stopped watch waits before it is started again: the first wait, the longest.
const RESTART: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(60));

#[derive(Debug, Default)]
struct HealthState {
    /// The watches that have listed once since they were (re)started.
    listed: BTreeSet<&'static str>,
    /// The watches that stopped (ended or panicked) and have not listed again since: when, why.
    stopped: BTreeMap<&'static str, (Instant, String)>,
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
    /// The view has not been kept current for this long (the API server does not answer, or a
    /// watch stopped and has not listed again); it is what it was then.
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

    /// The watch `name` has listed the cluster: its part of the view is current.
    fn listed(&self, name: &'static str) {
        self.update(|s| {
            s.listed.insert(name);
            s.stopped.remove(name);
        });
    }

    /// The watch `name` stopped (`why`): its part of the view is no longer kept.
    fn stopped(&self, name: &'static str, why: String) {
        self.update(|s| {
            s.listed.remove(name);
            s.stopped.entry(name).or_insert((Instant::now(), why));
        });
    }

    pub fn freshness(&self) -> Freshness {
        let s = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((name, (since, why))) = s.stopped.iter().min_by_key(|(_, (t, _))| *t) {
            return Freshness::Stale {
                for_s: since.elapsed().as_secs_f64(),
                error: format!("the {name} watch stopped ({why}) and is being restarted"),
            };
        }
        if let Some((since, error)) = &s.failing {
            return Freshness::Stale {
                for_s: since.elapsed().as_secs_f64(),
                error: error.clone(),
            };
        }
        if WATCHES.iter().all(|w| s.listed.contains(w)) {
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

    /// Starts the node and pod watches (each restarted when it stops) and the API server probe
    /// on the current runtime.
    pub fn spawn_watches(&self, client: &Client) {
        let nodes: Api<Node> = Api::all(client.clone());
        let pods: Api<Pod> = Api::all(client.clone());
        let view = self.clone();
        tokio::spawn(supervise("node", self.health.clone(), RESTART, move || {
            let (view, nodes) = (view.clone(), nodes.clone());
            async move {
                let map = view.map.clone();
                follow(
                    "node",
                    nodes,
                    &view,
                    move |n| NodeInfo::read(n, &map),
                    |c, list| c.replace_nodes(list),
                    |c, n| c.apply_node(n),
                    |c, n| c.remove_node(&n.name),
                )
                .await;
            }
        }));
        let view = self.clone();
        tokio::spawn(supervise("pod", self.health.clone(), RESTART, move || {
            let (view, pods) = (view.clone(), pods.clone());
            async move {
                let resource = view.map.resource.clone();
                follow(
                    "pod",
                    pods,
                    &view,
                    move |p| PodInfo::read(p, &resource),
                    |c, list| c.replace_pods(list),
                    |c, p| c.apply_pod(p),
                    |c, p| c.remove_pod(&p.uid),
                )
                .await;
            }
        }));
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

/// Runs the watch `name` that `start` makes, for ever: each run is a task of its own, and one
/// that ends or panics marks the view stale (`Health::stopped`) and is started again after
/// `backoff.0`, doubling up to `backoff.1` while runs keep stopping within a minute.
async fn supervise<F, Fut>(
    name: &'static str,
    health: Arc<Health>,
    backoff: (Duration, Duration),
    mut start: F,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let mut wait = backoff.0;
    loop {
        let began = Instant::now();
        let why = match tokio::spawn(start()).await {
            Ok(()) => "it ended".to_string(),
            Err(e) if e.is_panic() => {
                let text = duet_core::panic::message(e.into_panic().as_ref());
                duet_core::api::clipped(format!("it panicked: {text}"))
            }
            Err(e) => e.to_string(),
        };
        health.stopped(name, why.clone());
        if began.elapsed() >= Duration::from_secs(60) {
            wait = backoff.0;
        }
        tracing::error!(
            "the {name} watch stopped ({why}); restarting it in {:.1} s",
            wait.as_secs_f64()
        );
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(backoff.1);
    }
}

/// Follows one kind of object into the view (`name`: the watch, for its health).
async fn follow<K, T>(
    name: &'static str,
    api: Api<K>,
    view: &View,
    read: impl Fn(&K) -> T,
    replace: impl Fn(&mut Cluster, Vec<T>),
    apply: impl Fn(&mut Cluster, T),
    remove: impl Fn(&mut Cluster, T),
) where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let mut stream = watcher::watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    let mut buffer: Vec<T> = Vec::new();
    while let Some(event) = stream.next().await {
        // Each object is read before the view's lock is taken: a panic in a reading leaves the
        // view as it was.
        match event {
            Ok(Event::Init) => buffer.clear(),
            Ok(Event::InitApply(object)) => buffer.push(read(&object)),
            Ok(Event::InitDone) => {
                let list = std::mem::take(&mut buffer);
                replace(&mut view.write(), list);
                view.health.listed(name);
            }
            Ok(Event::Apply(object)) => {
                let item = read(&object);
                apply(&mut view.write(), item);
            }
            Ok(Event::Delete(object)) => {
                let item = read(&object);
                remove(&mut view.write(), item);
            }
            Err(e) => {
                view.health.failed(format!("watch: {e}"));
                continue;
            }
        }
        view.health.ok();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_watch_that_panics_is_restarted_and_the_view_is_stale_until_it_lists() {
        let health = Arc::new(Health::default());
        health.listed("node");
        health.listed("pod");
        let (runs, mut ran) = tokio::sync::mpsc::unbounded_channel::<u32>();
        let go = Arc::new(tokio::sync::Notify::new());
        let (mut count, watched, lists) = (0, health.clone(), go.clone());
        let supervisor = tokio::spawn(supervise(
            "pod",
            health.clone(),
            (Duration::from_millis(1), Duration::from_millis(1)),
            move || {
                count += 1;
                let (n, runs, health, go) = (count, runs.clone(), watched.clone(), lists.clone());
                async move {
                    let _ = runs.send(n);
                    assert!(n > 1, "a pod asked for too many GPUs");
                    // The second run lists when told to, then follows for ever.
                    go.notified().await;
                    health.listed("pod");
                    std::future::pending::<()>().await;
                }
            },
        ));
        assert_eq!(ran.recv().await, Some(1));
        assert_eq!(ran.recv().await, Some(2), "restarted after the panic");
        let Freshness::Stale { error, .. } = health.freshness() else {
            panic!("{:?}", health.freshness())
        };
        assert!(error.contains("the pod watch stopped"), "{error}");
        assert!(error.contains("too many GPUs"), "{error}");
        go.notify_one();
        while health.freshness() != Freshness::Current {
            tokio::task::yield_now().await;
        }
        supervisor.abort();
    }

    #[test]
    fn a_stopped_watch_makes_the_view_stale_until_it_lists_again() {
        let health = Health::default();
        health.listed("node");
        assert_eq!(health.freshness(), Freshness::Syncing);
        health.listed("pod");
        assert_eq!(health.freshness(), Freshness::Current);
        health.stopped("pod", "it panicked: boom".into());
        // The API server answering does not make a stopped watch current.
        health.ok();
        let Freshness::Stale { error, .. } = health.freshness() else {
            panic!("{:?}", health.freshness())
        };
        assert!(
            error.contains("pod watch stopped (it panicked: boom)"),
            "{error}"
        );
        health.listed("pod");
        assert_eq!(health.freshness(), Freshness::Current);
    }
}
