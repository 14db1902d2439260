//! The Open Inference Protocol's `inference.GRPCInferenceService` over the serving model: the
//! same checks and answers as the HTTP routes (`crate::service::kserve`). An input's values
//! come in `raw_input_contents` (little-endian bytes, as tritonclient sends them) or in
//! `contents.fp32_contents`; the outputs' go in `raw_output_contents`, one entry per output in
//! the order of `outputs` (every output where the request names none).

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use duet_model::LoadedModel;
use duet_model::onnx::INPUT;
use prost::Message;
use tonic::{Request, Response, Status};

use super::proto::inference::grpc_inference_service_server::GrpcInferenceService;
use super::proto::inference::model_infer_response::InferOutputTensor;
use super::proto::inference::model_metadata_response::TensorMetadata;
use super::proto::inference::{
    InferTensorContents, ModelInferRequest, ModelInferResponse, ModelMetadataRequest,
    ModelMetadataResponse, ModelReadyRequest, ModelReadyResponse, ServerLiveRequest,
    ServerLiveResponse, ServerMetadataRequest, ServerMetadataResponse, ServerReadyRequest,
    ServerReadyResponse,
};
use super::{authorize_read, call, with_place};
use crate::error::Failure;
use crate::service::kserve::{self as service, FP32, TensorSpec};
use crate::state::{AppState, not_ready};

/// The service's methods, as the metrics name them.
pub(crate) const SERVER_LIVE: &str = "/inference.GRPCInferenceService/ServerLive";
pub(crate) const SERVER_READY: &str = "/inference.GRPCInferenceService/ServerReady";
pub(crate) const MODEL_READY: &str = "/inference.GRPCInferenceService/ModelReady";
pub(crate) const SERVER_METADATA: &str = "/inference.GRPCInferenceService/ServerMetadata";
pub(crate) const MODEL_METADATA: &str = "/inference.GRPCInferenceService/ModelMetadata";
pub(crate) const MODEL_INFER: &str = "/inference.GRPCInferenceService/ModelInfer";

/// `inference.GRPCInferenceService` on the server's state.
#[derive(Debug, Clone)]
pub struct Kserve {
    state: Arc<AppState>,
}

impl Kserve {
    pub fn new(state: Arc<AppState>) -> Kserve {
        Kserve { state }
    }
}

/// The model `name` and `version` name (an empty version: the one served), or 404.
fn named(
    state: &AppState,
    name: &str,
    version: &str,
    field: &str,
) -> Result<Arc<LoadedModel>, Failure> {
    service::named_version(state, name, (!version.is_empty()).then_some(version), field)
}

fn metadata(t: TensorSpec) -> TensorMetadata {
    TensorMetadata {
        name: t.name.into(),
        datatype: t.datatype.into(),
        shape: t.shape.to_vec(),
    }
}

#[tonic::async_trait]
impl GrpcInferenceService for Kserve {
    async fn server_live(
        &self,
        _: Request<ServerLiveRequest>,
    ) -> Result<Response<ServerLiveResponse>, Status> {
        call(&self.state, SERVER_LIVE, async {
            Ok(ServerLiveResponse { live: true })
        })
        .await
    }

    async fn server_ready(
        &self,
        _: Request<ServerReadyRequest>,
    ) -> Result<Response<ServerReadyResponse>, Status> {
        let ready = service::server_ready(&self.state);
        call(&self.state, SERVER_READY, async {
            Ok(ServerReadyResponse { ready })
        })
        .await
    }

    async fn model_ready(
        &self,
        request: Request<ModelReadyRequest>,
    ) -> Result<Response<ModelReadyResponse>, Status> {
        let state = &self.state;
        call(state, MODEL_READY, async {
            if !state.is_ready() {
                return Err(not_ready());
            }
            let r = request.get_ref();
            named(state, &r.name, &r.version, "version")?;
            Ok(ModelReadyResponse { ready: true })
        })
        .await
    }

    async fn server_metadata(
        &self,
        _: Request<ServerMetadataRequest>,
    ) -> Result<Response<ServerMetadataResponse>, Status> {
        call(&self.state, SERVER_METADATA, async {
            Ok(ServerMetadataResponse {
                name: service::SERVER_NAME.into(),
                version: service::SERVER_VERSION.into(),
                extensions: service::EXTENSIONS.iter().map(|e| (*e).into()).collect(),
            })
        })
        .await
    }

    async fn model_metadata(
        &self,
        request: Request<ModelMetadataRequest>,
    ) -> Result<Response<ModelMetadataResponse>, Status> {
        let state = &self.state;
        call(state, MODEL_METADATA, async {
            authorize_read(state, &request)?;
            let r = request.get_ref();
            let model = named(state, &r.name, &r.version, "version")?;
            Ok(ModelMetadataResponse {
                name: model.meta.name.clone(),
                versions: vec![model.version().to_string()],
                platform: service::platform(&model),
                inputs: vec![metadata(service::input_spec(&model))],
                outputs: service::output_specs().into_iter().map(metadata).collect(),
            })
        })
        .await
    }

