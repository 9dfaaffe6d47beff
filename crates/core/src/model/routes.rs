//! Every route choice the model makes, as one value: built once from the backend's defaults and
//! the validated environment ([`Routes::from_env`], whose switches are the table in
//! `switches.rs`), carried by the loaded model ([`crate::model::forward::LanguageModel::routes`])
//! and put in force by whoever drives it.
//!
//! A value in force is scoped to the thread that drives the model, for the length of a closure
//! ([`scoped`]): the engine's owner thread runs under its model's routes, a cycle narrows the
//! block route the exactness gate chose, a benchmark runs each arm under its own value, and a
//! test under the value it checks. Layers read [`current`] where they choose. Nothing here is
//! process-wide and mutable, so two models, two tests or two benchmark arms never see each
//! other's choices; where nothing is in force the process's own value applies (the environment's,
//! read and checked once).
//!
//! Why a scoped value rather than a parameter on every forward: a route is read deep inside
//! products, attention and kernels' `serves` checks, ~70 forward calls away from where it is
//! chosen; the scope gives the same guarantee (one value per run, decided once) without threading
//! it through every layer's signature. Compiled graphs are keyed by the whole value
//! (`layers::compiled`), so a trace never outlives the choices it was traced under.

use std::cell::Cell;
use std::sync::OnceLock;

use anyhow::{Result, bail};

use super::switches::{SWITCHES, Values};
use crate::platform::backend::Backend;

/// How a step computes a block of several rows (the products and attention of a cohort's cycle,
/// a verify's positions): the exactness gate's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum BlockRoute {
    /// One matrix product for all rows (fast; the product's reduction order may depend on M).
    Batched,
    /// One product per row, so every row is computed exactly as a single-token step would be.
    RowByRow,
    /// One product for all rows through kernels that reduce every row in one fixed order
    /// whatever the block's rows (CUDA: `row_invariant`'s kernels for every projection and the LM head,
    /// the short-block attention kernel for steps and verifies): as exact as the row-by-row route,
    /// at the batched route's reads of each weight.
    Invariant,
}

/// What loading does with quantized weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum WeightPolicy {
    /// Keep affine-quantized weights packed (GPUs; CPUs short of memory).
    #[default]
    Quantized,
    /// Dequantize once at load into float32, so every product is a BLAS sgemm: on the CPU MLX's
    /// quantized matmul neither uses BLAS nor amortises rows (see docs/benchmarks.md).
    Dequantize,
    /// The float32 copy for MLX's products of many rows, and the codes kept for cohort's own
    /// CPU kernel (`cpu_qmm`), which computes a row alike in blocks of every size: it serves
    /// blocks of up to [`crate::model::layers::linear::CPU_KERNEL_MAX_ROWS`] rows here, and every block of a family's host path
    /// (decode steps and prompt chunks alike, so a decoded token leaves the state a read does).
    Kernel,
}

impl WeightPolicy {
    /// The name `--weights` and profiles use.
    pub fn name(self) -> &'static str {
        match self {
            WeightPolicy::Quantized => "quantized",
            WeightPolicy::Dequantize => "dequantize",
            WeightPolicy::Kernel => "kernel",
        }
    }
}

