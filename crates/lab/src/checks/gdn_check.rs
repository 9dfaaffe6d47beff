//! Checks a Gated DeltaNet recurrence route (the fused CUDA kernel or the plain-ops loop) against
//! a float64 host reference written here from the delta rule itself, on random inputs of a given
//! geometry. Used by `cohort-lab device --check-kernels` and by `tests/kernels/gdn_kernel.rs`.

use anyhow::Result;
use mlx_rs::{Array, Dtype};

use cohort_core::model::cuda::gdn_kernel::{self, Recurrence, RecurrenceInputs};
use cohort_core::model::layers::gated_delta::recur_ops;
use cohort_core::model::ops::{host_f32, relative_error};
use cohort_core::platform::rng::Rng;

#[derive(Debug, Clone, Copy)]
pub struct Geometry {
    pub rows: i32,
    pub positions: i32,
    pub key_heads: i32,
    pub value_heads: i32,
    pub key_dim: i32,
    pub value_dim: i32,
    pub capture: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    Kernel,
    Ops,
}

/// Largest absolute difference from the reference, relative to the reference's largest magnitude.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct CheckReport {
    pub y: f64,
    pub state: f64,
    pub per_position: Option<f64>,
}

impl CheckReport {
    pub fn worst(&self) -> f64 {
        self.y.max(self.state).max(self.per_position.unwrap_or(0.0))
    }
}

/// Host inputs, already rounded to the dtype the device sees.
struct Inputs {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    g: Vec<f32>,
    beta: Vec<f32>,
    state: Vec<f32>,
}

fn normal(rng: &mut Rng) -> f32 {
    // Box-Muller: enough for test inputs.
    let (u1, u2) = (rng.next_f64().max(1e-12), rng.next_f64());
    ((-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()) as f32
}

/// Unit-length key/query vectors (as the model's L2 normalisation makes them), scaled queries,
/// decays in (0.5, 1), write strengths in (0, 1), unit-variance values and a small carried state.
fn random_inputs(geo: &Geometry, seed: u64) -> (Inputs, Vec<i32>, Vec<i32>) {
    let mut rng = Rng::new(seed);
    let (b, t, hk, hv, dk, dv) = (geo.rows, geo.positions, geo.key_heads, geo.value_heads, geo.key_dim, geo.value_dim);
    let unit_rows = |rng: &mut Rng, scale: f32| -> Vec<f32> {
        let mut out = Vec::with_capacity((b * t * hk * dk) as usize);
        for _ in 0..b * t * hk {
            let v: Vec<f32> = (0..dk).map(|_| normal(rng)).collect();
            let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            out.extend(v.iter().map(|x| x / norm * scale));
        }
        out
    };
    let q = unit_rows(&mut rng, (dk as f32).powf(-0.5));
    let k = unit_rows(&mut rng, 1.0);
    let v = (0..b * t * hv * dv).map(|_| normal(&mut rng)).collect();
    let g = (0..b * t * hv).map(|_| 0.5 + 0.5 * rng.next_f64() as f32).collect();
    let beta = (0..b * t * hv).map(|_| rng.next_f64() as f32).collect();
    let state = (0..b * hv * dv * dk).map(|_| 0.1 * normal(&mut rng)).collect();
    (Inputs { q, k, v, g, beta, state }, vec![b, t, hk, dk], vec![b, t, hv, dv])
}

/// The delta rule per (row, value head): S <- g S; S <- S + beta k (v - S k)^T; y = S q, with S
/// stored [Dv, Dk]. Returns (y [B,T,Hv,Dv], final state [B,Hv,Dv,Dk], per-position states).
fn reference(geo: &Geometry, x: &Inputs) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let (b, t, hk, hv, dk, dv) = (
        geo.rows as usize,
        geo.positions as usize,
        geo.key_heads as usize,
        geo.value_heads as usize,
        geo.key_dim as usize,
        geo.value_dim as usize,
    );
    let mut state: Vec<f64> = x.state.iter().map(|&s| s as f64).collect();
    let mut y = vec![0.0; b * t * hv * dv];
    let mut per_position = if geo.capture { vec![0.0; b * t * hv * dv * dk] } else { Vec::new() };
    for bi in 0..b {
        for h in 0..hv {
            let kh = h / (hv / hk);
            for ti in 0..t {
                let qk = ((bi * t + ti) * hk + kh) * dk;
                let gate = (bi * t + ti) * hv + h;
                let (decay, write) = (x.g[gate] as f64, x.beta[gate] as f64);
                for c in 0..dv {
                    let s = &mut state[((bi * hv + h) * dv + c) * dk..][..dk];
                    let key = &x.k[qk..][..dk];
                    let mut recalled = 0.0;
                    for (sj, kj) in s.iter_mut().zip(key) {
                        *sj *= decay;
                        recalled += *sj * *kj as f64;
                    }
                    let out = ((bi * t + ti) * hv + h) * dv + c;
                    let delta = (x.v[out] as f64 - recalled) * write;
                    let mut read = 0.0;
                    for ((sj, kj), qj) in s.iter_mut().zip(key).zip(&x.q[qk..][..dk]) {
                        *sj += *kj as f64 * delta;
                        read += *sj * *qj as f64;
                    }
                    y[out] = read;
                    if geo.capture {
                        per_position[out * dk..][..dk].copy_from_slice(s);
                    }
                }
            }
        }
    }
    (y, state, per_position)
}

