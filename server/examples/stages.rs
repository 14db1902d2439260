//! Where the time of one large prediction request goes, stage by stage, and the whole answer as
//! the server computes it, on the default model:
//! `cargo run -p duet-server --example stages [pairs] [burn|onnx]`.

use std::path::Path;
use std::time::Instant;

use duet_core::api::{JobRef, PairQuery, PredictRequest, PredictResponse};
use duet_core::dataset::Mode;
use duet_model::predict;
use duet_server::{AppState, Config, EngineKind, error};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let engine: EngineKind = args
        .get(2)
        .map_or(Ok(EngineKind::Onnx), |e| e.parse())
        .expect("engine");
    let model = std::env::var("DUET_MODEL").unwrap_or_else(|_| {
        Path::new(
            &std::env::var_os("CARGO_MANIFEST_DIR")
                .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into()),
        )
        .join("../models/default")
        .display()
        .to_string()
    });
    let state = AppState::new(Config {
        engine,
        ..Config::new(model.into())
    })
    .expect("state");
    state.load_model(None, Vec::new()).expect("model");
    let ids: Vec<String> = {
        let guard = state.serving.load_full();
        let s = guard.as_ref().expect("loaded");
        s.registry
            .list()
            .iter()
            .map(|w| w.workload.clone())
            .collect()
    };
    let pairs = (0..n)
        .map(|i| PairQuery {
            a: JobRef::workload(ids[i % ids.len()].clone()),
            b: JobRef::workload(ids[(i * 7 + 3) % ids.len()].clone()),
            mode: Mode::Space,
            share_a: None,
            share_b: None,
            gpu: None,
        })
        .collect();
    let body = serde_json::to_vec(&PredictRequest {
        gpu: Some("v100".into()),
        pairs,
        groups: Vec::new(),
    })
    .expect("json");
    let rounds = 30;
    let mut t = [0.0f64; 5];
    for _ in 0..rounds {
        let s0 = Instant::now();
        let request: PredictRequest = error::parse_json(&body).expect("parse");
        let s1 = Instant::now();
        let (model, inputs) = {
            let guard = state.serving.load_full();
            let s = guard.as_ref().expect("loaded");
            let inputs = predict::encode(&s.model, &s.registry, &request, None).expect("encode");
            let kinds = predict::kinds(&s.model.meta.spec, &s.model.meta.calibration, &inputs);
            (s.model.clone(), (inputs, kinds))
        };
        let s2 = Instant::now();
        let (inputs, kinds) = inputs;
        let outputs = model.engine.run(inputs).expect("run");
        let s3 = Instant::now();
        let response = PredictResponse {
            model_version: model.version().to_string(),
            predictions: predict::predictions(&kinds, &outputs),
            groups: Vec::new(),
        };
        let s4 = Instant::now();
        let bytes = serde_json::to_vec(&response).expect("json");
        let s5 = Instant::now();
        std::hint::black_box(bytes);
        for (k, (a, b)) in [(s0, s1), (s1, s2), (s2, s3), (s3, s4), (s4, s5)]
            .into_iter()
            .enumerate()
        {
            t[k] += (b - a).as_secs_f64() * 1e3 / f64::from(rounds);
        }
    }
    let start = Instant::now();
    for _ in 0..rounds {
        std::hint::black_box(duet_server::answer(&state, &body).expect("answer"));
    }
    let whole = start.elapsed().as_secs_f64() * 1e3 / f64::from(rounds);
    let names = ["parse", "encode", "forward", "predictions", "serialize"];
    for (name, ms) in names.iter().zip(t) {
        println!("{name:<12} {ms:7.2} ms");
    }
    println!(
        "{:<12} {:7.2} ms ({n} pairs, {engine}, one stage after the other)",
        "total",
        t.iter().sum::<f64>()
    );
    println!(
        "{:<12} {whole:7.2} ms (as the server answers: parse, then a part per core)",
        "answer"
    );
}