/// Every route choice. `Copy`, compared and hashed whole (compiled graphs are keyed by it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub struct Routes {
    /// How a block of several rows is computed; the exactness gate's verdict.
    pub block: BlockRoute,
    /// What loading does with quantized weights (chosen by `--weights` or the automatic policy).
    pub weights: WeightPolicy,

    /// Packed cohorts attend as one batch (off: row by row).
    pub batched_attention: bool,
    /// Products take a block as flattened rows (off: a batch of matrices).
    pub flat_products: bool,
    /// Float products take their rows in blocks of a multiple of 8 (zero rows added, their
    /// results dropped): on MLX's CPU backend OpenBLAS computes the M mod 8 tail rows of a block
    /// with other kernels, so a row's bits would depend on how many rows share the call
    /// (docs/journal/benchmarks-2026-lanes-and-serving.md). Set only around the MTP module on the
    /// CPU ([`with_padded_float_rows`]); everywhere it would cost a lone row's float products a
    /// block of eight (the float32 route's B1 decode: 0.66x).
    pub pad_float_rows: bool,
    /// A prompt read on the CPU off a family's host path: every product takes MLX's float product
    /// on a block of at least [`PROMPT_ROWS`] rows, a multiple of 8 (never cohort's CPU kernel,
    /// which serves blocks of up to 8 rows there), so a row gets the same bits in a chunk of any
    /// length and a read split anywhere reaches the state of a whole one. Set only by
    /// [`reading_prompt`].
    pub prompt_rows: bool,
    /// The block route prompt reads take ([`reading_prompt`]): batched, except where the exactness
    /// gate chose the invariant route ([`Routes::with_gate`]); a prompt is then read in pieces
    /// through the row-invariant kernels (`crate::model::prefill`, the model's
    /// `invariant_piece`), so a read split anywhere is the chain of single steps it stands for,
    /// as a verify is.
    pub prompt_block: BlockRoute,
    /// Prompt reads take the invariant route where the gate chose it (off: they stay batched,
    /// faster on long prompts and split-dependent, so the prompt cache is inexact there).
    pub prompt_pieces: bool,
    /// A cohort's Gated DeltaNet states are read as one batch (off: per row).
    pub gdn_batch: bool,
    /// On CUDA short blocks attend over the whole buffer capacity with a mask, so the attention
    /// graph's shape changes only when the buffer grows.
    pub padded_blocks: bool,
    /// `gather_qmm` builds its own rows instead of taking held ones.
    pub moe_built_rows: bool,

    /// Load: projections that read the same input become one stacked product.
    pub stack_projections: bool,
    pub stack_router: bool,
    pub stack_experts: bool,
    pub stack_shared: bool,
    pub stack_qkv: bool,
    pub stack_gdn: bool,
    /// Load: quantized products of a width MLX CUDA's tiled kernels do not take are padded.
    pub pad_products: bool,
    /// Load: narrow quantized products keep a dequantized copy for blocks of many rows.
    pub dense_products: bool,

    pub compile_moe: bool,
    pub compile_gdn: bool,
    pub gdn_kernel: bool,
    pub gdn_fused_front: bool,
    pub gdn_fused_norm: bool,
    /// After a verify the fused front reads each row's tail and state in the verify's arrays
    /// ([`crate::model::layers::gdn_batch::Placed`]) rather than as strided slices, which MLX
    /// copies before the launch. On where MLX drives CUDA: 0.7-0.8 ms off a B8 verify on an
    /// H100 (docs/benchmarks.md); bench-step's `--state-in-place` times both in one process.
    pub gdn_state_in_place: bool,
    pub moe_kernel: bool,
    /// The MoE expert kernels' first half on the tensor cores for bf16 blocks of up to 16 tokens
    /// with 4-bit experts (`model/cuda/moe_experts_up_mma.cu`: each expert's weights decoded once
    /// for all its tokens) instead of the scalar kernel. Off: it was measured slower than the
    /// scalar kernel on an H100 (0.2-0.5 ms a B8 verify in its two layouts, docs/benchmarks.md); bench-step's
    /// `--experts-mma` times both in one process.
    pub moe_up_mma: bool,
    pub router_kernel: bool,
    pub add_norm_kernel: bool,
    pub attention_kernel: bool,
    /// An attention layer's query and key RMSNorm and RoPE as one kernel reading the stacked
    /// q/k/v product in place (`model/cuda/qk_norm_rope.cu`) instead of a copy, a norm and a
    /// rotation each. On where MLX drives CUDA: on an H100 it takes 0.07-0.14 ms off a B8
    /// verify, and 0.4-0.5 ms off a B8 AR cycle with the hand-over on (docs/benchmarks.md);
    /// bench-step's `--qk-kernel` times both in one process.
    pub qk_norm_rope_kernel: bool,
    /// A step's forward hands its graph to the device every [`HAND_OVER_LAYERS`] layers (an
    /// asynchronous evaluation of the residual stream) instead of once at its end, so the device
    /// runs the first layers while the host still builds the rest. Where the host must read a
    /// step's result before it can build the next (a cohort's verify, then its decisions), the
    /// device otherwise waits for the whole graph to be built. The same kernels run either way.
    /// On where MLX drives CUDA: on an H100 it takes 0.5-1.3 ms off a B8 MTP cycle and 1.1-1.7
    /// ms off a B8 AR cycle, B1 steps unchanged within the noise (docs/benchmarks.md);
    /// bench-step's `--hand-over` times both in one process.
    pub hand_over_layers: bool,
    /// The invariant route's quantized products of bf16 blocks on the tensor cores
    /// (`model/cuda/affine_mma.cu`) instead of the scalar kernel.
    pub mma_products: bool,
    /// The invariant route's products flatten x to [rows, K] and reshape the result back: two
    /// view nodes a product that the kernels no longer need (they take x's leading axes as rows).
    /// Off by default; bench-step's `--product-views` times both in one process.
    pub product_views: bool,

    pub host_rope: bool,
    pub host_attention: bool,
    pub host_layers: bool,
    pub host_gate: bool,
}

