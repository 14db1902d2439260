//! The prediction API's request and response bodies, shared by the server, the `duet predict`
//! client and the scheduler. Plain serde types: no HTTP here.
//!
//! A job is given either by the id of a registered workload or inline by its features. A
//! job's features always include `solo_throughput` (iterations per second alone on the pair's
//! device) and the feature columns the model was trained on; `null` says "not measured".

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::dataset::{JobKind, Mode};

/// One feature value as a client sends it: a number, a category name, or `null` (not measured).
#[derive(Debug, Clone, PartialEq)]
pub enum FeatureInput {
    Number(f64),
    Text(String),
    Null,
}

impl Serialize for FeatureInput {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            FeatureInput::Number(v) => s.serialize_f64(*v),
            FeatureInput::Text(v) => s.serialize_str(v),
            FeatureInput::Null => s.serialize_unit(),
        }
    }
}

impl<'de> Deserialize<'de> for FeatureInput {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = FeatureInput;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a finite number, a string or null")
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<FeatureInput, E> {
                if v.is_finite() {
                    Ok(FeatureInput::Number(v))
                } else {
                    Err(E::custom(format!("{v} is not a finite number")))
                }
            }
            #[allow(clippy::cast_precision_loss)]
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<FeatureInput, E> {
                Ok(FeatureInput::Number(v as f64))
            }
            #[allow(clippy::cast_precision_loss)]
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<FeatureInput, E> {
                Ok(FeatureInput::Number(v as f64))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<FeatureInput, E> {
                Ok(FeatureInput::Text(v.to_string()))
            }
            fn visit_unit<E: de::Error>(self) -> Result<FeatureInput, E> {
                Ok(FeatureInput::Null)
            }
            fn visit_none<E: de::Error>(self) -> Result<FeatureInput, E> {
                Ok(FeatureInput::Null)
            }
        }
        d.deserialize_any(V)
    }
}

/// Deserializes a struct from a JSON object only. serde's derive also takes a struct from an
/// array of its fields in order (`[null]` as `{"model": null}`), which no client means and the
/// OpenAPI document does not allow. Put `#[serde(remote = "Self")]` on the struct's derive and
/// `object_only!(Type);` after it: the derived code becomes `Type::deserialize`/`serialize`,
/// and the trait impls written here call it through a map.
#[macro_export]
macro_rules! object_only {
    ($ty:ty) => {
        impl<'de> ::serde::Deserialize<'de> for $ty {
            fn deserialize<D: ::serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct Visit;
                impl<'de> ::serde::de::Visitor<'de> for Visit {
                    type Value = $ty;
                    fn expecting(&self, f: &mut ::std::fmt::Formatter) -> ::std::fmt::Result {
                        f.write_str(concat!("an object (", stringify!($ty), ")"))
                    }
                    fn visit_map<A: ::serde::de::MapAccess<'de>>(
                        self,
                        map: A,
                    ) -> Result<$ty, A::Error> {
                        <$ty>::deserialize(::serde::de::value::MapAccessDeserializer::new(map))
                    }
                }
                d.deserialize_map(Visit)
            }
        }

        impl ::serde::Serialize for $ty {
            fn serialize<S: ::serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                <$ty>::serialize(self, s)
            }
        }
    };
}

/// The name of a job's feature: compared, ordered and looked up as the `str` it holds, and
/// stored in place up to 24 bytes (every feature name duet writes), so parsing a job's inline
/// features allocates nothing for their names.
pub type FeatureName = compact_str::CompactString;

/// A job's features by name, `solo_throughput` included.
pub mod feature_map;
pub use feature_map::Features;

/// A request body's strings measured before it is parsed.
pub mod long_string;
pub use long_string::{LongString, MAX_STRING_BYTES, long_string};

/// One job of a pair: `{"workload": "<id>"}` or `{"features": {...}}`, exactly one of the two.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, remote = "Self")]
pub struct JobRef {
    /// The id of a registered workload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload: Option<String>,
    /// The job's features inline, `solo_throughput` included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<BTreeMap<String, Object>>))]
    pub features: Option<Features>,
}
object_only!(JobRef);

impl JobRef {
    pub fn workload(id: impl Into<String>) -> JobRef {
        JobRef {
            workload: Some(id.into()),
            features: None,
        }
    }

