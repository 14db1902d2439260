//! The Kubernetes end-to-end test's hostile cases against a running extender: a pod whose GPU
//! request overflows a u32 sum leaves the extender's view current, a quantity the API server
//! writes in canonical form (`1k`) counts what it says, and /bind binds only the pod
//! a call names by its UID, of a scheduler `--bind-scheduler` names, to a node duet knows; a
//! resident whose profile the model refuses closes its own GPU to `duet schedule`, no more; and
//! a pod's edited GPU annotation does not fool a restarted `duet schedule`, and pods no GPU can
//! take step aside, in a round's window, for the pods of their namespace behind them.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::{Value, json};

use super::plane::{Process, create_node};
use super::steps::{
    bound_node, create, delete_all, event_saying, get, pod_spec, post, record_of, wait_for,
};

/// Runs both cases on flip-a and flip-b (one free GPU each) through the extender at `ext`,
/// and deletes every pod it made.
pub(crate) fn a_hostile_pod_and_binds(
    rt: &tokio::runtime::Runtime,
    pods: &Api<Pod>,
    ext: &str,
    extender: &Process,
) {
    // A pod asking 2 x 4294967295 GPUs (the API server takes it) does not stop the pod watch:
    // a pod that takes flip-a's GPU afterwards is still seen.
    rt.block_on(async {
        let mut greedy = pod_spec("greedy", "nobody", None, 0, "flip", &[]);
        let containers: Value = json!([
            {"name": "a", "image": "registry.invalid/job:1",
                "resources": {"limits": {"nvidia.com/gpu": "4294967295"}}},
            {"name": "b", "image": "registry.invalid/job:1",
                "resources": {"limits": {"nvidia.com/gpu": "4294967295"}}}
        ]);
        if let Some(spec) = greedy.spec.as_mut() {
            spec.containers = serde_json::from_value(containers).expect("containers");
        }
        create(pods, greedy).await;
        create(
            pods,
            pod_spec("taker", "default-scheduler", Some("flip-a"), 1, "flip", &[]),
        )
        .await;
    });
    let probe = serde_json::to_string(&json!({
        "Pod": pod_spec("probe", "default-scheduler", None, 1, "flip",
            &[("duet.io/workload", "resnet-18-bs16")]),
        "NodeNames": ["flip-a", "flip-b"]
    }))
    .expect("json");
    wait_for(
        "the extender sees the pod that took flip-a's GPU",
        Duration::from_secs(10),
        || {
            let (_, answer) = post(&format!("{ext}/prioritize"), &probe);
            let scores: Vec<Value> = serde_json::from_str(&answer).unwrap_or_default();
            scores.len() == 2 && scores[0]["Score"] == 0 && scores[1]["Score"] == 10
        },
        || extender.tail(20),
    );
    assert_eq!(
        get(&format!("{ext}/readyz")).0,
        200,
        "{}",
        extender.tail(20)
    );

    // A pod asking 1,000 GPUs arrives as the API server writes it back, `1k`, and is judged as
    // asking 1,000: neither node of one GPU passes.
    let thousand = rt.block_on(async {
        create(
            pods,
            pod_spec(
                "thousand",
                "nobody",
                None,
                1000,
                "flip",
                &[("duet.io/workload", "resnet-18-bs16")],
            ),
        )
        .await;
        pods.get("thousand").await.expect("pod")
    });
    let stored = serde_json::to_value(&thousand).expect("json");
    assert_eq!(
        stored["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"],
        "1k"
    );
    let call = json!({"Pod": stored, "NodeNames": ["flip-a", "flip-b"]});
    let (status, answer) = post(&format!("{ext}/filter"), &call.to_string());
    let answer: Value = serde_json::from_str(&answer).expect("json");
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["NodeNames"], json!([]), "{answer}");
    let why = answer["FailedNodes"]["flip-b"].as_str().unwrap_or_default();
    assert!(why.contains("needs 1000 free GPUs"), "{answer}");

    // /bind binds only the pod the call names by its UID, to a node duet knows: a pending pod
    // (its node selector matches no node) is refused and stays unbound, then bound.
    let victim = rt.block_on(async {
        create(
            pods,
            pod_spec("victim", "default-scheduler", None, 1, "none", &[]),
        )
        .await;
        pods.get("victim")
            .await
            .expect("pod")
            .metadata
            .uid
            .expect("uid")
    });
    let bind = |uid: &str, node: &str| -> String {
        let body = json!({"PodName": "victim", "PodNamespace": "default", "PodUID": uid,
            "Node": node});
        let (status, answer) = post(&format!("{ext}/bind"), &body.to_string());
        assert_eq!(status, 200, "{answer}");
        let answer: Value = serde_json::from_str(&answer).expect("json");
        answer["Error"].as_str().unwrap_or_default().to_string()
    };
    // A pending pod of another scheduler than `--bind-scheduler` names is refused too.
    let stranger = rt.block_on(async {
        create(pods, pod_spec("stranger", "nobody", None, 1, "none", &[])).await;
        pods.get("stranger")
            .await
            .expect("pod")
            .metadata
            .uid
            .expect("uid")
    });
    let body = json!({"PodName": "stranger", "PodNamespace": "default", "PodUID": stranger,
        "Node": "flip-b"});
    let (status, answer) = post(&format!("{ext}/bind"), &body.to_string());
    assert_eq!(status, 200, "{answer}");
    let answer: Value = serde_json::from_str(&answer).expect("json");
    let why = answer["Error"].as_str().unwrap_or_default();
    assert!(why.contains("scheduler nobody"), "{answer}");
    assert_eq!(
        rt.block_on(bound_node(pods, "stranger", Duration::ZERO)),
        None
    );
    let wrong_uid = bind("00000000-0000-0000-0000-000000000000", "flip-b");
    assert!(wrong_uid.contains("UID"), "{wrong_uid}");
    let no_node = bind(&victim, "no-such-node");
    assert!(no_node.contains("no-such-node"), "{no_node}");
    assert_eq!(
        rt.block_on(bound_node(pods, "victim", Duration::ZERO)),
        None
    );
    assert_eq!(bind(&victim, "flip-b"), "");
    assert_eq!(
        rt.block_on(bound_node(pods, "victim", Duration::ZERO))
            .as_deref(),
        Some("flip-b")
    );
    rt.block_on(delete_all(pods));
}

