//! The MoE block's arithmetic, written once for the plain route and the compiled graph
//! (`compiled.rs` says why and when a block runs compiled). In its first measured H200 run at the
//! real geometry the compiled block took the B1 step from ~30 to ~18-24 ms and the B8 verify from
//! ~43 to ~33 ms (docs/benchmarks.md). On MLX's CPU backend compile JIT-builds C++ at run time;
//! the tests run it there against mlx-lm's outputs.

use std::cell::RefCell;
use std::collections::HashMap;

use anyhow::Result;
use mlx_rs::Array;

use super::compiled::{self, Traced, offsets, project};
use super::linear::split_widths;
use crate::model::cuda::moe_experts::ExpertWeights;
use crate::model::storage::Storage;

/// Everything about a block that is not an array: the storage of its projections in input order
/// (router, experts gate/up/down, shared expert gate/up/down, shared expert gate), top-k.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Plan {
    pub storage: [Storage; 8],
    pub top_k: i32,
    pub norm_topk_prob: bool,
    /// The gather rows come in as inputs ([`RowIndices`]), else `gather_qmm` builds its own.
    pub held_rows: bool,
    /// The router's softmax and top-k as one CUDA kernel ([`crate::model::cuda::moe_router`]).
    pub router_kernel: bool,
    /// Everything after routing in two CUDA kernels ([`crate::model::cuda::moe_experts`]); set only where
    /// the experts' and the shared expert's gate/up are stacked and all four are quantized alike.
    pub experts_kernel: bool,
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

impl Proj {
    pub const ALL: [Proj; 8] = [
        Proj::Router,
        Proj::Gate,
        Proj::Up,
        Proj::Down,
        Proj::SharedGate,
        Proj::SharedUp,
        Proj::SharedDown,
        Proj::SharedExpertGate,
    ];
}

/// Which projections that read the same input were stacked into one product at load
/// ([`super::linear::fuse_outputs`]); the folded one's slot is [`Storage::Folded`].
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct Stacking {
    /// [router | shared expert gate]: one product of E + 1 outputs.
    pub router_gate: bool,
    /// The experts' [gate | up]: one gather of 2I outputs.
    pub gate_up: bool,
    /// The shared expert's [gate | up].
    pub shared_gate_up: bool,
}

impl Stacking {
    /// As a compiled plan's storage records it.
    pub fn of(storage: &[Storage; 8]) -> Self {
        let folded = |p: Proj| storage[p as usize] == Storage::Folded;
        Stacking {
            router_gate: folded(Proj::SharedExpertGate),
            gate_up: folded(Proj::Up),
            shared_gate_up: folded(Proj::SharedUp),
        }
    }
}

/// What the block's arithmetic needs besides its projections.
#[derive(Clone, Copy)]
pub struct Block<'a> {
    pub top_k: i32,
    pub norm_topk_prob: bool,
    pub stacking: Stacking,
    /// Softmax, top-k and renormalisation in one CUDA kernel ([`crate::model::cuda::moe_router`]).
    pub router_kernel: bool,
    /// The experts after routing in two CUDA kernels, over these weights
    /// ([`crate::model::cuda::moe_experts`]); blocks of more tokens than a launch takes keep the ops route.
    pub experts_kernel: Option<&'a ExpertWeights>,
}

/// Which activation row each (token, expert) pair of a block of N tokens with k experts each
/// reads, [N, k] uint32: `by_token` for the gate and up projections (row n of [N, 1, 1, H]),
/// `by_pair` for the down projection (row n * k + j of [N, k, 1, I]). These are the rows
/// `gather_qmm` assumes when given none, but given none it builds them in every call: an arange
/// node and a broadcast, 120 and more nodes a step at the real geometry, each costing host time
/// on MLX's CUDA backend (docs/benchmarks.md). Made once per block size and held evaluated, for
/// step-sized blocks only ([`RowIndices::for_block`]): a prefill chunk's few nodes do not matter,
/// and prompts of every length would leave a pair of arrays each behind.
#[derive(Clone)]
pub struct RowIndices {
    pub by_token: Array,
    pub by_pair: Array,
}

thread_local! {
    static ROW_INDICES: RefCell<HashMap<(i32, i32), RowIndices>> = RefCell::new(HashMap::new());
}

/// Hand `gather_qmm` held rows unless the routes ask it to build its own (a benchmark times both).
fn held_rows() -> bool {
    !crate::model::routes::current().moe_built_rows
}

