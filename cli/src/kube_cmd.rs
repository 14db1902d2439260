//! `duet extender` and `duet schedule`.

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use duet_kube::devices::DeviceMap;
use duet_kube::extender::ExtenderConfig;
use duet_kube::listen::Limits;
use duet_kube::schedule::ScheduleConfig;
use duet_kube::watch::View;
use duet_scheduler::pricing::PricingConfig;

use crate::args::{ExtenderArgs, KubeArgs, ScheduleArgs};
use crate::flags;
use crate::serve_cmd::read_token;

fn address(flag: &str, addr: &str) -> Result<SocketAddr> {
    addr.to_socket_addrs()
        .with_context(|| format!("{flag} {addr}"))?
        .next()
        .with_context(|| format!("{flag} {addr}: no address"))
}

fn logs() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("the async runtime")
}

/// The mapping and the server's token, checked before anything starts.
fn common(args: &KubeArgs) -> Result<(View, Option<String>, Duration)> {
    if !(2..=duet_core::dataset::MAX_GROUP_SIZE).contains(&args.gpu_jobs) {
        bail!(
            "--gpu-jobs {}: a GPU holds 2 to {} pods (the largest group duet answers)",
            args.gpu_jobs,
            duet_core::dataset::MAX_GROUP_SIZE
        );
    }
    let map = DeviceMap::read(&args.devices)?;
    let token = read_token(args.token_file.as_deref())?;
    let timeout = flags::seconds("--predict-timeout", args.predict_timeout, flags::WAIT)?;
    Ok((View::new(map), token, timeout))
}

/// The extender's limits, each checked (a value that cannot work is refused naming its flag).
fn limits(args: &ExtenderArgs) -> Result<Limits> {
    let max_body_bytes = flags::positive("--max-body-bytes", args.max_body_bytes)?;
    let max_inflight_body_bytes = match args.max_inflight_body_bytes {
        None => max_body_bytes.saturating_mul(4),
        Some(n) if n < max_body_bytes => bail!(
            "--max-inflight-body-bytes {n}: below --max-body-bytes {max_body_bytes}, a body at \
             the limit could never be held"
        ),
        Some(n) => n,
    };
    Ok(Limits {
        header_timeout: flags::seconds("--header-timeout", args.header_timeout, flags::WAIT)?,
        idle_timeout: flags::seconds("--idle-timeout", args.idle_timeout, flags::WAIT)?,
        request_timeout: flags::seconds("--request-timeout", args.request_timeout, flags::WAIT)?,
        max_connections: flags::positive("--max-connections", args.max_connections)?,
        max_body_bytes,
        max_inflight_body_bytes,
        max_nodes: flags::positive("--max-nodes", args.max_nodes)?,
    })
}

pub fn extender(args: ExtenderArgs) -> Result<()> {
    let limits = limits(&args)?;
    for name in &args.bind_schedulers {
        // A schedulerName holds no spaces: one with them would refuse every bind.
        if flags::not_empty("--bind-scheduler", name)?.contains(char::is_whitespace) {
            bail!("--bind-scheduler: `{name}` is not a scheduler name (it holds spaces)");
        }
    }
    let (view, token, predict_timeout) = common(&args.kube)?;
    let config = ExtenderConfig {
        listen: address("--listen", &args.listen)?,
        predictor: args.kube.predictor.clone(),
        token,
        predict_timeout,
        limits,
        gpu_jobs: args.kube.gpu_jobs,
        bind_schedulers: args.bind_schedulers.clone(),
    };
    logs();
    runtime()?.block_on(async {
        let kube = duet_kube::client(args.kube.kubeconfig.as_deref()).await?;
        duet_kube::extender::serve(config, view, kube).await
    })
}

/// The most waiting pods `duet schedule --window` lets one round weigh.
const MAX_WINDOW: usize = 65_536;

pub fn schedule(args: ScheduleArgs) -> Result<()> {
    let (view, token, predict_timeout) = common(&args.kube)?;
    flags::not_empty("--name", &args.name)?;
    if !(1..=MAX_WINDOW).contains(&args.window) {
        bail!(
            "--window: {} waiting pods a round; give 1 to {MAX_WINDOW}",
            args.window
        );
    }
    let config = ScheduleConfig {
        name: args.name.clone(),
        predictor: args.kube.predictor.clone(),
        token,
        predict_timeout,
        interval: flags::seconds("--interval", args.interval, flags::WAIT)?,
        once: args.once,
        compare: args.compare,
        listen: args
            .listen
            .as_deref()
            .map(|l| address("--listen", l))
            .transpose()?,
        pricing: PricingConfig {
            gpu_jobs: args.kube.gpu_jobs,
            window: args.window,
            ..PricingConfig::default()
        },
    };
    logs();
    runtime()?.block_on(async {
        let kube = duet_kube::client(args.kube.kubeconfig.as_deref()).await?;
        duet_kube::schedule::run(config, view, kube).await
    })
}