/// One kind of stacked projection (each can be left out on its own while stacking is on).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stack {
    Router,
    Experts,
    Shared,
    Qkv,
    Gdn,
}

impl Routes {
    /// What a backend runs by default: every CUDA route where MLX drives CUDA (where each was
    /// measured to pay, docs/benchmarks.md), the host routes on MLX's CPU backend, and the batched
    /// block route with quantized weights until the gate and the loader say otherwise.
    pub fn defaults(backend: Backend) -> Self {
        let cuda = backend == Backend::Cuda;
        let mut routes = Routes {
            block: BlockRoute::Batched,
            weights: WeightPolicy::Quantized,
            batched_attention: false,
            flat_products: false,
            pad_float_rows: false,
            prompt_rows: false,
            prompt_block: BlockRoute::Batched,
            prompt_pieces: false,
            gdn_batch: false,
            padded_blocks: cuda,
            moe_built_rows: false,
            stack_projections: false,
            stack_router: false,
            stack_experts: false,
            stack_shared: false,
            stack_qkv: false,
            stack_gdn: false,
            pad_products: false,
            dense_products: false,
            compile_moe: false,
            compile_gdn: false,
            gdn_kernel: false,
            gdn_fused_front: false,
            gdn_fused_norm: false,
            gdn_state_in_place: false,
            moe_kernel: false,
            moe_up_mma: false,
            router_kernel: false,
            add_norm_kernel: false,
            attention_kernel: false,
            qk_norm_rope_kernel: false,
            hand_over_layers: false,
            mma_products: false,
            product_views: false,
            host_rope: false,
            host_attention: false,
            host_layers: false,
            host_gate: false,
        };
        // Every route a switch sets takes its default from the switch table, where it is declared.
        for field in SWITCHES.iter().filter_map(|s| s.route) {
            (field.set)(&mut routes, field.on_by.on(backend) && field.exists_on(backend));
        }
        routes
    }

    /// The backend's defaults with the environment's switches applied, each checked: an on/off
    /// switch set to anything but 0 or 1 is refused (it would be ignored), and so is a CUDA kernel
    /// asked for where MLX does not drive CUDA (it aborted start-up inside MLX). Routes that
    /// exist only on one backend stay off elsewhere whatever the environment says.
    pub fn from_env(backend: Backend) -> Result<Self> {
        Self::from_lookup(backend, |name| std::env::var_os(name))
    }

