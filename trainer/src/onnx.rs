//! The ensemble written as an ONNX graph, by duet itself (burn-onnx only imports).
//!
//! Graph: input `pairs` `[N, width]` float; each member is a chain of `Gemm` (weights
//! `[inputs, outputs]`, no transpose) with `Relu` between layers; the members' `[N, 3]` outputs
//! are summed and scaled by `1 / members` into the output `outputs`, column for column what
//! Burn's forward pass returns.

use burn::backend::Flex;
use burn::tensor::Tensor;
use onnx_protobuf::{
    GraphProto, Message, ModelProto, NodeProto, OperatorSetIdProto, TensorProto, TensorShapeProto,
    TypeProto, ValueInfoProto, tensor_proto, tensor_shape_proto, type_proto,
};

use crate::model::{Mlp, OUTPUTS};

pub const INPUT: &str = "pairs";
pub const OUTPUT: &str = "outputs";
/// ONNX IR version 8 with opset 17: read by every ONNX Runtime of the last years.
const IR_VERSION: i64 = 8;
const OPSET: i64 = 17;

fn float_tensor<const D: usize>(name: &str, t: Tensor<Flex, D>) -> TensorProto {
    let dims = t
        .dims()
        .iter()
        .map(|&d| i64::try_from(d).unwrap_or(i64::MAX))
        .collect();
    let mut proto = TensorProto::new();
    proto.name = name.to_string();
    proto.data_type = tensor_proto::DataType::FLOAT as i32;
    proto.dims = dims;
    proto.float_data = t.into_data().to_vec::<f32>().unwrap_or_default();
    proto
}

fn node(op: &str, name: &str, inputs: &[&str], output: &str) -> NodeProto {
    let mut n = NodeProto::new();
    n.op_type = op.to_string();
    n.name = name.to_string();
    n.input = inputs.iter().map(|s| (*s).to_string()).collect();
    n.output = vec![output.to_string()];
    n
}

/// A float tensor value of shape `[batch, columns]` with a symbolic batch dimension.
fn matrix_value(name: &str, columns: usize) -> ValueInfoProto {
    let dim = |v: tensor_shape_proto::dimension::Value| {
        let mut d = tensor_shape_proto::Dimension::new();
        d.value = Some(v);
        d
    };
    let mut shape = TensorShapeProto::new();
    shape.dim = vec![
        dim(tensor_shape_proto::dimension::Value::DimParam(
            "batch".into(),
        )),
        dim(tensor_shape_proto::dimension::Value::DimValue(
            i64::try_from(columns).unwrap_or(i64::MAX),
        )),
    ];
    let mut tensor = type_proto::Tensor::new();
    tensor.elem_type = tensor_proto::DataType::FLOAT as i32;
    tensor.shape = Some(shape).into();
    let mut ty = TypeProto::new();
    ty.value = Some(type_proto::Value::TensorType(tensor));
    let mut v = ValueInfoProto::new();
    v.name = name.to_string();
    v.type_ = Some(ty).into();
    v
}

/// Appends member `k`'s layers from `from` on, reading `input`; returns the output's name.
fn member_chain(
    graph: &mut GraphProto,
    k: usize,
    net: &Mlp<Flex>,
    from: usize,
    input: String,
) -> String {
    let mut current = input;
    let last = net.layers.len() - 1;
    for (i, layer) in net.layers.iter().enumerate().skip(from) {
        let (w, b) = (format!("m{k}_w{i}"), format!("m{k}_b{i}"));
        graph.initializer.push(float_tensor(&w, layer.weight.val()));
        graph.initializer.push(float_tensor(&b, layer.bias.val()));
        let gemm = format!("m{k}_gemm{i}");
        graph
            .node
            .push(node("Gemm", &gemm, &[&current, &w, &b], &gemm));
        current = if i == last {
            gemm
        } else {
            let relu = format!("m{k}_relu{i}");
            graph.node.push(node("Relu", &relu, &[&gemm], &relu));
            relu
        };
    }
    current
}

