//! The MTP head as a pure function of its parameter map, for autograd. It is the inference
//! `LlamaModel::mtp_forward` on a fresh MTP history (positions from 0, causal attention over the
//! sequence): fc(concat(norm_e(embed(token)), norm_h(hidden))) -> one Llama decoder layer -> norm
//! -> the shared LM head. `tests/models/train_mtp.rs` checks the two agree.

use anyhow::{Context, Result};
use mlx_rs::Array;
use mlx_rs::fast::ScaledDotProductAttentionMask;

use super::frozen::Frozen;
use super::params::{self as p, HeadDims, Params};

fn get<'a>(params: &'a Params, name: &str) -> Result<&'a Array> {
    params.get(name).with_context(|| format!("head tensor \"{name}\" is missing"))
}

fn linear(params: &Params, prefix: &str, x: &Array) -> Result<Array> {
    Ok(mlx_rs::ops::matmul(x, get(params, &format!("{prefix}.weight"))?.t())?)
}

fn rms(params: &Params, name: &str, x: &Array, eps: f32) -> Result<Array> {
    Ok(mlx_rs::fast::rms_norm(x, Some(get(params, name)?), eps)?)
}

/// The head's final-norm state [B, T, H] for `hidden` [B, T, H] (the target's final-norm states
/// of positions 0..T) and `tokens` [B, T] (the tokens that follow them).
pub fn head_states(params: &Params, dims: &HeadDims, frozen: &Frozen, hidden: &Array, tokens: &Array) -> Result<Array> {
    let eps = dims.eps;
    let flat = tokens.flatten(None, None)?;
    let mut eshape = tokens.shape().to_vec();
    eshape.push(dims.hidden);
    let emb = frozen.embed.take_axis(&flat, 0)?.reshape(&eshape)?;
    let e = rms(params, p::PRE_NORM_EMBED, &emb, eps)?;
    let h = rms(params, p::PRE_NORM_HIDDEN, hidden, eps)?;
    let x = linear(params, p::FC, &mlx_rs::ops::concatenate(&[e, h], -1)?)?;

    let (b, t) = (x.shape()[0], x.shape()[1]);
    let (nh, nkv, hd) = (dims.heads, dims.kv_heads, dims.head_dim);
    let n = rms(params, p::INPUT_NORM, &x, eps)?;
    let split =
        |a: Array, heads: i32| -> Result<Array> { Ok(a.reshape(&[b, t, heads, hd])?.transpose_axes(&[0, 2, 1, 3])?) };
    let rope = |a: &Array| mlx_rs::fast::rope(a, hd, dims.rope_traditional, dims.rope_theta, 1.0, 0, None);
    let q = rope(&split(linear(params, p::Q, &n)?, nh)?)?;
    let k = rope(&split(linear(params, p::K, &n)?, nkv)?)?;
    let v = split(linear(params, p::V, &n)?, nkv)?;
    let mask = if t > 1 { Some(ScaledDotProductAttentionMask::Causal) } else { None };
    let o = mlx_rs::fast::scaled_dot_product_attention(&q, &k, &v, (hd as f32).powf(-0.5), mask, None)?;
    let o = o.transpose_axes(&[0, 2, 1, 3])?.reshape(&[b, t, nh * hd])?;
    let x = x.add(linear(params, p::O, &o)?)?;

    let n2 = rms(params, p::POST_NORM, &x, eps)?;
    let act = mlx_rs::nn::silu(linear(params, p::GATE, &n2)?)?.multiply(linear(params, p::UP, &n2)?)?;
    let x = x.add(linear(params, p::DOWN, &act)?)?;
    rms(params, p::FINAL_NORM, &x, eps)
}

/// Logits [B, T, V] through the frozen LM head.
pub fn head_logits(params: &Params, dims: &HeadDims, frozen: &Frozen, hidden: &Array, tokens: &Array) -> Result<Array> {
    let s = head_states(params, dims, frozen, hidden, tokens)?;
    Ok(mlx_rs::ops::matmul(&s, frozen.head_weight().t())?)
}
