//! The Open Inference Protocol (KServe v2) over the serving model, whatever carries it: the
//! model a request names, the checks of its one input tensor (`pairs`, FP32 `[N, width]`) and
//! the forward pass to its outputs: `outputs` (FP32 `[N, 3]`: ln speed, ln p10 speed as the
//! network gives it, feasibility logit), `calibrated` (FP32 `[N, 1]`: the ln p10 speed after the
//! conformal shift of the row's calibration class, never above the row's ln speed: `-ln
//! slowdown_p90` of `/v1/predict`; for a row with a job of a new family or a probed job,
//! weighted with the model's effects prior first, as there) and `calibration` (INT32 `[N, 1]`:
//! that class, 0 known, 1 new, 2 new_family, 3 conservative, 4 probed).
//! The HTTP route (`crate::routes::kserve`, JSON or the binary tensor extension) and the gRPC
//! service (`crate::grpc::kserve`) parse their wire format into these calls, so both refuse the
//! same tensors with the same words.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::http::StatusCode;
use duet_model::LoadedModel;
use duet_model::network::OUTPUTS;
use duet_model::onnx::{INPUT, OUTPUT};
use duet_model::predict::Decode;

use crate::error::Failure;
use crate::state::AppState;

/// The largest magnitude of an encoded input: standardised features are a few units, so this
/// bound only refuses values no encoding produces, and keeps every output finite.
pub const MAX_INPUT: f32 = 1e6;

/// The datatype of the input and of the outputs but `calibration`.
pub const FP32: &str = "FP32";

/// The datatype of `calibration`.
pub const INT32: &str = "INT32";

/// The output of each row's ln p10 speed after its calibration class's shift.
pub const CALIBRATED: &str = "calibrated";

/// The output of each row's calibration class, as its index in `Calibration::ALL`.
pub const CALIBRATION: &str = "calibration";

/// Bytes of one FP32 value in a binary tensor (little-endian).
pub const FP32_BYTES: usize = 4;

/// The extensions of the protocol this server speaks (`ServerMetadata`).
pub const EXTENSIONS: [&str; 1] = ["binary_tensor_data"];

/// Whether the server takes inference requests: a model loaded, and not shutting down.
pub fn server_ready(state: &AppState) -> bool {
    state.is_ready() && !state.lifecycle.draining()
}

/// The model `name` names, or 404.
pub fn named(state: &AppState, name: &str) -> Result<Arc<LoadedModel>, Failure> {
    let model = state.model()?;
    if model.meta.name == name {
        Ok(model)
    } else {
        Err(Failure::field(
            "name",
            format!(
                "no model `{name}`; this server serves `{}`",
                model.meta.name
            ),
        )
        .with_status(StatusCode::NOT_FOUND))
    }
}

/// The model `name` names at `version` (`None`: whichever version is served), or 404 naming
/// `field` for another version.
pub fn named_version(
    state: &AppState,
    name: &str,
    version: Option<&str>,
    field: &str,
) -> Result<Arc<LoadedModel>, Failure> {
    let model = named(state, name)?;
    match version {
        Some(v) if v != model.version() => Err(Failure::field(
            field,
            format!(
                "no version `{v}` of model `{name}`; this server serves version `{}`",
                model.version()
            ),
        )
        .with_status(StatusCode::NOT_FOUND)),
        _ => Ok(model),
    }
}

/// The server's name in the protocol's server metadata.
pub const SERVER_NAME: &str = "duet";

/// The server's version in the protocol's server metadata.
pub const SERVER_VERSION: &str = env!("CARGO_PKG_VERSION");

/// A tensor's name, datatype and shape, as the model's metadata states them.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorSpec {
    pub name: &'static str,
    pub datatype: &'static str,
    pub shape: [i64; 2],
}

/// The model's one input, `[-1, width]`.
#[allow(clippy::cast_possible_wrap)]
pub fn input_spec(model: &LoadedModel) -> TensorSpec {
    TensorSpec {
        name: INPUT,
        datatype: FP32,
        shape: [-1, model.meta.spec.pair_width() as i64],
    }
}

/// The model's outputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// `outputs`: the network's ln speed, ln p10 speed and feasibility logit.
    Raw,
    /// `calibrated`: the ln p10 speed after the row's calibration shift, never above its ln
    /// speed.
    Calibrated,
    /// `calibration`: the row's calibration class, its index in `Calibration::ALL`.
    Calibration,
}

impl Output {
    /// Every output, in the order an answer lists them where the request names none.
    pub const ALL: [Output; 3] = [Output::Raw, Output::Calibrated, Output::Calibration];

