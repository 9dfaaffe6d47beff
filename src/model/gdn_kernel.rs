//! The fused Gated DeltaNet recurrence on CUDA (`kernels/gated_delta.cu`), run through MLX's
//! custom-kernel mechanism. mlx-rs wraps only Metal kernels, so this calls mlx-c's CUDA kernel
//! functions directly. The plain-ops loop in `gated_delta.rs` stays the fallback (CPU, Metal,
//! `COHORT_GDN_KERNEL=0`) and the reference the kernel is checked against.

use std::ffi::CString;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU8, Ordering};

use anyhow::{Result, anyhow, bail};
use mlx_rs::{Array, Dtype};

use crate::engine::runtime::Backend;

const SOURCE: &str = include_str!("../../kernels/gated_delta.cu");
const INPUTS: [&str; 6] = ["q", "k", "v", "g", "beta", "state_in"];
const OUTPUTS: [&str; 3] = ["y", "state_out", "states"];
/// Value channels per thread block (one warp each).
const CHANNELS_PER_BLOCK: i32 = 4;

/// Whether the fused kernel serves the recurrence: 0 unset, 1 on, 2 off.
static ROUTE: AtomicU8 = AtomicU8::new(0);

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

/// Turn the kernel on or off for this process (bench-step compares both routes in one run).
pub fn set_enabled(on: bool) {
    ROUTE.store(if on { 1 } else { 2 }, Ordering::Relaxed);
}

/// The kernel serves when the loaded MLX drives CUDA, unless `COHORT_GDN_KERNEL=0`.
pub fn enabled() -> bool {
    match ROUTE.load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => {
            let on = Backend::detect() == Backend::Cuda && std::env::var("COHORT_GDN_KERNEL").as_deref() != Ok("0");
            set_enabled(on);
            on
        }
    }
}

struct CudaKernel {
    raw: mlx_sys::mlx_fast_cuda_kernel,
}

// SAFETY: the handle wraps an immutable MLX kernel function object; applying it only reads it,
// and the engine applies it from one thread at a time.
unsafe impl Send for CudaKernel {}
unsafe impl Sync for CudaKernel {}

fn c_string(s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| anyhow!("kernel string contains a NUL byte"))
}

/// An mlx-c string vector freed on drop.
struct Names(mlx_sys::mlx_vector_string);

impl Names {
    fn new(names: &[&str]) -> Result<Self> {
        // SAFETY: the vector is created empty and each appended C string is copied by mlx-c.
        unsafe {
            let vec = Names(mlx_sys::mlx_vector_string_new());
            for n in names {
                let c = c_string(n)?;
                if mlx_sys::mlx_vector_string_append_value(vec.0, c.as_ptr()) != 0 {
                    bail!("could not build the kernel's argument names");
                }
            }
            Ok(vec)
        }
    }
}

impl Drop for Names {
    fn drop(&mut self) {
        // SAFETY: created by mlx_vector_string_new and freed once.
        unsafe { mlx_sys::mlx_vector_string_free(self.0) };
    }
}

fn kernel() -> Result<&'static CudaKernel> {
    static KERNEL: OnceLock<std::result::Result<CudaKernel, String>> = OnceLock::new();
    let built = KERNEL.get_or_init(|| {
        let build = || -> Result<CudaKernel> {
            let (inputs, outputs) = (Names::new(&INPUTS)?, Names::new(&OUTPUTS)?);
            // COHORT_GDN_KERNEL_SOURCE points at an edited body to try without a rebuild.
            let body = match std::env::var_os("COHORT_GDN_KERNEL_SOURCE") {
                Some(path) => std::fs::read_to_string(&path)
                    .map_err(|e| anyhow!("COHORT_GDN_KERNEL_SOURCE {}: {e}", path.to_string_lossy()))?,
                None => SOURCE.to_owned(),
            };
            let (name, source, header) = (c_string("cohort_gated_delta")?, c_string(&body)?, c_string("")?);
            // SAFETY: every pointer is valid for the call; mlx-c copies the names and sources.
            let raw = unsafe {
                mlx_sys::mlx_fast_cuda_kernel_new(
                    name.as_ptr(),
                    inputs.0,
                    outputs.0,
                    source.as_ptr(),
                    header.as_ptr(),
                    true,
                    0,
                )
            };
            if raw.ctx.is_null() {
                bail!("MLX could not create the fused Gated DeltaNet kernel");
            }
            Ok(CudaKernel { raw })
        };
        build().map_err(|e| e.to_string())
    });
    built.as_ref().map_err(|e| anyhow!("{e}"))
}

/// A kernel launch configuration freed on drop.
struct Config(mlx_sys::mlx_fast_cuda_kernel_config);

impl Config {
    fn check(status: i32, what: &str) -> Result<()> {
        if status != 0 {
            bail!("MLX refused the Gated DeltaNet kernel's {what}");
        }
        Ok(())
    }

