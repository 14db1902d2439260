//! What one registry write costs as the registry grows: a workload registered (in memory) into
//! a registry already holding N client workloads, for N from 1,000 to 100,000. The write builds
//! the next registry aside and swaps it in; a copy that cost every entry would make this grow
//! with N (and registering N workloads cost N^2).
//!
//! `cargo bench -p duet-server --bench registry --profile dev`

use std::collections::BTreeMap;
use std::path::Path;

use criterion::{Criterion, criterion_group, criterion_main};
use duet_core::api::{FeatureInput, Features, WorkloadBody};
use duet_server::{AppState, Config};

fn body(solo: f64) -> WorkloadBody {
    WorkloadBody {
        kind: None,
        profiles: BTreeMap::from([(
            "v100".to_string(),
            Features::from([
                ("solo_throughput".into(), FeatureInput::Number(solo)),
                ("model".into(), FeatureInput::Text("ResNet-50".into())),
                ("batch_size".into(), FeatureInput::Number(64.0)),
            ]),
        )]),
    }
}

fn bench(c: &mut Criterion) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/default");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let mut group = c.benchmark_group("registry_write");
    group.sample_size(20);
    let mut registered = 0usize;
    let state = AppState::new(Config {
        max_workloads: 1_000_000,
        ..Config::new(dir)
    })
    .expect("state");
    runtime
        .block_on(state.start())
        .expect("the default model loads");
    for n in [1_000usize, 10_000, 100_000] {
        runtime.block_on(async {
            while registered < n {
                state
                    .put_workload(&format!("w{registered}"), body(1.0))
                    .await
                    .expect("registered");
                registered += 1;
            }
        });
        let mut i = 0u64;
        group.bench_function(format!("{n}_workloads"), |b| {
            b.iter(|| {
                i += 1;
                runtime
                    .block_on(state.put_workload("probe", body(1.0 + (i % 7) as f64)))
                    .expect("replaced");
            });
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
