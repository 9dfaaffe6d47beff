//! Every environment switch the engine reads, in one table: its name, the values it takes, its
//! default and what it does. Each route is declared here once: the field of [`Routes`] it sets,
//! its default on each backend, the backend it exists on, and the `bench-step` flag that times it
//! both ways in one process. From this table come [`Routes::defaults`] and [`Routes::from_env`]
//! (the one value the engine runs), `check_environment` (start-up's validation), `cohort device
//! --routes` (the values in force), the lab's bench arms, and docs/configuration.md's switch table
//! (tests/models/switches.rs keeps the docs, and every `COHORT_` name the source reads, in step).

use anyhow::Result;

use super::routes::Routes;
use crate::platform::backend::Backend;

/// Where a route is on when nothing sets it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnBy {
    Off,
    On,
    /// On where MLX drives CUDA (where each such route was measured to pay, docs/benchmarks.md).
    Cuda,
    /// On for MLX's CPU backend (the host routes).
    Cpu,
}

impl OnBy {
    pub fn on(self, backend: Backend) -> bool {
        match self {
            OnBy::Off => false,
            OnBy::On => true,
            OnBy::Cuda => backend == Backend::Cuda,
            OnBy::Cpu => backend == Backend::Cpu,
        }
    }

    /// The default in the words of the docs' table.
    pub const fn words(self) -> &'static str {
        match self {
            OnBy::Off => "0",
            OnBy::On => "1",
            OnBy::Cuda => "on for CUDA",
            OnBy::Cpu => "on for the CPU backend",
        }
    }
}

/// The values a switch takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Values {
    /// `0` (off) or `1` (on); anything else is refused at start-up.
    OnOff,
    /// A number (bytes, threads): read where it is used, which names it in any error.
    Number,
    /// A path.
    Path,
    /// Text for its reader (a log filter, a launch shape).
    Text,
}

/// One switch.
#[derive(Debug, Clone, Copy)]
pub struct SwitchDoc {
    pub name: &'static str,
    pub values: Values,
    /// What it is when unset, in words.
    pub default: &'static str,
    /// Only honoured where MLX drives CUDA: `1` elsewhere is refused at start-up.
    pub cuda_only: bool,
    pub does: &'static str,
    /// The field of [`Routes`] an on/off route switch sets; `None` for the rest.
    pub route: Option<Field>,
    /// The lab's `bench-step` flag that times the route on and off in one process.
    pub arm: Option<Arm>,
}

/// One boolean field of [`Routes`], read and written, with its default on each backend.
#[derive(Debug, Clone, Copy)]
pub struct Field {
    pub get: fn(&Routes) -> bool,
    pub set: fn(&mut Routes, bool),
    pub on_by: OnBy,
    /// The one backend the route exists on: elsewhere it stays off whatever the environment says.
    pub only_on: Option<Backend>,
}

impl Field {
    /// Whether the route exists on `backend` (elsewhere it stays off, default or asked for).
    pub fn exists_on(&self, backend: Backend) -> bool {
        self.only_on.is_none_or(|b| b == backend)
    }
}

/// A route's arm in `bench-step`: its flag (without the dashes) and its tables' column.
#[derive(Debug, Clone, Copy)]
pub struct Arm {
    pub flag: &'static str,
    pub column: &'static str,
}

macro_rules! field {
    ($name:ident, $on_by:expr) => {
        field!($name, $on_by, None)
    };
    ($name:ident, $on_by:expr, $only_on:expr) => {
        Field {
            get: {
                fn get(r: &Routes) -> bool {
                    r.$name
                }
                get
            },
            set: {
                fn set(r: &mut Routes, on: bool) {
                    r.$name = on;
                }
                set
            },
            on_by: $on_by,
            only_on: $only_on,
        }
    };
}

/// An on/off switch that sets a route field (its default in words comes from the field's).
const fn route(name: &'static str, cuda_only: bool, does: &'static str, field: Field) -> SwitchDoc {
    SwitchDoc {
        name,
        values: Values::OnOff,
        default: field.on_by.words(),
        cuda_only,
        does,
        route: Some(field),
        arm: None,
    }
}

impl SwitchDoc {
    /// The same switch with a `bench-step` arm.
    const fn arm(self, flag: &'static str, column: &'static str) -> SwitchDoc {
        SwitchDoc { arm: Some(Arm { flag, column }), ..self }
    }
}

