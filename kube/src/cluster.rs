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
pub(crate) mod tests {
    use super::*;
    use crate::contract::Identity;

    pub(crate) fn node(name: &str, gpus: u32) -> NodeInfo {
        NodeInfo {
            name: name.into(),
            product: Some("Tesla-V100".into()),
            device: Some("v100".into()),
            gpus,
            memory_mib: None,
            strategy: "mps".into(),
            schedulable: true,
            labels: BTreeMap::new(),
            taints: Vec::new(),
        }
    }

    pub(crate) fn pod(uid: &str, node: Option<&str>, gpus: u32, workload: &str) -> PodInfo {
        PodInfo {
            uid: uid.into(),
            namespace: "ns".into(),
            name: uid.into(),
            node: node.map(str::to_string),
            scheduler: "duet".into(),
            gpus,
            job: Ok(JobSpec {
                identity: Identity::Workload(workload.into()),
                ..JobSpec::unknown()
            }),
            assignment: None,
            created_ns: 0,
            finished: false,
            deleting: false,
            gated: false,
            class_priority: 0,
            recorded: false,
            node_selector: BTreeMap::new(),
            tolerations: Vec::new(),
        }
    }

    fn on(mut p: PodInfo, gpus: &[u32]) -> PodInfo {
        p.assignment = Some(Assignment {
            gpus: gpus.to_vec(),
            sharing: None,
            mps_share: None,
        });
        p
    }

    #[test]
    fn gpus_are_read_from_annotations_and_others_fill_the_free_ones() {
        let mut c = Cluster::default();
        c.apply_node(node("a", 4));
        c.apply_pod(on(pod("p1", Some("a"), 1, "w"), &[2]));
        c.apply_pod(on(pod("p2", Some("a"), 1, "w"), &[2]));
        c.apply_pod(on(pod("p3", Some("a"), 1, "w"), &[3]));
        // Placed by someone else: the lowest free GPU.
        c.apply_pod(pod("p4", Some("a"), 1, "w"));
        let uses = c.gpus_of(c.node("a").expect("node"));
        assert_eq!(
            uses,
            vec![
                GpuUse::Alone { pod: "p4".into() },
                GpuUse::Free,
                GpuUse::Shared {
                    pods: vec!["p1".into(), "p2".into()]
                },
                GpuUse::Alone { pod: "p3".into() },
            ]
        );
        // A pod of two GPUs closes both; one that cannot fit closes every GPU in use.
        c.apply_pod(pod("p5", Some("a"), 2, "w"));
        let uses = c.gpus_of(c.node("a").expect("node"));
        assert!(uses.iter().all(|u| *u == GpuUse::Full), "{uses:?}");
        c.remove_pod("p5");
        let mut done = pod("p6", Some("a"), 1, "w");
        done.finished = true;
        c.apply_pod(done);
        assert_eq!(c.gpus_of(c.node("a").expect("node"))[1], GpuUse::Free);
    }

    #[test]
    fn a_binding_made_here_counts_until_the_watch_shows_it() {
        let mut c = Cluster::default();
        c.apply_node(node("a", 1));
        let waiting = pod("p", None, 1, "w");
        c.apply_pod(waiting.clone());
        assert_eq!(c.pending("duet").len(), 1);
        c.assume(
            waiting.clone(),
            "a",
            Assignment {
                gpus: vec![0],
                sharing: None,
                mps_share: None,
            },
        );
        assert!(c.pending("duet").is_empty());
        assert_eq!(
            c.gpus_of(c.node("a").expect("node")),
            vec![GpuUse::Alone { pod: "p".into() }]
        );
        // The watch shows it bound: one pod, not two.
        c.apply_pod(on(pod("p", Some("a"), 1, "w"), &[0]));
        assert_eq!(c.on_node("a").len(), 1);
        c.remove_pod("p");
        assert_eq!(c.gpus_of(c.node("a").expect("node")), vec![GpuUse::Free]);
    }

    #[test]
    fn a_node_selector_and_taints_decide_where_a_pod_may_run() {
        let mut n = node("a", 1);
        n.labels.insert("pool".into(), "gpu".into());
        let mut p = pod("p", None, 1, "w");
        assert!(p.may_run_on(&n));
        p.node_selector.insert("pool".into(), "cpu".into());
        assert!(!p.may_run_on(&n));
        p.node_selector.insert("pool".into(), "gpu".into());
        n.taints
            .push(("dedicated".into(), "ml".into(), "NoSchedule".into()));
        assert!(!p.may_run_on(&n));
        p.tolerations.push((
            "dedicated".into(),
            "Equal".into(),
            "ml".into(),
            String::new(),
        ));
        assert!(p.may_run_on(&n));
        p.tolerations = vec![(
            String::new(),
            "Exists".into(),
            String::new(),
            "NoExecute".into(),
        )];
        assert!(!p.may_run_on(&n));
    }

