//! Built-in workloads, written with Burn: each a training or inference loop that calls back after
//! every finished iteration (the iteration's result read back, so on a GPU the work is done, not
//! only queued).

use std::fmt;
use std::str::FromStr;

use burn::backend::{Autodiff, Flex};
use burn::module::{AutodiffModule, Module};
use burn::nn::attention::generate_autoregressive_mask;
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::transformer::{
    TransformerEncoder, TransformerEncoderConfig, TransformerEncoderInput,
};
use burn::nn::{Linear, LinearConfig, PaddingConfig2d};
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::tensor::activation::relu;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Distribution, Tensor, TensorData};
use duet_core::dataset::JobKind;

use crate::catalog::{Builtin, Precision, Size};

/// Where a built-in runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Device {
    /// Burn's `Flex` CPU backend.
    Cpu,
    /// burn-cuda on GPU `n` (the `cuda` feature).
    Cuda(usize),
}

impl FromStr for Device {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "cpu" => Ok(Device::Cpu),
            "cuda" => Ok(Device::Cuda(0)),
            _ => s
                .strip_prefix("cuda:")
                .and_then(|n| n.parse().ok())
                .map(Device::Cuda)
                .ok_or_else(|| format!("unknown device `{s}`, expected cpu, cuda or cuda:N")),
        }
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => f.write_str("cpu"),
            Device::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

/// Runs `builtin` until `tick` returns false; `tick` is called after every iteration.
pub fn run(
    builtin: Builtin,
    kind: JobKind,
    size: Size,
    device: Device,
    tick: &mut dyn FnMut() -> bool,
) -> Result<(), String> {
    match device {
        Device::Cpu if size.precision == Precision::Fp32 => {
            run_on::<Autodiff<Flex>>(builtin, kind, size, &Default::default(), tick)
        }
        Device::Cpu => Err(format!(
            "precision {}: Burn's Flex CPU backend computes in fp32; run it with --device cuda",
            size.precision
        )),
        Device::Cuda(index) => run_cuda(builtin, kind, size, index, tick),
    }
}

#[cfg(feature = "cuda")]
fn run_cuda(
    builtin: Builtin,
    kind: JobKind,
    size: Size,
    index: usize,
    tick: &mut dyn FnMut() -> bool,
) -> Result<(), String> {
    use burn::backend::Cuda;
    use burn::backend::cuda::CudaDevice;
    use burn::tensor::{bf16, f16};
    // burn-cuda panics where CUDA cannot start (no driver library, no NVRTC, no headers), on its
    // device thread first: its message is already printed; the run ends with an error, not a
    // second panic.
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let device = CudaDevice::new(index);
        match size.precision {
            Precision::Fp32 => run_on::<Autodiff<Cuda>>(builtin, kind, size, &device, tick),
            Precision::Fp16 => run_on::<Autodiff<Cuda<f16>>>(builtin, kind, size, &device, tick),
            Precision::Bf16 => run_on::<Autodiff<Cuda<bf16>>>(builtin, kind, size, &device, tick),
        }
    }))
    .unwrap_or_else(|payload| {
        Err(format!(
            "device cuda:{index}: burn-cuda stopped ({}); CUDA needs the NVIDIA driver's libcuda, \
             NVRTC and the toolkit's headers (CUDA_PATH): see the lines above",
            duet_core::panic::message(payload.as_ref())
        ))
    })
}

#[cfg(not(feature = "cuda"))]
fn run_cuda(
    _: Builtin,
    _: JobKind,
    _: Size,
    index: usize,
    _: &mut dyn FnMut() -> bool,
) -> Result<(), String> {
    Err(format!(
        "device cuda:{index}: this duet was built without CUDA (build with --features cuda)"
    ))
}

