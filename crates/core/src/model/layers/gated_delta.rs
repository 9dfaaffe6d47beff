//! Gated DeltaNet linear attention (Qwen3.5's `linear_attn`): a causal depthwise convolution with
//! a carried tail, q/k L2 normalisation, per-head decay and write gates, the delta-rule recurrence
//! over a [Hv, Dv, Dk] float32 state, a gated RMSNorm and the output projection.
//!
//! The mixer's arithmetic (`mix`) is written once for the plain ops (the CPU route, and the
//! reference the fused recurrence kernel is checked against) and the compiled graph that serves
//! steps and verifies on CUDA (`compiled.rs`).

use anyhow::Result;
use mlx_rs::{Array, Dtype};

use super::cache::{GdnState, gather_rows};
use super::compiled::{self, Traced, offsets, project};
use super::linear::{Linear, fuse_outputs, split_widths};
use crate::model::config::{QuantSpec, Qwen35Config};
use crate::model::cuda::gdn_kernel::{self, Recurrence, RecurrenceInputs};
use crate::model::formats::weights::Weights;
use crate::model::ops::{scalar_like, slice_axis};
use crate::model::storage::Storage;

/// The four input projections, or one product of their stacked rows (qkv | z | b | a).
enum InProj {
    Separate { qkv: Linear, z: Linear, b: Linear, a: Linear },
    Fused(Linear),
}

pub struct GatedDeltaNet {
    in_proj: InProj,
    out_proj: Linear,
    /// [conv_dim, K, 1]
    conv_weight: Array,
    a_log: Array,
    dt_bias: Array,
    norm_weight: Array,
    eps: f32,
    key_heads: i32,
    key_dim: i32,
    value_heads: i32,
    value_dim: i32,
    kernel: i32,
}

/// The state of every row after each position of a block (for a verify that may keep fewer).
pub type PositionStates = Vec<Vec<GdnState>>;

impl GatedDeltaNet {
    pub fn load(
        w: &mut Weights,
        prefix: &str,
        cfg: &Qwen35Config,
        quant: &dyn Fn(&str) -> Option<QuantSpec>,
    ) -> Result<Self> {
        let h = cfg.hidden_size;
        let (hk, dk, hv, dv) =
            (cfg.linear_num_key_heads, cfg.linear_key_head_dim, cfg.linear_num_value_heads, cfg.linear_value_head_dim);
        let conv_dim = cfg.conv_dim();
        let lin = |w: &mut Weights, name: &str, i, o| {
            Linear::load(w, &format!("{prefix}.{name}"), i, o, quant(&format!("{prefix}.{name}")))
        };
        let parts = ["in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a"];
        let in_proj = if crate::model::routes::current().stacks(crate::model::routes::Stack::Gdn)
            && fuse_outputs(w, prefix, &parts, "in_proj_fused", h, quant)?
        {
            // The parts' storage was checked against the config; the stacked module has no entry.
            let name = format!("{prefix}.in_proj_fused");
            InProj::Fused(Linear::load(w, &name, h, conv_dim + hv * dv + 2 * hv, None)?)
        } else {
            InProj::Separate {
                qkv: lin(w, "in_proj_qkv", h, conv_dim)?,
                z: lin(w, "in_proj_z", h, hv * dv)?,
                b: lin(w, "in_proj_b", h, hv)?,
                a: lin(w, "in_proj_a", h, hv)?,
            }
        };
        Ok(Self {
            in_proj,
            out_proj: lin(w, "out_proj", hv * dv, h)?,
            conv_weight: w
                .take_shaped(&format!("{prefix}.conv1d.weight"), &[conv_dim, cfg.linear_conv_kernel_dim, 1])?,
            a_log: w.take_shaped(&format!("{prefix}.A_log"), &[hv])?,
            dt_bias: w.take_shaped(&format!("{prefix}.dt_bias"), &[hv])?,
            norm_weight: w.take_shaped(&format!("{prefix}.norm.weight"), &[dv])?,
            eps: cfg.rms_norm_eps,
            key_heads: hk,
            key_dim: dk,
            value_heads: hv,
            value_dim: dv,
            kernel: cfg.linear_conv_kernel_dim,
        })
    }

