//! Load against running `duet serve` replicas (BENCHMARKS.md, "Shared registry"):
//!
//!     registry_load predict URL SECONDS CONNECTIONS
//!         single-pair /v1/predict requests by id, back to back on each connection:
//!         throughput and latency percentiles
//!     registry_load writes TOKEN N CONNECTIONS URL...
//!         N registrations spread over the replicas: registrations per second
//!     registry_load propagation TOKEN N URL_A URL_B
//!         N times: register on A, then ask B until it predicts with it: the delay from A's
//!         acknowledgement to B's first success, percentiles
//!     registry_load observations TOKEN N BATCH CONNECTIONS URL...
//!         N co-location observations in batches of BATCH, spread over the replicas:
//!         observations stored per second, and each batch's latency
//!
//! A plain blocking client per connection (ureq); run it on the same machine as the servers and
//! compare stores under the same command.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

fn agent() -> ureq::Agent {
    ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(30))
        .build()
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn report(what: &str, mut ms: Vec<f64>, elapsed: Duration) {
    ms.sort_by(f64::total_cmp);
    #[allow(clippy::cast_precision_loss)]
    let rate = ms.len() as f64 / elapsed.as_secs_f64();
    println!(
        "{what}: {} in {:.1} s = {rate:.0}/s; latency ms p50 {:.3} p90 {:.3} p99 {:.3} max {:.3}",
        ms.len(),
        elapsed.as_secs_f64(),
        percentile(&ms, 0.5),
        percentile(&ms, 0.9),
        percentile(&ms, 0.99),
        ms.last().copied().unwrap_or(f64::NAN)
    );
}

fn profile(i: usize) -> Value {
    let models = [
        "A3C",
        "CycleGAN",
        "LM",
        "ResNet-18",
        "ResNet-50",
        "Transformer",
    ];
    #[allow(clippy::cast_precision_loss)]
    let solo = 1.0 + (i % 97) as f64;
    json!({"kind": "infer", "profiles": {"v100": {
        "solo_throughput": solo, "model": models[i % models.len()], "batch_size": 32}}})
}

/// Runs `connection(c)` for each of `connections` on a thread of its own; returns every latency
/// they measured and the wall time of the whole.
fn on_connections(
    connections: usize,
    connection: impl Fn(usize) -> Vec<f64> + Sync,
) -> (Vec<f64>, Duration) {
    let started = Instant::now();
    let all = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..connections)
            .map(|c| {
                let connection = &connection;
                scope.spawn(move || connection(c))
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("a connection"))
            .collect()
    });
    (all, started.elapsed())
}

fn predict(url: &str, seconds: f64, connections: usize) {
    let body = json!({"gpu": "v100", "pairs": [
        {"a": {"workload": "resnet-50-bs64"}, "b": {"workload": "transformer-bs32"}, "mode": "space"}]});
    let until = Instant::now() + Duration::from_secs_f64(seconds);
    let (all, elapsed) = on_connections(connections, |_| {
        let http = agent();
        let mut ms = Vec::new();
        while Instant::now() < until {
            let t = Instant::now();
            let r = http.post(&format!("{url}/v1/predict")).send_json(&body);
            assert!(r.is_ok_and(|r| r.status() == 200), "a prediction failed");
            ms.push(t.elapsed().as_secs_f64() * 1e3);
        }
        ms
    });
    report(
        &format!("predict 1 pair, {connections} connections"),
        all,
        elapsed,
    );
}

fn writes(token: &str, n: usize, connections: usize, urls: &[String]) {
    let (all, elapsed) = on_connections(connections, |c| {
        let http = agent();
        let mut ms = Vec::new();
        for i in (c..n).step_by(connections) {
            let url = &urls[i % urls.len()];
            let t = Instant::now();
            let r = http
                .put(&format!("{url}/v1/workloads/load-{i}"))
                .set("Authorization", &format!("Bearer {token}"))
                .send_json(profile(i));
            assert!(r.is_ok(), "a registration failed: {r:?}");
            ms.push(t.elapsed().as_secs_f64() * 1e3);
        }
        ms
    });
    report(
        &format!(
            "registrations over {} replicas, {connections} connections",
            urls.len()
        ),
        all,
        elapsed,
    );
}