fn run_on<B: AutodiffBackend>(
    builtin: Builtin,
    kind: JobKind,
    size: Size,
    device: &B::Device,
    tick: &mut dyn FnMut() -> bool,
) -> Result<(), String> {
    match builtin {
        Builtin::Mlp => {
            let net = Mlp::<B>::new(size, device);
            let x = Tensor::<B, 2>::random(
                [size.batch, size.width],
                Distribution::Normal(0.0, 1.0),
                device,
            );
            learn(net, x, kind, device, tick)
        }
        Builtin::Conv => {
            let net = ConvNet::<B>::new(size, device);
            let x = Tensor::<B, 4>::random(
                [size.batch, 3, 32, 32],
                Distribution::Normal(0.0, 1.0),
                device,
            );
            learn(net, x, kind, device, tick)
        }
        Builtin::Encoder | Builtin::Decoder => {
            if !size.width.is_multiple_of(HEADS) {
                return Err(format!(
                    "`width` {} must be a multiple of the {HEADS} attention heads",
                    size.width
                ));
            }
            let net = Encoder::<B>::new(size, device);
            let x = Tensor::<B, 3>::random(
                [size.batch, size.seq, size.width],
                Distribution::Normal(0.0, 1.0),
                device,
            );
            if builtin == Builtin::Decoder && kind == JobKind::Infer {
                return decode(&net.valid(), size, device, tick);
            }
            learn(net, x, kind, device, tick)
        }
        Builtin::Matmul => {
            let a = Tensor::<B::InnerBackend, 2>::random(
                [size.width, size.width],
                Distribution::Uniform(-1.0, 1.0),
                device,
            );
            let b = a.clone().transpose();
            loop {
                // Independent products of the same operands: values stay in range (a chain of
                // products would decay into subnormals, then zeros, and change speed as it does).
                let mut total = 0.0;
                for _ in 0..size.depth {
                    total += scalar(a.clone().matmul(b.clone()).sum())?;
                }
                // The sum of A·Aᵀ's entries is |Aᵀ1|² >= 0: in fp16 it may exceed the type's
                // range (+inf) while every product is right; NaN means a wrong result.
                if total.is_nan() {
                    return Err(format!("a matrix product became {total}"));
                }
                if !tick() {
                    return Ok(());
                }
            }
        }
        Builtin::Stream => {
            let n = size.width * 1024;
            let mut a =
                Tensor::<B::InnerBackend, 1>::random([n], Distribution::Uniform(0.0, 1.0), device);
            let c = Tensor::<B::InnerBackend, 1>::ones([n], device);
            loop {
                for _ in 0..size.depth {
                    a = a * 0.5 + c.clone() * 0.25;
                }
                scalar(a.clone().sum())?;
                if !tick() {
                    return Ok(());
                }
            }
        }
    }
}

/// The first value of `t`, read back from the device (which waits for the work behind it).
fn scalar<B: Backend>(t: Tensor<B, 1>) -> Result<f32, String> {
    first_value(t.into_data())
}

/// The first value of `data` as f32, whatever its float type: fp16 and bf16 are converted, so
/// the callers' NaN checks see their values (read as f32 directly they were an error, and the
/// check saw 0).
fn first_value(data: TensorData) -> Result<f32, String> {
    let dtype = data.dtype;
    data.convert::<f32>()
        .to_vec::<f32>()
        .map_err(|e| format!("a {dtype:?} result could not be read back: {e:?}"))?
        .first()
        .copied()
        .ok_or_else(|| "an empty result was read back".to_string())
}

/// A network the training and inference loops can drive.
trait Net<B: AutodiffBackend, const D: usize>: AutodiffModule<B> {
    fn forward(&self, x: Tensor<B, D>) -> Tensor<B, 2>;
    fn forward_inner(
        inner: &<Self as AutodiffModule<B>>::InnerModule,
        x: Tensor<B::InnerBackend, D>,
    ) -> Tensor<B::InnerBackend, 2>;
}

