//! What a scheduling call costs duet's Kubernetes side, from its view of the cluster, with the
//! shipped model in process (Burn) so that no HTTP is counted here (examples/extender_load.rs
//! measures the real HTTP path against a running server):
//! - the extender's judgement of one pending pod on 1,000 nodes of 8 GPUs, half of them running a
//!   pod (the survey, one prediction call, the verdicts: what filter and prioritize do);
//! - the same where two GPUs of every node are shared by a pair and a GPU may hold three pods;
//! - `duet schedule`'s step over 200 pending pods on 512 GPUs (64 nodes), to quiescence.
//!
//! `cargo bench -p duet-kube --bench extender --profile dev`

use std::hint::black_box;
use std::path::Path;

use criterion::{Criterion, criterion_group, criterion_main};
use duet_kube::{placement, schedule};
use duet_scheduler::predictor::{EngineKind, ModelPredictor};
use duet_scheduler::pricing::PricingConfig;

#[path = "synthetic.rs"]
mod synthetic;

fn benches(c: &mut Criterion) {
    let ids = synthetic::workloads();
    let map = synthetic::map();
    let known = synthetic::known(&ids);
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/default");
    let mut predictor = ModelPredictor::load(&model, EngineKind::Burn).expect("model");

    let cluster = synthetic::cluster(1000, &ids);
    let names: Vec<String> = cluster.nodes().map(|n| n.name.clone()).collect();
    let pod = synthetic::pending(1, &ids).remove(0);
    c.bench_function(
        "judge one pod on 1,000 nodes of 8 GPUs (half running a pod)",
        |b| {
            b.iter(|| {
                let survey = placement::survey(&cluster, &map, &known, &pod, &names, 2);
                let outlooks = survey.predict(&mut predictor).expect("predict");
                black_box(survey.verdicts(&outlooks))
            });
        },
    );

    let shared = synthetic::shared_cluster(1000, &ids);
    c.bench_function(
        "judge one pod on 1,000 nodes of 8 GPUs (two shared by pairs, two by one pod), 3 per GPU",
        |b| {
            b.iter(|| {
                let survey = placement::survey(&shared, &map, &known, &pod, &names, 3);
                let outlooks = survey.predict(&mut predictor).expect("predict");
                black_box(survey.verdicts(&outlooks))
            });
        },
    );

    let cluster = synthetic::cluster(64, &ids);
    let pending = synthetic::pending(200, &ids);
    let config = PricingConfig::default();
    let mut group = c.benchmark_group("duet schedule");
    group.sample_size(20);
    group.bench_function("a step over 200 pending pods on 512 GPUs", |b| {
        b.iter(|| {
            black_box(
                schedule::plan(
                    &cluster,
                    &map,
                    &known,
                    &pending,
                    &Default::default(),
                    &mut predictor,
                    &config,
                )
                .expect("plan"),
            )
        });
    });
    group.finish();
}

criterion_group!(kube, benches);
criterion_main!(kube);
