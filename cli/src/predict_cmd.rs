//! `duet predict`: a client of a running server for people and scripts.

use std::path::Path;

use anyhow::{Context, Result, anyhow, bail};
use duet_core::api::{GroupQuery, JobRef, PairQuery, PredictRequest};
use duet_core::dataset::Mode;
use duet_core::import::csv::record_line;
use duet_scheduler::client::{PredictClient, Refused};

use crate::args::PredictArgs;
use crate::flags;
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

/// A pair or a group asked for on the command line.
enum Asked {
    Pair(PairQuery),
    Group(GroupQuery),
}

/// Where an asked pair or group came from (`argument `a,b``, `FILE line N`), to name it by when
/// the server refuses it by its place in the request (`pairs[K]`).
type Origin = String;

/// `a,b` (or `a:b`) is a pair; three ids or more, `a,b,c`, a group (no shares: a group under
/// MPS is asked for in a JSON lines file).
fn parse_arg(arg: &str, defaults: &Defaults) -> Result<Asked> {
    let separator = if arg.contains(',') { ',' } else { ':' };
    let ids: Vec<&str> = arg.split(separator).map(str::trim).collect();
    if ids.len() < 2 {
        bail!("`{arg}`: expected workload ids as `a,b` (a pair) or `a,b,c` (a group)");
    }
    if ids.iter().any(|id| id.is_empty()) {
        bail!("`{arg}`: a workload id is empty");
    }
    if let [a, b] = ids.as_slice() {
        return defaults
            .pair(a, b, &format!("pair `{arg}`"))
            .map(Asked::Pair);
    }
    let mode = defaults
        .mode
        .ok_or_else(|| anyhow!("group `{arg}`: no mode; give --mode"))?;
    Ok(Asked::Group(GroupQuery {
        jobs: ids.iter().map(|id| JobRef::workload(*id)).collect(),
        mode,
        shares: None,
        gpu: None,
    }))
}

/// A share given as `origin` (a flag, or a file's column), refused unless a finite number: the
/// server reads a non-finite one as none.
fn finite_share(origin: &str, share: Option<f64>) -> Result<Option<f64>> {
    match share {
        Some(v) if !v.is_finite() => bail!("{origin}: {v} is not a finite number"),
        _ => Ok(share),
    }
}

/// The number in column `what` of `record`; `None` where the column is absent or the cell empty.
fn optional_number(
    record: &csv::StringRecord,
    index: Option<usize>,
    what: &str,
) -> Result<Option<f64>> {
    match index.and_then(|i| record.get(i)).map(str::trim) {
        None | Some("") => Ok(None),
        Some(v) => match v.parse::<f64>() {
            Ok(n) if n.is_finite() => Ok(Some(n)),
            Ok(_) => bail!("column `{what}`: `{v}` is not a finite number"),
            Err(_) => bail!("column `{what}`: `{v}` is not a number"),
        },
    }
}

/// The columns of a pairs CSV file.
const CSV_COLUMNS: [&str; 6] = ["a", "b", "mode", "share_a", "share_b", "gpu"];

