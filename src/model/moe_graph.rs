//! The MoE block's arithmetic, written once for the plain route and the compiled graph
//! (`compiled.rs` says why and when a block runs compiled). In its first measured H200 run at the
//! real geometry the compiled block took the B1 step from ~30 to ~18-24 ms and the B8 verify from
//! ~43 to ~33 ms (docs/benchmarks.md). On MLX's CPU backend compile JIT-builds C++ at run time;
//! the tests run it there against mlx-lm's outputs.

use anyhow::Result;
use mlx_rs::Array;

use super::compiled::{self, GraphKey, Storage, Switch, offsets, project};

/// Everything about a block that is not an array: the storage of its projections in input order
/// (router, experts gate/up/down, shared expert gate/up/down, shared expert gate), top-k.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Plan {
    pub storage: [Storage; 8],
    pub top_k: i32,
    pub norm_topk_prob: bool,
}

/// The projections of a block in [`Plan::storage`] order.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Proj {
    Router = 0,
    Gate = 1,
    Up = 2,
    Down = 3,
    SharedGate = 4,
    SharedUp = 5,
    SharedDown = 6,
    SharedExpertGate = 7,
}

/// The block's arithmetic, written once for both routes: `linear` applies a dense projection,
/// `experts` a stacked one ([N, 1, 1, in] rows, [N, k] expert ids -> [N, k, 1, out]),
/// `shared` the shared expert. x is [N, H].
pub fn block(
    x: &Array,
    top_k: i32,
    norm_topk_prob: bool,
    linear: &dyn Fn(Proj, &Array) -> Result<Array>,
    experts: &dyn Fn(Proj, &Array, &Array) -> Result<Array>,
    shared: &dyn Fn(&Array) -> Result<Array>,
) -> Result<Array> {
    let gates = mlx_rs::ops::softmax_axis(linear(Proj::Router, x)?, -1, true)?;
    let e = gates.shape()[1];
    let part = mlx_rs::ops::argpartition_axis(&gates, e - top_k, -1)?;
    let indices = super::ops::slice_axis(&part, 1, e - top_k, e)?;
    let mut scores = gates.take_along_axis(&indices, -1)?;
    if norm_topk_prob {
        scores = scores.divide(scores.sum_axis(-1, true)?)?;
    }
    let xe = x.expand_dims_axes(&[-2, -3])?;
    let act = mlx_rs::nn::silu(experts(Proj::Gate, &xe, &indices)?)?.multiply(experts(Proj::Up, &xe, &indices)?)?;
    let y = experts(Proj::Down, &act, &indices)?.squeeze_axes(&[-2])?;
    let routed = y.multiply(scores.expand_dims(-1)?.as_dtype(y.dtype())?)?.sum_axis(-2, None)?;
    let shared_gate = mlx_rs::ops::sigmoid(linear(Proj::SharedExpertGate, x)?)?;
    Ok(routed.add(shared(x)?.multiply(shared_gate)?)?)
}

/// A stacked expert projection given as its input arrays.
pub fn experts_op(x: &Array, indices: &Array, w: &[Array], s: Storage) -> Result<Array> {
    Ok(match s {
        Storage::Dense => mlx_rs::ops::gather_mm(x, w[0].swap_axes(-1, -2)?, None, indices, false)?,
        Storage::Quantized(q) => {
            mlx_rs::ops::gather_qmm(x, &w[0], &w[1], &w[2], None, indices, true, q.group_size, q.bits, false)?
        }
    })
}

/// The block from its inputs `[x, weights in plan order...]`, as the compiled function traces it.
pub(super) fn block_from_inputs(inputs: &[Array], plan: &Plan) -> Result<Array> {
    let (at, next) = offsets(&plan.storage, 1);
    anyhow::ensure!(inputs.len() == next, "the MoE graph takes {next} inputs, got {}", inputs.len());
    let w = |p: Proj| &inputs[at[p as usize]..at[p as usize] + plan.storage[p as usize].inputs()];
    let st = |p: Proj| plan.storage[p as usize];
    let linear = |p: Proj, x: &Array| project(x, w(p), st(p));
    let experts = |p: Proj, x: &Array, idx: &Array| experts_op(x, idx, w(p), st(p));
    let shared = |x: &Array| {
        let h = mlx_rs::nn::silu(linear(Proj::SharedGate, x)?)?.multiply(linear(Proj::SharedUp, x)?)?;
        linear(Proj::SharedDown, &h)
    };
    block(&inputs[0], plan.top_k, plan.norm_topk_prob, &linear, &experts, &shared)
}

/// Run the compiled block for `plan` on `inputs` (`[x [N, H], weights in plan order...]`).
pub fn run(plan: &Plan, inputs: &[Array]) -> Result<Array> {
    let mut out = compiled::run(GraphKey::Moe(*plan), inputs)?;
    out.pop().ok_or_else(|| anyhow::anyhow!("the compiled MoE block returned nothing"))
}

static SWITCH: Switch = Switch::new("COHORT_COMPILE_MOE");

/// Force the compiled block on or off (`None`: back to the default); benchmarks and tests.
pub fn set_enabled(on: Option<bool>) {
    SWITCH.set(on);
}

pub fn enabled() -> bool {
    SWITCH.enabled()
}