impl RowIndices {
    /// The held rows for a block of `n` tokens with `k` experts each; `None` for blocks larger
    /// than a step ([`super::compiled::MAX_ROWS`]) and while [`set_built_rows`] is on.
    pub fn for_block(n: i32, k: i32) -> Option<RowIndices> {
        if n > super::compiled::MAX_ROWS || !held_rows() {
            return None;
        }
        let make = || {
            let pairs = (0..n as u32).flat_map(|t| (0..k as u32).map(move |j| (t, t * k as u32 + j)));
            let (token, pair): (Vec<u32>, Vec<u32>) = pairs.unzip();
            RowIndices { by_token: Array::from_slice(&token, &[n, k]), by_pair: Array::from_slice(&pair, &[n, k]) }
        };
        Some(ROW_INDICES.with_borrow_mut(|cache| cache.entry((n, k)).or_insert_with(make).clone()))
    }
}

/// A stacked expert projection: (which, rows of x, the row each pair reads, expert ids).
pub type ExpertsFn<'a> = dyn Fn(Proj, &Array, Option<&Array>, &Array) -> Result<Array> + 'a;

/// The block's arithmetic, written once for both routes: `linear` applies a dense projection,
/// `experts` a stacked one ([N, 1, 1, in] or [N, k, 1, in] rows, the [N, k] row each pair
/// reads, [N, k] expert ids -> [N, k, 1, out]). x is [N, H].
pub fn block(
    x: &Array,
    rows: Option<&RowIndices>,
    spec: &Block,
    linear: &dyn Fn(Proj, &Array) -> Result<Array>,
    experts: &ExpertsFn,
) -> Result<Array> {
    let Block { top_k, norm_topk_prob, stacking, router_kernel, experts_kernel } = *spec;
    let product = linear(Proj::Router, x)?;
    // The shared expert gate's own product; stacked, its logit is the router product's last column.
    let (e, gate_product) = if stacking.router_gate {
        (product.shape()[1] - 1, None)
    } else {
        (product.shape()[1], Some(linear(Proj::SharedExpertGate, x)?))
    };
    let (indices, scores) = if router_kernel && x.shape()[0] <= crate::model::cuda::moe_router::MAX_TOKENS {
        // Reads the first E columns of the product in place, stacked or not.
        crate::model::cuda::moe_router::route(&product, e, top_k, norm_topk_prob)?
    } else {
        let logits =
            if stacking.router_gate { crate::model::ops::slice_axis(&product, 1, 0, e)? } else { product.clone() };
        let gates = mlx_rs::ops::softmax_axis(logits, -1, true)?;
        let part = mlx_rs::ops::argpartition_axis(&gates, e - top_k, -1)?;
        let indices = crate::model::ops::slice_axis(&part, 1, e - top_k, e)?;
        let mut scores = gates.take_along_axis(&indices, -1)?;
        if norm_topk_prob {
            scores = scores.divide(scores.sum_axis(-1, true)?)?;
        }
        (indices, scores)
    };
    if let Some(weights) = experts_kernel.filter(|_| crate::model::cuda::moe_experts::fits(x.shape()[0], top_k)) {
        // The kernel reads the logit as the last column in place (a split view would be copied
        // to be contiguous).
        return crate::model::cuda::moe_experts::apply(
            x,
            &indices,
            &scores,
            gate_product.as_ref().unwrap_or(&product),
            weights,
        );
    }
    let shared_logit = match gate_product {
        Some(g) => g,
        None => halves(split_widths(&product, &[e, 1])?, "router")?[1].clone(),
    };
    let xe = x.expand_dims_axes(&[-2, -3])?;
    // On MLX's CUDA backend the down projection given held per-pair rows came out wrong in
    // bf16 at the real geometry (device --check-kernels: relative error 0.56 against float64,
    // 3.0e-3 with the rows gather_qmm builds itself), so there it builds its own.
    let by_pair = rows.map(|r| &r.by_pair).filter(|_| !crate::platform::backend::Backend::is_cuda());
    let by_token = rows.map(|r| &r.by_token);
    let act = if stacking.gate_up {
        swiglu(experts(Proj::Gate, &xe, by_token, &indices)?, None)?
    } else {
        let up = experts(Proj::Up, &xe, by_token, &indices)?;
        swiglu(experts(Proj::Gate, &xe, by_token, &indices)?, Some(up))?
    };
    let y = experts(Proj::Down, &act, by_pair, &indices)?.squeeze_axes(&[-2])?;
    let routed = y.multiply(scores.expand_dims(-1)?.as_dtype(y.dtype())?)?.sum_axis(-2, None)?;
    let h = if stacking.shared_gate_up {
        swiglu(linear(Proj::SharedGate, x)?, None)?
    } else {
        swiglu(linear(Proj::SharedGate, x)?, Some(linear(Proj::SharedUp, x)?))?
    };
    let shared = linear(Proj::SharedDown, &h)?;
    Ok(routed.add(shared.multiply(mlx_rs::ops::sigmoid(shared_logit)?)?)?)
}

