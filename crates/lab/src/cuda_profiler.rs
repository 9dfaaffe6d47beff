//! Brackets one step for Nsight Compute (`ncu --profile-from-start off`), so its report holds that
//! step's kernels only. The GPU machine has ncu but no Nsight Systems, and an unbracketed run
//! would have ncu serialise every load, prefill and warm-up kernel too. The driver's
//! cuProfilerStart/Stop are looked up when asked for, so the binary links nothing of CUDA and
//! runs unchanged on the CPU and Metal libraries (where opening a window is an error that says
//! why).

use anyhow::Result;

/// An open profiling window; `close` ends it.
pub struct Window {
    #[cfg(target_os = "linux")]
    driver: linux::Driver,
}

impl Window {
    /// Start collecting: kernels launched from now on are profiled by an attached ncu (without
    /// one the calls are no-ops that succeed).
    pub fn open() -> Result<Window> {
        #[cfg(target_os = "linux")]
        {
            let driver = linux::Driver::load()?;
            driver.start()?;
            Ok(Window { driver })
        }
        #[cfg(not(target_os = "linux"))]
        anyhow::bail!("a profiling window needs the CUDA driver, which only Linux builds can load")
    }

    /// Stop collecting. Call it after the step's outputs are evaluated, or the report misses
    /// the kernels still queued.
    pub fn close(self) -> Result<()> {
        #[cfg(target_os = "linux")]
        return self.driver.stop();
        #[cfg(not(target_os = "linux"))]
        Ok(())
    }
}

#[cfg(target_os = "linux")]
mod linux {
    use std::ffi::{CStr, c_char, c_int, c_uint, c_void};

    use anyhow::{Result, bail};

    unsafe extern "C" {
        fn dlopen(filename: *const c_char, flag: c_int) -> *mut c_void;
        fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
    }
    const RTLD_NOW: c_int = 2;

    /// CUresult; 0 is CUDA_SUCCESS.
    type CuResult = c_int;
    type Context = *mut c_void;

    type InitFn = unsafe extern "C" fn(c_uint) -> CuResult;
    type GetContextFn = unsafe extern "C" fn(*mut Context) -> CuResult;
    type DeviceFn = unsafe extern "C" fn(*mut c_int, c_int) -> CuResult;
    type RetainFn = unsafe extern "C" fn(*mut Context, c_int) -> CuResult;
    type SetContextFn = unsafe extern "C" fn(Context) -> CuResult;
    type ProfilerFn = unsafe extern "C" fn() -> CuResult;

    /// The driver entry points a window needs; the library stays loaded for the process.
    pub(super) struct Driver {
        init: InitFn,
        current: GetContextFn,
        device: DeviceFn,
        retain_primary: RetainFn,
        set_current: SetContextFn,
        profiler_start: ProfilerFn,
        profiler_stop: ProfilerFn,
    }

    fn symbol(lib: *mut c_void, name: &CStr) -> Result<*mut c_void> {
        // SAFETY: `lib` is a live handle from dlopen and `name` is NUL-terminated.
        let f = unsafe { dlsym(lib, name.as_ptr()) };
        if f.is_null() {
            bail!("the CUDA driver library has no {}", name.to_string_lossy());
        }
        Ok(f)
    }

    fn check(what: &str, code: CuResult) -> Result<()> {
        if code != 0 {
            bail!("{what} failed with CUDA driver error {code}");
        }
        Ok(())
    }

    impl Driver {
        pub(super) fn load() -> Result<Driver> {
            // SAFETY: a plain dlopen of the driver library by its soname.
            let lib = unsafe { dlopen(c"libcuda.so.1".as_ptr(), RTLD_NOW) };
            if lib.is_null() {
                bail!("no CUDA driver (libcuda.so.1) on this machine: a profiling window needs MLX's CUDA backend");
            }
            // SAFETY: each symbol is the driver's own function with the signature declared in
            // the field it fills (cuda.h: cuInit, cuCtxGetCurrent, cuDeviceGet,
            // cuDevicePrimaryCtxRetain, cuCtxSetCurrent, cuProfilerStart, cuProfilerStop).
            unsafe {
                Ok(Driver {
                    init: std::mem::transmute::<*mut c_void, InitFn>(symbol(lib, c"cuInit")?),
                    current: std::mem::transmute::<*mut c_void, GetContextFn>(symbol(lib, c"cuCtxGetCurrent")?),
                    device: std::mem::transmute::<*mut c_void, DeviceFn>(symbol(lib, c"cuDeviceGet")?),
                    retain_primary: std::mem::transmute::<*mut c_void, RetainFn>(symbol(
                        lib,
                        c"cuDevicePrimaryCtxRetain",
                    )?),
                    set_current: std::mem::transmute::<*mut c_void, SetContextFn>(symbol(lib, c"cuCtxSetCurrent")?),
                    profiler_start: std::mem::transmute::<*mut c_void, ProfilerFn>(symbol(lib, c"cuProfilerStart")?),
                    profiler_stop: std::mem::transmute::<*mut c_void, ProfilerFn>(symbol(lib, c"cuProfilerStop")?),
                })
            }
        }

        /// The profiler acts on the calling thread's context. MLX runs on the primary context of
        /// device 0 through the runtime API, which may not have made it current on this thread,
        /// so it is made current here when none is (retaining the primary context returns the
        /// one MLX already holds).
        fn ensure_context(&self) -> Result<()> {
            // SAFETY: the driver functions are called with valid out-pointers.
            unsafe {
                check("cuInit", (self.init)(0))?;
                let mut ctx: Context = std::ptr::null_mut();
                check("cuCtxGetCurrent", (self.current)(&mut ctx))?;
                if ctx.is_null() {
                    let mut dev: c_int = 0;
                    check("cuDeviceGet", (self.device)(&mut dev, 0))?;
                    check("cuDevicePrimaryCtxRetain", (self.retain_primary)(&mut ctx, dev))?;
                    check("cuCtxSetCurrent", (self.set_current)(ctx))?;
                }
            }
            Ok(())
        }

        pub(super) fn start(&self) -> Result<()> {
            self.ensure_context()?;
            // SAFETY: a context is current on this thread.
            check("cuProfilerStart", unsafe { (self.profiler_start)() })
        }

        pub(super) fn stop(&self) -> Result<()> {
            // SAFETY: as in start; stopping a window that collected nothing is allowed.
            check("cuProfilerStop", unsafe { (self.profiler_stop)() })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Window;

    /// On a machine without the driver (the CPU CI), opening a window is an error naming the
    /// missing driver, not a crash; with one (the GPU machine) it opens and closes.
    #[test]
    fn a_window_opens_with_the_driver_and_says_why_not_without() {
        let driver_present = std::path::Path::new("/proc/driver/nvidia").exists();
        match Window::open() {
            Ok(w) => {
                assert!(driver_present, "a window opened without an NVIDIA driver");
                w.close().unwrap();
            }
            Err(e) => {
                let msg = format!("{e:#}");
                assert!(!driver_present, "the driver is here but no window opened: {msg}");
                assert!(msg.contains("CUDA driver"), "the error should name the missing driver: {msg}");
            }
        }
    }
}
