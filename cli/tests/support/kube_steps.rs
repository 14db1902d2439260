//! The Kubernetes end-to-end test's steps against the API server, the extender and `duet
//! predict`: pods to create, wait for and read back, the extender's HTTP verbs, and the
//! capacity check.

#![allow(dead_code)] // not every test file that shares this module needs all of it

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Event, Pod};
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::{Value, json};

use super::plane::{ControlPlane, Process};
use super::root;
use super::support::{Server, duet};

/// A pod asking for `gpus` GPUs: pending for `scheduler`, or bound to `node` at creation (a
/// resident), with `annotations` and a node selector on `pool`.
pub(crate) fn pod_spec(
    name: &str,
    scheduler: &str,
    node: Option<&str>,
    gpus: u32,
    pool: &str,
    annotations: &[(&str, &str)],
) -> Pod {
    let annotations: BTreeMap<&str, &str> = annotations.iter().copied().collect();
    let mut spec = json!({
        "schedulerName": scheduler,
        "nodeSelector": {"duet-e2e/pool": pool},
        "containers": [{"name": "job", "image": "registry.invalid/job:1",
            "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}}}]
    });
    if let Some(node) = node {
        spec["nodeName"] = json!(node);
    }
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "annotations": annotations},
        "spec": spec
    }))
    .expect("pod")
}

pub(crate) async fn create(pods: &Api<Pod>, pod: Pod) {
    let name = pod.metadata.name.clone().unwrap_or_default();
    pods.create(&PostParams::default(), &pod)
        .await
        .unwrap_or_else(|e| panic!("pod {name}: {e}"));
}

