//! One training epoch of the default model's MLP on the default model's data: full-batch
//! forward, backward and Adam step on the CPU (Burn's Flex backend). `benchmarks/pytorch_epoch.py`
//! times the same network on the same batch with PyTorch, for BENCHMARKS.md.

use std::path::Path;

use burn::backend::{Autodiff, Flex};
use criterion::{Criterion, criterion_group, criterion_main};
use duet_core::dataset::Dataset;
use duet_model::network::TrainConfig;
use duet_trainer::corpus::Corpus;
use duet_trainer::training::{Batch, fit};

/// The default model's training batch (all Gavel rows, with and without identities).
pub fn default_batch() -> Batch {
    let root = Path::new(
        &std::env::var_os("CARGO_MANIFEST_DIR")
            .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into()),
    )
    .join("../datasets");
    let datasets = ["gavel-k80", "gavel-p100", "gavel-v100"]
        .map(|name| Dataset::read(&root.join(name)).expect("committed dataset"));
    let corpus = Corpus::new(datasets.to_vec());
    let rows: Vec<usize> = (0..corpus.examples.len()).collect();
    let spec = corpus.fit_spec(&rows);
    corpus.encode_for_training(&spec, &rows, false)
}

const EPOCHS: usize = 20;

fn epoch(c: &mut Criterion) {
    let batch = default_batch();
    // The network BENCHMARKS.md compares with PyTorch (benchmarks/pytorch_epoch.py): 64 -> 64.
    let config = TrainConfig {
        hidden: vec![64, 64],
        max_epochs: EPOCHS,
        patience: EPOCHS,
        ..TrainConfig::default()
    };
    let empty = Batch {
        width: batch.width,
        ..Batch::default()
    };
    let name = format!(
        "{EPOCHS} epochs, {} rows x {} inputs, hidden {:?}",
        batch.rows(),
        batch.width,
        config.hidden
    );
    c.bench_function(&name, |b| {
        b.iter(|| {
            fit::<Autodiff<Flex>>(&batch, &empty, &config, &Default::default()).expect("fit")
        });
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10);
    targets = epoch
}
criterion_main!(benches);
