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

use crate::network::{Mlp, OUTPUTS};

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

/// Serialises the ensemble `nets` (inputs `width` wide) as an ONNX model.
pub fn export(nets: &[Mlp<Flex>], width: usize, doc: &str) -> Result<Vec<u8>, String> {
    let mut graph = GraphProto::new();
    graph.name = "duet".into();
    let mut member_outputs = Vec::new();
    for (k, net) in nets.iter().enumerate() {
        let mut current = INPUT.to_string();
        let last = net.layers.len() - 1;
        for (i, layer) in net.layers.iter().enumerate() {
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
        member_outputs.push(current);
    }
    let refs: Vec<&str> = member_outputs.iter().map(String::as_str).collect();
    graph
        .node
        .push(node("Sum", "ensemble_sum", &refs, "ensemble_sum"));
    let mut scale = TensorProto::new();
    scale.name = "ensemble_scale".into();
    scale.data_type = tensor_proto::DataType::FLOAT as i32;
    #[allow(clippy::cast_precision_loss)]
    let members = nets.len() as f32;
    scale.float_data = vec![1.0 / members];
    graph.initializer.push(scale);
    graph.node.push(node(
        "Mul",
        "ensemble_mean",
        &["ensemble_sum", "ensemble_scale"],
        OUTPUT,
    ));
    graph.input.push(matrix_value(INPUT, width));
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
