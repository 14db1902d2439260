//! `duet observe`: reports what the cluster measured to a running server, in batches. Every line
//! is read and checked before anything is sent; the server's refusals are named by file line.

use std::time::Duration;

use anyhow::{Result, anyhow, bail};
use duet_core::api::{Observation, ObservationBatch};
use duet_scheduler::client::PredictClient;

use crate::args::ObserveArgs;
use crate::flags;
use crate::serve_cmd::read_token;

pub fn run(args: &ObserveArgs) -> Result<()> {
    if args.batch == 0 {
        bail!("--batch must be at least 1");
    }
    let timeout = flags::seconds("--timeout", args.timeout, flags::WAIT)?;
    let path = &args.file;
    let text = duet_core::input::read_text(path).map_err(|e| anyhow!("{}: {e}", path.display()))?;
    let mut lines = Vec::new();
    let mut observations = Vec::new();
    let mut bad = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let mut de = serde_json::Deserializer::from_str(line);
        let parsed = serde_path_to_error::deserialize::<_, Observation>(&mut de)
            .map_err(|e| {
                let field = e.path().to_string();
                let at = if field == "." {
                    String::new()
                } else {
                    format!(" field `{field}`")
                };
                format!("{at}: {}", e.into_inner())
            })
            // One observation per line: anything after it is an error too.
            .and_then(|o| de.end().map(|()| o).map_err(|e| format!(": {e}")));
        match parsed {
            Ok(o) => {
                lines.push(n + 1);
                observations.push(o);
            }
            Err(why) => bad.push(format!("{} line {}{why}", path.display(), n + 1)),
        }
    }
    if !bad.is_empty() {
        let shown = bad
            .iter()
            .take(10)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n  ");
        bail!(
            "{} of its lines are not observations; nothing was sent:\n  {shown}",
            bad.len()
        );
    }
    if observations.is_empty() {
        bail!("{}: no observations", path.display());
    }
    let client = PredictClient::new(
        &args.server,
        read_token(args.token_file.as_deref())?,
        timeout,
    )
    .with_retries(4, Duration::from_millis(200));
    let (mut stored, mut duplicates, mut refused) = (0, 0, Vec::new());
    let mut refused_count = 0;
    for (k, chunk) in observations.chunks(args.batch).enumerate() {
        let offset = k * args.batch;
        let answer = client
            .observe(&ObservationBatch {
                observations: chunk.to_vec(),
            })
            .map_err(|e| {
                anyhow!(
                    "{e} (lines {} to {}; the batches before were stored)",
                    lines[offset],
                    lines[offset + chunk.len() - 1]
                )
            })?;
        if args.json {
            println!("{}", serde_json::to_string(&answer)?);
        }
        stored += answer.stored.len();
        duplicates += answer.duplicates.len();
        // A batch the server could not read (a field over its limits): refused whole, with no
        // observation's own refusal; its error names the field by its index in the batch.
        if answer.rejected.is_empty()
            && let Some(error) = &answer.error
        {
            let field = answer.field.as_deref().unwrap_or("");
            let line = batch_index(field)
                .and_then(|i| lines.get(offset + i))
                .map_or_else(String::new, |l| format!(" line {l}"));
            refused_count += chunk.len();
            refused.push(format!(
                "{}{line}: {field}: {error} (the whole batch of lines {} to {} was refused; none \
                 of it was stored)",
                path.display(),
                lines[offset],
                lines[offset + chunk.len() - 1]
            ));
            continue;
        }
        refused_count += answer.rejected.len();
        for r in answer.rejected {
            let line = lines.get(offset + r.index).copied().unwrap_or(0);
            refused.push(format!(
                "{} line {line}: {}: {}",
                path.display(),
                r.field,
                r.error
            ));
        }
    }
    if !args.json {
        println!(
            "{stored} stored, {duplicates} stored before (unchanged), {refused_count} refused"
        );
    }
    if refused.is_empty() {
        Ok(())
    } else {
        bail!(
            "{refused_count} observations refused, nothing of them stored (the others were):\n  {}",
            refused.join("\n  ")
        )
    }
}

/// The index `K` of a field `observations[K]...`, as the server names a field of a batch.
fn batch_index(field: &str) -> Option<usize> {
    field
        .strip_prefix("observations[")?
        .split_once(']')?
        .0
        .parse()
        .ok()
}
