//! A real Kubernetes control plane for the end-to-end tests: etcd, kube-apiserver and
//! kube-scheduler built by `scripts/kube-testbed.sh` (no kubelet: Node objects created through
//! the API stand in for GPU nodes), with certificates from openssl, tokens for an administrator,
//! the kube-scheduler and duet's service account, and kubeconfigs for each.
#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Node};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::support::free_port;

/// The Kubernetes release the programs are built at (tools/kube-testbed/go.mod).
pub const RELEASE: &str = "v1.37.2";

/// The user duet's commands act as: the service account of deploy/k8s/kube-rbac.yaml, so that
/// its ClusterRoleBinding applies as it would in a cluster.
pub const DUET_USER: &str = "system:serviceaccount:default:duet-scheduler";

/// A user the tests bind to an older role of duet's (`kubeconfig("older")`).
pub const OLDER_USER: &str = "duet-older";

/// The folder of the programs: `DUET_KUBE_BIN`, else where scripts/kube-testbed.sh builds them;
/// `None` where they are not built: the test skips, or fails where `DUET_KUBE_BIN` names the
/// folder (scripts/test.sh does) or under `CI=true`.
pub fn programs() -> Option<PathBuf> {
    let named = std::env::var_os("DUET_KUBE_BIN");
    let dir = named.clone().map_or_else(
        || {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                .join(".cache/duet-kube")
                .join(RELEASE)
                .join("bin")
        },
        PathBuf::from,
    );
    if ["etcd", "kube-apiserver", "kube-scheduler"]
        .iter()
        .all(|p| dir.join(p).is_file())
    {
        return Some(dir);
    }
    let why = format!(
        "no Kubernetes programs in {} (scripts/kube-testbed.sh builds them)",
        dir.display()
    );
    assert!(named.is_none(), "DUET_KUBE_BIN is set and {why}");
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "CI=true and {why}"
    );
    eprintln!("skipped: {why}");
    None
}

/// A process whose output goes to a file in the control plane's folder.
pub struct Process {
    pub child: Child,
    pub log: PathBuf,
}

