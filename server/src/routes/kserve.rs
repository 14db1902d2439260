//! The Open Inference Protocol (KServe v2) over HTTP: health, model metadata, and `infer` on the
//! encoded tensor (`pairs`, FP32 `[N, width]` -> `outputs`, FP32 `[N, 3]`: ln speed, ln p10
//! speed, feasibility logit; `calibrated`, FP32 `[N, 1]`: the ln p10 speed after the row's
//! calibration shift; `calibration`, INT32 `[N, 1]`: that class), for tooling that speaks the
//! protocol. `infer` takes JSON or the
//! binary tensor data extension (a JSON header of `Inference-Header-Content-Length` bytes, then
//! each tensor's raw little-endian bytes), and answers in binary where the request asks for it.
//! What the tensors must be is `crate::service::kserve`'s, shared with gRPC.

use std::sync::Arc;

use axum::Extension;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use duet_model::onnx::INPUT;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::bounded::Refused;
use crate::error::{Failure, body_failure};
use crate::service::kserve::{self as service, FP32, FP32_BYTES, Output};
use crate::shed::Work;
use crate::state::{AppState, not_ready};

/// The header that says how many bytes of the body are the JSON header, the rest being the
/// tensors' bytes (the binary tensor data extension); on an answer, the same of the answer.
pub const HEADER_LENGTH: &str = "inference-header-content-length";

/// The path parameter naming the model.
#[derive(Debug, utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
pub struct ModelName {
    /// The served model's name (`GET /v1/models`).
    pub name: String,
}

/// The path parameters naming a model and one of its versions.
#[derive(Debug, utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
pub struct ModelVersion {
    /// The served model's name (`GET /v1/models`).
    pub name: String,
    /// The served model's version (`versions` in its metadata); another is a 404.
    pub version: String,
}

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/v2", get(server_metadata))
        .route("/v2/health/live", get(live))
        .route("/v2/health/ready", get(ready))
        .route("/v2/models/{name}", get(metadata))
        .route("/v2/models/{name}/ready", get(model_ready))
        .route(
            "/v2/models/{name}/versions/{version}",
            get(version_metadata),
        )
        .route(
            "/v2/models/{name}/versions/{version}/ready",
            get(version_ready),
        )
}

/// `infer`, which runs the model: behind the limit of work in flight.
pub fn infer_routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/v2/models/{name}/infer", post(infer))
        .route(
            "/v2/models/{name}/versions/{version}/infer",
            post(version_infer),
        )
}

#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ServerMetadata {
    pub name: String,
    pub version: String,
    /// The protocol's extensions this server speaks.
    pub extensions: Vec<String>,
}

#[utoipa::path(get, path = "/v2", tag = "kserve", responses((status = 200, body = ServerMetadata)))]
pub async fn server_metadata() -> Json<ServerMetadata> {
    Json(ServerMetadata {
        name: service::SERVER_NAME.into(),
        version: service::SERVER_VERSION.into(),
        extensions: service::EXTENSIONS.iter().map(|e| (*e).into()).collect(),
    })
}

#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Live {
    pub live: bool,
}

#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Ready {
    pub ready: bool,
}

#[utoipa::path(get, path = "/v2/health/live", tag = "kserve", responses((status = 200, body = Live)))]
pub async fn live() -> Json<Live> {
    Json(Live { live: true })
}

#[utoipa::path(get, path = "/v2/health/ready", tag = "kserve", responses(
    (status = 200, body = Ready), (status = 503, body = Ready, description = "no model loaded yet, or shutting down")))]
pub async fn ready(State(state): State<Arc<AppState>>) -> (StatusCode, Json<Ready>) {
    let ready = service::server_ready(&state);
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(Ready { ready }))
}

#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TensorMeta {
    pub name: String,
    pub datatype: String,
    pub shape: Vec<i64>,
}

impl From<service::TensorSpec> for TensorMeta {
    fn from(t: service::TensorSpec) -> TensorMeta {
        TensorMeta {
            name: t.name.into(),
            datatype: t.datatype.into(),
            shape: t.shape.to_vec(),
        }
    }
}