/// A resident whose inline profile the model refuses (no `model`) closes its own GPU only:
/// `duet schedule`'s step goes on (`schedule_once` runs it and requires it to succeed), and a
/// pod of workload `joins` takes the node's other GPU. (Sent, the profile failed the whole
/// step's prediction, and every pod waited.) A duet pod asking for no GPU is told why it waits.
pub(crate) fn a_refused_profile_closes_its_gpu_only(
    rt: &tokio::runtime::Runtime,
    admin: &kube::Client,
    pods: &Api<Pod>,
    joins: &str,
    schedule_once: &dyn Fn(&str),
) {
    rt.block_on(async {
        let pool = [("duet-e2e/pool", "mixed")];
        create_node(
            admin,
            "mixed",
            "Tesla-V100-SXM2-16GB",
            2,
            2,
            "time-slicing",
            &pool,
        )
        .await;
        let profile = r#"{"v100": {"solo_throughput": 11.2, "batch_size": 64}}"#;
        let bad = [("duet.io/profiles", profile), ("duet.io/gpu", "0")];
        let resident = pod_spec(
            "mixed-bad",
            "default-scheduler",
            Some("mixed"),
            1,
            "mixed",
            &bad,
        );
        create(pods, resident).await;
        let new = [("duet.io/workload", joins)];
        create(pods, pod_spec("mixed-new", "duet", None, 1, "mixed", &new)).await;
        create(pods, pod_spec("mixed-zero", "duet", None, 0, "mixed", &new)).await;
    });
    schedule_once("schedule-mixed.log");
    rt.block_on(async {
        let node = bound_node(pods, "mixed-new", Duration::from_secs(10)).await;
        assert_eq!(node.as_deref(), Some("mixed"));
        let placed = pods.get("mixed-new").await.expect("pod");
        let annotations = placed.metadata.annotations.unwrap_or_default();
        assert_eq!(
            annotations.get("duet.io/gpu").map(String::as_str),
            Some("1"),
            "{annotations:?}"
        );
        // A duet pod that asks for no GPU is told why it waits.
        let why = event_saying(
            admin,
            "mixed-zero",
            &["asks for no nvidia.com/gpu"],
            Duration::from_secs(10),
        )
        .await;
        assert!(why.contains("another schedulerName"), "{why}");
    });
}