/// Deletes every pod of the namespace at once (no kubelet to wait for).
pub(crate) async fn delete_all(pods: &Api<Pod>) {
    let now = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    let _ = pods
        .delete_collection(&now, &ListParams::default())
        .await
        .expect("delete pods");
    for _ in 0..100 {
        if pods
            .list(&ListParams::default())
            .await
            .expect("list")
            .items
            .is_empty()
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("pods not deleted");
}

/// The node `name` is bound to, within `within`.
pub(crate) async fn bound_node(pods: &Api<Pod>, name: &str, within: Duration) -> Option<String> {
    let deadline = Instant::now() + within;
    loop {
        let pod = pods.get(name).await.expect("pod");
        if let Some(node) = pod.spec.and_then(|s| s.node_name) {
            return Some(node);
        }
        if Instant::now() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `duet VERB` (`extender`, `schedule`) against `plane` as duet's service account, predicting with
/// `server`, with the shipped mapping, logging at info.
pub(crate) fn kube_command(plane: &ControlPlane, server: &Server, verb: &str) -> Command {
    kube_command_as(plane, server, verb, "duet")
}

/// `kube_command` acting as `user` (a kubeconfig of `plane`).
pub(crate) fn kube_command_as(
    plane: &ControlPlane,
    server: &Server,
    verb: &str,
    user: &str,
) -> Command {
    let mut command = duet();
    command
        .args([verb, "--predictor", &server.base])
        .arg("--devices")
        .arg(root().join("deploy/k8s/devices.toml"))
        .arg("--kubeconfig")
        .arg(plane.kubeconfig(user))
        .env("RUST_LOG", "info");
    command
}

/// duet's record of where it put pod `name` (the message of its `duet.io/placement` condition),
/// within `within` (it is written just after the binding).
pub(crate) async fn record_of(pods: &Api<Pod>, name: &str, within: Duration) -> Option<String> {
    let deadline = Instant::now() + within;
    loop {
        let pod = pods.get(name).await.expect("pod");
        let record = pod
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.type_ == "duet.io/placement" && c.status == "True")
            .and_then(|c| c.message);
        if record.is_some() || Instant::now() > deadline {
            return record;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The messages of the Events about pod `name`.
pub(crate) async fn events(client: &Client, name: &str) -> Vec<String> {
    Api::<Event>::namespaced(client.clone(), "default")
        .list(&ListParams::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(name))
        .filter_map(|e| e.message)
        .collect()
}

/// Waits for an Event about `name` whose message contains every one of `words`.
pub(crate) async fn event_saying(
    client: &Client,
    name: &str,
    words: &[&str],
    within: Duration,
) -> String {
    let deadline = Instant::now() + within;
    loop {
        let messages = events(client, name).await;
        if let Some(m) = messages
            .iter()
            .find(|m| words.iter().all(|w| m.contains(w)))
        {
            return m.clone();
        }
        assert!(
            Instant::now() < deadline,
            "no Event about {name} saying {words:?}; its Events: {messages:#?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// `duet predict --json`'s answer for `asked` (pairs `a,b` and groups `a,b,c`) on a V100 in space
/// sharing.
fn predict_space(server: &Server, asked: &[String]) -> Value {
    let out = duet()
        .args(["predict", "--server", &server.base, "--gpu", "v100"])
        .args(["--mode", "space", "--json"])
        .args(asked)
        .output()
        .expect("duet predict");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("json")
}

/// `duet predict`'s value of the newcomer `a` beside resident `b` (the pricing loop's rule at
/// equal weights: a's speed minus what b loses).
pub(crate) fn predicted_value(server: &Server, a: &str, b: &str) -> f64 {
    let answer = predict_space(server, &[format!("{a},{b}")]);
    let p = &answer["predictions"][0];
    let (sa, sb) = (
        p["speed_a"].as_f64().expect("speed_a"),
        p["speed_b"].as_f64().expect("speed_b"),
    );
    sa - (1.0 - sb.min(1.0))
}

/// The pricing loop's value of `newcomer` joining two pods of `resident` that share a GPU in
/// space sharing, from `duet predict`'s answer for the pair as it runs and the group of three
/// (both predicted to fit): the newcomer's speed less what each resident loses.
pub(crate) fn predicted_join_value(server: &Server, newcomer: &str, resident: &str) -> f64 {
    let answer = predict_space(
        server,
        &[
            format!("{newcomer},{resident},{resident}"),
            format!("{resident},{resident}"),
        ],
    );
    assert!(
        answer["predictions"][0]["feasible"] == true && answer["groups"][0]["feasible"] == true,
        "{answer}"
    );
    let now = answer["predictions"][0]["speed_a"]
        .as_f64()
        .expect("speed")
        .min(1.0);
    let jobs = &answer["groups"][0]["jobs"];
    let speed = |k: usize| jobs[k]["speed"].as_f64().expect("speed");
    speed(0) - 2.0 * (now - speed(1).min(now)).max(0.0)
}

/// `duet extender` listening on 127.0.0.1:`port` (0: the kernel's choice), its output in `log`
/// in the control plane's folder; returns it with the port it logged once listening.
pub(crate) fn start_extender(
    plane: &ControlPlane,
    server: &Server,
    port: u16,
    log: &str,
    extra: &[&str],
) -> (Process, u16) {
    let mut command = kube_command(plane, server, "extender");
    command
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(extra);
    let extender = Process::spawn(&mut command, plane.dir.path().join(log));
    let port = listening_port(&extender, "duet extender on http://");
    (extender, port)
}

/// The port in the first line of `process`'s log that holds `marker` followed by `HOST:PORT`;
/// waits up to a minute for it.
pub(crate) fn listening_port(process: &Process, marker: &str) -> u16 {
    let mut port = None;
    wait_for(
        &format!("`{marker}` in the log"),
        Duration::from_secs(60),
        || {
            port = process.output().lines().find_map(|l| {
                let after = &l[l.find(marker)? + marker.len()..];
                let addr = after.split_whitespace().next()?;
                addr.rsplit(':').next()?.parse().ok()
            });
            port.is_some()
        },
        || process.tail(20),
    );
    port.expect("a port")
}

/// GET `url`: status and body (0 where nothing answers).
pub(crate) fn get(url: &str) -> (u16, String) {
    match ureq::get(url).timeout(Duration::from_secs(5)).call() {
        Ok(r) => (r.status(), r.into_string().unwrap_or_default()),
        Err(ureq::Error::Status(code, r)) => (code, r.into_string().unwrap_or_default()),
        Err(_) => (0, String::new()),
    }
}

pub(crate) fn post(url: &str, body: &str) -> (u16, String) {
    match ureq::post(url)
        .timeout(Duration::from_secs(10))
        .set("Content-Type", "application/json")
        .send_string(body)
    {
        Ok(r) => (r.status(), r.into_string().unwrap_or_default()),
        Err(ureq::Error::Status(code, r)) => (code, r.into_string().unwrap_or_default()),
        Err(e) => panic!("{url}: {e}"),
    }
}

pub(crate) fn wait_for(
    what: &str,
    within: Duration,
    mut ok: impl FnMut() -> bool,
    log: impl Fn() -> String,
) {
    let deadline = Instant::now() + within;
    while !ok() {
        assert!(
            Instant::now() < deadline,
            "{what}, within {within:?}:\n{}",
            log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The GPUs of each node in `pool` as the bound pods' annotations say, and each pod's request.
/// Fails where a GPU holds more than two pods, a pod of several GPUs shares one, or a node's
/// pods ask for more than it advertises.
pub(crate) async fn check_capacity(client: &Client, nodes: &[(&str, u32)]) {
    let pods = Api::<Pod>::namespaced(client.clone(), "default")
        .list(&ListParams::default())
        .await
        .expect("pods")
        .items;
    for (node, gpus) in nodes {
        let mut on_gpu: BTreeMap<u32, Vec<(String, u32)>> = BTreeMap::new();
        let mut asked = 0;
        for pod in &pods {
            let spec = pod.spec.as_ref().expect("spec");
            if spec.node_name.as_deref() != Some(*node) {
                continue;
            }
            let name = pod.metadata.name.clone().unwrap_or_default();
            let request: u32 = spec.containers[0]
                .resources
                .as_ref()
                .and_then(|r| r.limits.as_ref())
                .and_then(|l| l.get("nvidia.com/gpu"))
                .map_or(0, |q| q.0.parse().expect("count"));
            asked += request;
            let annotations = pod.metadata.annotations.clone().unwrap_or_default();
            let gpus_of_pod = annotations
                .get("duet.io/gpu")
                .unwrap_or_else(|| panic!("{name} on {node} carries no duet.io/gpu"));
            for g in gpus_of_pod.split(',') {
                let g: u32 = g.parse().expect("index");
                assert!(g < *gpus, "{name}: GPU {g} of a node of {gpus}");
                on_gpu.entry(g).or_default().push((name.clone(), request));
            }
        }
        assert!(
            asked <= gpus * 2,
            "{node}: {asked} GPUs asked of {}",
            gpus * 2
        );
        for (g, holders) in on_gpu {
            assert!(holders.len() <= 2, "{node} GPU {g}: {holders:?}");
            if holders.len() == 2 {
                assert!(
                    holders.iter().all(|(_, r)| *r == 1),
                    "{node} GPU {g} shared with a pod of several GPUs: {holders:?}"
                );
            }
        }
    }
}
