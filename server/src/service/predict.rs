//! What a prediction request does, whatever carried it: its pairs checked, encoded and run a
//! chunk at a time, a large request split over the cores, and each chunk's predictions written
//! by the transport (`Sink`): JSON items for `POST /v1/predict`, messages for gRPC's
//! `duet.v1.Predictor/Predict`.

use std::sync::atomic::{AtomicBool, Ordering};

use axum::http::StatusCode;
use duet_core::api::{PredictRequest, Prediction};

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

/// A request's predictions: the serving model's version, and the parts' sinks in the order of
/// the request's pairs.
#[derive(Debug)]
pub struct Predicted<S> {
    pub model_version: String,
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
        return Err(Failure::field("pairs", "no pairs to predict"));
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
        model_version: model.version().to_string(),
        parts,
    })
}

/// Pairs encoded, run and written at once: a request's tensors never hold more, and a request
/// given up stops within one chunk's work.
const CHUNK_PAIRS: usize = 2048;

/// Requests with at least this many pairs are split over the cores.
pub const PARALLEL_PAIRS: usize = 2048;
