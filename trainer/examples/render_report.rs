//! Draws a model folder's report and figures again from what it stores (`model.json`, the
//! networks, `held-out.csv`), without training; run from the folder its `model.json`'s dataset
//! paths are relative to (the repository root for `models/default`):
//!
//!     cargo run -p duet-trainer --example render_report -- models/default

use std::path::PathBuf;

use duet_core::progress::Lines;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dirs: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    if dirs.is_empty() {
        return Err("usage: render_report MODEL_DIR...".into());
    }
    for dir in dirs {
        duet_trainer::figures::render(&dir, &mut Lines(|l: &str| eprintln!("{l}")))?;
    }
    Ok(())
}
