//! The prediction path in process on the shipped default model: one 10,000-pair request by
//! workload id (parse, encode both directions, one forward pass, serialize), one of 10,000
//! groups of four (60,000 pairs composed, the distinct ones run once), the same two with every
//! job's features inline and no two jobs alike (every pair its own), and each engine's forward
//! pass alone on the same 20,000 rows.
//!
//! `cargo bench -p duet-server --bench predict --profile dev` (the ONNX rows need
//! `ORT_DYLIB_PATH`, set by `eval "$(scripts/python-env.sh)"`). `DUET_BENCH_MODEL=DIR` serves
//! another model (its V100 and space sharing where it has them, else its first device and
//! mode), `DUET_BENCH_GROUP_SIZE=K` asks groups of K (3 to 8) instead of four: a model whose
//! network learned groups of three answers those one row per job.

use std::hint::black_box;
use std::path::Path;

use criterion::{Criterion, criterion_group, criterion_main};
use duet_core::api::{FeatureInput, Features, GroupQuery, JobRef, PairQuery, PredictRequest};
use duet_core::dataset::Mode;
use duet_server::{AppState, Config, EngineKind};

fn model_dir() -> std::path::PathBuf {
    if let Some(dir) = std::env::var_os("DUET_BENCH_MODEL") {
        return dir.into();
    }
    Path::new(
        &std::env::var_os("CARGO_MANIFEST_DIR")
            .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into()),
    )
    .join("../models/default")
}

/// The xorshift draw of the requests below: indexes into `n` things.
fn draws(seed: u64, n: usize) -> impl FnMut() -> usize {
    let mut x = seed;
    move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        usize::try_from(x % n as u64).expect("index")
    }
}

/// What the requests ask: the device, the mode and the group size.
struct Ask {
    gpu: String,
    mode: Mode,
    size: usize,
}

/// A request's body on the asked device.
fn body(ask: &Ask, pairs: Vec<PairQuery>, groups: Vec<GroupQuery>) -> Vec<u8> {
    serde_json::to_vec(&PredictRequest {
        gpu: Some(ask.gpu.clone()),
        pairs,
        groups,
    })
    .expect("json")
}

/// `n` pairs under the asked mode; job `k` of the request is `job(k, d)`, `d` a fixed
/// pseudo-random draw among `choices`.
fn pair_request(
    ask: &Ask,
    n: usize,
    choices: usize,
    mut job: impl FnMut(usize, usize) -> JobRef,
) -> Vec<u8> {
    let mut next = draws(0x9E37_79B9_7F4A_7C15, choices);
    let pairs = (0..n)
        .map(|i| PairQuery {
            a: job(2 * i, next()),
            b: job(2 * i + 1, next()),
            mode: ask.mode,
            share_a: None,
            share_b: None,
            gpu: None,
        })
        .collect();
    body(ask, pairs, Vec::new())
}

/// `n` groups of the asked size under the asked mode, their jobs drawn as [`pair_request`]'s.
fn group_request(
    ask: &Ask,
    n: usize,
    choices: usize,
    mut job: impl FnMut(usize, usize) -> JobRef,
) -> Vec<u8> {
    let mut next = draws(0x2545_F491_4F6C_DD1D, choices);
    let k = ask.size;
    let groups = (0..n)
        .map(|g| GroupQuery {
            jobs: (0..k).map(|j| job(k * g + j, next())).collect(),
            mode: ask.mode,
            shares: None,
            gpu: None,
        })
        .collect();
    body(ask, Vec::new(), groups)
}

/// Job `k` by its features inline: a registered profile with its solo throughput scaled by
/// `1 + k / 1e7`, so no two jobs of a request are alike.
fn inline(profiles: &[Features], k: usize, pick: usize) -> JobRef {
    let mut features = profiles[pick].clone();
    if let Some(FeatureInput::Number(solo)) = features.get_mut("solo_throughput") {
        #[allow(clippy::cast_precision_loss)]
        let scale = 1.0 + k as f64 / 1e7;
        *solo *= scale;
    }
    JobRef {
        workload: None,
        features: Some(features),
    }
}

fn state(engine: EngineKind) -> std::sync::Arc<AppState> {
    let state = AppState::new(Config {
        engine,
        max_pairs: 300_000,
        ..Config::new(model_dir())
    })
    .expect("state");
    state.load_model(None, Vec::new()).expect("model");
    state
}

