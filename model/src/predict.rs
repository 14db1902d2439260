//! A prediction request to predictions: pairs to encoded rows (both directions), one forward
//! pass, rows to predictions. The server's `/v1/predict` and the in-process predictor both call it.

use duet_core::api::{
    Calibration, GroupPrediction, GroupQuery, JobRef, PairQuery, PredictRequest, Prediction,
};
use duet_core::dataset::{MAX_GROUP_SIZE, Mode};
use std::collections::HashMap;

use crate::calibration::Calibration as CalibrationShifts;
use crate::encoding::FeatureSpec;

use crate::error::ModelError;
use crate::group;
use crate::loaded::LoadedModel;
use crate::network::{
    OUT_FEASIBLE_LOGIT, OUT_LOG_SPEED, OUT_LOG_SPEED_P10, OUTPUTS, bounded_exp, calibrated_ln_p10,
};
use crate::prior::weigh_outputs;
use crate::registry::Registry;

/// Encodes every pair of `request` twice, `(a, b)` then `(b, a)`, for `model`; checks every
/// field first, so a bad pair fails the request before any work is done.
pub fn encode(
    model: &LoadedModel,
    registry: &Registry,
    request: &PredictRequest,
    default_gpu: Option<&str>,
) -> Result<Vec<f32>, ModelError> {
    encode_pairs(
        model,
        registry,
        request,
        0..request.pairs.len(),
        default_gpu,
    )
}

/// `encode` for the pairs of `request` in `range` (error paths keep the request's indexes).
pub fn encode_pairs(
    model: &LoadedModel,
    registry: &Registry,
    request: &PredictRequest,
    range: std::ops::Range<usize>,
    default_gpu: Option<&str>,
) -> Result<Vec<f32>, ModelError> {
    let spec = &model.meta.spec;
    let width = spec.pair_width();
    let job_width = spec.job_width();
    let mut inputs = Vec::with_capacity(range.len() * 2 * width);
    let mut scratch_a = Vec::with_capacity(job_width);
    let mut scratch_b = Vec::with_capacity(job_width);
    // Consecutive pairs usually share device, mode and shares: their context is encoded once.
    type ContextKey<'r> = (&'r str, Mode, Option<f64>, Option<f64>);
    let mut context: Option<(ContextKey, Vec<f32>, Vec<f32>)> = None;
    for (i, pair) in request.pairs[range.clone()].iter().enumerate() {
        let i = i + range.start;
        let field = |name: &str| format!("pairs[{i}].{name}");
        let gpu = checked_setting(
            model,
            pair.gpu
                .as_deref()
                .or(request.gpu.as_deref())
                .or(default_gpu),
            pair.mode,
            [pair.share_a, pair.share_b].into_iter(),
            "pair",
            &field,
            &|k| field(["share_a", "share_b"][k]),
        )?;
        let a = job(
            model,
            registry,
            &pair.a,
            gpu,
            &|| field("a"),
            &mut scratch_a,
        )?;
        let b = job(
            model,
            registry,
            &pair.b,
            gpu,
            &|| field("b"),
            &mut scratch_b,
        )?;
        let key = (gpu, pair.mode, pair.share_a, pair.share_b);
        if context.as_ref().is_none_or(|(k, _, _)| *k != key) {
            let mut ab = Vec::with_capacity(spec.context_width());
            let mut ba = Vec::with_capacity(spec.context_width());
            spec.encode_context(gpu, pair.mode, pair.share_a, pair.share_b, &mut ab);
            spec.encode_context(gpu, pair.mode, pair.share_b, pair.share_a, &mut ba);
            context = Some((key, ab, ba));
        }
        if let Some((_, ab, ba)) = &context {
            for (first, second, ctx) in [(a, b, ab), (b, a, ba)] {
                inputs.extend_from_slice(first);
                inputs.extend_from_slice(second);
                inputs.extend_from_slice(ctx);
            }
        }
    }
    Ok(inputs)
}

