//! The layers the families are built from, on MLX arrays, and the state they keep. Each chooses
//! its route per backend and block: ops, a compiled graph, a CUDA kernel ([`super::cuda`]) or a
//! host kernel ([`super::cpu`]).
//!
//! - Products: `linear` (dense or affine-quantized projections and embeddings as mlx-lm stores
//!   them, the block route and the weight policy), `product` (`x W^T` shaped so MLX picks its
//!   fast kernels, and where the row-invariant kernel serves).
//! - Blocks: `norm` (RMSNorm), `mlp` (dense SwiGLU), `moe` and `moe_graph` (the sparse MoE
//!   block with a shared expert, and its arithmetic for the plain and compiled routes),
//!   `gated_delta` (Gated DeltaNet linear attention), `gated_attention` (Qwen3.5's gated full
//!   attention), `rope` (RoPE for every backend), `compiled` (blocks run as compiled MLX graphs).
//! - Attention and state: `attention` (where a block's attention is chosen: a packed cohort's
//!   shared slots, host, CUDA kernel or MLX's SDPA), `kv_slots` (a cohort's KV in one buffer per
//!   layer), `cache` (row-owned KV and Gated
//!   DeltaNet state), `gdn_batch` (a batch's Gated DeltaNet states kept whole between steps).

pub mod attention;
pub mod cache;
pub mod compiled;
pub mod gated_attention;
pub mod gated_delta;
pub mod gdn_batch;
pub mod kv_slots;
pub mod linear;
pub mod mlp;
pub mod moe;
pub mod moe_graph;
pub mod norm;
pub mod product;
pub mod rope;
