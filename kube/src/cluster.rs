//! duet's own view of the cluster, kept by the watches (`watch.rs`): the GPU nodes as the
//! mapping reads them, the pods that ask for GPUs with what their annotations say, and which
//! GPU of its node each bound pod holds.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::contract::{self, AnnotationError, Assignment, JobSpec};
use crate::devices::{DeviceMap, NodeInfo};

/// What duet knows of one pod.
#[derive(Debug, Clone, PartialEq)]
pub struct PodInfo {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    /// The node it is bound to.
    pub node: Option<String>,
    pub scheduler: String,
    /// GPUs it asks for (the mapping's resource).
    pub gpus: u32,
    /// What its annotations say it is; an unreadable annotation makes it one duet does not know.
    pub job: Result<JobSpec, AnnotationError>,
    /// Where duet put it (bound pods): as duet's record in the pod's status says
    /// (`contract::RECORD`), else as its annotations say (a pod bound before duet kept the record,
    /// or bound by hand with them).
    pub assignment: Option<Assignment>,
    /// `assignment` is duet's record's (or this process's own binding's), not the annotations'.
    pub recorded: bool,
    /// Creation time, nanoseconds since the epoch: the order pods arrived in.
    pub created_ns: i128,
    /// Succeeded or failed: it holds no GPU any more.
    pub finished: bool,
    /// Being deleted.
    pub deleting: bool,
    /// Held back by `spec.schedulingGates` (a queue such as Kueue admits it later): no
    /// scheduler may bind it until they are removed.
    pub gated: bool,
    /// Its priority as Kubernetes resolved it from its PriorityClass (`spec.priority`; 0 without
    /// one): `duet schedule` weighs pods of a higher one first where more wait than a round
    /// weighs, as the stock scheduler's queue takes them first.
    pub class_priority: i32,
    /// Its node selector.
    pub node_selector: BTreeMap<String, String>,
    /// Its tolerations: key (empty: every key), operator (`Exists`, `Equal`), value, effect
    /// (empty: every effect).
    pub tolerations: Vec<(String, String, String, String)>,
}

impl PodInfo {
    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// Whether its node selector and tolerations let it onto `node` (what `duet schedule`
    /// judges besides GPUs; the stock scheduler judges the extender's pods itself).
    pub fn may_run_on(&self, node: &NodeInfo) -> bool {
        self.node_selector
            .iter()
            .all(|(k, v)| node.labels.get(k) == Some(v))
            && node.taints.iter().all(|(key, value, effect)| {
                self.tolerations.iter().any(|(k, op, v, e)| {
                    (e.is_empty() || e == effect)
                        && ((k.is_empty() && op == "Exists")
                            || (k == key && (op == "Exists" || v == value)))
                })
            })
    }

    /// Reads a pod (`resource`: the extended resource GPUs are asked for by).
    pub fn read(pod: &Pod, resource: &str) -> PodInfo {
        let empty = BTreeMap::new();
        let annotations = pod.metadata.annotations.as_ref().unwrap_or(&empty);
        let spec = pod.spec.as_ref();
        fn of<'a>(list: Option<&'a BTreeMap<String, Quantity>>, resource: &str) -> Option<&'a str> {
            list.and_then(|l| l.get(resource)).map(|q| q.0.as_str())
        }
        let asked = |c: &Container| -> u32 {
            let r = c.resources.as_ref();
            gpus_asked(
                of(r.and_then(|r| r.limits.as_ref()), resource),
                of(r.and_then(|r| r.requests.as_ref()), resource),
            )
        };
        let mut asks = GpuAsks::default();
        for c in spec.map_or(&[][..], |s| &s.containers[..]) {
            asks.container(asked(c));
        }
        for c in spec
            .and_then(|s| s.init_containers.as_deref())
            .unwrap_or_default()
        {
            asks.init_container(asked(c), c.restart_policy.as_deref() == Some("Always"));
        }
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        let recorded = recorded_assignment(pod);
        PodInfo {
            uid: pod.metadata.uid.clone().unwrap_or_default(),
            namespace: pod
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into()),
            name: pod.metadata.name.clone().unwrap_or_default(),
            node: spec
                .and_then(|s| s.node_name.clone())
                .filter(|n| !n.is_empty()),
            scheduler: spec
                .and_then(|s| s.scheduler_name.clone())
                .unwrap_or_else(|| "default-scheduler".into()),
            gpus: asks.total(),
            // What it is matters only where it asks for GPUs: a pod that asks none is never
            // placed by duet nor priced beside, so its annotations are not read (any pod of the
            // cluster could carry a large profile).
            job: if asks.total() > 0 {
                contract::job_of(annotations)
            } else {
                Ok(JobSpec::unknown())
            },
            assignment: recorded
                .clone()
                .or_else(|| contract::assignment_of(annotations).ok().flatten()),
            recorded: recorded.is_some(),
            created_ns: pod
                .metadata
                .creation_timestamp
                .as_ref()
                .map_or(0, |t| t.0.as_nanosecond()),
            finished: matches!(phase, Some("Succeeded" | "Failed")),
            deleting: pod.metadata.deletion_timestamp.is_some(),
            class_priority: spec.and_then(|s| s.priority).unwrap_or(0),
            gated: spec
                .and_then(|s| s.scheduling_gates.as_ref())
                .is_some_and(|gates| !gates.is_empty()),
            node_selector: spec
                .and_then(|s| s.node_selector.clone())
                .unwrap_or_default(),
            tolerations: spec
                .and_then(|s| s.tolerations.as_ref())
                .map(|ts| {
                    ts.iter()
                        .map(|t| {
                            (
                                t.key.clone().unwrap_or_default(),
                                t.operator.clone().unwrap_or_else(|| "Equal".into()),
                                t.value.clone().unwrap_or_default(),
                                t.effect.clone().unwrap_or_default(),
                            )
                        })
                        .collect()
                })
                .unwrap_or_default(),
        }
    }
}