#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ModelMetadata {
    pub name: String,
    pub versions: Vec<String>,
    pub platform: String,
    pub inputs: Vec<TensorMeta>,
    pub outputs: Vec<TensorMeta>,
}

#[utoipa::path(get, path = "/v2/models/{name}", tag = "kserve", params(ModelName), responses(
    (status = 200, body = ModelMetadata),
    (status = 401, body = duet_core::api::ApiError, description = "--protect-reads and no or a wrong token"),
    (status = 404, body = duet_core::api::ApiError, description = "no model of that name"),
    (status = 503, body = duet_core::api::ApiError, description = "no model loaded yet")))]
pub async fn metadata(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Result<Json<ModelMetadata>, Failure> {
    model_metadata(&state, &headers, &name, None)
}

#[utoipa::path(get, path = "/v2/models/{name}/versions/{version}", tag = "kserve", params(ModelVersion), responses(
    (status = 200, body = ModelMetadata),
    (status = 401, body = duet_core::api::ApiError, description = "--protect-reads and no or a wrong token"),
    (status = 404, body = duet_core::api::ApiError, description = "no model of that name, or not that version"),
    (status = 503, body = duet_core::api::ApiError, description = "no model loaded yet")))]
pub async fn version_metadata(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path((name, version)): Path<(String, String)>,
) -> Result<Json<ModelMetadata>, Failure> {
    model_metadata(&state, &headers, &name, Some(&version))
}

fn model_metadata(
    state: &AppState,
    headers: &HeaderMap,
    name: &str,
    version: Option<&str>,
) -> Result<Json<ModelMetadata>, Failure> {
    state.access.read(headers)?;
    let model = service::named_version(state, name, version, "version")?;
    Ok(Json(ModelMetadata {
        name: model.meta.name.clone(),
        versions: vec![model.version().to_string()],
        platform: service::platform(&model),
        inputs: vec![service::input_spec(&model).into()],
        outputs: service::output_specs()
            .into_iter()
            .map(Into::into)
            .collect(),
    }))
}

#[utoipa::path(get, path = "/v2/models/{name}/ready", tag = "kserve", params(ModelName), responses(
    (status = 200, body = Ready),
    (status = 404, body = duet_core::api::ApiError, description = "no model of that name"),
    (status = 503, body = duet_core::api::ApiError, description = "no model loaded yet")))]
pub async fn model_ready(
    State(state): State<Arc<AppState>>,
    Path(name): Path<String>,
) -> Result<Json<Ready>, Failure> {
    ready_version(&state, &name, None)
}

#[utoipa::path(get, path = "/v2/models/{name}/versions/{version}/ready", tag = "kserve", params(ModelVersion), responses(
    (status = 200, body = Ready),
    (status = 404, body = duet_core::api::ApiError, description = "no model of that name, or not that version"),
    (status = 503, body = duet_core::api::ApiError, description = "no model loaded yet")))]
pub async fn version_ready(
    State(state): State<Arc<AppState>>,
    Path((name, version)): Path<(String, String)>,
) -> Result<Json<Ready>, Failure> {
    ready_version(&state, &name, Some(&version))
}

fn ready_version(
    state: &AppState,
    name: &str,
    version: Option<&str>,
) -> Result<Json<Ready>, Failure> {
    if !state.is_ready() {
        return Err(not_ready());
    }
    service::named_version(state, name, version, "version")?;
    Ok(Json(Ready { ready: true }))
}

/// A tensor's or a request's `parameters`.
pub type Parameters = serde_json::Map<String, Value>;

/// Dimensions a tensor's shape may have as it is read: the model's input has two, and a longer
/// shape is refused at the dimension past these, before a hostile client's millions are held.
pub const MAX_DIMENSIONS: usize = 8;

/// Parameters one `parameters` object may hold: the protocol's are a handful, and a body of
/// millions of tiny distinct ones would hold many times its bytes.
pub const MAX_PARAMETERS: usize = 64;