    /// x [B, T, H]; `states[b]` is row b's state for this layer, updated in place. With
    /// `capture`, also returns every row's state after each of the T positions.
    pub fn forward(
        &self,
        x: &Array,
        states: &mut [&mut GdnState],
        capture: bool,
    ) -> Result<(Array, Option<PositionStates>)> {
        let (b, t) = (x.shape()[0], x.shape()[1]);
        let (hk, dk, hv, dv, k) = (self.key_heads, self.key_dim, self.value_heads, self.value_dim, self.kernel);
        let conv_dim = 2 * hk * dk + hv * dv;
        let plan = self.plan(capture);
        // After a verify the fused front can read each row's tail and state where they lie.
        let placed = if plan.fused_front && crate::model::routes::current().gdn_state_in_place {
            super::gdn_batch::placed(states)
        } else {
            None
        };
        let plan = GdnPlan { placed: placed.is_some(), ..plan };
        let whole = if placed.is_none() { super::gdn_batch::whole(states)? } else { None };
        let (tail, state, place) = match (placed, whole) {
            (Some(p), _) => (p.conv, p.ssm, Some(p.place)),
            (None, Some((tail, state))) => (tail, state, None),
            (None, None) => {
                let tails = states.iter().map(|s| s.conv()).collect::<Result<Vec<_>>>()?;
                let ssms = states.iter().map(|s| s.ssm()).collect::<Result<Vec<_>>>()?;
                (
                    gather_rows(&tails, &[1, k - 1, conv_dim], x.dtype())?,
                    gather_rows(&ssms, &[1, hv, dv, dk], Dtype::Float32)?,
                    None,
                )
            }
        };

        let serves = compiled::serves(compiled_enabled(), b * t);
        let mixed = match serves.then(|| self.graph_weights()).flatten() {
            Some((storage, weights)) => {
                let mut inputs = vec![x.clone(), tail, state, self.conv_weight.clone()];
                inputs.extend([self.a_log.clone(), self.dt_bias.clone(), self.norm_weight.clone()]);
                inputs.extend(place);
                inputs.extend(weights);
                compiled::run(GdnPlan { storage, ..plan }, &inputs)?
            }
            None => {
                let params = [&self.conv_weight, &self.a_log, &self.dt_bias, &self.norm_weight];
                let proj = |p: GdnProj, x: &Array| match self.projection(p) {
                    Some(l) => l.forward(x),
                    None => anyhow::bail!("the {p:?} projection is folded into the stacked input projection"),
                };
                mix(x, &tail, &state, params, place.as_ref(), &plan, &proj)?
            }
        };
        let [out, conv_in, state, per_position] = <[Array; 4]>::try_from(mixed)
            .map_err(|v| anyhow::anyhow!("the Gated DeltaNet mixer returned {} arrays, not 4", v.len()))?;

        // Hand each row its new state back. After a verify that is the capture's last position
        // (the same values as the final state), so rows that keep every position and rows put
        // back to an earlier one still share one batch (gdn_batch::whole).
        let positions = capture.then(|| super::gdn_batch::after_verify(&conv_in, &per_position, k));
        let new = match positions.as_ref().and_then(|p| p.last()) {
            Some(last) => last.clone(),
            None => {
                let total = conv_in.shape()[1];
                super::gdn_batch::after_step(&slice_axis(&conv_in, 1, total - (k - 1), total)?, &state)
            }
        };
        anyhow::ensure!(new.len() == states.len(), "the mixer returned {} rows' states for {} rows", new.len(), b);
        for (s, new) in states.iter_mut().zip(new) {
            **s = new;
        }
        debug_assert!(positions.as_ref().is_none_or(|p| p.len() == t as usize));
        Ok((out, positions))
    }

    /// A projection's layer; `None` for one folded into the stacked input projection (which
    /// stands in [`GdnProj::Qkv`]'s place).
    fn projection(&self, p: GdnProj) -> Option<&Linear> {
        match (&self.in_proj, p) {
            (_, GdnProj::Out) => Some(&self.out_proj),
            (InProj::Fused(all), GdnProj::Qkv) => Some(all),
            (InProj::Fused(_), _) => None,
            (InProj::Separate { qkv, .. }, GdnProj::Qkv) => Some(qkv),
            (InProj::Separate { z, .. }, GdnProj::Z) => Some(z),
            (InProj::Separate { b, .. }, GdnProj::B) => Some(b),
            (InProj::Separate { a, .. }, GdnProj::A) => Some(a),
        }
    }