    async fn model_infer(
        &self,
        request: Request<ModelInferRequest>,
    ) -> Result<Response<ModelInferResponse>, Status> {
        let state = &self.state;
        call(state, MODEL_INFER, async {
            authorize_read(state, &request)?;
            let request = request.into_inner();
            let model = named(
                state,
                &request.model_name,
                &request.model_version,
                "model_version",
            )?;
            // Places as on HTTP: every core's for a large message, one otherwise.
            let places = if request.encoded_len() >= crate::shed::WHOLE_BODY_BYTES {
                state.limiter.whole()
            } else {
                1
            };
            with_place(
                state,
                MODEL_INFER,
                "inference",
                places,
                // The message's tensors are a few large blocks, freed where they are used.
                move |state, cancelled, _| infer(state, &model, request, cancelled),
            )
            .await
        })
        .await
    }
}

/// The input's values: `raw_input_contents[0]` or `contents.fp32_contents`, exactly one of
/// them; and the field that names them.
fn values(
    request: &mut ModelInferRequest,
    rows: usize,
    width: usize,
) -> Result<(Vec<f32>, &'static str), Failure> {
    let contents = request.inputs[0].contents.take();
    match (request.raw_input_contents.len(), contents) {
        (1, None) => {
            let raw = request.raw_input_contents.remove(0);
            let field = "raw_input_contents[0]";
            Ok((service::from_le_bytes(field, &raw, rows, width)?, field))
        }
        (0, Some(contents)) => {
            let InferTensorContents {
                fp32_contents,
                bool_contents,
                int_contents,
                int64_contents,
                uint_contents,
                uint64_contents,
                fp64_contents,
                bytes_contents,
            } = contents;
            let other = !bool_contents.is_empty()
                || !int_contents.is_empty()
                || !int64_contents.is_empty()
                || !uint_contents.is_empty()
                || !uint64_contents.is_empty()
                || !fp64_contents.is_empty()
                || !bytes_contents.is_empty();
            if other {
                return Err(Failure::field(
                    "inputs[0].contents",
                    format!("the input is {FP32}: its values go in `fp32_contents`"),
                ));
            }
            Ok((fp32_contents, "inputs[0].contents.fp32_contents"))
        }
        (0, None) => Err(Failure::field(
            "inputs[0].contents",
            "missing: give the values as little-endian bytes in `raw_input_contents` (as \
             tritonclient does), or in `contents.fp32_contents`",
        )),
        (_, Some(_)) => Err(Failure::field(
            "raw_input_contents",
            "with `raw_input_contents`, no input has `contents`",
        )),
        (n, None) => Err(Failure::field(
            "raw_input_contents",
            format!("{n} entries for one input: one entry per input, in the order of `inputs`"),
        )),
    }
}

/// Checks the request's one input, runs it, and writes the output in `raw_output_contents`.
fn infer(
    state: &AppState,
    model: &LoadedModel,
    mut request: ModelInferRequest,
    cancelled: &AtomicBool,
) -> Result<ModelInferResponse, Failure> {
    let width = model.meta.spec.pair_width();
    let max_rows = state.config.max_infer_rows;
    let wanted = service::requested_outputs(
        request
            .outputs
            .iter()
            .enumerate()
            .map(|(i, o)| (format!("outputs[{i}]"), o.name.as_str())),
    )?;
    if request.inputs.len() != 1 {
        return Err(Failure::field(
            "inputs",
            format!(
                "one input tensor `{INPUT}` expected, got {}",
                request.inputs.len()
            ),
        ));
    }
    let input = &request.inputs[0];
    let rows = service::check_input(
        "inputs[0]",
        &input.name,
        &input.datatype,
        &input.shape,
        width,
        max_rows,
    )?;
    let (data, field) = values(&mut request, rows, width)?;
    service::check_values(field, &data, rows, width)?;
    let values = service::run(state, model, data, &wanted, cancelled)?;
    #[allow(clippy::cast_possible_wrap)]
    let outputs = wanted
        .iter()
        .map(|output| {
            let spec = output.spec();
            InferOutputTensor {
                name: spec.name.into(),
                datatype: spec.datatype.into(),
                shape: vec![rows as i64, spec.shape[1]],
                parameters: Default::default(),
                contents: None,
            }
        })
        .collect();
    Ok(ModelInferResponse {
        model_name: model.meta.name.clone(),
        model_version: model.version().to_string(),
        id: request.id,
        parameters: Default::default(),
        outputs,
        raw_output_contents: values.iter().map(|v| v.to_le_bytes().into()).collect(),
    })
}