    /// The registered workload's id where the job is given by it alone (no inline features).
    pub fn workload_id(&self) -> Option<&str> {
        match (&self.workload, &self.features) {
            (Some(id), None) => Some(id),
            _ => None,
        }
    }
}

/// One candidate co-location: `a` next to `b` on one device under `mode`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, remote = "Self")]
pub struct PairQuery {
    pub a: JobRef,
    pub b: JobRef,
    pub mode: Mode,
    /// MPS active-thread percentage of `a`, in (0, 100]; required by `mps`, absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_a: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_b: Option<f64>,
    /// The device model (`v100`, `h200` ...); defaults to the request's `gpu`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<String>,
}
object_only!(PairQuery);

/// Three to eight jobs together on one device under `mode`: a candidate GPU with several
/// residents and a newcomer, say. The same workload may appear more than once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, remote = "Self")]
pub struct GroupQuery {
    pub jobs: Vec<JobRef>,
    pub mode: Mode,
    /// Each job's MPS active-thread percentage in (0, 100], in the order of `jobs`; required by
    /// `mps`, absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shares: Option<Vec<f64>>,
    /// The device model; defaults to the request's `gpu`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<String>,
}
object_only!(GroupQuery);

impl GroupQuery {
    /// Job `k`'s MPS share, where the group gives shares.
    pub fn share(&self, k: usize) -> Option<f64> {
        self.shares.as_ref().and_then(|s| s.get(k).copied())
    }
}

/// `POST /v1/predict`: pairs, groups of three or more, or both.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, remote = "Self")]
pub struct PredictRequest {
    /// The device of every pair or group that names none; defaults to the server's `--gpu`,
    /// then to the model's only device when it was trained on one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<String>,
    #[serde(default)]
    pub pairs: Vec<PairQuery>,
    /// Answered in `groups` of the response, in this order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<GroupQuery>,
}
object_only!(PredictRequest);

/// One job's answer within its group.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GroupJobPrediction {
    /// Co-located throughput over solo throughput.
    pub speed: f32,
    /// `1 / speed`.
    pub slowdown: f32,
    /// The conservative slowdown: each co-runner's p90 excess slowdown added (answered by the
    /// network: its own p90).
    pub slowdown_p90: f32,
    /// The pair settings this job was measured in on the asked device among the model's
    /// training data (0 for a workload new to it or to the device); absent where the model
    /// does not record them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured: Option<u32>,
}

/// The prediction for one group, in the order of the request's groups. A group is answered
/// from the model's pairs: a job's slowdown is 1 plus the extra slowdown each co-runner causes
/// it in a pair (`composition`), the p90 likewise from the pairs' p90s; or, for a group size
/// the model's network learned from measured groups, by the network itself, one row per job
/// (`composition`: `network`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GroupPrediction {
    /// Every pair of the group fits on the device together (necessary for the group to fit,
    /// not sufficient: the model knows memory pairwise only); answered by the network, every
    /// job's row says the group fits.
    pub feasible: bool,
    /// The least of the pairs' (or the jobs' rows') feasibility probabilities.
    pub feasible_probability: f32,
    /// Each job's answer, in the order of the query's `jobs`.
    pub jobs: Vec<GroupJobPrediction>,
    /// The sum of the jobs' speeds.
    pub combined: f32,
    /// The least trusted calibration class over the group's pairs.
    pub calibration: Calibration,
    /// How the pairs were composed: `excess`; `excess+effects` where a job's speed was also
    /// moved by its workload's group effect, learned from measured groups of this size
    /// (model.json's `calibration.group_effects`); `network` where the network answered the
    /// group itself (model.json's `calibration.group_network`).
    pub composition: String,
    /// Measured groups of this size that calibrated the p90 slowdowns (0: the pairs' p90s
    /// composed, calibrated on no measured group: the model was trained without groups).
    pub p90_groups: u32,
}

