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

/// A job's features by name, `solo_throughput` included.
pub type Features = BTreeMap<String, FeatureInput>;

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

/// `POST /v1/predict`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, remote = "Self")]
pub struct PredictRequest {
    /// The device of every pair that names none; defaults to the server's `--gpu`, then to the
    /// model's only device when it was trained on one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<String>,
    pub pairs: Vec<PairQuery>,
}
object_only!(PredictRequest);

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
    /// The conservative slowdown: 90% of pairs like this one slow down less.
    pub slowdown_a_p90: f32,
    pub slowdown_b_p90: f32,
    /// `speed_a + speed_b`: the pair's total normalised throughput (1 = running one job alone).
    pub combined: f32,
    /// Which calibration of the p90 slowdowns applies: `known` when the model was trained on
    /// both workloads (both have an identity slot), `new` when at least one is new to it.
    pub calibration: Calibration,
}

/// The conformal calibration a prediction's p90 slowdowns come from. Each holds its 90% on
/// held-out pairs grouped the way it is used: `known` on unmeasured pairs of training
/// workloads, `new` on pairs with a workload left out of training.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Calibration {
    /// Both workloads were in the model's training data.
    Known,
    /// At least one workload is new to the model (profiled only alone, or inline features).
    New,
}

/// The answer to `POST /v1/predict`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PredictResponse {
    pub model_version: String,
    pub predictions: Vec<Prediction>,
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
        let err = serde_json::from_str::<Features>(r#"{"a": true}"#).expect_err("bool");
        assert!(
            err.to_string()
                .contains("a finite number, a string or null")
        );
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
