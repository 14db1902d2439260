//! A real training run on a committed dataset; the artifact it writes is read back by Burn and
//! run by ONNX Runtime, and both agree with the trained ensemble.

use duet_core::dataset::Mode;
use duet_model::artifact;
use duet_model::encoding::JobFeatures;
use duet_model::network::{Rng, TrainConfig};
use duet_model::onnx;
use duet_trainer::corpus::Corpus;
use ort::session::Session;
use ort::value::Tensor;

mod support;
use support::dataset;

fn quick_config() -> TrainConfig {
    TrainConfig {
        hidden: vec![32, 16],
        max_epochs: 60,
        patience: 60,
        ensemble: 2,
        ..TrainConfig::default()
    }
}

/// 1,000 encoded pairs of random workloads from the corpus, on random devices and modes.
fn random_pairs(corpus: &Corpus, spec: &duet_model::encoding::FeatureSpec) -> Vec<f32> {
    let mut rng = Rng::new(99);
    let jobs: Vec<&JobFeatures> = corpus.jobs.iter().flat_map(|m| m.values()).collect();
    let pick = |rng: &mut Rng, n: usize| usize::try_from(rng.next_u64() % n as u64).expect("index");
    let mut inputs = Vec::new();
    for _ in 0..1000 {
        let a = jobs[pick(&mut rng, jobs.len())];
        let b = jobs[pick(&mut rng, jobs.len())];
        let gpu = ["k80", "v100", "h200"][pick(&mut rng, 3)];
        let mode = [Mode::Space, Mode::Mps, Mode::Timeslice][pick(&mut rng, 3)];
        let share = (rng.unit() * 100.0).max(1.0);
        spec.encode_pair(
            a,
            b,
            gpu,
            mode,
            Some(share),
            Some(100.0 - share + 1.0),
            &mut inputs,
        );
    }
    inputs
}

/// ONNX Runtime allows one environment per process.
fn environment() -> &'static ort::environment::Environment {
    static ENV: std::sync::OnceLock<ort::environment::Environment> = std::sync::OnceLock::new();
    ENV.get_or_init(|| {
        let path = std::env::var("ORT_DYLIB_PATH").expect(
            "ORT_DYLIB_PATH names ONNX Runtime's shared library; run the tests through scripts/test.sh",
        );
        ort::init_from(&path)
            .expect("load ONNX Runtime")
            .build()
            .expect("environment")
    })
}

fn onnx_outputs(model: &[u8], inputs: &[f32], width: usize) -> Vec<f32> {
    let mut session = Session::builder(environment())
        .expect("builder")
        .commit_from_memory(model)
        .expect("ONNX Runtime accepts duet's graph");
    let rows = inputs.len() / width;
    let tensor = Tensor::from_array(([rows, width], inputs.to_vec())).expect("tensor");
    let outputs = session
        .run(ort::inputs![onnx::INPUT => tensor])
        .expect("run");
    let (shape, values) = outputs[onnx::OUTPUT]
        .try_extract_tensor::<f32>()
        .expect("floats");
    assert_eq!(
        shape.iter().copied().collect::<Vec<i64>>(),
        [rows as i64, 3]
    );
    values.to_vec()
}

#[test]
fn burn_record_and_onnx_graph_agree_with_the_trained_ensemble() {
    let corpus = Corpus::new(vec![dataset("gavel-k80"), dataset("gavel-v100")]);
    let all: Vec<usize> = (0..corpus.examples.len()).collect();
    let trained = corpus.train(&all, &quick_config()).expect("training");
    let inputs = random_pairs(&corpus, &trained.spec);
    let expected = trained.forward(&inputs);
    assert_eq!(expected.len(), 3000);
    assert!(expected.iter().all(|v| v.is_finite()));

    // ONNX Runtime on duet's own graph.
    let width = trained.spec.pair_width();
    let model = onnx::export(&trained.nets, width, "test").expect("export");
    let got = onnx_outputs(&model, &inputs, width);
    let worst = expected
        .iter()
        .zip(&got)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    assert!(
        worst <= 1e-4,
        "largest difference Burn vs ONNX Runtime: {worst}"
    );

    // The Burn records read back give the same outputs.
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("model");
    let meta = artifact::ModelMeta {
        command: None,
        format: artifact::FORMAT.into(),
        name: "test".into(),
        version: "test".into(),
        duet_version: "test".into(),
        created: "2026-11-30".into(),
        target_transform: "ln(speed)".into(),
        outputs: vec![],
        config: quick_config(),
        spec: trained.spec.clone(),
        data: vec![],
        training: trained.outcomes.clone(),
        folds: Default::default(),
        metrics: vec![],
        calibration: trained.calibration.clone(),
        evaluation: None,
        metrics_sd: vec![],
        files: Default::default(),
    };
    artifact::write(&out, &meta, &trained.nets, &[]).expect("write artifact");
    let (back, nets) = artifact::load(&out).expect("load artifact");
    assert_eq!(back, meta);
    let reloaded = duet_trainer::corpus::Trained {
        spec: back.spec,
        nets,
        outcomes: back.training,
        calibration: back.calibration,
    };
    assert_eq!(reloaded.forward(&inputs), expected);
    let written = std::fs::read(out.join(artifact::ONNX_FILE)).expect("model.onnx");
    assert_eq!(onnx_outputs(&written, &inputs, width).len(), 3000);
}

#[test]
fn the_same_seed_gives_the_same_model() {
    let corpus = Corpus::new(vec![dataset("gavel-p100")]);
    let all: Vec<usize> = (0..corpus.examples.len()).collect();
    let config = TrainConfig {
        ensemble: 1,
        ..quick_config()
    };
    let first = corpus.train(&all, &config).expect("training");
    let second = corpus.train(&all, &config).expect("training");
    let inputs = random_pairs(&corpus, &first.spec);
    assert_eq!(first.forward(&inputs), second.forward(&inputs));
    let other = corpus
        .train(&all, &TrainConfig { seed: 8, ..config })
        .expect("training");
    assert_ne!(first.forward(&inputs), other.forward(&inputs));
}

#[test]
fn a_diverging_run_stops_with_a_clear_error() {
    let corpus = Corpus::new(vec![dataset("gavel-v100")]);
    let all: Vec<usize> = (0..corpus.examples.len()).collect();
    let config = TrainConfig {
        learning_rate: 1e30,
        ensemble: 1,
        ..quick_config()
    };
    let err = corpus.train(&all, &config).expect_err("must diverge");
    let message = err.to_string();
    assert!(
        message.starts_with("training diverged: the loss became"),
        "{message}"
    );
    assert!(message.ends_with("nothing was written"), "{message}");
}

#[test]
fn members_on_several_threads_give_the_same_model() {
    let corpus = Corpus::new(vec![dataset("gavel-k80")]);
    let all: Vec<usize> = (0..corpus.examples.len()).collect();
    let config = TrainConfig {
        ensemble: 3,
        max_epochs: 30,
        ..quick_config()
    };
    let one = corpus.train_on(&all, &config, 1).expect("training");
    let four = corpus.train_on(&all, &config, 4).expect("training");
    let inputs = random_pairs(&corpus, &one.spec);
    assert_eq!(one.forward(&inputs), four.forward(&inputs));
    assert_eq!(one.outcomes, four.outcomes);
    assert_eq!(one.calibration, four.calibration);
    assert_eq!(one.spec, four.spec);
}
