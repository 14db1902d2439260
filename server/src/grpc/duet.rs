//! duet's `duet.v1.Predictor`: `Predict` means what `POST /v1/predict` means, through the same
//! service (`crate::service::predict`): the same checks and errors (a field named by its path,
//! `pairs[3].a.workload`), the pairs limit, the registry snapshot. A small request is answered
//! at once, as on HTTP; a larger one takes a place of model work and a blocking thread.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use duet_core::api::{self, FeatureInput, GroupQuery, JobRef, PairQuery};
use prost::Message;
use tonic::{Request, Response, Status};

use super::proto::duet::v1::feature_value::Value;
use super::proto::duet::v1::job::Job as JobChoice;
use super::proto::duet::v1::predictor_server::Predictor as PredictorService;
use super::proto::duet::v1::{
    Calibration, Group, GroupJobPrediction, GroupPrediction, Job, Pair, PredictRequest,
    PredictResponse, Prediction,
};
use super::{authorize_read, call, with_place};
use crate::error::Failure;
use crate::routes::predict::INLINE_BODY_BYTES;
use crate::service::predict::{Spent, over_pairs, pair_count, predict, predict_with_groups};

pub(crate) const PREDICT: &str = "/duet.v1.Predictor/Predict";

/// `duet.v1.Predictor` on the server's state.
#[derive(Debug, Clone)]
pub struct Predictor {
    state: Arc<crate::state::AppState>,
}

impl Predictor {
    pub fn new(state: Arc<crate::state::AppState>) -> Predictor {
        Predictor { state }
    }
}

/// A job as `/v1/predict` takes it; neither or both of id and features are the model's to
/// refuse, in the words it uses for JSON. `field` (the job's path) is only written for an error.
fn job(job: Option<Job>, field: &dyn Fn() -> String) -> Result<JobRef, Failure> {
    match job.and_then(|j| j.job) {
        None => Ok(JobRef::default()),
        Some(JobChoice::Workload(id)) => Ok(JobRef::workload(id)),
        Some(JobChoice::Features(features)) => {
            // Gathered, then sorted once into the map (`collect`): inserting each of a map's
            // entries, which arrive in the hash table's order, would shift the entries after it.
            let mut values = Vec::with_capacity(features.values.len());
            for (name, value) in features.values {
                let value = match value.value {
                    None => FeatureInput::Null,
                    Some(Value::Text(text)) => FeatureInput::Text(text),
                    Some(Value::Number(x)) if x.is_finite() => FeatureInput::Number(x),
                    Some(Value::Number(x)) => {
                        return Err(Failure::field(
                            format!("{}.features.{name}", field()),
                            format!("{x} is not a finite number"),
                        ));
                    }
                };
                values.push((name.into(), value));
            }
            Ok(JobRef {
                workload: None,
                features: Some(values.into_iter().collect()),
            })
        }
    }
}

/// The request as `/v1/predict` takes it, refused past `--max-pairs` (its pairs and the pairs
/// within its groups).
pub fn request(message: PredictRequest, max_pairs: usize) -> Result<api::PredictRequest, Failure> {
    if message.pairs.len() > max_pairs {
        return Err(over_pairs(max_pairs));
    }
    let groups = message
        .groups
        .into_iter()
        .enumerate()
        .map(|(g, group)| {
            let Group {
                jobs,
                mode,
                shares,
                gpu,
            } = group;
            let mode = mode
                .parse()
                .map_err(|e: String| Failure::field(format!("groups[{g}].mode"), e))?;
            let jobs = jobs
                .into_iter()
                .enumerate()
                .map(|(k, j)| job(Some(j), &|| format!("groups[{g}].jobs[{k}]")))
                .collect::<Result<Vec<_>, Failure>>()?;
            Ok(GroupQuery {
                jobs,
                mode,
                shares: (!shares.is_empty()).then_some(shares),
                gpu,
            })
        })
        .collect::<Result<Vec<_>, Failure>>()?;
    let pairs = message
        .pairs
        .into_iter()
        .enumerate()
        .map(|(i, pair)| {
            let Pair {
                a,
                b,
                mode,
                share_a,
                share_b,
                gpu,
            } = pair;
            let mode = mode
                .parse()
                .map_err(|e: String| Failure::field(format!("pairs[{i}].mode"), e))?;
            Ok(PairQuery {
                a: job(a, &|| format!("pairs[{i}].a"))?,
                b: job(b, &|| format!("pairs[{i}].b"))?,
                mode,
                share_a,
                share_b,
                gpu,
            })
        })
        .collect::<Result<Vec<_>, Failure>>()?;
    let request = api::PredictRequest {
        gpu: message.gpu,
        pairs,
        groups,
    };
    if pair_count(&request) > max_pairs {
        return Err(over_pairs(max_pairs));
    }
    Ok(request)
}