/// `silu(gate) * up`; without `up`, `gate` is the stacked product [gate | up] (halves of its last
/// axis).
fn swiglu(gate: Array, up: Option<Array>) -> Result<Array> {
    let (gate, up) = match up {
        Some(up) => (gate, up),
        None => {
            let width = gate.shape().last().copied().unwrap_or(0) / 2;
            halves(split_widths(&gate, &[width, width])?, "gate/up")?.into()
        }
    };
    Ok(mlx_rs::nn::silu(gate)?.multiply(up)?)
}

fn halves(parts: Vec<Array>, what: &str) -> Result<[Array; 2]> {
    <[Array; 2]>::try_from(parts).map_err(|_| anyhow::anyhow!("the stacked {what} product did not split in two"))
}

/// The expert kernels' weights from a block's projections (`part` gives each one's arrays and
/// storage); `None` unless both gate/up pairs are stacked and all four are quantized alike.
pub fn expert_weights<'a>(stacking: Stacking, part: impl Fn(Proj) -> (&'a [Array], Storage)) -> Option<ExpertWeights> {
    if !(stacking.gate_up && stacking.shared_gate_up) {
        return None;
    }
    ExpertWeights::of([Proj::Gate, Proj::Down, Proj::SharedGate, Proj::SharedDown].map(part))
}

/// A stacked expert projection given as its input arrays: `rows` says which row of x each
/// (token, expert) pair reads ([`RowIndices`]), `indices` which expert.
pub fn experts_op(x: &Array, rows: Option<&Array>, indices: &Array, w: &[Array], s: Storage) -> Result<Array> {
    Ok(match s {
        Storage::Dense => mlx_rs::ops::gather_mm(x, w[0].swap_axes(-1, -2)?, rows, indices, false)?,
        Storage::Quantized(q) => {
            mlx_rs::ops::gather_qmm(x, &w[0], &w[1], &w[2], rows, indices, true, q.group_size, q.bits, false)?
        }
        Storage::Folded | Storage::Padded(..) | Storage::WithDense(_) => {
            anyhow::bail!("expert projections are stored as loaded, never folded or laid out again ({s:?})")
        }
    })
}

/// The block from its inputs `[x, (rows by token, rows by pair when held), weights in plan
/// order...]`, as the compiled function traces it.
impl Traced for Plan {
    fn trace(&self, inputs: &[Array]) -> Result<Vec<Array>> {
        block_from_inputs(inputs, self).map(|y| vec![y])
    }
}

fn block_from_inputs(inputs: &[Array], plan: &Plan) -> Result<Array> {
    let (at, next) = offsets(&plan.storage, if plan.held_rows { 3 } else { 1 });
    anyhow::ensure!(inputs.len() == next, "the MoE graph takes {next} inputs, got {}", inputs.len());
    let w = |p: Proj| &inputs[at[p as usize]..at[p as usize] + plan.storage[p as usize].inputs()];
    let st = |p: Proj| plan.storage[p as usize];
    let linear = |p: Proj, x: &Array| project(x, w(p), st(p));
    let experts = |p: Proj, x: &Array, rows: Option<&Array>, idx: &Array| experts_op(x, rows, idx, w(p), st(p));
    let rows = plan.held_rows.then(|| RowIndices { by_token: inputs[1].clone(), by_pair: inputs[2].clone() });
    let stacking = Stacking::of(&plan.storage);
    let fused = if plan.experts_kernel { expert_weights(stacking, |p| (w(p), st(p))) } else { None };
    anyhow::ensure!(fused.is_some() == plan.experts_kernel, "the MoE plan's experts do not fit the expert kernels");
    let spec = Block {
        top_k: plan.top_k,
        norm_topk_prob: plan.norm_topk_prob,
        stacking,
        router_kernel: plan.router_kernel,
        experts_kernel: fused.as_ref(),
    };
    block(&inputs[0], rows.as_ref(), &spec, &linear, &experts)
}

/// Run the compiled block for `plan` on `inputs` (`[x [N, H], (rows by token, rows by pair when
/// held), weights in plan order...]`).
pub fn run(plan: &Plan, inputs: &[Array]) -> Result<Array> {
    let mut out = compiled::run(*plan, inputs)?;
    out.pop().ok_or_else(|| anyhow::anyhow!("the compiled MoE block returned nothing"))
}

/// The MoE block as a compiled graph (`Routes::compile_moe`).
pub fn enabled() -> bool {
    crate::model::routes::current().compile_moe
}
