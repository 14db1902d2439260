//! What the trainer's tests share: the committed datasets.

use std::path::Path;

use duet_core::Dataset;

/// The committed dataset `datasets/<name>`.
pub fn dataset(name: &str) -> Dataset {
    let dir = Path::new(
        &std::env::var_os("CARGO_MANIFEST_DIR")
            .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into()),
    )
    .join("../datasets")
    .join(name);
    Dataset::read(&dir).expect("committed dataset")
}
