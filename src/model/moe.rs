//! The sparse MoE block with a shared expert (Qwen3-Next / Qwen3.5-MoE): softmax router over all
//! experts, top-k (renormalised when `norm_topk_prob`), stacked SwiGLU experts applied through
//! `gather_qmm` / `gather_mm`, plus a sigmoid-gated shared expert.

use anyhow::Result;
use mlx_rs::Array;

use super::config::{QuantSpec, Qwen35Config};
use super::linear::Linear;
use super::mlp::Mlp;
use super::weights::Weights;

/// One stacked projection of every expert: [E, out, in] (packed when quantized).
enum Experts {
    Dense(Array),
    Quantized { weight: Array, scales: Array, biases: Array, spec: QuantSpec },
}

impl Experts {
    fn load(w: &mut Weights, prefix: &str, e: i32, input: i32, output: i32, spec: Option<QuantSpec>) -> Result<Self> {
        let wname = format!("{prefix}.weight");
        if w.contains(&format!("{prefix}.scales")) {
            let spec = super::linear::stored_spec(w, prefix, input, spec)?;
            let weight = w.take_shaped(&wname, &[e, output, input * spec.bits / 32])?;
            let g = input / spec.group_size;
            let scales = w.take_shaped(&format!("{prefix}.scales"), &[e, output, g])?;
            let biases = w.take_shaped(&format!("{prefix}.biases"), &[e, output, g])?;
            if let Some(dense) = super::linear::maybe_dequantize(&weight, &scales, &biases, spec)? {
                return Ok(Experts::Dense(dense));
            }
            Ok(Experts::Quantized { weight, scales, biases, spec })
        } else {
            Ok(Experts::Dense(w.take_shaped(&wname, &[e, output, input])?))
        }
    }

    /// x [N, 1, 1, in], indices [N, k] -> [N, k, 1, out]
    fn apply(&self, x: &Array, indices: &Array) -> Result<Array> {
        Ok(match self {
            Experts::Dense(weight) => mlx_rs::ops::gather_mm(x, weight.swap_axes(-1, -2)?, None, indices, false)?,
            Experts::Quantized { weight, scales, biases, spec } => mlx_rs::ops::gather_qmm(
                x,
                weight,
                scales,
                biases,
                None,
                indices,
                true,
                spec.group_size,
                spec.bits,
                false,
            )?,
        })
    }

    fn nbytes(&self) -> usize {
        match self {
            Experts::Dense(w) => w.nbytes(),
            Experts::Quantized { weight, scales, biases, .. } => weight.nbytes() + scales.nbytes() + biases.nbytes(),
        }
    }
}

pub struct SparseMoe {
    router: Linear,
    gate_proj: Experts,
    up_proj: Experts,
    down_proj: Experts,
    shared_expert: Mlp,
    shared_expert_gate: Linear,
    top_k: i32,
    norm_topk_prob: bool,
}

impl SparseMoe {
    pub fn load(
        w: &mut Weights,
        prefix: &str,
        cfg: &Qwen35Config,
        quant: &dyn Fn(&str) -> Option<QuantSpec>,
    ) -> Result<Self> {
        let (h, e, i) = (cfg.hidden_size, cfg.num_experts, cfg.moe_intermediate_size);
        let q = |name: &str| quant(&format!("{prefix}.{name}"));
        Ok(Self {
            router: Linear::load(w, &format!("{prefix}.gate"), h, e, q("gate"))?,
            gate_proj: Experts::load(w, &format!("{prefix}.switch_mlp.gate_proj"), e, h, i, q("switch_mlp.gate_proj"))?,
            up_proj: Experts::load(w, &format!("{prefix}.switch_mlp.up_proj"), e, h, i, q("switch_mlp.up_proj"))?,
            down_proj: Experts::load(w, &format!("{prefix}.switch_mlp.down_proj"), e, i, h, q("switch_mlp.down_proj"))?,
            shared_expert: Mlp::load(
                w,
                &format!("{prefix}.shared_expert"),
                h,
                cfg.shared_expert_intermediate_size,
                quant,
            )?,
            shared_expert_gate: Linear::load(
                w,
                &format!("{prefix}.shared_expert_gate"),
                h,
                1,
                q("shared_expert_gate"),
            )?,
            top_k: cfg.num_experts_per_tok,
            norm_topk_prob: cfg.norm_topk_prob,
        })
    }

    /// x [B, T, H]
    pub fn forward(&self, x: &Array) -> Result<Array> {
        let shape = x.shape().to_vec();
        let h = shape[2];
        let flat = x.reshape(&[-1, h])?;
        let gates = mlx_rs::ops::softmax_axis(self.router.forward(&flat)?, -1, true)?;
        let k = self.top_k;
        let e = gates.shape()[1];
        let part = mlx_rs::ops::argpartition_axis(&gates, e - k, -1)?;
        let indices = super::ops::slice_axis(&part, 1, e - k, e)?;
        let mut scores = gates.take_along_axis(&indices, -1)?;
        if self.norm_topk_prob {
            scores = scores.divide(scores.sum_axis(-1, true)?)?;
        }
        let xe = flat.expand_dims_axes(&[-2, -3])?; // [N, 1, 1, H]
        let act =
            mlx_rs::nn::silu(self.gate_proj.apply(&xe, &indices)?)?.multiply(self.up_proj.apply(&xe, &indices)?)?;
        let y = self.down_proj.apply(&act, &indices)?.squeeze_axes(&[-2])?; // [N, k, H]
        let routed = y.multiply(scores.expand_dims(-1)?.as_dtype(y.dtype())?)?.sum_axis(-2, None)?;
        let shared = self.shared_expert.forward(&flat)?;
        let shared_gate = mlx_rs::ops::sigmoid(self.shared_expert_gate.forward(&flat)?)?;
        let out = routed.add(shared.multiply(shared_gate)?)?;
        Ok(out.reshape(&shape)?)
    }

    pub fn nbytes(&self) -> usize {
        self.router.nbytes()
            + self.gate_proj.nbytes()
            + self.up_proj.nbytes()
            + self.down_proj.nbytes()
            + self.shared_expert.nbytes()
            + self.shared_expert_gate.nbytes()
    }
}
