//! `duet serve`.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use duet_server::store::StateLocation;
use duet_server::{Config, EngineKind};

use crate::args::ServeArgs;
use crate::flags;

/// The environment variable that may hold the bearer token instead of `--token-file`.
pub const TOKEN_ENV: &str = "DUET_TOKEN";

/// The token from `file`, else from `DUET_TOKEN`; an empty token is refused.
pub fn read_token(file: Option<&Path>) -> Result<Option<String>> {
    let (token, origin) = match file {
        Some(f) => (
            duet_core::input::read_text(f)
                .map_err(|e| anyhow!("--token-file {}: {e}", f.display()))?,
            format!("--token-file {}", f.display()),
        ),
        None => match std::env::var(TOKEN_ENV) {
            Ok(t) => (t, TOKEN_ENV.to_string()),
            Err(_) => return Ok(None),
        },
    };
    let token = token.trim().to_string();
    if token.is_empty() {
        bail!("{origin}: the token is empty");
    }
    Ok(Some(token))
}

/// The environment variable that may hold the `--state` value instead of `--state-file`.
pub const STATE_ENV: &str = "DUET_STATE";

/// Where registrations are kept: `--state`, else `--state-file`, else `DUET_STATE`.
pub fn read_state(state: Option<&str>, file: Option<&Path>) -> Result<Option<StateLocation>> {
    let (value, origin) = match (state, file) {
        (Some(v), _) => (v.to_string(), "--state".to_string()),
        (None, Some(f)) => (
            duet_core::input::read_text(f)
                .map_err(|e| anyhow!("--state-file {}: {e}", f.display()))?,
            format!("--state-file {}", f.display()),
        ),
        (None, None) => match std::env::var(STATE_ENV) {
            Ok(v) => (v, STATE_ENV.to_string()),
            Err(_) => return Ok(None),
        },
    };
    let value = value.trim();
    if value.is_empty() {
        bail!("{origin}: empty; give an SQLite file or a postgres:// URL");
    }
    Ok(Some(StateLocation::parse(value)))
}

/// Whether every address `addr` resolves to is a loopback one (127.0.0.0/8, ::1).
fn is_loopback(addr: &str) -> Result<bool> {
    use std::net::ToSocketAddrs;
    let resolved: Vec<std::net::SocketAddr> = addr
        .to_socket_addrs()
        .with_context(|| format!("--addr {addr}: not an address to listen on"))?
        .collect();
    Ok(!resolved.is_empty() && resolved.iter().all(|a| a.ip().is_loopback()))
}

pub fn run(args: ServeArgs) -> Result<()> {
    let engine: EngineKind = args
        .engine
        .parse()
        .map_err(|e: String| anyhow::anyhow!("--engine: {e}"))?;
    let request_timeout = flags::seconds("--request-timeout", args.request_timeout, flags::WAIT)?;
    if !(args.drain_seconds >= 0.0 && args.drain_seconds <= 3600.0) {
        bail!("--drain-seconds must be a number of seconds from 0 to 3600");
    }
    if args.max_pairs == 0 || args.max_body_bytes == Some(0) {
        bail!("--max-pairs and --max-body-bytes must be positive");
    }
    for (flag, n) in [
        ("--max-infer-rows", args.max_infer_rows),
        ("--max-observations", Some(args.max_observations)),
        (
            "--max-memory-observations",
            Some(args.max_memory_observations),
        ),
        ("--max-workloads", Some(args.max_workloads)),
        ("--max-profiles", Some(args.max_profiles)),
        ("--max-inflight", args.max_inflight),
        ("--max-connections", Some(args.max_connections)),
        ("--max-write-body-bytes", Some(args.max_write_body_bytes)),
        ("--max-inflight-body-bytes", args.max_inflight_body_bytes),
    ] {
        if n == Some(0) {
            bail!("{flag} must be at least 1");
        }
    }
    let header_timeout = flags::seconds("--header-timeout", args.header_timeout, flags::WAIT)?;
    let idle_timeout = flags::seconds("--idle-timeout", args.idle_timeout, flags::WAIT)?;
    let json_logs = match args.log_format.as_str() {
        "text" => false,
        "json" => true,
        other => bail!("--log-format: unknown format `{other}`, expected text or json"),
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    if json_logs {
        subscriber.json().init();
    } else {
        subscriber.init();
    }
    let max_body_bytes = args
        .max_body_bytes
        .unwrap_or_else(|| Config::body_bytes_for(args.max_pairs));
    let config = Config {
        engine,
        state: read_state(args.state.as_deref(), args.state_file.as_deref())?,
        token: read_token(args.token_file.as_deref())?.map(duet_server::auth::Token::from),
        protect_reads: args.protect_reads,
        gpu: args.gpu,
        max_body_bytes,
        max_write_body_bytes: args.max_write_body_bytes,
        max_inflight_body_bytes: args
            .max_inflight_body_bytes
            .unwrap_or_else(|| Config::inflight_body_bytes_for(max_body_bytes)),
        max_pairs: args.max_pairs,
        max_infer_rows: args
            .max_infer_rows
            .unwrap_or_else(|| args.max_pairs.saturating_mul(2)),
        max_observations: args.max_observations,
        max_memory_observations: args.max_memory_observations,
        max_workloads: args.max_workloads,
        max_profiles: args.max_profiles,
        max_inflight: args.max_inflight.unwrap_or_else(duet_server::state::cores),
        max_queue: args.max_queue.unwrap_or_else(duet_server::state::cores),
        header_timeout,
        idle_timeout,
        max_connections: args.max_connections,
        request_timeout,
        model_repo: args.model_repo,
        drain: Duration::from_secs_f64(args.drain_seconds),
        ..Config::new(args.model)
    };
    if config.protect_reads && config.token.is_none() {
        bail!("--protect-reads needs a token (--token-file or {TOKEN_ENV})");
    }
    if config.token.is_none() && !args.allow_open_writes && !is_loopback(&args.addr)? {
        bail!(
            "--addr {}: not a loopback address, and no token protects the write endpoints \
             (registering and deleting workloads, reloading the model). Give a token with \
             --token-file FILE or {TOKEN_ENV}, or accept open writes with --allow-open-writes",
            args.addr
        );
    }
    if let Some(repo) = &config.model_repo
        && !repo.is_dir()
    {
        bail!("--model-repo {}: not a folder", repo.display());
    }
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    runtime.enable_all();
    if let Some(n) = args.workers {
        if n == 0 {
            bail!("--workers must be at least 1");
        }
        runtime.worker_threads(n);
    }
    let runtime = runtime.build().context("cannot start the async runtime")?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(&args.addr)
            .await
            .with_context(|| format!("--addr {}: cannot listen", args.addr))?;
        let grpc = match &args.grpc_addr {
            Some(addr) => Some(
                tokio::net::TcpListener::bind(addr)
                    .await
                    .with_context(|| format!("--grpc-addr {addr}: cannot listen"))?,
            ),
            None => None,
        };
        duet_server::serve_with_grpc(config, listener, grpc)
            .await
            .map_err(|e| anyhow::anyhow!(e))
    })
}
