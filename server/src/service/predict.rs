//! What a prediction request does, whatever carried it: its pairs checked, encoded and run a
//! chunk at a time, a large request split over the cores, and each chunk's predictions written
//! by the transport (`Sink`): JSON items for `POST /v1/predict`, messages for gRPC's
//! `duet.v1.Predictor/Predict`.

use std::sync::atomic::{AtomicBool, Ordering};

use axum::http::StatusCode;
use std::sync::Arc;

use duet_core::api::{GroupPrediction, GroupQuery, PairQuery, PredictRequest, Prediction};
use duet_core::dataset::{MAX_GROUP_SIZE, Mode};
use duet_model::{LoadedModel, group};
use std::collections::HashMap;
use std::collections::hash_map::Entry;

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
        let array = array_of(predictions)?;
        // A JSON array `[...]`: its items go in, separated by a comma.
        let chunk_items = &array[1..array.len() - 1];
        if !self.0.is_empty() && !chunk_items.is_empty() {
            self.0.push(b',');
        }
        self.0.extend_from_slice(chunk_items);
        Ok(())
    }
}

/// `items` as the JSON array serde writes.
fn array_of<T: serde::Serialize>(items: &[T]) -> Result<Vec<u8>, Failure> {
    serde_json::to_vec(items)
        .map_err(|e| Failure::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))
}

/// What a prediction leaves to free: its parsed request and what was built from it (and, for
/// a large request, its body). Freeing a large inline request's feature maps takes about a
/// tenth of its time (BENCHMARKS.md, "A request freed after its answer"), so the transports
/// free them after the answer is handed over; another caller frees them where it drops this.
/// Dropped, it frees what it keeps, then, where a mark is set (`trim_above`), gives the
/// allocator's free memory back past it (`crate::memory`): also where its request was given
/// up, so a request whose client went away is freed and trimmed where its work ends.
#[derive(Default)]
pub struct Spent {
    kept: Vec<Box<dyn Send>>,
    mark: Option<u64>,
}

impl std::fmt::Debug for Spent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Spent({} values, mark {:?})", self.kept.len(), self.mark)
    }
}

impl Spent {
    /// `value`, freed with the rest.
    pub fn keep<T: Send + 'static>(&mut self, value: T) {
        self.kept.push(Box::new(value));
    }

    /// Once freed, the allocator trimmed where the process holds more than `mark` bytes
    /// resident (`crate::memory::trim_above`).
    pub fn trim_above(&mut self, mark: u64) {
        self.mark = Some(mark);
    }

    /// Frees it on a blocking thread of the runtime, off the caller's path (its answer's).
    pub fn free_later(self) {
        if self.kept.is_empty() && self.mark.is_none() {
            return;
        }
        tokio::task::spawn_blocking(move || drop(self));
    }
}

