//! Every environment switch the engine reads, in one table: its name, the values it takes, its
//! default and what it does. The table is what `check_environment` validates at start-up, what
//! `cohort device --routes` lists with the values in force, and what docs/configuration.md's
//! switch table is generated from (tests/models/switches.rs keeps the three, and every `COHORT_` name
//! the engine's source reads, in step). A route switch names the field of [`Routes`] it sets:
//! [`Routes::from_env`] builds the one value from the backend's defaults and this table.

use anyhow::Result;

use super::routes::Routes;
use crate::platform::backend::Backend;

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
}

/// One boolean field of [`Routes`], read and written.
#[derive(Debug, Clone, Copy)]
pub struct Field {
    pub get: fn(&Routes) -> bool,
    pub set: fn(&mut Routes, bool),
}

macro_rules! field {
    ($name:ident) => {
        Some(Field {
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
        })
    };
}

const fn switch(
    name: &'static str,
    default: &'static str,
    cuda_only: bool,
    does: &'static str,
    route: Option<Field>,
) -> SwitchDoc {
    SwitchDoc { name, values: Values::OnOff, default, cuda_only, does, route }
}

/// Every switch, grouped: exactness, routes on every backend, CUDA kernels and graphs, CPU host
/// routes, and machine facts.
pub const SWITCHES: &[SwitchDoc] = &[
    switch(
        "COHORT_MTP_ALLOW_INEXACT",
        "0",
        false,
        "1 keeps MTP on the batched verify route whatever the exactness probe finds (by default a route that differs from plain decoding is replaced by an exact one, the invariant route on CUDA or the row-by-row one, or MTP is declined); the probe still reports the difference",
        None,
    ),
    switch(
        "COHORT_PROMPT_PIECES",
        "1",
        false,
        "0: where the exactness gate chose the invariant route (CUDA), prompts are read in MLX's batched chunks instead of in pieces through the row-invariant kernels (512 positions at a time on the Llama family, 16 on hybrids): faster reads of long prompts, but a prompt's bits then depend on where its read is split, so the prompt cache serves only as inexact (`--prompt-cache inexact`)",
        field!(prompt_pieces),
    ),
    switch(
        "COHORT_BATCHED_ATTENTION",
        "1",
        false,
        "0: packed cohorts attend row by row (for side-by-side benchmarks)",
        field!(batched_attention),
    ),
    switch(
        "COHORT_FLAT_PRODUCTS",
        "1",
        false,
        "0: products take a block as a batch of matrices instead of flattened rows (for side-by-side benchmarks)",
        field!(flat_products),
    ),
    switch(
        "COHORT_GDN_BATCH",
        "1",
        false,
        "0: a cohort's Gated DeltaNet states stay per row instead of one batch (for side-by-side benchmarks)",
        field!(gdn_batch),
    ),
    switch(
        "COHORT_STACK_PROJECTIONS",
        "on for CUDA",
        false,
        "projections that read the same input loaded as one stacked product (COHORT_STACK_ROUTER, _EXPERTS, _SHARED, _QKV, _GDN = 0 leave out one kind)",
        field!(stack_projections),
    ),
    switch(
        "COHORT_STACK_ROUTER",
        "1",
        false,
        "0: the MoE router is not stacked with the shared expert's gate",
        field!(stack_router),
    ),
    switch(
        "COHORT_STACK_EXPERTS",
        "1",
        false,
        "0: the experts' gate and up projections are not stacked",
        field!(stack_experts),
    ),
    switch(
        "COHORT_STACK_SHARED",
        "1",
        false,
        "0: the shared expert's gate and up projections are not stacked",
        field!(stack_shared),
    ),
    switch("COHORT_STACK_QKV", "1", false, "0: attention's q, k and v projections are not stacked", field!(stack_qkv)),
    switch(
        "COHORT_STACK_GDN",
        "1",
        false,
        "0: the Gated DeltaNet mixer's input projections are not stacked",
        field!(stack_gdn),
    ),
    switch(
        "COHORT_PAD_PRODUCTS",
        "on for CUDA",
        false,
        "quantized products of a width MLX CUDA's tiled kernels do not take padded with zero rows at load",
        field!(pad_products),
    ),
    switch(
        "COHORT_DENSE_PRODUCTS",
        "on for CUDA",
        false,
        "narrow quantized products keep a dequantized copy that blocks of 8 rows or more take through cuBLAS",
        field!(dense_products),
    ),
    switch(
        "COHORT_COMPILE_MOE",
        "on for CUDA",
        false,
        "the MoE block as a compiled MLX graph for blocks of up to 64 rows",
        field!(compile_moe),
    ),
    switch(
        "COHORT_COMPILE_GDN",
        "on for CUDA",
        false,
        "the Gated DeltaNet mixer as a compiled MLX graph for blocks of up to 64 rows",
        field!(compile_gdn),
    ),
    switch(
        "COHORT_GDN_KERNEL",
        "on for CUDA",
        false,
        "0: the Gated DeltaNet recurrence as plain ops instead of the fused CUDA kernel",
        field!(gdn_kernel),
    ),
    switch(
        "COHORT_GDN_FUSED_FRONT",
        "on for CUDA",
        true,
        "the Gated DeltaNet mixer's convolution, gates and recurrence as one CUDA kernel",
        field!(gdn_fused_front),
    ),
    switch(
        "COHORT_GDN_FUSED_NORM",
        "on for CUDA",
        true,
        "0: the mixer's gated RMSNorm as MLX ops after the fused front, instead of folded into it (by default it folds into blocks of at most 16 positions)",
        field!(gdn_fused_norm),
    ),
    switch(
        "COHORT_MOE_KERNEL",
        "on for CUDA",
        true,
        "0: the MoE expert kernels off: MLX's gather_qmm and ops after routing (by default the kernels serve every block of up to 1024 tokens)",
        field!(moe_kernel),
    ),
    switch(
        "COHORT_ROUTER_KERNEL",
        "on for CUDA",
        true,
        "the MoE router's top-k and scores as one CUDA kernel",
        field!(router_kernel),
    ),
    switch(
        "COHORT_ADD_NORM_KERNEL",
        "0",
        true,
        "1: each residual sum and the RMSNorm after it as one CUDA kernel (off by default: slower on MLX CUDA's host, docs/benchmarks.md)",
        field!(add_norm_kernel),
    ),
    switch(
        "COHORT_ATTENTION_KERNEL",
        "0",
        true,
        "1: a packed cohort's attention for blocks of one or two query positions as one CUDA kernel over the slot buffer on every route (model/cuda/attention_short.cu; the invariant route takes it whatever this says)",
        field!(attention_kernel),
    ),
    switch(
        "COHORT_MMA_PRODUCTS",
        "on for CUDA",
        true,
        "0: the invariant route's quantized products of bf16 blocks through the scalar kernel (model/cuda/affine_rows.cu, a weight decoded once a row) instead of on the tensor cores (kernels/affine_mma.cu, decoded once for all 16 rows: the same bits a row, and the real geometry's B8 MTP cycle 1.5x faster, docs/benchmarks.md)",
        field!(mma_products),
    ),
    switch(
        "COHORT_HOST_ROPE",
        "on for the CPU backend",
        false,
        "0: RoPE through MLX's CPU fallback graph instead of on the host (CPU backend only)",
        field!(host_rope),
    ),
    switch(
        "COHORT_HOST_ATTENTION",
        "on for the CPU backend",
        false,
        "0: query blocks of up to 512 (decode, drafts, verifies, prefill chunks) attend through MLX's SDPA instead of on the host (CPU backend only)",
        field!(host_attention),
    ),
    switch(
        "COHORT_HOST_LAYERS",
        "on for the CPU backend",
        false,
        "0: the Llama family's blocks (decode steps and prompt chunks) run as MLX ops between the CPU kernel's products instead of wholly on the host (CPU backend, kernel weights)",
        field!(host_layers),
    ),
    switch(
        "COHORT_HOST_GATE",
        "on for the CPU backend",
        false,
        "0: SwiGLU's silu(gate) * up through MLX's fused kernel instead of on the host wherever the MLP runs as MLX ops (CPU backend only)",
        field!(host_gate),
    ),
    SwitchDoc {
        name: "COHORT_MEMORY_AVAILABLE",
        values: Values::Number,
        default: "MemAvailable",
        cuda_only: false,
        route: None,
        does: "the memory in bytes the CPU guard assumes is available",
    },
    SwitchDoc {
        name: "COHORT_CPU_THREADS",
        values: Values::Number,
        default: "one per core",
        cuda_only: false,
        route: None,
        does: "threads the CPU kernel and host attention split a product over, the caller included",
    },
    SwitchDoc {
        name: "COHORT_KERNEL_DIR",
        values: Values::Path,
        default: "the kernels built in",
        cuda_only: false,
        route: None,
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