    /// The layer's sizes and switches; the storage is filled in by the compiled route.
    fn plan(&self, capture: bool) -> GdnPlan {
        GdnPlan {
            storage: [Storage::Dense; 5],
            key_heads: self.key_heads,
            key_dim: self.key_dim,
            value_heads: self.value_heads,
            value_dim: self.value_dim,
            kernel: self.kernel,
            eps_bits: self.eps.to_bits(),
            fused_recurrence: gdn_kernel::enabled(),
            fused_in: matches!(self.in_proj, InProj::Fused(_)),
            fused_front: matches!(self.in_proj, InProj::Fused(_)) && gdn_kernel::fused_front_enabled(),
            fused_norm: gdn_kernel::fused_norm_enabled(),
            capture,
            placed: false,
        }
    }

    /// Every projection's storage and arrays in [`GdnProj`] order, when all of them are plain
    /// MLX storage (the compiled route cannot take the CPU kernel's).
    fn graph_weights(&self) -> Option<([Storage; 5], Vec<Array>)> {
        let parts = GdnProj::ALL.map(|p| match self.projection(p) {
            Some(l) => l.graph_inputs(),
            None => Some((Storage::Folded, Vec::new())),
        });
        let mut storage = [Storage::Dense; 5];
        let mut weights = Vec::new();
        for (i, part) in parts.into_iter().enumerate() {
            let (s, w) = part?;
            storage[i] = s;
            weights.extend(w);
        }
        Some((storage, weights))
    }

    pub fn nbytes(&self) -> usize {
        GdnProj::ALL.iter().filter_map(|&p| self.projection(p)).map(Linear::nbytes).sum()
    }
}

/// The projections of the mixer, in [`GdnPlan::storage`] order.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum GdnProj {
    Qkv = 0,
    Z = 1,
    B = 2,
    A = 3,
    Out = 4,
}

impl GdnProj {
    const ALL: [GdnProj; 5] = [GdnProj::Qkv, GdnProj::Z, GdnProj::B, GdnProj::A, GdnProj::Out];
}

/// Everything about a mixer that is not an array, as the compiled graph is traced from it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct GdnPlan {
    pub storage: [Storage; 5],
    pub key_heads: i32,
    pub key_dim: i32,
    pub value_heads: i32,
    pub value_dim: i32,
    pub kernel: i32,
    /// The gated RMSNorm's epsilon as bits (a plan is hashed).
    pub eps_bits: u32,
    /// The fused CUDA recurrence, else the plain-ops loop.
    pub fused_recurrence: bool,
    /// The input projections as one stacked product ([`GdnProj::Qkv`]'s slot; the rest folded).
    pub fused_in: bool,
    /// Everything from the stacked product to the recurrence in one kernel
    /// ([`gdn_kernel::recur_fused`]; needs `fused_in`).
    pub fused_front: bool,
    /// The gated norm in the fused front too, for short blocks ([`gdn_kernel::norm_folds`]),
    /// which then reads the stacked product with its load padding.
    pub fused_norm: bool,
    pub capture: bool,
    /// The tail and state come as a verify's whole arrays with each row's place in them
    /// ([`super::gdn_batch::Placed`]), read in place by the fused front.
    pub placed: bool,
}

/// The mixer as a compiled graph (`Routes::compile_gdn`).
pub fn compiled_enabled() -> bool {
    crate::model::routes::current().compile_gdn
}

