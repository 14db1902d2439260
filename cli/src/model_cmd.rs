//! `duet model check`: a model folder loaded as the server loads it, then compared with the
//! model it would replace (a server's, or a folder).

use std::collections::BTreeMap;

use anyhow::{Context, Result, bail};
use duet_core::api::RegisteredWorkload;
use duet_model::artifact::ModelMeta;
use duet_model::{EngineKind, LoadedModel, Registry};
use serde::Serialize;

use crate::args::{ModelCheckArgs, ModelCommand};
use crate::flags;
use crate::serve_cmd::read_token;

pub fn run(command: ModelCommand) -> Result<()> {
    match command {
        ModelCommand::Check(args) => check(&args),
    }
}

/// What `duet model check --json` prints.
#[derive(Debug, Serialize)]
struct CheckReport {
    model: String,
    version: String,
    engine: String,
    /// What it was compared with, if anything.
    #[serde(skip_serializing_if = "Option::is_none")]
    against: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    against_version: Option<String>,
    /// Workloads registered on the server that were checked against the new model.
    registered_checked: usize,
    /// Why it cannot replace the serving model; empty when it can.
    problems: Vec<String>,
    /// What loading its registry said (a dataset it names that cannot be read, ...).
    warnings: Vec<String>,
}

fn check(args: &ModelCheckArgs) -> Result<()> {
    let engine: EngineKind = args
        .engine
        .parse()
        .map_err(|e: String| anyhow::anyhow!("--engine: {e}"))?;
    let timeout = flags::seconds("--timeout", args.timeout, flags::WAIT)?;
    let dir = &args.dir;
    let model = LoadedModel::load(dir, engine)
        .map_err(|e| anyhow::anyhow!("{}: the model cannot be served: {e}", dir.display()))?;
    // The registry the server would build from the model's own datasets.
    let (_, warnings) = Registry::build(&model, BTreeMap::new());
    let mut report = CheckReport {
        model: dir.display().to_string(),
        version: model.version().to_string(),
        engine: model.engine.kind().to_string(),
        against: args.against.clone(),
        against_version: None,
        registered_checked: 0,
        // A model that did not fit its own data replaces nothing, whatever it is compared with.
        problems: duet_model::accuracy::fit_problems(&model.meta.metrics),
        warnings,
    };
    if let Some(against) = &args.against {
        let (serving, registered) =
            if against.starts_with("http://") || against.starts_with("https://") {
                let token = read_token(args.token_file.as_deref())?;
                let agent = ureq::AgentBuilder::new().timeout(timeout).build();
                let base = against.trim_end_matches('/');
                let meta = serving_meta(&agent, base, token.as_deref())?;
                let registered = registered_workloads(&agent, base, token.as_deref())?;
                (meta, registered)
            } else {
                let other = LoadedModel::load(std::path::Path::new(against), EngineKind::Burn)
                    .map_err(|e| {
                        anyhow::anyhow!("--against {against}: not a model to compare with: {e}")
                    })?;
                (other.meta, Vec::new())
            };
        report.against_version = Some(serving.version.clone());
        report
            .problems
            .extend(duet_model::compat::replacement_problems(
                &model.meta,
                &serving,
            ));
        for w in registered.iter().filter(|w| w.source == "client") {
            report.registered_checked += 1;
            if let Err(e) = Registry::check(&model, &w.workload, &w.body) {
                report.problems.push(format!(
                    "registered workload `{}`: this model refuses it: {}{}",
                    w.workload,
                    e.field.map(|f| format!("{f}: ")).unwrap_or_default(),
                    e.message
                ));
            }
        }
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "{}: loaded and probed ({} engine), version {}",
            report.model, report.engine, report.version
        );
        for w in &report.warnings {
            println!("warning: {w}");
        }
        if let (Some(against), Some(version)) = (&report.against, &report.against_version) {
            println!(
                "against {against} (version {version}; {} registered workloads checked): {}",
                report.registered_checked,
                if report.problems.is_empty() {
                    "it can replace it"
                } else {
                    "it cannot replace it"
                }
            );
        }
        for p in &report.problems {
            println!("problem: {p}");
        }
    }
    if !report.problems.is_empty() {
        bail!(
            "{}: {} problem(s){}",
            report.model,
            report.problems.len(),
            report
                .against
                .as_deref()
                .map(|a| format!(" against {a}"))
                .unwrap_or_default()
        );
    }
    Ok(())
}

fn get(agent: &ureq::Agent, url: &str, token: Option<&str>) -> Result<serde_json::Value> {
    let mut request = agent.get(url);
    if let Some(t) = token {
        request = request.set("Authorization", &format!("Bearer {t}"));
    }
    match request.call() {
        Ok(r) => r
            .into_json()
            .with_context(|| format!("--against {url}: not a JSON answer")),
        Err(ureq::Error::Status(code, r)) => {
            let body = r.into_string().unwrap_or_default();
            bail!("--against {url}: answered {code}: {body}")
        }
        Err(e) => bail!("--against {url}: {e}"),
    }
}

/// The serving model's `model.json`, from `GET /v1/models`.
fn serving_meta(agent: &ureq::Agent, base: &str, token: Option<&str>) -> Result<ModelMeta> {
    let url = format!("{base}/v1/models");
    let models = get(agent, &url, token)?;
    let meta = models
        .get(0)
        .and_then(|m| m.get("meta"))
        .cloned()
        .with_context(|| format!("--against {url}: no serving model in the answer"))?;
    serde_json::from_value(meta)
        .with_context(|| format!("--against {url}: the serving model's model.json"))
}

/// The workloads registered on the server (`GET /v1/workloads`).
fn registered_workloads(
    agent: &ureq::Agent,
    base: &str,
    token: Option<&str>,
) -> Result<Vec<RegisteredWorkload>> {
    let url = format!("{base}/v1/workloads");
    serde_json::from_value(get(agent, &url, token)?)
        .with_context(|| format!("--against {url}: not a list of workloads"))
}