/// A pod's GPU count as a message says it: a count that saturated `u32` asked for at least that
/// many.
pub fn gpu_count_text(gpus: u32) -> String {
    if gpus == u32::MAX {
        format!("{gpus} or more")
    } else {
        gpus.to_string()
    }
}

/// GPUs one container asks for, given its limit and its request of the resource: the limit
/// where it has one, else the request, read as a quantity (`1k` is 1,000, `2000m` is 2); a
/// count past `u32` is the most there is, and a quantity that is not a whole count (`0.5`,
/// `-1`; the API server refuses both for an extended resource) asks for none.
pub fn gpus_asked(limit: Option<&str>, request: Option<&str>) -> u32 {
    limit
        .or(request)
        .and_then(crate::quantity::whole_count)
        .unwrap_or(0)
}

/// The GPUs a pod asks for, folded container by container as Kubernetes counts a pod's
/// requests: its containers' and its sidecars' (init containers with `restartPolicy: Always`,
/// which run beside them) together, or, where more, what an init container asks beside the
/// sidecars started before it. Sums saturate: a sum past `u32` would panic (debug) or wrap to a
/// small count (release).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct GpuAsks {
    containers: u32,
    sidecars: u32,
    init_most: u32,
}

impl GpuAsks {
    /// A container (of `spec.containers`) asking `gpus`.
    pub fn container(&mut self, gpus: u32) {
        self.containers = self.containers.saturating_add(gpus);
    }

    /// The next init container (in order) asking `gpus`; `sidecar` where it restarts (`Always`).
    pub fn init_container(&mut self, gpus: u32, sidecar: bool) {
        if sidecar {
            self.sidecars = self.sidecars.saturating_add(gpus);
            self.init_most = self.init_most.max(self.sidecars);
        } else {
            self.init_most = self.init_most.max(gpus.saturating_add(self.sidecars));
        }
    }

    /// The pod's count.
    pub fn total(&self) -> u32 {
        self.containers
            .saturating_add(self.sidecars)
            .max(self.init_most)
    }
}

/// How one GPU of a node is used.
#[derive(Debug, Clone, PartialEq)]
pub enum GpuUse {
    Free,
    /// One pod of one GPU: it may take a neighbour.
    Alone {
        pod: String,
    },
    /// Two or more pods of one GPU each, every one placed by its annotations: a GPU that may
    /// hold more (`duet schedule --gpu-jobs`) may take another.
    Shared {
        pods: Vec<String>,
    },
    /// A pod of several GPUs, or pods duet cannot place on a GPU: closed.
    Full,
}

/// A pod bound by this process that the watch has not shown bound yet.
#[derive(Debug, Clone)]
struct Assumed {
    pod: PodInfo,
    at: Instant,
}

