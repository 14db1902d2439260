//! duet on a real Kubernetes control plane: etcd, kube-apiserver and the stock kube-scheduler
//! (scripts/kube-testbed.sh builds them), `duet serve` on the shipped model, `duet extender`
//! configured into the kube-scheduler by deploy/k8s/kube-scheduling.yaml, and `duet schedule`,
//! both acting as the service account of deploy/k8s/kube-rbac.yaml (its ClusterRole is all
//! they may do). Node objects stand in for GPU nodes (no kubelet).
//!
//! One control plane, the cases in order: malformed extender bodies; a pod asking 2 x u32::MAX
//! GPUs leaves the extender's view current; /bind refuses a wrong PodUID or an unknown node; a
//! pod lands on the node
//! `duet predict` ranks best, and the decision flips with the residents; an objective broken
//! everywhere leaves the pod Pending with duet's reason; a pod duet does not know scores
//! neutral; with the extender stopped pods still schedule; `duet schedule` binds a batch
//! (compared with one pod at a time), explains what it leaves, never over-fills a GPU, and
//! a second run reads the first one's placements from the API server; with the API server down
//! the extender answers from its cache and says it is stale, and the scheduler waits, then binds.
//! Between the last two, bindings an admission webhook refuses, at once or slowly, hold back no
//! other pod.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

mod support;
use support::Server;

#[path = "support/kube.rs"]
mod plane;
use plane::{ControlPlane, Process, create_node, runtime};

#[path = "support/kube_steps.rs"]
mod steps;

#[path = "support/kube_guards.rs"]
mod guards;
#[path = "support/kube_webhook.rs"]
mod webhook;
use steps::{
    bound_node, check_capacity, create, delete_all, event_saying, events, get, kube_command,
    kube_command_as, listening_port, pod_spec, post, predicted_join_value, predicted_value,
    record_of, start_extender, wait_for,
};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every document of a YAML file, as JSON values.
fn yaml_documents(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).expect("manifest");
    serde_saphyr::from_multiple::<Value>(&text)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The KubeSchedulerConfiguration of deploy/k8s/kube-scheduling.yaml, pointed at this control
/// plane and this extender, without leader election.
fn scheduler_config(kubeconfig: &Path, extender: &str) -> String {
    let docs = yaml_documents(&root().join("deploy/k8s/kube-scheduling.yaml"));
    let map = docs
        .iter()
        .find(|d| d["metadata"]["name"] == "duet-kube-scheduler-config")
        .expect("the KubeSchedulerConfiguration's ConfigMap");
    let text = map["data"]["scheduler-config.yaml"]
        .as_str()
        .expect("scheduler-config.yaml");
    let mut config: Value = serde_saphyr::from_str(text).expect("the configuration");
    config["clientConnection"]["kubeconfig"] = json!(kubeconfig);
    config["leaderElection"] = json!({"leaderElect": false});
    config["extenders"][0]["urlPrefix"] = json!(extender);
    serde_json::to_string_pretty(&config).expect("json")
}

#[test]
fn the_shipped_mapping_is_the_one_the_manifests_mount() {
    let docs = yaml_documents(&root().join("deploy/k8s/kube-scheduling.yaml"));
    let map = docs
        .iter()
        .find(|d| d["metadata"]["name"] == "duet-devices")
        .expect("the duet-devices ConfigMap");
    let file = std::fs::read_to_string(root().join("deploy/k8s/devices.toml")).expect("file");
    assert_eq!(map["data"]["devices.toml"].as_str(), Some(file.as_str()));
    duet_kube::devices::DeviceMap::parse(&file).expect("the shipped mapping is valid");
}

