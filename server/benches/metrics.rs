//! What `/metrics` costs: recording one request, one prediction's pairs and one observation
//! (the prediction path pays the first two), and rendering a populated scrape (20 routes by 3
//! statuses, 4 devices by 3 modes observed, 8 drift windows).
//!
//! `cargo bench -p duet-server --bench metrics --profile dev`

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use duet_core::dataset::Mode;
use duet_server::drift::{JobScore, Tally};
use duet_server::metrics::{Format, Metrics, Scrape};

const ROUTES: [&str; 20] = [
    "/v1/predict",
    "/v1/workloads",
    "/v1/workloads/{id}",
    "/v1/models",
    "/v1/models/reload",
    "/v1/observations",
    "/v1/drift",
    "/v1/limits",
    "/healthz",
    "/readyz",
    "/metrics",
    "/openapi.json",
    "/v2",
    "/v2/health/live",
    "/v2/health/ready",
    "/v2/models/{name}",
    "/v2/models/{name}/ready",
    "/v2/models/{name}/infer",
    "/v2/models/{name}/versions/{version}/infer",
    "unmatched",
];
const STATUSES: [u16; 3] = [200, 422, 503];
const DEVICES: [&str; 4] = ["k80", "p100", "v100", "other"];
const MODES: [&str; 3] = ["solo", "space", "mps"];

fn scores() -> [JobScore; 2] {
    [
        JobScore {
            ape: 0.12,
            covered: true,
            bias: 0.05,
        },
        JobScore {
            ape: 0.3,
            covered: false,
            bias: -0.2,
        },
    ]
}

fn populated() -> (Metrics, Vec<(duet_server::drift::Group, Tally)>) {
    let metrics = Metrics::default();
    for (i, route) in ROUTES.iter().enumerate() {
        for status in STATUSES {
            metrics.request(route, status, 0.0001 * (i as f64 + 1.0));
        }
    }
    metrics.pairs(100);
    let mut drift = Vec::new();
    for gpu in DEVICES {
        for mode in MODES {
            metrics.observed(gpu, mode, &scores());
        }
        for mode in [Mode::Space, Mode::Mps] {
            let mut tally = Tally::default();
            for s in scores() {
                tally.add(s, 1.0e9);
            }
            drift.push(((gpu.to_string(), mode), tally));
        }
    }
    (metrics, drift)
}

fn bench(c: &mut Criterion) {
    let (metrics, drift) = populated();
    let scrape = Scrape {
        model_version: "0.1.0+4f2c9a1b".into(),
        engine: "burn",
        workloads: 26,
        drift,
        store: "sqlite",
        last_sync_age_s: Some(0.25),
        ..Scrape::default()
    };
    c.bench_function("metrics_record_request", |b| {
        b.iter(|| metrics.request(black_box("/v1/predict"), black_box(200), black_box(0.0042)));
    });
    c.bench_function("metrics_record_pairs", |b| {
        b.iter(|| metrics.pairs(black_box(10_000)));
    });
    let s = scores();
    c.bench_function("metrics_record_observation", |b| {
        b.iter(|| metrics.observed(black_box("v100"), black_box("space"), black_box(&s)));
    });
    // The scrape's snapshot is cloned in: the server takes it from its state each time.
    c.bench_function("metrics_render_text", |b| {
        b.iter(|| black_box(metrics.render(black_box(scrape.clone()), Format::Text)));
    });
    c.bench_function("metrics_render_openmetrics", |b| {
        b.iter(|| black_box(metrics.render(black_box(scrape.clone()), Format::OpenMetrics)));
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
