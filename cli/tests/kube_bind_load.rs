//! A benchmark, not a test (ignored): how fast `duet schedule` binds a backlog when every binding
//! is slow, as it is behind an admission webhook (a cluster's policy engine) that takes D ms to
//! allow each. A real etcd and kube-apiserver (scripts/kube-testbed.sh), `duet serve` on the
//! shipped model, N one-GPU pods pending on N free GPUs (V100 nodes of 8), then `duet schedule
//! --interval 0.2` started; the figure is the time from the webhook's first question to the
//! last pod bound. Run:
//!   cargo test -p duet-cli --test kube_bind_load -- --ignored --nocapture
//! `DUET_BIND_LOAD="N D1 D2 ..."` (default `200 0 50 200`) sets the pods and the delays (ms);
//! `DUET_SCHEDULE_BIN` runs another build of duet as the scheduler (an older commit's, to
//! compare).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};

mod support;
use support::Server;

#[path = "support/kube.rs"]
mod plane;
use plane::{ControlPlane, Process, create_node, runtime};

#[path = "support/kube_steps.rs"]
mod steps;
use steps::{create, delete_all, pod_spec};

#[path = "support/kube_webhook.rs"]
mod webhook;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[test]
#[ignore = "a benchmark: run with --ignored --nocapture"]
fn bindings_behind_a_slow_webhook() {
    let Some(plane) = ControlPlane::start() else {
        eprintln!("no control plane programs (scripts/kube-testbed.sh)");
        return;
    };
    let settings = std::env::var("DUET_BIND_LOAD").unwrap_or_else(|_| "200 0 50 200".into());
    let numbers: Vec<u64> = settings
        .split_whitespace()
        .map(|n| n.parse().expect("DUET_BIND_LOAD: numbers"))
        .collect();
    let (pods_n, delays) = numbers.split_first().expect("DUET_BIND_LOAD: N first");
    let pods_n = usize::try_from(*pods_n).expect("N");
    let bin = std::env::var_os("DUET_SCHEDULE_BIN")
        .map_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_duet")), PathBuf::from);
    let rt = runtime();
    let admin = rt.block_on(plane.client("admin")).expect("admin client");
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
    let server = Server::start_with(&[]);
    let hook = rt.block_on(async {
        for k in 0..pods_n.div_ceil(8) {
            let name = format!("load-{k}");
            let pool = [("duet-e2e/pool", "load")];
            create_node(
                &admin,
                &name,
                "Tesla-V100-SXM2-16GB",
                8,
                1,
                "time-slicing",
                &pool,
            )
            .await;
        }
        webhook::start(&admin, plane.dir.path()).await
    });
    let workload = [("duet.io/workload", "resnet-18-bs16")];
    println!("| pods | webhook delay (ms) | first question to last bound (s) | bindings/s |");
    println!("|---|---|---|---|");
    for &delay in delays {
        hook.allow_after.store(delay, Ordering::Relaxed);
        rt.block_on(async {
            for k in 0..pods_n {
                let pod = pod_spec(&format!("p-{k}"), "duet", None, 1, "load", &workload);
                create(&pods, pod).await;
            }
        });
        let asked_before = hook.asked.lock().expect("asked").len();
        let mut command = Command::new(&bin);
        command
            .args(["schedule", "--predictor", &server.base, "--interval", "0.2"])
            .arg("--devices")
            .arg(root().join("deploy/k8s/devices.toml"))
            .arg("--kubeconfig")
            .arg(plane.kubeconfig("admin"))
            .env("RUST_LOG", "warn");
        let mut scheduler = Process::spawn(&mut command, plane.dir.path().join("load.log"));
        let deadline = Instant::now() + Duration::from_secs(600);
        let done = rt.block_on(async {
            loop {
                let list = pods.list(&ListParams::default()).await.expect("pods");
                let bound = list
                    .items
                    .iter()
                    .filter(|p| p.spec.as_ref().is_some_and(|s| s.node_name.is_some()))
                    .count();
                if bound == pods_n {
                    return Some(Instant::now());
                }
                if Instant::now() > deadline {
                    return None;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        scheduler.kill();
        let done =
            done.unwrap_or_else(|| panic!("not all bound in 600 s:\n{}", scheduler.tail(20)));
        let first = hook.asked.lock().expect("asked")[asked_before].1;
        let seconds = done.duration_since(first).as_secs_f64();
        #[allow(clippy::cast_precision_loss)]
        let rate = pods_n as f64 / seconds;
        println!("| {pods_n} | {delay} | {seconds:.2} | {rate:.0} |");
        rt.block_on(delete_all(&pods));
    }
}