    /// Its name, datatype and shape, as the model's metadata states them.
    #[allow(clippy::cast_possible_wrap)]
    pub fn spec(self) -> TensorSpec {
        match self {
            Output::Raw => TensorSpec {
                name: OUTPUT,
                datatype: FP32,
                shape: [-1, OUTPUTS as i64],
            },
            Output::Calibrated => TensorSpec {
                name: CALIBRATED,
                datatype: FP32,
                shape: [-1, 1],
            },
            Output::Calibration => TensorSpec {
                name: CALIBRATION,
                datatype: INT32,
                shape: [-1, 1],
            },
        }
    }
}

/// The specs of [`Output::ALL`].
pub fn output_specs() -> [TensorSpec; 3] {
    Output::ALL.map(Output::spec)
}

/// The outputs a request asks for, by name (`field` says where, `outputs[i]`), in the request's
/// order, a name asked twice once; every output where it names none.
pub fn requested_outputs<'n>(
    names: impl IntoIterator<Item = (String, &'n str)>,
) -> Result<Vec<Output>, Failure> {
    let mut wanted = Vec::new();
    for (field, name) in names {
        let output = Output::ALL
            .into_iter()
            .find(|o| o.spec().name == name)
            .ok_or_else(|| {
                Failure::field(
                    format!("{field}.name"),
                    format!(
                        "the model's outputs are {}, not `{name}`",
                        output_specs()
                            .iter()
                            .map(|s| format!("`{}`", s.name))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                )
            })?;
        if !wanted.contains(&output) {
            wanted.push(output);
        }
    }
    if wanted.is_empty() {
        wanted = Output::ALL.to_vec();
    }
    Ok(wanted)
}

/// One output's values, in its datatype (in JSON: FP32 as numbers, INT32 as integers).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(untagged)]
pub enum Values {
    Fp32(Vec<f32>),
    Int32(Vec<i32>),
}

impl Values {
    /// The values as little-endian bytes (a binary output).
    pub fn to_le_bytes(&self) -> Vec<u8> {
        match self {
            Values::Fp32(v) => to_le_bytes(v),
            Values::Int32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        }
    }
}

/// What the model reports as its platform.
pub fn platform(model: &LoadedModel) -> String {
    format!("duet_{}", model.engine.kind())
}

/// Checks the one input tensor's name, datatype and shape (`field` is where the transport
/// keeps it, `inputs[0]`); its rows, at most `max_rows` (413 past it). Run before its values
/// are read, so a tensor over the limit is refused before it is materialised.
pub fn check_input(
    field: &str,
    name: &str,
    datatype: &str,
    shape: &[i64],
    width: usize,
    max_rows: usize,
) -> Result<usize, Failure> {
    if name != INPUT {
        return Err(Failure::field(
            format!("{field}.name"),
            format!("the model's input is `{INPUT}`, not `{name}`"),
        ));
    }
    if datatype != FP32 {
        return Err(Failure::field(
            format!("{field}.datatype"),
            format!("the input is {FP32}, not {datatype}"),
        ));
    }
    let rows = match shape {
        [rows, w] if *rows > 0 && usize::try_from(*w).ok() == Some(width) => {
            usize::try_from(*rows).unwrap_or(usize::MAX)
        }
        _ => {
            return Err(Failure::field(
                format!("{field}.shape"),
                format!(
                    "the input's shape is [rows, {width}], got {}",
                    shape_of(shape)
                ),
            ));
        }
    };
    if rows > max_rows {
        return Err(Failure::field(
            format!("{field}.shape"),
            format!("{rows} rows is over the server's limit of {max_rows} (--max-infer-rows)"),
        )
        .with_status(StatusCode::PAYLOAD_TOO_LARGE));
    }
    Ok(rows)
}

/// The values of a binary tensor: `bytes` little-endian FP32, exactly `rows x width` of them.
/// `field` names where the transport says how many bytes the tensor has.
pub fn from_le_bytes(
    field: &str,
    bytes: &[u8],
    rows: usize,
    width: usize,
) -> Result<Vec<f32>, Failure> {
    let expected = rows.saturating_mul(width).saturating_mul(FP32_BYTES);
    if bytes.len() != expected {
        return Err(Failure::field(
            field,
            format!(
                "{} bytes for shape [{rows}, {width}] of {FP32} ({expected} expected: rows x \
                 width x {FP32_BYTES})",
                bytes.len()
            ),
        ));
    }
    Ok(bytes
        .chunks_exact(FP32_BYTES)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap_or_default()))
        .collect())
}

/// Checks the input's values: `rows x width` of them, each finite and within `MAX_INPUT`.
/// `field` names them (`inputs[0].data`).
pub fn check_values(field: &str, data: &[f32], rows: usize, width: usize) -> Result<(), Failure> {
    if data.len() != rows * width {
        return Err(Failure::field(
            field,
            format!(
                "{} values for shape [{rows}, {width}] ({} expected)",
                data.len(),
                rows * width
            ),
        ));
    }
    // One pass that vectorises (a NaN or an infinity fails `<=` too), then the first offender
    // looked for only where there is one.
    if data.iter().fold(true, |ok, v| ok & (v.abs() <= MAX_INPUT)) {
        return Ok(());
    }
    if let Some(i) = data
        .iter()
        .position(|v| !v.is_finite() || v.abs() > MAX_INPUT)
    {
        return Err(Failure::field(
            format!("{field}[{i}]"),
            format!(
                "{} is not a number in [-{MAX_INPUT:e}, {MAX_INPUT:e}] (encoded inputs are \
                 standardised: a value this large is no pair's encoding)",
                data[i]
            ),
        ));
    }
    Ok(())
}

