//! `duet predict`: a client of a running server for people and scripts.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use duet_core::api::{JobRef, PairQuery, PredictRequest};
use duet_core::dataset::Mode;
use duet_scheduler::client::PredictClient;

use crate::args::PredictArgs;
use crate::serve_cmd::read_token;

/// The defaults pairs fall back on.
struct Defaults {
    mode: Option<Mode>,
    share_a: Option<f64>,
    share_b: Option<f64>,
}

impl Defaults {
    fn pair(&self, a: &str, b: &str, origin: &str) -> Result<PairQuery> {
        let mode = self
            .mode
            .ok_or_else(|| anyhow!("{origin}: no mode; give --mode or a `mode` column"))?;
        Ok(PairQuery {
            a: JobRef::workload(a),
            b: JobRef::workload(b),
            mode,
            share_a: self.share_a,
            share_b: self.share_b,
            gpu: None,
        })
    }
}

fn parse_arg_pair(arg: &str, defaults: &Defaults) -> Result<PairQuery> {
    let (a, b) = arg
        .split_once(',')
        .or_else(|| arg.split_once(':'))
        .ok_or_else(|| anyhow!("pair `{arg}`: expected two workload ids as `a,b`"))?;
    let (a, b) = (a.trim(), b.trim());
    if a.is_empty() || b.is_empty() {
        bail!("pair `{arg}`: a workload id is empty");
    }
    defaults.pair(a, b, &format!("pair `{arg}`"))
}

fn optional_number(
    record: &csv::StringRecord,
    index: Option<usize>,
    what: &str,
) -> Result<Option<f64>> {
    match index.and_then(|i| record.get(i)).map(str::trim) {
        None | Some("") => Ok(None),
        Some(v) => v
            .parse::<f64>()
            .map(Some)
            .map_err(|_| anyhow!("column `{what}`: `{v}` is not a number")),
    }
}

fn read_csv(path: &Path, defaults: &Defaults) -> Result<Vec<PairQuery>> {
    let mut reader = csv::Reader::from_path(path).with_context(|| path.display().to_string())?;
    let headers = reader
        .headers()
        .with_context(|| path.display().to_string())?
        .clone();
    let column = |name: &str| headers.iter().position(|h| h.trim() == name);
    let (Some(ia), Some(ib)) = (column("a"), column("b")) else {
        bail!("{}: the header needs columns `a` and `b`", path.display());
    };
    for h in &headers {
        if !["a", "b", "mode", "share_a", "share_b", "gpu"].contains(&h.trim()) {
            bail!(
                "{}: unknown column `{h}` (expected a, b, mode, share_a, share_b, gpu)",
                path.display()
            );
        }
    }
    let (imode, isa, isb, igpu) = (
        column("mode"),
        column("share_a"),
        column("share_b"),
        column("gpu"),
    );
    let mut pairs = Vec::new();
    for (n, record) in reader.records().enumerate() {
        let line = n + 2;
        let at = |e: anyhow::Error| anyhow!("{} line {line}: {e}", path.display());
        let record = record.map_err(|e| at(e.into()))?;
        let a = record.get(ia).unwrap_or("").trim();
        let b = record.get(ib).unwrap_or("").trim();
        if a.is_empty() || b.is_empty() {
            return Err(at(anyhow!("column `a` or `b` is empty")));
        }
        let mode = match imode.and_then(|i| record.get(i)).map(str::trim) {
            Some(m) if !m.is_empty() => Some(
                m.parse::<Mode>()
                    .map_err(|e| at(anyhow!("column `mode`: {e}")))?,
            ),
            _ => defaults.mode,
        };
        let row = Defaults {
            mode,
            share_a: optional_number(&record, isa, "share_a")
                .map_err(at)?
                .or(defaults.share_a),
            share_b: optional_number(&record, isb, "share_b")
                .map_err(at)?
                .or(defaults.share_b),
        };
        let mut pair = row.pair(a, b, &format!("{} line {line}", path.display()))?;
        pair.gpu = igpu
            .and_then(|i| record.get(i))
            .map(str::trim)
            .filter(|g| !g.is_empty())
            .map(str::to_string);
        pairs.push(pair);
    }
    Ok(pairs)
}

fn read_jsonl(path: &Path) -> Result<Vec<PairQuery>> {
    let text = std::fs::read_to_string(path).with_context(|| path.display().to_string())?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(n, l)| {
            serde_json::from_str(l).map_err(|e| anyhow!("{} line {}: {e}", path.display(), n + 1))
        })
        .collect()
}

pub fn run(args: PredictArgs) -> Result<()> {
    let mode = args
        .mode
        .as_deref()
        .map(str::parse::<Mode>)
        .transpose()
        .map_err(|e| anyhow!("--mode: {e}"))?;
    let defaults = Defaults {
        mode,
        share_a: args.share_a,
        share_b: args.share_b,
    };
    let mut pairs: Vec<PairQuery> = args
        .pairs
        .iter()
        .map(|p| parse_arg_pair(p, &defaults))
        .collect::<Result<_>>()?;
    if let Some(file) = &args.file {
        let is_jsonl = file
            .extension()
            .is_some_and(|e| e == "jsonl" || e == "ndjson");
        pairs.extend(if is_jsonl {
            read_jsonl(file)?
        } else {
            read_csv(file, &defaults)?
        });
    }
    if pairs.is_empty() {
        bail!("no pairs: give `a,b` arguments or --file");
    }
    let request = PredictRequest {
        gpu: args.gpu.clone(),
        pairs,
        groups: Vec::new(),
    };
    let client = PredictClient::new(
        &args.server,
        read_token(args.token_file.as_deref())?,
        Duration::from_secs_f64(args.timeout.max(0.001)),
    );
    let answer = client.predict(&request)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&answer)?);
        return Ok(());
    }
    println!("model {}", answer.model_version);
    println!(
        "{:<24} {:<24} {:>8} {:>8} {:>8} {:>10} {:>10} {:>9}",
        "a", "b", "feasible", "speed_a", "speed_b", "p90 slow a", "p90 slow b", "combined"
    );
    for (pair, p) in request.pairs.iter().zip(&answer.predictions) {
        let name = |j: &JobRef| j.workload.clone().unwrap_or_else(|| "(features)".into());
        println!(
            "{:<24} {:<24} {:>8} {:>8.3} {:>8.3} {:>10.3} {:>10.3} {:>9.3}",
            name(&pair.a),
            name(&pair.b),
            if p.feasible { "yes" } else { "no" },
            p.speed_a,
            p.speed_b,
            p.slowdown_a_p90,
            p.slowdown_b_p90,
            p.combined
        );
    }
    Ok(())
}