impl Drop for Spent {
    fn drop(&mut self) {
        drop(std::mem::take(&mut self.kept));
        if let Some(mark) = self.mark {
            crate::memory::trim_above(mark);
        }
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

/// Where one pair of a group (in `group::pairs_of` order) reads its prediction: the index of a
/// distinct pair among the groups' pairs, and whether that pair was asked the other way round.
type Read = (usize, bool);

/// A distinct pair of two registered workloads under one device, mode and shares: the pairs a
/// request's groups share (a pricing round asks the same residents beside many newcomers) are
/// encoded and run once. Workloads and devices by their number in the request (`Interned`).
type PairKey = (u32, u32, u32, Mode, Option<u64>, Option<u64>);

/// Numbers for the strings of one request, each hashed once per group rather than per pair.
#[derive(Default)]
struct Interned<'r>(HashMap<&'r str, u32>);

impl<'r> Interned<'r> {
    fn number(&mut self, text: &'r str) -> u32 {
        let next = u32::try_from(self.0.len()).unwrap_or(u32::MAX);
        *self.0.entry(text).or_insert(next)
    }
}

/// `request` expanded for its groups.
struct Expanded {
    /// The request's pairs (moved, not copied) followed by the distinct pairs within its
    /// groups, in the order they first appear.
    request: PredictRequest,
    groups: Vec<GroupQuery>,
    /// Where each distinct group pair first came from.
    origins: Vec<Origin>,
    /// Every group's pairs, group after group, each as the distinct pair it reads.
    reads: Vec<Read>,
}

/// `request`'s pairs followed by the distinct pairs within its groups (checked first: 3 to
/// `MAX_GROUP_SIZE` jobs, one share per job where shares are given), but for the groups whose
/// size the model's network answers itself (`network`), which have no pairs. Two group pairs
/// are one where both jobs are registered workloads and the device, mode and shares agree, in
/// either order; a job given by its features is its own pair's.
fn expand(request: PredictRequest, network: impl Fn(usize) -> bool) -> Result<Expanded, Failure> {
    let PredictRequest {
        gpu,
        mut pairs,
        groups,
    } = request;
    for (g, query) in groups.iter().enumerate() {
        check_group(g, query)?;
    }
    let mut origins = Vec::new();
    let mut reads = Vec::with_capacity(groups.iter().map(|g| group::pairs_in(g.jobs.len())).sum());
    let mut seen: HashMap<PairKey, (usize, bool)> = HashMap::new();
    let mut names = Interned::default();
    for (g, query) in groups.iter().enumerate() {
        if network(query.jobs.len()) {
            continue;
        }
        // A job given by its registered id alone, by number; a job with features, none.
        let mut numbers = [None; MAX_GROUP_SIZE];
        for (k, job) in query.jobs.iter().enumerate() {
            numbers[k] = job.workload_id().map(|id| names.number(id));
        }
        let gpu = query.gpu.as_deref().map_or(u32::MAX, |d| names.number(d));
        for (i, j) in group::pairs_of(query.jobs.len()) {
            // The pair's key in a canonical order of its two jobs (number, then share), so a
            // pair asked either way round is one lookup; `swapped` where the group asks it the
            // other way round from the key.
            let key = numbers[i].zip(numbers[j]).map(|(x, y)| {
                let x = (x, query.share(i).map(f64::to_bits));
                let y = (y, query.share(j).map(f64::to_bits));
                let swapped = y < x;
                let (first, second) = if swapped { (y, x) } else { (x, y) };
                let key: PairKey = (first.0, second.0, gpu, query.mode, first.1, second.1);
                (key, swapped)
            });
            if let Some((key, swapped)) = key {
                match seen.entry(key) {
                    Entry::Occupied(e) => {
                        // The distinct pair runs as its first asker ordered it.
                        let (index, first_swapped) = *e.get();
                        reads.push((index, swapped != first_swapped));
                        continue;
                    }
                    Entry::Vacant(e) => {
                        e.insert((origins.len(), swapped));
                    }
                }
            }
            reads.push((origins.len(), false));
            origins.push((g, i, j));
        }
    }
    for &(g, i, j) in &origins {
        let query = &groups[g];
        pairs.push(PairQuery {
            a: query.jobs[i].clone(),
            b: query.jobs[j].clone(),
            mode: query.mode,
            share_a: query.share(i),
            share_b: query.share(j),
            gpu: query.gpu.clone(),
        });
    }
    let request = PredictRequest {
        gpu,
        pairs,
        groups: Vec::new(),
    };
    Ok(Expanded {
        request,
        groups,
        origins,
        reads,
    })
}

/// A group's own rules (`duet_model::predict::check_group`), its field said of the request.
fn check_group(g: usize, query: &GroupQuery) -> Result<(), Failure> {
    duet_model::predict::check_group(query).map_err(|e| {
        let mut failure = Failure::from(e);
        failure.field = failure.field.map(|f| format!("groups[{g}].{f}"));
        failure
    })
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
            Some(format!(
                "groups[{g}].{}",
                duet_model::predict::field_in_group(rest, a, b)
            ))
        })
        .unwrap_or(field);
    failure.field = Some(renamed);
    failure
}