/// The prediction for one pair, in the order of the request's pairs. Single precision: the
/// model computes in it, and it halves the answer of a large request.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Prediction {
    /// The two jobs fit on the device together (no out-of-memory).
    pub feasible: bool,
    /// The model's probability that the pair is feasible.
    pub feasible_probability: f32,
    /// Co-located throughput of `a` over its solo throughput (1 = no slowdown).
    pub speed_a: f32,
    pub speed_b: f32,
    /// `1 / speed`: how many times longer a job takes next to the other.
    pub slowdown_a: f32,
    pub slowdown_b: f32,
    /// The conservative slowdown: 90% of pairs like this one slow down less; never below
    /// `slowdown_a` (the median).
    pub slowdown_a_p90: f32,
    pub slowdown_b_p90: f32,
    /// `speed_a + speed_b`: the pair's total normalised throughput (1 = running one job alone).
    pub combined: f32,
    /// Which calibration of the p90 slowdowns applies: `known` when the model was trained on
    /// both workloads (both have an identity slot), `probed` when it was but one was measured
    /// in only a few pair settings, `new` when at least one is new to it,
    /// `new_family` when a new one's model family was never in training, `conservative` when
    /// no calibrated class covers the pair (see [`Calibration`]).
    pub calibration: Calibration,
    /// The pair settings `a` was measured in on the asked device among the model's training
    /// data (0 for a workload new to it or to the device); absent where the model does not
    /// record them (trained before it; a model trained before the per-device counts counts
    /// every device).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_a: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_b: Option<u32>,
}

impl Prediction {
    /// The same prediction with `a` and `b` exchanged: what the model answers for the pair
    /// asked the other way round (both directions are encoded and run either way).
    #[must_use]
    pub fn swapped(self) -> Prediction {
        Prediction {
            speed_a: self.speed_b,
            speed_b: self.speed_a,
            slowdown_a: self.slowdown_b,
            slowdown_b: self.slowdown_a,
            slowdown_a_p90: self.slowdown_b_p90,
            slowdown_b_p90: self.slowdown_a_p90,
            measured_a: self.measured_b,
            measured_b: self.measured_a,
            ..self
        }
    }
}

/// The conformal calibration a prediction's p90 slowdowns come from. Each calibrated class
/// holds its 90% on held-out pairs grouped the way it is used: `known` on unmeasured pairs of
/// training workloads, `probed` on pairs with a family held out but for a few settings of
/// each of its workloads, `new` on pairs with a workload left out of training, `new_family` on
/// pairs with a whole model family left out. The order is that of trust: a pair takes the class
/// of its less known job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Calibration {
    /// Both workloads were in the model's training data.
    Known,
    /// Both workloads were in the model's training data, and at least one was measured in so
    /// few pair settings on the pair's device (at most `duet_model::encoding::PROBED_MAX`: a
    /// new job's probes) that its p90 is calibrated on families held out with that many
    /// settings kept.
    Probed,
    /// At least one workload is new to the model (profiled only alone, or inline features),
    /// and its model family was in training.
    New,
    /// At least one workload is of a model family the training data never had (or declares
    /// none).
    NewFamily,
    /// No calibrated class covers the pair: a job's family is new and the model saw too few
    /// families to calibrate that class, or a job's numeric feature lies far outside what
    /// training saw. The p90 carries the widest shift the model has.
    Conservative,
}

impl Calibration {
    /// Every class. A class's KServe code is its index here, so a class added later is
    /// appended (the order of trust is the type's order: known, probed, new, new_family,
    /// conservative).
    pub const ALL: [Calibration; 5] = [
        Calibration::Known,
        Calibration::New,
        Calibration::NewFamily,
        Calibration::Conservative,
        Calibration::Probed,
    ];

    /// The class's index in [`Calibration::ALL`]: its KServe `calibration` code.
    pub fn code(self) -> usize {
        match self {
            Calibration::Known => 0,
            Calibration::New => 1,
            Calibration::NewFamily => 2,
            Calibration::Conservative => 3,
            Calibration::Probed => 4,
        }
    }

    /// The class's name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Calibration::Known => "known",
            Calibration::Probed => "probed",
            Calibration::New => "new",
            Calibration::NewFamily => "new_family",
            Calibration::Conservative => "conservative",
        }
    }
}

/// The answer to `POST /v1/predict`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PredictResponse {
    pub model_version: String,
    /// One per pair of the request, in its order (empty for a request of groups alone).
    pub predictions: Vec<Prediction>,
    /// One per group of the request, in its order; absent where it had none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<GroupPrediction>,
}

