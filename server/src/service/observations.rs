//! Observations the cluster reports (`POST /v1/observations`): each item checked on its own like
//! a row of an imported CSV (a refusal names the item and its field, and the rest of the batch
//! is still stored), its jobs resolved against the registry on the observed device (so the
//! stored record stands on its own when the registry later changes), and its pair (or group,
//! answered as `/v1/predict` answers a group) scored by the serving model, for drift.

use duet_core::api::{
    FeatureInput, Features, GroupPrediction, GroupQuery, JobRef, Observation, ObservationRecord,
    ObservedJobPrediction, ObservedJobRecord, ObservedPrediction, PairQuery, PredictRequest,
    RejectedObservation,
};
use duet_core::dataset::{JobKind, MAX_GROUP_SIZE, Mode};
use duet_model::registry::{MAX_ID, is_valid_id};
use duet_model::{LoadedModel, ModelError, Registry};

/// The co-located speeds (throughput over solo throughput) an observation may show: a job next
/// to another is not ten times faster than alone, nor a million times slower; outside, the
/// throughputs are most likely in different units.
pub const SPEED_RANGE: (f64, f64) = (1e-6, 10.0);
/// How far ahead of the server's clock `observed_at` may be (clocks drift), seconds.
pub const FUTURE_SLACK_S: f64 = 300.0;
/// The longest measurement window taken, seconds (a week).
pub const MAX_WINDOW_S: f64 = 7.0 * 86_400.0;

/// What the server adds to every record it stores.
#[derive(Debug, Clone)]
pub struct Receipt<'a> {
    pub server: &'a str,
    pub now_s: f64,
}

/// Checks and resolves item `index` of a batch (its JSON text, so that one malformed item does
/// not refuse the others): an `ObservationRecord` to store, or why it is refused.
pub fn check(
    model: &LoadedModel,
    registry: &Registry,
    index: usize,
    item: &serde_json::value::RawValue,
    receipt: &Receipt,
) -> Result<ObservationRecord, RejectedObservation> {
    /// An item's `id`, where it is an object with a string there (the rest skipped unread).
    #[derive(serde::Deserialize)]
    struct Id {
        id: Option<String>,
    }
    let id = serde_json::from_str::<Id>(item.get())
        .ok()
        .and_then(|i| i.id);
    // An item's error and field may quote it: clipped as every error's are.
    let reject = |field: &str, error: String| RejectedObservation {
        index,
        id: id.clone(),
        field: duet_core::api::clipped(if field.is_empty() {
            format!("observations[{index}]")
        } else {
            format!("observations[{index}].{field}")
        }),
        error: duet_core::api::clipped(error),
    };
    let mut parser = serde_json::Deserializer::from_str(item.get());
    // A job's features past the names the model accepts are refused as they are read, as in a
    // prediction (`bounded::FEATURE_ENTRIES_PAST_ACCEPTED`).
    let limit = model.accepted_feature_count() + crate::bounded::FEATURE_ENTRIES_PAST_ACCEPTED;
    let parsed = duet_core::api::feature_map::with_entry_limit(limit, || {
        serde_path_to_error::deserialize::<_, Observation>(&mut parser)
    });
    let observation = parsed.map_err(|e| {
        let path = e.path().to_string();
        let field = duet_core::api::known_path(&path)
            .unwrap_or_default()
            .to_string();
        reject(
            &field,
            duet_core::api::clipped_display("invalid observation: ", &e.into_inner()),
        )
    })?;
    let observed_at_s = fields(&observation, receipt.now_s).map_err(|(f, e)| reject(&f, e))?;
    let gpu = observation.gpu.clone();
    let gpu = gpu.as_str();
    let (workload_a, features_a, kind_a) =
        resolve(model, registry, &observation.a, gpu, "a").map_err(|(f, e)| reject(&f, e))?;
    let mut record = ObservationRecord {
        workload_a,
        features_a,
        kind_a,
        workload_b: None,
        features_b: None,
        kind_b: None,
        others: Vec::new(),
        prediction: None,
        observed_at_s,
        received_at_s: receipt.now_s,
        server: receipt.server.to_string(),
        observation,
    };
    if let Some(b) = &record.observation.b {
        let (workload_b, features_b, kind_b) =
            resolve(model, registry, b, gpu, "b").map_err(|(f, e)| reject(&f, e))?;
        record.workload_b = Some(workload_b);
        record.features_b = Some(features_b);
        record.kind_b = kind_b;
        for (k, other) in record.observation.others.iter().enumerate() {
            let (workload, features, kind) = resolve(
                model,
                registry,
                &other.job,
                gpu,
                &format!("others[{k}].job"),
            )
            .map_err(|(f, e)| reject(&f, e))?;
            record.others.push(ObservedJobRecord {
                workload,
                features,
                kind,
            });
        }
        if let Some(speeds) = record.observed_group_speeds() {
            for (k, speed) in speeds.into_iter().enumerate() {
                if !(speed >= SPEED_RANGE.0 && speed <= SPEED_RANGE.1) {
                    let (field, job) = match k {
                        0 => ("throughput_a".to_string(), "`a`".to_string()),
                        1 => ("throughput_b".to_string(), "`b`".to_string()),
                        k => (
                            format!("others[{}].throughput", k - 2),
                            format!("others[{}]", k - 2),
                        ),
                    };
                    return Err(reject(
                        &field,
                        format!(
                            "{field} over {job}'s solo throughput is a speed of {speed:e}, \
                             outside [{:e}, {}]: are both in iterations per second?",
                            SPEED_RANGE.0, SPEED_RANGE.1
                        ),
                    ));
                }
            }
        }
        if !record.observation.others.is_empty() {
            let o = &record.observation;
            let mut jobs = vec![o.a.clone(), b.clone()];
            jobs.extend(o.others.iter().map(|j| j.job.clone()));
            let query = group_query(o, jobs);
            let answer = duet_model::predict::predict_group(model, registry, &query, None)
                .map_err(|e| {
                    let field = e.field.as_deref().map(observed_field).unwrap_or_default();
                    reject(&field, e.message)
                })?;
            record.prediction = Some(observed_group_prediction(model.version(), &answer));
            return Ok(record);
        }
        let request = pair_request(&record.observation, b);
        let prediction =
            duet_model::predict::predict(model, registry, &request, None).map_err(|e| {
                let field = e
                    .field
                    .as_deref()
                    .map(|f| f.strip_prefix("pairs[0].").unwrap_or(f).to_string())
                    .unwrap_or_default();
                reject(&field, e.message)
            })?;
        record.prediction = prediction
            .first()
            .map(|p| observed_prediction(model.version(), p));
    }
    Ok(record)
}