/// A request's `parameters` as the protocol has them: each value a boolean, a number or a
/// string (or null), at most [`MAX_PARAMETERS`] of them. An array or an object is refused where
/// it starts, unread, and the entry past the limit where it is read.
fn scalar_parameters<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<Parameters>, D::Error> {
    struct Scalar(Value);
    impl<'de> Deserialize<'de> for Scalar {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Scalar, D::Error> {
            struct V;
            impl serde::de::Visitor<'_> for V {
                type Value = Scalar;
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("a boolean, a number or a string")
                }
                fn visit_bool<E>(self, v: bool) -> Result<Scalar, E> {
                    Ok(Scalar(Value::from(v)))
                }
                fn visit_i64<E>(self, v: i64) -> Result<Scalar, E> {
                    Ok(Scalar(Value::from(v)))
                }
                fn visit_u64<E>(self, v: u64) -> Result<Scalar, E> {
                    Ok(Scalar(Value::from(v)))
                }
                fn visit_f64<E>(self, v: f64) -> Result<Scalar, E> {
                    Ok(Scalar(Value::from(v)))
                }
                fn visit_str<E>(self, v: &str) -> Result<Scalar, E> {
                    Ok(Scalar(Value::from(v)))
                }
                fn visit_unit<E>(self) -> Result<Scalar, E> {
                    Ok(Scalar(Value::Null))
                }
            }
            d.deserialize_any(V)
        }
    }
    struct Scalars(Parameters);
    impl<'de> Deserialize<'de> for Scalars {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Scalars, D::Error> {
            struct V;
            impl<'de> serde::de::Visitor<'de> for V {
                type Value = Scalars;
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("an object of booleans, numbers and strings")
                }
                fn visit_map<A: serde::de::MapAccess<'de>>(
                    self,
                    mut map: A,
                ) -> Result<Scalars, A::Error> {
                    let mut out = Parameters::new();
                    while let Some((key, Scalar(value))) = map.next_entry::<String, Scalar>()? {
                        if out.len() == MAX_PARAMETERS && !out.contains_key(&key) {
                            return Err(serde::de::Error::custom(format!(
                                "more than {MAX_PARAMETERS} parameters"
                            )));
                        }
                        out.insert(key, value);
                    }
                    Ok(Scalars(out))
                }
            }
            d.deserialize_map(V)
        }
    }
    Ok(Option::<Scalars>::deserialize(d)?.map(|s| s.0))
}

/// A tensor's shape, refused at its dimension past [`MAX_DIMENSIONS`].
fn short_shape<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<i64>, D::Error> {
    struct V;
    impl<'de> serde::de::Visitor<'de> for V {
        type Value = Vec<i64>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            write!(f, "an array of at most {MAX_DIMENSIONS} integers")
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<i64>, A::Error> {
            let mut out = Vec::with_capacity(2);
            while let Some(n) = seq.next_element::<i64>()? {
                if out.len() == MAX_DIMENSIONS {
                    return Err(serde::de::Error::custom(format!(
                        "a shape of more than {MAX_DIMENSIONS} dimensions"
                    )));
                }
                out.push(n);
            }
            Ok(out)
        }
    }
    d.deserialize_seq(V)
}

/// A tensor of a request or an answer. In a request with the binary tensor data extension,
/// `parameters.binary_data_size` takes the place of `data`; in a binary answer, the same.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, remote = "Self")]
pub struct InferTensor {
    pub name: String,
    #[serde(deserialize_with = "short_shape")]
    pub shape: Vec<i64>,
    pub datatype: String,
    #[serde(
        default,
        deserialize_with = "scalar_parameters",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<Object>)]
    pub parameters: Option<Parameters>,
    /// Counted while parsed: the value past `--max-infer-rows` rows ends the parse. Absent
    /// where `parameters.binary_data_size` says the values follow the JSON header.
    #[serde(
        default,
        deserialize_with = "crate::bounded::some_vec",
        skip_serializing_if = "Option::is_none"
    )]
    pub data: Option<Vec<f32>>,
}
duet_core::object_only!(InferTensor);