/// Run `route` on random inputs (q, k, v in `dtype`, as the model feeds them) and compare.
pub fn check(route: Route, geo: Geometry, dtype: Dtype, seed: u64) -> Result<CheckReport> {
    let (host, qk_shape, v_shape) = random_inputs(&geo, seed);
    let gate_shape = [geo.rows, geo.positions, geo.value_heads];
    let state_shape = [geo.rows, geo.value_heads, geo.value_dim, geo.key_dim];
    let device = |data: &[f32], shape: &[i32], dt: Dtype| -> Result<Array> {
        let a = Array::from_slice(data, shape).as_dtype(dt)?;
        a.eval()?;
        Ok(a)
    };
    let q = device(&host.q, &qk_shape, dtype)?;
    let k = device(&host.k, &qk_shape, dtype)?;
    let v = device(&host.v, &v_shape, dtype)?;
    let beta = device(&host.beta, &gate_shape, dtype)?;
    let g = device(&host.g, &gate_shape, Dtype::Float32)?;
    let state = device(&host.state, &state_shape, Dtype::Float32)?;
    // The reference sees exactly the values the device does (after rounding to `dtype`).
    let rounded = Inputs {
        q: host_f32(&q)?,
        k: host_f32(&k)?,
        v: host_f32(&v)?,
        g: host.g.clone(),
        beta: host_f32(&beta)?,
        state: host.state.clone(),
    };
    let inputs = RecurrenceInputs { q: &q, k: &k, v: &v, g: &g, beta: &beta, state: &state };
    let Recurrence { y, state: last, per_position } = match route {
        Route::Kernel => gdn_kernel::recur(&inputs, geo.capture)?,
        Route::Ops => recur_ops(&inputs, geo.capture)?,
    };
    compare(&Recurrence { y, state: last, per_position }, &reference(&geo, &rounded), geo.capture)
}

/// A route's outputs against the float64 reference's (y, final state, per-position states).
fn compare(got: &Recurrence, want: &(Vec<f64>, Vec<f64>, Vec<f64>), capture: bool) -> Result<CheckReport> {
    Ok(CheckReport {
        y: relative_error(&host_f32(&got.y)?, &want.0),
        state: relative_error(&host_f32(&got.state)?, &want.1),
        per_position: match &got.per_position {
            Some(p) => Some(relative_error(&host_f32(p)?, &want.2)),
            None if capture => Some(f64::INFINITY),
            None => None,
        },
    })
}

/// The geometries `cohort-lab device --check-kernels` and the tests use: Qwen3.6-35B-A3B's linear
/// attention (16 key heads, 32 value heads, 128 x 128) for a B8 verify with capture, a B1 step,
/// and a 512-position prefill block.
pub fn real_geometries() -> Vec<(&'static str, Geometry)> {
    let base =
        Geometry { rows: 8, positions: 2, key_heads: 16, value_heads: 32, key_dim: 128, value_dim: 128, capture: true };
    vec![
        ("B8 verify, T=2, capture", base),
        ("B1 step, T=1", Geometry { rows: 1, positions: 1, capture: false, ..base }),
        ("B1 prefill, T=512", Geometry { rows: 1, positions: 512, capture: false, ..base }),
    ]
}

/// What [`check_fused`] found: the recurrence's outputs as [`CheckReport`], and whether the
/// convolution input it returns is exactly [tail | qkv columns].
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct FusedReport {
    pub recurrence: CheckReport,
    pub conv_in_exact: bool,
    /// With the gated norm folded in (blocks of at most [`gdn_kernel::NORM_MAX_POSITIONS`]),
    /// read from a product with padding columns after its parts: the gated output against the
    /// float64 norm of the reference's y, and that run's recurrence as above.
    pub gated: Option<f64>,
    pub gated_recurrence: Option<CheckReport>,
}