/// The prediction request of an observed pair, its jobs as the client named them.
fn pair_request(o: &Observation, b: &JobRef) -> PredictRequest {
    PredictRequest {
        gpu: Some(o.gpu.clone()),
        pairs: vec![PairQuery {
            a: o.a.clone(),
            b: b.clone(),
            mode: o.mode.unwrap_or(Mode::Space),
            share_a: o.share_a,
            share_b: o.share_b,
            gpu: None,
        }],
        groups: Vec::new(),
    }
}

pub fn observed_prediction(version: &str, p: &duet_core::api::Prediction) -> ObservedPrediction {
    ObservedPrediction {
        model_version: version.to_string(),
        speed_a: f64::from(p.speed_a),
        speed_b: f64::from(p.speed_b),
        slowdown_a_p90: f64::from(p.slowdown_a_p90),
        slowdown_b_p90: f64::from(p.slowdown_b_p90),
        calibration: p.calibration,
        others: Vec::new(),
    }
}

/// The prediction request of the group observed in `o`, its jobs given as `jobs` (`a`, `b`,
/// then `others`, in order); shares where any job has one.
pub fn group_query(o: &Observation, jobs: Vec<JobRef>) -> GroupQuery {
    let any_share =
        o.share_a.is_some() || o.share_b.is_some() || o.others.iter().any(|j| j.share.is_some());
    let shares = any_share.then(|| {
        let mut shares = vec![o.share_a.unwrap_or(0.0), o.share_b.unwrap_or(0.0)];
        shares.extend(o.others.iter().map(|j| j.share.unwrap_or(0.0)));
        shares
    });
    GroupQuery {
        jobs,
        mode: o.mode.unwrap_or(Mode::Space),
        shares,
        gpu: Some(o.gpu.clone()),
    }
}

