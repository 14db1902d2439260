//! `POST /v2/models/{name}/infer` with the binary tensor data extension, in process: a binary
//! input answered as the same tensor in JSON is (a large JSON tensor too, read on every core),
//! binary outputs where asked, the outputs those of `/v1/predict` for the same pairs (each row's
//! calibration class and calibrated p90 too), and every
//! way a binary body can disagree with its JSON header refused with a 400 or 422 naming the
//! field; the KServe v2 routes (health, metadata, versions) around the same model.

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use duet_core::api::PredictRequest;
use duet_server::Config;
use serde_json::{Value, json};
use tower::ServiceExt;

#[path = "support/http.rs"]
mod http;
use http::{app_with, call, model_dir};

const URI: &str = "/v2/models/default/infer";

/// An answer: status, content type, `Inference-Header-Content-Length`, body.
struct Answer {
    status: StatusCode,
    content_type: String,
    header_length: Option<usize>,
    body: Vec<u8>,
}

impl Answer {
    /// The JSON body, or the JSON header of a binary body.
    fn json(&self) -> Value {
        let end = self.header_length.unwrap_or(self.body.len());
        serde_json::from_slice(&self.body[..end])
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&self.body).into_owned()))
    }

    /// The bytes of output `k` after the JSON header: the outputs' bytes follow one another,
    /// each `binary_data_size` long.
    fn binary_of(&self, k: usize) -> &[u8] {
        let head = self.json();
        let size = |i: usize| {
            head["outputs"][i]["parameters"]["binary_data_size"]
                .as_u64()
                .map_or(0, |n| usize::try_from(n).expect("size"))
        };
        let start = self.header_length.expect("a binary answer") + (0..k).map(size).sum::<usize>();
        &self.body[start..start + size(k)]
    }

    /// The first output's bytes after the JSON header, as FP32 values.
    fn binary_values(&self) -> Vec<f32> {
        self.binary_of(0)
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect()
    }

    fn assert_error(&self, status: StatusCode, field: &str, says: &str) {
        let body = self.json();
        assert_eq!(self.status, status, "{body}");
        assert_eq!(body["field"].as_str(), Some(field), "{body}");
        let error = body["error"].as_str().expect("an error message");
        assert!(error.contains(says), "`{error}` does not say `{says}`");
    }
}

/// Posts `header` (JSON) then `binary` as one body; with `Inference-Header-Content-Length`
/// set to `header_length`, by default the JSON's length, unless `None`.
async fn post(
    app: &Router,
    header: &Value,
    binary: &[u8],
    header_length: Option<Option<String>>,
) -> Answer {
    let json = header.to_string();
    let mut body = json.clone().into_bytes();
    body.extend_from_slice(binary);
    let mut request = Request::builder()
        .method("POST")
        .uri(URI)
        .header("content-type", "application/octet-stream");
    match header_length {
        None => request = request.header("Inference-Header-Content-Length", json.len()),
        Some(Some(v)) => request = request.header("Inference-Header-Content-Length", v),
        Some(None) => {}
    }
    let response = app
        .clone()
        .oneshot(request.body(Body::from(body)).expect("request"))
        .await
        .expect("response");
    let status = response.status();
    let text = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let content_type = text("content-type").unwrap_or_default();
    let header_length = text("inference-header-content-length").map(|v| v.parse().expect("n"));
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .expect("body")
        .to_vec();
    Answer {
        status,
        content_type,
        header_length,
        body,
    }
}

fn bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// The binary input tensor's JSON header.
fn binary_input(rows: usize, width: usize, size: usize) -> Value {
    json!({"name": "pairs", "shape": [rows, width], "datatype": "FP32",
           "parameters": {"binary_data_size": size}})
}

fn features(solo: f64, model: &str, batch: f64) -> Value {
    json!({"solo_throughput": solo, "model": model, "batch_size": batch})
}

/// Three pairs with their jobs' features inline, on V100.
fn pairs() -> Value {
    json!({"gpu": "v100", "pairs": [
        {"a": {"features": features(11.2, "ResNet-50", 64.0)},
         "b": {"features": features(3.1, "Transformer", 32.0)}, "mode": "space"},
        {"a": {"features": features(250.0, "A3C", 4.0)},
         "b": {"features": features(0.8, "CycleGAN", 1.0)}, "mode": "space"},
        {"a": {"features": features(40.0, "LM", 20.0)},
         "b": {"features": features(7.5, "Recommendation", 2048.0)}, "mode": "space"},
    ]})
}