    fn output(&self, shape: &[i32]) -> Result<()> {
        // SAFETY: the shape pointer is valid for the call; mlx-c copies it.
        let status = unsafe {
            mlx_sys::mlx_fast_cuda_kernel_config_add_output_arg(
                self.0,
                shape.as_ptr(),
                shape.len(),
                mlx_sys::mlx_dtype__MLX_FLOAT32,
            )
        };
        Self::check(status, "output")
    }

    fn int(&self, name: &str, value: i32) -> Result<()> {
        let c = c_string(name)?;
        // SAFETY: the name is valid for the call; mlx-c copies it.
        let status = unsafe { mlx_sys::mlx_fast_cuda_kernel_config_add_template_arg_int(self.0, c.as_ptr(), value) };
        Self::check(status, name)
    }
}

impl Drop for Config {
    fn drop(&mut self) {
        // SAFETY: created by mlx_fast_cuda_kernel_config_new and freed once.
        unsafe { mlx_sys::mlx_fast_cuda_kernel_config_free(self.0) };
    }
}

/// Run every position of a block through the recurrence in one launch.
pub fn recur(x: &RecurrenceInputs, capture: bool) -> Result<Recurrence> {
    let RecurrenceInputs { q, k, v, g, beta, state } = *x;
    let (qs, vs, ss) = (q.shape(), v.shape(), state.shape());
    let (b, t, hk, dk) = (qs[0], qs[1], qs[2], qs[3]);
    let (hv, dv) = (vs[2], vs[3]);
    if dk % 32 != 0 || hv % hk != 0 || ss != [b, hv, dv, dk] || g.shape() != [b, t, hv] {
        bail!("the Gated DeltaNet kernel does not fit these shapes (q {qs:?}, v {vs:?}, state {ss:?})");
    }
    let state = state.as_dtype(Dtype::Float32)?;
    // SAFETY: a fresh config, freed by Config's drop.
    let config = Config(unsafe { mlx_sys::mlx_fast_cuda_kernel_config_new() });
    config.output(&[b, t, hv, dv])?;
    config.output(&[b, hv, dv, dk])?;
    config.output(&if capture { vec![b, t, hv, dv, dk] } else { vec![1] })?;
    // SAFETY: plain integer setters on a live config.
    unsafe {
        Config::check(mlx_sys::mlx_fast_cuda_kernel_config_set_grid(config.0, 32, dv, b * hv), "grid")?;
        Config::check(
            mlx_sys::mlx_fast_cuda_kernel_config_set_thread_group(config.0, 32, CHANNELS_PER_BLOCK, 1),
            "thread group",
        )?;
    }
    for (name, value) in [("HK", hk), ("HV", hv), ("DK", dk), ("DV", dv)] {
        config.int(name, value)?;
    }
    let c = c_string("CAPTURE")?;
    // SAFETY: the name is valid for the call; mlx-c copies it.
    Config::check(
        unsafe { mlx_sys::mlx_fast_cuda_kernel_config_add_template_arg_bool(config.0, c.as_ptr(), capture) },
        "CAPTURE",
    )?;

    let kernel = kernel()?;
    let inputs = [q, k, v, g, beta, &state];
    // SAFETY: the input vector holds new references to live arrays and is freed below; the output
    // vector is filled by the call and each element is taken over by an owned Array. The kernel
    // reads only within its inputs (shapes checked above) and writes each output element once.
    unsafe {
        let vec = mlx_sys::mlx_vector_array_new();
        for a in inputs {
            mlx_sys::mlx_vector_array_append_value(vec, a.as_ptr());
        }
        let mut out = mlx_sys::mlx_vector_array_new();
        let stream = mlx_rs::Stream::gpu();
        let status = mlx_sys::mlx_fast_cuda_kernel_apply(&mut out, kernel.raw, vec, config.0, stream.as_ptr());
        mlx_sys::mlx_vector_array_free(vec);
        if status != 0 || mlx_sys::mlx_vector_array_size(out) != OUTPUTS.len() {
            mlx_sys::mlx_vector_array_free(out);
            bail!("MLX could not apply the fused Gated DeltaNet kernel");
        }
        let mut arrays = Vec::with_capacity(OUTPUTS.len());
        for i in 0..OUTPUTS.len() {
            let mut a = mlx_sys::mlx_array_new();
            mlx_sys::mlx_vector_array_get(&mut a, out, i);
            arrays.push(Array::from_ptr(a));
        }
        mlx_sys::mlx_vector_array_free(out);
        let per_position = arrays.pop().filter(|_| capture);
        let state = arrays.pop().expect("three outputs");
        let y = arrays.pop().expect("three outputs");
        Ok(Recurrence { y, state, per_position })
    }
}