/// The shipped extender binds the pods of exactly the profiles of the configuration that calls
/// it (`--bind-scheduler`; a configuration without profiles has the one `default-scheduler`).
#[test]
fn the_shipped_extender_binds_the_profiles_that_call_it() {
    let docs = yaml_documents(&root().join("deploy/k8s/kube-scheduling.yaml"));
    let extender = docs
        .iter()
        .find(|d| d["kind"] == "Deployment" && d["metadata"]["name"] == "duet-extender")
        .expect("the extender's Deployment");
    let args = extender["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .expect("args");
    let mut bound: Vec<String> = args
        .iter()
        .filter_map(|a| a.as_str()?.strip_prefix("--bind-scheduler="))
        .flat_map(|names| names.split(',').map(str::to_string))
        .collect();
    let config: Value = serde_saphyr::from_str(&scheduler_config(Path::new("x"), "http://x"))
        .expect("the configuration");
    // A configuration's extenders serve every one of its profiles.
    let mut calling: Vec<String> = match config["profiles"].as_array() {
        None => vec!["default-scheduler".to_string()],
        Some(profiles) => profiles
            .iter()
            .map(|p| {
                p["schedulerName"]
                    .as_str()
                    .unwrap_or("default-scheduler")
                    .to_string()
            })
            .collect(),
    };
    bound.sort();
    calling.sort();
    assert_eq!(bound, calling);
}

/// Creates deploy/k8s/kube-rbac.yaml's objects.
async fn apply_rbac(admin: &Client) {
    for doc in yaml_documents(&root().join("deploy/k8s/kube-rbac.yaml")) {
        let pp = PostParams::default();
        match doc["kind"].as_str() {
            Some("ServiceAccount") => {
                let sa: ServiceAccount = serde_json::from_value(doc).expect("sa");
                Api::<ServiceAccount>::namespaced(admin.clone(), "default")
                    .create(&pp, &sa)
                    .await
                    .expect("service account");
            }
            Some("ClusterRole") => {
                let role: ClusterRole = serde_json::from_value(doc).expect("role");
                Api::<ClusterRole>::all(admin.clone())
                    .create(&pp, &role)
                    .await
                    .expect("cluster role");
            }
            Some("ClusterRoleBinding") => {
                let binding: ClusterRoleBinding = serde_json::from_value(doc).expect("binding");
                Api::<ClusterRoleBinding>::all(admin.clone())
                    .create(&pp, &binding)
                    .await
                    .expect("cluster role binding");
            }
            other => panic!("kube-rbac.yaml: unexpected kind {other:?}"),
        }
    }
}

#[test]
#[allow(clippy::too_many_lines)]
fn pods_are_placed_by_duet_s_prices_on_a_real_control_plane() {
    let started = Instant::now();
    let Some(mut plane) = ControlPlane::start() else {
        return;
    };
    eprintln!(
        "control plane ready in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let rt = runtime();
    let admin = rt.block_on(plane.client("admin")).expect("admin client");
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
    rt.block_on(apply_rbac(&admin));
    let server = Server::start_with(&[]);
    // It binds only the kube-scheduler's pods (`--bind-scheduler`; the guards' case below).
    let (mut extender, ext_port) = start_extender(
        &plane,
        &server,
        0,
        "extender-1.log",
        &["--bind-scheduler", "default-scheduler"],
    );
    let ext = |path: &str| format!("http://127.0.0.1:{ext_port}{path}");
    wait_for(
        "the extender is ready",
        Duration::from_secs(60),
        || get(&ext("/readyz")).0 == 200,
        || extender.tail(20),
    );
    let kube_scheduler =
        plane.start_scheduler(&scheduler_config(&plane.kubeconfig("scheduler"), &ext("")));
    rt.block_on(async {
        for node in ["flip-a", "flip-b"] {
            create_node(
                &admin,
                node,
                "Tesla-V100-SXM2-16GB",
                1,
                2,
                "time-slicing",
                &[("duet-e2e/pool", "flip")],
            )
            .await;
        }
    });

    // Malformed extender bodies: a 400 naming the field.
    for (body, field) in [
        (
            r#"{"Pod": {"metadata": {"name": 7}}, "NodeNames": ["flip-a"]}"#,
            "Pod.metadata.name",
        ),
        (r#"{"NodeNames": ["flip-a"]}"#, "Pod"),
        (r#"{"Pod": {"metadata": {"name": "p"}}}"#, "NodeNames"),
    ] {
        for verb in ["/filter", "/prioritize"] {
            let (status, answer) = post(&ext(verb), body);
            let answer: Value = serde_json::from_str(&answer).expect("json");
            assert_eq!(
                (status, answer["field"].as_str()),
                (400, Some(field)),
                "{verb} {body}: {answer}"
            );
        }
    }
    let (status, answer) = post(&ext("/bind"), r#"{"PodName": "p"}"#);
    assert_eq!(status, 400, "{answer}");

    // Hostile pods and binds: the view stays current, /bind checks what it is asked.
    guards::a_hostile_pod_and_binds(&rt, &pods, &ext(""), &extender);

    // A pod lands on the node duet predict ranks best; swapping the residents flips it.
    let (x, y, newcomer) = ("recommendation-bs512", "resnet-50-bs128", "resnet-18-bs16");
    let (value_x, value_y) = (
        predicted_value(&server, newcomer, x),
        predicted_value(&server, newcomer, y),
    );
    assert!(
        value_x > value_y + 0.1 && value_y > 0.0,
        "{value_x} {value_y}"
    );
    for (round, (on_a, on_b)) in [(x, y), (y, x)].into_iter().enumerate() {
        let best = if on_a == x { "flip-a" } else { "flip-b" };
        rt.block_on(async {
            for (node, workload) in [("flip-a", on_a), ("flip-b", on_b)] {
                create(
                    &pods,
                    pod_spec(
                        &format!("resident-{node}"),
                        "default-scheduler",
                        Some(node),
                        1,
                        "flip",
                        &[("duet.io/workload", workload), ("duet.io/gpu", "0")],
                    ),
                )
                .await;
            }
        });
        // The extender's view has both residents once its scores differ.
        let probe = serde_json::to_string(&json!({
            "Pod": pod_spec("probe", "default-scheduler", None, 1, "flip",
                &[("duet.io/workload", newcomer)]),
            "NodeNames": ["flip-a", "flip-b"]
        }))
        .expect("json");
        wait_for(
            "the extender sees both residents",
            Duration::from_secs(10),
            || {
                let (_, answer) = post(&ext("/prioritize"), &probe);
                let scores: Vec<Value> = serde_json::from_str(&answer).unwrap_or_default();
                scores.len() == 2 && scores[0]["Score"] != scores[1]["Score"]
            },
            || extender.tail(20),
        );
        let name = format!("newcomer-{round}");
        rt.block_on(create(
            &pods,
            pod_spec(
                &name,
                "default-scheduler",
                None,
                1,
                "flip",
                &[("duet.io/workload", newcomer)],
            ),
        ));
        let node = rt.block_on(bound_node(&pods, &name, Duration::from_secs(30)));
        assert_eq!(
            node.as_deref(),
            Some(best),
            "round {round}: residents {on_a} on flip-a, {on_b} on flip-b; values beside {x} \
             {value_x:.3}, beside {y} {value_y:.3}\nkube-scheduler:\n{}\nextender:\n{}",
            kube_scheduler.tail(30),
            extender.tail(20)
        );
        let placed = rt.block_on(pods.get(&name)).expect("pod");
        let annotations = placed.metadata.annotations.unwrap_or_default();
        assert_eq!(
            annotations.get("duet.io/gpu").map(String::as_str),
            Some("0")
        );
        assert_eq!(
            annotations.get("duet.io/sharing").map(String::as_str),
            Some("space")
        );
        assert_eq!(
            annotations.get("duet.io/beside").map(String::as_str),
            Some(format!("default/resident-{best}").as_str())
        );
        let record = rt.block_on(record_of(&pods, &name, Duration::from_secs(5)));
        let want = format!("node={best} duet.io/gpu=0 duet.io/sharing=space");
        assert_eq!(record.as_deref(), Some(want.as_str()));
        eprintln!("round {round}: residents {on_a} / {on_b}: the newcomer went to {best}");
        rt.block_on(delete_all(&pods));
    }

    // An objective the p90 breaks everywhere: Pending, with duet's reason in an Event.
    rt.block_on(async {
        for (node, workload) in [("flip-a", x), ("flip-b", y)] {
            create(
                &pods,
                pod_spec(
                    &format!("resident-{node}"),
                    "default-scheduler",
                    Some(node),
                    1,
                    "flip",
                    &[("duet.io/workload", workload), ("duet.io/gpu", "0")],
                ),
            )
            .await;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        create(
            &pods,
            pod_spec(
                "strict",
                "default-scheduler",
                None,
                1,
                "flip",
                &[
                    ("duet.io/workload", newcomer),
                    ("duet.io/objective", "0.99"),
                ],
            ),
        )
        .await;
        let message = event_saying(
            &admin,
            "strict",
            &["duet:", "objective 0.99"],
            Duration::from_secs(30),
        )
        .await;
        eprintln!("strict: {message}");
        assert_eq!(
            bound_node(&pods, "strict", Duration::from_secs(1)).await,
            None
        );
        delete_all(&pods).await;
    });

    // A pod duet does not know scores neutral and is counted; it schedules.
    rt.block_on(async {
        create(
            &pods,
            pod_spec(
                "stranger",
                "default-scheduler",
                None,
                1,
                "flip",
                &[("duet.io/workload", "nobody-registered-this")],
            ),
        )
        .await;
        assert!(
            bound_node(&pods, "stranger", Duration::from_secs(30))
                .await
                .is_some()
        );
    });
    let probe = serde_json::to_string(&json!({
        "Pod": pod_spec("probe", "default-scheduler", None, 1, "flip", &[]),
        "NodeNames": ["flip-a", "flip-b"]
    }))
    .expect("json");
    let (_, answer) = post(&ext("/prioritize"), &probe);
    let scores: Vec<Value> = serde_json::from_str(&answer).expect("json");
    assert!(scores.iter().all(|s| s["Score"] == 5), "{answer}");
    let (_, metrics) = get(&ext("/metrics"));
    let counted = |reason: &str| -> f64 {
        let series = format!("duet_kube_unknown_pods_total{{reason=\"{reason}\"}} ");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(&series)?.parse().ok())
            .unwrap_or(0.0)
    };
    assert!(
        counted("not_registered") >= 1.0
            && counted("unannotated") >= 1.0
            && metrics
                .contains("duet_kube_permission_missing{permission=\"create pods/binding\"} 0"),
        "{metrics}"
    );
    rt.block_on(delete_all(&pods));

    // The extender stopped: pods still schedule through the stock scheduler.
    extender.kill();
    rt.block_on(async {
        create(
            &pods,
            pod_spec(
                "without-duet",
                "default-scheduler",
                None,
                1,
                "flip",
                &[("duet.io/workload", newcomer)],
            ),
        )
        .await;
        let node = bound_node(&pods, "without-duet", Duration::from_secs(30)).await;
        assert!(
            node.is_some(),
            "not scheduled without duet:\n{}",
            kube_scheduler.tail(30)
        );
        delete_all(&pods).await;
    });
    // From here on a GPU may hold three pods through the extender too.
    let (extender, _) = start_extender(
        &plane,
        &server,
        ext_port,
        "extender-2.log",
        &["--gpu-jobs", "3"],
    );
    wait_for(
        "the extender is ready again",
        Duration::from_secs(60),
        || get(&ext("/readyz")).0 == 200,
        || extender.tail(20),
    );

    // duet schedule on a batch: every pod bound or explained, no GPU over capacity, and the
    // batch worth at least binding the same pods one at a time.
    let batch_nodes = [("batch-a", 2), ("batch-b", 2), ("batch-c", 1)];
    rt.block_on(async {
        for (node, gpus) in batch_nodes {
            create_node(
                &admin,
                node,
                "Tesla-V100-SXM2-16GB",
                gpus,
                2,
                "time-slicing",
                &[("duet-e2e/pool", "batch")],
            )
            .await;
        }
        for (name, node, gpu, workload) in [
            ("r1", "batch-a", "0", "resnet-50-bs128"),
            ("r2", "batch-b", "0", x),
            ("r3", "batch-b", "1", "transformer-bs16"),
            ("r4", "batch-b", "1", "transformer-bs16"),
        ] {
            create(
                &pods,
                pod_spec(
                    name,
                    "default-scheduler",
                    Some(node),
                    1,
                    "batch",
                    &[("duet.io/workload", workload), ("duet.io/gpu", gpu)],
                ),
            )
            .await;
        }
        for (name, gpus, annotations) in [
            ("b1", 1, vec![("duet.io/workload", newcomer)]),
            ("b2", 1, vec![("duet.io/workload", "lm-bs80")]),
            ("b3", 1, vec![("duet.io/workload", "mystery-job")]),
            (
                "b4",
                1,
                vec![
                    ("duet.io/workload", "resnet-18-bs64"),
                    ("duet.io/priority", "3"),
                    ("duet.io/objective", "0.95"),
                ],
            ),
            (
                "b5",
                1,
                vec![
                    ("duet.io/workload", newcomer),
                    ("duet.io/objective", "0.99"),
                ],
            ),
            (
                "b6",
                2,
                vec![
                    ("duet.io/workload", "transformer-bs32"),
                    ("duet.io/priority", "2"),
                ],
            ),
        ] {
            create(
                &pods,
                pod_spec(name, "duet", None, gpus, "batch", &annotations),
            )
            .await;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    let schedule_once = |log: &str, extra: &[&str]| {
        let out = kube_command(&plane, &server, "schedule")
            .args(["--once", "--compare"])
            .args(extra)
            .output()
            .expect("duet schedule");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        std::fs::write(plane.dir.path().join(log), &stderr).expect("log");
        assert!(out.status.success(), "duet schedule: {stdout}\n{stderr}");
        eprintln!("{stdout}");
        (stdout, stderr)
    };
    let took = Instant::now();
    let (stdout, stderr) = schedule_once("schedule-1.log", &[]);
    eprintln!(
        "duet schedule --once --compare: {:.1} s",
        took.elapsed().as_secs_f64()
    );
    let value = |label: &str| -> f64 {
        stdout
            .lines()
            .find(|l| l.starts_with(label))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no `{label}` line in {stdout}\n{stderr}"))
    };
    let (batch, alone) = (value("batch"), value("one at a time"));
    // The heavy pod that arrived after two light ones gets a free GPU only in the batch.
    assert!(
        batch > alone,
        "batch {batch} is worth no more than one at a time {alone}"
    );
    rt.block_on(async {
        let mut waiting = Vec::new();
        for name in ["b1", "b2", "b3", "b4", "b5", "b6"] {
            if bound_node(&pods, name, Duration::ZERO).await.is_none() {
                let message = event_saying(&admin, name, &["duet:"], Duration::from_secs(10)).await;
                waiting.push((name, message));
            }
        }
        eprintln!("left pending with a reason: {waiting:#?}");
        let reason = |n: &str| {
            waiting
                .iter()
                .find(|(m, _)| *m == n)
                .map(|(_, r)| r.clone())
        };
        assert!(
            reason("b5").is_some_and(|r| r.contains("objective 0.99")),
            "{waiting:?}"
        );
        assert!(
            reason("b6").is_some_and(|r| r.contains("needs 2 free GPUs")),
            "{waiting:?}"
        );
        assert!(
            bound_node(&pods, "b4", Duration::ZERO).await.is_some(),
            "the heaviest pod got a GPU: {stdout}"
        );
        check_capacity(&admin, &batch_nodes).await;
    });
    // A second scheduler run (a restart) reads where the first put every pod.
    rt.block_on(create(
        &pods,
        pod_spec(
            "b7",
            "duet",
            None,
            1,
            "batch",
            &[("duet.io/workload", newcomer)],
        ),
    ));
    schedule_once("schedule-2.log", &[]);
    rt.block_on(check_capacity(&admin, &batch_nodes));

    // Three pods to a GPU: two pods of `shared` share each trio node's GPU in space sharing (the
    // first recorded alone, as duet records it, the second beside it); a pod joins them only
    // where a GPU may hold three and the model predicts the group gains.
    let (joins, shared) = ("resnet-18-bs16", "transformer-bs32");
    let (loses, crowded) = ("recommendation-bs512", "transformer-bs32");
    let (gain, loss) = (
        predicted_join_value(&server, joins, shared),
        predicted_join_value(&server, loses, crowded),
    );
    assert!(gain > 0.1 && loss < 0.0, "{gain} {loss}");
    rt.block_on(async {
        for (node, resident, newcomer) in [("trio-a", shared, joins), ("trio-b", crowded, loses)] {
            create_node(
                &admin,
                node,
                "Tesla-V100-SXM2-16GB",
                1,
                3,
                "time-slicing",
                &[("duet-e2e/pool", node)],
            )
            .await;
            for k in 1..=2 {
                create(
                    &pods,
                    pod_spec(
                        &format!("{node}-r{k}"),
                        "default-scheduler",
                        Some(node),
                        1,
                        node,
                        &[
                            ("duet.io/workload", resident),
                            ("duet.io/gpu", "0"),
                            (
                                "duet.io/sharing",
                                if k == 1 { "exclusive" } else { "space" },
                            ),
                        ],
                    ),
                )
                .await;
            }
            create(
                &pods,
                pod_spec(
                    &format!("{node}-new"),
                    "duet",
                    None,
                    1,
                    node,
                    &[("duet.io/workload", newcomer)],
                ),
            )
            .await;
        }
    });
    schedule_once("schedule-pairs.log", &[]);
    rt.block_on(async {
        assert_eq!(bound_node(&pods, "trio-a-new", Duration::ZERO).await, None);
        let why = event_saying(&admin, "trio-a-new", &["duet:"], Duration::from_secs(10)).await;
        assert!(why.contains("every GPU holds 2 pods"), "{why}");
    });
    schedule_once("schedule-trio.log", &["--gpu-jobs", "3"]);
    rt.block_on(async {
        let node = bound_node(&pods, "trio-a-new", Duration::from_secs(10)).await;
        assert_eq!(
            node.as_deref(),
            Some("trio-a"),
            "the predicted gain {gain}; its Events: {:#?}",
            events(&admin, "trio-a-new").await
        );
        let placed = pods.get("trio-a-new").await.expect("pod");
        let annotations = placed.metadata.annotations.unwrap_or_default();
        let of = |k: &str| annotations.get(k).map(String::as_str);
        assert_eq!(of("duet.io/gpu"), Some("0"), "{annotations:?}");
        assert_eq!(of("duet.io/sharing"), Some("space"), "{annotations:?}");
        let beside = of("duet.io/beside").unwrap_or_default();
        assert!(
            beside.contains("trio-a-r1") && beside.contains("trio-a-r2"),
            "{annotations:?}"
        );
        // The predicted loss keeps the other pod waiting, and its event says why.
        assert_eq!(bound_node(&pods, "trio-b-new", Duration::ZERO).await, None);
        let why = event_saying(
            &admin,
            "trio-b-new",
            &["duet:", "GPU 0 with default/trio-b-r", "adds"],
            Duration::from_secs(10),
        )
        .await;
        assert!(why.contains("adds"), "{why}");
    });
    eprintln!("three to a GPU: joined where the model predicts {gain:.3}, refused at {loss:.3}");

    guards::a_refused_profile_closes_its_gpu_only(&rt, &admin, &pods, joins, &|log| {
        schedule_once(log, &[]);
    });
    guards::an_edited_annotation_does_not_fool_a_restart(&rt, &admin, &pods, joins, &|log| {
        schedule_once(log, &[]);
    });
    let duet_client = rt.block_on(plane.client("duet")).expect("duet's client");
    guards::a_refused_binding_withdraws_its_record(&rt, &duet_client, &pods);
    let spawn_scheduler = |log: &str, extra: &[&str]| {
        let mut command = kube_command(&plane, &server, "schedule");
        Process::spawn(command.args(extra), plane.dir.path().join(log))
    };
    guards::pods_no_gpu_takes_step_aside(&rt, &admin, &pods, joins, &spawn_scheduler);
    let dir = plane.dir.path();
    let once = || {
        kube_command(&plane, &server, "schedule")
            .arg("--once")
            .output()
            .expect("once")
    };
    let spawn = &spawn_scheduler;
    webhook::failing_bindings_hold_back_no_other(&rt, &admin, &pods, dir, joins, spawn, &once);
    let role = yaml_documents(&root().join("deploy/k8s/kube-rbac.yaml"))
        .into_iter()
        .find(|d| d["kind"] == "ClusterRole")
        .expect("the shipped ClusterRole");
    let spawn_older = |log: &str, extra: &[&str]| {
        let mut command = kube_command_as(&plane, &server, "schedule", "older");
        Process::spawn(command.args(extra), plane.dir.path().join(log))
    };
    guards::a_role_without_a_permission_is_named_at_start(&rt, &admin, &role, &spawn_older);

    // Through the stock scheduler and the extender (`--gpu-jobs 3`): the same join.
    rt.block_on(async {
        create_node(
            &admin,
            "trio-c",
            "Tesla-V100-SXM2-16GB",
            1,
            3,
            "time-slicing",
            &[("duet-e2e/pool", "trio-c")],
        )
        .await;
        for k in 1..=2 {
            create(
                &pods,
                pod_spec(
                    &format!("trio-c-r{k}"),
                    "default-scheduler",
                    Some("trio-c"),
                    1,
                    "trio-c",
                    &[
                        ("duet.io/workload", shared),
                        ("duet.io/gpu", "0"),
                        ("duet.io/sharing", "space"),
                    ],
                ),
            )
            .await;
        }
    });
    let probe = serde_json::to_string(&json!({
        "Pod": pod_spec("probe", "default-scheduler", None, 1, "trio-c",
            &[("duet.io/workload", joins)]),
        "NodeNames": ["trio-c"]
    }))
    .expect("json");
    wait_for(
        "the extender sees both residents of trio-c",
        Duration::from_secs(10),
        || {
            let (_, answer) = post(&ext("/prioritize"), &probe);
            let scores: Vec<Value> = serde_json::from_str(&answer).unwrap_or_default();
            // A free GPU scores 10; joining the pair scores ten times its value.
            scores.len() == 1 && scores[0]["Score"].as_i64().is_some_and(|s| s > 0 && s < 10)
        },
        || extender.tail(20),
    );
    rt.block_on(async {
        create(
            &pods,
            pod_spec(
                "trio-c-new",
                "default-scheduler",
                None,
                1,
                "trio-c",
                &[("duet.io/workload", joins)],
            ),
        )
        .await;
        let node = bound_node(&pods, "trio-c-new", Duration::from_secs(30)).await;
        assert_eq!(
            node.as_deref(),
            Some("trio-c"),
            "{}",
            kube_scheduler.tail(20)
        );
        let placed = pods.get("trio-c-new").await.expect("pod");
        let annotations = placed.metadata.annotations.unwrap_or_default();
        assert_eq!(
            annotations.get("duet.io/sharing").map(String::as_str),
            Some("space"),
            "{annotations:?}"
        );
        let beside = annotations
            .get("duet.io/beside")
            .cloned()
            .unwrap_or_default();
        assert!(
            beside.contains("trio-c-r1") && beside.contains("trio-c-r2"),
            "{annotations:?}"
        );
    });

    // The API server down: the extender answers from its cache and says it is stale; the
    // scheduler waits, and binds once the API server is back.
    let mut scheduler = spawn_scheduler(
        "schedule-3.log",
        &["--interval", "0.5", "--listen", "127.0.0.1:0"],
    );
    let sched_port = listening_port(&scheduler, "probes on http://");
    let sched = |path: &str| format!("http://127.0.0.1:{sched_port}{path}");
    wait_for(
        "duet schedule is ready",
        Duration::from_secs(30),
        || get(&sched("/readyz")).0 == 200,
        || scheduler.tail(20),
    );
    plane.stop_apiserver();
    wait_for(
        "the extender says it is stale",
        Duration::from_secs(20),
        || {
            let (status, body) = get(&ext("/readyz"));
            status == 503 && body.contains("stale")
        },
        || extender.tail(20),
    );
    wait_for(
        "duet schedule says it is stale",
        Duration::from_secs(20),
        || {
            let (status, body) = get(&sched("/readyz"));
            status == 503 && body.contains("stale")
        },
        || scheduler.tail(20),
    );
    let probe = serde_json::to_string(&json!({
        "Pod": pod_spec("probe", "default-scheduler", None, 1, "batch",
            &[("duet.io/workload", newcomer)]),
        "NodeNames": ["batch-a", "batch-b", "batch-c"]
    }))
    .expect("json");
    let (status, answer) = post(&ext("/prioritize"), &probe);
    let scores: Vec<Value> = serde_json::from_str(&answer).unwrap_or_default();
    assert_eq!((status, scores.len()), (200, 3), "{answer}");
    assert!(
        scheduler.running(),
        "duet schedule exited:\n{}",
        scheduler.tail(20)
    );
    plane.restart_apiserver();
    rt.block_on(async {
        let admin = plane.client("admin").await.expect("client");
        let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
        create(
            &pods,
            pod_spec(
                "after-outage",
                "duet",
                None,
                1,
                "flip",
                &[("duet.io/workload", newcomer)],
            ),
        )
        .await;
        let node = bound_node(&pods, "after-outage", Duration::from_secs(30)).await;
        assert!(
            node.is_some(),
            "not bound after the outage:\n{}",
            scheduler.tail(30)
        );
    });
    let (_, metrics) = get(&sched("/metrics"));
    assert!(
        metrics.contains("duet_kube_record_failures_total 0")
            && metrics.contains("duet_schedule_bindings_in_flight 0")
            && metrics.contains("duet_kube_permission_missing{permission=\"patch pods/status\"} 0")
            && !metrics
                .lines()
                .any(|l| l.starts_with("duet_kube_permission_missing{") && l.ends_with(" 1")),
        "every binding's record written, every permission granted:\n{metrics}"
    );
    wait_for(
        "the extender is current again",
        Duration::from_secs(20),
        || get(&ext("/readyz")).0 == 200,
        || extender.tail(20),
    );
    scheduler.kill();
    eprintln!("the whole run: {:.1} s", started.elapsed().as_secs_f64());
}
