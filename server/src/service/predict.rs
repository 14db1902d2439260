//! What a prediction request does, whatever carried it: its pairs checked, encoded and run a
//! chunk at a time, a large request split over the cores, and each chunk's predictions written
//! by the transport (`Sink`): JSON items for `POST /v1/predict`, messages for gRPC's
//! `duet.v1.Predictor/Predict`.

use std::sync::atomic::{AtomicBool, Ordering};

use axum::http::StatusCode;
use std::sync::Arc;

use duet_core::api::{GroupPrediction, GroupQuery, PairQuery, PredictRequest, Prediction};
use duet_core::dataset::MAX_GROUP_SIZE;
use duet_model::{LoadedModel, group};

use crate::error::Failure;
use crate::state::{AppState, not_ready};

/// Where one part of a request's predictions goes, a chunk at a time, in order.
pub trait Sink: Default + Send {
    fn push(&mut self, predictions: &[Prediction]) -> Result<(), Failure>;
}

/// Every prediction, as it is.
impl Sink for Vec<Prediction> {
    fn push(&mut self, predictions: &[Prediction]) -> Result<(), Failure> {
        self.extend_from_slice(predictions);
        Ok(())
    }
}

/// The JSON items of a part's predictions, separated by commas (no brackets).
#[derive(Debug, Default)]
pub struct JsonItems(pub Vec<u8>);

