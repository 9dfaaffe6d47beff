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

use std::any::Any;
use std::cell::RefCell;

use anyhow::Result;
use mlx_rs::Array;
use mlx_rs::error::Exception;

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

/// A block that runs as a compiled graph: its plan (everything the trace depends on besides the
/// inputs: storage, sizes, switches) and how the block is built from its inputs. The MoE block's
/// and the mixer's plans implement it where they are defined, so this file names neither.
pub trait Traced: Copy + PartialEq + std::fmt::Debug + 'static {
    fn trace(&self, inputs: &[Array]) -> Result<Vec<Array>>;
}

type CompiledFn = Box<dyn FnMut(&[Array]) -> std::result::Result<Vec<Array>, Exception>>;

/// One traced graph: its plan (any [`Traced`] type) and the routes in force when it was traced (a
/// trace holds the products and kernels they chose).
struct Entry {
    plan: Box<dyn Any>,
    routes: Routes,
    f: CompiledFn,
}

thread_local! {
    /// mlx-rs's compiled functions are not `Send`: each thread that runs a model (the model
    /// owner; test threads) keeps its own, traced on its first call per input shape. A model has
    /// a few plans, so a list searched in order serves.
    static COMPILED: RefCell<Vec<Entry>> = const { RefCell::new(Vec::new()) };
}

/// Run the compiled graph for `plan` on `inputs`.
pub fn run<P: Traced>(plan: P, inputs: &[Array]) -> Result<Vec<Array>> {
    COMPILED.with_borrow_mut(|cache| {
        let routes = crate::model::routes::current();
        let found = cache.iter().position(|e| e.routes == routes && e.plan.downcast_ref::<P>() == Some(&plan));
        let at = found.unwrap_or_else(|| {
            let traced = move |inputs: &[Array]| -> std::result::Result<Vec<Array>, Exception> {
                plan.trace(inputs).map_err(|e| Exception::custom(format!("{e:#}")))
            };
            let f = Box::new(mlx_rs::transforms::compile::compile(traced, None));
            cache.push(Entry { plan: Box::new(plan), routes, f });
            cache.len() - 1
        });
        Ok((cache[at].f)(inputs)?)
    })
}

/// The plans of type `P` this thread has compiled a graph for (diagnostics, tests).
pub fn compiled_here<P: Traced>() -> Vec<P> {
    COMPILED.with_borrow(|c| c.iter().filter_map(|e| e.plan.downcast_ref::<P>().copied()).collect())
}