/// The device a pair or a group runs on (`asked`: its own or the request's or the server's
/// default, else the model's only one), once its mode is one the model knows and every share in
/// `shares` lies in (0, 100]; an error names `field("gpu")`, `field("mode")` or
/// `share_field(k)`.
#[allow(clippy::too_many_arguments)]
fn checked_setting<'a>(
    model: &'a LoadedModel,
    asked: Option<&'a str>,
    mode: Mode,
    mut shares: impl Iterator<Item = Option<f64>>,
    what: &str,
    field: &dyn Fn(&str) -> String,
    share_field: &dyn Fn(usize) -> String,
) -> Result<&'a str, ModelError> {
    let spec = &model.meta.spec;
    let gpu = asked
        .or_else(|| (spec.gpus.len() == 1).then(|| spec.gpus[0].as_str()))
        .ok_or_else(|| {
            ModelError::field(
                field("gpu"),
                format!(
                    "no device: give `gpu` in the {what} or the request (the model knows {})",
                    spec.gpus.join(", ")
                ),
            )
        })?;
    if !model.knows_mode(mode) {
        return Err(ModelError::field(
            field("mode"),
            format!(
                "the model was not trained on mode `{mode}`; it knows {}",
                model.modes()
            ),
        ));
    }
    if let Some((k, Some(s))) = shares
        .by_ref()
        .enumerate()
        .find(|(_, s)| s.is_some_and(|s| !(s > 0.0 && s <= 100.0)))
    {
        return Err(ModelError::field(
            share_field(k),
            format!("share {s} is outside (0, 100]"),
        ));
    }
    Ok(gpu)
}

/// One job's encoding: a registered workload's cached profile, or inline features encoded into
/// `scratch`.
fn job<'a>(
    model: &LoadedModel,
    registry: &'a Registry,
    job: &JobRef,
    gpu: &str,
    field: &dyn Fn() -> String,
    scratch: &'a mut Vec<f32>,
) -> Result<&'a [f32], ModelError> {
    // Only an error needs the field's path.
    match (&job.workload, &job.features) {
        (Some(id), None) => {
            let entry = registry
                .get(id)
                .ok_or_else(|| ModelError::not_found(id, format!("{}.workload", field())))?;
            if let Some(encoded) = entry.encoded(gpu) {
                return Ok(encoded);
            }
            if let Some(features) = entry.registered.body.profiles.get(gpu) {
                // Registered before a reload whose model reads its features differently.
                let why = model
                    .job_features(features, &format!("workload `{id}` profile `{gpu}`"))
                    .err()
                    .map_or_else(String::new, |f| f.message);
                return Err(ModelError::field(
                    format!("{}.workload", field()),
                    format!(
                        "workload `{id}`'s profile on `{gpu}` does not fit the loaded model: {why}"
                    ),
                ));
            }
            let known: Vec<&str> = entry
                .registered
                .body
                .profiles
                .keys()
                .map(String::as_str)
                .collect();
            // The workload exists, its profile on this device does not: not found, like an
            // unknown id (register the profile with PUT /v1/workloads/{id}).
            Err(ModelError {
                kind: crate::error::ErrorKind::NotFound,
                ..ModelError::field(
                    format!("{}.workload", field()),
                    format!(
                        "workload `{id}` has no profile on `{gpu}`; it has {}",
                        known.join(", ")
                    ),
                )
            })
        }
        (None, Some(features)) => {
            // Encoded from the request's own map: no copy of it per job.
            model.check_features_at(features, &|| format!("{}.features", field()))?;
            scratch.clear();
            model.meta.spec.encode_from(features, scratch);
            Ok(scratch)
        }
        _ => Err(ModelError::field(
            field(),
            "give exactly one of `workload` (a registered id) or `features`",
        )),
    }
}

