//! One pricing round at cluster scale: 1,000 waiting jobs over 512 GPUs (128 free, 384 running one
//! job each), Gavel V100 workloads, slowdowns from the measured pairs (the oracle) and from the
//! default model in process, so that the loop's own cost and the model's show apart. Then the same
//! with up to three jobs per GPU, half the busy GPUs already holding a pair: the groups' cost.
//!
//! `cargo bench -p duet-scheduler --bench round --profile dev` (the model rows need
//! `ORT_DYLIB_PATH`, set by `eval "$(scripts/python-env.sh)"`).

use std::hint::black_box;
use std::path::{Path, PathBuf};

use criterion::{Criterion, criterion_group, criterion_main};
use duet_core::dataset::Dataset;
use duet_core::rng::Rng;
use duet_model::EngineKind;
use duet_scheduler::predictor::{ModelPredictor, Oracle, Predictor};
use duet_scheduler::pricing::{self, FreeNode, PricingConfig, Resident, Waiting};

fn repo(path: &str) -> PathBuf {
    Path::new(
        &std::env::var_os("CARGO_MANIFEST_DIR")
            .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into()),
    )
    .join("..")
    .join(path)
}

struct Cluster {
    waiting: Vec<Waiting>,
    free: Vec<FreeNode>,
    residents: Vec<Resident>,
}

/// Seeded: every fourth GPU free, the others running one job; a third of the jobs inference.
fn cluster(ids: &[String]) -> Cluster {
    let mut rng = Rng::new(11);
    let mut pick = || ids[rng.below(ids.len())].clone();
    let waiting = (0..1000)
        .map(|id| {
            let inference = id % 3 == 0;
            let priority = if inference { 2.0 } else { 1.0 };
            Waiting {
                id,
                workload: pick(),
                gpus: 1,
                weight: priority * (1.0 + (id % 7) as f64 / 7.0),
                priority,
                slo: inference.then_some(0.6),
                memory_mib: None,
            }
        })
        .collect();
    let free = (0..64)
        .map(|node| FreeNode {
            gpus: (0..8)
                .filter(|g| g % 4 == 0)
                .map(|g| node * 8 + g)
                .collect(),
        })
        .collect();
    let residents = (0..512)
        .filter(|g| g % 4 != 0)
        .map(|gpu| Resident {
            gpu,
            mode: None,
            workload: pick(),
            weight: 1.0,
            slo: None,
            memory_mib: None,
            share: None,
        })
        .collect();
    Cluster {
        waiting,
        free,
        residents,
    }
}

fn bench(c: &mut Criterion) {
    let dir = repo("datasets/gavel-v100");
    let dataset = Dataset::read(&dir).expect("gavel-v100");
    let ids: Vec<String> = dataset
        .workloads
        .iter()
        .map(|w| w.workload.clone())
        .collect();
    let mut oracle = Oracle::new(&dir, &dataset).expect("oracle");
    let sharings = oracle.sharings().to_vec();
    let state = cluster(&ids);
    let config = PricingConfig::default();
    let run = |p: &mut dyn Predictor| {
        pricing::round(
            "v100",
            &state.waiting,
            &state.free,
            &state.residents,
            &sharings,
            p,
            &config,
        )
        .expect("round")
    };
    let (decisions, stats) = run(&mut oracle);
    eprintln!(
        "one round: {} placed, {} pairs asked, {} bids",
        decisions.len(),
        stats.queries,
        stats.bids
    );
    c.bench_function("round 1000 waiting x 512 GPUs, oracle", |b| {
        b.iter(|| black_box(run(&mut oracle)))
    });
    let engine = if std::env::var_os("ORT_DYLIB_PATH").is_some() {
        EngineKind::Onnx
    } else {
        EngineKind::Burn
    };
    let mut model = ModelPredictor::load(&repo("models/default"), engine).expect("default model");
    c.bench_function(
        &format!("round 1000 waiting x 512 GPUs, model in process ({engine})"),
        |b| b.iter(|| black_box(run(&mut model))),
    );

    // Every other busy GPU holds a pair under the dataset's first sharing; three jobs per GPU.
    let mode = sharings[0].mode;
    let mut paired = cluster(&ids);
    let mut rng = Rng::new(13);
    let mut extra = Vec::new();
    for (k, r) in paired.residents.iter_mut().enumerate() {
        if k % 2 == 0 {
            r.mode = Some(mode);
            let mut other = r.clone();
            other.workload.clone_from(&ids[rng.below(ids.len())]);
            extra.push(other);
        }
    }
    paired.residents.extend(extra);
    let groups = PricingConfig {
        gpu_jobs: 3,
        ..PricingConfig::default()
    };
    let run_groups = |p: &mut dyn Predictor| {
        pricing::round(
            "v100",
            &paired.waiting,
            &paired.free,
            &paired.residents,
            &sharings,
            p,
            &groups,
        )
        .expect("round")
    };
    let (decisions, stats) = run_groups(&mut oracle);
    let joined = decisions
        .iter()
        .filter(|d| matches!(d.placement, pricing::Placement::Join { .. }))
        .count();
    eprintln!(
        "one round of up to three per GPU: {} placed ({joined} joining a pair), {} pairs and groups asked, {} bids",
        decisions.len(),
        stats.queries,
        stats.bids
    );
    c.bench_function("round 1000 waiting x 512 GPUs, 3 per GPU, oracle", |b| {
        b.iter(|| black_box(run_groups(&mut oracle)))
    });
    c.bench_function(
        &format!("round 1000 waiting x 512 GPUs, 3 per GPU, model in process ({engine})"),
        |b| b.iter(|| black_box(run_groups(&mut model))),
    );
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20);
    targets = bench
}
criterion_main!(benches);