/// The members' outputs averaged into `OUTPUT`, and the model around `graph`.
fn finish(
    mut graph: GraphProto,
    member_outputs: &[String],
    input: &str,
    width: usize,
    doc: &str,
) -> Result<Vec<u8>, String> {
    let refs: Vec<&str> = member_outputs.iter().map(String::as_str).collect();
    graph
        .node
        .push(node("Sum", "ensemble_sum", &refs, "ensemble_sum"));
    let mut scale = TensorProto::new();
    scale.name = "ensemble_scale".into();
    scale.data_type = tensor_proto::DataType::FLOAT as i32;
    #[allow(clippy::cast_precision_loss)]
    let members = member_outputs.len() as f32;
    scale.float_data = vec![1.0 / members];
    graph.initializer.push(scale);
    graph.node.push(node(
        "Mul",
        "ensemble_mean",
        &["ensemble_sum", "ensemble_scale"],
        OUTPUT,
    ));
    graph.input.push(matrix_value(input, width));
    graph.output.push(matrix_value(OUTPUT, OUTPUTS));

    let mut opset = OperatorSetIdProto::new();
    opset.domain = String::new();
    opset.version = OPSET;
    let mut model = ModelProto::new();
    model.ir_version = IR_VERSION;
    model.opset_import = vec![opset];
    model.producer_name = "duet".into();
    model.producer_version = env!("CARGO_PKG_VERSION").into();
    model.doc_string = doc.to_string();
    model.graph = Some(graph).into();
    model.write_to_bytes().map_err(|e| e.to_string())
}

/// Serialises the ensemble `nets` (inputs `width` wide) as an ONNX model.
pub fn export(nets: &[Mlp<Flex>], width: usize, doc: &str) -> Result<Vec<u8>, String> {
    let mut graph = GraphProto::new();
    graph.name = "duet".into();
    let member_outputs: Vec<String> = nets
        .iter()
        .enumerate()
        .map(|(k, net)| member_chain(&mut graph, k, net, 0, INPUT.to_string()))
        .collect();
    finish(graph, &member_outputs, INPUT, width, doc)
}

/// The input of the tail graph: every member's first-layer pre-activation, side by side.
pub const TAIL_INPUT: &str = "first_layer";

fn int_tensor(name: &str, values: Vec<i64>) -> TensorProto {
    let mut proto = TensorProto::new();
    proto.name = name.to_string();
    proto.data_type = tensor_proto::DataType::INT64 as i32;
    proto.dims = vec![i64::try_from(values.len()).unwrap_or(i64::MAX)];
    proto.int64_data = values;
    proto
}

/// The ensemble after its first layer: input `first_layer` `[N, members x width of the first
/// hidden layer]` (member k's pre-activation in columns k*h..(k+1)*h), then each member's ReLU
/// and remaining layers, averaged. Because the first layer is linear in the input, a server can
/// compute each job's share of it once and add shares per pair; `None` for networks without a
/// hidden layer.
pub fn export_tail(nets: &[Mlp<Flex>], doc: &str) -> Result<Option<Vec<u8>>, String> {
    let Some(h) = tail_width(nets) else {
        return Ok(None);
    };
    let mut graph = GraphProto::new();
    graph.name = "duet_tail".into();
    graph.initializer.push(int_tensor("axis1", vec![1]));
    let mut member_outputs = Vec::new();
    for (k, net) in nets.iter().enumerate() {
        let (start, end) = (format!("m{k}_start"), format!("m{k}_end"));
        let at = |x: usize| i64::try_from(x).unwrap_or(i64::MAX);
        graph.initializer.push(int_tensor(&start, vec![at(k * h)]));
        graph
            .initializer
            .push(int_tensor(&end, vec![at((k + 1) * h)]));
        let slice = format!("m{k}_first");
        graph.node.push(node(
            "Slice",
            &slice,
            &[TAIL_INPUT, &start, &end, "axis1"],
            &slice,
        ));
        let relu = format!("m{k}_relu0");
        graph.node.push(node("Relu", &relu, &[&slice], &relu));
        member_outputs.push(member_chain(&mut graph, k, net, 1, relu));
    }
    finish(graph, &member_outputs, TAIL_INPUT, h * nets.len(), doc).map(Some)
}

/// The width of the first hidden layer, the same in every member; `None` without one.
pub fn tail_width(nets: &[Mlp<Flex>]) -> Option<usize> {
    let first = nets.first()?;
    if first.layers.len() < 2 {
        return None;
    }
    let h = first.layers[0].bias.val().dims()[0];
    nets.iter()
        .all(|n| n.layers.len() >= 2 && n.layers[0].bias.val().dims()[0] == h)
        .then_some(h)
}
