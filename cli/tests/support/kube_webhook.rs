//! An admission webhook for the Kubernetes end-to-end test, as a cluster's policy engine is one:
//! the API server asks it about every pod binding (`pods/binding`), over TLS with the control
//! plane's own serving certificate, and it answers by the pod's name: `slow-*` refused after
//! [`SLOW`], `refused-*` refused at once, `again-*` refused at once the first time it is asked,
//! any other allowed (after `Webhook::allow_after`). It
//! notes which pods it was asked about, and when. It also holds each Event about a `mute-*` pod
//! [`MUTE`] before it lets it be written. Then the case it serves: `duet schedule`
//! against bindings that fail.

#![allow(dead_code)] // the load benchmark shares the webhook, not the case

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::plane::{Process, create_node};
use super::steps::{bound_node, create, delete_all, event_saying, events, pod_spec, wait_for};

/// How long the webhook takes to refuse a `slow-*` pod's binding.
pub(crate) const SLOW: Duration = Duration::from_secs(6);

/// How long it holds an Event about a `mute-*` pod.
pub(crate) const MUTE: Duration = Duration::from_secs(15);

const NAME: &str = "duet-e2e-bindings";

/// The pods (names) the webhook was asked to bind, in order, and when.
pub(crate) type Asked = Arc<Mutex<Vec<(String, Instant)>>>;

/// The webhook running: what it was asked, and how long it takes to allow a binding (ms).
pub(crate) struct Webhook {
    pub asked: Asked,
    pub allow_after: Arc<AtomicU64>,
}

/// Serves the webhook on a thread of its own (so it answers while the test waits outside its
/// runtime) with the certificate and key of the control plane's folder `dir`, and registers it
/// with the API server through `admin`.
pub(crate) async fn start(admin: &kube::Client, dir: &Path) -> Webhook {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(dir.join("server.crt"))
        .expect("server.crt")
        .collect::<Result<_, _>>()
        .expect("server.crt");
    let key = PrivateKeyDer::from_pem_file(dir.join("server.key")).expect("server.key");
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let tls = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .expect("TLS config");
    let acceptor = TlsAcceptor::from(Arc::new(tls));
    let std_listener = std::net::TcpListener::bind("127.0.0.1:0").expect("webhook port");
    std_listener.set_nonblocking(true).expect("nonblocking");
    let port = std_listener.local_addr().expect("address").port();
    let asked: Asked = Arc::default();
    let allow_after: Arc<AtomicU64> = Arc::default();
    let (noted, delay) = (asked.clone(), allow_after.clone());
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("webhook runtime");
        rt.block_on(async move {
            let listener = TcpListener::from_std(std_listener).expect("listener");
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let (acceptor, noted, delay) = (acceptor.clone(), noted.clone(), delay.clone());
                tokio::spawn(async move {
                    if let Ok(tls) = acceptor.accept(tcp).await {
                        let _ = answer(tls, &noted, &delay).await;
                    }
                });
            }
        });
    });
    let ca = std::fs::read(dir.join("ca.crt")).expect("ca.crt");
    let mut config: ValidatingWebhookConfiguration = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": NAME},
        "webhooks": [{
            "name": "bindings.duet-e2e.test",
            "clientConfig": {"url": format!("https://127.0.0.1:{port}/bindings")},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                       "resources": ["pods/binding"], "scope": "Namespaced"},
                      {"apiGroups": ["events.k8s.io"], "apiVersions": ["v1"],
                       "operations": ["CREATE"], "resources": ["events"],
                       "scope": "Namespaced"}],
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 20
        }]
    }))
    .expect("webhook configuration");
    if let Some(w) = config.webhooks.as_mut().and_then(|w| w.first_mut()) {
        w.client_config.ca_bundle = Some(ByteString(ca));
    }
    Api::<ValidatingWebhookConfiguration>::all(admin.clone())
        .create(&PostParams::default(), &config)
        .await
        .expect("the webhook's configuration");
    Webhook { asked, allow_after }
}