/// A pod `duet schedule` placed has its `duet.io/gpu` annotation edited by its owner to name the
/// node's other GPU; a new `duet schedule` process (a restart) believes duet's record in the
/// pod's status, not the annotation, and gives a pod that takes only a whole free GPU (a workload
/// the server does not know) the GPU that really is free. (Believing the annotation, it gave it
/// the GPU the first pod holds.)
pub(crate) fn an_edited_annotation_does_not_fool_a_restart(
    rt: &tokio::runtime::Runtime,
    admin: &kube::Client,
    pods: &Api<Pod>,
    workload: &str,
    schedule_once: &dyn Fn(&str),
) {
    let gpu_of = |name: &'static str| async move {
        let pod = pods.get(name).await.expect("pod");
        let annotations = pod.metadata.annotations.unwrap_or_default();
        annotations.get("duet.io/gpu").cloned().unwrap_or_default()
    };
    rt.block_on(async {
        let pool = [("duet-e2e/pool", "edited")];
        let product = "Tesla-V100-SXM2-16GB";
        create_node(admin, "edited", product, 2, 1, "time-slicing", &pool).await;
        let known = [("duet.io/workload", workload)];
        create(
            pods,
            pod_spec("edited-1", "duet", None, 1, "edited", &known),
        )
        .await;
    });
    schedule_once("schedule-edited-1.log");
    let (held, other) = rt.block_on(async {
        assert_eq!(
            bound_node(pods, "edited-1", Duration::from_secs(10))
                .await
                .as_deref(),
            Some("edited")
        );
        let held = gpu_of("edited-1").await;
        let record = record_of(pods, "edited-1", Duration::from_secs(5)).await;
        assert_eq!(
            record.as_deref(),
            Some(format!("node=edited duet.io/gpu={held} duet.io/sharing=exclusive").as_str())
        );
        let other = if held == "0" { "1" } else { "0" };
        let edit = json!({"metadata": {"annotations": {"duet.io/gpu": other}}});
        pods.patch("edited-1", &PatchParams::default(), &Patch::Merge(edit))
            .await
            .expect("the owner edits the annotation");
        let unknown = [("duet.io/workload", "edited-mystery")];
        create(
            pods,
            pod_spec("edited-2", "duet", None, 1, "edited", &unknown),
        )
        .await;
        (held, other)
    });
    schedule_once("schedule-edited-2.log");
    rt.block_on(async {
        assert_eq!(
            bound_node(pods, "edited-2", Duration::from_secs(10))
                .await
                .as_deref(),
            Some("edited")
        );
        assert_eq!(
            gpu_of("edited-2").await,
            other,
            "edited-1 holds GPU {held} (its annotation now says {other}); edited-2 must take \
             the free one"
        );
    });
}

/// `duet schedule --window 2` (a round weighs two waiting pods) with two pods of weight 5 that no
/// GPU of their node can take (they ask for 2 GPUs of 1) and a pod of weight 1 behind them, all in
/// one namespace: the first step weighs the two and places nothing; the next, they step aside and
/// the third is weighed and bound. (Weighed by priority alone, it waited for good.) Then room
/// freed on the full node goes to the waiting pod of most weight.
pub(crate) fn pods_no_gpu_takes_step_aside(
    rt: &tokio::runtime::Runtime,
    admin: &kube::Client,
    pods: &Api<Pod>,
    workload: &str,
    spawn_scheduler: &dyn Fn(&str, &[&str]) -> Process,
) {
    rt.block_on(async {
        let pool = [("duet-e2e/pool", "queue")];
        create_node(
            admin,
            "queue",
            "Tesla-V100-SXM2-16GB",
            1,
            1,
            "time-slicing",
            &pool,
        )
        .await;
        let heavy = [("duet.io/workload", workload), ("duet.io/priority", "5")];
        for name in ["queue-big-1", "queue-big-2"] {
            create(pods, pod_spec(name, "duet", None, 2, "queue", &heavy)).await;
        }
        let light = [("duet.io/workload", workload)];
        create(
            pods,
            pod_spec("queue-small", "duet", None, 1, "queue", &light),
        )
        .await;
    });
    let mut scheduler = spawn_scheduler(
        "schedule-queue.log",
        &["--interval", "0.3", "--window", "2"],
    );
    rt.block_on(async {
        let node = bound_node(pods, "queue-small", Duration::from_secs(20)).await;
        assert_eq!(node.as_deref(), Some("queue"), "{}", scheduler.tail(20));
        for name in ["queue-big-1", "queue-big-2"] {
            assert_eq!(bound_node(pods, name, Duration::ZERO).await, None);
        }
    });
    // Room freed goes by priority: the node full (queue-small holds its GPU; an objective of 1
    // lets no pod beside it), a pod of weight 100 waits and is passed over step after step, then
    // three pods of weight 1 arrive (passed over never) and queue-small is deleted: the heavy
    // one takes the GPU. (By the steps passed over alone, a light one took it.)
    rt.block_on(async {
        let heavy = [
            ("duet.io/workload", workload),
            ("duet.io/objective", "1"),
            ("duet.io/priority", "100"),
        ];
        create(
            pods,
            pod_spec("queue-high", "duet", None, 1, "queue", &heavy),
        )
        .await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let light = [("duet.io/workload", workload), ("duet.io/objective", "1")];
        for name in ["queue-low-1", "queue-low-2", "queue-low-3"] {
            create(pods, pod_spec(name, "duet", None, 1, "queue", &light)).await;
        }
        pods.delete("queue-small", &DeleteParams::default().grace_period(0))
            .await
            .expect("delete");
        let node = bound_node(pods, "queue-high", Duration::from_secs(20)).await;
        assert_eq!(node.as_deref(), Some("queue"), "{}", scheduler.tail(20));
        for name in ["queue-low-1", "queue-low-2", "queue-low-3"] {
            assert_eq!(bound_node(pods, name, Duration::ZERO).await, None);
        }
    });
    scheduler.kill();
}

