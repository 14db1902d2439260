//! The quick CPU catalog the profile tests share: two built-in workloads and a shell loop, each
//! measurable in a fraction of a second.

use std::path::{Path, PathBuf};

/// Writes `catalog.toml` in `dir`: mlp, stream and ticker, then `extra` (more workloads).
pub fn write_catalog(dir: &Path, extra: &str) -> PathBuf {
    let path = dir.join("catalog.toml");
    let text = format!(
        r#"
[[workload]]
name = "mlp"
kind = "train"
builtin = "mlp"
batch = 16
width = 64

[[workload]]
name = "stream"
kind = "infer"
builtin = "stream"
width = 64

[[workload]]
name = "ticker"
kind = "infer"
command = ["sh", "-c", "while true; do echo tick; sleep 0.005; done"]
progress = "^tick$"
{extra}"#
    );
    std::fs::write(&path, text).expect("catalog");
    path
}
