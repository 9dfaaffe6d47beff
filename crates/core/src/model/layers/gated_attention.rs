//! Gated full attention (Qwen3.5 / Qwen3-Next): per-head q/k RMSNorm, partial rotate-half RoPE,
//! grouped KV heads, and a sigmoid output gate carried in the second half of each q_proj head.

use anyhow::Result;
use mlx_rs::Array;

use super::attention::{self, Block};
use super::cache::KvCache;
use super::linear::{Linear, fuse_outputs, split_widths};
use super::norm::RmsNorm;
use crate::model::config::RopeSpec;
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
        // With the stacked product, the q/k kernel (where it serves) norms and rotates the
        // queries and keys straight from its rows; the gates and values are views of it either way.
        let (q, k, v, normed) = match &self.qkv {
            QkvProj::Separate { q, k, v } => (q.forward(x)?, k.forward(x)?, v.forward(x)?, None),
            QkvProj::Stacked(all) => {
                let p = all.forward(x)?;
                let heads = Heads { heads: nh, kv_heads: nkv, head_dim: hd, eps: self.q_norm.eps };
                let normed = if self.k_norm.eps == self.q_norm.eps && qk_norm_rope::serves(&p, heads, rope) {
                    let offsets: Vec<i32> = caches.iter().map(|c| c.offset()).collect();
                    Some(qk_norm_rope::apply(&p, &self.q_norm.weight, &self.k_norm.weight, heads, rope, &offsets)?)
                } else {
                    None
                };
                let [q, k, v] = <[Array; 3]>::try_from(split_widths(&p, &[2 * nh * hd, nkv * hd, nkv * hd])?)
                    .map_err(|_| anyhow::anyhow!("the stacked q/k/v projection did not split in three"))?;
                (q, k, v, normed)
            }
        };
        let q = q.reshape(&[b, t, nh, 2 * hd])?;
        let halves = mlx_rs::ops::split_equal(&q, 2, -1)?;
        let gate = halves[1].reshape(&[b, t, nh * hd])?;
        let values = v.reshape(&[b, t, nkv, hd])?.transpose_axes(&[0, 2, 1, 3])?;
        let (queries, keys, rope) = match normed {
            Some((queries, keys)) => (queries, keys, None),
            None => (
                self.q_norm.forward(&halves[0])?.transpose_axes(&[0, 2, 1, 3])?,
                self.k_norm.forward(&k.reshape(&[b, t, nkv, hd])?)?.transpose_axes(&[0, 2, 1, 3])?,
                Some(rope),
            ),
        };
        let block = Block { q: &queries, k: &keys, v: &values, rope, scale };
        let o = attention::attend(caches, &block)?;
        let o = o.transpose_axes(&[0, 2, 1, 3])?.reshape(&[b, t, nh * hd])?;
        self.o_proj.forward(&o.multiply(mlx_rs::ops::sigmoid(&gate)?)?)
    }

    pub fn nbytes(&self) -> usize {
        let qkv = match &self.qkv {
            QkvProj::Separate { q, k, v } => q.nbytes() + k.nbytes() + v.nbytes(),
            QkvProj::Stacked(all) => all.nbytes(),
        };
        qkv + self.o_proj.nbytes()
    }
}