/// A registered workload: its solo profile on each device it was measured on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, remote = "Self")]
pub struct WorkloadBody {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<JobKind>,
    /// Device model -> features (`solo_throughput` included) measured on it.
    #[cfg_attr(feature = "openapi", schema(value_type = BTreeMap<String, BTreeMap<String, Object>>))]
    pub profiles: BTreeMap<String, Features>,
}
object_only!(WorkloadBody);

/// `GET /v1/workloads/{id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RegisteredWorkload {
    pub workload: String,
    /// `dataset:<name>` for profiles from the model's training data (comma-separated where several
    /// datasets have it), `client` for PUTs.
    pub source: String,
    #[serde(flatten)]
    pub body: WorkloadBody,
}

/// One measured co-location (or, without `b`, one solo run of `a`) as the cluster saw it: what
/// `POST /v1/observations` takes, one per line of `duet observe --file`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, remote = "Self")]
pub struct Observation {
    /// The client's id of this observation: a retried batch stores nothing twice.
    pub id: String,
    /// The device model the jobs ran on.
    pub gpu: String,
    /// How the two jobs shared the device; absent for a solo run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<Mode>,
    /// MPS active-thread percentages, in (0, 100]; as in `/v1/predict`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_a: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_b: Option<f64>,
    pub a: JobRef,
    /// The other job; absent: `a` ran alone and `throughput_a` is its solo throughput.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub b: Option<JobRef>,
    /// Iterations per second of `a` over the window, > 0.
    pub throughput_a: f64,
    /// Iterations per second of `b`, > 0; required with `b`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throughput_b: Option<f64>,
    /// `a`'s throughput alone on this device, measured near the same time, where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub solo_throughput_a: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub solo_throughput_b: Option<f64>,
    /// The group's further jobs beside `a` and `b`, where three to eight jobs shared the device
    /// (absent, null or empty: a pair, or a solo run).
    #[serde(
        default,
        deserialize_with = "null_as_empty",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub others: Vec<ObservedJob>,
    /// How long the throughputs were measured over, seconds.
    pub window_s: f64,
    /// When the window ended, RFC 3339 (`2026-12-01T12:00:00Z`).
    pub observed_at: String,
}
object_only!(Observation);

/// A list that may also be sent as `null`, read as empty (as the other optional fields of an
/// observation may be null).
fn null_as_empty<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Vec<T>, D::Error> {
    Ok(Option::<Vec<T>>::deserialize(d)?.unwrap_or_default())
}

/// A third (to eighth) job of an observed group: which job, how fast it ran among the others.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, remote = "Self")]
pub struct ObservedJob {
    pub job: JobRef,
    /// Iterations per second over the window, > 0.
    pub throughput: f64,
    /// Its throughput alone on this device, measured near the same time, where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub solo_throughput: Option<f64>,
    /// MPS active-thread percentage, in (0, 100]; with `share_a` and `share_b` under `mps`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share: Option<f64>,
}
object_only!(ObservedJob);

/// `POST /v1/observations`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ObservationBatch {
    pub observations: Vec<Observation>,
}

/// An observation the server refused: nothing of it was stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RejectedObservation {
    /// Its position in the batch.
    pub index: usize,
    /// Its id, where it had a readable one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The offending field as a path (`observations[3].throughput_a`).
    pub field: String,
    pub error: String,
}

/// The answer to `POST /v1/observations`: 200 when every observation was stored (or already
/// was), 422 when some were refused (`error` and `field` name the first; the others were still
/// stored and are listed).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ObservationsAnswer {
    /// The ids stored by this call, durable before the answer.
    pub stored: Vec<String>,
    /// The ids stored before with the same content (a retry): nothing stored twice.
    pub duplicates: Vec<String>,
    pub rejected: Vec<RejectedObservation>,
    /// With a 422: the first refusal, in the words every error answer uses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

/// What the model predicted for an observed pair when the server received it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ObservedPrediction {
    pub model_version: String,
    pub speed_a: f64,
    pub speed_b: f64,
    pub slowdown_a_p90: f64,
    pub slowdown_b_p90: f64,
    pub calibration: Calibration,
    /// A group's further jobs, in the order of the observation's `others` (the group's answer
    /// composed from its pairs, as `/v1/predict` answers a group; `speed_a` and `speed_b` are
    /// its first two jobs').
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub others: Vec<ObservedJobPrediction>,
}

