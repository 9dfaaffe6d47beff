//! The fused Gated DeltaNet recurrence on CUDA (`gated_delta.cu`, through
//! [`super::cuda_kernel`]). The plain-ops loop in `gated_delta.rs` stays the fallback (CPU, Metal,
//! `COHORT_GDN_KERNEL=0`) and the reference the kernel is checked against.

use anyhow::{Result, bail};
use mlx_rs::{Array, Dtype};

use super::cuda_kernel::{CudaKernel, KernelCell, Launch};

const SOURCE: &str = include_str!("gated_delta.cu");
const INPUTS: [&str; 6] = ["q", "k", "v", "g", "beta", "state_in"];
const OUTPUTS: [&str; 3] = ["y", "state_out", "states"];
/// Value channels per thread block (one warp each).
const CHANNELS_PER_BLOCK: i32 = 4;

/// The recurrence's outputs: y [B, T, Hv, Dv] and the final state [B, Hv, Dv, Dk] (float32), and
/// with capture the state after every position [B, T, Hv, Dv, Dk].
pub struct Recurrence {
    pub y: Array,
    pub state: Array,
    pub per_position: Option<Array>,
}

/// What either route of the recurrence reads: q, k [B, T, Hk, Dk] (normalised and scaled),
/// v [B, T, Hv, Dv], the decay g and write strength beta [B, T, Hv], and the carried state
/// [B, Hv, Dv, Dk] float32.
pub struct RecurrenceInputs<'a> {
    pub q: &'a Array,
    pub k: &'a Array,
    pub v: &'a Array,
    pub g: &'a Array,
    pub beta: &'a Array,
    pub state: &'a Array,
}

/// The recurrence kernel serves (`Routes::gdn_kernel`: where MLX drives CUDA, unless turned off).
pub fn enabled() -> bool {
    crate::model::routes::current().gdn_kernel
}

fn kernel() -> Result<&'static CudaKernel> {
    static KERNEL: KernelCell = KernelCell::new();
    KERNEL.get_or_build(|| CudaKernel::new("cohort_gated_delta", "gated_delta.cu", &INPUTS, &OUTPUTS, SOURCE, None))
}

/// Run every position of a block through the recurrence in one launch.
pub fn recur(x: &RecurrenceInputs, capture: bool) -> Result<Recurrence> {
    let RecurrenceInputs { q, k, v, g, beta, state } = *x;
    let (qs, vs, ss) = (q.shape(), v.shape(), state.shape());
    if qs.len() != 4 || vs.len() != 4 {
        bail!("the Gated DeltaNet kernel takes q, k, v as [B, T, heads, dim] (q {qs:?}, v {vs:?})");
    }
    let (b, t, hk, dk) = (qs[0], qs[1], qs[2], qs[3]);
    let (hv, dv) = (vs[2], vs[3]);
    // Every input the kernel indexes is checked: a mismatch would read past a buffer on the device.
    if dk % 32 != 0
        || hk == 0
        || hv % hk != 0
        || k.shape() != qs
        || vs[..2] != qs[..2]
        || ss != [b, hv, dv, dk]
        || g.shape() != [b, t, hv]
        || beta.shape() != [b, t, hv]
    {
        bail!("the Gated DeltaNet kernel does not fit these shapes (q {qs:?}, v {vs:?}, state {ss:?})");
    }
    let state = state.as_dtype(Dtype::Float32)?;
    let f32 = Dtype::Float32;
    let launch = Launch {
        outputs: vec![
            (vec![b, t, hv, dv], f32),
            (vec![b, hv, dv, dk], f32),
            (if capture { vec![b, t, hv, dv, dk] } else { vec![1] }, f32),
        ],
        grid: [32, dv, b * hv],
        threads: [32, CHANNELS_PER_BLOCK, 1],
        ints: &[("HK", hk), ("HV", hv), ("DK", dk), ("DV", dv)],
        bools: &[("CAPTURE", capture)],
    };
    let mut arrays = kernel()?.apply(&[q, k, v, g, beta, &state], &launch)?;
    let per_position = arrays.pop().filter(|_| capture);
    let state = arrays.pop().expect("three outputs");
    let y = arrays.pop().expect("three outputs");
    Ok(Recurrence { y, state, per_position })
}

const FUSED_SOURCE: &str = include_str!("gated_delta_fused.cu");
/// Rounding to the model's element type, which the body sees only as a pointer.
const FUSED_HEADER: (&str, &str) = ("round_to.cuh", include_str!("round_to.cuh"));
const FUSED_INPUTS: [&str; 8] = ["proj", "tail", "conv_w", "a_log", "dt_bias", "state_in", "norm_w", "place"];
const FUSED_OUTPUTS: [&str; 5] = ["y", "state_out", "states", "conv_in", "out"];