/// Where this process first saw a bound pod's GPUs (or bound it itself), where its annotations
/// now say otherwise on the same node: they are its owner's to edit, and a GPU record moved after
/// the binding would have duet place another pod on the GPU the pod really holds. A pod read from
/// duet's record in its status is believed as it is, and so is one read from its annotations
/// after a record (withdrawn: only duet writes it); a scheduler started afresh believes the
/// record (`recorded_assignment`).
fn first_assignment(
    pod: &PodInfo,
    seen: Option<&PodInfo>,
    assumed: Option<&Assumed>,
) -> Option<Assignment> {
    pod.node.as_ref()?;
    if pod.recorded || seen.is_some_and(|old| old.recorded && old.node == pod.node) {
        return None;
    }
    let first = seen
        .filter(|old| old.node == pod.node)
        .and_then(|old| old.assignment.as_ref())
        .or_else(|| {
            assumed
                .filter(|a| a.pod.node == pod.node)
                .and_then(|a| a.pod.assignment.as_ref())
        })?;
    if pod.assignment.as_ref() == Some(first) {
        return None;
    }
    tracing::warn!(
        "pod {}: its duet.io annotations now say `{}`, where it was bound with `{}`; duet keeps \
         the latter",
        pod.key(),
        pod.assignment
            .as_ref()
            .map_or_else(|| "no GPU".into(), contract::describe),
        contract::describe(first)
    );
    Some(first.clone())
}

/// Where duet's record in `pod`'s status (a condition of type [`contract::RECORD`] whose status
/// is `True`) says duet put it; `None` where it has none, one of another node than the pod's
/// (written before a binding that did not happen), or one it cannot read (only what may write
/// the pod's status could write such a one, not its owner): the annotations say then.
fn recorded_assignment(pod: &Pod) -> Option<Assignment> {
    let node = pod.spec.as_ref()?.node_name.as_deref()?;
    let (recorded_node, assignment) = pod
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == contract::RECORD && c.status == "True")
        .and_then(|c| contract::record_assignment(c.message.as_deref()?).ok())?;
    (recorded_node == node).then_some(assignment)
}

/// How long a binding this process made stands in for the watch.
const ASSUMED_FOR: Duration = Duration::from_secs(60);

/// The cluster as the watches last saw it.
#[derive(Debug, Clone, Default)]
pub struct Cluster {
    nodes: BTreeMap<String, NodeInfo>,
    pods: HashMap<String, PodInfo>,
    by_node: HashMap<String, BTreeSet<String>>,
    assumed: HashMap<String, Assumed>,
}

impl Cluster {
    pub fn nodes(&self) -> impl Iterator<Item = &NodeInfo> {
        self.nodes.values()
    }

    pub fn node(&self, name: &str) -> Option<&NodeInfo> {
        self.nodes.get(name)
    }

    pub fn pod(&self, uid: &str) -> Option<&PodInfo> {
        self.pods
            .get(uid)
            .or_else(|| self.assumed.get(uid).map(|a| &a.pod))
    }

    pub fn apply_node(&mut self, node: NodeInfo) {
        self.nodes.insert(node.name.clone(), node);
    }

    pub fn remove_node(&mut self, name: &str) {
        self.nodes.remove(name);
    }

    /// Replaces every node (a watch's full list).
    pub fn replace_nodes(&mut self, nodes: Vec<NodeInfo>) {
        self.nodes = nodes.into_iter().map(|n| (n.name.clone(), n)).collect();
    }

    pub fn apply_pod(&mut self, mut pod: PodInfo) {
        if let Some(first) =
            first_assignment(&pod, self.pods.get(&pod.uid), self.assumed.get(&pod.uid))
        {
            pod.assignment = Some(first);
        }
        self.unindex(&pod.uid);
        if pod.node.is_some() {
            self.assumed.remove(&pod.uid);
        }
        if let Some(node) = &pod.node {
            self.by_node
                .entry(node.clone())
                .or_default()
                .insert(pod.uid.clone());
        }
        self.pods.insert(pod.uid.clone(), pod);
    }

    pub fn remove_pod(&mut self, uid: &str) {
        self.unindex(uid);
        self.pods.remove(uid);
        self.assumed.remove(uid);
    }

    /// Replaces every pod (a watch's full list).
    pub fn replace_pods(&mut self, pods: Vec<PodInfo>) {
        let seen = std::mem::take(&mut self.pods);
        self.by_node.clear();
        for mut pod in pods {
            if let Some(first) = first_assignment(&pod, seen.get(&pod.uid), None) {
                pod.assignment = Some(first);
            }
            self.apply_pod(pod);
        }
    }

    fn unindex(&mut self, uid: &str) {
        if let Some(node) = self.pods.get(uid).and_then(|p| p.node.clone())
            && let Some(set) = self.by_node.get_mut(&node)
        {
            set.remove(uid);
            if set.is_empty() {
                self.by_node.remove(&node);
            }
        }
    }