/// What the model predicted for one further job of an observed group.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ObservedJobPrediction {
    pub speed: f64,
    pub slowdown_p90: f64,
}

/// A further job of an observed group as the server resolved it (see [`ObservationRecord`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ObservedJobRecord {
    pub workload: String,
    pub features: Features,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<JobKind>,
}

/// An observation as the server stores it: the client's observation, and what the server
/// resolved when it arrived (each job's id and features on the device, so the record stands on
/// its own after the registry changes; the model's prediction, for drift).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ObservationRecord {
    pub observation: Observation,
    /// `a`'s workload id: the registered id, or `inline-<fingerprint of its features>`.
    pub workload_a: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload_b: Option<String>,
    /// The job's features on the device (`solo_throughput` included), as the server read them.
    pub features_a: Features,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub features_b: Option<Features>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind_a: Option<JobKind>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind_b: Option<JobKind>,
    /// The group's further jobs, in the order of the observation's `others`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub others: Vec<ObservedJobRecord>,
    /// The serving model's prediction for the pair or group (none for a solo run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prediction: Option<ObservedPrediction>,
    /// `observed_at` in seconds since 1970 (UTC).
    pub observed_at_s: f64,
    /// When the server stored it, seconds since 1970 (UTC).
    pub received_at_s: f64,
    /// The server that received it (its host name).
    pub server: String,
}

impl ObservationRecord {
    /// The observed speed of `a` and of `b` (co-located over solo throughput): the solo
    /// throughput reported with the observation where there is one, else the one the server
    /// predicted with.
    pub fn observed_speeds(&self) -> Option<(f64, f64)> {
        let o = &self.observation;
        let solo_a = solo_throughput(o.solo_throughput_a, Some(&self.features_a))?;
        let solo_b = solo_throughput(o.solo_throughput_b, self.features_b.as_ref())?;
        Some((o.throughput_a / solo_a, o.throughput_b? / solo_b))
    }

    /// Every co-located job's observed speed, `a`, `b`, then the group's `others` in order;
    /// `None` for a solo run, or where a job's solo throughput is known neither from the
    /// observation nor from its features.
    pub fn observed_group_speeds(&self) -> Option<Vec<f64>> {
        let (a, b) = self.observed_speeds()?;
        let mut speeds = vec![a, b];
        for (job, record) in self.observation.others.iter().zip(&self.others) {
            let solo = solo_throughput(job.solo_throughput, Some(&record.features))?;
            speeds.push(job.throughput / solo);
        }
        (speeds.len() == 2 + self.observation.others.len()).then_some(speeds)
    }
}

/// A job's solo throughput: the one reported with the observation, else its features'.
fn solo_throughput(reported: Option<f64>, features: Option<&Features>) -> Option<f64> {
    reported.or_else(|| match features?.get("solo_throughput") {
        Some(FeatureInput::Number(v)) => Some(*v),
        _ => None,
    })
}

/// How the loaded model does on what the cluster observed, for one workload or one group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DriftEntry {
    /// The workload id, `<gpu>/<mode>` for a device and mode, or the number of jobs for a
    /// group size.
    pub key: String,
    /// Observed jobs (a pair counts once for each of its two jobs).
    pub observations: usize,
    /// Mean absolute percentage error of the predicted speed against the observed one.
    pub mape: f64,
    /// The share of observed slowdowns at or below the predicted p90 slowdown (0.9 promised).
    pub p90_coverage: f64,
    /// Mean of (predicted - observed) / observed speed: > 0, the model is too optimistic.
    pub bias: f64,
    /// When the newest of them was observed (RFC 3339).
    pub last_observed_at: String,
}

/// `GET /v1/drift`: the stored observations scored against the loaded model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DriftReport {
    pub model_version: String,
    /// Co-located observations scored, pairs and groups (the newest `window` of them).
    pub pairs: usize,
    /// Stored observations left out: solo runs, and co-locations the loaded model cannot
    /// predict (its devices, modes or features differ from the one that received them).
    pub skipped: usize,
    pub window: usize,
    /// Per device and mode.
    pub groups: Vec<DriftEntry>,
    /// Per number of jobs that shared the device, keyed `2` for pairs, `3` and up for groups:
    /// each group size has a p90 of its own to hold.
    #[serde(default)]
    pub sizes: Vec<DriftEntry>,
    /// Per workload, the worst (highest MAPE) first.
    pub workloads: Vec<DriftEntry>,
}