/// Training: forward, mean squared error against zero, backward, one Adam step. Inference: the
/// forward pass of the same network without gradients.
fn learn<B: AutodiffBackend, const D: usize, N: Net<B, D>>(
    mut net: N,
    x: Tensor<B, D>,
    kind: JobKind,
    device: &B::Device,
    tick: &mut dyn FnMut() -> bool,
) -> Result<(), String> {
    let _ = device;
    match kind {
        JobKind::Train => {
            let mut optimizer = AdamConfig::new().init::<B, N>();
            loop {
                let y = net.forward(x.clone());
                let loss = (y.clone() * y).mean();
                let value = scalar(loss.clone().inner())?;
                if !value.is_finite() {
                    return Err(format!("the training loss became {value}"));
                }
                let grads = GradientsParams::from_grads(loss.backward(), &net);
                net = optimizer.step(1e-3, net, grads);
                if !tick() {
                    return Ok(());
                }
            }
        }
        JobKind::Infer => {
            let inner = net.valid();
            let x = x.inner();
            loop {
                let y = N::forward_inner(&inner, x.clone());
                scalar(y.sum())?;
                if !tick() {
                    return Ok(());
                }
            }
        }
    }
}

/// Attention heads of the transformer built-ins.
const HEADS: usize = 4;

#[derive(Module, Debug)]
struct Encoder<B: Backend> {
    layers: TransformerEncoder<B>,
}

impl<B: Backend> Encoder<B> {
    fn new(size: Size, device: &B::Device) -> Encoder<B> {
        Encoder {
            layers: TransformerEncoderConfig::new(
                size.width,
                4 * size.width,
                HEADS,
                size.depth.max(1),
            )
            .with_dropout(0.0)
            .init(device),
        }
    }

    /// Causal self-attention over the sequence; the last position's features.
    fn run(&self, x: Tensor<B, 3>) -> Tensor<B, 2> {
        let [batch, seq, width] = x.dims();
        let mask = generate_autoregressive_mask::<B>(batch, seq, &x.device());
        let y = self
            .layers
            .forward(TransformerEncoderInput::new(x).mask_attn(mask));
        y.slice([0..batch, seq - 1..seq, 0..width])
            .reshape([batch, width])
    }
}

impl<B: AutodiffBackend> Net<B, 3> for Encoder<B> {
    fn forward(&self, x: Tensor<B, 3>) -> Tensor<B, 2> {
        self.run(x)
    }
    fn forward_inner(
        inner: &Encoder<B::InnerBackend>,
        x: Tensor<B::InnerBackend, 3>,
    ) -> Tensor<B::InnerBackend, 2> {
        inner.run(x)
    }
}

/// Generates `seq` tokens per iteration, one position at a time, reusing the keys and values
/// of the positions before (the cache), each new token fed back as the next input.
fn decode<B: Backend>(
    net: &Encoder<B>,
    size: Size,
    device: &B::Device,
    tick: &mut dyn FnMut() -> bool,
) -> Result<(), String> {
    loop {
        let mut cache = net.layers.new_autoregressive_cache();
        let mut tokens = Tensor::<B, 3>::random(
            [size.batch, 1, size.width],
            Distribution::Normal(0.0, 1.0),
            device,
        );
        for step in 1..=size.seq {
            let mask = generate_autoregressive_mask::<B>(size.batch, step, device);
            let out = net.layers.forward_autoregressive_inference(
                TransformerEncoderInput::new(tokens.clone()).mask_attn(mask),
                &mut cache,
            );
            let next = out.slice([0..size.batch, step - 1..step, 0..size.width]);
            tokens = Tensor::cat(vec![tokens, next], 1);
        }
        let last = tokens.slice([0..size.batch, size.seq..size.seq + 1, 0..size.width]);
        let value = scalar(last.sum())?;
        if !value.is_finite() {
            return Err(format!("decoding produced {value}"));
        }
        if !tick() {
            return Ok(());
        }
    }
}

#[derive(Module, Debug)]
struct Mlp<B: Backend> {
    layers: Vec<Linear<B>>,
}

impl<B: Backend> Mlp<B> {
    fn new(size: Size, device: &B::Device) -> Mlp<B> {
        Mlp {
            layers: (0..size.depth.max(1))
                .map(|_| LinearConfig::new(size.width, size.width).init(device))
                .collect(),
        }
    }

    fn run(&self, mut x: Tensor<B, 2>) -> Tensor<B, 2> {
        let last = self.layers.len() - 1;
        for (i, layer) in self.layers.iter().enumerate() {
            x = layer.forward(x);
            if i < last {
                x = relu(x);
            }
        }
        x
    }
}