    /// [`Routes::from_env`] over any source of variables (tests give a table).
    pub fn from_lookup(backend: Backend, var: impl Fn(&str) -> Option<std::ffi::OsString>) -> Result<Self> {
        let mut routes = Self::defaults(backend);
        for s in SWITCHES.iter().filter(|s| s.values == Values::OnOff) {
            let Some(value) = var(s.name) else { continue };
            let on = match value.to_str() {
                Some("0") => false,
                Some("1") if s.cuda_only && backend != Backend::Cuda => bail!(
                    "{}=1 asks for a CUDA kernel, but MLX runs on {backend:?} here: unset it (or set it to 0)",
                    s.name
                ),
                Some("1") => true,
                _ => bail!("{}={}: use 1 (on) or 0 (off)", s.name, value.to_string_lossy()),
            };
            if let Some(field) = s.route {
                (field.set)(&mut routes, on && field.exists_on(backend));
            }
        }
        Ok(routes)
    }

    /// The same routes with another block route (a cycle narrowing the gate's verdict; prompt
    /// reads keep theirs).
    pub fn with_block(self, block: BlockRoute) -> Self {
        Routes { block, ..self }
    }

    /// The same routes under the exactness gate's verdict: `block` for blocks of several rows,
    /// and for prompt reads the invariant route where the gate chose it (a prompt's bits must
    /// not depend on where its read is split: by the lane's budget, or by a cached prefix), the
    /// batched route otherwise.
    pub fn with_gate(self, block: BlockRoute) -> Self {
        let pieces = block == BlockRoute::Invariant && self.prompt_pieces;
        let prompt_block = if pieces { BlockRoute::Invariant } else { BlockRoute::Batched };
        Routes { block, prompt_block, ..self }
    }

    /// Whether projections of `kind` are stacked at load.
    pub fn stacks(&self, kind: Stack) -> bool {
        self.stack_projections
            && match kind {
                Stack::Router => self.stack_router,
                Stack::Experts => self.stack_experts,
                Stack::Shared => self.stack_shared,
                Stack::Qkv => self.stack_qkv,
                Stack::Gdn => self.stack_gdn,
            }
    }

    /// The fused Gated DeltaNet front serves: the recurrence kernel does and it is asked for.
    pub fn gdn_front_fused(&self) -> bool {
        self.gdn_kernel && self.gdn_fused_front
    }

    /// The gated norm folds into the fused front.
    pub fn gdn_norm_fused(&self) -> bool {
        self.gdn_front_fused() && self.gdn_fused_norm
    }
}

/// Layers a step's forward builds between two hand-overs when [`Routes::hand_over_layers`] is on:
/// small enough that the device starts a fraction of a millisecond into a step, large enough that
/// the extra evaluations cost little against a layer's work.
pub const HAND_OVER_LAYERS: usize = 4;

thread_local! {
    static IN_FORCE: Cell<Option<Routes>> = const { Cell::new(None) };
}

/// The process's own routes: the environment's, read and checked once (start-up has refused a
/// bad value already, so a failure here falls back to the backend's defaults).
pub fn process() -> Routes {
    static PROCESS: OnceLock<Routes> = OnceLock::new();
    *PROCESS.get_or_init(|| {
        let backend = Backend::detect();
        Routes::from_env(backend).unwrap_or_else(|_| Routes::defaults(backend))
    })
}

/// The routes in force on this thread: the innermost [`scoped`] value, else [`process`].
pub fn current() -> Routes {
    IN_FORCE.get().unwrap_or_else(process)
}

/// `routes` in force on this thread until the guard drops, then what was before (also when
/// unwinding): for a scope as long as a thread's work, such as the engine owner's.
#[must_use = "the routes are in force only while the guard lives"]
pub fn enter(routes: Routes) -> InForce {
    InForce(IN_FORCE.replace(Some(routes)))
}

/// What [`enter`] returns; dropping it puts back the routes it replaced.
pub struct InForce(Option<Routes>);

impl Drop for InForce {
    fn drop(&mut self) {
        IN_FORCE.set(self.0);
    }
}

/// Run `f` with `routes` in force on this thread, then put back what was (also when `f` panics).
pub fn scoped<T>(routes: Routes, f: impl FnOnce() -> T) -> T {
    let _in_force = enter(routes);
    f()
}