/// The most bytes of an error's text, or of the path of the field it blames, that an answer
/// carries. A message may quote what a client sent (serde quotes a string of the wrong type,
/// escaping each control byte into several), so it is cut here: an error costs a few KiB
/// whatever the size of the input it names.
pub const ERROR_TEXT_BYTES: usize = 1024;

/// `text` as an answer may carry it: whole up to [`ERROR_TEXT_BYTES`], cut at a character's
/// boundary there otherwise, saying how much was left out.
pub fn clipped(text: String) -> String {
    if text.len() <= ERROR_TEXT_BYTES {
        return text;
    }
    clipped_at(&text, ERROR_TEXT_BYTES)
}

/// The part of a parser's field path (`pairs[3].a.features`, serde_path_to_error's form) that
/// names something: up to the first segment it could not name (`?`: a key that is not text, a
/// body cut short), `None` where that is nothing (`.`, the body itself).
pub fn known_path(path: &str) -> Option<&str> {
    let unnamed = path.match_indices('?').map(|(i, _)| i).find(|&i| {
        let before = path[..i].chars().next_back();
        let after = path[i + 1..].chars().next();
        matches!(before, None | Some('.')) && matches!(after, None | Some('.' | '['))
    });
    let known = match unnamed {
        Some(i) => path[..i].trim_end_matches('.'),
        None => path,
    };
    (!known.is_empty() && known != ".").then_some(known)
}

/// `text` whole up to `max` bytes, else cut at a character's boundary there, saying how much
/// was left out.
pub fn clipped_at(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}... ({} bytes more)", &text[..end], text.len() - end)
}

/// `prefix` and then `value`'s text, as [`clipped`] gives them, written no further than the
/// clip: a message that quotes a large input (a parser's error) is never copied whole.
pub fn clipped_display(prefix: &str, value: &dyn fmt::Display) -> String {
    struct Bounded {
        kept: String,
        total: usize,
        /// A piece was cut: nothing after it is kept, so the text kept is a prefix.
        cut: bool,
    }
    impl fmt::Write for Bounded {
        fn write_str(&mut self, s: &str) -> fmt::Result {
            self.total += s.len();
            if self.cut {
                return Ok(());
            }
            let room = ERROR_TEXT_BYTES - self.kept.len();
            let mut end = room.min(s.len());
            while !s.is_char_boundary(end) {
                end -= 1;
            }
            self.kept.push_str(&s[..end]);
            self.cut = end < s.len();
            Ok(())
        }
    }
    let mut out = Bounded {
        kept: String::new(),
        total: 0,
        cut: false,
    };
    // Writing into memory cannot fail but for a Display that reports an error itself.
    let _ = fmt::Write::write_fmt(&mut out, format_args!("{prefix}{value}"));
    if out.total <= ERROR_TEXT_BYTES {
        return out.kept;
    }
    let more = out.total - out.kept.len();
    format!("{}... ({more} bytes more)", out.kept)
}

/// Every 4xx and 5xx answer: what went wrong, and the request field it concerns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ApiError {
    pub error: String,
    /// The offending field as a path (`pairs[3].share_a`), where one is to blame.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