/// Every switch, grouped: exactness, routes on every backend, CUDA kernels and graphs, CPU host
/// routes, and machine facts.
pub const SWITCHES: &[SwitchDoc] = &[
    SwitchDoc {
        name: "COHORT_MTP_ALLOW_INEXACT",
        values: Values::OnOff,
        default: "0",
        cuda_only: false,
        does: "1 keeps MTP on the batched verify route whatever the exactness probe finds (by default a route that differs from plain decoding is replaced by an exact one, the invariant route on CUDA or the row-by-row one, or MTP is declined); the probe still reports the difference",
        route: None,
        arm: None,
    },
    route("COHORT_PROMPT_PIECES", false, "0: where the exactness gate chose the invariant route (CUDA), prompts are read in MLX's batched chunks instead of in pieces through the row-invariant kernels (512 positions at a time on the Llama family, 16 on hybrids): faster reads of long prompts, but a prompt's bits then depend on where its read is split, so the prompt cache serves only as inexact (`--prompt-cache inexact`)", field!(prompt_pieces, OnBy::On)),
    route("COHORT_BATCHED_ATTENTION", false, "0: packed cohorts attend row by row (for side-by-side benchmarks)", field!(batched_attention, OnBy::On)),
    route("COHORT_FLAT_PRODUCTS", false, "0: products take a block as a batch of matrices instead of flattened rows (for side-by-side benchmarks)", field!(flat_products, OnBy::On)),
    route("COHORT_GDN_BATCH", false, "0: a cohort's Gated DeltaNet states stay per row instead of one batch (for side-by-side benchmarks)", field!(gdn_batch, OnBy::On)),
    route("COHORT_STACK_PROJECTIONS", false, "projections that read the same input loaded as one stacked product (COHORT_STACK_ROUTER, _EXPERTS, _SHARED, _QKV, _GDN = 0 leave out one kind)", field!(stack_projections, OnBy::Cuda)),
    route("COHORT_STACK_ROUTER", false, "0: the MoE router is not stacked with the shared expert's gate", field!(stack_router, OnBy::On)),
    route("COHORT_STACK_EXPERTS", false, "0: the experts' gate and up projections are not stacked", field!(stack_experts, OnBy::On)),
    route("COHORT_STACK_SHARED", false, "0: the shared expert's gate and up projections are not stacked", field!(stack_shared, OnBy::On)),
    route("COHORT_STACK_QKV", false, "0: attention's q, k and v projections are not stacked", field!(stack_qkv, OnBy::On)),
    route("COHORT_STACK_GDN", false, "0: the Gated DeltaNet mixer's input projections are not stacked", field!(stack_gdn, OnBy::On)),
    route("COHORT_PAD_PRODUCTS", false, "quantized products of a width MLX CUDA's tiled kernels do not take padded with zero rows at load", field!(pad_products, OnBy::Cuda)),
    route("COHORT_DENSE_PRODUCTS", false, "narrow quantized products keep a dequantized copy that blocks of 8 rows or more take through cuBLAS", field!(dense_products, OnBy::Cuda)),
    route("COHORT_COMPILE_MOE", false, "the MoE block as a compiled MLX graph for blocks of up to 64 rows", field!(compile_moe, OnBy::Cuda)),
    route("COHORT_COMPILE_GDN", false, "the Gated DeltaNet mixer as a compiled MLX graph for blocks of up to 64 rows", field!(compile_gdn, OnBy::Cuda)),
    route("COHORT_GDN_KERNEL", false, "0: the Gated DeltaNet recurrence as plain ops instead of the fused CUDA kernel", field!(gdn_kernel, OnBy::Cuda, Some(Backend::Cuda))),
    route("COHORT_GDN_FUSED_FRONT", true, "the Gated DeltaNet mixer's convolution, gates and recurrence as one CUDA kernel", field!(gdn_fused_front, OnBy::Cuda)).arm("fused-front", "fused front"),
    route("COHORT_GDN_FUSED_NORM", true, "0: the mixer's gated RMSNorm as MLX ops after the fused front, instead of folded into it (by default it folds into blocks of at most 16 positions)", field!(gdn_fused_norm, OnBy::Cuda)).arm("mixer-norm", "mixer norm"),
    route("COHORT_MOE_KERNEL", true, "0: the MoE expert kernels off: MLX's gather_qmm and ops after routing (by default the kernels serve every block of up to 1024 tokens)", field!(moe_kernel, OnBy::Cuda)).arm("experts-kernel", "expert kernels"),
    route("COHORT_ROUTER_KERNEL", true, "the MoE router's top-k and scores as one CUDA kernel", field!(router_kernel, OnBy::Cuda)).arm("router-kernel", "router kernel"),
    route("COHORT_ADD_NORM_KERNEL", true, "1: each residual sum and the RMSNorm after it as one CUDA kernel (off by default: slower on MLX CUDA's host, docs/benchmarks.md)", field!(add_norm_kernel, OnBy::Off)).arm("add-norm", "add-norm kernel"),
    route("COHORT_ATTENTION_KERNEL", true, "1: a packed cohort's attention for blocks of one or two query positions as one CUDA kernel over the slot buffer on every route (model/cuda/attention_short.cu; the invariant route takes it whatever this says)", field!(attention_kernel, OnBy::Off)).arm("attention-kernel", "attention kernel"),
    route("COHORT_MMA_PRODUCTS", true, "0: the invariant route's quantized products of bf16 blocks through the scalar kernel (model/cuda/affine_rows.cu, a weight decoded once a row) instead of on the tensor cores (model/cuda/affine_mma.cu, decoded once for all 16 rows: the same bits a row, and the real geometry's B8 MTP cycle 1.5x faster, docs/benchmarks.md)", field!(mma_products, OnBy::Cuda)),
    route(
        "COHORT_GDN_STATE_IN_PLACE",
        true,
        "0: after a verify the fused front reads each row's recurrent state and convolution tail as strided slices of the verify's arrays (which MLX copies before the launch) instead of in place",
        field!(gdn_state_in_place, OnBy::Cuda),
    )
    .arm("state-in-place", "state in place"),
    route(
        "COHORT_MOE_UP_MMA",
        true,
        "1: the MoE expert kernels' first half on the tensor cores for bf16 blocks of up to 16 tokens with 4-bit experts (model/cuda/moe_experts_up_mma.cu) instead of the scalar kernel (off: measured slower on an H100, docs/benchmarks.md)",
        field!(moe_up_mma, OnBy::Off),
    )
    .arm("experts-mma", "experts on tensor cores"),
    route(
        "COHORT_QK_NORM_ROPE_KERNEL",
        true,
        "0: an attention layer's query and key RMSNorm and RoPE as a copy, a norm and a rotation each instead of one CUDA kernel reading the stacked q/k/v product in place (model/cuda/qk_norm_rope.cu)",
        field!(qk_norm_rope_kernel, OnBy::Cuda),
    )
    .arm("qk-kernel", "q/k norm and RoPE kernel"),
    route(
        "COHORT_HAND_OVER_LAYERS",
        false,
        "a step's graph handed to the device every 4 layers (an asynchronous evaluation of the residual stream) instead of once at its end, so the device runs the first layers while the host builds the rest; the same kernels run either way",
        field!(hand_over_layers, OnBy::Cuda),
    )
    .arm("hand-over", "hand-over every 4 layers"),
    route(
        "COHORT_PRODUCT_VIEWS",
        true,
        "1: the invariant route's products flatten a block to rows and reshape the result back (two view nodes a product the kernels do not need)",
        field!(product_views, OnBy::Off),
    )
    .arm("product-views", "product views"),
    route("COHORT_HOST_ROPE", false, "0: RoPE through MLX's CPU fallback graph instead of on the host (CPU backend only)", field!(host_rope, OnBy::Cpu, Some(Backend::Cpu))),
    route("COHORT_HOST_ATTENTION", false, "0: query blocks of up to 512 (decode, drafts, verifies, prefill chunks) attend through MLX's SDPA instead of on the host (CPU backend only)", field!(host_attention, OnBy::Cpu, Some(Backend::Cpu))),
    route("COHORT_HOST_LAYERS", false, "0: the Llama family's blocks (decode steps and prompt chunks) run as MLX ops between the CPU kernel's products instead of wholly on the host (CPU backend, kernel weights)", field!(host_layers, OnBy::Cpu, Some(Backend::Cpu))),
    route("COHORT_HOST_GATE", false, "0: SwiGLU's silu(gate) * up through MLX's fused kernel instead of on the host wherever the MLP runs as MLX ops (CPU backend only)", field!(host_gate, OnBy::Cpu, Some(Backend::Cpu))),
    SwitchDoc {
        name: "COHORT_MEMORY_AVAILABLE",
        values: Values::Number,
        default: "MemAvailable",
        cuda_only: false,
        route: None,
        arm: None,
        does: "the memory in bytes the CPU guard assumes is available",
    },
    SwitchDoc {
        name: "COHORT_CPU_THREADS",
        values: Values::Number,
        default: "one per core",
        cuda_only: false,
        route: None,
        arm: None,
        does: "threads the CPU kernel and host attention split a product over, the caller included",
    },
    SwitchDoc {
        name: "COHORT_KERNEL_DIR",
        values: Values::Path,
        default: "the kernels built in",
        cuda_only: false,
        route: None,
        arm: None,
        does: "a folder whose *.cu bodies (named as in crates/core/src/model/cuda/) replace the built-in ones, so an edited kernel runs without a rebuild",
    },
];

/// Refuse switch values the machine cannot honour, naming the variable: the routes'
/// ([`Routes::from_env`] says which), and a number that is not a whole one (a memory figure of
/// `8G` would otherwise turn the memory guard off). Checked once at start-up.
pub fn check_environment() -> Result<()> {
    Routes::from_env(Backend::detect())?;
    for s in SWITCHES.iter().filter(|s| s.values == Values::Number) {
        let Some(value) = std::env::var_os(s.name) else { continue };
        if value.to_str().and_then(|v| v.trim().parse::<u64>().ok()).is_none() {
            anyhow::bail!("{}={}: use a whole number ({})", s.name, value.to_string_lossy(), s.does);
        }
    }
    Ok(())
}

/// docs/configuration.md's switch table, generated from [`SWITCHES`].
pub fn markdown_table() -> String {
    let mut out = String::from("| variable | default | does |\n| --- | --- | --- |\n");
    for s in SWITCHES {
        out.push_str(&format!("| `{}` | {} | {} |\n", s.name, s.default, s.does));
    }
    out
}
