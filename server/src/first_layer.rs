//! The first layer of the ensemble, split by what it reads.
//!
//! A pair's input is `[job a, job b, context]` and the first layer is linear, so its
//! pre-activation is `a·W_a + b·W_b + context·W_c + bias`. Each registered workload's two shares
//! (as job a and as job b) are computed once, when it is registered or the model loads; a pair
//! then costs three vector additions instead of the largest matrix product of the forward pass.
//! The engines run the rest of the network (`Engine::run_tail`).

use burn::backend::Flex;
use duet_trainer::model::Mlp;
use duet_trainer::onnx::tail_width;

/// Every member's first-layer weights side by side: row `r` (an input) holds member 0's `h`
/// outputs, then member 1's, and so on.
#[derive(Debug, Clone)]
pub struct FirstLayer {
    /// members x first hidden width.
    width: usize,
    job_width: usize,
    inputs: usize,
    weights: Vec<f32>,
    bias: Vec<f32>,
}

impl FirstLayer {
    /// `None` for networks without a hidden layer (nothing to split).
    pub fn new(nets: &[Mlp<Flex>], job_width: usize, inputs: usize) -> Option<FirstLayer> {
        let h = tail_width(nets)?;
        let width = h * nets.len();
        let mut weights = vec![0.0f32; inputs * width];
        let mut bias = vec![0.0f32; width];
        for (k, net) in nets.iter().enumerate() {
            let w: Vec<f32> = net.layers[0].weight.val().into_data().to_vec().ok()?;
            let b: Vec<f32> = net.layers[0].bias.val().into_data().to_vec().ok()?;
            if w.len() != inputs * h || b.len() != h {
                return None;
            }
            for r in 0..inputs {
                weights[r * width + k * h..r * width + (k + 1) * h]
                    .copy_from_slice(&w[r * h..(r + 1) * h]);
            }
            bias[k * h..(k + 1) * h].copy_from_slice(&b);
        }
        Some(FirstLayer {
            width,
            job_width,
            inputs,
            weights,
            bias,
        })
    }

    /// Length of a pre-activation row (all members).
    pub fn width(&self) -> usize {
        self.width
    }

    fn project(&self, x: &[f32], first_input: usize, out: &mut [f32]) {
        for (r, &v) in x.iter().enumerate() {
            if v != 0.0 {
                let row = &self.weights[(first_input + r) * self.width..][..self.width];
                out.iter_mut().zip(row).for_each(|(o, w)| *o += v * w);
            }
        }
    }

    /// An encoded job's share of the first layer when it is job a (`side` 0) or job b (1).
    pub fn job(&self, encoded: &[f32], side: usize) -> Vec<f32> {
        let mut out = vec![0.0; self.width];
        self.project(encoded, side * self.job_width, &mut out);
        out
    }

    /// An encoded context's share, with the bias.
    pub fn context(&self, encoded: &[f32]) -> Vec<f32> {
        let mut out = self.bias.clone();
        self.project(encoded, 2 * self.job_width, &mut out);
        out
    }

    /// The whole first layer of encoded pairs, for checking the split against the full input.
    pub fn full(&self, inputs: &[f32]) -> Vec<f32> {
        let mut out = Vec::with_capacity(inputs.len() / self.inputs * self.width);
        for row in inputs.chunks_exact(self.inputs) {
            let mut h = self.bias.clone();
            self.project(row, 0, &mut h);
            out.extend(h);
        }
        out
    }
}
