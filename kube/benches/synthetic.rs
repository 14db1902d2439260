//! A seeded cluster for the benchmarks: `nodes` V100 nodes of 8 GPUs time-sliced two ways, half
//! of every node's GPUs running one pod of a Gavel workload; and pending pods of the same
//! workloads (a third with an objective, weights 1 to 3). Shared by benches/extender.rs and
//! examples/extender_load.rs.
#![allow(dead_code)]

use std::collections::BTreeMap;

use duet_core::dataset::Mode;
use duet_core::rng::Rng;
use duet_kube::cluster::{Cluster, PodInfo};
use duet_kube::contract::{Assignment, Identity, JobSpec};
use duet_kube::devices::{DeviceMap, NodeInfo};
use duet_kube::known::Known;

pub const MAPPING: &str = "[[device]]\nmatch = \"V100\"\ndevice = \"v100\"\n\
    [[strategy]]\nname = \"time-slicing\"\nsharings = [{ mode = \"timeslice\" }, { mode = \"space\" }]";

pub fn map() -> DeviceMap {
    DeviceMap::parse(MAPPING).expect("mapping")
}

/// The Gavel workloads the shipped model was trained on.
pub fn workloads() -> Vec<String> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/default");
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("model.json")).expect("model.json"))
            .expect("json");
    meta["spec"]["identities"]
        .as_array()
        .expect("identities")
        .iter()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect()
}

pub fn known(ids: &[String]) -> Known {
    let entries: Vec<(&str, &[&str])> = ids.iter().map(|i| (i.as_str(), &["v100"][..])).collect();
    // The shipped model predicts `space` alone (Gavel's measurements).
    Known::of(&entries).with_modes([Mode::Space])
}

fn pod(uid: String, node: Option<String>, workload: String, rng: &mut Rng) -> PodInfo {
    #[allow(clippy::cast_precision_loss)]
    let priority = 1.0 + rng.below(3) as f64;
    let objective = (rng.below(3) == 0).then_some(0.6);
    PodInfo {
        namespace: "bench".into(),
        name: uid.clone(),
        uid,
        node,
        scheduler: "duet".into(),
        gpus: 1,
        job: Ok(JobSpec {
            identity: Identity::Workload(workload),
            objective,
            priority,
            memory_mib: None,
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

/// `nodes` nodes of 8 GPUs, GPUs 0-3 of each running one pod.
pub fn cluster(nodes: usize, ids: &[String]) -> Cluster {
    let mut rng = Rng::new(17);
    let mut c = Cluster::default();
    for n in 0..nodes {
        let name = format!("node-{n:04}");
        c.apply_node(NodeInfo {
            name: name.clone(),
            product: Some("Tesla-V100-SXM2-16GB".into()),
            device: Some("v100".into()),
            gpus: 8,
            memory_mib: None,
            strategy: "time-slicing".into(),
            schedulable: true,
            labels: BTreeMap::new(),
            taints: Vec::new(),
        });
        for g in 0..4 {
            let workload = ids[rng.below(ids.len())].clone();
            let mut p = pod(format!("r-{n}-{g}"), Some(name.clone()), workload, &mut rng);
            p.assignment = Some(Assignment {
                gpus: vec![g],
                sharing: None,
                mps_share: None,
            });
            c.apply_pod(p);
        }
    }
    c
}

/// The same cluster with the first two GPUs of every node each shared by two pods in space
/// sharing (a GPU that may take a third pod where `--gpu-jobs` allows).
pub fn shared_cluster(nodes: usize, ids: &[String]) -> Cluster {
    let mut c = cluster(nodes, ids);
    let mut rng = Rng::new(19);
    for n in 0..nodes {
        let name = format!("node-{n:04}");
        for g in 0..2 {
            let first = format!("r-{n}-{g}");
            if let Some(mut p) = c.pod(&first).cloned() {
                if let Some(a) = p.assignment.as_mut() {
                    a.sharing = Some(Mode::Space);
                }
                c.apply_pod(p);
            }
            let workload = ids[rng.below(ids.len())].clone();
            let mut p = pod(format!("s-{n}-{g}"), Some(name.clone()), workload, &mut rng);
            p.assignment = Some(Assignment {
                gpus: vec![g],
                sharing: Some(Mode::Space),
                mps_share: None,
            });
            c.apply_pod(p);
        }
    }
    c
}

/// `count` pending pods, in arrival order.
pub fn pending(count: usize, ids: &[String]) -> Vec<PodInfo> {
    let mut rng = Rng::new(23);
    (0..count)
        .map(|i| {
            let workload = ids[rng.below(ids.len())].clone();
            let mut p = pod(format!("p-{i}"), None, workload, &mut rng);
            p.created_ns = i128::try_from(i).unwrap_or(0);
            p
        })
        .collect()
}
