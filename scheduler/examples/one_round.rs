//! One pricing round as a cluster scheduler would run it: the cluster's state in, placements out,
//! the slowdowns from a running duet server (or the default model in process).
//!
//!     cargo run -p duet-scheduler --example one_round -- http://127.0.0.1:8080
//!     cargo run -p duet-scheduler --example one_round        # the model in process (Burn)

use std::path::Path;
use std::time::Duration;

use duet_core::dataset::Mode;
use duet_model::EngineKind;
use duet_scheduler::predictor::{HttpPredictor, ModelPredictor, Predictor, Sharing};
use duet_scheduler::pricing::{self, FreeNode, PricingConfig, Resident, Waiting};

fn main() -> anyhow::Result<()> {
    let mut predictor: Box<dyn Predictor> = match std::env::args().nth(1) {
        Some(url) => Box::new(HttpPredictor::new(&url, None, Duration::from_secs(10))),
        None => {
            let model = Path::new(
                &std::env::var_os("CARGO_MANIFEST_DIR")
                    .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into()),
            )
            .join("../models/default");
            Box::new(ModelPredictor::load(&model, EngineKind::Burn)?)
        }
    };
    // Two GPUs busy with one job each, one free GPU, three jobs waiting.
    let resident = |gpu, workload: &str| Resident {
        gpu,
        mode: None,
        workload: workload.into(),
        weight: 1.0,
        slo: None,
        memory_mib: None,
        share: None,
    };
    let waiting = |id, workload: &str, slo: Option<f64>| Waiting {
        id,
        workload: workload.into(),
        gpus: 1,
        weight: if slo.is_some() { 2.0 } else { 1.0 },
        priority: if slo.is_some() { 2.0 } else { 1.0 },
        slo,
        memory_mib: None,
    };
    let jobs = [
        waiting(0, "resnet-50-bs64", None),
        waiting(1, "transformer-bs32", Some(0.6)),
        waiting(2, "a3c", None),
    ];
    let space = Sharing {
        mode: Mode::Space,
        share_a: None,
        share_b: None,
    };
    let (decisions, stats) = pricing::round(
        "v100",
        &jobs,
        &[FreeNode { gpus: vec![2] }],
        &[resident(0, "lm-bs20"), resident(1, "recommendation-bs512")],
        &[space],
        predictor.as_mut(),
        &PricingConfig::default(),
    )?;
    println!("predictor: {}", predictor.describe());
    for d in &decisions {
        println!(
            "job {} ({}): {:?}",
            d.job, jobs[d.job].workload, d.placement
        );
    }
    println!(
        "{} pairs asked in one call, {} bids, {:.2} ms",
        stats.queries,
        stats.bids,
        stats.time.as_secs_f64() * 1e3
    );
    Ok(())
}