/// The groups' answers, in the order of `groups`: those the network answered (`answered`, in
/// order), the others from the predictions of their distinct pairs (`distinct`, read as `reads`
/// says), by `model` (its group calibration, and the group effects of its workloads on each
/// group's device: the group's, else `default_gpu`, else the model's only one).
fn compose_groups(
    groups: &[GroupQuery],
    reads: &[Read],
    distinct: &[Prediction],
    mut answered: impl Iterator<Item = GroupPrediction>,
    model: &LoadedModel,
    default_gpu: Option<&str>,
) -> Result<Vec<GroupPrediction>, Failure> {
    let mut out = Vec::with_capacity(groups.len());
    let mut own = Vec::with_capacity(group::pairs_in(MAX_GROUP_SIZE));
    let mut effects = Vec::with_capacity(MAX_GROUP_SIZE);
    let calibration = &model.meta.calibration;
    let mut next = 0;
    for (g, query) in groups.iter().enumerate() {
        let size = query.jobs.len();
        if calibration.network_answers(size) {
            out.push(answered.next().ok_or_else(|| {
                Failure::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("group {g}: the network's answer is missing"),
                )
            })?);
            continue;
        }
        let n = group::pairs_in(size);
        own.clear();
        for &(index, swapped) in reads.get(next..next + n).unwrap_or_default() {
            if let Some(&p) = distinct.get(index) {
                own.push(if swapped { p.swapped() } else { p });
            }
        }
        next += n;
        let shift = calibration.group_shift(size);
        duet_model::predict::group_effects(model, query, default_gpu, &mut effects);
        out.push(group::compose(size, &own, shift, &effects).ok_or_else(|| {
            Failure::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("group {g}: its pairs' predictions are missing"),
            )
        })?);
    }
    Ok(out)
}

/// A request with groups: its pairs and its groups' pairs run as one request (one model, one
/// registry snapshot), the groups composed from theirs. The serving model's version, the
/// pairs' predictions and the groups'; the request, expanded, goes to `spent`.
pub fn predict_with_groups(
    state: &AppState,
    request: PredictRequest,
    cancelled: &AtomicBool,
    spent: &mut Spent,
) -> Result<(String, Vec<Prediction>, Vec<GroupPrediction>), Failure> {
    let n = request.pairs.len();
    // One snapshot of model and registry for the pairs and every group.
    let serving = state.read()?.ok_or_else(not_ready)?;
    let model = &serving.model;
    let calibration = &model.meta.calibration;
    let expanded = expand(request, |size| calibration.network_answers(size))?;
    let default_gpu = expanded
        .request
        .gpu
        .as_deref()
        .or(state.config.gpu.as_deref());
    let learned: Vec<(usize, &GroupQuery)> = expanded
        .groups
        .iter()
        .enumerate()
        .filter(|(_, q)| calibration.network_answers(q.jobs.len()))
        .collect();
    let answered = network_groups(state, &serving, &learned, default_gpu, cancelled)?;
    let mut all: Vec<Prediction> = if expanded.request.pairs.is_empty() {
        Vec::new()
    } else {
        predict_on::<Vec<Prediction>>(state, &serving, &expanded.request, cancelled)
            .map_err(|f| failure_of_request(f, n, &expanded.origins))?
            .parts
            .into_iter()
            .flatten()
            .collect()
    };
    let groups = compose_groups(
        &expanded.groups,
        &expanded.reads,
        &all[n.min(all.len())..],
        answered.into_iter(),
        model,
        default_gpu,
    )?;
    state.metrics.predicted_groups(
        groups
            .iter()
            .map(|g| (g.calibration, g.composition.as_str())),
    );
    all.truncate(n);
    spent.keep(expanded);
    Ok((model.version().to_string(), all, groups))
}

/// The groups the network answers itself (`learned`: each with its index in the request), a
/// chunk of groups at a time, the chunks over the cores for a large request, each given up
/// once `cancelled` is set.
fn network_groups(
    state: &AppState,
    serving: &crate::state::Serving,
    learned: &[(usize, &GroupQuery)],
    default_gpu: Option<&str>,
    cancelled: &AtomicBool,
) -> Result<Vec<GroupPrediction>, Failure> {
    if learned.is_empty() {
        return Ok(Vec::new());
    }
    let chunk =
        |part: &[(usize, &GroupQuery)], serial: bool| -> Result<Vec<GroupPrediction>, Failure> {
            let mut out = Vec::with_capacity(part.len());
            for groups in part.chunks(CHUNK_PAIRS / 2) {
                if cancelled.load(Ordering::Relaxed) {
                    return Err(state.metrics.guards.gave_up());
                }
                let queries: Vec<&GroupQuery> = groups.iter().map(|(_, q)| *q).collect();
                let answers = duet_model::predict::predict_network_groups(
                    &serving.model,
                    &serving.registry,
                    &queries,
                    default_gpu,
                    &|k| format!("groups[{}].", groups[k].0),
                    serial,
                )
                .map_err(Failure::from)?;
                out.extend(answers);
            }
            Ok(out)
        };
    let jobs: usize = learned.iter().map(|(_, q)| q.jobs.len()).sum();
    if jobs < PARALLEL_PAIRS * 2 {
        return chunk(learned, false);
    }
    let parts = crate::state::cores().min(learned.len());
    let size = learned.len().div_ceil(parts);
    let chunks: Vec<&[(usize, &GroupQuery)]> = learned.chunks(size).collect();
    // One part per core, each forward pass on its part's thread, as a part of pairs runs.
    in_parts(state, chunks.len(), |k| chunk(chunks[k], chunks.len() > 1))
        .map(|parts| parts.into_iter().flatten().collect())
}

