//! Which kernels OpenBLAS runs the CPU backend's matrix products with.
//!
//! OpenBLAS picks its kernels from CPUID when it loads, before `main`. A virtual machine that
//! hides the CPU's model can make it fall back to its SSE3 kernels ("Prescott") on a CPU with
//! AVX-512: on this project's 2-core Xeon VM (AVX-512 and AMX, reported as "Intel(R) Xeon(R)
//! Processor"), Debian's OpenBLAS 0.3.21 did so, and float32 products of the default model's shapes
//! ran at 29-31 GFLOP/s against 154-163 with the AVX-512 kernels `OPENBLAS_CORETYPE=SkylakeX`
//! selects. The choice cannot be changed once made, so where OpenBLAS took a CPU with AVX2 or
//! AVX-512 for one without AVX, the process starts again, first thing, with the variable set. A
//! value the user set is left alone, and a failed restart carries on with the kernels it has.

use std::ffi::CStr;

/// OpenBLAS's kernels for CPUs without AVX: what it falls back to when it does not know a CPU.
const PRE_AVX: [&str; 10] =
    ["Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Atom", "Katmai", "Coppermine", "Northwood", "Banias"];

/// The variable OpenBLAS reads its kernels' name from.
pub const CORETYPE: &CStr = c"OPENBLAS_CORETYPE";

/// What the CPU offers that OpenBLAS's faster kernels need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuFeatures {
    /// AVX-512 F, CD, BW, DQ and VL (OpenBLAS's SkylakeX kernels).
    pub avx512: bool,
    /// AVX2 and FMA (its Haswell kernels).
    pub avx2_fma: bool,
}

impl CpuFeatures {
    pub fn detect() -> Self {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            CpuFeatures {
                avx512: has!("avx512f") && has!("avx512cd") && has!("avx512bw") && has!("avx512dq") && has!("avx512vl"),
                avx2_fma: has!("avx2") && has!("fma"),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        CpuFeatures { avx512: false, avx2_fma: false }
    }
}

/// The kernels to ask OpenBLAS for instead of `current`, when it chose kernels without AVX for a
/// CPU that has AVX2 or AVX-512; None when its own choice stands.
pub fn better_kernels(current: &str, cpu: CpuFeatures) -> Option<&'static CStr> {
    if !PRE_AVX.iter().any(|k| k.eq_ignore_ascii_case(current)) {
        return None;
    }
    if cpu.avx512 {
        Some(c"SkylakeX")
    } else if cpu.avx2_fma {
        Some(c"Haswell")
    } else {
        None
    }
}

/// The name of the kernels the OpenBLAS in this process runs; None where the products do not go
/// through OpenBLAS (macOS's Accelerate, a reference BLAS).
pub fn kernels() -> Option<String> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: dlsym only looks a name up; a symbol of this name is OpenBLAS's
        // `char *openblas_get_corename(void)`, which returns a static string.
        let sym = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"openblas_get_corename".as_ptr()) };
        if sym.is_null() {
            return None;
        }
        let corename: extern "C" fn() -> *const libc::c_char = unsafe { std::mem::transmute(sym) };
        let name = corename();
        (!name.is_null()).then(|| unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned())
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    None
}

#[cfg(all(target_os = "linux", target_env = "gnu", target_arch = "x86_64"))]
#[used]
#[unsafe(link_section = ".init_array")]
static RESTART_FOR_FASTER_KERNELS: extern "C" fn(libc::c_int, *const *const libc::c_char, *const *const libc::c_char) =
    restart_for_faster_kernels;

/// Run by the loader before `main` (glibc passes it the process's arguments), after the libraries
/// it links, OpenBLAS among them, have started.
#[cfg(all(target_os = "linux", target_env = "gnu", target_arch = "x86_64"))]
extern "C" fn restart_for_faster_kernels(
    _argc: libc::c_int,
    argv: *const *const libc::c_char,
    _envp: *const *const libc::c_char,
) {
    // SAFETY: getenv reads the environment before any thread exists.
    if argv.is_null() || !unsafe { libc::getenv(CORETYPE.as_ptr()) }.is_null() {
        return;
    }
    let Some(better) = kernels().and_then(|current| better_kernels(&current, CpuFeatures::detect())) else {
        return;
    };
    // SAFETY: before main, one thread: setenv cannot race a reader; execv gets the process's own
    // NULL-terminated argv, and on success does not return.
    unsafe {
        if libc::setenv(CORETYPE.as_ptr(), better.as_ptr(), 0) == 0 {
            libc::execv(c"/proc/self/exe".as_ptr(), argv);
            // The restart failed (the executable is gone): carry on with the kernels there are.
            libc::unsetenv(CORETYPE.as_ptr());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const AVX512: CpuFeatures = CpuFeatures { avx512: true, avx2_fma: true };
    const AVX2: CpuFeatures = CpuFeatures { avx512: false, avx2_fma: true };
    const SSE: CpuFeatures = CpuFeatures { avx512: false, avx2_fma: false };

    #[test]
    fn only_kernels_without_avx_on_a_cpu_with_avx2_or_avx512_are_replaced() {
        assert_eq!(better_kernels("Prescott", AVX512), Some(c"SkylakeX"));
        assert_eq!(better_kernels("NEHALEM", AVX2), Some(c"Haswell"));
        assert_eq!(better_kernels("Prescott", SSE), None, "a CPU without AVX2 keeps them");
        for chosen in ["SkylakeX", "Cooperlake", "SapphireRapids", "Haswell", "Zen", "Sandybridge"] {
            assert_eq!(better_kernels(chosen, AVX512), None, "{chosen}: OpenBLAS's own choice stands");
        }
    }
}
