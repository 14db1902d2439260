//! The command line of duet on Kubernetes: `duet extender` and `duet schedule`.

use std::path::PathBuf;

/// What both Kubernetes commands need: the cluster, the mapping and the duet server.
#[derive(Debug, clap::Args)]
pub struct KubeArgs {
    /// The duet server that predicts (`duet serve`).
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    pub predictor: String,
    /// File holding the bearer token of a server that protects reads (also `DUET_TOKEN`).
    #[arg(long)]
    pub token_file: Option<PathBuf>,
    /// The mapping file: node labels to duet's device names and ways of sharing (README, "duet
    /// on Kubernetes"; deploy/k8s/devices.toml is the shipped one).
    #[arg(long, default_value = "deploy/k8s/devices.toml")]
    pub devices: PathBuf,
    /// The kubeconfig to reach the API server (default: KUBECONFIG, ~/.kube/config, or the
    /// pod's service account).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// How long one /v1/predict call may take, seconds (at most 3600).
    #[arg(long, default_value_t = 2.0)]
    pub predict_timeout: f64,
    /// Pods one GPU may hold (2 to 8): above 2, a pod may join a GPU whose two or more pods
    /// share it under one mode, where the model predicts the group gains (the device plugin's
    /// replicas must allow as many).
    #[arg(long, default_value_t = 2)]
    pub gpu_jobs: usize,
}

#[derive(Debug, clap::Args)]
pub struct ExtenderArgs {
    #[command(flatten)]
    pub kube: KubeArgs,
    /// Address the extender listens on (its urlPrefix in the KubeSchedulerConfiguration).
    #[arg(long, default_value = "127.0.0.1:8090")]
    pub listen: String,
    /// Largest extender call body, bytes (node lists are large without nodeCacheCapable). A
    /// larger declared length is answered 413 before the body is read.
    #[arg(long, default_value_t = 64 << 20)]
    pub max_body_bytes: usize,
    /// Bytes of call bodies held at once, every connection together (default: four
    /// --max-body-bytes bodies); a body that would pass it is answered 503.
    #[arg(long)]
    pub max_inflight_body_bytes: Option<usize>,
    /// Nodes one call may name (NodeNames or Nodes' items); more are refused (413) where they
    /// are read. The default is three times Kubernetes' documented limit of 5,000 nodes.
    #[arg(long, default_value_t = duet_kube::listen::MAX_NODES)]
    pub max_nodes: usize,
    /// Seconds a connection has to send a request's whole header, from its opening or the end
    /// of its previous answer (an idle keep-alive connection is closed then too).
    #[arg(long, default_value_t = 5.0)]
    pub header_timeout: f64,
    /// Seconds a call's body may pause before it is cut off (408).
    #[arg(long, default_value_t = 5.0)]
    pub idle_timeout: f64,
    /// Client connections open at once; more are closed on arrival, except probes (health,
    /// readiness, metrics), which have a reserve of 16 beyond it.
    #[arg(long, default_value_t = 256)]
    pub max_connections: usize,
    /// Seconds a call may take before it is answered 503 (at most 3600): the kube-scheduler's
    /// own default httpTimeout, after which it no longer waits for the answer.
    #[arg(long, default_value_t = 5.0)]
    pub request_timeout: f64,
    /// Binds only pods whose schedulerName is this (several: repeat the flag or separate them
    /// with commas); a /bind of another scheduler's pod is refused in its Error. None given: any
    /// pod.
    #[arg(long = "bind-scheduler", value_name = "NAME", value_delimiter = ',')]
    pub bind_schedulers: Vec<String>,
}

#[derive(Debug, clap::Args)]
pub struct ScheduleArgs {
    #[command(flatten)]
    pub kube: KubeArgs,
    /// The schedulerName of the pods it schedules.
    #[arg(long, default_value = "duet")]
    pub name: String,
    /// Seconds between looks at the pending pods (at most 3600).
    #[arg(long, default_value_t = 1.0)]
    pub interval: f64,
    /// One scheduling step (rounds until none places a pod), then exit.
    #[arg(long)]
    pub once: bool,
    /// Also plan each step one pod at a time in arrival order and print the predicted weighted
    /// throughput of both (costs a second planning).
    #[arg(long)]
    pub compare: bool,
    /// Serve /healthz, /readyz and /metrics on this address.
    #[arg(long)]
    pub listen: Option<String>,
    /// Waiting pods a round weighs at most (1 to 65536). Where more wait, the places are shared
    /// among namespaces in turn, and within a namespace pods weighed and left waiting step aside
    /// for those weighed fewer times.
    #[arg(long, default_value_t = 1024)]
    pub window: usize,
}