/// An output the client asks for, and how: `parameters.binary_data` true for its values as
/// raw bytes after the answer's JSON header.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, remote = "Self")]
pub struct InferRequestedOutput {
    pub name: String,
    #[serde(
        default,
        deserialize_with = "scalar_parameters",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<Object>)]
    pub parameters: Option<Parameters>,
}
duet_core::object_only!(InferRequestedOutput);

#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, remote = "Self")]
pub struct InferRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// `binary_data_output` true: every output in binary.
    #[serde(
        default,
        deserialize_with = "scalar_parameters",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<Object>)]
    pub parameters: Option<Parameters>,
    pub inputs: Vec<InferTensor>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outputs: Option<Vec<InferRequestedOutput>>,
}
duet_core::object_only!(InferRequest);

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct InferResponse {
    pub model_name: String,
    pub model_version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    pub outputs: Vec<InferOutput>,
}

/// An output of an answer: its values in `data`, or, in a binary answer, as
/// `parameters.binary_data_size` bytes after the JSON header, in the order of the outputs.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct InferOutput {
    pub name: String,
    pub shape: Vec<i64>,
    pub datatype: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub parameters: Option<Parameters>,
    /// The values in the output's datatype: FP32 as numbers, INT32 as integers.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<f64>>)]
    pub data: Option<service::Values>,
}

/// A boolean parameter: absent, or true or false (422 naming it otherwise).
fn flag(parameters: Option<&Parameters>, key: &str, field: &str) -> Result<Option<bool>, Failure> {
    match parameters.and_then(|p| p.get(key)) {
        None => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(other) => Err(Failure::field(
            format!("{field}.{key}"),
            format!("`{key}` is true or false, not {other}"),
        )),
    }
}

/// A tensor's `binary_data_size`: absent, or a number of bytes (422 naming it otherwise).
fn binary_size(parameters: Option<&Parameters>, field: &str) -> Result<Option<usize>, Failure> {
    const KEY: &str = "binary_data_size";
    match parameters.and_then(|p| p.get(KEY)) {
        None => Ok(None),
        Some(v) => v
            .as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| {
                Failure::field(
                    format!("{field}.{KEY}"),
                    format!("`{KEY}` is a number of bytes, not {v}"),
                )
            }),
    }
}

/// The outputs the answer carries (in the request's order, every output where it names none)
/// and whether each goes in binary: its requested output's `binary_data`, else the request's
/// `binary_data_output`.
fn wanted_outputs(request: &InferRequest) -> Result<Vec<(Output, bool)>, Failure> {
    let all = flag(
        request.parameters.as_ref(),
        "binary_data_output",
        "parameters",
    )?
    .unwrap_or(false);
    let listed = request.outputs.as_deref().unwrap_or_default();
    let wanted = service::requested_outputs(
        listed
            .iter()
            .enumerate()
            .map(|(i, o)| (format!("outputs[{i}]"), o.name.as_str())),
    )?;
    wanted
        .into_iter()
        .map(|output| {
            let name = output.spec().name;
            let mut binary = None;
            for (i, output) in listed.iter().enumerate().filter(|(_, o)| o.name == name) {
                binary = binary.or(flag(
                    output.parameters.as_ref(),
                    "binary_data",
                    &format!("outputs[{i}].parameters"),
                )?);
            }
            Ok((output, binary.unwrap_or(all)))
        })
        .collect()
}

/// The body's JSON header and the tensors' bytes after it: the whole body and none without
/// `Inference-Header-Content-Length`.
fn split(body: &[u8], header_length: Option<usize>) -> Result<(&[u8], &[u8]), Failure> {
    match header_length {
        None => Ok((body, &[])),
        Some(n) if n <= body.len() => Ok(body.split_at(n)),
        Some(n) => Err(Failure::field(
            "Inference-Header-Content-Length",
            format!(
                "the JSON header is {n} bytes, but the body has only {} bytes",
                body.len()
            ),
        )
        .with_status(StatusCode::BAD_REQUEST)),
    }
}