#[tokio::test]
async fn binary_tensors_in_and_out_match_json_and_v1_predict() {
    let (app, state) = app_with(Config::new(model_dir()));
    let model = state.model().expect("model");
    let width = model.meta.spec.pair_width();
    // The encoded tensor of three pairs: rows (a, b) then (b, a), as /v1/predict runs them.
    let request: PredictRequest = serde_json::from_value(pairs()).expect("request");
    let data =
        duet_model::predict::encode(&model, &Default::default(), &request, None).expect("encoded");
    let rows = data.len() / width;
    assert_eq!(rows, 6);
    // Binary in, binary out (what tritonclient sends by default).
    let header = json!({"id": "b1", "inputs": [binary_input(rows, width, data.len() * 4)],
                        "parameters": {"binary_data_output": true}});
    let binary = post(&app, &header, &bytes(&data), None).await;
    assert_eq!(binary.status, StatusCode::OK, "{}", binary.json());
    assert_eq!(binary.content_type, "application/octet-stream");
    let head = binary.json();
    assert_eq!(head["id"], "b1");
    assert_eq!(head["outputs"][0]["name"], "outputs");
    assert_eq!(head["outputs"][0]["shape"], json!([rows, 3]));
    assert_eq!(
        head["outputs"][0]["parameters"]["binary_data_size"],
        json!(rows * 3 * 4)
    );
    assert!(head["outputs"][0].get("data").is_none(), "{head}");
    let outputs = binary.binary_values();
    assert_eq!(outputs.len(), rows * 3);
    // The same tensor in JSON, answered in JSON: the same values.
    let body = json!({"inputs": [{"name": "pairs", "shape": [rows, width], "datatype": "FP32",
                                   "data": data}]});
    let (s, plain) = call(&app, "POST", URI, Some(body), None).await;
    assert_eq!(s, StatusCode::OK, "{plain}");
    let plain: Vec<f32> = serde_json::from_value(plain["outputs"][0]["data"].clone()).expect("f32");
    assert_eq!(plain, outputs);
    // Binary in, JSON out: the requested output says so.
    let header = json!({"inputs": [binary_input(rows, width, data.len() * 4)],
                        "outputs": [{"name": "outputs", "parameters": {"binary_data": false}}],
                        "parameters": {"binary_data_output": true}});
    let mixed = post(&app, &header, &bytes(&data), None).await;
    assert_eq!(mixed.status, StatusCode::OK, "{}", mixed.json());
    assert_eq!(mixed.content_type, "application/json");
    assert_eq!(mixed.header_length, None);
    let values: Vec<f32> =
        serde_json::from_value(mixed.json()["outputs"][0]["data"].clone()).expect("f32");
    assert_eq!(values, outputs);
    // JSON in, binary out through the requested output alone.
    let body = json!({"inputs": [{"name": "pairs", "shape": [rows, width], "datatype": "FP32",
                                   "data": data}],
                      "outputs": [{"name": "outputs", "parameters": {"binary_data": true}}]});
    let out = post(&app, &body, &[], Some(None)).await;
    assert_eq!(out.content_type, "application/octet-stream");
    assert_eq!(out.binary_values(), outputs);
    // The outputs are what /v1/predict answers: ln speed of a next to b, then of b next to a;
    // the feasibility logits averaged over both rows.
    let (s, predicted) = call(&app, "POST", "/v1/predict", Some(pairs()), None).await;
    assert_eq!(s, StatusCode::OK, "{predicted}");
    for (i, p) in predicted["predictions"]
        .as_array()
        .expect("predictions")
        .iter()
        .enumerate()
    {
        let (ab, ba) = (&outputs[6 * i..6 * i + 3], &outputs[6 * i + 3..6 * i + 6]);
        #[allow(clippy::cast_possible_truncation)]
        let single = |x: f64| x as f32;
        let speed = |row: &[f32]| single(f64::from(row[0]).exp());
        assert_eq!(p["speed_a"].as_f64().map(single), Some(speed(ab)), "{p}");
        assert_eq!(p["speed_b"].as_f64().map(single), Some(speed(ba)), "{p}");
        let logit = (f64::from(ab[2]) + f64::from(ba[2])) / 2.0;
        let probability = single(1.0 / (1.0 + (-logit).exp()));
        assert_eq!(
            p["feasible_probability"].as_f64().map(single),
            Some(probability)
        );
    }
}

