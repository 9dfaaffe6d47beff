//! Blocks run as compiled MLX graphs (issue 9): the MoE block (`moe_graph`) and the Gated
//! DeltaNet mixer (`gated_delta`). On the GPU a block is tens of small ops a layer a step, each a
//! node built through the C API and a launch; MLX's `compile` traces a block once per input
//! shape, fuses its elementwise chains and replays the graph. mlx-rs warns that a compiled closure
//! capturing arrays is undefined behaviour, so every weight is an input and the closure holds only
//! the block's plan (storage, sizes, switches); one compiled function serves every layer with the
//! same plan.
//!
//! On by default on the CUDA backend, where it was measured (docs/benchmarks.md); off on the CPU
//! (compile JIT-builds C++ there) and on Metal (not measured). `COHORT_COMPILE_MOE` and
//! `COHORT_COMPILE_GDN` (`1` on, `0` off) override each.

use std::cell::RefCell;
use std::collections::HashMap;

use anyhow::Result;
use mlx_rs::Array;
use mlx_rs::error::Exception;

use super::gated_delta::GdnPlan;
use super::moe_graph::Plan as MoePlan;
use crate::model::routes::Routes;
use crate::model::storage::Storage;

/// Blocks of at most this many rows (batch x positions) take a compiled graph: steps, drafts and
/// verifies, where per-op overhead is the cost. Prefill chunks keep the plain ops: a trace per
/// input shape would mean one for every prompt's last chunk length.
pub const MAX_ROWS: i32 = 64;

/// Whether a block of `rows` rows (batch x positions) takes its compiled graph: its switch is
/// on, it is a step-sized block, and rows are batched (the row-by-row route keeps each
/// projection per row). On the invariant route the graph is traced with the row-invariant
/// kernels in it, and kept apart from the batched route's. Checked before a block gathers its
/// weights, so the plain route pays nothing for the compiled one.
pub fn serves(switch_on: bool, rows: i32) -> bool {
    switch_on && rows <= MAX_ROWS && crate::model::routes::current().block != crate::model::routes::BlockRoute::RowByRow
}

/// `x W^T` for a projection given as its input arrays.
pub fn project(x: &Array, w: &[Array], s: Storage) -> Result<Array> {
    super::product::served(x, w, s)
}

/// Where each projection's arrays start in a flat input list that holds them in `storage` order
/// from `first` on; returns the starts and the list's expected length.
pub fn offsets<const N: usize>(storage: &[Storage; N], first: usize) -> ([usize; N], usize) {
    let mut at = [0usize; N];
    let mut next = first;
    for (i, s) in storage.iter().enumerate() {
        at[i] = next;
        next += s.inputs();
    }
    (at, next)
}

/// What a compiled graph is traced from: the block kind and its plan.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum GraphKey {
    Moe(MoePlan),
    Gdn(GdnPlan),
}

impl GraphKey {
    fn trace(&self, inputs: &[Array]) -> Result<Vec<Array>> {
        match self {
            GraphKey::Moe(plan) => super::moe_graph::block_from_inputs(inputs, plan).map(|y| vec![y]),
            GraphKey::Gdn(plan) => super::gated_delta::mix_from_inputs(inputs, plan),
        }
    }
}

type CompiledFn = Box<dyn FnMut(&[Array]) -> std::result::Result<Vec<Array>, Exception>>;

thread_local! {
    /// mlx-rs's compiled functions are not `Send`: each thread that runs a model (the model
    /// owner; test threads) keeps its own, traced on its first call per input shape.
    /// Keyed by the routes in force too: a trace holds the products and kernels they chose
    /// when it was traced.
    static COMPILED: RefCell<HashMap<(GraphKey, Routes), CompiledFn>> = RefCell::new(HashMap::new());
}

/// Run the compiled graph for `key` on `inputs`.
pub fn run(key: GraphKey, inputs: &[Array]) -> Result<Vec<Array>> {
    COMPILED.with_borrow_mut(|cache| {
        let f = cache.entry((key, crate::model::routes::current())).or_insert_with(|| {
            let traced = move |inputs: &[Array]| -> std::result::Result<Vec<Array>, Exception> {
                key.trace(inputs).map_err(|e| Exception::custom(format!("{e:#}")))
            };
            Box::new(mlx_rs::transforms::compile::compile(traced, None))
        });
        Ok(f(inputs)?)
    })
}

/// The plans this thread has compiled a graph for (diagnostics, tests).
pub fn compiled_here() -> Vec<GraphKey> {
    COMPILED.with_borrow(|c| c.keys().map(|(k, _)| *k).collect())
}
