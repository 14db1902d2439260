//! `/openapi.json`: the contract of this server as it runs. The routes, statuses and bodies come
//! from the handlers' annotations and the request and response types (utoipa); what depends on
//! the loaded model and the server's flags is then written in from the same values the handlers
//! check against: the features the model reads (names, numeric or categorical, required), its
//! modes, whether a device must be named, the pairs limit, and the KServe tensor's width. A
//! request the document calls valid is one the server answers without a 422, and the other way
//! round, except where JSON Schema cannot say it (a tensor's data length is its rows times its
//! width).

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use duet_model::LoadedModel;
use duet_model::encoding::SOLO_THROUGHPUT;
use serde_json::{Value, json};
use utoipa::OpenApi;

use crate::state::{AppState, Config};

pub fn routes() -> Router<Arc<AppState>> {
    Router::new().route("/openapi.json", get(openapi))
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "duet",
        description = "Predicts how much two GPU jobs slow each other down when they share one GPU."
    ),
    paths(
        crate::routes::health::healthz,
        crate::routes::health::readyz,
        crate::routes::predict::predict_route,
        crate::routes::workloads::list_workloads,
        crate::routes::workloads::get_workload,
        crate::routes::workloads::put_workload,
        crate::routes::workloads::delete_workload,
        crate::routes::models::models,
        crate::routes::models::reload_route,
        crate::routes::limits::limits,
        crate::routes::observations::post_observations,
        crate::routes::observations::drift,
        crate::routes::kserve::server_metadata,
        crate::routes::kserve::live,
        crate::routes::kserve::ready,
        crate::routes::kserve::metadata,
        crate::routes::kserve::model_ready,
        crate::routes::kserve::infer,
        crate::routes::kserve::version_metadata,
        crate::routes::kserve::version_ready,
        crate::routes::kserve::version_infer,
    ),
    components(schemas(
        duet_core::api::PredictRequest,
        duet_core::api::PairQuery,
        duet_core::api::GroupQuery,
        duet_core::api::JobRef,
        duet_core::api::PredictResponse,
        duet_core::api::Prediction,
        duet_core::api::GroupPrediction,
        duet_core::api::GroupJobPrediction,
        duet_core::api::WorkloadBody,
        duet_core::api::RegisteredWorkload,
        duet_core::api::ApiError,
        duet_core::api::Observation,
        duet_core::api::ObservedJob,
        duet_core::api::ObservationBatch,
        duet_core::api::ObservationsAnswer,
        duet_core::api::RejectedObservation,
        duet_core::api::DriftReport,
        duet_core::api::DriftEntry,
        duet_core::dataset::Mode,
        duet_core::dataset::JobKind,
    ))
)]
struct Document;

/// A model name a client may give to reload (`AppState::resolve_model_name` checks the same).
const MODEL_NAME_PATTERN: &str = r"^[A-Za-z0-9._+\-]{1,200}$";

/// A value a client may send for a feature: a number, a category, or null (not measured).
fn feature_value() -> Value {
    json!({"type": ["number", "string", "null"]})
}

/// The features the loaded model reads, as a client sends them for one job.
fn features_schema(model: &LoadedModel) -> Value {
    let spec = &model.meta.spec;
    let mut properties = serde_json::Map::new();
    let mut required = Vec::new();
    for name in model.feature_names() {
        let numeric = spec.numeric.iter().find(|f| f.name == name);
        let schema = if name == SOLO_THROUGHPUT {
            json!({"type": "number", "exclusiveMinimum": 0,
                   "maximum": duet_core::dataset::validate::MAX_RATE,
                   "description": "iterations per second alone on the pair's device"})
        } else if numeric.is_some_and(|f| f.log) {
            json!({"type": ["number", "null"], "exclusiveMinimum": 0,
                   "description": "numeric on a log scale, above 0; null if not measured"})
        } else if numeric.is_some() {
            json!({"type": ["number", "null"], "description": "numeric; null if not measured"})
        } else {
            json!({"type": ["string", "null"], "description": "categorical; null if not measured"})
        };
        properties.insert(name.clone(), schema);
        required.push(name);
    }
    // Columns the trainer found no signal in: accepted as categories, unused.
    for dropped in &spec.dropped {
        if let Some(name) = dropped.split(':').next()
            && !properties.contains_key(name)
        {
            properties.insert(
                name.to_string(),
                json!({"type": ["string", "null"], "description": "accepted, unused by this model"}),
            );
        }
    }
    json!({
        "type": "object",
        "description": "A job's features for the loaded model: every feature it reads, null where \
                        not measured, and no other",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    })
}