/// Unregisters the webhook.
pub(crate) async fn stop(admin: &kube::Client) {
    Api::<ValidatingWebhookConfiguration>::all(admin.clone())
        .delete(NAME, &DeleteParams::default())
        .await
        .expect("delete the webhook's configuration");
}

/// Answers the admission reviews of one connection (HTTP/1.1, kept alive).
async fn answer<S>(stream: S, noted: &Asked, allow_after: &AtomicU64) -> std::io::Result<()>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let mut reader = BufReader::new(stream);
    loop {
        let mut length = 0;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).await? == 0 {
                return Ok(());
            }
            if line == "\r\n" {
                break;
            }
            if let Some((name, value)) = line.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).await?;
        let review: Value = serde_json::from_slice(&body).unwrap_or_default();
        let request = &review["request"];
        let refused = if request["resource"]["resource"] == "events" {
            // An Event about a `mute-*` pod is held 15 s (an API server too loaded to write it).
            let about = request["object"]["regarding"]["name"].as_str();
            if about.is_some_and(|p| p.starts_with("mute-")) {
                tokio::time::sleep(MUTE).await;
            }
            false
        } else {
            let pod = request["name"].as_str().unwrap_or_default().to_string();
            noted
                .lock()
                .expect("noted")
                .push((pod.clone(), Instant::now()));
            let first = asked_about(noted, &pod).len() == 1;
            binding(&pod, first, allow_after).await
        };
        let pod = request["name"].as_str().unwrap_or_default();
        let mut response = json!({"uid": request["uid"], "allowed": !refused});
        if refused {
            response["status"] = json!({"code": 403, "message": format!("{pod} may not run now")});
        }
        let text = json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": response
        })
        .to_string();
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            text.len()
        );
        let stream = reader.get_mut();
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(text.as_bytes()).await?;
        stream.flush().await?;
    }
}

/// Whether the binding of `pod` (`first`: the first time it is asked) is refused, after the time
/// it takes.
async fn binding(pod: &str, first: bool, allow_after: &AtomicU64) -> bool {
    if pod.starts_with("slow-") {
        tokio::time::sleep(SLOW).await;
        true
    } else if pod.starts_with("refused-") || (first && pod.starts_with("again-")) {
        true
    } else {
        let wait = allow_after.load(Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(wait)).await;
        false
    }
}

/// When the webhook was asked to bind `pod`, each time.
fn asked_about(asked: &Asked, pod: &str) -> Vec<Instant> {
    asked
        .lock()
        .expect("asked")
        .iter()
        .filter(|(p, _)| p == pod)
        .map(|(_, at)| *at)
        .collect()
}

/// Creates the pod `name` (one GPU, `annotations`) on the node `policed` and checks it is bound
/// there within `within_s` seconds of its arrival, `while_` what else goes on; `scheduler`'s log
/// goes with a failure.
async fn arrives_and_is_bound(
    pods: &Api<Pod>,
    name: &str,
    annotations: &[(&str, &str)],
    within_s: u64,
    while_: &str,
    scheduler: &Process,
) {
    let arrived = Instant::now();
    create(
        pods,
        pod_spec(name, "duet", None, 1, "policed", annotations),
    )
    .await;
    let node = bound_node(pods, name, Duration::from_secs(30)).await;
    assert_eq!(node.as_deref(), Some("policed"), "{}", scheduler.tail(20));
    let took = arrived.elapsed().as_secs_f64();
    eprintln!("{name} bound {took:.1} s after it arrived ({while_})");
    assert!(
        arrived.elapsed() < Duration::from_secs(within_s),
        "{name} bound {took:.1} s after it arrived, {while_}; {}",
        scheduler.tail(20)
    );
}

/// Creates, on the node `duo` (one GPU for two), a pod `refused` of priority 5 and a pod `beside`
/// of priority 1, planned beside it.
async fn refused_and_beside(pods: &Api<Pod>, refused: &str, beside: &str, workload: &str) {
    for (name, priority) in [(refused, "5"), (beside, "1")] {
        let job = [
            ("duet.io/workload", workload),
            ("duet.io/priority", priority),
        ];
        create(pods, pod_spec(name, "duet", None, 1, "duo", &job)).await;
    }
}