fn calibration(c: api::Calibration) -> i32 {
    match c {
        api::Calibration::Known => Calibration::Known,
        api::Calibration::Probed => Calibration::Probed,
        api::Calibration::New => Calibration::New,
        api::Calibration::NewFamily => Calibration::NewFamily,
        api::Calibration::Conservative => Calibration::Conservative,
    }
    .into()
}

fn prediction(p: &api::Prediction) -> Prediction {
    Prediction {
        feasible: p.feasible,
        feasible_probability: p.feasible_probability,
        speed_a: p.speed_a,
        speed_b: p.speed_b,
        slowdown_a: p.slowdown_a,
        slowdown_b: p.slowdown_b,
        slowdown_a_p90: p.slowdown_a_p90,
        slowdown_b_p90: p.slowdown_b_p90,
        combined: p.combined,
        calibration: calibration(p.calibration),
        measured_a: p.measured_a,
        measured_b: p.measured_b,
    }
}

fn group_prediction(g: api::GroupPrediction) -> GroupPrediction {
    GroupPrediction {
        feasible: g.feasible,
        feasible_probability: g.feasible_probability,
        jobs: g
            .jobs
            .into_iter()
            .map(|j| GroupJobPrediction {
                speed: j.speed,
                slowdown: j.slowdown,
                slowdown_p90: j.slowdown_p90,
                measured: j.measured,
            })
            .collect(),
        combined: g.combined,
        calibration: calibration(g.calibration),
        composition: g.composition,
        p90_groups: g.p90_groups,
    }
}

/// The answer to `request`, given up at its next chunk once `cancelled` is set; the request,
/// and what was built from it, go to `spent`.
fn answer(
    state: &crate::state::AppState,
    request: api::PredictRequest,
    cancelled: &AtomicBool,
    spent: &mut Spent,
) -> Result<PredictResponse, Failure> {
    if request.groups.is_empty() {
        let predicted = predict::<Vec<api::Prediction>>(state, &request, cancelled);
        spent.keep(request);
        let predicted = predicted?;
        return Ok(PredictResponse {
            model_version: predicted.model.version().to_string(),
            predictions: predicted.parts.iter().flatten().map(prediction).collect(),
            groups: Vec::new(),
        });
    }
    let (model_version, predictions, groups) =
        predict_with_groups(state, request, cancelled, spent)?;
    Ok(PredictResponse {
        model_version,
        predictions: predictions.iter().map(prediction).collect(),
        groups: groups.into_iter().map(group_prediction).collect(),
    })
}

#[tonic::async_trait]
impl PredictorService for Predictor {
    async fn predict(
        &self,
        request: Request<PredictRequest>,
    ) -> Result<Response<PredictResponse>, Status> {
        let state = &self.state;
        call(state, PREDICT, async {
            authorize_read(state, &request)?;
            let message = request.into_inner();
            let small = message.encoded_len() <= INLINE_BODY_BYTES;
            let request = self::request(message, state.config.max_pairs)?;
            if small {
                // A few pairs: answered at once, without a place, as on HTTP.
                answer(
                    state,
                    request,
                    &AtomicBool::new(false),
                    &mut Spent::default(),
                )
            } else {
                let places = state.limiter.places_for(
                    pair_count(&request),
                    crate::service::predict::PARALLEL_PAIRS,
                );
                with_place(
                    state,
                    PREDICT,
                    "prediction",
                    places,
                    move |state, cancelled, spent| answer(state, request, cancelled, spent),
                )
                .await
            }
        })
        .await
    }
}