/// Runs the checked input (`rows` of the model's width) through the model and gives the
/// outputs `wanted`, in that order. A row's calibration class is
/// the one `/v1/predict` gives the pair it encodes (its less known job's, on its device), so
/// `calibrated` of a pair's `(a, b)` row is `-ln slowdown_a_p90`; `/metrics` counts the rows
/// answered by class (`duet_kserve_rows_total`). Nothing runs once the request was given up
/// (`cancelled`).
pub fn run(
    state: &AppState,
    model: &LoadedModel,
    data: Vec<f32>,
    wanted: &[Output],
    cancelled: &AtomicBool,
) -> Result<Vec<Values>, Failure> {
    if cancelled.load(Ordering::Relaxed) {
        return Err(state.metrics.guards.gave_up());
    }
    let spec = &model.meta.spec;
    let width = spec.pair_width();
    // The classes (and a new family's or probed job's prior) are read from the rows before the engine takes
    // them.
    let classes: Vec<Decode> = if width > 0 {
        data.chunks_exact(width)
            .map(|row| Decode::of_row(spec, &model.meta.calibration, row))
            .collect()
    } else {
        Vec::new()
    };
    let outputs = model.engine.run(data).map_err(|e| {
        Failure::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("inference failed: {e}"),
        )
    })?;
    state.metrics.kserve_rows(classes.iter().map(|d| d.class));
    #[allow(clippy::cast_possible_truncation)]
    let mut calibrated = wanted.contains(&Output::Calibrated).then(|| {
        outputs
            .chunks_exact(OUTPUTS)
            .zip(&classes)
            .map(|(row, d)| d.calibrated(0, row).1 as f32)
            .collect::<Vec<f32>>()
    });
    #[allow(clippy::cast_possible_wrap, clippy::cast_possible_truncation)]
    let mut codes = wanted.contains(&Output::Calibration).then(|| {
        classes
            .iter()
            .map(|d| d.class.code() as i32)
            .collect::<Vec<i32>>()
    });
    let mut raw = Some(outputs);
    // `wanted` names each output once: each is moved out once.
    let values = wanted
        .iter()
        .map(|output| match output {
            Output::Raw => Values::Fp32(raw.take().unwrap_or_default()),
            Output::Calibrated => Values::Fp32(calibrated.take().unwrap_or_default()),
            Output::Calibration => Values::Int32(codes.take().unwrap_or_default()),
        })
        .collect();
    Ok(values)
}

/// The output's values as little-endian bytes (a binary output).
pub fn to_le_bytes(values: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(values.len() * FP32_BYTES);
    for v in values {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out
}

/// A client's shape as an error says it: whole where it is short, else its number of
/// dimensions (a shape of millions of entries is not echoed back).
fn shape_of(shape: &[i64]) -> String {
    if shape.len() <= 8 {
        format!("{shape:?}")
    } else {
        format!("{} dimensions", shape.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_values_round_trip_and_their_size_is_checked() {
        let values = [1.5f32, -2.25, 0.0, 3.0e-3, 7.0, -1.0];
        let bytes = to_le_bytes(&values);
        assert_eq!(bytes.len(), 24);
        assert_eq!(from_le_bytes("f", &bytes, 2, 3).expect("fits"), values);
        let short = from_le_bytes("inputs[0].parameters.binary_data_size", &bytes[..20], 2, 3)
            .expect_err("5 values for 6");
        assert_eq!(
            short.field.as_deref(),
            Some("inputs[0].parameters.binary_data_size")
        );
        assert!(short.error.contains("20 bytes") && short.error.contains("24 expected"));
    }

    #[test]
    fn the_input_is_checked_before_its_values() {
        let over = check_input("inputs[0]", INPUT, FP32, &[11, 4], 4, 10).expect_err("11 > 10");
        assert_eq!(over.status, StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(over.field.as_deref(), Some("inputs[0].shape"));
        let name = check_input("inputs[0]", "x", FP32, &[1, 4], 4, 10).expect_err("name");
        assert_eq!(name.field.as_deref(), Some("inputs[0].name"));
        assert_eq!(check_input("inputs[0]", INPUT, FP32, &[3, 4], 4, 10), Ok(3));
        let far = check_values("inputs[0].data", &[0.0, 2e6], 1, 2).expect_err("too large");
        assert_eq!(far.field.as_deref(), Some("inputs[0].data[1]"));
    }
}
