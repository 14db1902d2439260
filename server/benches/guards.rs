//! What the guards of a model route cost on the normal path, in process: one prediction
//! answered plainly, and the same with what an admitted request adds (its places taken from
//! the limiter, the give-up guard, the places fitted to its pairs, the cancellation flag read
//! at every chunk), each on one pair and on 10,000, on the shipped default model; those
//! guards alone; and the scan of a body for a string longer than any field takes, beside the
//! parse of the same body.
//!
//! `cargo bench -p duet-server --bench guards --profile dev`

use std::hint::black_box;
use std::path::Path;
use std::sync::atomic::AtomicBool;

use criterion::{Criterion, criterion_group, criterion_main};
use duet_server::routes::predict::{answer_request, parse_request};
use duet_server::service::predict::PARALLEL_PAIRS;
use duet_server::shed::{GiveUpOnDrop, take};
use duet_server::{AppState, Config, EngineKind};

fn state() -> std::sync::Arc<AppState> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/default");
    let state = AppState::new(Config {
        engine: EngineKind::Burn,
        ..Config::new(dir)
    })
    .expect("state");
    state.load_model(None, Vec::new()).expect("model");
    state
}

/// `n` pairs of the model's workloads by id, cycling through them.
fn request(ids: &[String], n: usize) -> Vec<u8> {
    let pairs: Vec<String> = (0..n)
        .map(|i| {
            format!(
                r#"{{"a":{{"workload":"{}"}},"b":{{"workload":"{}"}},"mode":"space"}}"#,
                ids[i % ids.len()],
                ids[(i * 7 + 3) % ids.len()]
            )
        })
        .collect();
    format!(r#"{{"gpu":"v100","pairs":[{}]}}"#, pairs.join(",")).into_bytes()
}

fn bench(c: &mut Criterion) {
    let state = state();
    let ids: Vec<String> = {
        let guard = state.serving.load_full();
        let serving = guard.as_ref().expect("loaded");
        serving
            .registry
            .list()
            .iter()
            .map(|w| w.workload.clone())
            .collect()
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    for n in [1, 10_000] {
        let body = request(&ids, n);
        let mut group = c.benchmark_group(format!("predict_{n}_pairs"));
        group.bench_function("plain", |b| {
            b.iter(|| {
                runtime.block_on(async {
                    let request =
                        parse_request(black_box(&body), state.config.max_pairs).expect("parse");
                    black_box(
                        answer_request(&state, request, &AtomicBool::new(false)).expect("answer"),
                    )
                })
            });
        });
        group.bench_function("guarded", |b| {
            b.iter(|| {
                runtime.block_on(async {
                    let work = take(
                        &state.limiter,
                        &state.metrics.guards,
                        "/v1/predict",
                        state.limiter.whole(),
                    )
                    .await
                    .expect("a place");
                    let guard = GiveUpOnDrop::new(work.clone());
                    let request =
                        parse_request(black_box(&body), state.config.max_pairs).expect("parse");
                    work.fit(
                        state
                            .limiter
                            .places_for(request.pairs.len(), PARALLEL_PAIRS),
                    );
                    let answer = answer_request(&state, request, work.cancelled()).expect("answer");
                    guard.answered();
                    black_box(answer)
                })
            });
        });
        group.finish();
    }
    // A body's strings measured before it is parsed (a body over 64 KiB is read once for a
    // string longer than any field takes), against parsing the same body.
    for n in [10_000, 100_000] {
        let body = request(&ids, n);
        let mut group = c.benchmark_group(format!("long_string_{n}_pairs"));
        group.bench_function("scan", |b| {
            b.iter(|| {
                duet_core::api::long_string(black_box(&body), duet_core::api::MAX_STRING_BYTES)
            });
        });
        group.bench_function("parse", |b| {
            b.iter(|| parse_request(black_box(&body), 100_000).expect("parse"));
        });
        group.finish();
    }
    // The guards alone, without the prediction: their absolute cost.
    c.bench_function("guards_alone", |b| {
        b.iter(|| {
            runtime.block_on(async {
                let work = take(
                    &state.limiter,
                    &state.metrics.guards,
                    "/v1/predict",
                    state.limiter.whole(),
                )
                .await
                .expect("a place");
                let guard = GiveUpOnDrop::new(work.clone());
                work.fit(state.limiter.places_for(black_box(1), PARALLEL_PAIRS));
                black_box(work.cancelled().load(std::sync::atomic::Ordering::Relaxed));
                guard.answered();
            })
        });
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30);
    targets = bench
}
criterion_main!(benches);