impl FusedReport {
    /// Whether every figure is within `tolerance`, the gated output within `gated_tolerance`
    /// (it is rounded to the model's dtype, the others are float32).
    pub fn within(&self, tolerance: f64, gated_tolerance: f64) -> bool {
        self.recurrence.worst() <= tolerance
            && self.conv_in_exact
            && self.gated_recurrence.is_none_or(|r| r.worst() <= tolerance)
            && self.gated.is_none_or(|g| g <= gated_tolerance)
    }
}

/// The gated norm's tolerance: float32's, or for a half-precision output the four roundings
/// MLX's ops make on the way (y, the normalised value, the weighted one, the product), relative
/// to the largest output.
pub fn gated_tolerance(dtype: Dtype) -> f64 {
    if dtype == Dtype::Float32 { 1e-4 } else { 2e-2 }
}

/// The fused front (convolution, SiLU, q/k normalisation, gates and the recurrence in one
/// kernel) on random inputs of `geo` with a width-`taps` convolution, against the float64 front
/// written here from the mixer's definition, feeding the float64 recurrence above.
pub fn check_fused(geo: Geometry, taps: i32, dtype: Dtype, seed: u64) -> Result<FusedReport> {
    let (b, t, hk, hv, dk, dv) = (geo.rows, geo.positions, geo.key_heads, geo.value_heads, geo.key_dim, geo.value_dim);
    let c = 2 * hk * dk + hv * dv;
    let width = c + hv * dv + 2 * hv;
    let tail_rows = taps - 1;
    let mut rng = Rng::new(seed);
    let mut random = |n: i32, scale: f32| -> Vec<f32> { (0..n).map(|_| normal(&mut rng) * scale).collect() };
    let device = |data: &[f32], shape: &[i32], dt: Dtype| -> Result<(Array, Vec<f32>)> {
        let a = Array::from_slice(data, shape).as_dtype(dt)?;
        a.eval()?;
        let seen = host_f32(&a)?;
        Ok((a, seen))
    };
    let (proj, p) = device(&random(b * t * width, 1.0), &[b, t, width], dtype)?;
    let (tail, tl) = device(&random(b * tail_rows * c, 1.0), &[b, tail_rows, c], dtype)?;
    let (conv_w, w) = device(&random(c * taps, 0.5), &[c, taps, 1], dtype)?;
    let (a_log, al) = device(&random(hv, 0.5).iter().map(|x| x.abs() + 0.5).collect::<Vec<_>>(), &[hv], dtype)?;
    let (dt_bias, dtb) = device(&random(hv, 0.5), &[hv], dtype)?;
    let (state, st) = device(&random(b * hv * dv * dk, 0.1), &[b, hv, dv, dk], Dtype::Float32)?;

    // The front in float64 on exactly the values the device holds.
    let input = |bi: i32, s: i32, ch: i32| -> f64 {
        if s < tail_rows {
            tl[((bi * tail_rows + s) * c + ch) as usize] as f64
        } else {
            p[((bi * t + s - tail_rows) * width + ch) as usize] as f64
        }
    };
    let conv = |bi: i32, ti: i32, ch: i32| -> f64 {
        let acc: f64 = (0..taps).map(|j| w[(ch * taps + j) as usize] as f64 * input(bi, ti + j, ch)).sum();
        acc / (1.0 + (-acc).exp())
    };
    let (mut q, mut k, mut v, mut g, mut beta) = (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for bi in 0..b {
        for ti in 0..t {
            for h in 0..hk {
                for (out, first, scale) in [(&mut q, h * dk, (dk as f64).powf(-0.5)), (&mut k, hk * dk + h * dk, 1.0)] {
                    let raw: Vec<f64> = (0..dk).map(|d| conv(bi, ti, first + d)).collect();
                    let norm = (raw.iter().map(|x| x * x).sum::<f64>() + 1e-6).sqrt();
                    out.extend(raw.iter().map(|x| (x / norm * scale) as f32));
                }
            }
            for h in 0..hv {
                v.extend((0..dv).map(|ch| conv(bi, ti, 2 * hk * dk + h * dv + ch) as f32));
                let row = ((bi * t + ti) * width) as usize;
                let a = p[row + (c + hv * dv + hv + h) as usize] as f64 + dtb[h as usize] as f64;
                let softplus = if a > 20.0 { a } else { a.exp().ln_1p() };
                g.push((-(al[h as usize] as f64).exp() * softplus).exp() as f32);
                beta.push((1.0 / (1.0 + (-(p[row + (c + hv * dv + h) as usize] as f64)).exp())) as f32);
            }
        }
    }
    let want = reference(&geo, &Inputs { q, k, v, g, beta, state: st });

    let inputs = gdn_kernel::FusedInputs {
        proj: &proj,
        tail: &tail,
        conv_weight: &conv_w,
        a_log: &a_log,
        dt_bias: &dt_bias,
        state: &state,
        place: None,
    };
    let heads = gdn_kernel::Heads { key_heads: hk, key_dim: dk, value_heads: hv, value_dim: dv, kernel: taps };
    let fused = gdn_kernel::recur_fused(&inputs, heads, geo.capture, None)?;
    let conv_exact = |conv_in: &Array| -> Result<bool> {
        let got = host_f32(conv_in)?;
        let mut exact = got.len() == (b * (tail_rows + t) * c) as usize;
        for bi in 0..b {
            for s in 0..tail_rows + t {
                for ch in 0..c {
                    exact &=
                        got.get(((bi * (tail_rows + t) + s) * c + ch) as usize) == Some(&(input(bi, s, ch) as f32));
                }
            }
        }
        Ok(exact)
    };
    let raw = |f: gdn_kernel::Fused| -> Result<(Recurrence, Array)> {
        match f.out {
            gdn_kernel::FusedOut::Raw(y) => {
                Ok((Recurrence { y, state: f.state, per_position: f.per_position }, f.conv_in))
            }
            gdn_kernel::FusedOut::Gated(_) => anyhow::bail!("the fused front gated its output unasked"),
        }
    };
    let (rec, conv_in) = raw(fused)?;
    let mut report = FusedReport {
        recurrence: compare(&rec, &want, geo.capture)?,
        conv_in_exact: conv_exact(&conv_in)?,
        gated: None,
        gated_recurrence: None,
    };
    if t > gdn_kernel::NORM_MAX_POSITIONS {
        return Ok(report);
    }

    // Again with the norm folded in, from a product 64 columns wider than its parts (as a
    // product padded at load is read), against the float64 gated norm of the reference's y.
    let eps = 1e-6f32;
    let (norm_w, nw) = device(&random(dv, 0.5).iter().map(|x| x + 1.0).collect::<Vec<_>>(), &[dv], dtype)?;
    let (junk, _) = device(&random(b * t * 64, 3.0), &[b, t, 64], dtype)?;
    let padded = mlx_rs::ops::concatenate(&[proj.clone(), junk], 2)?;
    let inputs = gdn_kernel::FusedInputs { proj: &padded, ..inputs };
    let norm = gdn_kernel::GatedNorm { weight: &norm_w, eps };
    let fused = gdn_kernel::recur_fused(&inputs, heads, geo.capture, Some(norm))?;
    let gated = match &fused.out {
        gdn_kernel::FusedOut::Gated(g) => host_f32(g)?,
        gdn_kernel::FusedOut::Raw(_) => anyhow::bail!("the fused front did not gate its output"),
    };
    let mut want_gated = Vec::with_capacity(want.0.len());
    for (head, y) in want.0.chunks(dv as usize).enumerate() {
        let (bt, h) = (head as i32 / hv, head as i32 % hv);
        let scale = 1.0 / (y.iter().map(|v| v * v).sum::<f64>() / dv as f64 + eps as f64).sqrt();
        for (ch, v) in y.iter().enumerate() {
            let z = p[(bt * width + c + h * dv + ch as i32) as usize] as f64;
            want_gated.push(z / (1.0 + (-z).exp()) * v * scale * nw[ch] as f64);
        }
    }
    report.gated = Some(relative_error(&gated, &want_gated));
    // No y comes out with the norm: the gated output stands for it.
    report.gated_recurrence = Some(CheckReport {
        y: 0.0,
        state: relative_error(&host_f32(&fused.state)?, &want.1),
        per_position: match &fused.per_position {
            Some(p) => Some(relative_error(&host_f32(p)?, &want.2)),
            None => geo.capture.then_some(f64::INFINITY),
        },
    });
    let conv_in = fused.conv_in;
    report.conv_in_exact &= conv_exact(&conv_in)?;
    Ok(report)
}

/// The fused front reading a verify's arrays in place ([`gdn_kernel::FusedInputs::place`])
/// against the same front given each row's tail and state sliced out and made contiguous (what
/// the route without places hands it), on random inputs of `geo` with a verify of `kept_from`
/// positions behind it and the rows keeping different positions: the elements of every output
/// that differ in any bit (0 when the kernel reads the places right). CUDA only.
pub fn placed_differing(geo: Geometry, taps: i32, kept_from: i32, dtype: Dtype, seed: u64) -> Result<usize> {
    let (b, t, hk, hv, dk, dv) = (geo.rows, geo.positions, geo.key_heads, geo.value_heads, geo.key_dim, geo.value_dim);
    let c = 2 * hk * dk + hv * dv;
    let width = c + hv * dv + 2 * hv;
    let conv_rows = taps - 1 + kept_from;
    let mut rng = Rng::new(seed);
    let mut random = |shape: &[i32], scale: f32, dt: Dtype| -> Result<Array> {
        let n: i32 = shape.iter().product();
        let data: Vec<f32> = (0..n).map(|_| normal(&mut rng) * scale).collect();
        Ok(Array::from_slice(&data, shape).as_dtype(dt)?)
    };
    let proj = random(&[b, t, width], 1.0, dtype)?;
    let conv = random(&[b, conv_rows, c], 1.0, dtype)?;
    let conv_w = random(&[c, taps, 1], 0.5, dtype)?;
    let a_log = mlx_rs::ops::abs(random(&[hv], 0.5, dtype)?)?.add(Array::from_f32(0.5).as_dtype(dtype)?)?;
    let dt_bias = random(&[hv], 0.5, dtype)?;
    let ssm = random(&[b, kept_from, hv, dv, dk], 0.1, Dtype::Float32)?;
    // Row r keeps position r mod kept_from.
    let kept: Vec<i32> = (0..b).map(|r| r % kept_from).collect();
    let place = Array::from_slice(&kept.iter().flat_map(|&p| [p, p + 1]).collect::<Vec<_>>(), &[b, 2]);
    let mut tails = Vec::new();
    let mut states = Vec::new();
    for (r, &p) in kept.iter().enumerate() {
        let r = r as i32;
        tails.push(cohort_core::model::ops::slice_axis(
            &cohort_core::model::ops::slice_axis(&conv, 0, r, r + 1)?,
            1,
            p + 1,
            p + taps,
        )?);
        let row = cohort_core::model::ops::slice_axis(&ssm, 0, r, r + 1)?;
        states.push(cohort_core::model::ops::slice_axis(&row, 1, p, p + 1)?.squeeze_axes(&[1])?);
    }
    let tail = mlx_rs::ops::concatenate(&tails, 0)?.contiguous()?;
    let state = mlx_rs::ops::concatenate(&states, 0)?.contiguous()?;
    mlx_rs::transforms::eval([&proj, &conv, &conv_w, &a_log, &dt_bias, &ssm, &place, &tail, &state])?;
    let heads = gdn_kernel::Heads { key_heads: hk, key_dim: dk, value_heads: hv, value_dim: dv, kernel: taps };
    let sliced = gdn_kernel::FusedInputs {
        proj: &proj,
        tail: &tail,
        conv_weight: &conv_w,
        a_log: &a_log,
        dt_bias: &dt_bias,
        state: &state,
        place: None,
    };
    let in_place = gdn_kernel::FusedInputs { tail: &conv, state: &ssm, place: Some(&place), ..sliced };
    let outputs = |f: gdn_kernel::Fused| -> Vec<Array> {
        let out = match f.out {
            gdn_kernel::FusedOut::Raw(y) | gdn_kernel::FusedOut::Gated(y) => y,
        };
        [Some(out), Some(f.state), f.per_position, Some(f.conv_in)].into_iter().flatten().collect()
    };
    let norm_w = random(&[dv], 0.5, dtype)?;
    norm_w.eval()?;
    let mut differing = 0;
    // Both launch layouts: a few channels a block, and a whole head a block with the gated norm
    // folded in (the one a step-sized block serves).
    for (capture, folded) in [(false, false), (true, false), (false, true), (true, true)] {
        let norm = (folded && gdn_kernel::norm_folds(t, dtype, &norm_w, dtype, dv))
            .then_some(gdn_kernel::GatedNorm { weight: &norm_w, eps: 1e-6 });
        let want = outputs(gdn_kernel::recur_fused(&sliced, heads, capture, norm)?);
        let got = outputs(gdn_kernel::recur_fused(&in_place, heads, capture, norm)?);
        anyhow::ensure!(want.len() == got.len(), "the placed front returned {} arrays, not {}", got.len(), want.len());
        for (w, g) in want.iter().zip(&got) {
            let (w, g) = (host_f32(w)?, host_f32(g)?);
            differing += w.len().abs_diff(g.len());
            differing += w.iter().zip(&g).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
        }
    }
    Ok(differing)
}
