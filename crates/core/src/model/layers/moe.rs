//! The sparse MoE block with a shared expert (Qwen3-Next / Qwen3.5-MoE): softmax router over all
//! experts, top-k (renormalised when `norm_topk_prob`), stacked SwiGLU experts applied through
//! `gather_qmm` / `gather_mm`, plus a sigmoid-gated shared expert.

use anyhow::Result;
use mlx_rs::Array;

use super::compiled;
use super::linear::{Linear, fuse_outputs};
use super::moe_graph::{self, Block, Plan, Proj, RowIndices, Stacking};
use crate::model::config::{QuantSpec, Qwen35Config};
use crate::model::cuda::moe_experts::{self, ExpertWeights};
use crate::model::cuda::moe_router;
use crate::model::formats::weights::Weights;
use crate::model::routes::Stack;
use crate::model::storage::Storage;

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

/// Projections that read the same input, stacked at load into one product
/// ([`super::linear::stacked_enabled`]): the folded part's slot holds `None`.
pub struct SparseMoe {
    /// The router, or [router | shared expert gate] when `stacking.router_gate`.
    router: Linear,
    shared_expert_gate: Option<Linear>,
    /// The experts' gate projection, or [gate | up] when `stacking.gate_up`.
    gate_proj: Experts,
    up_proj: Option<Experts>,
    down_proj: Experts,
    /// The shared expert's gate projection, or [gate | up] when `stacking.shared_gate_up`.
    shared_gate: Linear,
    shared_up: Option<Linear>,
    shared_down: Linear,
    stacking: Stacking,
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
        let (h, e, i, si) =
            (cfg.hidden_size, cfg.num_experts, cfg.moe_intermediate_size, cfg.shared_expert_intermediate_size);
        let q = |name: &str| quant(&format!("{prefix}.{name}"));
        let lin = |w: &mut Weights, name: &str, input, output| {
            Linear::load(w, &format!("{prefix}.{name}"), input, output, q(name))
        };
        let routes = crate::model::routes::current();
        let stack = |w: &mut Weights, kind: Stack, at: &str, parts: &[&str], fused: &str| -> Result<bool> {
            Ok(routes.stacks(kind) && fuse_outputs(w, &format!("{prefix}{at}"), parts, fused, h, quant)?)
        };
        let stacking = Stacking {
            router_gate: stack(w, Stack::Router, "", &["gate", "shared_expert_gate"], "router_stacked")?,
            gate_up: stack(w, Stack::Experts, ".switch_mlp", &["gate_proj", "up_proj"], "gate_up_stacked")?,
            shared_gate_up: stack(w, Stack::Shared, ".shared_expert", &["gate_proj", "up_proj"], "gate_up_stacked")?,
        };
        let experts = |w: &mut Weights, name: &str, input, output, spec| {
            Experts::load(w, &format!("{prefix}.switch_mlp.{name}"), e, input, output, spec)
        };
        let (router, shared_expert_gate) = if stacking.router_gate {
            (Linear::load(w, &format!("{prefix}.router_stacked"), h, e + 1, None)?, None)
        } else {
            (lin(w, "gate", h, e)?, Some(lin(w, "shared_expert_gate", h, 1)?))
        };
        let (gate_proj, up_proj) = if stacking.gate_up {
            (experts(w, "gate_up_stacked", h, 2 * i, None)?, None)
        } else {
            let gate = experts(w, "gate_proj", h, i, q("switch_mlp.gate_proj"))?;
            (gate, Some(experts(w, "up_proj", h, i, q("switch_mlp.up_proj"))?))
        };
        let (shared_gate, shared_up) = if stacking.shared_gate_up {
            (Linear::load(w, &format!("{prefix}.shared_expert.gate_up_stacked"), h, 2 * si, None)?, None)
        } else {
            (lin(w, "shared_expert.gate_proj", h, si)?, Some(lin(w, "shared_expert.up_proj", h, si)?))
        };
        Ok(Self {
            router,
            shared_expert_gate,
            gate_proj,
            up_proj,
            down_proj: experts(w, "down_proj", i, h, q("switch_mlp.down_proj"))?,
            shared_gate,
            shared_up,
            shared_down: lin(w, "shared_expert.down_proj", si, h)?,
            stacking,
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
                let fused = self.expert_weights();
                let linear = |p: Proj, x: &Array| match self.linear(p) {
                    Some(l) => l.forward(x),
                    None => anyhow::bail!("the MoE block's {p:?} projection is folded into a stacked one"),
                };
                let experts = |p: Proj, x: &Array, rows: Option<&Array>, idx: &Array| match self.experts(p) {
                    Some(ex) => ex.apply(x, rows, idx),
                    None => anyhow::bail!("the MoE block's {p:?} experts are folded into the stacked gate"),
                };
                let block = Block {
                    top_k: self.top_k,
                    norm_topk_prob: self.norm_topk_prob,
                    stacking: self.stacking,
                    router_kernel: moe_router::enabled(),
                    experts_kernel: fused.as_ref(),
                };
                moe_graph::block(&flat, rows.as_ref(), &block, &linear, &experts)?
            }
        };
        Ok(out.reshape(&shape)?)
    }

    /// A dense projection's layer; `None` for one folded into a stacked product.
    fn linear(&self, p: Proj) -> Option<&Linear> {
        match p {
            Proj::Router => Some(&self.router),
            Proj::SharedExpertGate => self.shared_expert_gate.as_ref(),
            Proj::SharedGate => Some(&self.shared_gate),
            Proj::SharedUp => self.shared_up.as_ref(),
            Proj::SharedDown => Some(&self.shared_down),
            Proj::Gate | Proj::Up | Proj::Down => None,
        }
    }

    /// A stacked expert projection; `None` for one folded into the stacked gate.
    fn experts(&self, p: Proj) -> Option<&Experts> {
        match p {
            Proj::Gate => Some(&self.gate_proj),
            Proj::Up => self.up_proj.as_ref(),
            Proj::Down => Some(&self.down_proj),
            _ => None,
        }
    }

    /// The compiled block's plan and weights, when every projection is plain MLX storage (not
    /// the CPU kernel's); `held_rows`: the gather rows come in as inputs.
    fn graph(&self, held_rows: bool) -> Option<(Plan, Vec<Array>)> {
        let parts = Proj::ALL.map(|p| self.part(p));
        let mut storage = [Storage::Folded; 8];
        let mut weights = Vec::new();
        for (i, part) in parts.into_iter().enumerate() {
            let (s, w) = part?;
            storage[i] = s;
            weights.extend(w);
        }
        let plan = Plan {
            storage,
            top_k: self.top_k,
            norm_topk_prob: self.norm_topk_prob,
            held_rows,
            router_kernel: moe_router::enabled(),
            experts_kernel: self.expert_weights().is_some(),
        };
        Some((plan, weights))
    }

    /// The expert kernels' weights, when the kernels are on and this block's layout fits them.
    fn expert_weights(&self) -> Option<ExpertWeights> {
        if !moe_experts::enabled() {
            return None;
        }
        let (gate, down) = (self.part(Proj::Gate)?, self.part(Proj::Down)?);
        let (shared_gate, shared_down) = (self.part(Proj::SharedGate)?, self.part(Proj::SharedDown)?);
        moe_graph::expert_weights(self.stacking, |p| {
            let (storage, arrays) = match p {
                Proj::Gate => &gate,
                Proj::Down => &down,
                Proj::SharedGate => &shared_gate,
                _ => &shared_down,
            };
            (arrays.as_slice(), *storage)
        })
    }

    /// One projection's storage and arrays as the compiled block takes them (a folded one has
    /// none); `None` for the CPU kernel's storage, which only the plain route reads.
    fn part(&self, p: Proj) -> Option<(Storage, Vec<Array>)> {
        match (self.linear(p), self.experts(p)) {
            (Some(l), _) => l.graph_inputs(),
            (None, Some(ex)) => Some(ex.graph_inputs()),
            (None, None) => Some((Storage::Folded, Vec::new())),
        }
    }

    pub fn nbytes(&self) -> usize {
        let linears = Proj::ALL.iter().filter_map(|&p| self.linear(p)).map(Linear::nbytes);
        let experts = Proj::ALL.iter().filter_map(|&p| self.experts(p)).map(Experts::nbytes);
        linears.sum::<usize>() + experts.sum::<usize>()
    }
}
