//! What one `/proc` counter sample costs: the sampler's share of a core is this cost times the
//! sampling rate (times the processes sampled).
//!
//! `cargo bench -p duet-profiler --bench sampler --profile dev`

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use duet_profiler::process::proc_sample;

fn bench(c: &mut Criterion) {
    let pid = std::process::id();
    assert!(proc_sample(pid).is_some(), "/proc is readable");
    c.bench_function("proc_sample", |b| {
        b.iter(|| black_box(proc_sample(black_box(pid))))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