fn read_csv(path: &Path, defaults: &Defaults) -> Result<Vec<(PairQuery, Origin)>> {
    let text = duet_core::input::read(path).map_err(|e| anyhow!("{}: {e}", path.display()))?;
    let mut reader = csv::Reader::from_reader(text.as_slice());
    let headers = reader
        .headers()
        .with_context(|| path.display().to_string())?
        .clone();
    let column = |name: &str| headers.iter().position(|h| h.trim() == name);
    let (Some(ia), Some(ib)) = (column("a"), column("b")) else {
        bail!("{}: the header needs columns `a` and `b`", path.display());
    };
    for (k, h) in headers.iter().enumerate() {
        if !CSV_COLUMNS.contains(&h.trim()) {
            bail!(
                "{}: unknown column `{h}` (expected {})",
                path.display(),
                CSV_COLUMNS.join(", ")
            );
        }
        if headers
            .iter()
            .take(k)
            .any(|earlier| earlier.trim() == h.trim())
        {
            bail!(
                "{}: column `{}` appears twice in the header",
                path.display(),
                h.trim()
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
    for record in reader.records() {
        let record = record.map_err(|e| match e.position() {
            Some(p) => anyhow!("{} line {}: {e}", path.display(), record_line(&text, p)),
            None => anyhow!("{}: {e}", path.display()),
        })?;
        // The line the record starts on, blank lines and quoted line breaks counted.
        let line = record.position().map_or(0, |p| record_line(&text, p));
        let at = |e: anyhow::Error| anyhow!("{} line {line}: {e}", path.display());
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
        pairs.push((pair, format!("{} line {line}", path.display())));
    }
    Ok(pairs)
}

/// One `/v1/predict` pair object per line, or a group object (one with `jobs`).
fn read_jsonl(path: &Path) -> Result<Vec<(Asked, Origin)>> {
    let text = duet_core::input::read_text(path).map_err(|e| anyhow!("{}: {e}", path.display()))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(n, l)| {
            let origin = format!("{} line {}", path.display(), n + 1);
            let at = |e: serde_json::Error| anyhow!("{origin}: {e}");
            let value: serde_json::Value = serde_json::from_str(l).map_err(at)?;
            let asked = if value.get("jobs").is_some() {
                serde_json::from_value(value).map(Asked::Group).map_err(at)
            } else {
                serde_json::from_value(value).map(Asked::Pair).map_err(at)
            }?;
            Ok((asked, origin))
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
        share_a: finite_share("--share-a", args.share_a)?,
        share_b: finite_share("--share-b", args.share_b)?,
    };
    let timeout = flags::seconds("--timeout", args.timeout, flags::WAIT)?;
    let mut asked: Vec<(Asked, Origin)> = args
        .pairs
        .iter()
        .map(|p| Ok((parse_arg(p, &defaults)?, format!("argument `{p}`"))))
        .collect::<Result<_>>()?;
    if let Some(file) = &args.file {
        let is_jsonl = file
            .extension()
            .is_some_and(|e| e == "jsonl" || e == "ndjson");
        if is_jsonl {
            asked.extend(read_jsonl(file)?);
        } else {
            asked.extend(
                read_csv(file, &defaults)?
                    .into_iter()
                    .map(|(p, origin)| (Asked::Pair(p), origin)),
            );
        }
    }
    if asked.is_empty() {
        bail!("nothing to predict: give `a,b` (or `a,b,c`) arguments or --file");
    }
    let (mut pairs, mut groups) = (Vec::new(), Vec::new());
    let (mut pair_origins, mut group_origins) = (Vec::new(), Vec::new());
    for (a, origin) in asked {
        match a {
            Asked::Pair(p) => {
                pairs.push(p);
                pair_origins.push(origin);
            }
            Asked::Group(g) => {
                groups.push(g);
                group_origins.push(origin);
            }
        }
    }
    let request = PredictRequest {
        gpu: args.gpu.clone(),
        pairs,
        groups,
    };
    let client = PredictClient::new(
        &args.server,
        read_token(args.token_file.as_deref())?,
        timeout,
    );
    let answer = client
        .predict(&request)
        .map_err(|e| origin_of_refusal(e, &pair_origins, &group_origins))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&answer)?);
        return Ok(());
    }
    println!("model {}", answer.model_version);
    if !request.pairs.is_empty() {
        print_pairs(&request, &answer);
    }
    for (k, (group, g)) in request.groups.iter().zip(&answer.groups).enumerate() {
        println!(
            "\ngroup {k} ({} jobs, {}): feasible {}, combined {:.3}, p90 {} from {}",
            group.jobs.len(),
            group.mode,
            if g.feasible { "yes" } else { "no" },
            g.combined,
            g.calibration.as_str(),
            if g.p90_groups == 0 {
                "the pairs' p90s composed".to_string()
            } else {
                format!("{} measured groups", g.p90_groups)
            }
        );
        println!(
            "  {:<24} {:>8} {:>9} {:>13} {:>8}",
            "job", "speed", "slowdown", "p90 slowdown", "measured"
        );
        for (job, p) in group.jobs.iter().zip(&g.jobs) {
            println!(
                "  {:<24} {:>8.3} {:>9.3} {:>13.3} {:>8}",
                name(job),
                p.speed,
                p.slowdown,
                p.slowdown_p90,
                measured(p.measured)
            );
        }
    }
    Ok(())
}

/// A refusal that blames `pairs[K]` or `groups[K]` of the request, with where that pair or
/// group came from; any other error as it is.
fn origin_of_refusal(
    error: anyhow::Error,
    pair_origins: &[Origin],
    group_origins: &[Origin],
) -> anyhow::Error {
    let Some(field) = error.downcast_ref::<Refused>().and_then(Refused::field) else {
        return error;
    };
    let origin = [("pairs[", pair_origins), ("groups[", group_origins)]
        .into_iter()
        .find_map(|(prefix, origins)| {
            let rest = field.strip_prefix(prefix)?;
            let k: usize = rest[..rest.find(']')?].parse().ok()?;
            Some((&prefix[..prefix.len() - 1], k, origins.get(k)?))
        });
    match origin {
        Some((list, k, origin)) => anyhow!("{error} ({list}[{k}] is {origin})"),
        None => error,
    }
}

/// The pair settings a job was measured in for the model's training, or `-` where the model
/// does not record them.
fn measured(n: Option<u32>) -> String {
    n.map_or_else(|| "-".to_string(), |n| n.to_string())
}

/// A job as the tables name it: its id, or `(features)` for one given inline.
fn name(job: &JobRef) -> String {
    job.workload.clone().unwrap_or_else(|| "(features)".into())
}

fn print_pairs(request: &PredictRequest, answer: &duet_core::api::PredictResponse) {
    println!(
        "{:<24} {:<24} {:>8} {:>8} {:>8} {:>10} {:>10} {:>9} {:>12} {:>10}",
        "a",
        "b",
        "feasible",
        "speed_a",
        "speed_b",
        "p90 slow a",
        "p90 slow b",
        "combined",
        "p90 class",
        "measured"
    );
    for (pair, p) in request.pairs.iter().zip(&answer.predictions) {
        println!(
            "{:<24} {:<24} {:>8} {:>8.3} {:>8.3} {:>10.3} {:>10.3} {:>9.3} {:>12} {:>10}",
            name(&pair.a),
            name(&pair.b),
            if p.feasible { "yes" } else { "no" },
            p.speed_a,
            p.speed_b,
            p.slowdown_a_p90,
            p.slowdown_b_p90,
            p.combined,
            p.calibration.as_str(),
            format!("{}/{}", measured(p.measured_a), measured(p.measured_b))
        );
    }
}