/// A binding the API server refuses has its record withdrawn: a pod bound by hand (to node
/// `edited`, its own `duet.io/gpu` saying GPU 1) that duet then tries to bind to the same node's
/// GPU 0, acting as its service account (`duet`): the record written first is marked not
/// standing when the binding is refused, so the pod is read from its annotation. (Left
/// standing, the record of the refused binding was believed: GPU 0.)
pub(crate) fn a_refused_binding_withdraws_its_record(
    rt: &tokio::runtime::Runtime,
    duet: &kube::Client,
    pods: &Api<Pod>,
) {
    use duet_kube::cluster::PodInfo;
    use duet_kube::contract::{Assignment, assignment_annotations};
    rt.block_on(async {
        let own = [("duet.io/gpu", "1")];
        let by_hand = pod_spec("by-hand", "duet", Some("edited"), 1, "edited", &own);
        create(pods, by_hand).await;
        let pod = PodInfo::read(&pods.get("by-hand").await.expect("pod"), "nvidia.com/gpu");
        let gpu0 = Assignment {
            gpus: vec![0],
            sharing: None,
            mps_share: None,
        };
        let refused = duet_kube::bind::bind(
            duet,
            &pod,
            "edited",
            assignment_annotations(&gpu0, None, None),
        )
        .await;
        assert!(
            matches!(refused, Err(duet_kube::bind::BindError::Refused { .. })),
            "{refused:?}"
        );
        let now = pods.get("by-hand").await.expect("pod");
        let record = now
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "duet.io/placement"))
            .map(|c| c.status.clone());
        assert_eq!(record.as_deref(), Some("False"));
        let read = PodInfo::read(&now, "nvidia.com/gpu").assignment;
        assert_eq!(read.map(|a| a.gpus), Some(vec![1]));
    });
}

/// A role kept from before duet recorded its bindings (the shipped ClusterRole `role` less its
/// `pods/status` rule, bound to `OLDER_USER`) is named when `duet schedule` starts: a warning
/// that says what its absence costs, and `duet_kube_permission_missing` 1 for it and 0 for the
/// permissions it has. `spawn_older` starts `duet schedule` as that user with extra arguments.
pub(crate) fn a_role_without_a_permission_is_named_at_start(
    rt: &tokio::runtime::Runtime,
    admin: &kube::Client,
    role: &Value,
    spawn_older: &dyn Fn(&str, &[&str]) -> Process,
) {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    use kube::api::PostParams;
    let mut older = role.clone();
    older["metadata"] = json!({"name": "duet-older"});
    if let Some(rules) = older["rules"].as_array_mut() {
        rules.retain(|r| !r["resources"].to_string().contains("pods/status"));
    }
    let older: ClusterRole = serde_json::from_value(older).expect("role");
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "duet-older"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "duet-older"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                      "name": super::plane::OLDER_USER}]
    }))
    .expect("binding");
    rt.block_on(async {
        let pp = PostParams::default();
        Api::<ClusterRole>::all(admin.clone())
            .create(&pp, &older)
            .await
            .expect("the older role");
        Api::<ClusterRoleBinding>::all(admin.clone())
            .create(&pp, &binding)
            .await
            .expect("its binding");
    });
    let mut scheduler = spawn_older("schedule-older.log", &["--listen", "127.0.0.1:0"]);
    let port = super::steps::listening_port(&scheduler, "probes on http://");
    let metrics = || get(&format!("http://127.0.0.1:{port}/metrics")).1;
    let missing = "duet_kube_permission_missing{permission=\"patch pods/status\"} 1";
    wait_for(
        "the missing permission in /metrics",
        Duration::from_secs(20),
        || metrics().contains(missing),
        || scheduler.tail(20),
    );
    let text = metrics();
    for granted in [
        "watch pods",
        "watch nodes",
        "create pods/binding",
        "create events.events.k8s.io",
    ] {
        let line = format!("duet_kube_permission_missing{{permission=\"{granted}\"}} 0");
        assert!(text.contains(&line), "{line} in:\n{text}");
    }
    let log = scheduler.output();
    assert!(
        log.contains("may not patch pods/status")
            && log.contains("a restarted scheduler believes their annotations"),
        "{log}"
    );
    scheduler.kill();
}
