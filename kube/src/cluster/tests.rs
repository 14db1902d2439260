//! The cluster view: pods read from the API server's objects, GPUs in use, assumptions.

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