fn propagation(token: &str, n: usize, a: &str, b: &str) {
    let http = agent();
    let mut delays = Vec::with_capacity(n);
    let started = Instant::now();
    for i in 0..n {
        let id = format!("prop-{i}");
        let r = http
            .put(&format!("{a}/v1/workloads/{id}"))
            .set("Authorization", &format!("Bearer {token}"))
            .send_json(profile(i));
        assert!(r.is_ok(), "a registration failed: {r:?}");
        let acknowledged = Instant::now();
        let body = json!({"gpu": "v100", "pairs": [
            {"a": {"workload": id}, "b": {"workload": "a3c"}, "mode": "space"}]});
        loop {
            match http.post(&format!("{b}/v1/predict")).send_json(&body) {
                Ok(r) if r.status() == 200 => break,
                Err(ureq::Error::Status(404, _)) => {}
                other => panic!("replica B: {other:?}"),
            }
            assert!(
                acknowledged.elapsed() < Duration::from_secs(10),
                "{id} never reached replica B"
            );
        }
        delays.push(acknowledged.elapsed().as_secs_f64() * 1e3);
    }
    report(
        "propagation A -> B (delay from acknowledgement to first prediction)",
        delays,
        started.elapsed(),
    );
}

fn observations(token: &str, n: usize, batch: usize, connections: usize, urls: &[String]) {
    let pairs = [
        ("resnet-50-bs64", "transformer-bs32"),
        ("a3c", "cyclegan"),
        ("lm-bs20", "resnet-18-bs64"),
    ];
    let batches = n.div_ceil(batch);
    let (all, elapsed) = on_connections(connections, |c| {
        let http = agent();
        let mut ms = Vec::new();
        for k in (c..batches).step_by(connections) {
            let url = &urls[k % urls.len()];
            let items: Vec<Value> = (k * batch..((k + 1) * batch).min(n))
                .map(|i| {
                    let (a, b) = pairs[i % pairs.len()];
                    json!({"id": format!("obs-{}-{i}", std::process::id()), "gpu": "v100",
                           "mode": "space", "a": {"workload": a}, "b": {"workload": b},
                           "throughput_a": 5.0 + (i % 7) as f64, "throughput_b": 3.0,
                           "solo_throughput_a": 12.0, "solo_throughput_b": 9.0,
                           "window_s": 10.0, "observed_at": "2026-12-01T12:00:00Z"})
                })
                .collect();
            let t = Instant::now();
            let r = http
                .post(&format!("{url}/v1/observations"))
                .set("Authorization", &format!("Bearer {token}"))
                .send_json(json!({"observations": items}));
            assert!(r.is_ok_and(|r| r.status() == 200), "a batch was refused");
            ms.push(t.elapsed().as_secs_f64() * 1e3);
        }
        ms
    });
    #[allow(clippy::cast_precision_loss)]
    let rate = n as f64 / elapsed.as_secs_f64();
    report(
        &format!(
            "observation batches of {batch} over {} replicas, {connections} connections \
             ({rate:.0} observations/s)",
            urls.len()
        ),
        all,
        elapsed,
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let number = |i: usize, what: &str| -> usize {
        args.get(i)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{what}: a number"))
    };
    match args.first().map(String::as_str) {
        Some("predict") if args.len() == 4 => {
            let seconds: f64 = args[2].parse().expect("SECONDS: a number");
            predict(&args[1], seconds, number(3, "CONNECTIONS"));
        }
        Some("writes") if args.len() >= 5 => writes(
            &args[1],
            number(2, "N"),
            number(3, "CONNECTIONS"),
            &args[4..],
        ),
        Some("propagation") if args.len() == 5 => {
            propagation(&args[1], number(2, "N"), &args[3], &args[4]);
        }
        Some("observations") if args.len() >= 6 => observations(
            &args[1],
            number(2, "N"),
            number(3, "BATCH"),
            number(4, "CONNECTIONS"),
            &args[5..],
        ),
        _ => {
            eprintln!(
                "usage: registry_load predict URL SECONDS CONNECTIONS\n       \
                 registry_load writes TOKEN N CONNECTIONS URL...\n       \
                 registry_load propagation TOKEN N URL_A URL_B\n       \
                 registry_load observations TOKEN N BATCH CONNECTIONS URL..."
            );
            std::process::exit(2);
        }
    }
}