/// `Inference-Header-Content-Length`, where given: a number of bytes (400 otherwise).
fn header_length(headers: &HeaderMap) -> Result<Option<usize>, Failure> {
    let Some(value) = headers.get(HEADER_LENGTH) else {
        return Ok(None);
    };
    value
        .to_str()
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .map(Some)
        .ok_or_else(|| {
            Failure::field(
                "Inference-Header-Content-Length",
                format!(
                    "the length of the body's JSON header is a number of bytes, not {:?}",
                    String::from_utf8_lossy(value.as_bytes())
                ),
            )
            .with_status(StatusCode::BAD_REQUEST)
        })
}

/// The input's values: `data` in the JSON, or `binary_data_size` bytes taken from `binary`
/// (which then must hold exactly those).
fn input_values(
    input: InferTensor,
    binary: &[u8],
    with_header: bool,
    rows: usize,
    width: usize,
) -> Result<Vec<f32>, Failure> {
    let size = binary_size(input.parameters.as_ref(), "inputs[0].parameters")?;
    let data = match (input.data, size) {
        (Some(_), Some(_)) => {
            return Err(Failure::field(
                "inputs[0].data",
                "give the values either in `data` or as `parameters.binary_data_size` bytes \
                 after the JSON header, not both",
            ));
        }
        (None, None) => {
            return Err(Failure::field(
                "inputs[0].data",
                "missing: give the values in `data`, or their bytes after the JSON header with \
                 `parameters.binary_data_size` and the `Inference-Header-Content-Length` header",
            ));
        }
        (Some(data), None) => data,
        (None, Some(_)) if !with_header => {
            return Err(Failure::field(
                "Inference-Header-Content-Length",
                "`inputs[0].parameters.binary_data_size` says the values follow the JSON header, \
                 but the request has no `Inference-Header-Content-Length` header to say where \
                 the JSON ends",
            )
            .with_status(StatusCode::BAD_REQUEST));
        }
        (None, Some(size)) => {
            let expected = rows.saturating_mul(width).saturating_mul(FP32_BYTES);
            if size != expected {
                return Err(Failure::field(
                    "inputs[0].parameters.binary_data_size",
                    format!(
                        "{size} bytes for shape [{rows}, {width}] of {FP32} ({expected} \
                         expected: rows x width x {FP32_BYTES})"
                    ),
                ));
            }
            if size > binary.len() {
                return Err(Failure::field(
                    "inputs[0].parameters.binary_data_size",
                    format!(
                        "{size} bytes, but the body has {} bytes after its JSON header",
                        binary.len()
                    ),
                )
                .with_status(StatusCode::BAD_REQUEST));
            }
            service::from_le_bytes(
                "inputs[0].parameters.binary_data_size",
                &binary[..size],
                rows,
                width,
            )?
        }
    };
    let used = size.unwrap_or(0);
    if binary.len() > used {
        return Err(Failure::field(
            "Inference-Header-Content-Length",
            format!(
                "{} bytes after the JSON header belong to no input (the inputs' \
                 `binary_data_size` add up to {used})",
                binary.len() - used
            ),
        )
        .with_status(StatusCode::BAD_REQUEST));
    }
    Ok(data)
}

/// The request's JSON: its tensors' values lifted out of the bytes where they are plain numbers
/// (`crate::tensor_json`, the fast path of a large tensor), the rest by serde; any body the
/// lifting steps aside for, or that serde then refuses, is parsed whole by serde, so a refusal
/// is what it always was. A body holding a string longer than any field takes is refused
/// before the lifting copies it, and read for one only then (the lifting adds no string).
pub fn parse_request(json: &[u8], budget: usize) -> Result<InferRequest, Refused> {
    if let Some(refused) = crate::error::long_string_failure(json) {
        return Err(Refused::Invalid(refused));
    }
    if let Some(lifted) = crate::tensor_json::lift(json, budget, crate::state::cores())
        && let Ok(mut request) = crate::bounded::parse_scanned::<InferRequest>(&lifted.json, budget)
    {
        for (i, values) in lifted.data {
            if let Some(input) = request.inputs.get_mut(i) {
                input.data = Some(values);
            }
        }
        return Ok(request);
    }
    crate::bounded::parse_scanned(json, budget)
}