impl<B: AutodiffBackend> Net<B, 2> for Mlp<B> {
    fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        self.run(x)
    }
    fn forward_inner(
        inner: &Mlp<B::InnerBackend>,
        x: Tensor<B::InnerBackend, 2>,
    ) -> Tensor<B::InnerBackend, 2> {
        inner.run(x)
    }
}

#[derive(Module, Debug)]
struct ConvNet<B: Backend> {
    convs: Vec<Conv2d<B>>,
    head: Linear<B>,
}

impl<B: Backend> ConvNet<B> {
    fn new(size: Size, device: &B::Device) -> ConvNet<B> {
        let mut convs = Vec::new();
        let mut channels = 3;
        for _ in 0..size.depth.max(1) {
            convs.push(
                Conv2dConfig::new([channels, size.width], [3, 3])
                    .with_padding(PaddingConfig2d::Same)
                    .init(device),
            );
            channels = size.width;
        }
        ConvNet {
            convs,
            head: LinearConfig::new(size.width, 10).init(device),
        }
    }

    fn run(&self, mut x: Tensor<B, 4>) -> Tensor<B, 2> {
        for conv in &self.convs {
            x = relu(conv.forward(x));
        }
        let [batch, channels, _, _] = x.dims();
        let pooled: Tensor<B, 2> = x.mean_dim(3).mean_dim(2).reshape([batch, channels]);
        self.head.forward(pooled)
    }
}

impl<B: AutodiffBackend> Net<B, 4> for ConvNet<B> {
    fn forward(&self, x: Tensor<B, 4>) -> Tensor<B, 2> {
        self.run(x)
    }
    fn forward_inner(
        inner: &ConvNet<B::InnerBackend>,
        x: Tensor<B::InnerBackend, 4>,
    ) -> Tensor<B::InnerBackend, 2> {
        inner.run(x)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_runs_a_few_iterations_on_the_cpu() {
        let size = Size {
            batch: 2,
            width: 8,
            depth: 2,
            seq: 4,
            precision: Precision::Fp32,
        };
        for builtin in Builtin::ALL {
            for kind in JobKind::ALL {
                let mut n = 0;
                run(builtin, kind, size, Device::Cpu, &mut || {
                    n += 1;
                    n < 3
                })
                .unwrap_or_else(|e| panic!("{builtin} {kind}: {e}"));
                assert_eq!(n, 3, "{builtin} {kind}");
            }
        }
    }

    #[test]
    fn half_precision_on_the_cpu_is_refused_naming_it() {
        let size = Size {
            batch: 2,
            width: 8,
            depth: 1,
            seq: 4,
            precision: Precision::Bf16,
        };
        let e = run(Builtin::Mlp, JobKind::Train, size, Device::Cpu, &mut || {
            false
        })
        .expect_err("bf16 on the cpu");
        assert!(
            e.contains("precision bf16") && e.contains("--device cuda"),
            "{e}"
        );
    }

    #[test]
    fn half_precision_results_are_read_so_nan_is_seen() {
        use burn::tensor::{bf16, f16};
        let half = |x: f32| TensorData::new(vec![f16::from_f32(x)], [1]);
        assert_eq!(first_value(half(1.5)), Ok(1.5));
        assert!(first_value(half(f32::NAN)).is_ok_and(f32::is_nan));
        assert!(first_value(half(f32::INFINITY)).is_ok_and(|v| v.is_infinite()));
        let brain = |x: f32| TensorData::new(vec![bf16::from_f32(x)], [1]);
        assert_eq!(first_value(brain(-2.0)), Ok(-2.0));
        assert!(first_value(brain(f32::NAN)).is_ok_and(f32::is_nan));
        assert_eq!(
            first_value(TensorData::new(vec![0.25f32, 9.0], [2])),
            Ok(0.25)
        );
        assert!(first_value(TensorData::new(Vec::<f32>::new(), [0])).is_err());
    }

    #[test]
    fn devices_parse() {
        assert_eq!("cpu".parse(), Ok(Device::Cpu));
        assert_eq!("cuda:1".parse(), Ok(Device::Cuda(1)));
        assert!("tpu".parse::<Device>().is_err());
    }
}