/// `items` as the JSON array serde writes, written on one thread per core from
/// [`PARALLEL_PAIRS`] items (a large request's groups and pairs: writing them is most of what
/// answering groups the network runs once costs), the parts' items joined in order.
pub fn json_array<T: serde::Serialize + Sync>(
    state: &AppState,
    items: &[T],
) -> Result<Vec<u8>, Failure> {
    if items.len() < PARALLEL_PAIRS {
        return array_of(items);
    }
    let size = items.len().div_ceil(crate::state::cores().min(items.len()));
    let chunks: Vec<&[T]> = items.chunks(size).collect();
    let parts = in_parts(state, chunks.len(), |k| array_of(chunks[k]))?;
    Ok(joined(&parts))
}

/// One JSON array of the items of `arrays` (each a JSON array), in order.
fn joined(arrays: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::with_capacity(arrays.iter().map(Vec::len).sum::<usize>() + 2);
    out.push(b'[');
    for array in arrays {
        let items = array
            .get(1..array.len().saturating_sub(1))
            .unwrap_or_default();
        if items.is_empty() {
            continue;
        }
        if out.len() > 1 {
            out.push(b',');
        }
        out.extend_from_slice(items);
    }
    out.push(b']');
    out
}

/// `work` for parts `0..parts`, over the cores (`duet_core::parallel::each`), joined in order:
/// the first failing part's failure is the request's (it names the first bad pair or group).
fn in_parts<T: Send>(
    state: &AppState,
    parts: usize,
    work: impl Fn(usize) -> Result<T, Failure> + Sync,
) -> Result<Vec<T>, Failure> {
    duet_core::parallel::each(parts, work)
        .into_iter()
        .map(|part| {
            part.unwrap_or_else(|_| Err(state.metrics.guards.panicked("prediction worker")))
        })
        .collect()
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
    let serving = state.read()?.ok_or_else(not_ready)?;
    predict_on(state, &serving, request, cancelled)
}

/// `predict` on one snapshot of the serving model and registry.
fn predict_on<S: Sink>(
    state: &AppState,
    serving: &crate::state::Serving,
    request: &PredictRequest,
    cancelled: &AtomicBool,
) -> Result<Predicted<S>, Failure> {
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
            state.metrics.predicted(kinds.iter().map(|d| d.class));
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
        in_parts(state, parts, |k| {
            part((k * size)..((k + 1) * size).min(n), true)
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

#[cfg(test)]
mod tests {
    use super::{Spent, joined};

    #[test]
    fn what_is_spent_is_freed_when_it_is_dropped_and_not_before() {
        struct Flag(std::sync::Arc<std::sync::atomic::AtomicBool>);
        impl Drop for Flag {
            fn drop(&mut self) {
                self.0.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        }
        let freed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut spent = Spent::default();
        spent.keep(Flag(freed.clone()));
        spent.keep(vec![0u8; 1 << 20]);
        // A mark no process reaches: dropped, it frees and does not trim.
        spent.trim_above(u64::MAX);
        assert!(!freed.load(std::sync::atomic::Ordering::SeqCst));
        assert_eq!(
            format!("{spent:?}"),
            format!("Spent(2 values, mark Some({}))", u64::MAX)
        );
        drop(spent);
        assert!(freed.load(std::sync::atomic::Ordering::SeqCst));
    }

    #[test]
    fn arrays_join_into_the_array_of_their_items_in_order() {
        let parts: Vec<Vec<u8>> = [vec![1, 2, 3], vec![], vec![4], vec![5, 6]]
            .iter()
            .map(|p: &Vec<u32>| serde_json::to_vec(p).expect("json"))
            .collect();
        let whole = serde_json::to_vec(&[1, 2, 3, 4, 5, 6]).expect("json");
        assert_eq!(joined(&parts), whole);
        assert_eq!(joined(&parts[1..2]), b"[]");
        assert_eq!(joined(&[]), b"[]");
    }
}
