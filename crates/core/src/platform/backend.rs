//! What the MLX runtime is: version, device, memory. Shown by `--version`, `cohort device`,
//! and the inspector's memory panel.

use std::ffi::CStr;
use std::fmt;

use mlx_rs::{Device, DeviceType};

/// MLX's own version string (the library actually loaded, not the one built against).
pub fn mlx_version() -> String {
    // SAFETY: mlx_string_new/free bracket the call; mlx_version fills the string on success and
    // mlx_string_data points into it until it is freed, so the copy is made before the free.
    unsafe {
        let mut s = mlx_sys::mlx_string_new();
        let version = if mlx_sys::mlx_version(&mut s) == 0 {
            CStr::from_ptr(mlx_sys::mlx_string_data(s)).to_string_lossy().into_owned()
        } else {
            "unknown".to_owned()
        };
        mlx_sys::mlx_string_free(s);
        version
    }
}

/// Which accelerator the loaded MLX library drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Metal,
    Cuda,
    Cpu,
}

impl Backend {
    /// Ask the loaded library; the same binary runs on the CPU or the CUDA libmlx.so.
    pub fn detect() -> Self {
        let mut metal = false;
        let mut cuda = false;
        // SAFETY: both functions only write the bool they are given.
        unsafe {
            mlx_sys::mlx_metal_is_available(&mut metal);
            mlx_sys::mlx_cuda_is_available(&mut cuda);
        }
        if metal {
            Backend::Metal
        } else if cuda {
            Backend::Cuda
        } else {
            Backend::Cpu
        }
    }

    /// Whether MLX drives CUDA here, asked once (a step's graph asks it per product).
    pub fn is_cuda() -> bool {
        static CUDA: std::sync::LazyLock<bool> = std::sync::LazyLock::new(|| Backend::detect() == Backend::Cuda);
        *CUDA
    }

    /// Whether MLX computes on the CPU here (no Metal, no CUDA), asked once.
    pub fn is_cpu() -> bool {
        static CPU: std::sync::LazyLock<bool> = std::sync::LazyLock::new(|| Backend::detect() == Backend::Cpu);
        *CPU
    }

    pub fn name(self) -> &'static str {
        match self {
            Backend::Metal => "metal",
            Backend::Cuda => "cuda",
            Backend::Cpu => "cpu",
        }
    }
}

/// The device computations run on by default: the GPU when the library has one.
pub fn default_device() -> Device {
    match Backend::detect() {
        Backend::Cpu => Device::cpu(),
        _ => Device::gpu(),
    }
}

/// MLX's allocator figures, in bytes.
#[derive(Debug, Clone, Copy, Default, serde::Serialize, serde::Deserialize)]
pub struct MemoryStats {
    pub active: usize,
    pub peak: usize,
    pub cache: usize,
}

impl MemoryStats {
    pub fn read() -> Self {
        Self {
            active: mlx_rs::memory::active_memory().unwrap_or(0),
            peak: mlx_rs::memory::peak_memory().unwrap_or(0),
            cache: mlx_rs::memory::cache_memory().unwrap_or(0),
        }
    }
}

/// Bytes as a short human figure (MiB / GiB).
pub fn human_bytes(bytes: usize) -> String {
    let b = bytes as f64;
    if b >= (1u64 << 30) as f64 {
        format!("{:.2} GiB", b / (1u64 << 30) as f64)
    } else {
        format!("{:.1} MiB", b / (1u64 << 20) as f64)
    }
}

/// A one-screen description of the runtime.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RuntimeReport {
    pub cohort_version: &'static str,
    pub mlx_version: String,
    pub backend: &'static str,
    pub device: String,
    /// How MLX runs float32 matrix products: in full float32 (cohort's default: `main` sets
    /// `MLX_ENABLE_TF32=0` unless it is set), or as TF32 where the hardware has it.
    pub float32_matmuls: &'static str,
    /// The kernels OpenBLAS runs the CPU backend's products with (None: not OpenBLAS).
    pub blas_kernels: Option<String>,
    pub memory: MemoryStats,
}

impl RuntimeReport {
    pub fn collect() -> Self {
        let device = default_device();
        Self {
            cohort_version: env!("CARGO_PKG_VERSION"),
            mlx_version: mlx_version(),
            backend: Backend::detect().name(),
            device: device_label(&device),
            float32_matmuls: match std::env::var("MLX_ENABLE_TF32").as_deref() {
                Ok("0") => "full float32",
                _ => "TF32 where the hardware has it (MLX_ENABLE_TF32)",
            },
            blas_kernels: super::blas::kernels(),
            memory: MemoryStats::read(),
        }
    }
}

impl fmt::Display for RuntimeReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "cohort {}", self.cohort_version)?;
        writeln!(f, "MLX    {} ({} backend)", self.mlx_version, self.backend)?;
        writeln!(f, "device {}", self.device)?;
        writeln!(f, "float32 matmuls {}", self.float32_matmuls)?;
        if let Some(kernels) = &self.blas_kernels {
            writeln!(f, "BLAS   OpenBLAS {kernels} kernels")?;
        }
        write!(
            f,
            "memory active {}, peak {}, cache {}",
            human_bytes(self.memory.active),
            human_bytes(self.memory.peak),
            human_bytes(self.memory.cache)
        )
    }
}

fn device_label(device: &Device) -> String {
    let kind = match device.get_type() {
        Ok(DeviceType::Gpu) => "gpu",
        Ok(DeviceType::Cpu) => "cpu",
        Err(_) => "unknown",
    };
    format!("{kind}:{}", device.get_index().unwrap_or(0))
}