/// How one pair's outputs become its prediction: its calibration class (that of its less known
/// job: `FeatureSpec::calibration_kind`, resolved by `Calibration::resolve`), the shift of that
/// class on its device, and, where a job is of a new family and the model has a family prior
/// (`crate::prior`), each direction's prior ln speed and the network's weight.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Decode {
    pub class: Calibration,
    pub shift: f64,
    /// `(prior ln speed, the network's weight)` of `(a, b)` and of `(b, a)`.
    pub prior: [Option<(f64, f64)>; 2],
    /// The pair settings `a` and `b` were measured in among the training rows on the pair's
    /// device (`None` where the model does not record them).
    pub measured: [Option<u32>; 2],
}

impl Decode {
    /// The decoding of the encoded pair row `row` (either direction). The prior is looked for
    /// only where the class can be a new family's or a probed job's (the class of a pair of
    /// known workloads costs one look at the row).
    pub fn of_row(spec: &FeatureSpec, calibration: &CalibrationShifts, row: &[f32]) -> Decode {
        let (kind, measured) = spec.pair_view(row);
        let (class, shift) = calibration.resolve(kind, spec.row_gpu(row));
        let prior = match (&calibration.family_prior, class) {
            (Some(p), Calibration::NewFamily | Calibration::Conservative | Calibration::Probed) => {
                p.for_row(spec, row)
            }
            _ => None,
        };
        Decode {
            class,
            shift,
            prior: [prior, None],
            measured,
        }
    }

    /// The decoding of a pair from its two rows, `(a, b)` then `(b, a)`.
    pub fn of_pair(spec: &FeatureSpec, calibration: &CalibrationShifts, rows: &[f32]) -> Decode {
        let width = spec.pair_width();
        let mut d = Decode::of_row(spec, calibration, &rows[..width]);
        if d.prior[0].is_some() {
            d.prior[1] = calibration
                .family_prior
                .as_ref()
                .and_then(|p| p.for_row(spec, &rows[width..2 * width]));
        }
        d
    }

    /// One direction's ln speed and its calibrated ln p10 speed (`-ln` of the p90 slowdown it
    /// is answered with: `network::calibrated_ln_p10`, never above the speed). A price read
    /// from a p90 below the median would favour the pair for its uncertainty.
    pub fn calibrated(&self, side: usize, out: &[f32]) -> (f64, f64) {
        let (speed, p10) = self.ln_speeds(side, out);
        (speed, calibrated_ln_p10(speed, p10, self.shift))
    }

    /// One direction's ln speed and ln p10 speed (before the shift) from its network outputs:
    /// the network's, or weighted with the prior's where `side` has one.
    pub fn ln_speeds(&self, side: usize, out: &[f32]) -> (f64, f64) {
        let (speed, p10) = (
            f64::from(out[OUT_LOG_SPEED]),
            f64::from(out[OUT_LOG_SPEED_P10]),
        );
        match self.prior[side] {
            Some((prior, weight)) => weigh_outputs(weight, speed, p10, prior),
            None => (speed, p10),
        }
    }
}

/// The decoding of each pair of rows `encode` built (one per pair, from its `(a, b)` and
/// `(b, a)` rows). Call it before the engine takes the inputs.
pub fn kinds(spec: &FeatureSpec, calibration: &CalibrationShifts, inputs: &[f32]) -> Vec<Decode> {
    let width = spec.pair_width();
    if width == 0 {
        return Vec::new();
    }
    inputs
        .chunks_exact(2 * width)
        .map(|rows| Decode::of_pair(spec, calibration, rows))
        .collect()
}

