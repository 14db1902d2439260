//! The extender and `duet schedule` against a running duet server, through HTTP as a cluster
//! runs them (BENCHMARKS.md, "duet on Kubernetes"):
//! - `prioritize` calls for one pending pod over 1,000 nodes of 8 GPUs, half of them running a
//!   pod, sent one after another to the real extender routes on loopback, its view of the
//!   cluster already built (what a call costs from the cache): p50, p99, max;
//! - a `duet schedule` step over 200 pending pods on 512 GPUs with the server predicting.
//!
//! `cargo run --release -p duet-kube --example extender_load -- http://127.0.0.1:8080 500`
//! (a server on the shipped model: `scripts/serve.sh`, or `duet serve --engine onnx`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use duet_kube::extender::{self, Extender};
use duet_kube::known::Known;
use duet_kube::schedule;
use duet_kube::watch::View;
use duet_scheduler::client::PredictClient;
use duet_scheduler::predictor::HttpPredictor;
use duet_scheduler::pricing::PricingConfig;

#[path = "../benches/synthetic.rs"]
mod synthetic;

fn quantiles(mut ms: Vec<f64>) -> String {
    ms.sort_by(f64::total_cmp);
    let at = |q: f64| {
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss
        )]
        let i = ((ms.len() as f64 * q).ceil() as usize).clamp(1, ms.len()) - 1;
        ms[i]
    };
    format!(
        "p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms over {}",
        at(0.5),
        at(0.99),
        at(1.0),
        ms.len()
    )
}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let server = args
        .next()
        .unwrap_or_else(|| "http://127.0.0.1:8080".into());
    let requests: usize = args.next().map_or(Ok(500), |a| a.parse())?;
    let ids = synthetic::workloads();
    let client = PredictClient::new(&server, None, Duration::from_secs(10));
    let known = Known::fetch(&client)?;

    // The extender's routes on loopback over a view of 1,000 nodes.
    let view = View::new(synthetic::map());
    *view.write() = synthetic::cluster(1000, &ids);
    let x = Arc::new(Extender::new(view, client.clone(), None));
    x.set_known(known.clone());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))?;
    let addr = listener.local_addr()?;
    runtime.spawn(async move {
        let limits = duet_kube::listen::Limits::default();
        let guards = x.metrics.guards.clone();
        duet_kube::listen::serve(
            listener,
            extender::router(x, &limits),
            &limits,
            &guards,
            std::future::pending(),
        )
        .await;
    });
    let pod = synthetic::pending(1, &ids).remove(0);
    let names: Vec<String> = (0..1000).map(|n| format!("node-{n:04}")).collect();
    let body = serde_json::to_string(&serde_json::json!({
        "Pod": {
            "metadata": {"name": pod.name, "namespace": "bench", "uid": pod.uid,
                "annotations": {"duet.io/workload": ids[0], "duet.io/objective": "0.6"}},
            "spec": {"containers": [{"name": "job", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
        },
        "NodeNames": names,
    }))?;
    let agent = ureq::AgentBuilder::new().build();
    let url = format!("http://{addr}/prioritize");
    let mut ms = Vec::with_capacity(requests);
    for i in 0..requests + 20 {
        let t = Instant::now();
        let answer = agent
            .post(&url)
            .set("Content-Type", "application/json")
            .send_string(&body)?
            .into_string()?;
        if i >= 20 {
            ms.push(t.elapsed().as_secs_f64() * 1e3);
        } else if i == 0 {
            let scores: Vec<serde_json::Value> = serde_json::from_str(&answer)?;
            assert_eq!(scores.len(), 1000, "{answer}");
        }
    }
    println!(
        "extender prioritize, 1,000 nodes of 8 GPUs, half running a pod: {}",
        quantiles(ms)
    );

    let cluster = synthetic::cluster(64, &ids);
    let pending = synthetic::pending(200, &ids);
    let map = synthetic::map();
    let mut predictor = HttpPredictor::from_client(client);
    let mut ms = Vec::new();
    let mut bound = 0;
    for i in 0..23 {
        let t = Instant::now();
        let plan = schedule::plan(
            &cluster,
            &map,
            &known,
            &pending,
            &Default::default(),
            &mut predictor,
            &PricingConfig::default(),
        )?;
        if i >= 3 {
            ms.push(t.elapsed().as_secs_f64() * 1e3);
        }
        bound = plan.bound.len();
    }
    println!(
        "duet schedule step, 200 pending pods on 512 GPUs ({bound} bound): {}",
        quantiles(ms)
    );
    Ok(())
}