/// A group's answer as stored with its observation: the first two jobs as `a` and `b`.
pub fn observed_group_prediction(version: &str, g: &GroupPrediction) -> ObservedPrediction {
    let job = |k: usize| g.jobs.get(k).copied();
    let (a, b) = (job(0), job(1));
    ObservedPrediction {
        model_version: version.to_string(),
        speed_a: a.map_or(f64::NAN, |j| f64::from(j.speed)),
        speed_b: b.map_or(f64::NAN, |j| f64::from(j.speed)),
        slowdown_a_p90: a.map_or(f64::NAN, |j| f64::from(j.slowdown_p90)),
        slowdown_b_p90: b.map_or(f64::NAN, |j| f64::from(j.slowdown_p90)),
        calibration: g.calibration,
        others: g
            .jobs
            .iter()
            .skip(2)
            .map(|j| ObservedJobPrediction {
                speed: f64::from(j.speed),
                slowdown_p90: f64::from(j.slowdown_p90),
            })
            .collect(),
    }
}

/// A group query's field (`jobs[2].features.x`, `shares[1]`) said of the observation
/// (`others[0].job.features.x`, `share_b`).
fn observed_field(field: &str) -> String {
    let indexed = |name: &str| -> Option<(usize, String)> {
        let rest = field.strip_prefix(name)?.strip_prefix('[')?;
        let (index, tail) = rest.split_once(']')?;
        Some((index.parse().ok()?, tail.to_string()))
    };
    if let Some((k, tail)) = indexed("jobs") {
        return match k {
            0 => format!("a{tail}"),
            1 => format!("b{tail}"),
            k => format!("others[{}].job{tail}", k - 2),
        };
    }
    if let Some((k, _)) = indexed("shares") {
        return match k {
            0 => "share_a".to_string(),
            1 => "share_b".to_string(),
            k => format!("others[{}].share", k - 2),
        };
    }
    field.to_string()
}

type Refusal = (String, String);

/// The rules of one observation's own fields; `observed_at` in seconds since 1970.
fn fields(o: &Observation, now_s: f64) -> Result<f64, Refusal> {
    if !is_valid_id(&o.id) {
        return Err((
            "id".into(),
            format!(
                "observation id `{}` must be 1 to {MAX_ID} characters of letters, digits and \
                 - _ . : +, not dots alone",
                o.id
            ),
        ));
    }
    if o.gpu.trim().is_empty() || o.gpu.chars().count() > MAX_ID {
        return Err((
            "gpu".into(),
            format!("gpu must name the device model in 1 to {MAX_ID} characters"),
        ));
    }
    positive("throughput_a", Some(o.throughput_a))?;
    positive("solo_throughput_a", o.solo_throughput_a)?;
    positive("solo_throughput_b", o.solo_throughput_b)?;
    positive("throughput_b", o.throughput_b)?;
    positive("window_s", Some(o.window_s))?;
    if o.window_s > MAX_WINDOW_S {
        return Err((
            "window_s".into(),
            format!(
                "a window of {} s is longer than a week; report shorter windows",
                o.window_s
            ),
        ));
    }
    for (k, other) in o.others.iter().enumerate() {
        positive_at(&format!("others[{k}].throughput"), Some(other.throughput))?;
        positive_at(
            &format!("others[{k}].solo_throughput"),
            other.solo_throughput,
        )?;
    }
    if !o.others.is_empty() {
        if o.b.is_none() {
            return Err((
                "others".into(),
                "a group names `a`, `b` and then `others`; this observation has no `b`".into(),
            ));
        }
        if o.others.len() + 2 > MAX_GROUP_SIZE {
            return Err((
                "others".into(),
                format!(
                    "{} jobs: a group holds 3 to {MAX_GROUP_SIZE} (`a`, `b` and at most {} \
                     `others`)",
                    o.others.len() + 2,
                    MAX_GROUP_SIZE - 2
                ),
            ));
        }
        // Shares are all given or none: the first job without one, where another has one.
        let given = [o.share_a.is_some(), o.share_b.is_some()]
            .into_iter()
            .chain(o.others.iter().map(|j| j.share.is_some()))
            .collect::<Vec<_>>();
        if given.iter().any(|g| *g)
            && let Some(k) = given.iter().position(|g| !*g)
        {
            return Err((
                observed_field(&format!("shares[{k}]")),
                "a group's shares are given for every job or for none".into(),
            ));
        }
    }
    // Shares are checked with the pair's prediction (`duet_model::predict`), as in /v1/predict.
    if o.b.is_some() {
        if o.mode.is_none() {
            return Err((
                "mode".into(),
                "a co-location needs its sharing `mode`".into(),
            ));
        }
        if o.throughput_b.is_none() {
            return Err((
                "throughput_b".into(),
                "a co-location needs `throughput_b`, the throughput of `b`".into(),
            ));
        }
    } else {
        for (name, given) in [
            ("mode", o.mode.is_some()),
            ("share_a", o.share_a.is_some()),
            ("share_b", o.share_b.is_some()),
            ("throughput_b", o.throughput_b.is_some()),
            ("solo_throughput_b", o.solo_throughput_b.is_some()),
        ] {
            if given {
                return Err((
                    name.to_string(),
                    format!(
                        "`{name}` belongs to a co-location, and this observation has no `b` (a \
                         solo run of `a`)"
                    ),
                ));
            }
        }
        if o.solo_throughput_a.is_some() {
            return Err((
                "solo_throughput_a".into(),
                "a solo run's throughput is `throughput_a`; leave `solo_throughput_a` out".into(),
            ));
        }
    }
    let at = duet_core::timestamp::parse_rfc3339(&o.observed_at)
        .map_err(|e| ("observed_at".to_string(), e))?;
    if at > now_s + FUTURE_SLACK_S {
        return Err((
            "observed_at".into(),
            format!(
                "{} is in the future by the server's clock ({})",
                o.observed_at,
                duet_core::timestamp::rfc3339(now_s)
            ),
        ));
    }
    Ok(at)
}