impl ApiError {
    /// What a client prints of an error answer's body: `field: error` from the JSON, or the body
    /// as it came when it is not one.
    pub fn describe(body: &str) -> String {
        match serde_json::from_str::<ApiError>(body) {
            Ok(e) => match e.field {
                Some(f) => format!("{f}: {}", e.error),
                None => e.error,
            },
            Err(_) => body.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn feature_inputs_round_trip_and_refuse_other_types() {
        let f: Features =
            serde_json::from_str(r#"{"a": 1, "b": 2.5, "c": "x", "d": null}"#).expect("parse");
        assert_eq!(f["a"], FeatureInput::Number(1.0));
        assert_eq!(f["c"], FeatureInput::Text("x".into()));
        assert_eq!(f["d"], FeatureInput::Null);
        let back = serde_json::to_string(&f).expect("write");
        assert_eq!(back, r#"{"a":1.0,"b":2.5,"c":"x","d":null}"#);
        // Names stored in place or (past 24 bytes) on the heap, escaped or not, read and
        // looked up alike; a name given twice keeps its last value.
        let long = "a_feature_name_longer_than_24_bytes";
        let f: Features = serde_json::from_str(&format!(r#"{{"{long}": 1, "\u0062": 2, "b": 3}}"#))
            .expect("parse");
        assert_eq!(f[long], FeatureInput::Number(1.0));
        assert_eq!(f["b"], FeatureInput::Number(3.0));
        assert_eq!(f.len(), 2);
        let err = serde_json::from_str::<Features>(r#"{"a": true}"#).expect_err("bool");
        assert!(
            err.to_string()
                .contains("a finite number, a string or null")
        );
    }

    #[test]
    fn a_path_is_known_up_to_its_first_unnamed_segment() {
        for (path, known) in [
            ("pairs[3].a", Some("pairs[3].a")),
            (".", None),
            ("?", None),
            ("Pod.spec.containers[0].?", Some("Pod.spec.containers[0]")),
            ("features.?.x", Some("features")),
            ("a[0].?[2]", Some("a[0]")),
            ("features.why?", Some("features.why?")),
        ] {
            assert_eq!(known_path(path), known, "{path}");
        }
    }

    #[test]
    fn an_error_text_is_clipped_alike_whole_or_written() {
        struct Pieces(Vec<&'static str>);
        impl fmt::Display for Pieces {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.iter().try_for_each(|p| f.write_str(p))
            }
        }
        let short = Pieces(vec!["unknown ", "field"]);
        assert_eq!(clipped_display("bad: ", &short), "bad: unknown field");
        assert_eq!(clipped("bad: unknown field".into()), "bad: unknown field");
        // Past the limit, in pieces that split a multi-byte character at the cut, and pieces
        // after the cut that would fit: the same text as clipping the whole.
        let a = "a".repeat(ERROR_TEXT_BYTES - 6);
        let long = Pieces(vec![Box::leak(a.into_boxed_str()), "éééé", "b", "ccc"]);
        let whole = clipped(format!("err: {long}"));
        assert_eq!(clipped_display("err: ", &long), whole);
        assert!(
            whole.ends_with("a... (12 bytes more)"),
            "{}",
            &whole[whole.len() - 30..]
        );
        assert!(whole.len() <= ERROR_TEXT_BYTES + 30);
        // Exactly at the limit: whole.
        let exact = "x".repeat(ERROR_TEXT_BYTES);
        assert_eq!(clipped_display("", &exact), exact);
        assert_eq!(clipped(exact.clone()), exact);
    }

    #[test]
    fn a_pair_names_unknown_fields() {
        let err = serde_json::from_str::<PairQuery>(
            r#"{"a": {"workload": "x"}, "b": {"workload": "y"}, "mode": "mps", "shar_a": 5}"#,
        )
        .expect_err("typo");
        assert!(err.to_string().contains("shar_a"), "{err}");
    }

    #[test]
    fn request_bodies_are_objects_never_arrays_of_fields() {
        for (text, what) in [
            (r#"[null, []]"#, "request"),
            (
                r#"{"pairs": [[{"workload": "x"}, {"workload": "y"}, "space"]]}"#,
                "pair",
            ),
            (
                r#"{"pairs": [{"a": ["x"], "b": {"workload": "y"}, "mode": "space"}]}"#,
                "job",
            ),
        ] {
            let err = serde_json::from_str::<PredictRequest>(text).expect_err(what);
            assert!(
                err.to_string().contains("expected an object"),
                "{what}: {err}"
            );
        }
        assert!(serde_json::from_str::<WorkloadBody>(r#"[null, {}]"#).is_err());
        let ok: PredictRequest = serde_json::from_str(
            r#"{"pairs": [{"a": {"workload": "x"}, "b": {"workload": "y"}, "mode": "space"}]}"#,
        )
        .expect("an object");
        assert_eq!(
            serde_json::to_value(&ok).expect("writes")["pairs"][0]["mode"],
            "space"
        );
    }
}