    #[test]
    fn gpus_asked_past_u32_saturate() {
        let container = |n: &str| serde_json::json!({"name": n, "resources": {"limits": {"nvidia.com/gpu": "4294967295"}}});
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "greedy", "uid": "u"},
            "spec": {"containers": [container("a"), container("b")]}
        }))
        .expect("pod");
        assert_eq!(PodInfo::read(&pod, "nvidia.com/gpu").gpus, u32::MAX);
        assert_eq!(gpu_count_text(u32::MAX), "4294967295 or more");
        assert_eq!(gpu_count_text(7), "7");
    }

    /// Kubernetes' count of a pod's requests: containers and sidecars together, or an init
    /// container beside the sidecars started before it, where more; one container's count past
    /// u32 is the most; a quantity that is not a whole count asks none.
    #[test]
    fn gpus_are_counted_as_kubernetes_counts_requests() {
        let gpus = |spec: serde_json::Value| {
            let pod: Pod = serde_json::from_value(serde_json::json!({
                "metadata": {"name": "p", "uid": "u"}, "spec": spec
            }))
            .expect("pod");
            PodInfo::read(&pod, "nvidia.com/gpu").gpus
        };
        let c = |n: &str, gpus: &str| serde_json::json!({"name": n, "resources": {"limits": {"nvidia.com/gpu": gpus}}});
        let sidecar = |n: &str, gpus: &str| {
            let mut s = c(n, gpus);
            s["restartPolicy"] = "Always".into();
            s
        };
        for (spec, want) in [
            (
                serde_json::json!({"containers": [c("a", "1"), c("b", "2")]}),
                3,
            ),
            // An init container runs before the others: the most of the two.
            (
                serde_json::json!({"containers": [c("a", "1")], "initContainers": [c("i", "2")]}),
                2,
            ),
            // A sidecar runs beside the containers: added to them.
            (
                serde_json::json!({"containers": [c("a", "1")], "initContainers": [sidecar("s", "1")]}),
                2,
            ),
            // An init container after a sidecar runs beside it.
            (
                serde_json::json!({"containers": [c("a", "1")],
                    "initContainers": [sidecar("s", "1"), c("i", "2")]}),
                3,
            ),
            // ... but not beside a sidecar started after it.
            (
                serde_json::json!({"containers": [c("a", "1")],
                    "initContainers": [c("i", "2"), sidecar("s", "1")]}),
                2,
            ),
            (
                serde_json::json!({"containers": [c("a", "4294967296")]}),
                u32::MAX,
            ),
            (serde_json::json!({"containers": [c("a", " +2 ")]}), 2),
            // Quantities as the API server writes them back (1,000 is `1k`).
            (
                serde_json::json!({"containers": [c("a", "1k"), c("b", "2000m"), c("c", "1e1")]}),
                1012,
            ),
            (
                serde_json::json!({"containers": [c("a", "0.5"), c("b", "-1"), c("c", "1K")]}),
                0,
            ),
        ] {
            assert_eq!(gpus(spec.clone()), want, "{spec}");
        }
    }

    #[test]
    fn pending_pods_come_in_the_order_they_arrived() {
        let mut c = Cluster::default();
        for (uid, t) in [("late", 30), ("early", 10), ("mid", 20)] {
            let mut p = pod(uid, None, 1, "w");
            p.created_ns = t;
            c.apply_pod(p);
        }
        let mut other = pod("other", None, 1, "w");
        other.scheduler = "default-scheduler".into();
        c.apply_pod(other);
        let order: Vec<&str> = c.pending("duet").iter().map(|p| p.name.as_str()).collect();
        assert_eq!(order, ["early", "mid", "late"]);
    }

    /// A bound pod's GPUs stay where the view first saw them when its annotations are edited
    /// later, through a watch event or a full list.
    #[test]
    fn a_bound_pod_s_edited_gpu_record_is_not_believed() {
        let mut c = Cluster::default();
        c.apply_node(node("n", 2));
        let at = |gpu: u32| {
            let mut p = pod("x", Some("n"), 1, "w");
            p.assignment = Some(Assignment {
                gpus: vec![gpu],
                sharing: None,
                mps_share: None,
            });
            p
        };
        c.apply_pod(at(0));
        c.apply_pod(at(1));
        assert_eq!(
            c.pod("x")
                .and_then(|p| p.assignment.clone())
                .map(|a| a.gpus),
            Some(vec![0])
        );
        c.replace_pods(vec![at(1)]);
        assert_eq!(
            c.pod("x")
                .and_then(|p| p.assignment.clone())
                .map(|a| a.gpus),
            Some(vec![0])
        );
        // A pod bound anew (deleted and made again has a new UID; another node) is read afresh.
        let mut moved = at(1);
        moved.node = Some("m".into());
        c.apply_pod(moved);
        assert_eq!(
            c.pod("x")
                .and_then(|p| p.assignment.clone())
                .map(|a| a.gpus),
            Some(vec![1])
        );
    }

    /// A pod's PriorityClass priority is the one the API server resolved into `spec.priority`.
    #[test]
    fn the_priority_class_is_read_from_the_spec() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "uid": "p"},
            "spec": {"priorityClassName": "high", "priority": 1_000_000, "containers": []}
        }))
        .expect("pod");
        assert_eq!(
            PodInfo::read(&pod, "nvidia.com/gpu").class_priority,
            1_000_000
        );
    }

    /// duet's record in a pod's status is believed over its annotations (which its owner may
    /// have edited); without a record, with one of another node, or with one duet cannot read,
    /// the annotations are read.
    #[test]
    fn duet_s_record_in_the_status_is_believed_over_the_annotations() {
        let read = |conditions: serde_json::Value| {
            let pod: Pod = serde_json::from_value(serde_json::json!({
                "metadata": {"name": "x", "uid": "x",
                    "annotations": {"duet.io/gpu": "1", "duet.io/sharing": "exclusive"}},
                "spec": {"nodeName": "n", "containers": [{"name": "c",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
                "status": {"conditions": conditions}
            }))
            .expect("pod");
            PodInfo::read(&pod, "nvidia.com/gpu")
                .assignment
                .map(|a| (a.gpus, a.sharing))
        };
        let record = |status: &str, message: &str| {
            serde_json::json!([
                {"type": "PodScheduled", "status": "True"},
                {"type": contract::RECORD, "status": status, "message": message}
            ])
        };
        assert_eq!(
            read(record("True", "node=n duet.io/gpu=0 duet.io/sharing=space")),
            Some((vec![0], Some(duet_core::dataset::Mode::Space)))
        );
        for (status, message) in [
            ("False", "node=n duet.io/gpu=0"),
            // Written for another node, before a binding that did not happen.
            ("True", "node=m duet.io/gpu=0"),
            // Not one duet can read.
            ("True", "node=n duet.io/gpu=zero"),
            ("True", ""),
        ] {
            assert_eq!(read(record(status, message)), Some((vec![1], None)));
        }
        assert_eq!(read(serde_json::json!([])), Some((vec![1], None)));
    }

    /// A pod read from duet's record is believed as it is, and so is one read from its
    /// annotations once the record is withdrawn (only duet writes it); an edit of the
    /// annotations alone is not.
    #[test]
    fn a_record_outranks_the_first_view_and_its_withdrawal_lets_the_annotations_in() {
        let mut c = Cluster::default();
        c.apply_node(node("n", 2));
        let at = |gpu: u32, recorded: bool| {
            let mut p = pod("x", Some("n"), 1, "w");
            p.assignment = Some(Assignment {
                gpus: vec![gpu],
                sharing: None,
                mps_share: None,
            });
            p.recorded = recorded;
            p
        };
        let gpus = |c: &Cluster| {
            c.pod("x")
                .and_then(|p| p.assignment.clone())
                .map(|a| a.gpus)
        };
        c.apply_pod(at(1, true));
        c.apply_pod(at(0, false));
        assert_eq!(gpus(&c), Some(vec![0]), "the record withdrawn");
        c.apply_pod(at(1, false));
        assert_eq!(gpus(&c), Some(vec![0]), "an edit of the annotations alone");
        c.apply_pod(at(1, true));
        assert_eq!(gpus(&c), Some(vec![1]), "a record");
    }

    /// A pod with scheduling gates is not pending for any scheduler until they are removed (the
    /// API server refuses its binding meanwhile).
    #[test]
    fn a_gated_pod_waits_for_its_gates() {
        let read = |gates: serde_json::Value| {
            let pod: Pod = serde_json::from_value(serde_json::json!({
                "metadata": {"name": "g", "uid": "g"},
                "spec": {"schedulerName": "duet", "schedulingGates": gates,
                    "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
            }))
            .expect("pod");
            PodInfo::read(&pod, "nvidia.com/gpu")
        };
        assert_eq!(read(serde_json::json!([])).class_priority, 0);
        let mut c = Cluster::default();
        c.apply_pod(read(
            serde_json::json!([{"name": "kueue.x-k8s.io/admission"}]),
        ));
        assert!(c.pending("duet").is_empty());
        c.apply_pod(read(serde_json::json!([])));
        assert_eq!(c.pending("duet").len(), 1);
    }
}
