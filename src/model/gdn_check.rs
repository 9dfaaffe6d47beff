//! Checks a Gated DeltaNet recurrence route (the fused CUDA kernel or the plain-ops loop) against
//! a float64 host reference written here from the delta rule itself, on random inputs of a given
//! geometry. Used by `cohort device --check-kernels` and by `tests/gdn_kernel.rs`.

use anyhow::Result;
use mlx_rs::{Array, Dtype};

use super::gated_delta::recur_ops;
use super::gdn_kernel::{self, Recurrence, RecurrenceInputs};
use super::ops::host_f32;
use crate::engine::sampler::Rng;

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

fn relative_error(got: &[f32], want: &[f64]) -> f64 {
    let scale = want.iter().fold(0.0f64, |m, w| m.max(w.abs())).max(1e-30);
    let worst = got.iter().zip(want).fold(0.0f64, |m, (g, w)| m.max((*g as f64 - w).abs()));
    if got.len() != want.len() { f64::INFINITY } else { worst / scale }
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
    let (want_y, want_state, want_positions) = reference(&geo, &rounded);
    Ok(CheckReport {
        y: relative_error(&host_f32(&y)?, &want_y),
        state: relative_error(&host_f32(&last)?, &want_state),
        per_position: match per_position {
            Some(p) => Some(relative_error(&host_f32(&p)?, &want_positions)),
            None if geo.capture => Some(f64::INFINITY),
            None => None,
        },
    })
}

/// The geometries `cohort device --check-kernels` and the tests use: Qwen3.6-35B-A3B's linear
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
