//! The crate graph is the architecture: each crate may depend on exactly the duet crates
//! ARCHITECTURE.md's invariants list, in every dependency kind (normal, dev, build). A new edge
//! fails here until the list (and ARCHITECTURE.md) says why.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;

/// Crate -> the duet crates it may depend on.
const ALLOWED: &[(&str, &[&str])] = &[
    ("duet-core", &[]),
    ("duet-model", &["duet-core"]),
    ("duet-trainer", &["duet-core", "duet-model"]),
    // The connection loop both HTTP listeners share (the server's, the extender's).
    ("duet-listen", &[]),
    ("duet-server", &["duet-core", "duet-model", "duet-listen"]),
    ("duet-scheduler", &["duet-core", "duet-model"]),
    ("duet-profiler", &["duet-core"]),
    // The campaign loop sees what chooses (model, trainer) and what measures (the profiler,
    // for the budgeted `duet profile`); the profiler never sees the model.
    (
        "duet-campaign",
        &["duet-core", "duet-model", "duet-trainer", "duet-profiler"],
    ),
    // The Kubernetes side prices through the scheduler crate's loop and client.
    ("duet-kube", &["duet-core", "duet-scheduler", "duet-listen"]),
    (
        "duet-cli",
        &[
            "duet-kube",
            "duet-core",
            "duet-model",
            "duet-trainer",
            "duet-server",
            "duet-scheduler",
            "duet-profiler",
            "duet-campaign",
        ],
    ),
];

fn workspace_graph() -> BTreeMap<String, BTreeSet<String>> {
    let root = PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into()),
    )
    .join("..");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(&root)
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("cargo metadata JSON");
    let packages = meta["packages"].as_array().expect("packages");
    let names: BTreeSet<String> = packages
        .iter()
        .filter_map(|p| p["name"].as_str().map(str::to_string))
        .collect();
    packages
        .iter()
        .map(|p| {
            let name = p["name"].as_str().unwrap_or_default().to_string();
            let deps = p["dependencies"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|d| d["name"].as_str())
                .filter(|d| names.contains(*d))
                .map(str::to_string)
                .collect();
            (name, deps)
        })
        .collect()
}

#[test]
fn every_crate_depends_only_on_the_duet_crates_the_architecture_allows() {
    let graph = workspace_graph();
    let allowed: BTreeMap<&str, BTreeSet<&str>> = ALLOWED
        .iter()
        .map(|(k, v)| (*k, v.iter().copied().collect()))
        .collect();
    let crates: BTreeSet<&str> = graph.keys().map(String::as_str).collect();
    assert_eq!(
        crates,
        allowed.keys().copied().collect(),
        "the workspace's crates and the allowed list differ: add the new crate to ALLOWED and to \
         ARCHITECTURE.md's invariants"
    );
    let mut wrong = Vec::new();
    for (krate, deps) in &graph {
        for dep in deps {
            if !allowed[krate.as_str()].contains(dep.as_str()) {
                wrong.push(format!("{krate} -> {dep}"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "edges the architecture does not allow: {}",
        wrong.join(", ")
    );
}

/// The crates `krate` builds with (normal dependencies, every depth), by name.
fn third_party(krate: &str) -> BTreeSet<String> {
    let root = PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into()),
    )
    .join("..");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "tree",
            "--offline",
            "-e",
            "normal",
            "--prefix",
            "none",
            "-p",
            krate,
        ])
        .current_dir(&root)
        .output()
        .expect("cargo tree runs");
    assert!(
        out.status.success(),
        "cargo tree: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}

#[test]
fn the_kubernetes_client_stays_out_of_the_server_and_the_model() {
    for krate in ["duet-server", "duet-model", "duet-scheduler"] {
        let deps = third_party(krate);
        assert!(deps.contains("serde"), "{krate}: {deps:?}");
        for kubernetes in ["kube", "kube-client", "kube-runtime", "k8s-openapi"] {
            assert!(
                !deps.contains(kubernetes),
                "{krate} builds with {kubernetes}"
            );
        }
    }
    assert!(third_party("duet-kube").contains("kube-client"));
}