fn positive(name: &'static str, value: Option<f64>) -> Result<(), Refusal> {
    positive_at(name, value)
}

fn positive_at(name: &str, value: Option<f64>) -> Result<(), Refusal> {
    match value {
        Some(v) if !(v.is_finite() && v > 0.0) => Err((
            name.to_string(),
            format!("{name} must be a finite number > 0, got {v}"),
        )),
        _ => Ok(()),
    }
}

/// One job's id, features on `gpu` and kind: a registered workload's profile, or inline
/// features (checked against the model) under `inline-<fingerprint>`.
fn resolve(
    model: &LoadedModel,
    registry: &Registry,
    job: &JobRef,
    gpu: &str,
    side: &str,
) -> Result<(String, Features, Option<JobKind>), (String, String)> {
    match (&job.workload, &job.features) {
        (Some(id), None) => {
            let field = format!("{side}.workload");
            let Some(entry) = registry.get(id) else {
                return Err((
                    field,
                    format!(
                        "no workload `{id}` in the registry: register it first (PUT \
                         /v1/workloads/{id}) or give its features"
                    ),
                ));
            };
            let body = &entry.registered.body;
            match body.profiles.get(gpu) {
                Some(features) => Ok((id.clone(), features.clone(), body.kind)),
                None => Err((
                    field,
                    format!(
                        "workload `{id}` has no profile on `{gpu}` (it has {}): register one \
                         to report it there",
                        body.profiles
                            .keys()
                            .map(String::as_str)
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                )),
            }
        }
        (None, Some(features)) => {
            model
                .job_features(features, &format!("{side}.features"))
                .map_err(|e: ModelError| {
                    (
                        e.field.unwrap_or_else(|| format!("{side}.features")),
                        e.message,
                    )
                })?;
            Ok((inline_id(features), features.clone(), None))
        }
        _ => Err((
            side.to_string(),
            "give exactly one of `workload` (a registered id) or `features`".into(),
        )),
    }
}

/// The id of a job given by its features: the same features, the same id.
pub fn inline_id(features: &Features) -> String {
    let mut hash = duet_core::hash::FNV_OFFSET;
    for (name, value) in features {
        hash = duet_core::hash::fnv1a(name.as_bytes(), hash);
        let text = match value {
            FeatureInput::Number(v) => format!("n{v:?}"),
            FeatureInput::Text(v) => format!("t{v}"),
            FeatureInput::Null => "z".to_string(),
        };
        hash = duet_core::hash::fnv1a(text.as_bytes(), hash);
        hash = duet_core::hash::fnv1a(&[0], hash);
    }
    format!("inline-{hash:016x}")
}