/// Whether a mixer whose input projections are stacked runs its front in the recurrence kernel.
pub fn fused_front_enabled() -> bool {
    crate::model::routes::current().gdn_front_fused()
}

/// Whether the fused front also does the gated RMSNorm after the recurrence, for blocks of at
/// most [`NORM_MAX_POSITIONS`] positions, and reads a padded input product in place: on wherever
/// the fused front serves (measured on the H200: B1 6.66 against 7.25 ms, verify 20.55 against
/// 21.48 ms, docs/benchmarks.md, session 30); `COHORT_GDN_FUSED_NORM=0` turns it off.
pub fn fused_norm_enabled() -> bool {
    crate::model::routes::current().gdn_norm_fused()
}

/// The most positions a block may have for the norm to fold: it needs a whole head in one thread
/// block, so a long prefill keeps the layout of a few channels a block, which spreads its long
/// sequential recurrence over more of the device.
pub const NORM_MAX_POSITIONS: i32 = 16;

/// Value channels a block in the layout without the norm, and the warps a block with it.
const CHANNELS_UNFOLDED: i32 = 4;
const WARPS_FOLDED: i32 = 16;

fn fused_kernel() -> Result<&'static CudaKernel> {
    static KERNEL: KernelCell = KernelCell::new();
    KERNEL.get_or_build(|| {
        CudaKernel::new(
            "cohort_gated_delta_fused",
            "gated_delta_fused.cu",
            &FUSED_INPUTS,
            &FUSED_OUTPUTS,
            FUSED_SOURCE,
            Some(FUSED_HEADER),
        )
    })
}

/// What the fused front reads: the stacked input projection's product [B, T, P] ([qkv | z | b |
/// a], possibly followed by load padding), the carried convolution tail [B, K-1, C], the
/// convolution weight [C, K, 1], A_log and dt_bias [Hv], and the carried state [B, Hv, Dv, Dk]
/// float32.
pub struct FusedInputs<'a> {
    pub proj: &'a Array,
    pub tail: &'a Array,
    pub conv_weight: &'a Array,
    pub a_log: &'a Array,
    pub dt_bias: &'a Array,
    pub state: &'a Array,
    /// With a place [B, 2] int32, `tail` and `state` are a verify's arrays as it left them (its
    /// convolution input [B, L, C] and per-position states [B, S, Hv, Dv, Dk]), and row b's
    /// carried rows start at place[b, 1] and its state is at position place[b, 0]: read where
    /// they lie, with no copy of a strided slice before the launch.
    pub place: Option<&'a Array>,
}

/// The mixer's head sizes and convolution width.
#[derive(Clone, Copy, Debug)]
pub struct Heads {
    pub key_heads: i32,
    pub key_dim: i32,
    pub value_heads: i32,
    pub value_dim: i32,
    pub kernel: i32,
}

/// The gated RMSNorm after the recurrence: its weight [Dv] and epsilon.
#[derive(Clone, Copy)]
pub struct GatedNorm<'a> {
    pub weight: &'a Array,
    pub eps: f32,
}

/// What the recurrence hands on: its raw output y [B, T, Hv, Dv] float32, or with the norm
/// folded in the gated, normed output [B, T, Hv*Dv] in the model's dtype, ready for the output
/// projection.
pub enum FusedOut {
    Raw(Array),
    Gated(Array),
}

/// The fused front's outputs: [`FusedOut`], the final state [B, Hv, Dv, Dk] float32, with
/// capture the state after every position, and the convolution's input [B, K-1+T, C].
pub struct Fused {
    pub out: FusedOut,
    pub state: Array,
    pub per_position: Option<Array>,
    pub conv_in: Array,
}

/// Whether the norm, where [`fused_norm_enabled`], can fold into a front of `t` positions whose
/// product is `proj_dtype`: a block short enough, and one element type for the product, the
/// norm's weight and the mixer's output (the ops route rounds to that type between the steps).
pub fn norm_folds(t: i32, proj_dtype: Dtype, norm_weight: &Array, out_dtype: Dtype, value_dim: i32) -> bool {
    (1..=NORM_MAX_POSITIONS).contains(&t)
        && proj_dtype == out_dtype
        && norm_weight.dtype() == out_dtype
        && norm_weight.shape() == [value_dim]
        && matches!(out_dtype, Dtype::Float32 | Dtype::Bfloat16 | Dtype::Float16)
}