    /// Records a binding this process made, until the watch shows it.
    pub fn assume(&mut self, mut pod: PodInfo, node: &str, assignment: Assignment) {
        pod.node = Some(node.to_string());
        pod.assignment = Some(assignment);
        pod.recorded = true;
        self.assumed.insert(
            pod.uid.clone(),
            Assumed {
                pod,
                at: Instant::now(),
            },
        );
    }

    /// Forgets the binding assumed for the pod `uid` (`assume`): it was not made.
    pub fn forget_assumed(&mut self, uid: &str) {
        self.assumed.remove(uid);
    }

    /// Pods waiting for scheduler `name`, in the order they arrived (a gated pod waits for its
    /// gates, not for a scheduler).
    pub fn pending(&self, name: &str) -> Vec<&PodInfo> {
        let mut pending: Vec<&PodInfo> = self
            .pods
            .values()
            .filter(|p| {
                p.scheduler == name
                    && p.node.is_none()
                    && !p.deleting
                    && !p.finished
                    && !p.gated
                    && self
                        .assumed
                        .get(&p.uid)
                        .is_none_or(|a| a.at.elapsed() >= ASSUMED_FOR)
            })
            .collect();
        pending.sort_by(|a, b| {
            (a.created_ns, &a.namespace, &a.name).cmp(&(b.created_ns, &b.namespace, &b.name))
        });
        pending
    }

    /// The pods holding GPUs of `node`: bound and not finished, and the bindings assumed.
    pub fn on_node(&self, node: &str) -> Vec<&PodInfo> {
        let now = Instant::now();
        let mut pods: Vec<&PodInfo> = self
            .by_node
            .get(node)
            .into_iter()
            .flatten()
            .filter_map(|uid| self.pods.get(uid))
            .chain(
                self.assumed
                    .values()
                    .filter(|a| a.pod.node.as_deref() == Some(node) && now - a.at < ASSUMED_FOR)
                    .map(|a| &a.pod),
            )
            .filter(|p| !p.finished && p.gpus > 0)
            .collect();
        pods.sort_by(|a, b| (a.created_ns, &a.uid).cmp(&(b.created_ns, &b.uid)));
        pods.dedup_by(|a, b| a.uid == b.uid);
        pods
    }

    /// How each GPU of `node` is used. Pods duet placed hold the GPUs their annotations name;
    /// others (placed before duet, or by another scheduler) take the free GPUs first, in the
    /// order they arrived, and close any GPU duet cannot tell they are on.
    pub fn gpus_of(&self, node: &NodeInfo) -> Vec<GpuUse> {
        let n = node.gpus as usize;
        let mut holders: Vec<Vec<(&PodInfo, bool)>> = vec![Vec::new(); n];
        let mut unplaced = Vec::new();
        for pod in self.on_node(&node.name) {
            match &pod.assignment {
                Some(a)
                    if a.gpus.len() == pod.gpus as usize
                        && a.gpus.iter().all(|g| (*g as usize) < n) =>
                {
                    for g in &a.gpus {
                        holders[*g as usize].push((pod, pod.gpus == 1));
                    }
                }
                _ => unplaced.push(pod),
            }
        }
        let mut closed = vec![false; n];
        for pod in unplaced {
            let mut need = pod.gpus as usize;
            for (g, h) in holders.iter_mut().enumerate() {
                if need == 0 {
                    break;
                }
                if h.is_empty() && !closed[g] {
                    h.push((pod, pod.gpus == 1));
                    need -= 1;
                }
            }
            // Not enough free GPUs: it shares some duet cannot tell; close every one in use.
            if need > 0 {
                for (g, h) in holders.iter().enumerate() {
                    if !h.is_empty() {
                        closed[g] = true;
                    }
                }
            }
        }
        holders
            .iter()
            .zip(closed)
            .map(|(h, closed)| match h.as_slice() {
                _ if closed => GpuUse::Full,
                [] => GpuUse::Free,
                [(pod, true)] => GpuUse::Alone {
                    pod: pod.uid.clone(),
                },
                many if many.iter().all(|(pod, one)| {
                    *one && pod.assignment.as_ref().is_some_and(|a| a.gpus.len() == 1)
                }) =>
                {
                    GpuUse::Shared {
                        pods: many.iter().map(|(pod, _)| pod.uid.clone()).collect(),
                    }
                }
                _ => GpuUse::Full,
            })
            .collect()
    }
}

/// Reads every pod of a list through the mapping's resource.
pub fn read_pods(pods: &[Pod], map: &DeviceMap) -> Vec<PodInfo> {
    pods.iter()
        .map(|p| PodInfo::read(p, &map.resource))
        .collect()
}

#[cfg(test)]
pub(crate) mod tests;
