//! Gated full attention (Qwen3.5 / Qwen3-Next): per-head q/k RMSNorm, partial rotate-half RoPE,
//! grouped KV heads, and a sigmoid output gate carried in the second half of each q_proj head.

use anyhow::Result;
use mlx_rs::Array;

use super::attention::{self, Block, RopeSpec};
use super::cache::KvCache;
use super::linear::{Linear, fuse_outputs, split_widths};
use super::norm::RmsNorm;
use crate::model::config::{QuantSpec, Qwen35Config};
use crate::model::cuda::qk_norm_rope::{self, Heads};
use crate::model::formats::weights::Weights;

/// The query (with its gate), key and value projections, or one product of their stacked rows.
enum QkvProj {
    Separate { q: Linear, k: Linear, v: Linear },
    Stacked(Linear),
}

pub struct Attention {
    qkv: QkvProj,
    o_proj: Linear,
    q_norm: RmsNorm,
    k_norm: RmsNorm,
    heads: i32,
    kv_heads: i32,
    head_dim: i32,
    rotary_dims: i32,
    rope_theta: f32,
}

impl Attention {
    pub fn load(
        w: &mut Weights,
        prefix: &str,
        cfg: &Qwen35Config,
        quant: &dyn Fn(&str) -> Option<QuantSpec>,
    ) -> Result<Self> {
        let (h, nh, nkv, hd) = (cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim);
        let lin = |w: &mut Weights, name: &str, i, o| {
            Linear::load(w, &format!("{prefix}.{name}"), i, o, quant(&format!("{prefix}.{name}")))
        };
        let parts = ["q_proj", "k_proj", "v_proj"];
        let qkv = if crate::model::routes::current().stacks(crate::model::routes::Stack::Qkv)
            && fuse_outputs(w, prefix, &parts, "qkv_proj_stacked", h, quant)?
        {
            QkvProj::Stacked(Linear::load(w, &format!("{prefix}.qkv_proj_stacked"), h, (2 * nh + 2 * nkv) * hd, None)?)
        } else {
            QkvProj::Separate {
                q: lin(w, "q_proj", h, nh * hd * 2)?,
                k: lin(w, "k_proj", h, nkv * hd)?,
                v: lin(w, "v_proj", h, nkv * hd)?,
            }
        };
        Ok(Self {
            qkv,
            o_proj: lin(w, "o_proj", nh * hd, h)?,
            q_norm: RmsNorm::load(w, &format!("{prefix}.q_norm.weight"), hd, cfg.rms_norm_eps)?,
            k_norm: RmsNorm::load(w, &format!("{prefix}.k_norm.weight"), hd, cfg.rms_norm_eps)?,
            heads: nh,
            kv_heads: nkv,
            head_dim: hd,
            rotary_dims: cfg.rotary_dims(),
            rope_theta: cfg.rope_theta,
        })
    }

    /// x [B, T, H]; `caches[b]` is row b's KV for this layer.
    pub fn forward(&self, x: &Array, caches: &mut [&mut KvCache]) -> Result<Array> {
        let (b, t) = (x.shape()[0], x.shape()[1]);
        let (nh, nkv, hd) = (self.heads, self.kv_heads, self.head_dim);
        let scale = (hd as f32).powf(-0.5);
        let rope = RopeSpec { dims: self.rotary_dims, traditional: false, base: self.rope_theta };
        let [q, k, v] = match &self.qkv {
            QkvProj::Separate { q, k, v } => [q.forward(x)?, k.forward(x)?, v.forward(x)?],
            QkvProj::Stacked(all) => {
                let p = all.forward(x)?;
                let heads = Heads { heads: nh, kv_heads: nkv, head_dim: hd, eps: self.q_norm.eps };
                if self.k_norm.eps == self.q_norm.eps && qk_norm_rope::serves(&p, heads, rope) {
                    return self.forward_normed_in_place(&p, heads, rope, caches);
                }
                <[Array; 3]>::try_from(split_widths(&p, &[2 * nh * hd, nkv * hd, nkv * hd])?)
                    .map_err(|_| anyhow::anyhow!("the stacked q/k/v projection did not split in three"))?
            }
        };
        let q = q.reshape(&[b, t, nh, 2 * hd])?;
        let halves = mlx_rs::ops::split_equal(&q, 2, -1)?;
        let queries = self.q_norm.forward(&halves[0])?.transpose_axes(&[0, 2, 1, 3])?;
        let gate = halves[1].reshape(&[b, t, nh * hd])?;
        let keys = self.k_norm.forward(&k.reshape(&[b, t, nkv, hd])?)?.transpose_axes(&[0, 2, 1, 3])?;
        let values = v.reshape(&[b, t, nkv, hd])?.transpose_axes(&[0, 2, 1, 3])?;
        let block = Block { q: &queries, k: &keys, v: &values, rope: Some(rope), scale };
        self.attend_and_project(caches, &block, &gate, b, t)
    }

    /// The rest of [`Attention::forward`] from the stacked product `p` [B, T, N] through the q/k
    /// kernel: queries and keys normed and rotated straight from the product's rows, the gates and
    /// values views of it.
    fn forward_normed_in_place(
        &self,
        p: &Array,
        heads: Heads,
        rope: RopeSpec,
        caches: &mut [&mut KvCache],
    ) -> Result<Array> {
        let (b, t) = (p.shape()[0], p.shape()[1]);
        let (nh, nkv, hd) = (self.heads, self.kv_heads, self.head_dim);
        let offsets: Vec<i32> = caches.iter().map(|c| c.offset()).collect();
        let (queries, keys) = qk_norm_rope::apply(p, &self.q_norm.weight, &self.k_norm.weight, heads, rope, &offsets)?;
        let [q, _, v] = <[Array; 3]>::try_from(split_widths(p, &[2 * nh * hd, nkv * hd, nkv * hd])?)
            .map_err(|_| anyhow::anyhow!("the stacked q/k/v projection did not split in three"))?;
        let gate = mlx_rs::ops::split_equal(&q.reshape(&[b, t, nh, 2 * hd])?, 2, -1)?[1].reshape(&[b, t, nh * hd])?;
        let values = v.reshape(&[b, t, nkv, hd])?.transpose_axes(&[0, 2, 1, 3])?;
        let block = Block { q: &queries, k: &keys, v: &values, rope: None, scale: (hd as f32).powf(-0.5) };
        self.attend_and_project(caches, &block, &gate, b, t)
    }

    /// Attend `block` over the rows' KV, gate each head's output and project it back.
    fn attend_and_project(
        &self,
        caches: &mut [&mut KvCache],
        block: &Block,
        gate: &Array,
        b: i32,
        t: i32,
    ) -> Result<Array> {
        let o = attention::attend(caches, block)?;
        let o = o.transpose_axes(&[0, 2, 1, 3])?.reshape(&[b, t, self.heads * self.head_dim])?;
        self.o_proj.forward(&o.multiply(mlx_rs::ops::sigmoid(gate)?)?)
    }

    pub fn nbytes(&self) -> usize {
        let qkv = match &self.qkv {
            QkvProj::Separate { q, k, v } => q.nbytes() + k.nbytes() + v.nbytes(),
            QkvProj::Stacked(all) => all.nbytes(),
        };
        qkv + self.o_proj.nbytes()
    }
}