/// The mixer for rows already gathered, written once for both routes: x [B, T, H], the carried
/// convolution tail [B, K-1, C] and recurrent state [B, Hv, Dv, Dk] float32; `params` are the
/// convolution weight, A_log, dt_bias and the norm's weight; with `place`, tail and state are a
/// verify's whole arrays and each row's place in them (the fused front only); `proj` applies a
/// projection. Returns [output [B, T, H], the convolution's input [B, K-1+T, C], the new state, the state
/// after each position [B, T, Hv, Dv, Dk] (a placeholder without `capture`)].
fn mix(
    x: &Array,
    tail: &Array,
    state: &Array,
    params: [&Array; 4],
    place: Option<&Array>,
    plan: &GdnPlan,
    proj: &dyn Fn(GdnProj, &Array) -> Result<Array>,
) -> Result<Vec<Array>> {
    let [conv_weight, a_log, dt_bias, norm_weight] = params;
    let (b, t) = (x.shape()[0], x.shape()[1]);
    let (hk, dk, hv, dv) = (plan.key_heads, plan.key_dim, plan.value_heads, plan.value_dim);
    let conv_dim = 2 * hk * dk + hv * dv;
    let dtype = x.dtype();

    if plan.fused_front {
        // With the norm folding, the product may keep its load padding (read in place).
        let all = proj(GdnProj::Qkv, x)?;
        // A fresh row's tail is zeros in the activation dtype, which the product's can differ
        // from (float32 scales promote it); the kernel reads both as one type.
        let tail = if tail.dtype() == all.dtype() { tail.clone() } else { tail.as_dtype(all.dtype())? };
        let inputs = gdn_kernel::FusedInputs { proj: &all, tail: &tail, conv_weight, a_log, dt_bias, state, place };
        let heads =
            gdn_kernel::Heads { key_heads: hk, key_dim: dk, value_heads: hv, value_dim: dv, kernel: plan.kernel };
        let eps = f32::from_bits(plan.eps_bits);
        let folds = plan.fused_norm && gdn_kernel::norm_folds(t, all.dtype(), norm_weight, dtype, dv);
        let norm = folds.then_some(gdn_kernel::GatedNorm { weight: norm_weight, eps });
        let gdn_kernel::Fused { out, state: last, per_position, conv_in } =
            gdn_kernel::recur_fused(&inputs, heads, plan.capture, norm)?;
        return match out {
            gdn_kernel::FusedOut::Gated(gated) => {
                let per_position = per_position.unwrap_or_else(|| last.clone());
                Ok(vec![proj(GdnProj::Out, &gated)?, conv_in, last, per_position])
            }
            gdn_kernel::FusedOut::Raw(y) => {
                // Sliced, not split: the product may be wider than its parts.
                let z = slice_axis(&all, 2, conv_dim, conv_dim + hv * dv)?.reshape(&[b, t, hv, dv])?;
                finish(Recurrence { y, state: last, per_position }, &z, conv_in, norm_weight, plan, proj, dtype)
            }
        };
    }
    anyhow::ensure!(place.is_none(), "only the fused front reads a verify's arrays in place");
    let [qkv, z, beta_in, a] = if plan.fused_in {
        let parts = split_widths(&proj(GdnProj::Qkv, x)?, &[conv_dim, hv * dv, hv, hv])?;
        <[Array; 4]>::try_from(parts)
            .map_err(|_| anyhow::anyhow!("the stacked input projection did not split in four"))?
    } else {
        [proj(GdnProj::Qkv, x)?, proj(GdnProj::Z, x)?, proj(GdnProj::B, x)?, proj(GdnProj::A, x)?]
    };
    let z = z.reshape(&[b, t, hv, dv])?;
    let beta = mlx_rs::ops::sigmoid(beta_in)?;

    // Causal depthwise convolution over [carried tail | new rows].
    let conv_in = mlx_rs::ops::concatenate(&[tail.clone(), qkv], 1)?;
    let conv_out = mlx_rs::nn::silu(mlx_rs::ops::conv1d(&conv_in, conv_weight, 1, 0, 1, conv_dim)?)?;

    let parts = mlx_rs::ops::split_at_indices(&conv_out, &[hk * dk, 2 * hk * dk], -1)?;
    let q = parts[0].reshape(&[b, t, hk, dk])?;
    let kk = parts[1].reshape(&[b, t, hk, dk])?;
    let v = parts[2].reshape(&[b, t, hv, dv])?;
    // L2 normalisation as rms_norm with eps/Dk; queries also take the 1/sqrt(Dk) scale.
    let inv = (dk as f32).powf(-0.5);
    let norm_eps = 1e-6 / dk as f32;
    let q = mlx_rs::fast::rms_norm(&q, None, norm_eps)?.multiply(scalar_like(inv * inv, &q)?)?;
    let kk = mlx_rs::fast::rms_norm(&kk, None, norm_eps)?.multiply(scalar_like(inv, &kk)?)?;

    // g = exp(-exp(A_log) * softplus(a + dt_bias)), float32.
    let softplus = mlx_rs::nn::softplus(a.add(dt_bias)?)?;
    let decay_rate = mlx_rs::ops::exp(a_log.as_dtype(Dtype::Float32)?)?;
    let g = mlx_rs::ops::exp(decay_rate.multiply(softplus)?.negative()?)?;

    let inputs = RecurrenceInputs { q: &q, k: &kk, v: &v, g: &g, beta: &beta, state };
    let rec = if plan.fused_recurrence {
        gdn_kernel::recur(&inputs, plan.capture)?
    } else {
        recur_ops(&inputs, plan.capture)?
    };
    finish(rec, &z, conv_in, norm_weight, plan, proj, dtype)
}