/// Convolution, SiLU, q/k normalisation, decay and write gates and the recurrence in one launch
/// (`gated_delta_fused.cu`), and with `norm` the gated RMSNorm after it: the outputs
/// the ops front, [`recur`] and (with `norm`) the ops norm give. The caller decides `norm` with
/// [`norm_folds`].
pub fn recur_fused(x: &FusedInputs, heads: Heads, capture: bool, norm: Option<GatedNorm>) -> Result<Fused> {
    let Heads { key_heads: hk, key_dim: dk, value_heads: hv, value_dim: dv, kernel: ks } = heads;
    let (ps, ts, ss) = (x.proj.shape(), x.tail.shape(), x.state.shape());
    let c = 2 * hk * dk + hv * dv;
    let (b, t) = (ps.first().copied().unwrap_or(0), ps.get(1).copied().unwrap_or(0));
    let fits = dk % 32 == 0
        && hk > 0
        && hv % hk == 0
        && dv > 0
        && ks >= 1
        && ps.len() == 3
        && ps[2] >= c + hv * dv + 2 * hv
        && match x.place {
            None => ts == [b, ks - 1, c] && ss == [b, hv, dv, dk],
            Some(place) => {
                ts.len() == 3
                    && ts[0] == b
                    && ts[1] >= ks - 1
                    && ts[2] == c
                    && ss.len() == 5
                    && ss[0] == b
                    && ss[2..] == [hv, dv, dk]
                    && place.shape() == [b, 2]
                    && place.dtype() == Dtype::Int32
            }
        }
        && x.conv_weight.shape() == [c, ks, 1]
        && x.a_log.shape() == [hv]
        && x.dt_bias.shape() == [hv]
        && x.tail.dtype() == x.proj.dtype()
        && norm.is_none_or(|n| n.weight.shape() == [dv] && n.weight.dtype() == x.proj.dtype());
    if !fits {
        bail!(
            "the fused Gated DeltaNet front does not fit these shapes (proj {ps:?}, tail {ts:?}, state {ss:?}, conv {:?})",
            x.conv_weight.shape()
        );
    }
    let state = x.state.as_dtype(Dtype::Float32)?;
    let (f32, dtype) = (Dtype::Float32, x.proj.dtype());
    // With the norm a block is a whole head, its channels shared among the warps; without it a
    // block is a few channels, one warp each.
    let (per_block, warps) = match norm {
        Some(_) => (dv, WARPS_FOLDED.min(dv)),
        None => (CHANNELS_UNFOLDED, CHANNELS_UNFOLDED),
    };
    let blocks_y = (dv + per_block - 1) / per_block;
    let placeholder = vec![1];
    let launch = Launch {
        outputs: vec![
            (if norm.is_some() { placeholder.clone() } else { vec![b, t, hv, dv] }, f32),
            (vec![b, hv, dv, dk], f32),
            (if capture { vec![b, t, hv, dv, dk] } else { placeholder.clone() }, f32),
            (vec![b, ks - 1 + t, c], dtype),
            (if norm.is_some() { vec![b, t, hv * dv] } else { placeholder }, dtype),
        ],
        grid: [32, blocks_y * warps, b * hv],
        threads: [32, warps, 1],
        ints: &[
            ("HK", hk),
            ("HV", hv),
            ("DK", dk),
            ("DV", dv),
            ("KS", ks),
            ("CPB", per_block),
            ("WARPS", warps),
            ("EPS_BITS", norm.map_or(0, |n| n.eps.to_bits() as i32)),
        ],
        bools: &[("CAPTURE", capture), ("NORM", norm.is_some()), ("PLACED", x.place.is_some())],
    };
    // Without the norm its weight is not read, nor without a place the place: the state stands
    // in for them.
    let norm_w = norm.map_or(&state, |n| n.weight);
    let place = x.place.unwrap_or(&state);
    let inputs = [x.proj, x.tail, x.conv_weight, x.a_log, x.dt_bias, &state, norm_w, place];
    let mut arrays = fused_kernel()?.apply(&inputs, &launch)?;
    let gated = arrays.pop().expect("five outputs");
    let conv_in = arrays.pop().expect("five outputs");
    let per_position = arrays.pop().filter(|_| capture);
    let state = arrays.pop().expect("five outputs");
    let y = arrays.pop().expect("five outputs");
    let out = if norm.is_some() { FusedOut::Gated(gated) } else { FusedOut::Raw(y) };
    Ok(Fused { out, state, per_position, conv_in })
}