/// Predictions from the engine's outputs for the rows `encode` built, with each pair's p90
/// slowdowns shifted by its calibration (`kinds`, one per pair).
pub fn predictions(kinds: &[Decode], outputs: &[f32]) -> Vec<Prediction> {
    outputs
        .chunks_exact(2 * OUTPUTS)
        .zip(kinds)
        .map(|(rows, d)| {
            let (ab, ba) = rows.split_at(OUTPUTS);
            let (ln_a, ln_a_p10) = d.calibrated(0, ab);
            let (ln_b, ln_b_p10) = d.calibrated(1, ba);
            let speed_a = bounded_exp(ln_a);
            let speed_b = bounded_exp(ln_b);
            let logit =
                (f64::from(ab[OUT_FEASIBLE_LOGIT]) + f64::from(ba[OUT_FEASIBLE_LOGIT])) / 2.0;
            let p = 1.0 / (1.0 + (-logit).exp());
            #[allow(clippy::cast_possible_truncation)]
            let single = |x: f64| x as f32;
            Prediction {
                feasible: p >= 0.5,
                feasible_probability: single(p),
                speed_a: single(speed_a),
                speed_b: single(speed_b),
                slowdown_a: single(1.0 / speed_a),
                slowdown_b: single(1.0 / speed_b),
                // At least the slowdown to the last bit (both read from the bounded speed).
                slowdown_a_p90: single(bounded_exp(-ln_a_p10).max(1.0 / speed_a)),
                slowdown_b_p90: single(bounded_exp(-ln_b_p10).max(1.0 / speed_b)),
                combined: single(speed_a + speed_b),
                calibration: d.class,
                measured_a: d.measured[0],
                measured_b: d.measured[1],
            }
        })
        .collect()
}

/// Every prediction of `request`, in the order of its pairs: encode, run, decode.
pub fn predict(
    model: &LoadedModel,
    registry: &Registry,
    request: &PredictRequest,
    default_gpu: Option<&str>,
) -> Result<Vec<Prediction>, ModelError> {
    let inputs = encode(model, registry, request, default_gpu)?;
    let kinds = kinds(&model.meta.spec, &model.meta.calibration, &inputs);
    let outputs = model
        .engine
        .run(inputs)
        .map_err(|e| ModelError::internal(format!("inference failed: {e}")))?;
    Ok(predictions(&kinds, &outputs))
}

/// The group effects of `query`'s jobs on its device (the query's, else `default_gpu`, else the
/// model's only one), in the order of its jobs, into `out` (left empty where the model has none
/// for the group's size): a registered job's workload effect, 0 for a job given by features.
pub fn group_effects(
    model: &LoadedModel,
    query: &GroupQuery,
    default_gpu: Option<&str>,
    out: &mut Vec<f64>,
) {
    out.clear();
    let gpus = &model.meta.spec.gpus;
    let model_gpu = (gpus.len() == 1).then(|| gpus[0].as_str());
    if let Some(of_size) = model.meta.calibration.group_effects_of(query.jobs.len())
        && let Some(gpu) = query.gpu.as_deref().or(default_gpu).or(model_gpu)
    {
        out.extend(
            query
                .jobs
                .iter()
                .map(|j| j.workload_id().map_or(0.0, |id| of_size.of(gpu, id))),
        );
    }
}