/// Run `f` with float products padded to whole blocks of eight rows ([`Routes::pad_float_rows`])
/// where MLX runs on the CPU. The MTP module runs under it: its float products (the shipped
/// bfloat16 head loads as float weights there) must give a row the same bits alone and in a
/// cohort, since a sampled row's tokens follow its drafts. Elsewhere `f` runs as it is.
pub fn with_padded_float_rows<T>(f: impl FnOnce() -> T) -> T {
    if !crate::platform::backend::Backend::is_cpu() {
        return f();
    }
    scoped(Routes { pad_float_rows: true, ..current() }, f)
}

/// Run `f` as a prompt read: the prompt reads' block route ([`Routes::prompt_block`]: batched,
/// or invariant where the gate chose it), and on the CPU off a family's host path, products in
/// blocks of at least [`PROMPT_ROWS`] rows ([`Routes::prompt_rows`]; the host path runs every
/// block on cohort's kernel, which computes a row alike in blocks of every size, so it serves
/// prompt chunks as it serves decode steps). Every prompt read (a solo run's, a lane's, one
/// resumed from the prompt cache) runs under it, so where a split read equals a whole one
/// ([`crate::engine::prompt_cache::check::split_read_check`]) a cached prefix gives the bits of
/// a fresh read.
pub fn reading_prompt<T>(f: impl FnOnce() -> T) -> T {
    let prompt_rows = crate::platform::backend::Backend::is_cpu();
    let routes = current();
    scoped(Routes { prompt_rows, ..routes.with_block(routes.prompt_block) }, f)
}

/// Whether a prompt read in force ([`reading_prompt`]) takes pieces: on the invariant route, as
/// long as the model's [`crate::model::forward::LanguageModel::invariant_piece`].
pub fn reads_in_pieces() -> bool {
    current().block == BlockRoute::Invariant
}

/// Positions a prompt read on the invariant route takes at once by default
/// ([`crate::model::forward::LanguageModel::invariant_piece`]): a B8 verify's block, the longest
/// that every kernel of a hybrid family serves as it serves a step.
pub const INVARIANT_PIECE: usize = 16;

/// The same for a family of attention layers only, whose kernels take blocks of any length in
/// tiles; bounded so that the attention merge's grid (a block a row, head and query) fits.
pub const INVARIANT_PIECE_ATTENTION_ONLY: usize = 512;

/// The fewest rows a prompt read's product takes on the CPU ([`Routes::prompt_rows`]).
pub const PROMPT_ROWS: i32 = 16;

/// Run `f` with the routes in force but `block` as the block route.
pub fn with_block<T>(block: BlockRoute, f: impl FnOnce() -> T) -> T {
    scoped(current().with_block(block), f)
}

/// Run `f` on the batched block route. Prompt prefill always runs batched: the row-by-row route
/// exists to make a verify block equal a chain of single steps, and a prefill batched in every
/// mode leaves AR and MTP runs the same KV (the row-by-row route would make a 300-token prefill
/// 300 single-row products, each reading every weight).
pub fn batched<T>(f: impl FnOnce() -> T) -> T {
    with_block(BlockRoute::Batched, f)
}

