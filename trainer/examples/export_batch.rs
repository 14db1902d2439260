//! Writes the default model's training batch for `benchmarks/pytorch_epoch.py`:
//! `<dir>/inputs.f32` (rows x width, little-endian f32, row-major), `<dir>/log_speed.f32`,
//! `<dir>/feasible.f32` and `<dir>/shape.json`.
//!
//! Usage: cargo run --example export_batch -p duet-trainer -- <dir>

use std::path::{Path, PathBuf};

use duet_core::dataset::Dataset;
use duet_trainer::corpus::Corpus;

fn bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out = PathBuf::from(std::env::args().nth(1).ok_or("usage: export_batch <dir>")?);
    let root = Path::new(
        &std::env::var_os("CARGO_MANIFEST_DIR")
            .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into()),
    )
    .join("../datasets");
    let mut datasets = Vec::new();
    for name in ["gavel-k80", "gavel-p100", "gavel-v100"] {
        datasets.push(Dataset::read(&root.join(name))?);
    }
    let corpus = Corpus::new(datasets);
    let rows: Vec<usize> = (0..corpus.examples.len()).collect();
    let spec = corpus.fit_spec(&rows);
    let batch = corpus.encode_for_training(&spec, &rows, false);
    std::fs::create_dir_all(&out)?;
    std::fs::write(out.join("inputs.f32"), bytes(&batch.inputs))?;
    std::fs::write(out.join("log_speed.f32"), bytes(&batch.log_speed))?;
    std::fs::write(out.join("feasible.f32"), bytes(&batch.feasible))?;
    std::fs::write(
        out.join("shape.json"),
        format!(
            "{{\"rows\": {}, \"width\": {}}}\n",
            batch.rows(),
            batch.width
        ),
    )?;
    println!(
        "{} rows x {} inputs -> {}",
        batch.rows(),
        batch.width,
        out.display()
    );
    Ok(())
}