/// A group's own rules, before any of its pairs is encoded: 3 to `MAX_GROUP_SIZE` jobs, and
/// one share per job where shares are given (fields `jobs`, `shares`).
pub fn check_group(query: &GroupQuery) -> Result<(), ModelError> {
    let n = query.jobs.len();
    if !(3..=MAX_GROUP_SIZE).contains(&n) {
        return Err(ModelError::field(
            "jobs",
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
        return Err(ModelError::field(
            "shares",
            format!(
                "{} shares for {n} jobs: give one per job, in their order",
                shares.len()
            ),
        ));
    }
    Ok(())
}

/// One group's answer as `/v1/predict` gives it: its pairs (in `group::pairs_of` order) run in
/// one forward pass, composed with the model's group calibration and its jobs' group effects. A
/// refused pair's field names the group's job (`jobs[i]...`) or share (`shares[i]`).
pub fn predict_group(
    model: &LoadedModel,
    registry: &Registry,
    query: &GroupQuery,
    default_gpu: Option<&str>,
) -> Result<GroupPrediction, ModelError> {
    let size = query.jobs.len();
    if model.meta.calibration.network_answers(size) {
        // It checks the group as below.
        return predict_network_groups(
            model,
            registry,
            &[query],
            default_gpu,
            &|_| String::new(),
            false,
        )?
        .pop()
        .ok_or_else(|| ModelError::internal("the group's answer is missing"));
    }
    check_group(query)?;
    let share = |k: usize| query.share(k);
    let order = group::pairs_of(size);
    let request = PredictRequest {
        gpu: query
            .gpu
            .clone()
            .or_else(|| default_gpu.map(str::to_string)),
        pairs: order
            .iter()
            .map(|&(i, j)| PairQuery {
                a: query.jobs[i].clone(),
                b: query.jobs[j].clone(),
                mode: query.mode,
                share_a: share(i),
                share_b: share(j),
                gpu: None,
            })
            .collect(),
        groups: Vec::new(),
    };
    let pairs = predict(model, registry, &request, None).map_err(|mut e| {
        e.field = e.field.map(|f| group_field(&f, &order));
        e
    })?;
    let mut effects = Vec::with_capacity(size);
    group_effects(model, query, default_gpu, &mut effects);
    let shift = model.meta.calibration.group_shift(size);
    group::compose(size, &pairs, shift, &effects)
        .ok_or_else(|| ModelError::internal("the group's pairs' predictions are missing"))
}

/// The groups of `queries` the network answers itself (`Calibration::network_answers`: the
/// sizes it learned from measured groups), every job one row (`FeatureSpec::encode_group_row`:
/// the job, its co-runners' mean encoding, ln(co-runners)), all groups in one forward pass. A
/// job's p90 takes its size's group shift, widened by as much as the group's least known job's
/// class widens a pair over a known one on the device. A field of query `q` is said as
/// `prefix(q)` followed by the group's own field (`jobs[k].features.x`, `shares[k]`, `mode`,
/// `gpu`); every query is checked (`check_group`) and encoded before anything runs. `serial`:
/// the caller already runs one part per core, so the forward pass stays on its thread
/// (`Engine::run_serial`, as a part of pairs runs), where a large batch would otherwise be split
/// over the cores again, each part's slices queueing for the same sessions.
pub fn predict_network_groups(
    model: &LoadedModel,
    registry: &Registry,
    queries: &[&GroupQuery],
    default_gpu: Option<&str>,
    prefix: &dyn Fn(usize) -> String,
    serial: bool,
) -> Result<Vec<GroupPrediction>, ModelError> {
    let spec = &model.meta.spec;
    let calibration = &model.meta.calibration;
    let job_width = spec.job_width();
    let width = spec.pair_width();
    let rows: usize = queries.iter().map(|q| q.jobs.len()).sum();
    let mut inputs = Vec::with_capacity(rows * width);
    let mut encoded: Vec<f32> = Vec::with_capacity(MAX_GROUP_SIZE * job_width);
    let mut scratch = Vec::with_capacity(job_width);
    // Each distinct group's device, class, shift and the jobs' measured settings, for decoding.
    let mut decodes = Vec::with_capacity(queries.len());
    // A group of registered workloads alone is run once per request whatever the order of its
    // jobs (a pricing round asks the same residents beside many newcomers): its key, the
    // distinct group it reads, and each query's (distinct group, its jobs' keys).
    type JobKey<'q> = (&'q str, Option<u64>);
    let mut distinct: HashMap<(&str, Mode, Vec<JobKey>), usize> = HashMap::new();
    let mut first_keys: Vec<Option<Vec<JobKey>>> = Vec::new();
    let mut reads: Vec<(usize, Option<Vec<JobKey>>)> = Vec::with_capacity(queries.len());
    for (q, query) in queries.iter().enumerate() {
        let field = |name: &str| format!("{}{name}", prefix(q));
        check_group(query).map_err(|mut e| {
            e.field = e.field.map(|f| field(&f));
            e
        })?;
        let size = query.jobs.len();
        let gpu = checked_setting(
            model,
            query.gpu.as_deref().or(default_gpu),
            query.mode,
            (0..size).map(|k| query.share(k)),
            "group",
            &field,
            &|k| field(&format!("shares[{k}]")),
        )?;
        let keys: Option<Vec<JobKey>> = query
            .jobs
            .iter()
            .enumerate()
            .map(|(k, j)| {
                j.workload_id()
                    .map(|id| (id, query.share(k).map(f64::to_bits)))
            })
            .collect();
        if let Some(own) = &keys {
            let mut sorted = own.clone();
            sorted.sort_unstable();
            match distinct.entry((gpu, query.mode, sorted)) {
                std::collections::hash_map::Entry::Occupied(e) => {
                    reads.push((*e.get(), keys));
                    continue;
                }
                std::collections::hash_map::Entry::Vacant(e) => {
                    e.insert(decodes.len());
                }
            }
        }
        reads.push((decodes.len(), None));
        first_keys.push(keys);
        encoded.clear();
        for (k, j) in query.jobs.iter().enumerate() {
            let job_field = || field(&format!("jobs[{k}]"));
            let e = job(model, registry, j, gpu, &job_field, &mut scratch)?;
            encoded.extend_from_slice(e);
        }
        let jobs: Vec<&[f32]> = encoded.chunks_exact(job_width.max(1)).collect();
        decodes.push(group::NetworkDecode::of_group(
            spec,
            calibration,
            &jobs,
            gpu,
        ));
        spec.encode_group(&jobs, |k| query.share(k), gpu, query.mode, &mut inputs);
    }
    if inputs.is_empty() {
        return Ok(Vec::new());
    }
    let outputs = if serial {
        model.engine.run_serial(inputs)
    } else {
        model.engine.run(inputs)
    }
    .map_err(|e| ModelError::internal(format!("inference failed: {e}")))?;
    let mut next = outputs.chunks_exact(OUTPUTS);
    let mut answers: Vec<Option<GroupPrediction>> = decodes
        .into_iter()
        .map(|d| {
            let rows: Vec<&[f32]> = next.by_ref().take(d.measured.len()).collect();
            Some(group::from_network(&d, &rows))
        })
        .collect();
    // A distinct group's answer moves to its last reader; only a repeated group's is copied.
    let mut readers = vec![0usize; answers.len()];
    for (index, _) in &reads {
        if let Some(n) = readers.get_mut(*index) {
            *n += 1;
        }
    }
    reads
        .into_iter()
        .map(|(index, keys)| {
            let last = readers.get_mut(index).is_some_and(|n| {
                *n -= 1;
                *n == 0
            });
            let mut answer = if last {
                answers.get_mut(index).and_then(Option::take)
            } else {
                answers.get(index).and_then(Clone::clone)
            }
            .ok_or_else(|| ModelError::internal("a group's answer is missing"))?;
            // A repeat in another order: each job reads the job of the first asker with the
            // same workload and share (two such jobs of one group are answered alike).
            let (Some(keys), Some(Some(first))) = (keys, first_keys.get(index)) else {
                return Ok(answer);
            };
            let jobs = keys
                .iter()
                .map(|key| {
                    first
                        .iter()
                        .position(|f| f == key)
                        .and_then(|at| answer.jobs.get(at).copied())
                        .ok_or_else(|| ModelError::internal("a repeated group's job is missing"))
                })
                .collect::<Result<Vec<_>, _>>()?;
            answer.jobs = jobs;
            Ok(answer)
        })
        .collect()
}

/// A pair's field (`pairs[p].a.features.x`) said of the group whose pairs run in `order`.
fn group_field(field: &str, order: &[(usize, usize)]) -> String {
    let renamed = field.strip_prefix("pairs[").and_then(|rest| {
        let (index, rest) = rest.split_once(']')?;
        let &(a, b) = order.get(index.parse::<usize>().ok()?)?;
        Some(field_in_group(rest, a, b))
    });
    renamed.unwrap_or_else(|| field.to_string())
}

/// What follows `pairs[p]` in a field of a group's pair of jobs `a` and `b` (`.a.features.x`,
/// `.share_b`), said of the group: `jobs[a].features.x`, `shares[b]`, `mode`.
pub fn field_in_group(rest: &str, a: usize, b: usize) -> String {
    let rest = rest.strip_prefix('.').unwrap_or(rest);
    let (head, tail) = rest.split_once('.').map_or((rest, ""), |(h, t)| (h, t));
    let tail = if tail.is_empty() {
        String::new()
    } else {
        format!(".{tail}")
    };
    match head {
        "a" => format!("jobs[{a}]{tail}"),
        "b" => format!("jobs[{b}]{tail}"),
        "share_a" => format!("shares[{a}]"),
        "share_b" => format!("shares[{b}]"),
        other => format!("{other}{tail}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extreme_outputs_give_finite_predictions() {
        let outputs = [f32::MAX, f32::NAN, 0.0, -f32::MAX, f32::MAX, 0.0];
        let decode = Decode {
            class: Calibration::New,
            shift: 0.3,
            prior: [None, None],
            measured: [None, None],
        };
        let p = predictions(&[decode], &outputs)[0];
        for v in [
            p.speed_a,
            p.speed_b,
            p.slowdown_a,
            p.slowdown_b,
            p.slowdown_a_p90,
            p.slowdown_b_p90,
            p.combined,
            p.feasible_probability,
        ] {
            assert!(v.is_finite() && v >= 0.0, "{p:?}");
        }
        assert!(p.speed_a > 1e30 && p.speed_b < 1e-30, "{p:?}");
        assert!(p.slowdown_a_p90 >= p.slowdown_a && p.slowdown_b_p90 >= p.slowdown_b);
    }

    #[test]
    fn a_p90_slowdown_is_never_below_the_median_one() {
        // (a, b): the p10 head 0.05 below the speed; (b, a): 0.02 above it (a crossed head).
        let outputs = [-0.5, -0.55, 2.0, -0.3, -0.28, 2.0];
        let decode = |shift: f64| Decode {
            class: Calibration::Known,
            shift,
            prior: [None, None],
            measured: [None, None],
        };
        // A shift of -0.1 narrows both past the point: each p90 is its slowdown.
        let p = predictions(&[decode(-0.1)], &outputs)[0];
        assert_eq!(p.slowdown_a_p90, p.slowdown_a, "{p:?}");
        assert_eq!(p.slowdown_b_p90, p.slowdown_b, "{p:?}");
        // A shift of 0.01 keeps `a` wider than its point and `b`'s crossed head at it.
        let p = predictions(&[decode(0.01)], &outputs)[0];
        let want = (f64::from(0.55f32) + 0.01).exp();
        assert!(
            (f64::from(p.slowdown_a_p90) - want).abs() < 1e-5 * want,
            "{p:?}"
        );
        assert!(p.slowdown_a_p90 > p.slowdown_a, "{p:?}");
        assert_eq!(p.slowdown_b_p90, p.slowdown_b, "{p:?}");
        let at = |shift: f64| decode(shift).calibrated(1, &outputs[3..]);
        assert_eq!(at(0.01), (f64::from(-0.3f32), f64::from(-0.3f32)));
        // A shift of 0.1 widens `b` past its point too.
        let (speed, p10) = at(0.1);
        assert!((p10 - (f64::from(-0.28f32) - 0.1)).abs() < 1e-12 && p10 < speed);
    }
}
