//! Writes the gRPC code of duet's `.proto` files (`proto/`) into `server/src/grpc/generated/`,
//! or, with `--check`, fails when the committed code is not what they generate now (CI runs
//! the check, `.ci/run`). protox compiles the `.proto` files (pure Rust, no `protoc`) and
//! tonic-prost-build writes the messages, servers and clients. A separate workspace, so that
//! neither the server's build nor its test build compiles the protobuf compiler.
//!
//! Usage: cargo run --manifest-path tools/protogen/Cargo.toml [-- --check]

use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The `.proto` files, under the repository's `proto/`.
const PROTOS: [&str; 2] = ["inference.proto", "duet.proto"];

/// The files the generator writes, one per package.
const GENERATED: [&str; 2] = ["inference.rs", "duet.v1.rs"];

/// Bytes fields kept as `bytes::Bytes`: a tensor's raw values are not copied out of the
/// message's buffer.
const BYTES: [&str; 2] = [
    ".inference.ModelInferRequest.raw_input_contents",
    ".inference.ModelInferResponse.raw_output_contents",
];

/// The repository `cargo run` was called for: the manifest's folder as cargo gives it at run
/// time (the build's own path only where it gives none), so that a build cached from another
/// clone checks this one.
fn repository() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from)
        .join("../..")
}

/// Writes the generated code of `proto/` into `out`.
fn generate(out: &Path) -> Result<(), String> {
    let proto = repository().join("proto");
    let descriptors = protox::compile(PROTOS, [&proto]).map_err(|e| format!("{e:?}"))?;
    let mut builder = tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .emit_rerun_if_changed(false);
    for path in BYTES {
        builder = builder.bytes(path);
    }
    builder
        .out_dir(out)
        .compile_fds(descriptors)
        .map_err(|e| format!("generating the code: {e}"))
}

fn run(check: bool) -> Result<(), String> {
    let committed = repository().join("server/src/grpc/generated");
    let fresh = tempfile::tempdir().map_err(|e| e.to_string())?;
    generate(fresh.path())?;
    let mut stale = Vec::new();
    for name in GENERATED {
        let generated = std::fs::read(fresh.path().join(name))
            .map_err(|e| format!("{name}: not generated: {e}"))?;
        let path = committed.join(name);
        if std::fs::read(&path).ok().as_deref() == Some(generated.as_slice()) {
            continue;
        }
        if check {
            stale.push(name);
        } else {
            // Written under a temporary name beside the file, then renamed over it.
            std::fs::create_dir_all(&committed).map_err(|e| e.to_string())?;
            let tmp = committed.join(format!(".{name}.tmp"));
            std::fs::write(&tmp, &generated).map_err(|e| format!("{}: {e}", tmp.display()))?;
            std::fs::rename(&tmp, &path).map_err(|e| format!("{}: {e}", path.display()))?;
            println!("wrote server/src/grpc/generated/{name}");
        }
    }
    if stale.is_empty() {
        println!("protogen: server/src/grpc/generated/ is what proto/ generates");
        Ok(())
    } else {
        Err(format!(
            "server/src/grpc/generated/{} is not what proto/ generates now: run `cargo run \
             --manifest-path tools/protogen/Cargo.toml`",
            stale.join(", ")
        ))
    }
}

fn main() -> ExitCode {
    let check = match std::env::args().nth(1).as_deref() {
        None => false,
        Some("--check") => true,
        Some(other) => {
            eprintln!("protogen: unknown argument `{other}` (--check or nothing)");
            return ExitCode::from(2);
        }
    };
    match run(check) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("protogen: {e}");
            ExitCode::FAILURE
        }
    }
}