/// The routes as `name = value` lines, with where each came from (`cohort device --routes`).
pub fn listing(routes: &Routes, backend: Backend) -> String {
    let defaults = Routes::defaults(backend);
    let width = SWITCHES.iter().map(|s| s.name.len()).max().unwrap_or(0);
    let mut out = format!(
        "block route   {:?} (the exactness gate's verdict replaces it when a model loads)\nweights       {:?} (--weights)\n",
        routes.block, routes.weights
    );
    for s in SWITCHES {
        let value = match s.route {
            Some(field) => {
                let on = (field.get)(routes);
                let from = if on == (field.get)(&defaults) { "default" } else { "set" };
                format!("{} ({from})", u8::from(on))
            }
            None => match std::env::var(s.name) {
                Ok(v) => format!("{v} (set)"),
                Err(_) => format!("{} (default)", s.default),
            },
        };
        out.push_str(&format!("{:width$}  {value}\n    {}\n", s.name, s.does));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<std::ffi::OsString> + 'a {
        move |name| pairs.iter().find(|(n, _)| *n == name).map(|(_, v)| v.into())
    }

    #[test]
    fn the_environment_overrides_the_backend_defaults_and_a_bad_value_is_named() {
        let cpu =
            Routes::from_lookup(Backend::Cpu, env(&[("COHORT_HOST_ROPE", "0"), ("COHORT_STACK_PROJECTIONS", "1")]))
                .unwrap();
        assert!(!cpu.host_rope && cpu.host_attention && cpu.stack_projections && !cpu.compile_moe);
        let cuda = Routes::from_lookup(Backend::Cuda, env(&[("COHORT_COMPILE_MOE", "0")])).unwrap();
        assert!(!cuda.compile_moe && cuda.compile_gdn && !cuda.host_rope);
        // Host routes live on the CPU backend, the recurrence kernel on CUDA, whatever is asked.
        let cuda = Routes::from_lookup(Backend::Cuda, env(&[("COHORT_HOST_GATE", "1")])).unwrap();
        assert!(!cuda.host_gate);
        let cpu = Routes::from_lookup(Backend::Cpu, env(&[("COHORT_GDN_KERNEL", "1")])).unwrap();
        assert!(!cpu.gdn_kernel);
        let err = Routes::from_lookup(Backend::Cpu, env(&[("COHORT_FLAT_PRODUCTS", "no")])).unwrap_err();
        assert_eq!(err.to_string(), "COHORT_FLAT_PRODUCTS=no: use 1 (on) or 0 (off)");
        let err = Routes::from_lookup(Backend::Cpu, env(&[("COHORT_MOE_KERNEL", "1")])).unwrap_err();
        assert!(err.to_string().starts_with("COHORT_MOE_KERNEL=1 asks for a CUDA kernel"), "{err}");
    }

    #[test]
    fn a_scope_holds_for_its_closure_on_its_thread_only_and_is_put_back_after_a_panic() {
        let outer = current();
        let inner = Routes { flat_products: !outer.flat_products, ..outer };
        scoped(inner, || {
            assert_eq!(current(), inner);
            with_block(BlockRoute::RowByRow, || assert_eq!(current(), inner.with_block(BlockRoute::RowByRow)));
            assert_eq!(current(), inner);
            assert_eq!(std::thread::spawn(current).join().unwrap(), process());
        });
        assert_eq!(current(), outer);
        let caught = std::panic::catch_unwind(|| scoped(inner, || panic!("inside")));
        assert!(caught.is_err());
        assert_eq!(current(), outer);
    }

    /// The table declares each default once; the value built from it has them on each backend,
    /// and a route that exists on one backend only is off elsewhere, default or asked for.
    #[test]
    fn each_route_takes_the_default_its_row_declares_on_every_backend() {
        for backend in [Backend::Cpu, Backend::Cuda, Backend::Metal] {
            let routes = Routes::defaults(backend);
            for s in SWITCHES {
                let Some(field) = s.route else { continue };
                let exists = field.exists_on(backend);
                assert_eq!((field.get)(&routes), field.on_by.on(backend) && exists, "{} on {backend:?}", s.name);
                let asked = Routes::from_lookup(backend, env(&[(s.name, "1")]));
                if let Ok(asked) = asked {
                    assert_eq!((field.get)(&asked), exists, "{}=1 on {backend:?}", s.name);
                } else {
                    assert!(s.cuda_only && backend != Backend::Cuda, "{}=1 refused on {backend:?}", s.name);
                }
            }
        }
    }

    #[test]
    fn every_on_off_route_switch_names_a_field_that_changes_the_value() {
        let base = Routes::defaults(Backend::Cpu);
        for s in SWITCHES.iter().filter_map(|s| s.route.map(|f| (s, f))) {
            let (switch, field) = s;
            let mut flipped = base;
            (field.set)(&mut flipped, !(field.get)(&base));
            assert_ne!(flipped, base, "{} changes no field", switch.name);
            assert_eq!((field.get)(&flipped), !(field.get)(&base), "{} reads another field than it sets", switch.name);
        }
    }
}
