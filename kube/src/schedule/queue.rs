//! Which waiting pods a round weighs where more wait than its window, and what `duet schedule`
//! remembers between steps to choose them: the steps each pod was weighed and left waiting, and
//! the room the GPU nodes had left. As the stock scheduler's queue sets aside a pod it could not
//! place and takes it back, in priority order, when the cluster changes in a way that may let it
//! on, a pod passed over steps aside for pods weighed fewer times, until room is freed. A pod
//! whose binding failed is held back from the rounds for a while that doubles with each failure
//! (`Backlog::failed`), as the stock scheduler's backoff queue holds it.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use crate::cluster::{Cluster, GpuUse, PodInfo};
use crate::devices::NodeInfo;

use super::Plan;

/// For each waiting pod (UID), the steps in which a round weighed it and left it waiting since
/// room was last freed.
pub type PassedOver = HashMap<String, u32>;

/// How long a pod whose binding failed once is held back from the rounds; each failure after
/// doubles it, up to [`BACKOFF_MAX`]. kube-scheduler's defaults (`podInitialBackoffSeconds`,
/// `podMaxBackoffSeconds`): a binding refused for a reason that passes (a quota, an admission
/// webhook down) is tried again soon, and one that keeps failing costs the API server and the
/// step one attempt in ten seconds, not one a step.
pub const BACKOFF_FIRST: Duration = Duration::from_secs(1);
/// The longest a pod is held back after failed bindings.
pub const BACKOFF_MAX: Duration = Duration::from_secs(10);

/// The failed bindings in a row of a waiting pod, and until when it is held back.
#[derive(Debug, Clone, Copy)]
struct HeldBack {
    failures: u32,
    until: Instant,
}

/// What `duet schedule` carries from one step to the next about the pods it weighs.
#[derive(Debug, Default)]
pub struct Backlog {
    passed_over: PassedOver,
    /// The room each GPU node had left after the last step's bindings (`room`).
    room: BTreeMap<String, usize>,
    /// Pods (UIDs) whose binding failed, until they are bound or gone.
    held_back: HashMap<String, HeldBack>,
}

impl Backlog {
    /// At a step's start, over `cluster` with the pods (UIDs) `waiting`: forgets pods no longer
    /// waiting (the failed bindings of pods gone or bound), and every count where a node has
    /// room the last step did not leave it (a pod gone, a node added or grown), so the room goes
    /// by priority. Returns the counts.
    pub fn begin(
        &mut self,
        cluster: &Cluster,
        waiting: &HashSet<&str>,
        gpu_jobs: usize,
    ) -> &PassedOver {
        self.passed_over
            .retain(|uid, _| waiting.contains(uid.as_str()));
        // A pod whose binding is in flight is not waiting, and keeps its failures.
        self.held_back
            .retain(|uid, _| cluster.pod(uid).is_some_and(|p| p.node.is_none()));
        let freed = room(cluster, gpu_jobs)
            .iter()
            .any(|(node, &now)| now > self.room.get(node).copied().unwrap_or(0));
        if freed {
            self.passed_over.clear();
        }
        &self.passed_over
    }

    /// At a step's end: one more for each pod a round of `plan` weighed and did not bind, and
    /// `room_after`, the room the cluster with `plan`'s bindings leaves.
    pub fn end(&mut self, plan: &Plan, room_after: BTreeMap<String, usize>) {
        let bound: HashSet<&str> = plan.bound.iter().map(|b| b.pod.as_str()).collect();
        for uid in &plan.weighed {
            if !bound.contains(uid.as_str()) {
                *self.passed_over.entry(uid.clone()).or_default() += 1;
            }
        }
        self.room = room_after;
    }

    /// Records a failed binding of the pod `uid` at `now`: it is held back from the rounds for
    /// [`BACKOFF_FIRST`], doubled for each failure before it in a row, up to [`BACKOFF_MAX`].
    /// Returns how long.
    pub fn failed(&mut self, uid: &str, now: Instant) -> Duration {
        let failures = self.held_back.get(uid).map_or(0, |h| h.failures) + 1;
        let wait = BACKOFF_FIRST
            .saturating_mul(1 << (failures - 1).min(16))
            .min(BACKOFF_MAX);
        self.held_back.insert(
            uid.to_string(),
            HeldBack {
                failures,
                until: now + wait,
            },
        );
        wait
    }