/// A JSON tensor large enough to be read on every core (`tensor_json`): the same outputs as
/// the same values in binary, to the bit; a value deep inside it that is not a number still
/// refused by serde's words, naming its index.
#[tokio::test]
async fn a_large_json_tensor_reads_as_its_binary_twin() {
    let (app, state) = app_with(Config::new(model_dir()));
    let width = state.model().expect("model").meta.spec.pair_width();
    let rows = 2_000;
    let mut rng = duet_core::rng::Rng::new(9);
    #[allow(clippy::cast_possible_truncation)]
    let data: Vec<f32> = (0..rows * width)
        .map(|_| ((rng.unit() - 0.5) * 6.0) as f32)
        .collect();
    // As tritonclient writes FP32 in JSON: each value widened, its shortest f64 text.
    let text: Vec<String> = data.iter().map(|v| f64::from(*v).to_string()).collect();
    let json_body = |values: &[String]| {
        format!(
            r#"{{"inputs": [{{"name": "pairs", "shape": [{rows}, {width}], "datatype": "FP32", "data": [{}]}}]}}"#,
            values.join(", ")
        )
    };
    let body = json_body(&text);
    assert!(body.len() > duet_server::tensor_json::SPLIT_BYTES * 4);
    let send = |body: String| {
        let app = app.clone();
        async move {
            let response = app
                .oneshot(
                    Request::builder()
                        .method("POST")
                        .uri(URI)
                        .header("content-type", "application/json")
                        .body(Body::from(body))
                        .expect("request"),
                )
                .await
                .expect("response");
            let status = response.status();
            let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
                .await
                .expect("body");
            (
                status,
                serde_json::from_slice::<Value>(&bytes).expect("JSON answer"),
            )
        }
    };
    let (status, answer) = send(body).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let from_json: Vec<f32> =
        serde_json::from_value(answer["outputs"][0]["data"].clone()).expect("f32");
    let header = json!({"inputs": [binary_input(rows, width, data.len() * 4)],
                        "parameters": {"binary_data_output": true}});
    let binary = post(&app, &header, &bytes(&data), None).await;
    assert_eq!(binary.status, StatusCode::OK, "{}", binary.json());
    assert_eq!(from_json.len(), rows * 3);
    assert_eq!(from_json, binary.binary_values());
    // Two thirds in, a string: serde's refusal, with its place.
    let mut spoiled = text.clone();
    let at = spoiled.len() * 2 / 3;
    spoiled[at] = "\"x\"".into();
    let (status, answer) = send(json_body(&spoiled)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
    assert_eq!(
        answer["field"].as_str(),
        Some(format!("inputs[0].data[{at}]").as_str()),
        "{answer}"
    );
    // Too large a number for FP32: serde's refusal too.
    let mut far = text;
    far[at] = "1e39".into();
    let (status, answer) = send(json_body(&far)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert!(
        answer["error"]
            .as_str()
            .is_some_and(|e| e.contains("number out of range")),
        "{answer}"
    );
    assert_eq!(
        answer["field"].as_str(),
        Some(format!("inputs[0].data[{at}]").as_str()),
        "{answer}"
    );
}

#[tokio::test]
async fn a_binary_body_that_disagrees_with_its_header_is_refused_naming_the_field() {
    let (app, state) = app_with(Config {
        max_infer_rows: 10,
        ..Config::new(model_dir())
    });
    let width = state.model().expect("model").meta.spec.pair_width();
    let values: Vec<f32> = (0..2 * width).map(|i| (i % 5) as f32 / 5.0).collect();
    let data = bytes(&values);
    let size = data.len();
    let request = |input: Value| json!({"inputs": [input]});
    // The right request, for reference: answered.
    let ok = post(&app, &request(binary_input(2, width, size)), &data, None).await;
    assert_eq!(ok.status, StatusCode::OK, "{}", ok.json());
    assert_eq!(ok.content_type, "application/json");

    // binary_data_size that is not rows x width x 4.
    post(
        &app,
        &request(binary_input(2, width, size - 4)),
        &data[..size - 4],
        None,
    )
    .await
    .assert_error(
        StatusCode::UNPROCESSABLE_ENTITY,
        "inputs[0].parameters.binary_data_size",
        &format!("{} expected", size),
    );
    // Fewer bytes after the header than binary_data_size.
    post(
        &app,
        &request(binary_input(2, width, size)),
        &data[..size - 8],
        None,
    )
    .await
    .assert_error(
        StatusCode::BAD_REQUEST,
        "inputs[0].parameters.binary_data_size",
        &format!("the body has {} bytes after its JSON header", size - 8),
    );
    // Bytes that belong to no input.
    let mut longer = data.clone();
    longer.extend_from_slice(&[0; 8]);
    post(&app, &request(binary_input(2, width, size)), &longer, None)
        .await
        .assert_error(
            StatusCode::BAD_REQUEST,
            "Inference-Header-Content-Length",
            "8 bytes after the JSON header belong to no input",
        );
    // A header length past the body.
    let header = request(binary_input(2, width, size));
    let too_long = (header.to_string().len() + size + 1).to_string();
    post(&app, &header, &data, Some(Some(too_long)))
        .await
        .assert_error(
            StatusCode::BAD_REQUEST,
            "Inference-Header-Content-Length",
            "but the body has only",
        );
    // A header length that is no number.
    post(&app, &header, &data, Some(Some("twelve".into())))
        .await
        .assert_error(
            StatusCode::BAD_REQUEST,
            "Inference-Header-Content-Length",
            "not \"twelve\"",
        );
    // binary_data_size without the header that says where the JSON ends.
    post(&app, &header, &[], Some(None)).await.assert_error(
        StatusCode::BAD_REQUEST,
        "Inference-Header-Content-Length",
        "has no `Inference-Header-Content-Length` header",
    );
    // Neither data nor binary_data_size.
    let bare = json!({"name": "pairs", "shape": [2, width], "datatype": "FP32"});
    post(&app, &request(bare), &[], None).await.assert_error(
        StatusCode::UNPROCESSABLE_ENTITY,
        "inputs[0].data",
        "missing",
    );
    // Both.
    let both = json!({"name": "pairs", "shape": [2, width], "datatype": "FP32",
                      "data": values, "parameters": {"binary_data_size": size}});
    post(&app, &request(both), &data, None).await.assert_error(
        StatusCode::UNPROCESSABLE_ENTITY,
        "inputs[0].data",
        "not both",
    );
    // binary_data_size that is no number of bytes.
    let negative = json!({"name": "pairs", "shape": [2, width], "datatype": "FP32",
                          "parameters": {"binary_data_size": -4}});
    post(&app, &request(negative), &data, None)
        .await
        .assert_error(
            StatusCode::UNPROCESSABLE_ENTITY,
            "inputs[0].parameters.binary_data_size",
            "a number of bytes, not -4",
        );
    // Rows over --max-infer-rows: refused on the shape, before the bytes are read (only 8 of
    // them follow here).
    post(
        &app,
        &request(binary_input(11, width, 11 * width * 4)),
        &[0; 8],
        None,
    )
    .await
    .assert_error(
        StatusCode::PAYLOAD_TOO_LARGE,
        "inputs[0].shape",
        "--max-infer-rows",
    );
    // A value no encoding produces, in binary as in JSON.
    let mut far = values.clone();
    far[3] = f32::INFINITY;
    post(
        &app,
        &request(binary_input(2, width, size)),
        &bytes(&far),
        None,
    )
    .await
    .assert_error(
        StatusCode::UNPROCESSABLE_ENTITY,
        "inputs[0].data[3]",
        "is not a number in",
    );
    // Outputs the model does not have, and flags that are not true or false.
    let unknown = json!({"inputs": [binary_input(2, width, size)],
                         "outputs": [{"name": "probabilities"}]});
    post(&app, &unknown, &data, None).await.assert_error(
        StatusCode::UNPROCESSABLE_ENTITY,
        "outputs[0].name",
        "the model's outputs are `outputs`, `calibrated`, `calibration`, not `probabilities`",
    );
    let flag = json!({"inputs": [binary_input(2, width, size)],
                      "parameters": {"binary_data_output": "yes"}});
    post(&app, &flag, &data, None).await.assert_error(
        StatusCode::UNPROCESSABLE_ENTITY,
        "parameters.binary_data_output",
        "true or false",
    );
    // A binary body sent without its header is read as JSON, which it is not.
    let answer = post(&app, &header, &data, Some(None)).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{}", answer.json());
}

#[tokio::test]
async fn the_document_describes_the_binary_form() {
    let (app, _) = app_with(Config::new(model_dir()));
    let (_, doc) = call(&app, "GET", "/openapi.json", None, None).await;
    let infer = &doc["paths"]["/v2/models/{name}/infer"]["post"];
    let description = infer["description"].as_str().expect("a description");
    for words in [
        "Inference-Header-Content-Length",
        "binary_data_size",
        "binary_data_output",
    ] {
        assert!(description.contains(words), "{description}");
    }
    let answered = &infer["responses"]["200"];
    assert_eq!(
        answered["content"]["application/octet-stream"]["schema"]["format"],
        "binary"
    );
    assert!(answered["content"]["application/json"].is_object());
    assert!(answered["headers"]["Inference-Header-Content-Length"].is_object());
    let schemas = &doc["components"]["schemas"];
    assert_eq!(
        schemas["InferRequest"]["properties"]["parameters"]["properties"]["binary_data_output"]["type"],
        "boolean"
    );
    assert_eq!(
        schemas["InferRequestedOutput"]["properties"]["parameters"]["properties"]["binary_data"]["type"],
        "boolean"
    );
    assert_eq!(
        schemas["InferInput"]["required"],
        json!(["name", "shape", "datatype", "data"])
    );
}

/// Asserts a JSON error answer whose field is `field` and whose message contains `says`.
fn assert_json_error(
    got: &(StatusCode, Value),
    status: StatusCode,
    field: Option<&str>,
    says: &str,
) {
    let (s, body) = got;
    assert_eq!(*s, status, "{body}");
    assert_eq!(body["field"].as_str(), field, "{body}");
    let error = body["error"].as_str().expect("error message");
    assert!(error.contains(says), "`{error}` does not say `{says}`");
}

#[tokio::test]
async fn kserve_v2_aliases_run_the_same_model() {
    let (app, state) = app_with(Config::new(model_dir()));
    assert_eq!(
        call(&app, "GET", "/v2/health/live", None, None).await.0,
        StatusCode::OK
    );
    let (s, ready) = call(&app, "GET", "/v2/health/ready", None, None).await;
    assert_eq!((s, ready["ready"].as_bool()), (StatusCode::OK, Some(true)));
    let (s, meta) = call(&app, "GET", "/v2/models/default", None, None).await;
    assert_eq!(s, StatusCode::OK);
    let width = usize::try_from(meta["inputs"][0]["shape"][1].as_i64().expect("width")).expect("w");
    let model = state.model().expect("model");
    assert_eq!(width, model.meta.spec.pair_width());
    let data: Vec<f32> = (0..2 * width).map(|i| ((i % 7) as f32) / 7.0).collect();
    let body = json!({"id": "r1", "inputs": [{"name": "pairs", "shape": [2, width], "datatype": "FP32", "data": data}]});
    let (s, out) = call(&app, "POST", "/v2/models/default/infer", Some(body), None).await;
    assert_eq!(s, StatusCode::OK, "{out}");
    assert_eq!(out["id"], "r1");
    assert_eq!(out["outputs"][0]["shape"], json!([2, 3]));
    let expected = model.engine.run(data.clone()).expect("run");
    let got: Vec<f32> = serde_json::from_value(out["outputs"][0]["data"].clone()).expect("floats");
    assert_eq!(got, expected);
    let wrong = json!({"inputs": [{"name": "pairs", "shape": [2, width + 1], "datatype": "FP32", "data": [0.0]}]});
    let bad = call(&app, "POST", "/v2/models/default/infer", Some(wrong), None).await;
    assert_json_error(
        &bad,
        StatusCode::UNPROCESSABLE_ENTITY,
        Some("inputs[0].shape"),
        "shape",
    );
    // A shape past 8 dimensions is refused as it is read, at its ninth (not held, nor echoed
    // back); one within them is named whole.
    let long = json!({"inputs": [{"name": "pairs", "shape": vec![0; 100_000], "datatype": "FP32", "data": [0.0]}]});
    let (status, answer) = call(&app, "POST", "/v2/models/default/infer", Some(long), None).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
    assert_eq!(answer["field"], "inputs[0].shape", "{answer}");
    let error = answer["error"].as_str().expect("an error");
    assert!(error.contains("more than 8 dimensions"), "{error}");
    assert!(error.len() < 200, "{error}");
    let five = json!({"inputs": [{"name": "pairs", "shape": [2, width, 1, 1, 1], "datatype": "FP32", "data": [0.0]}]});
    let bad = call(&app, "POST", "/v2/models/default/infer", Some(five), None).await;
    assert_json_error(
        &bad,
        StatusCode::UNPROCESSABLE_ENTITY,
        Some("inputs[0].shape"),
        &format!("got [2, {width}, 1, 1, 1]"),
    );
    // A parameter is a boolean, a number or a string: an array is refused where it starts.
    for (at, body) in [
        (
            "parameters",
            json!({"parameters": {"x": vec![0; 1000]}, "inputs": [{"name": "pairs", "shape": [2, width], "datatype": "FP32", "data": data.clone()}]}),
        ),
        (
            "inputs[0].parameters",
            json!({"inputs": [{"name": "pairs", "shape": [2, width], "datatype": "FP32", "parameters": {"x": {"y": 1}}, "data": data.clone()}]}),
        ),
    ] {
        let (status, answer) =
            call(&app, "POST", "/v2/models/default/infer", Some(body), None).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
        let field = answer["field"].as_str().expect("a field");
        assert!(field.starts_with(at), "{field}");
        let error = answer["error"].as_str().expect("an error");
        assert!(error.contains("a boolean, a number or a string"), "{error}");
    }
    // At most 64 parameters: the 65th is refused as it is read.
    let many: serde_json::Map<String, Value> =
        (0..65).map(|k| (format!("p{k}"), json!(k))).collect();
    let body = json!({"parameters": many, "inputs": [{"name": "pairs", "shape": [2, width], "datatype": "FP32", "data": data.clone()}]});
    let (status, answer) = call(&app, "POST", "/v2/models/default/infer", Some(body), None).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
    let error = answer["error"].as_str().expect("an error");
    assert!(error.contains("more than 64 parameters"), "{error}");
    // Scalars of any kind are taken (an unknown one is ignored).
    let scalars = json!({"parameters": {"a": 1, "b": "x", "c": null, "d": 2.5, "binary_data_output": false},
        "inputs": [{"name": "pairs", "shape": [2, width], "datatype": "FP32", "data": data.clone()}]});
    let (status, answer) = call(
        &app,
        "POST",
        "/v2/models/default/infer",
        Some(scalars),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let unknown = call(&app, "GET", "/v2/models/other", None, None).await;
    assert_json_error(
        &unknown,
        StatusCode::NOT_FOUND,
        Some("name"),
        "no model `other`",
    );
    // The server's metadata, as GET /v2 states it in the protocol.
    let (s, server) = call(&app, "GET", "/v2", None, None).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(server["name"], "duet");
    assert_eq!(server["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(server["extensions"], json!(["binary_tensor_data"]));
    // The served version by name: the same metadata, readiness and answer; another: 404.
    let version = meta["versions"][0].as_str().expect("a version").to_string();
    assert_eq!(version, model.version().to_string());
    let at = |rest: &str| format!("/v2/models/default/versions/{version}{rest}");
    let (s, versioned) = call(&app, "GET", &at(""), None, None).await;
    assert_eq!((s, &versioned), (StatusCode::OK, &meta));
    let (s, ready) = call(&app, "GET", &at("/ready"), None, None).await;
    assert_eq!((s, ready["ready"].as_bool()), (StatusCode::OK, Some(true)));
    let body = json!({"inputs": [{"name": "pairs", "shape": [2, width], "datatype": "FP32", "data": data}]});
    let (s, out) = call(&app, "POST", &at("/infer"), Some(body.clone()), None).await;
    assert_eq!(s, StatusCode::OK, "{out}");
    let again: Vec<f32> =
        serde_json::from_value(out["outputs"][0]["data"].clone()).expect("floats");
    assert_eq!(again, expected);
    assert_eq!(out["model_version"], version.as_str());
    // The document names the served model and version on every KServe model path.
    let (_, doc) = call(&app, "GET", "/openapi.json", None, None).await;
    let parameters =
        &doc["paths"]["/v2/models/{name}/versions/{version}/infer"]["post"]["parameters"];
    let schema_of = |name: &str| {
        parameters
            .as_array()
            .and_then(|ps| ps.iter().find(|p| p["name"] == name))
            .map(|p| p["schema"]["enum"].clone())
    };
    assert_eq!(schema_of("name"), Some(json!(["default"])));
    assert_eq!(schema_of("version"), Some(json!([version])));
    // Its answers are the plain infer's, a 404 for another version too.
    let answers = |path: &str| doc["paths"][path]["post"]["responses"].clone();
    let (plain, versioned) = (
        answers("/v2/models/{name}/infer"),
        answers("/v2/models/{name}/versions/{version}/infer"),
    );
    for status in ["200", "400", "401", "413", "422", "503"] {
        assert_eq!(plain[status], versioned[status], "{status}");
    }
    assert!(
        versioned["404"]["description"]
            .as_str()
            .is_some_and(|d| d.contains("version")),
        "{versioned}"
    );
    for (method, rest, body) in [
        ("GET", "", None),
        ("GET", "/ready", None),
        ("POST", "/infer", Some(body)),
    ] {
        let uri = format!("/v2/models/default/versions/0{rest}");
        let other = call(&app, method, &uri, body, None).await;
        assert_json_error(
            &other,
            StatusCode::NOT_FOUND,
            Some("version"),
            "no version `0` of model `default`",
        );
    }
}

/// Each row's calibration class and its calibrated ln p10 speed: those `/v1/predict` gives the
/// pair the row encodes, for a pair of training workloads (known), of new workloads of known
/// families (new), with a family the model never saw (new_family) and with a solo throughput
/// far outside training's (conservative); in JSON, in binary, asked for alone and in any order.
#[tokio::test]
async fn every_row_says_its_calibration_class_and_its_calibrated_p90() {
    let (app, state) = app_with(Config::new(model_dir()));
    let model = state.model().expect("model");
    let width = model.meta.spec.pair_width();
    let (registry, _) = duet_model::registry::Registry::build(&model, Default::default());
    let pairs = json!({"gpu": "v100", "pairs": [
        {"a": {"workload": "resnet-50-bs64"}, "b": {"workload": "transformer-bs32"}, "mode": "space"},
        {"a": {"features": features(11.2, "ResNet-50", 64.0)},
         "b": {"workload": "a3c"}, "mode": "space"},
        {"a": {"features": features(5.0, "VGG-16", 32.0)},
         "b": {"features": features(3.1, "Transformer", 32.0)}, "mode": "space"},
        {"a": {"features": features(1e9, "ResNet-50", 64.0)},
         "b": {"workload": "a3c"}, "mode": "space"},
    ]});
    let request: PredictRequest = serde_json::from_value(pairs.clone()).expect("request");
    let data = duet_model::predict::encode(&model, &registry, &request, None).expect("encoded");
    let rows = data.len() / width;
    let (s, predicted) = call(&app, "POST", "/v1/predict", Some(pairs), None).await;
    assert_eq!(s, StatusCode::OK, "{predicted}");
    let predicted = predicted["predictions"]
        .as_array()
        .expect("predictions")
        .clone();
    let classes: Vec<&str> = predicted
        .iter()
        .map(|p| p["calibration"].as_str().expect("class"))
        .collect();
    assert_eq!(classes, ["known", "new", "new_family", "conservative"]);
    let body = json!({"inputs": [{"name": "pairs", "shape": [rows, width], "datatype": "FP32",
                                   "data": data}]});
    let (s, out) = call(&app, "POST", URI, Some(body), None).await;
    assert_eq!(s, StatusCode::OK, "{out}");
    let names: Vec<&str> = out["outputs"]
        .as_array()
        .expect("outputs")
        .iter()
        .map(|o| o["name"].as_str().expect("name"))
        .collect();
    assert_eq!(names, ["outputs", "calibrated", "calibration"]);
    assert_eq!(out["outputs"][1]["datatype"], "FP32");
    assert_eq!(out["outputs"][1]["shape"], json!([rows, 1]));
    assert_eq!(out["outputs"][2]["datatype"], "INT32");
    assert_eq!(out["outputs"][2]["shape"], json!([rows, 1]));
    let codes: Vec<i64> = out["outputs"][2]["data"]
        .as_array()
        .expect("codes")
        .iter()
        .map(|v| v.as_i64().expect("an integer"))
        .collect();
    // Both rows of a pair in the pair's class: 0 known, 1 new, 2 new_family, 3 conservative.
    assert_eq!(codes, [0, 0, 1, 1, 2, 2, 3, 3]);
    let calibrated: Vec<f32> =
        serde_json::from_value(out["outputs"][1]["data"].clone()).expect("f32");
    for (i, p) in predicted.iter().enumerate() {
        for (row, key) in [(2 * i, "slowdown_a_p90"), (2 * i + 1, "slowdown_b_p90")] {
            let want = p[key].as_f64().expect(key);
            let got = (-f64::from(calibrated[row])).exp();
            assert!(
                (got - want).abs() <= 1e-5 * want,
                "pair {i} {key}: {got} vs {want}"
            );
        }
    }
    // The raw p10 is the network's: the calibrated one is it less the class's shift, never
    // above the row's ln speed (a new family's is weighed with the effects prior first: the
    // next test).
    let raw: Vec<f32> = serde_json::from_value(out["outputs"][0]["data"].clone()).expect("f32");
    for (row, code) in codes.iter().enumerate().filter(|(_, code)| **code != 2) {
        let class = duet_core::api::Calibration::ALL[usize::try_from(*code).expect("code")];
        let shift = model.meta.calibration.shift(class, Some("v100"));
        let want = (f64::from(raw[3 * row + 1]) - shift).min(f64::from(raw[3 * row]));
        assert!(
            (f64::from(calibrated[row]) - want).abs() < 1e-5,
            "row {row}"
        );
    }
    // Asked for alone and in another order, in binary: the same values, in that order.
    let header = json!({"inputs": [binary_input(rows, width, data.len() * 4)],
                        "outputs": [{"name": "calibration"}, {"name": "calibrated"},
                                    {"name": "calibration"}],
                        "parameters": {"binary_data_output": true}});
    let binary = post(&app, &header, &bytes(&data), None).await;
    assert_eq!(binary.status, StatusCode::OK, "{}", binary.json());
    let head = binary.json();
    assert_eq!(head["outputs"].as_array().map(Vec::len), Some(2), "{head}");
    assert_eq!(head["outputs"][0]["name"], "calibration");
    let ints: Vec<i64> = binary
        .binary_of(0)
        .chunks_exact(4)
        .map(|b| i64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])))
        .collect();
    assert_eq!(ints, codes);
    let floats: Vec<f32> = binary
        .binary_of(1)
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    assert_eq!(floats, calibrated);
    // Both requests' rows counted by class: two of each class per request.
    let scrape = app
        .clone()
        .oneshot(
            Request::builder()
                .uri("/metrics")
                .body(Body::empty())
                .expect("request"),
        )
        .await
        .expect("response");
    let text = axum::body::to_bytes(scrape.into_body(), usize::MAX)
        .await
        .expect("body");
    let text = String::from_utf8_lossy(&text);
    for class in ["known", "new", "new_family", "conservative"] {
        let line = format!("duet_kserve_rows_total{{calibration=\"{class}\"}} 4");
        assert!(text.lines().any(|l| l == line), "no `{line}` in\n{text}");
    }
    let (_, meta) = call(&app, "GET", "/v2/models/default", None, None).await;
    assert_eq!(
        meta["outputs"],
        json!([{"name": "outputs", "datatype": "FP32", "shape": [-1, 3]},
               {"name": "calibrated", "datatype": "FP32", "shape": [-1, 1]},
               {"name": "calibration", "datatype": "INT32", "shape": [-1, 1]}])
    );
}

/// A job of a family the model never saw, next to a training workload: `/v1/predict` answers
/// with the network's ln speeds (KServe's `outputs`) weighed with the model's effects prior
/// (the device's mean, the partner's effect on its neighbours, the known job's own), the p90
/// from the lower of the network's p10 and the weighted speed less the network's spread, shifted
/// by `new_family`'s shift; KServe's `calibrated` says the same. A pair of training workloads
/// is the network's alone.
#[tokio::test]
async fn a_new_familys_speed_is_weighed_with_the_effects_prior() {
    let (app, state) = app_with(Config::new(model_dir()));
    let model = state.model().expect("model");
    let prior = model.meta.calibration.family_prior.as_ref();
    let v100 = &prior.expect("the default model has a family prior").devices["v100"];
    let width = model.meta.spec.pair_width();
    let (registry, _) = duet_model::registry::Registry::build(&model, Default::default());
    let pairs = json!({"gpu": "v100", "pairs": [
        {"a": {"features": features(5.0, "VGG-16", 32.0)},
         "b": {"workload": "resnet-50-bs16"}, "mode": "space"},
        {"a": {"workload": "resnet-50-bs16"}, "b": {"workload": "transformer-bs32"},
         "mode": "space"},
    ]});
    let request: PredictRequest = serde_json::from_value(pairs.clone()).expect("request");
    let data = duet_model::predict::encode(&model, &registry, &request, None).expect("encoded");
    let rows = data.len() / width;
    let (s, predicted) = call(&app, "POST", "/v1/predict", Some(pairs), None).await;
    assert_eq!(s, StatusCode::OK, "{predicted}");
    let body = json!({"inputs": [{"name": "pairs", "shape": [rows, width], "datatype": "FP32",
                                   "data": data}]});
    let (s, out) = call(&app, "POST", URI, Some(body), None).await;
    assert_eq!(s, StatusCode::OK, "{out}");
    let raw: Vec<f32> = serde_json::from_value(out["outputs"][0]["data"].clone()).expect("f32");
    let calibrated: Vec<f32> =
        serde_json::from_value(out["outputs"][1]["data"].clone()).expect("f32");
    let new = &predicted["predictions"][0];
    assert_eq!(new["calibration"], "new_family", "{new}");
    let shift = model
        .meta
        .calibration
        .shift(duet_core::api::Calibration::NewFamily, Some("v100"));
    let w = v100.weight;
    for (row, prior, side) in [
        (0, v100.mean + v100.partner["resnet-50-bs16"], "a"),
        (1, v100.mean + v100.own["resnet-50-bs16"], "b"),
    ] {
        let (speed, p10) = (f64::from(raw[3 * row]), f64::from(raw[3 * row + 1]));
        let weighted = w * speed + (1.0 - w) * prior;
        let close = |got: &Value, want: f64| {
            let got = got.as_f64().expect("a number");
            assert!((got - want).abs() <= 1e-5 * want, "{side}: {got} vs {want}");
        };
        close(&new[format!("speed_{side}")], weighted.exp());
        let p90 = (shift - p10.min(weighted + p10 - speed)).exp();
        close(&new[format!("slowdown_{side}_p90")], p90);
        close(&json!((-f64::from(calibrated[row])).exp()), p90);
    }
    // Two training workloads: the network's speeds.
    let known = &predicted["predictions"][1];
    assert_eq!(known["calibration"], "known", "{known}");
    for (row, side) in [(2, "a"), (3, "b")] {
        let want = f64::from(raw[3 * row]).exp();
        let got = known[format!("speed_{side}")].as_f64().expect("speed");
        assert!((got - want).abs() <= 1e-5 * want, "{side}: {got} vs {want}");
    }
}
