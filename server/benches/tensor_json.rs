//! Reading a KServe JSON request of 10,000 rows (the model's 83 values a row, written as
//! tritonclient writes FP32 in JSON: each value widened to f64, shortest text; 17 MB): serde
//! alone (every value through serde_json's exact f64 parse and the bounded array), and the
//! route's reading, the tensor lifted out of the bytes (`tensor_json::lift`) on one thread and
//! on every core, then serde on the rest.
//!
//! `cargo bench -p duet-server --bench tensor_json --profile dev`

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use duet_core::rng::Rng;
use duet_server::bounded;
use duet_server::routes::kserve::{InferRequest, parse_request};
use duet_server::tensor_json::lift;

const ROWS: usize = 10_000;
const WIDTH: usize = 83;

fn body() -> Vec<u8> {
    let mut rng = Rng::new(24);
    let values: Vec<String> = (0..ROWS * WIDTH)
        .map(|_| {
            #[allow(clippy::cast_possible_truncation)]
            let x = ((rng.unit() - 0.5) * 4.0) as f32;
            format!("{}", f64::from(x))
        })
        .collect();
    format!(
        r#"{{"inputs": [{{"name": "pairs", "shape": [{ROWS}, {WIDTH}], "datatype": "FP32", "data": [{}]}}]}}"#,
        values.join(", ")
    )
    .into_bytes()
}

fn bench(c: &mut Criterion) {
    let body = body();
    let budget = ROWS * WIDTH;
    let threads = std::thread::available_parallelism().map_or(1, usize::from);
    let mut group = c.benchmark_group("kserve_json_10000_rows");
    group.sample_size(10);
    group.bench_function("serde", |b| {
        b.iter(|| {
            let r: InferRequest = bounded::parse(black_box(&body), budget).expect("parsed");
            black_box(r)
        });
    });
    group.bench_function("lift_1_thread", |b| {
        b.iter(|| black_box(lift(black_box(&body), budget, 1).expect("lifted")));
    });
    group.bench_function(format!("lift_{threads}_threads"), |b| {
        b.iter(|| black_box(lift(black_box(&body), budget, threads).expect("lifted")));
    });
    group.bench_function("route_parse_request", |b| {
        b.iter(|| black_box(parse_request(black_box(&body), budget).expect("parsed")));
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