fn bench(c: &mut Criterion) {
    let mut engines = vec![EngineKind::Burn];
    if std::env::var_os("ORT_DYLIB_PATH").is_some() {
        engines.push(EngineKind::Onnx);
    }
    for engine in engines {
        let state = state(engine);
        let ask = {
            let model = state.model().expect("model");
            let spec = &model.meta.spec;
            let gpu = if spec.gpus.iter().any(|g| g == "v100") {
                "v100".to_string()
            } else {
                spec.gpus.first().cloned().expect("a device")
            };
            let mode = if spec.modes.contains(&Mode::Space) {
                Mode::Space
            } else {
                *spec.modes.first().expect("a mode")
            };
            let size = std::env::var("DUET_BENCH_GROUP_SIZE")
                .ok()
                .and_then(|k| k.parse().ok())
                .unwrap_or(4);
            Ask { gpu, mode, size }
        };
        // The registered workloads: by id, and their profiles on the device to send inline.
        let (ids, profiles): (Vec<String>, Vec<Features>) = {
            let guard = state.serving.load_full();
            let serving = guard.as_ref().expect("loaded");
            let list = serving.registry.list();
            (
                list.iter().map(|w| w.workload.clone()).collect(),
                list.iter()
                    .filter_map(|w| w.body.profiles.get(&ask.gpu).cloned())
                    .collect(),
            )
        };
        let k = ask.size;
        let by_id = |_: usize, pick: usize| JobRef::workload(ids[pick].clone());
        let body = pair_request(&ask, 10_000, ids.len(), by_id);
        c.bench_function(&format!("predict_10k_pairs_{engine}"), |b| {
            b.iter(|| black_box(duet_server::answer(&state, black_box(&body)).expect("answer")));
        });
        if engine == EngineKind::Burn {
            // The stages of the 10,000-pair request that do not depend on the engine.
            c.bench_function("parse_10k_pairs", |b| {
                b.iter(|| {
                    black_box(
                        serde_json::from_slice::<PredictRequest>(black_box(&body)).expect("parse"),
                    )
                });
            });
            let answer = duet_server::answer(&state, &body).expect("answer");
            let parsed: duet_core::api::PredictResponse =
                serde_json::from_slice(&answer).expect("response");
            c.bench_function("serialize_10k_predictions", |b| {
                b.iter(|| black_box(serde_json::to_vec(black_box(&parsed)).expect("json")));
            });
        }
        let groups = group_request(&ask, 10_000, ids.len(), by_id);
        if engine == EngineKind::Burn {
            c.bench_function(&format!("parse_10k_groups_of_{k}"), |b| {
                b.iter(|| {
                    black_box(
                        serde_json::from_slice::<PredictRequest>(black_box(&groups))
                            .expect("parse"),
                    )
                });
            });
        }
        c.bench_function(&format!("predict_10k_groups_of_{k}_{engine}"), |b| {
            b.iter(|| black_box(duet_server::answer(&state, black_box(&groups)).expect("answer")));
        });
        let inline_pairs = pair_request(&ask, 10_000, profiles.len(), |j, pick| {
            inline(&profiles, j, pick)
        });
        if engine == EngineKind::Burn {
            c.bench_function("parse_10k_inline_pairs", |b| {
                b.iter(|| {
                    black_box(
                        duet_server::parse_request(black_box(&inline_pairs), usize::MAX)
                            .expect("parse"),
                    )
                });
            });
        }
        c.bench_function(&format!("predict_10k_inline_pairs_{engine}"), |b| {
            b.iter(|| {
                black_box(duet_server::answer(&state, black_box(&inline_pairs)).expect("answer"))
            });
        });
        let inline_groups = group_request(&ask, 10_000, profiles.len(), |j, pick| {
            inline(&profiles, j, pick)
        });
        if engine == EngineKind::Burn {
            c.bench_function(&format!("parse_10k_inline_groups_of_{k}"), |b| {
                b.iter(|| {
                    black_box(
                        duet_server::parse_request(black_box(&inline_groups), usize::MAX)
                            .expect("parse"),
                    )
                });
            });
            // What freeing a parsed request costs (its jobs' feature maps).
            for (name, body) in [
                ("drop_10k_inline_pairs".to_string(), &inline_pairs),
                (format!("drop_10k_inline_groups_of_{k}"), &inline_groups),
            ] {
                c.bench_function(&name, |b| {
                    b.iter_batched(
                        || duet_server::parse_request(body, usize::MAX).expect("parse"),
                        drop,
                        criterion::BatchSize::LargeInput,
                    );
                });
            }
        }
        c.bench_function(&format!("predict_10k_inline_groups_of_{k}_{engine}"), |b| {
            b.iter(|| {
                black_box(duet_server::answer(&state, black_box(&inline_groups)).expect("answer"))
            });
        });
        let single = pair_request(&ask, 1, ids.len(), by_id);
        c.bench_function(&format!("predict_1_pair_{engine}"), |b| {
            b.iter(|| black_box(duet_server::answer(&state, black_box(&single)).expect("answer")));
        });
        let model = state.model().expect("model");
        let rows = vec![0.1f32; 20_000 * model.meta.spec.pair_width()];
        c.bench_function(&format!("forward_20k_rows_{engine}"), |b| {
            b.iter(|| black_box(model.engine.run(black_box(rows.clone())).expect("run")));
        });
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20);
    targets = bench
}
criterion_main!(benches);