impl Sink for JsonItems {
    fn push(&mut self, predictions: &[Prediction]) -> Result<(), Failure> {
        let array = serde_json::to_vec(predictions)
            .map_err(|e| Failure::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
        // A JSON array `[...]`: its items go in, separated by a comma.
        let chunk_items = &array[1..array.len() - 1];
        if !self.0.is_empty() && !chunk_items.is_empty() {
            self.0.push(b',');
        }
        self.0.extend_from_slice(chunk_items);
        Ok(())
    }
}

/// A request's predictions: the model that made them, and the parts' sinks in the order of the
/// request's pairs.
#[derive(Debug)]
pub struct Predicted<S> {
    pub model: Arc<LoadedModel>,
    pub parts: Vec<S>,
}

/// The 413 of a request with more pairs than `--max-pairs`.
pub fn over_pairs(max: usize) -> Failure {
    Failure::field(
        "pairs",
        format!(
            "more than {max} pairs: over the server's limit of {max} per request (--max-pairs)"
        ),
    )
    .with_status(StatusCode::PAYLOAD_TOO_LARGE)
}

/// How many pairs `request` costs: its pairs and every pair within each of its groups (a group
/// of k jobs is answered from its k(k-1)/2 pairs). What `--max-pairs` limits.
pub fn pair_count(request: &PredictRequest) -> usize {
    request.pairs.len()
        + request
            .groups
            .iter()
            .map(|g| group::pairs_in(g.jobs.len()))
            .sum::<usize>()
}

/// Where the pair at `index` of an expanded request came from: `(group, job a, job b)`.
type Origin = (usize, usize, usize);

/// `request`'s pairs (moved, not copied) followed by the pairs within each group (checked
/// first: 3 to `MAX_GROUP_SIZE` jobs, one share per job where shares are given), the groups,
/// and where each of the groups' pairs came from.
fn expand(
    request: PredictRequest,
) -> Result<(PredictRequest, Vec<GroupQuery>, Vec<Origin>), Failure> {
    let PredictRequest {
        gpu,
        mut pairs,
        groups,
    } = request;
    let mut origins = Vec::new();
    for (g, query) in groups.iter().enumerate() {
        check_group(g, query)?;
        for (i, j) in group::pairs_of(query.jobs.len()) {
            let share = |k: usize| query.shares.as_ref().map(|s| s[k]);
            pairs.push(PairQuery {
                a: query.jobs[i].clone(),
                b: query.jobs[j].clone(),
                mode: query.mode,
                share_a: share(i),
                share_b: share(j),
                gpu: query.gpu.clone(),
            });
            origins.push((g, i, j));
        }
    }
    let expanded = PredictRequest {
        gpu,
        pairs,
        groups: Vec::new(),
    };
    Ok((expanded, groups, origins))
}

fn check_group(g: usize, query: &GroupQuery) -> Result<(), Failure> {
    let n = query.jobs.len();
    if !(3..=MAX_GROUP_SIZE).contains(&n) {
        return Err(Failure::field(
            format!("groups[{g}].jobs"),
            format!(
                "{n} jobs: a group holds 3 to {MAX_GROUP_SIZE}{}",
                if n == 2 {
                    "; two jobs are a pair: ask for it in `pairs`"
                } else {
                    ""
                }
            ),
        ));
    }
    if let Some(shares) = &query.shares
        && shares.len() != n
    {
        return Err(Failure::field(
            format!("groups[{g}].shares"),
            format!(
                "{} shares for {n} jobs: give one per job, in their order",
                shares.len()
            ),
        ));
    }
    Ok(())
}

/// A failure about pair `index` of an expanded request, said of the request as the client
/// sent it: a group's pair names the group's job, share, mode or device.
fn failure_of_request(mut failure: Failure, pairs: usize, origins: &[Origin]) -> Failure {
    let Some(field) = failure.field.take() else {
        return failure;
    };
    let renamed = field
        .strip_prefix("pairs[")
        .and_then(|rest| {
            let (index, rest) = rest.split_once(']')?;
            let index: usize = index.parse().ok()?;
            let &(g, a, b) = origins.get(index.checked_sub(pairs)?)?;
            let rest = rest.strip_prefix('.').unwrap_or(rest);
            let (head, tail) = rest.split_once('.').map_or((rest, ""), |(h, t)| (h, t));
            let tail = if tail.is_empty() {
                String::new()
            } else {
                format!(".{tail}")
            };
            Some(match head {
                "a" => format!("groups[{g}].jobs[{a}]{tail}"),
                "b" => format!("groups[{g}].jobs[{b}]{tail}"),
                "share_a" => format!("groups[{g}].shares[{a}]"),
                "share_b" => format!("groups[{g}].shares[{b}]"),
                other => format!("groups[{g}].{other}{tail}"),
            })
        })
        .unwrap_or(field);
    failure.field = Some(renamed);
    failure
}

/// The groups' answers from the predictions of their pairs (`origins` order), in the order of
/// `groups`, by `model` (its group calibration).
fn compose_groups(
    groups: &[GroupQuery],
    origins: &[Origin],
    predictions: &[Prediction],
    model: &LoadedModel,
) -> Result<Vec<GroupPrediction>, Failure> {
    let mut out = Vec::with_capacity(groups.len());
    let mut next = 0;
    for (g, query) in groups.iter().enumerate() {
        let size = query.jobs.len();
        let n = group::pairs_in(size);
        let own = predictions
            .get(next..next + n)
            .filter(|_| origins.get(next).is_some_and(|o| o.0 == g));
        next += n;
        let shift = model.meta.calibration.group_shift(size);
        out.push(
            own.and_then(|p| group::compose(size, p, shift))
                .ok_or_else(|| {
                    Failure::new(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        format!("group {g}: its pairs' predictions are missing"),
                    )
                })?,
        );
    }
    Ok(out)
}

/// A request with groups: its pairs and its groups' pairs run as one request (one model, one
/// registry snapshot), the groups composed from theirs. The serving model's version, the
/// pairs' predictions and the groups'.
pub fn predict_with_groups(
    state: &AppState,
    request: PredictRequest,
    cancelled: &AtomicBool,
) -> Result<(String, Vec<Prediction>, Vec<GroupPrediction>), Failure> {
    let n = request.pairs.len();
    let (expanded, groups, origins) = expand(request)?;
    let predicted = predict::<Vec<Prediction>>(state, &expanded, cancelled)
        .map_err(|f| failure_of_request(f, n, &origins))?;
    let mut all: Vec<Prediction> = predicted.parts.into_iter().flatten().collect();
    let groups = compose_groups(
        &groups,
        &origins,
        &all[n.min(all.len())..],
        &predicted.model,
    )?;
    all.truncate(n);
    Ok((predicted.model.version().to_string(), all, groups))
}

/// Checks, encodes and runs every pair of `request` on the serving model and registry (one
/// snapshot for the whole request), given up at its next chunk of pairs once `cancelled` is
/// set (its client timed out or went away). The pairs limit is the transport's to apply while
/// parsing.
pub fn predict<S: Sink>(
    state: &AppState,
    request: &PredictRequest,
    cancelled: &AtomicBool,
) -> Result<Predicted<S>, Failure> {
    if request.pairs.is_empty() {
        return Err(Failure::field("pairs", "no pairs or groups to predict"));
    }
    let guard = state.read()?;
    let serving = guard.as_ref().ok_or_else(not_ready)?;
    let model = &serving.model;
    let default_gpu = state.config.gpu.as_deref();
    let n = request.pairs.len();
    // A large request is cut into one part per core; each part is encoded, run and written on
    // its own thread, a chunk of pairs at a time (the tensors of one chunk alive at once), and
    // the parts' sinks are joined in order.
    let parts = if n >= PARALLEL_PAIRS {
        crate::state::cores().min(n)
    } else {
        1
    };
    let size = n.div_ceil(parts);
    let part = |range: std::ops::Range<usize>, serial: bool| -> Result<S, Failure> {
        let mut sink = S::default();
        let mut start = range.start;
        while start < range.end {
            if cancelled.load(Ordering::Relaxed) {
                return Err(state.metrics.guards.gave_up());
            }
            let chunk = start..(start + CHUNK_PAIRS).min(range.end);
            start = chunk.end;
            let inputs = duet_model::predict::encode_pairs(
                model,
                &serving.registry,
                request,
                chunk,
                default_gpu,
            )?;
            let kinds =
                duet_model::predict::kinds(&model.meta.spec, &model.meta.calibration, &inputs);
            let mut classes = [0u64; 4];
            for (class, _) in &kinds {
                classes[*class as usize] += 1;
            }
            state.metrics.predicted(classes);
            let outputs = if serial {
                model.engine.run_serial(inputs)
            } else {
                model.engine.run(inputs)
            }
            .map_err(|e| {
                tracing::error!(error = %e, "inference failed");
                Failure::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("inference failed: {e}"),
                )
            })?;
            sink.push(&duet_model::predict::predictions(&kinds, &outputs))?;
        }
        Ok(sink)
    };
    let parts: Vec<S> = if parts == 1 {
        vec![part(0..n, false)?]
    } else {
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..parts)
                .map(|k| {
                    let range = (k * size)..((k + 1) * size).min(n);
                    scope.spawn(move || part(range, true))
                })
                .collect();
            // Joined in order: the first failing part names the first bad pair.
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(state.metrics.guards.panicked("prediction worker")))
                })
                .collect::<Result<Vec<_>, Failure>>()
        })?
    };
    state.metrics.pairs(n);
    Ok(Predicted {
        model: model.clone(),
        parts,
    })
}

/// Pairs encoded, run and written at once: a request's tensors never hold more, and a request
/// given up stops within one chunk's work.
const CHUNK_PAIRS: usize = 2048;

/// Requests with at least this many pairs are split over the cores.
pub const PARALLEL_PAIRS: usize = 2048;
