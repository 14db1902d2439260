//! A synthetic complete dataset for the unit tests: `n` workloads whose speeds next to each
//! other follow their (hidden) intensities, every pair in every mode given.

use std::collections::BTreeMap;

use duet_core::dataset::{
    Dataset, DatasetMeta, FORMAT, FeatureColumn, FeatureKind, FeatureValue, JobKind, Mode, Pair,
    Provenance, Status, Workload, modes_present,
};
use duet_model::network::TrainConfig;

pub fn synthetic(n: usize, modes: &[Mode]) -> Dataset {
    #[allow(clippy::cast_precision_loss)]
    let intensity = |i: usize| (i as f64 + 1.0) / n as f64;
    let workloads: Vec<Workload> = (0..n)
        .map(|i| Workload {
            workload: format!("w{i}"),
            kind: JobKind::Train,
            #[allow(clippy::cast_precision_loss)]
            solo_throughput: 10.0 + i as f64,
            solo_throughput_std: None,
            solo_throughput_se: None,
            repetitions: Some(1),
            features: BTreeMap::from([
                (
                    "batch_size".to_string(),
                    FeatureValue::Number(Some(f64::from(1u32 << (i % 8)))),
                ),
                (
                    "model".to_string(),
                    FeatureValue::Category(Some(["a", "b", "c"][i % 3].to_string())),
                ),
                (
                    "util".to_string(),
                    FeatureValue::Number(Some(100.0 * intensity(i))),
                ),
            ]),
        })
        .collect();
    let mut pairs = Vec::new();
    for i in 0..n {
        for j in i..n {
            for &mode in modes {
                let share = (mode == Mode::Mps).then_some(50.0);
                let slow = if mode == Mode::Mps { 0.8 } else { 1.0 };
                let speed = |x: f64, y: f64| 1.0 / (1.0 + slow * x * (0.5 + y));
                pairs.push(Pair {
                    a: format!("w{i}"),
                    b: format!("w{j}"),
                    gpu: "g".to_string(),
                    mode,
                    share_a: share,
                    share_b: share,
                    throughput_a: workloads[i].solo_throughput * speed(intensity(i), intensity(j)),
                    throughput_b: workloads[j].solo_throughput * speed(intensity(j), intensity(i)),
                    throughput_a_std: None,
                    throughput_b_std: None,
                    throughput_a_se: None,
                    throughput_b_se: None,
                    repetitions: Some(1),
                    status: Status::Ok,
                    note: None,
                    counters: BTreeMap::new(),
                });
            }
        }
    }
    let column = |name: &str, kind| FeatureColumn {
        name: name.to_string(),
        kind,
        unit: None,
        meaning: name.to_string(),
    };
    Dataset {
        meta: DatasetMeta {
            format: FORMAT.to_string(),
            name: "synthetic".to_string(),
            description: "unit tests".to_string(),
            provenance: Provenance {
                source: "unit tests".to_string(),
                gpu: "g".to_string(),
                driver: None,
                host: None,
                measured_by: "duet".to_string(),
                tool: "duet".to_string(),
                command: None,
                date: "2026-12-02".to_string(),
                licence: "MIT".to_string(),
                licence_text: None,
            },
            workload_features: vec![
                column("batch_size", FeatureKind::Numeric),
                column("model", FeatureKind::Categorical),
                column("util", FeatureKind::Numeric),
            ],
            pair_counters: Vec::new(),
            modes: modes_present(&pairs),
            tables: Default::default(),
        },
        workloads,
        pairs,
        groups: Vec::new(),
    }
}

/// The dataset with only the pairs `keep` holds (every solo run kept).
pub fn with_pairs(d: &Dataset, keep: impl Fn(&Pair) -> bool) -> Dataset {
    d.with_pairs(d.pairs.iter().filter(|p| keep(p)).cloned().collect())
}

/// A fit quick enough for unit tests.
pub fn quick() -> TrainConfig {
    TrainConfig {
        hidden: vec![16],
        ensemble: 3,
        max_epochs: 60,
        patience: 20,
        ..TrainConfig::default()
    }
}