/// Runs the model on the request in `body`: its answer in JSON, or in binary where asked.
fn answer(
    state: &AppState,
    model: &duet_model::LoadedModel,
    body: &[u8],
    header_length: Option<usize>,
    cancelled: &std::sync::atomic::AtomicBool,
) -> Result<Response, Failure> {
    let max_rows = state.config.max_infer_rows;
    let width = model.meta.spec.pair_width();
    let (json, binary) = split(body, header_length)?;
    // Every tensor's values count: more than the rows limit allows ends the parse there.
    let budget = max_rows.saturating_mul(width);
    let request: InferRequest = match parse_request(json, budget) {
        Ok(r) => r,
        Err(Refused::OverLimit) => {
            return Err(Failure::field(
                "inputs[0].data",
                format!(
                    "more than {budget} values ({max_rows} rows of {width}): over the \
                     server's limit of {max_rows} rows (--max-infer-rows)"
                ),
            )
            .with_status(StatusCode::PAYLOAD_TOO_LARGE));
        }
        Err(Refused::Invalid(f)) => return Err(f),
    };
    let wanted = wanted_outputs(&request)?;
    let InferRequest { id, mut inputs, .. } = request;
    if inputs.len() != 1 {
        return Err(Failure::field(
            "inputs",
            format!("one input tensor `{INPUT}` expected, got {}", inputs.len()),
        ));
    }
    let input = inputs.remove(0);
    let rows = service::check_input(
        "inputs[0]",
        &input.name,
        &input.datatype,
        &input.shape,
        width,
        max_rows,
    )?;
    let data = input_values(input, binary, header_length.is_some(), rows, width)?;
    service::check_values("inputs[0].data", &data, rows, width)?;
    let names: Vec<Output> = wanted.iter().map(|(output, _)| *output).collect();
    let values = service::run(state, model, data, &names, cancelled)?;
    let mut binary = Vec::new();
    let mut outputs = Vec::with_capacity(wanted.len());
    for (&(output, in_binary), values) in wanted.iter().zip(values) {
        let spec = output.spec();
        #[allow(clippy::cast_possible_wrap)]
        let mut tensor = InferOutput {
            name: spec.name.into(),
            shape: vec![rows as i64, spec.shape[1]],
            datatype: spec.datatype.into(),
            parameters: None,
            data: None,
        };
        if in_binary {
            let bytes = values.to_le_bytes();
            let mut parameters = Parameters::new();
            parameters.insert("binary_data_size".into(), Value::from(bytes.len()));
            tensor.parameters = Some(parameters);
            binary.extend_from_slice(&bytes);
        } else {
            tensor.data = Some(values);
        }
        outputs.push(tensor);
    }
    let response = InferResponse {
        model_name: model.meta.name.clone(),
        model_version: model.version().to_string(),
        id,
        outputs,
    };
    let internal = |e: serde_json::Error| {
        Failure::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot write the answer: {e}"),
        )
    };
    let mut bytes = serde_json::to_vec(&response).map_err(internal)?;
    if wanted.iter().all(|(_, b)| !b) {
        return Ok(([(header::CONTENT_TYPE, "application/json")], bytes).into_response());
    }
    let json_length = bytes.len();
    bytes.extend_from_slice(&binary);
    Ok((
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/octet-stream"),
            ),
            (
                HeaderName::from_static(HEADER_LENGTH),
                HeaderValue::from(json_length),
            ),
        ],
        bytes,
    )
        .into_response())
}