/// Creates eighteen one-GPU pods of `workload` on the node `policed`, `{prefix}-1` to
/// `{prefix}-18`, each of the priority its number says; returns their names in that order.
async fn create_ranked(pods: &Api<Pod>, prefix: &str, workload: &str) -> Vec<String> {
    let mut names = Vec::new();
    for k in 1..=18 {
        let priority = k.to_string();
        let job = [
            ("duet.io/workload", workload),
            ("duet.io/priority", priority.as_str()),
        ];
        let name = format!("{prefix}-{k}");
        create(pods, pod_spec(&name, "duet", None, 1, "policed", &job)).await;
        names.push(name);
    }
    names
}

/// Bindings the API server refuses, through the webhook: a pod refused at once is held back for
/// longer each time (asked about 3 to 5 times in 9 s from its first refusal: 1, 2, 4 s apart; tried
/// at every step of 0.3 s, it was asked about some 30 times) and its Event says so; three pods
/// ranked ahead whose bindings take 6 s to be refused hold back neither a fourth pod of the same
/// step (bound within 3 s of the first slow refusal's start; one binding at a time, it waited 18 s)
/// nor a pod that arrives while they wait (bound within 3 s of its arrival; a step that waited for
/// its bindings kept it 6 s); sixteen pods refused slowly are tried again eight at a time at most,
/// leaving room for a pod that arrives (bound within 3 s); and an Event the API server holds 15 s
/// holds back no binding (bound within 5 s; a step waited for it) nor another pod's Event
/// (written within 6 s; behind it, 15 s) and is written once; `--once` with a binding refused
/// exits non-zero, saying so, and sends first tries by priority (a running scheduler tells the
/// pods left out of the places so); a pod refused once is tried again beside first tries that
/// fill their places (within 2.5 s; behind them, 3 s); a pod planned beside a pod whose binding
/// is refused, of its step or sent at an earlier one, is bound without naming it, and under
/// `--once` is told it is not tried again.
pub(crate) fn failing_bindings_hold_back_no_other(
    rt: &tokio::runtime::Runtime,
    admin: &kube::Client,
    pods: &Api<Pod>,
    dir: &Path,
    workload: &str,
    spawn_scheduler: &dyn Fn(&str, &[&str]) -> Process,
    schedule_once: &dyn Fn() -> std::process::Output,
) {
    let Webhook { asked, allow_after } = rt.block_on(async {
        create_node(
            admin,
            "policed",
            "Tesla-V100-SXM2-16GB",
            32,
            1,
            "time-slicing",
            &[("duet-e2e/pool", "policed")],
        )
        .await;
        start(admin, dir).await
    });
    let job = |priority| {
        [
            ("duet.io/workload", workload),
            ("duet.io/priority", priority),
        ]
    };
    rt.block_on(create(
        pods,
        pod_spec("refused-1", "duet", None, 1, "policed", &job("1")),
    ));
    let mut scheduler = spawn_scheduler("schedule-policed.log", &["--interval", "0.3"]);
    rt.block_on(async {
        let why = event_saying(
            admin,
            "refused-1",
            &[
                "duet:",
                "refused",
                "may not run now",
                "planned again in 1 s",
            ],
            Duration::from_secs(30),
        )
        .await;
        assert!(why.contains("refused-1"), "{why}");
    });
    let first = asked_about(&asked, "refused-1")[0];
    std::thread::sleep((first + Duration::from_secs(9)).saturating_duration_since(Instant::now()));
    let tries = asked_about(&asked, "refused-1");
    let within: Vec<f64> = tries
        .iter()
        .filter(|t| **t <= first + Duration::from_secs(9))
        .map(|t| t.duration_since(first).as_secs_f64())
        .collect();
    eprintln!("refused-1 asked about at {within:.1?} s after its first refusal");
    assert!(
        (3..=5).contains(&within.len()),
        "refused-1 tried at {within:?} s; {}",
        scheduler.tail(20)
    );
    // Three slow refusals ranked ahead of a fourth pod, all pending at one step.
    scheduler.kill();
    rt.block_on(async {
        delete_all(pods).await;
        for name in ["slow-1", "slow-2", "slow-3"] {
            create(pods, pod_spec(name, "duet", None, 1, "policed", &job("5"))).await;
        }
        create(
            pods,
            pod_spec("policed-1", "duet", None, 1, "policed", &job("1")),
        )
        .await;
    });
    let mut scheduler = spawn_scheduler("schedule-policed-2.log", &["--interval", "0.3"]);
    rt.block_on(async {
        let node = bound_node(pods, "policed-1", Duration::from_secs(30)).await;
        assert_eq!(node.as_deref(), Some("policed"), "{}", scheduler.tail(20));
    });
    let bound_at = Instant::now();
    let slow_started = asked_about(&asked, "slow-1")
        .first()
        .copied()
        .expect("slow-1's binding asked about");
    assert!(
        bound_at.duration_since(slow_started) < Duration::from_secs(3),
        "policed-1 bound {:.1} s after slow-1's binding started; {}",
        bound_at.duration_since(slow_started).as_secs_f64(),
        scheduler.tail(20)
    );
    // A pod arriving while the slow bindings wait is bound at the next step.
    rt.block_on(async {
        let light = job("1");
        arrives_and_is_bound(
            pods,
            "policed-2",
            &light,
            3,
            "slow bindings waiting",
            &scheduler,
        )
        .await;
        for name in ["slow-1", "slow-2", "slow-3"] {
            assert_eq!(bound_node(pods, name, Duration::ZERO).await, None);
        }
    });
    // Sixteen pods refused slowly, tried again together: half the places in flight at most go
    // to them (the node has GPUs for all).
    let slow: Vec<String> = (1..=16).map(|k| format!("slow-r{k}")).collect();
    rt.block_on(async {
        for name in ["slow-1", "slow-2", "slow-3"] {
            pods.delete(name, &DeleteParams::default().grace_period(0))
                .await
                .expect("delete");
        }
        for name in &slow {
            create(pods, pod_spec(name, "duet", None, 1, "policed", &job("5"))).await;
        }
    });
    wait_for(
        "sixteen slowly refused pods asked about twice",
        Duration::from_secs(40),
        || slow.iter().all(|p| asked_about(&asked, p).len() >= 2),
        || scheduler.tail(20),
    );
    // Their bindings tried again were never more than eight in flight at once (each one the
    // webhook's 6 s).
    let again: Vec<Instant> = slow
        .iter()
        .flat_map(|p| asked_about(&asked, p).into_iter().skip(1))
        .collect();
    let most = again
        .iter()
        .map(|&t| again.iter().filter(|&&u| u <= t && t < u + SLOW).count())
        .max()
        .unwrap_or(0);
    assert!((1..=8).contains(&most), "{most} tried again at once");
    rt.block_on(async {
        let light = job("1");
        let why = "sixteen refused pods tried again";
        arrives_and_is_bound(pods, "policed-3", &light, 3, why, &scheduler).await;
        for name in &slow {
            pods.delete(name, &DeleteParams::default().grace_period(0))
                .await
                .expect("delete");
        }
    });
    // An Event the API server holds 15 s (a pod no node can take, told why) holds back no
    // binding of a pod that arrives meanwhile.
    rt.block_on(async {
        create(
            pods,
            pod_spec("mute-1", "duet", None, 64, "policed", &job("1")),
        )
        .await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let light = job("1");
        arrives_and_is_bound(pods, "policed-4", &light, 5, "an Event held", &scheduler).await;
        // Nor the Event of another pod no node can take (written behind it, it waited 15 s).
        let arrived = Instant::now();
        create(
            pods,
            pod_spec("unmuted-1", "duet", None, 64, "policed", &job("1")),
        )
        .await;
        event_saying(admin, "unmuted-1", &["duet:"], Duration::from_secs(40)).await;
        let took = arrived.elapsed();
        eprintln!(
            "unmuted-1 told why {:.1} s after it arrived",
            took.as_secs_f64()
        );
        assert!(took < Duration::from_secs(6), "{}", scheduler.tail(20));
        // The held Event is written once (a write cut short and sent again made a second).
        let why = event_saying(admin, "mute-1", &["duet:"], Duration::from_secs(40)).await;
        tokio::time::sleep(Duration::from_secs(4)).await;
        let told = events(admin, "mute-1").await;
        assert_eq!(told.iter().filter(|m| **m == why).count(), 1, "{told:#?}");
    });
    scheduler.kill();
    // `--once` with twenty pods and one binding refused: it binds the twenty (more than the
    // places in flight), says so of the one and exits non-zero.
    let many: Vec<String> = (1..=20).map(|k| format!("once-{k}")).collect();
    rt.block_on(async {
        delete_all(pods).await;
        create(
            pods,
            pod_spec("refused-2", "duet", None, 1, "policed", &job("5")),
        )
        .await;
        for name in &many {
            create(pods, pod_spec(name, "duet", None, 1, "policed", &job("1"))).await;
        }
    });
    let out = schedule_once();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    rt.block_on(async {
        for name in &many {
            let node = bound_node(pods, name, Duration::ZERO).await;
            assert_eq!(node.as_deref(), Some("policed"), "{name}: {stderr}");
        }
    });
    assert!(
        stderr.contains("1 of 21 bindings failed")
            && stderr.contains("refused-2 may not run now; not tried again (duet schedule --once)"),
        "{stderr}"
    );
    // Eighteen pods of as many priorities, each binding allowed after 2 s: the sixteen places go
    // to the sixteen of highest priority, the other two wait for theirs.
    let ranked = rt.block_on(async {
        delete_all(pods).await;
        create_ranked(pods, "ranked", workload).await
    });
    allow_after.store(2000, Ordering::Relaxed);
    let out = schedule_once();
    allow_after.store(0, Ordering::Relaxed);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let order: Vec<String> = asked
        .lock()
        .expect("asked")
        .iter()
        .filter(|(p, _)| p.starts_with("ranked-"))
        .map(|(p, _)| p.clone())
        .collect();
    let mut first: Vec<&String> = order.iter().take(16).collect();
    first.sort();
    let mut highest: Vec<&String> = ranked[2..].iter().collect();
    highest.sort();
    assert_eq!(first, highest, "asked in the order {order:?}");
    // The same under a running scheduler: the two left out of the sixteen places at the step
    // are told so (their last Event would otherwise stand), and bound at a later step.
    rt.block_on(async {
        delete_all(pods).await;
        create_ranked(pods, "waiting", workload).await;
    });
    allow_after.store(2000, Ordering::Relaxed);
    let mut scheduler = spawn_scheduler("schedule-waiting.log", &["--interval", "0.3"]);
    rt.block_on(async {
        let why = event_saying(
            admin,
            "waiting-1",
            &["duet: planned on policed", "not sent", "places"],
            Duration::from_secs(20),
        )
        .await;
        eprintln!("waiting-1 told: {why}");
        for k in [1, 2, 18] {
            let name = format!("waiting-{k}");
            let node = bound_node(pods, &name, Duration::from_secs(20)).await;
            assert_eq!(node.as_deref(), Some("policed"), "{}", scheduler.tail(20));
        }
    });
    scheduler.kill();
    // A pod tried again keeps its places while first tries wait for theirs: refused once, it is
    // sent again at the first step after its backoff (1 s), beside fourteen first tries in flight
    // (the twelve places of first tries taken) and four waiting. (Sent after the first tries, it
    // waited for them: 3 s at the least.)
    rt.block_on(async {
        delete_all(pods).await;
        create(
            pods,
            pod_spec("again-1", "duet", None, 1, "policed", &job("50")),
        )
        .await;
        for k in 1..=14 {
            let name = format!("queued-{k}");
            create(pods, pod_spec(&name, "duet", None, 1, "policed", &job("1"))).await;
        }
    });
    allow_after.store(3000, Ordering::Relaxed);
    let mut scheduler = spawn_scheduler("schedule-again.log", &["--interval", "0.3"]);
    rt.block_on(async {
        let started = Instant::now();
        while asked_about(&asked, "again-1").is_empty() {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "{}",
                scheduler.tail(20)
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        for k in 1..=4 {
            let name = format!("late-{k}");
            create(pods, pod_spec(&name, "duet", None, 1, "policed", &job("1"))).await;
        }
        let node = bound_node(pods, "again-1", Duration::from_secs(30)).await;
        assert_eq!(node.as_deref(), Some("policed"), "{}", scheduler.tail(20));
        let tries = asked_about(&asked, "again-1");
        let apart = tries[1] - tries[0];
        eprintln!(
            "again-1 tried again {:.1} s after its refusal",
            apart.as_secs_f64()
        );
        assert!(
            apart < Duration::from_millis(2500),
            "{}",
            scheduler.tail(20)
        );
    });
    scheduler.kill();
    allow_after.store(0, Ordering::Relaxed);
    // A pod planned beside one whose binding is then refused, on a GPU for two: it is bound
    // once the refusal is known, with no record of the refused pod (it was bound naming it,
    // with a predicted speed that assumed it).
    rt.block_on(async {
        delete_all(pods).await;
        create_node(
            admin,
            "duo",
            "Tesla-V100-SXM2-16GB",
            1,
            2,
            "time-slicing",
            &[("duet-e2e/pool", "duo")],
        )
        .await;
        refused_and_beside(pods, "refused-3", "beside-1", workload).await;
    });
    let mut scheduler = spawn_scheduler("schedule-beside.log", &["--interval", "0.3"]);
    rt.block_on(async {
        let node = bound_node(pods, "beside-1", Duration::from_secs(30)).await;
        assert_eq!(node.as_deref(), Some("duo"), "{}", scheduler.tail(20));
        let placed = pods.get("beside-1").await.expect("beside-1");
        let annotations = placed.metadata.annotations.unwrap_or_default();
        let beside = annotations.get("duet.io/beside");
        assert!(
            !beside.is_some_and(|b| b.contains("refused-3")),
            "{annotations:?}; {}",
            scheduler.tail(20)
        );
        assert!(!asked_about(&asked, "refused-3").is_empty());
        // The same where the refused pod's binding was sent at an earlier step: found beside it
        // by its node, it was no longer found there once refused, and was named.
        delete_all(pods).await;
        create(pods, pod_spec("slow-4", "duet", None, 1, "duo", &job("1"))).await;
        let sent = Instant::now();
        while asked_about(&asked, "slow-4").is_empty() {
            assert!(
                sent.elapsed() < Duration::from_secs(20),
                "{}",
                scheduler.tail(20)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        create(
            pods,
            pod_spec("beside-2", "duet", None, 1, "duo", &job("5")),
        )
        .await;
        let node = bound_node(pods, "beside-2", Duration::from_secs(30)).await;
        assert_eq!(node.as_deref(), Some("duo"), "{}", scheduler.tail(20));
        let placed = pods.get("beside-2").await.expect("beside-2");
        let annotations = placed.metadata.annotations.unwrap_or_default();
        assert!(
            !annotations
                .get("duet.io/beside")
                .is_some_and(|b| b.contains("slow-4")),
            "{annotations:?}; {}",
            scheduler.tail(20)
        );
    });
    scheduler.kill();
    // Under `--once`, a pod planned beside one whose binding is refused is told it is not tried
    // again (there is no next step).
    rt.block_on(async {
        delete_all(pods).await;
        refused_and_beside(pods, "refused-5", "beside-3", workload).await;
    });
    let out = schedule_once();
    assert!(!out.status.success());
    rt.block_on(async {
        let why = event_saying(
            admin,
            "beside-3",
            &["not sent", "a pod it was to join was not bound"],
            Duration::from_secs(10),
        )
        .await;
        assert!(
            why.contains("not tried again (duet schedule --once)"),
            "{why}; {}",
            String::from_utf8_lossy(&out.stderr)
        );
    });
    rt.block_on(async {
        stop(admin).await;
        delete_all(pods).await;
    });
}