impl Process {
    pub fn spawn(command: &mut Command, log: PathBuf) -> Process {
        let out = fs::File::create(&log).expect("log file");
        let err = out.try_clone().expect("log file");
        let child = command
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .stdin(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{command:?}: {e}"));
        Process { child, log }
    }

    /// The last `lines` lines of its output.
    pub fn tail(&self, lines: usize) -> String {
        let text = fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    pub fn output(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Whether it is still running.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

fn run(dir: &Path, args: &[&str]) {
    let out = Command::new(args[0])
        .args(&args[1..])
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", args[0]));
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// etcd and kube-apiserver, running; the kube-scheduler is started by the test with its
/// configuration.
pub struct ControlPlane {
    pub dir: tempfile::TempDir,
    pub bin: PathBuf,
    pub etcd: Process,
    pub apiserver: Process,
    pub port: u16,
    pub url: String,
    apiserver_args: Vec<String>,
}

impl ControlPlane {
    /// Starts etcd and kube-apiserver; returns once the API server is ready. `None` where the
    /// programs are not built (see `programs`).
    pub fn start() -> Option<ControlPlane> {
        let bin = programs()?;
        let dir = tempfile::tempdir().expect("control plane folder");
        let d = dir.path();
        fs::write(
            d.join("san.ext"),
            "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
        )
        .expect("ext");
        run(
            d,
            &[
                "openssl",
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                "ca.key",
                "-out",
                "ca.crt",
                "-days",
                "2",
                "-subj",
                "/CN=duet-e2e-ca",
            ],
        );
        run(
            d,
            &[
                "openssl",
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                "server.key",
                "-out",
                "server.csr",
                "-subj",
                "/CN=kube-apiserver",
            ],
        );
        run(
            d,
            &[
                "openssl",
                "x509",
                "-req",
                "-in",
                "server.csr",
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                "server.crt",
                "-days",
                "2",
                "-extfile",
                "san.ext",
            ],
        );
        run(d, &["openssl", "genrsa", "-out", "sa.key", "2048"]);
        fs::write(
            d.join("tokens.csv"),
            format!(
                "admin-token,admin,admin,\"system:masters\"\n\
                 scheduler-token,system:kube-scheduler,kube-scheduler,\n\
                 duet-token,{DUET_USER},duet,\"system:serviceaccounts,system:serviceaccounts:default\"\n\
                 older-token,{OLDER_USER},duet-older,\n"
            ),
        )
        .expect("tokens");
        let (client_port, peer_port, port) = (free_port(), free_port(), free_port());
        let etcd_url = format!("http://127.0.0.1:{client_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        let etcd = Process::spawn(
            Command::new(bin.join("etcd"))
                .arg("--data-dir")
                .arg(d.join("etcd"))
                .args(["--name", "e2e"])
                .args(["--listen-client-urls", &etcd_url])
                .args(["--advertise-client-urls", &etcd_url])
                .args(["--listen-peer-urls", &peer_url])
                .args(["--initial-advertise-peer-urls", &peer_url])
                .args(["--initial-cluster", &format!("e2e={peer_url}")])
                .args(["--unsafe-no-fsync", "--log-level", "warn"]),
            d.join("etcd.log"),
        );
        let path = |f: &str| d.join(f).to_string_lossy().into_owned();
        let apiserver_args = vec![
            format!("--etcd-servers={etcd_url}"),
            "--bind-address=127.0.0.1".into(),
            "--advertise-address=127.0.0.1".into(),
            format!("--secure-port={port}"),
            format!("--tls-cert-file={}", path("server.crt")),
            format!("--tls-private-key-file={}", path("server.key")),
            format!("--client-ca-file={}", path("ca.crt")),
            format!("--token-auth-file={}", path("tokens.csv")),
            format!("--service-account-key-file={}", path("sa.key")),
            format!("--service-account-signing-key-file={}", path("sa.key")),
            "--service-account-issuer=https://kubernetes.default.svc".into(),
            "--service-cluster-ip-range=10.0.0.0/24".into(),
            "--authorization-mode=RBAC".into(),
            // No controller manager runs: nothing creates service accounts for pods, and new
            // nodes would keep the not-ready taint.
            "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition".into(),
            "--enable-priority-and-fairness=false".into(),
            // The kubernetes Service's endpoints would name a loopback address, which it refuses.
            "--endpoint-reconciler-type=none".into(),
            "--profiling=false".into(),
        ];
        let apiserver = Process::spawn(
            Command::new(bin.join("kube-apiserver")).args(&apiserver_args),
            d.join("kube-apiserver.log"),
        );
        let url = format!("https://127.0.0.1:{port}");
        let plane = ControlPlane {
            dir,
            bin,
            etcd,
            apiserver,
            port,
            url,
            apiserver_args,
        };
        for (name, token) in [
            ("admin", "admin-token"),
            ("scheduler", "scheduler-token"),
            ("duet", "duet-token"),
            ("older", "older-token"),
        ] {
            plane.write_kubeconfig(name, token);
        }
        let mut plane = plane;
        plane.wait_ready(Duration::from_secs(120));
        Some(plane)
    }

    fn write_kubeconfig(&self, name: &str, token: &str) {
        let ca = self.dir.path().join("ca.crt");
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: e2e\n  cluster:\n    server: {}\n    certificate-authority: {}\nusers:\n- name: {name}\n  user:\n    token: {token}\ncontexts:\n- name: e2e\n  context:\n    cluster: e2e\n    user: {name}\ncurrent-context: e2e\n",
            self.url,
            ca.display()
        );
        fs::write(self.kubeconfig(name), text).expect("kubeconfig");
    }

    /// The kubeconfig of `admin`, `scheduler`, `duet` or `older`.
    pub fn kubeconfig(&self, name: &str) -> PathBuf {
        self.dir.path().join(format!("{name}.kubeconfig"))
    }

    /// Waits for the API server to answer (through the admin's client).
    pub fn wait_ready(&mut self, within: Duration) {
        let rt = runtime();
        let deadline = Instant::now() + within;
        loop {
            // Answering, with its bootstrap done: the default namespace and the roles exist.
            let ok = rt.block_on(async {
                let Ok(c) = self.client("admin").await else {
                    return false;
                };
                Api::<Namespace>::all(c.clone())
                    .get("default")
                    .await
                    .is_ok()
                    && Api::<ClusterRole>::all(c.clone())
                        .get("system:kube-scheduler")
                        .await
                        .is_ok()
                    && Api::<ClusterRoleBinding>::all(c)
                        .get("system:kube-scheduler")
                        .await
                        .is_ok()
            });
            if ok {
                return;
            }
            assert!(
                Instant::now() < deadline && self.apiserver.running() && self.etcd.running(),
                "kube-apiserver did not become ready:\n{}\netcd:\n{}",
                self.apiserver.tail(30),
                self.etcd.tail(10)
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// A client as `name`.
    pub async fn client(&self, name: &str) -> anyhow::Result<Client> {
        let kubeconfig = kube::config::Kubeconfig::read_from(self.kubeconfig(name))?;
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
        Ok(Client::try_from(config)?)
    }

    /// Stops the API server (etcd keeps the cluster).
    pub fn stop_apiserver(&mut self) {
        self.apiserver.kill();
    }

    /// Starts the API server again on the same port and data.
    pub fn restart_apiserver(&mut self) {
        self.apiserver = Process::spawn(
            Command::new(self.bin.join("kube-apiserver")).args(&self.apiserver_args),
            self.dir.path().join("kube-apiserver-2.log"),
        );
        self.wait_ready(Duration::from_secs(120));
    }

    /// The stock kube-scheduler with the KubeSchedulerConfiguration `config` (YAML), which
    /// must name `clientConnection.kubeconfig`.
    pub fn start_scheduler(&self, config: &str) -> Process {
        let path = self.dir.path().join("scheduler-config.yaml");
        fs::write(&path, config).expect("scheduler config");
        Process::spawn(
            Command::new(self.bin.join("kube-scheduler"))
                .arg("--config")
                .arg(&path)
                .args(["--secure-port=0", "-v=2"]),
            self.dir.path().join("kube-scheduler.log"),
        )
    }
}

/// A runtime for the tests' API calls.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// Creates a GPU node: `gpus` physical GPUs of `product`, shared `replicas` ways under
/// `strategy`, labelled `labels`; the API server's status holds its capacity (no kubelet).
pub async fn create_node(
    client: &Client,
    name: &str,
    product: &str,
    gpus: u32,
    replicas: u32,
    strategy: &str,
    labels: &[(&str, &str)],
) {
    let nodes: Api<Node> = Api::all(client.clone());
    let mut all_labels = serde_json::Map::new();
    for (k, v) in [
        ("kubernetes.io/hostname", name),
        ("nvidia.com/gpu.product", product),
        ("nvidia.com/gpu.sharing-strategy", strategy),
    ] {
        all_labels.insert(k.into(), json!(v));
    }
    all_labels.insert("nvidia.com/gpu.count".into(), json!(gpus.to_string()));
    all_labels.insert(
        "nvidia.com/gpu.replicas".into(),
        json!(replicas.to_string()),
    );
    for (k, v) in labels {
        all_labels.insert((*k).into(), json!(v));
    }
    let node: Node = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": all_labels},
        "spec": {}
    }))
    .expect("node");
    nodes
        .create(&PostParams::default(), &node)
        .await
        .unwrap_or_else(|e| panic!("node {name}: {e}"));
    let capacity = json!({
        "cpu": "64", "memory": "512Gi", "pods": "110",
        "nvidia.com/gpu": (gpus * replicas).to_string()
    });
    let status = json!({"status": {
        "capacity": capacity, "allocatable": capacity,
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                        "message": "stands in for a GPU node in duet's tests"}]
    }});
    nodes
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap_or_else(|e| panic!("node {name} status: {e}"));
}
