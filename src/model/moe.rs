//! The sparse MoE block with a shared expert (Qwen3-Next / Qwen3.5-MoE): softmax router over all
//! experts, top-k (renormalised when `norm_topk_prob`), stacked SwiGLU experts applied through
//! `gather_qmm` / `gather_mm`, plus a sigmoid-gated shared expert.

use anyhow::Result;
use mlx_rs::Array;

use super::compiled::{self, Storage};
use super::config::{QuantSpec, Qwen35Config};
use super::linear::Linear;
use super::mlp::Mlp;
use super::moe_graph::{self, Plan, Proj, RowIndices};
use super::weights::Weights;

/// One stacked projection of every expert: [E, out, in] (packed when quantized), held as the
/// compiled block takes it (`arrays` in [`Storage`]'s order), so both routes read it in place.
struct Experts {
    storage: Storage,
    arrays: Vec<Array>,
}

impl Experts {
    fn load(w: &mut Weights, prefix: &str, e: i32, input: i32, output: i32, spec: Option<QuantSpec>) -> Result<Self> {
        let wname = format!("{prefix}.weight");
        let dense = |weight| Experts { storage: Storage::Dense, arrays: vec![weight] };
        if w.contains(&format!("{prefix}.scales")) {
            let spec = super::linear::stored_spec(w, prefix, input, spec)?;
            let weight = w.take_shaped(&wname, &[e, output, input * spec.bits / 32])?;
            let g = input / spec.group_size;
            let scales = w.take_shaped(&format!("{prefix}.scales"), &[e, output, g])?;
            let biases = w.take_shaped(&format!("{prefix}.biases"), &[e, output, g])?;
            if let Some(d) = super::linear::maybe_dequantize(&weight, &scales, &biases, spec)? {
                return Ok(dense(d));
            }
            Ok(Experts { storage: Storage::Quantized(spec), arrays: vec![weight, scales, biases] })
        } else {
            Ok(dense(w.take_shaped(&wname, &[e, output, input])?))
        }
    }

    /// x [N, 1, 1, in] or [N, k, 1, in], rows and indices [N, k] -> [N, k, 1, out]
    fn apply(&self, x: &Array, rows: Option<&Array>, indices: &Array) -> Result<Array> {
        moe_graph::experts_op(x, rows, indices, &self.arrays, self.storage)
    }

    fn graph_inputs(&self) -> (Storage, Vec<Array>) {
        (self.storage, self.arrays.clone())
    }

    fn nbytes(&self) -> usize {
        self.arrays.iter().map(Array::nbytes).sum()
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
        let flat = x.reshape(&[-1, shape[2]])?;
        let serves = compiled::serves(moe_graph::enabled(), flat.shape()[0]);
        let rows = RowIndices::for_block(flat.shape()[0], self.top_k);
        let out = match serves.then(|| self.graph(rows.is_some())).flatten() {
            Some((plan, weights)) => {
                let mut inputs = Vec::with_capacity(weights.len() + 3);
                inputs.push(flat);
                inputs.extend(rows.into_iter().flat_map(|r| [r.by_token, r.by_pair]));
                inputs.extend(weights);
                moe_graph::run(&plan, &inputs)?
            }
            None => {
                let linear = |p: Proj, x: &Array| match p {
                    Proj::Router => self.router.forward(x),
                    _ => self.shared_expert_gate.forward(x),
                };
                let experts = |p: Proj, x: &Array, rows: Option<&Array>, idx: &Array| match p {
                    Proj::Gate => self.gate_proj.apply(x, rows, idx),
                    Proj::Up => self.up_proj.apply(x, rows, idx),
                    _ => self.down_proj.apply(x, rows, idx),
                };
                let shared = |x: &Array| self.shared_expert.forward(x);
                moe_graph::block(&flat, rows.as_ref(), self.top_k, self.norm_topk_prob, &linear, &experts, &shared)?
            }
        };
        Ok(out.reshape(&shape)?)
    }

    /// The compiled block's plan and weights, when every projection is plain MLX storage (not
    /// the CPU kernel's); `held_rows`: the gather rows come in as inputs.
    fn graph(&self, held_rows: bool) -> Option<(Plan, Vec<Array>)> {
        let lin = Linear::graph_inputs;
        let parts = [
            lin(&self.router)?,
            self.gate_proj.graph_inputs(),
            self.up_proj.graph_inputs(),
            self.down_proj.graph_inputs(),
            lin(&self.shared_expert.gate_proj)?,
            lin(&self.shared_expert.up_proj)?,
            lin(&self.shared_expert.down_proj)?,
            lin(&self.shared_expert_gate)?,
        ];
        let storage = parts.each_ref().map(|(s, _)| *s);
        let weights = parts.into_iter().flat_map(|(_, w)| w).collect();
        let plan = Plan { storage, top_k: self.top_k, norm_topk_prob: self.norm_topk_prob, held_rows };
        Some((plan, weights))
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