/// Runs the model on one tensor of encoded pairs.
///
/// The body is JSON, or, with the binary tensor data extension (as `tritonclient` sends by
/// default), a JSON header of `Inference-Header-Content-Length` bytes followed by the input's
/// values as raw little-endian FP32 bytes, where the input's `parameters.binary_data_size`
/// stands for its `data` (rows x width x 4 bytes). The answer is JSON, or, where the request
/// asks for it (`parameters.binary_data_output` true on the request, or
/// `parameters.binary_data` true on a requested output), `application/octet-stream`: a JSON
/// header of `Inference-Header-Content-Length` bytes, whose binary outputs have
/// `parameters.binary_data_size` in place of `data`, then their values as raw little-endian
/// bytes, output after output. The answer carries the outputs the request names, in its order,
/// or all three (`outputs`, `calibrated`, `calibration`). The limits are the same in both
/// encodings.
#[utoipa::path(post, path = "/v2/models/{name}/infer", tag = "kserve", params(ModelName),
    request_body = InferRequest, responses(
    (status = 200, description = "the outputs: JSON, or a JSON header and the outputs' bytes where the request asked for binary outputs",
        content(
            (InferResponse = "application/json"),
            (Vec<u8> = "application/octet-stream"),
        ),
        headers(("Inference-Header-Content-Length" = u64, description = "with a binary answer: the length of its JSON header"))),
    (status = 400, body = duet_core::api::ApiError, description = "malformed JSON, or a binary body that does not match its header (`Inference-Header-Content-Length` past the body, bytes that belong to no input, fewer bytes than `binary_data_size`)"),
    (status = 401, body = duet_core::api::ApiError, description = "--protect-reads and no or a wrong token"),
    (status = 404, body = duet_core::api::ApiError, description = "no model of that name"),
    (status = 408, body = duet_core::api::ApiError, description = "the body paused longer than --idle-timeout"),
    (status = 413, body = duet_core::api::ApiError, description = "over the body or rows limit"),
    (status = 422, body = duet_core::api::ApiError, description = "a tensor the model cannot take (name, type, shape, data length or binary size, a non-finite value)"),
    (status = 503, body = duet_core::api::ApiError, description = "no model loaded yet, over the time limit, or over the limit of work in flight and waiting (`Retry-After` says when to retry)")))]
pub async fn infer(
    State(state): State<Arc<AppState>>,
    Extension(work): Extension<Work>,
    headers: HeaderMap,
    Path(name): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, Failure> {
    infer_version(state, work, headers, &name, None, body).await
}

/// `infer` on a version of the model: the served one's (`versions` in its metadata), else 404;
/// the rest as `/v2/models/{name}/infer`, whose answers the document gives this path too
/// (`crate::openapi`).
#[utoipa::path(post, path = "/v2/models/{name}/versions/{version}/infer", tag = "kserve", params(ModelVersion),
    request_body = InferRequest, responses(
    (status = 404, body = duet_core::api::ApiError, description = "no model of that name, or not that version")))]
pub async fn version_infer(
    State(state): State<Arc<AppState>>,
    Extension(work): Extension<Work>,
    headers: HeaderMap,
    Path((name, version)): Path<(String, String)>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, Failure> {
    infer_version(state, work, headers, &name, Some(&version), body).await
}

async fn infer_version(
    state: Arc<AppState>,
    work: Work,
    headers: HeaderMap,
    name: &str,
    version: Option<&str>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, Failure> {
    state.access.read(&headers)?;
    let model = service::named_version(&state, name, version, "version")?;
    let header_length = header_length(&headers)?;
    let body =
        body.map_err(|e| body_failure(&e, state.config.max_body_bytes, "--max-body-bytes"))?;
    let worker = state.clone();
    tokio::task::spawn_blocking(move || {
        let answer = answer(&worker, &model, &body, header_length, work.cancelled());
        // A large request's freed memory given back past the mark, as a prediction's is.
        if body.len() > crate::routes::predict::INLINE_BODY_BYTES {
            drop(body);
            crate::memory::trim_above(worker.config.memory_mark());
        }
        answer
    })
    .await
    .map_err(|e| state.metrics.guards.join_failure(&e, "inference"))?
}