fn schema_ref(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

/// The parts of the document the loaded model and the flags decide.
fn patch(doc: &mut Value, config: &Config, model: Option<&LoadedModel>) {
    if let Some(model) = model {
        // A KServe path names the served model and, where it has one, its version; any
        // other is a 404.
        let name = model.meta.name.clone();
        let version = model.version().to_string();
        if let Some(paths) = doc["paths"].as_object_mut() {
            for (_, item) in paths
                .iter_mut()
                .filter(|(p, _)| p.starts_with("/v2/models/"))
            {
                for operation in item
                    .as_object_mut()
                    .into_iter()
                    .flat_map(|o| o.values_mut())
                {
                    for p in operation["parameters"].as_array_mut().into_iter().flatten() {
                        let (value, what) = match p["name"].as_str() {
                            Some("name") => (&name, "the served model's name"),
                            Some("version") => (&version, "the served model's version"),
                            _ => continue,
                        };
                        p["schema"] =
                            json!({"type": "string", "enum": [value], "description": what});
                    }
                }
            }
        }
    }
    let schemas = &mut doc["components"]["schemas"];
    let features = model.map_or_else(
        || json!({"type": "object", "additionalProperties": feature_value()}),
        features_schema,
    );
    schemas["Features"] = features;
    schemas["FeatureValue"] = feature_value();
    schemas["JobRef"] = json!({
        "description": "One job: a registered workload's id, or its features inline; exactly one",
        "oneOf": [
            {"type": "object", "properties": {
                "workload": {"type": "string", "description": "a registered workload's id"},
                "features": {"type": "null"}},
             "required": ["workload"], "additionalProperties": false},
            {"type": "object", "properties": {
                "features": schema_ref("Features"),
                "workload": {"type": "null"}},
             "required": ["features"], "additionalProperties": false},
        ],
    });
    let share = json!({"type": ["number", "null"], "exclusiveMinimum": 0, "maximum": 100,
                       "description": "MPS active-thread percentage, in (0, 100]"});
    schemas["PairQuery"]["properties"]["share_a"] = share.clone();
    schemas["PairQuery"]["properties"]["share_b"] = share.clone();
    let max_group = duet_core::dataset::MAX_GROUP_SIZE;
    let group = &mut schemas["GroupQuery"];
    group["properties"]["jobs"]["minItems"] = json!(3);
    group["properties"]["jobs"]["maxItems"] = json!(max_group);
    group["properties"]["shares"] = json!({
        "type": ["array", "null"], "minItems": 3, "maxItems": max_group,
        "items": {"type": "number", "exclusiveMinimum": 0, "maximum": 100},
        "description": "each job's MPS active-thread percentage in (0, 100], one per job in the \
                        order of `jobs`; required by `mps`, absent otherwise"});
    if let Some(model) = model {
        let modes: Vec<&str> = model.meta.spec.modes.iter().map(|m| m.as_str()).collect();
        schemas["PairQuery"]["properties"]["mode"] = json!({
            "type": "string", "enum": modes,
            "description": "a sharing mode the loaded model was trained on"});
        schemas["GroupQuery"]["properties"]["mode"] = json!({
            "type": "string", "enum": modes,
            "description": "a sharing mode the loaded model was trained on"});
        let mut optional: Vec<Value> = modes.iter().map(|m| json!(m)).collect();
        optional.push(Value::Null);
        schemas["Observation"]["properties"]["mode"] = json!({
            "type": ["string", "null"], "enum": optional,
            "description": "a sharing mode the loaded model was trained on; absent for a solo run"});
    }
    observation_schema(schemas, share, config.max_observations);
    let request = &mut schemas["PredictRequest"];
    request["properties"]["pairs"]["maxItems"] = json!(config.max_pairs);
    request["properties"]["groups"]["maxItems"] = json!(config.max_pairs / 3);
    let mut rules = vec![json!({"anyOf": [
        {"required": ["pairs"], "properties": {"pairs": {"minItems": 1}}},
        {"required": ["groups"], "properties": {"groups": {"minItems": 1}}},
    ]})];
    let mut description = String::from(
        "Pairs, groups of three or more, or both: at least one of them. A group of k jobs \
         counts its k(k-1)/2 pairs against --max-pairs.",
    );
    let needs_gpu = config.gpu.is_none() && model.is_some_and(|m| m.meta.spec.gpus.len() != 1);
    if needs_gpu {
        let named = json!({"required": ["gpu"], "properties": {"gpu": {"type": "string"}}});
        rules.push(json!({"anyOf": [
            named,
            {"properties": {
                "pairs": {"items": named},
                "groups": {"items": named}}},
        ]}));
        description.push_str(
            " The device must be named: by `gpu` here or in every pair and group (the model \
             knows several and the server has no --gpu).",
        );
    }
    request["allOf"] = json!(rules);
    request["description"] = json!(description);
    schemas["WorkloadBody"] = json!({
        "type": "object",
        "properties": {
            "kind": {"oneOf": [schema_ref("JobKind"), {"type": "null"}]},
            "profiles": {
                "type": "object", "minProperties": 1,
                "description": "device model -> the job's features measured alone on it",
                "propertyNames": {"pattern": "\\S"},
                "additionalProperties": schema_ref("Features"),
            },
        },
        "required": ["profiles"],
        "additionalProperties": false,
    });
    schemas["RegisteredWorkload"] = json!({
        "type": "object",
        "properties": {
            "workload": {"type": "string"},
            "source": {"type": "string", "description": "`dataset:<name>` (comma-separated where \
                        several) for the model's training data, `client` for PUTs"},
            "kind": {"oneOf": [schema_ref("JobKind"), {"type": "null"}]},
            "profiles": {"type": "object", "additionalProperties": {
                "type": "object", "additionalProperties": schema_ref("FeatureValue")}},
        },
        "required": ["workload", "source", "profiles"],
    });
    schemas["ReloadRequest"] = json!({
        "type": "object",
        "properties": {"model": {
            "type": ["string", "null"], "pattern": MODEL_NAME_PATTERN,
            "not": {"enum": [".", ".."]},
            "description": "a model of the server's model repository, by name (never a path); \
                            absent or null: the serving model's folder again"}},
        "additionalProperties": false,
    });
    let reload = &mut doc["paths"]["/v1/models/reload"]["post"]["requestBody"];
    reload["required"] = json!(false);
    reload["content"]["application/json"]["schema"] =
        json!({"oneOf": [schema_ref("ReloadRequest"), {"type": "null"}]});
    // KServe: one FP32 input tensor `pairs` of shape [rows, width].
    let width = model.map(|m| m.meta.spec.pair_width());
    let max_rows = config.max_infer_rows;
    let schemas = &mut doc["components"]["schemas"];
    schemas["InferRequest"]["properties"]["inputs"]["minItems"] = json!(1);
    schemas["InferRequest"]["properties"]["inputs"]["maxItems"] = json!(1);
    schemas["InferRequest"]["properties"]["inputs"]["items"] = schema_ref("InferInput");
    let mut input = schemas["InferTensor"].clone();
    input["properties"]["name"] = json!({"type": "string", "const": duet_model::onnx::INPUT});
    input["properties"]["datatype"] = json!({"type": "string", "const": "FP32"});
    input["properties"]["shape"] = json!({
        "type": "array", "minItems": 2, "maxItems": 2,
        "prefixItems": [
            {"type": "integer", "minimum": 1, "maximum": max_rows},
            width.map_or_else(|| json!({"type": "integer"}), |w| json!({"const": w})),
        ],
        "description": "[rows, the model's input width]"});
    input["properties"]["data"] = json!({
        "type": "array",
        "items": {"type": "number", "minimum": -crate::service::kserve::MAX_INPUT,
                  "maximum": crate::service::kserve::MAX_INPUT},
        "description": "rows x width values, row-major"});
    if let Some(w) = width {
        input["properties"]["data"]["maxItems"] = json!(max_rows.saturating_mul(w));
    }
    // A JSON body carries the values in `data`; the binary tensor data extension (the
    // operation's description) puts `parameters.binary_data_size` in its JSON header instead.
    input["required"] = json!(["name", "shape", "datatype", "data"]);
    schemas["InferInput"] = input;
    // A parameter's value is a boolean, a number or a string (or null), as the protocol has
    // it; the server refuses an array or an object where it starts.
    let scalar = json!({"type": ["boolean", "number", "string", "null"]});
    let most = crate::routes::kserve::MAX_PARAMETERS;
    let input_parameters = &mut schemas["InferInput"]["properties"]["parameters"];
    input_parameters["additionalProperties"] = scalar.clone();
    input_parameters["maxProperties"] = json!(most);
    let binary_flag = |name: &str, what: &str| {
        let flag = json!({"type": "boolean", "description": what});
        json!({"type": "object", "properties": {name: flag}, "additionalProperties": scalar,
               "maxProperties": most})
    };
    schemas["InferRequest"]["properties"]["parameters"] = binary_flag(
        "binary_data_output",
        "true: every output's values as raw little-endian bytes after the answer's JSON header",
    );
    let plain = &mut doc["paths"]["/v2/models/{name}/infer"]["post"]["responses"];
    plain["200"]["content"]["application/octet-stream"]["schema"] = json!({
        "type": "string", "format": "binary",
        "description": "the answer's JSON header (Inference-Header-Content-Length bytes, \
                        binary outputs with parameters.binary_data_size), then their values as \
                        little-endian bytes (FP32, INT32 for calibration), output after output"});
    // A version's infer answers as the plain one does, and 404 for another version too.
    let mut answers = plain.clone();
    let versioned = &mut doc["paths"]["/v2/models/{name}/versions/{version}/infer"]["post"];
    answers["404"] = versioned["responses"]["404"].take();
    versioned["responses"] = answers;
    let schemas = &mut doc["components"]["schemas"];
    let names: Vec<&str> = crate::service::kserve::output_specs()
        .iter()
        .map(|s| s.name)
        .collect();
    schemas["InferRequestedOutput"]["properties"]["name"] =
        json!({"type": "string", "enum": names});
    schemas["InferRequestedOutput"]["properties"]["parameters"] = binary_flag(
        "binary_data",
        "true: this output's values as raw little-endian bytes after the answer's JSON header",
    );
    // Links: a registered workload can be read and deleted by the id it was put under.
    let by_id = json!({"id": "$request.path.id"});
    for status in ["200", "201"] {
        doc["paths"]["/v1/workloads/{id}"]["put"]["responses"][status]["links"] = json!({
            "GetWorkload": {"operationId": "get_workload", "parameters": by_id},
            "DeleteWorkload": {"operationId": "delete_workload", "parameters": by_id},
        });
    }
}

fn positive_number() -> Value {
    json!({"type": "number", "exclusiveMinimum": 0})
}

/// What `POST /v1/observations` checks of each observation's own fields
/// (`crate::service::observations`), in JSON Schema.
fn observation_schema(schemas: &mut Value, share: Value, max_items: usize) {
    let positive = positive_number();
    let optional_positive = json!({"type": ["number", "null"], "exclusiveMinimum": 0});
    let properties = &mut schemas["Observation"]["properties"];
    properties["id"] = json!({
        "type": "string", "minLength": 1, "maxLength": 200,
        "pattern": r"^[A-Za-z0-9._:+\-]*[A-Za-z0-9_:+\-][A-Za-z0-9._:+\-]*$",
        "description": "the client's id of this observation: a retry stores nothing twice"});
    properties["gpu"] = json!({"type": "string", "minLength": 1, "maxLength": 200,
                               "pattern": r"\S", "description": "the device model"});
    properties["share_a"] = share.clone();
    properties["share_b"] = share.clone();
    properties["throughput_a"] = positive.clone();
    for name in ["throughput_b", "solo_throughput_a", "solo_throughput_b"] {
        properties[name] = optional_positive.clone();
    }
    let mut window = positive;
    window["maximum"] = json!(crate::service::observations::MAX_WINDOW_S);
    properties["window_s"] = window;
    properties["observed_at"] = json!({"type": "string", "format": "date-time",
        "description": "RFC 3339; at most a few minutes ahead of the server's clock"});
    properties["a"] = schema_ref("JobRef");
    properties["b"] = json!({"oneOf": [schema_ref("JobRef"), {"type": "null"}]});
    let max_others = duet_core::dataset::MAX_GROUP_SIZE - 2;
    properties["others"] = json!({
        "type": ["array", "null"], "maxItems": max_others, "items": schema_ref("ObservedJob"),
        "description": "a group's further jobs beside `a` and `b` (three to eight jobs in all); \
                        absent or empty for a pair"});
    schemas["Observation"]["additionalProperties"] = json!(false);
    let job = &mut schemas["ObservedJob"];
    job["properties"]["job"] = schema_ref("JobRef");
    job["properties"]["throughput"] = positive_number();
    job["properties"]["solo_throughput"] = optional_positive.clone();
    job["properties"]["share"] = share;
    job["additionalProperties"] = json!(false);
    // Two shapes, as `crate::service::observations` checks them: a solo run of `a` carries nothing of a
    // co-location (absent or null), and a co-location names `b`, its mode and `throughput_b`.
    let mut solo = schemas["Observation"].clone();
    for name in [
        "mode",
        "share_a",
        "share_b",
        "b",
        "others",
        "throughput_b",
        "solo_throughput_a",
        "solo_throughput_b",
    ] {
        solo["properties"][name] = json!({"type": "null",
            "description": "belongs to a co-location: absent (or null) in a solo run"});
    }
    solo["required"] = json!(["id", "gpu", "a", "throughput_a", "window_s", "observed_at"]);
    solo["description"] =
        json!("A solo run of `a`: its throughput alone on `gpu`, over `window_s` seconds");
    let mut pair = schemas["Observation"].clone();
    let mode = &mut pair["properties"]["mode"];
    *mode = match mode["enum"].as_array() {
        Some(modes) => json!({"type": "string",
            "enum": modes.iter().filter(|m| m.is_string()).cloned().collect::<Vec<_>>(),
            "description": "a sharing mode the loaded model was trained on"}),
        None => schema_ref("Mode"),
    };
    pair["properties"]["b"] = schema_ref("JobRef");
    pair["properties"]["throughput_b"] = json!({"type": "number", "exclusiveMinimum": 0});
    let required = [
        "id",
        "gpu",
        "mode",
        "a",
        "b",
        "throughput_a",
        "throughput_b",
        "window_s",
        "observed_at",
    ];
    pair["required"] = json!(required);
    pair["description"] = json!(
        "A co-location of `a` and `b` (and a group's `others`) on `gpu` in `mode`: every \
         job's throughput over `window_s` seconds"
    );
    schemas["SoloRun"] = solo;
    schemas["CoLocation"] = pair;
    schemas["Observation"] = json!({
        "description": "One measurement the cluster made: a solo run of `a`, or a co-location \
                        of `a` and `b` (with `others`, a group of three to eight)",
        "oneOf": [schema_ref("CoLocation"), schema_ref("SoloRun")],
    });
    let batch = &mut schemas["ObservationBatch"];
    batch["properties"]["observations"]["minItems"] = json!(1);
    batch["properties"]["observations"]["maxItems"] = json!(max_items);
    batch["additionalProperties"] = json!(false);
}

/// The document for the server as it runs now.
pub fn document(state: &AppState) -> Value {
    let mut doc = serde_json::to_value(Document::openapi())
        .unwrap_or_else(|e| json!({"error": e.to_string()}));
    let model = state.model().ok();
    patch(&mut doc, &state.config, model.as_deref());
    doc
}

async fn openapi(State(state): State<Arc<AppState>>) -> Response {
    let body = serde_json::to_string_pretty(&document(&state))
        .unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}
