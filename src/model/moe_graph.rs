//! The MoE block as one compiled MLX graph (issue 9). On the GPU a block is ~20 small ops a
//! layer a step, each a launch and a node built through the C API; MLX's `compile` traces the
//! block once per input shape, fuses its elementwise tail (softmax, SwiGLU, the score-weighted
//! sum, the shared expert's sigmoid gate) and replays the graph. mlx-rs warns that a compiled
//! closure capturing arrays is undefined behaviour, so every weight is an input and the closure
//! holds only the block's [`Plan`]; one compiled function serves every layer with the same plan.
//!
//! Off by default until it is measured where it is meant to pay (`COHORT_COMPILE_MOE=1` turns it
//! on, `cohort bench-step --moe compiled,ops` compares it): in its first H200 run (8 layers of the
//! real geometry) the compiled arm did not finish inside 160 s, for a reason not yet known (a
//! trace or CUDA JIT compilation per shape is the first guess), so there is no figure yet. On
//! MLX's CPU backend compile JIT-builds C++ at run time; the tests run it there against mlx-lm's
//! outputs.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, Ordering};

use anyhow::Result;
use mlx_rs::Array;
use mlx_rs::error::Exception;

use super::config::QuantSpec;

/// Blocks of at most this many rows take the compiled graph: steps, drafts and verifies, where
/// per-op overhead is the cost. Prefill chunks keep the plain ops: a trace per input shape
/// would mean one for every prompt's last chunk length.
pub const MAX_ROWS: i32 = 64;

/// How one projection's weight is stored, which decides its op and how many inputs it takes.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Storage {
    /// [w]: a float weight.
    Dense,
    /// [w, scales, biases]: packed affine quantization.
    Quantized(QuantSpec),
}

impl Storage {
    fn inputs(self) -> usize {
        match self {
            Storage::Dense => 1,
            Storage::Quantized(_) => 3,
        }
    }
}

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

/// `x W^T` for a projection given as its input arrays.
fn dense_op(x: &Array, w: &[Array], s: Storage) -> Result<Array> {
    Ok(match s {
        Storage::Dense => mlx_rs::ops::matmul(x, w[0].t())?,
        Storage::Quantized(q) => mlx_rs::ops::quantized_matmul(x, &w[0], &w[1], &w[2], true, q.group_size, q.bits)?,
    })
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
fn block_from_inputs(inputs: &[Array], plan: &Plan) -> Result<Array> {
    let mut at = [0usize; 8];
    let mut next = 1;
    for (i, s) in plan.storage.iter().enumerate() {
        at[i] = next;
        next += s.inputs();
    }
    anyhow::ensure!(inputs.len() == next, "the MoE graph takes {next} inputs, got {}", inputs.len());
    let w = |p: Proj| &inputs[at[p as usize]..at[p as usize] + plan.storage[p as usize].inputs()];
    let st = |p: Proj| plan.storage[p as usize];
    let linear = |p: Proj, x: &Array| dense_op(x, w(p), st(p));
    let experts = |p: Proj, x: &Array, idx: &Array| experts_op(x, idx, w(p), st(p));
    let shared = |x: &Array| {
        let h = mlx_rs::nn::silu(linear(Proj::SharedGate, x)?)?.multiply(linear(Proj::SharedUp, x)?)?;
        linear(Proj::SharedDown, &h)
    };
    block(&inputs[0], plan.top_k, plan.norm_topk_prob, &linear, &experts, &shared)
}

type CompiledBlock = Box<dyn FnMut(&[Array]) -> std::result::Result<Vec<Array>, Exception>>;

thread_local! {
    /// mlx-rs's compiled functions are not `Send`: each thread that runs a model (the model
    /// owner; test threads) keeps its own, traced on its first call per input shape.
    static COMPILED: RefCell<HashMap<Plan, CompiledBlock>> = RefCell::new(HashMap::new());
}

/// Run the compiled block for `plan` on `inputs` (`[x [N, H], weights in plan order...]`).
pub fn run(plan: &Plan, inputs: &[Array]) -> Result<Array> {
    COMPILED.with_borrow_mut(|cache| {
        let f = cache.entry(*plan).or_insert_with(|| {
            let plan = *plan;
            let traced = move |inputs: &[Array]| -> std::result::Result<Vec<Array>, Exception> {
                block_from_inputs(inputs, &plan).map(|y| vec![y]).map_err(|e| Exception::custom(format!("{e:#}")))
            };
            Box::new(mlx_rs::transforms::compile::compile(traced, None))
        });
        let mut out = f(inputs)?;
        out.pop().ok_or_else(|| anyhow::anyhow!("the compiled MoE block returned nothing"))
    })
}

/// How many plans this thread has compiled a block for (diagnostics, tests).
pub fn compiled_here() -> usize {
    COMPILED.with_borrow(|c| c.len())
}

/// 0: decide from `COHORT_COMPILE_MOE`; 1: on; 2: off.
static SWITCH: AtomicU8 = AtomicU8::new(0);

/// Force the compiled block on or off (`None`: back to the default); benchmarks and tests.
pub fn set_enabled(on: Option<bool>) {
    SWITCH.store(
        match on {
            None => 0,
            Some(true) => 1,
            Some(false) => 2,
        },
        Ordering::Relaxed,
    );
}

pub fn enabled() -> bool {
    static DEFAULT: std::sync::LazyLock<bool> =
        std::sync::LazyLock::new(|| std::env::var("COHORT_COMPILE_MOE").is_ok_and(|v| v == "1"));
    match SWITCH.load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => *DEFAULT,
    }
}