/// The mixer after the recurrence: the gated RMSNorm and the output projection, and the arrays
/// `mix` returns.
fn finish(
    rec: Recurrence,
    z: &Array,
    conv_in: Array,
    norm_weight: &Array,
    plan: &GdnPlan,
    proj: &dyn Fn(GdnProj, &Array) -> Result<Array>,
    dtype: Dtype,
) -> Result<Vec<Array>> {
    let zs = z.shape();
    let (b, t, hv, dv) = (zs[0], zs[1], zs[2], zs[3]);
    let y = rec.y.as_dtype(dtype)?; // [B, T, Hv, Dv]

    // Gated RMSNorm: normalise per head, then gate with silu(z) in float32.
    let normed = mlx_rs::fast::rms_norm(&y, Some(norm_weight), f32::from_bits(plan.eps_bits))?;
    let gated =
        mlx_rs::nn::silu(z.as_dtype(Dtype::Float32)?)?.multiply(normed.as_dtype(Dtype::Float32)?)?.as_dtype(dtype)?;
    let out = proj(GdnProj::Out, &gated.reshape(&[b, t, hv * dv])?)?;
    // A compiled function returns arrays only: without capture, the state stands in for it.
    let per_position = rec.per_position.unwrap_or_else(|| rec.state.clone());
    Ok(vec![out, conv_in, rec.state, per_position])
}

/// The mixer from its inputs `[x, tail, state, conv weight, A_log, dt_bias, norm weight, (the
/// rows' places when `plan.placed`), projections in plan order...]`, as the compiled function
/// traces it.
impl Traced for GdnPlan {
    fn trace(&self, inputs: &[Array]) -> Result<Vec<Array>> {
        mix_from_inputs(inputs, self)
    }
}

fn mix_from_inputs(inputs: &[Array], plan: &GdnPlan) -> Result<Vec<Array>> {
    let fixed = if plan.placed { 8 } else { 7 };
    let (at, next) = offsets(&plan.storage, fixed);
    anyhow::ensure!(inputs.len() == next, "the Gated DeltaNet graph takes {next} inputs, got {}", inputs.len());
    let proj = |p: GdnProj, x: &Array| {
        let i = p as usize;
        let arrays = &inputs[at[i]..at[i] + plan.storage[i].inputs()];
        // The fused front reads the stacked product in place, padding and all, sparing the
        // slice and the copy that cutting it back costs.
        if p == GdnProj::Qkv && plan.fused_front && plan.fused_norm {
            return super::product::served_padded(x, arrays, plan.storage[i]);
        }
        project(x, arrays, plan.storage[i])
    };
    let place = plan.placed.then(|| &inputs[7]);
    mix(&inputs[0], &inputs[1], &inputs[2], [&inputs[3], &inputs[4], &inputs[5], &inputs[6]], place, plan, &proj)
}

/// The recurrence as plain MLX ops, one small graph per position: the CPU and Metal route, and
/// the fallback the fused kernel is measured against.
pub fn recur_ops(x: &RecurrenceInputs, capture: bool) -> Result<Recurrence> {
    let RecurrenceInputs { q, k, v, g, beta, state } = *x;
    let t = q.shape()[1];
    // Value head h reads key head h / (Hv/Hk): repeat each key head in place.
    let repeat = v.shape()[2] / q.shape()[2];
    let (q, k) = if repeat > 1 {
        (mlx_rs::ops::repeat_axis::<f32>(q.clone(), repeat, 2)?, mlx_rs::ops::repeat_axis::<f32>(k.clone(), repeat, 2)?)
    } else {
        (q.clone(), k.clone())
    };
    let mut state = state.as_dtype(Dtype::Float32)?;
    let mut ys = Vec::with_capacity(t as usize);
    let mut captured: Vec<Array> = Vec::new();
    for i in 0..t {
        let step = |a: &Array| -> Result<Array> { Ok(slice_axis(a, 1, i, i + 1)?.squeeze_axes(&[1])?) };
        let (qt, kt, vt, gt, bt) = (step(&q)?, step(&k)?, step(v)?, step(g)?, step(beta)?);
        state = state.multiply(gt.expand_dims_axes(&[-1, -2])?)?;
        let k_row = kt.expand_dims(-2)?;
        let kv_mem = state.multiply(&k_row)?.sum_axis(-1, None)?;
        let delta = vt.subtract(kv_mem)?.multiply(bt.expand_dims(-1)?)?;
        state = state.add(k_row.multiply(delta.expand_dims(-1)?)?)?;
        ys.push(state.multiply(qt.expand_dims(-2)?)?.sum_axis(-1, None)?);
        if capture {
            captured.push(state.clone());
        }
    }
    let per_position = if capture { Some(mlx_rs::ops::stack(&captured, 1)?) } else { None };
    Ok(Recurrence { y: mlx_rs::ops::stack(&ys, 1)?, state, per_position })
}