    /// The failed bindings in a row of the pod `uid` (0: none, or it was bound since).
    pub fn failures(&self, uid: &str) -> u32 {
        self.held_back.get(uid).map_or(0, |h| h.failures)
    }

    /// Whether the pod `uid` is held back from the rounds at `now` (`failed`).
    pub fn held_back(&self, uid: &str, now: Instant) -> bool {
        self.held_back.get(uid).is_some_and(|h| now < h.until)
    }

    /// Takes `places` more room on `node` for room the last step left: what a binding that
    /// failed after the step leaves free, which is not room freed.
    pub fn unbound(&mut self, node: &str, places: usize) {
        if let Some(room) = self.room.get_mut(node) {
            *room += places;
        }
    }

    /// Forgets the failed bindings of the pod `uid`, bound now.
    pub fn bound(&mut self, uid: &str) {
        self.held_back.remove(uid);
    }
}

/// The places for pods each GPU node of `cluster` has left, `gpu_jobs` to a GPU: a free GPU's
/// every place, a shared one's that its pods leave, none on a GPU duet cannot place beside.
pub fn room(cluster: &Cluster, gpu_jobs: usize) -> BTreeMap<String, usize> {
    cluster
        .nodes()
        .filter(|n| n.device.is_some() && n.schedulable && n.gpus > 0)
        .map(|n| (n.name.clone(), room_on(cluster, n, gpu_jobs)))
        .collect()
}

/// The places for pods the node `node` of `cluster` has left (`room`).
pub fn room_on(cluster: &Cluster, node: &NodeInfo, gpu_jobs: usize) -> usize {
    cluster
        .gpus_of(node)
        .iter()
        .map(|u| match u {
            GpuUse::Free => gpu_jobs,
            GpuUse::Alone { .. } => gpu_jobs.saturating_sub(1),
            GpuUse::Shared { pods } => gpu_jobs.saturating_sub(pods.len()),
            GpuUse::Full => 0,
        })
        .sum()
}

/// `order` (pods of `pending` by rank) with the first `window` places, where more wait, taken
/// by namespace in turn (each namespace's pods by the steps they were passed over, fewest
/// first, then in rank; namespaces by the fewest steps one of their pods was passed over, then
/// in the rank of their first), then kept in rank: rank orders a namespace's pods, one
/// namespace's many pods cannot fill a round and keep every other namespace's out, and pods
/// that were weighed and left waiting step aside for pods not weighed as often, within their
/// namespace and across namespaces. Below the window the order is as it came.
pub(super) fn fair_window(
    order: Vec<usize>,
    pending: &[PodInfo],
    passed_over: &PassedOver,
    window: usize,
) -> Vec<usize> {
    if order.len() <= window {
        return order;
    }
    let mut by_namespace: Vec<(&str, VecDeque<usize>)> = Vec::new();
    for &i in &order {
        let ns = pending[i].namespace.as_str();
        match by_namespace.iter_mut().find(|(n, _)| *n == ns) {
            Some((_, queue)) => queue.push_back(i),
            None => by_namespace.push((ns, VecDeque::from([i]))),
        }
    }
    // Stable sorts: within as many steps passed over, the rank; a namespace whose pods were all
    // passed over goes after those with a pod passed over fewer times.
    let passed = |i: usize| passed_over.get(&pending[i].uid).copied().unwrap_or(0);
    for (_, queue) in &mut by_namespace {
        queue.make_contiguous().sort_by_key(|&i| passed(i));
    }
    by_namespace.sort_by_key(|(_, queue)| queue.front().map_or(0, |&i| passed(i)));
    let mut chosen = HashSet::new();
    while chosen.len() < window {
        for (_, queue) in &mut by_namespace {
            if chosen.len() < window
                && let Some(i) = queue.pop_front()
            {
                chosen.insert(i);
            }
        }
    }
    let (mut first, rest): (Vec<usize>, Vec<usize>) =
        order.into_iter().partition(|i| chosen.contains(i));
    first.extend(rest);
    first
}
