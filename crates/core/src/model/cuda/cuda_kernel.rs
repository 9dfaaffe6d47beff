//! Cohort's own CUDA kernels (the `*.cu` files beside these wrappers), run through MLX's custom-kernel mechanism. mlx-rs
//! wraps only Metal kernels, so this calls mlx-c's CUDA kernel functions directly. Each `.cu` file
//! is a kernel *body*: MLX generates the signature from the input and output names (adding
//! `<name>_shape` where the body reads it) and turns the template arguments into constexprs.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::ffi::CString;
use std::sync::Mutex;

use anyhow::{Result, anyhow, bail};
use mlx_rs::{Array, Dtype};

/// A compiled-on-first-use kernel: its name, argument names and body. It is never freed: each
/// lives in a process-wide static ([`once`]).
pub struct CudaKernel {
    raw: mlx_sys::mlx_fast_cuda_kernel,
    outputs: usize,
    name: &'static str,
    /// Launch configurations already built, by [`launch_key`]: a step applies each kernel with
    /// the same few configurations every time, and building one is a dozen mlx-c calls and
    /// allocations on the host's critical path.
    configs: Mutex<HashMap<Vec<i64>, Config>>,
    /// Off only for a kernel built as its calls were before ([`CudaKernel::build`]).
    cache_configs: bool,
}

/// At most this many configurations are kept a kernel; the cache starts afresh when full (a
/// launch whose grid follows the context length would otherwise add one a step).
const MAX_CONFIGS: usize = 256;

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

/// FNV-1a: stable across processes and toolchains, unlike std's hasher, as a cache key must be.
fn fnv1a(bytes: impl Iterator<Item = u8>) -> u64 {
    bytes.fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3))
}

/// A kernel's text as MLX is given it: comments and indentation dropped, one line for each line
/// that keeps any code (so preprocessor lines still end where they did). MLX copies a custom
/// kernel's whole source into every node it builds and hashes it again at every evaluation (its
/// `custom_kernel.cpp`); on the invariant route every product of a step is such a node, so the
/// text's length is host time in every step. String and character literals are kept as written.
pub(crate) fn compact(text: &str) -> String {
    let mut code = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '/' if chars.peek() == Some(&'/') => {
                while chars.peek().is_some_and(|&n| n != '\n') {
                    chars.next();
                }
            }
            '/' if chars.peek() == Some(&'*') => {
                chars.next();
                let mut last = ' ';
                for n in chars.by_ref() {
                    // A comment's line breaks stay, so the lines around it keep their ends.
                    if n == '\n' {
                        code.push('\n');
                    }
                    if last == '*' && n == '/' {
                        break;
                    }
                    last = n;
                }
                code.push(' ');
            }
            '"' | '\'' => {
                code.push(c);
                while let Some(n) = chars.next() {
                    code.push(n);
                    if n == '\\' {
                        if let Some(escaped) = chars.next() {
                            code.push(escaped);
                        }
                    } else if n == c || n == '\n' {
                        break;
                    }
                }
            }
            _ => code.push(c),
        }
    }
    let lines = code.lines().map(str::trim).filter(|l| !l.is_empty());
    lines.collect::<Vec<_>>().join("\n") + "\n"
}

/// What distinguishes one launch configuration from another: output shapes and dtypes, grid,
/// block, the dtype key and every template value with its name.
fn launch_key(launch: &Launch, dtype_key: i32) -> Vec<i64> {
    let mut key = Vec::with_capacity(16 + 2 * (launch.ints.len() + launch.bools.len()));
    for (shape, dtype) in &launch.outputs {
        key.push(shape.len() as i64);
        key.extend(shape.iter().map(|&d| d as i64));
        key.push(*dtype as i64);
    }
    key.extend(launch.grid.iter().chain(&launch.threads).map(|&v| v as i64));
    key.push(dtype_key as i64);
    let name = |n: &str| fnv1a(n.bytes()) as i64;
    key.extend(launch.ints.iter().flat_map(|&(n, v)| [name(n), v as i64]));
    key.push(-1);
    key.extend(launch.bools.iter().flat_map(|&(n, v)| [name(n), v as i64]));
    key
}

/// A kernel file's text: the copy built in, or `COHORT_KERNEL_DIR`'s when that is set.
fn kernel_text(file: &str, built_in: &str) -> Result<String> {
    match std::env::var_os("COHORT_KERNEL_DIR") {
        Some(dir) => {
            let path = std::path::Path::new(&dir).join(file);
            std::fs::read_to_string(&path).map_err(|e| anyhow!("COHORT_KERNEL_DIR: {}: {e}", path.display()))
        }
        None => Ok(built_in.to_owned()),
    }
}

/// How one application launches: output shapes and dtypes, the grid in threads (as MLX counts
/// it: blocks are `grid / threads`), the block shape, and the template arguments.
pub struct Launch<'a> {
    pub outputs: Vec<(Vec<i32>, Dtype)>,
    pub grid: [i32; 3],
    pub threads: [i32; 3],
    pub ints: &'a [(&'a str, i32)],
    pub bools: &'a [(&'a str, bool)],
}

/// A kernel launch configuration freed on drop.
struct Config(mlx_sys::mlx_fast_cuda_kernel_config);

// SAFETY: a built configuration is only read (MLX's apply takes it as const) and only under its
// kernel's lock.
unsafe impl Send for Config {}

impl Drop for Config {
    fn drop(&mut self) {
        // SAFETY: created by mlx_fast_cuda_kernel_config_new and freed once.
        unsafe { mlx_sys::mlx_fast_cuda_kernel_config_free(self.0) };
    }
}

impl CudaKernel {
    /// `source` is the body and `header` what MLX puts ahead of the kernel (shared device
    /// functions, or none), each with the file it comes from beside these wrappers.
    /// `COHORT_KERNEL_DIR`, when set, names a folder whose files replace them, so an edited kernel
    /// can be tried on the GPU machine without a rebuild.
    pub(crate) fn new(
        name: &'static str,
        file: &str,
        inputs: &[&str],
        outputs: &[&str],
        source: &str,
        header: Option<(&str, &str)>,
    ) -> Result<Self> {
        Self::build(name, file, (inputs, outputs), source, header, true)
    }

    /// [`CudaKernel::new`] when `lean`; otherwise the same kernel as its calls were before they
    /// were made cheaper (its whole text as written, a configuration built at every call), which
    /// only `bench-step --node-costs` asks for, to time a node of each side by side.
    pub fn build(
        name: &'static str,
        file: &str,
        (inputs, outputs): (&[&str], &[&str]),
        source: &str,
        header: Option<(&str, &str)>,
        lean: bool,
    ) -> Result<Self> {
        let (input_names, output_names) = (Names::new(inputs)?, Names::new(outputs)?);
        let text = |file, text| -> Result<String> {
            let text = kernel_text(file, text)?;
            Ok(if lean { compact(&text) } else { text })
        };
        let body = text(file, source)?;
        let header = match header {
            Some((file, t)) => text(file, t)?,
            None => String::new(),
        };
        // The body's hash joins the name MLX compiles and caches the kernel under (in memory and
        // in its on-disk JIT cache, which the GPU scripts carry between machines), so an edited
        // body is compiled afresh rather than served from a cache entry of the old one.
        let hash = fnv1a(header.bytes().chain(body.bytes()));
        let (c_name, c_source, header) =
            (c_string(&format!("{name}_{hash:016x}"))?, c_string(&body)?, c_string(&header)?);
        // SAFETY: every pointer is valid for the call; mlx-c copies the names and sources.
        let raw = unsafe {
            mlx_sys::mlx_fast_cuda_kernel_new(
                c_name.as_ptr(),
                input_names.0,
                output_names.0,
                c_source.as_ptr(),
                header.as_ptr(),
                true,
                0,
            )
        };
        if raw.ctx.is_null() {
            bail!("MLX could not create the {name} kernel");
        }
        Ok(CudaKernel { raw, outputs: outputs.len(), name, configs: Mutex::new(HashMap::new()), cache_configs: lean })
    }

    fn check(&self, status: i32, what: &str) -> Result<()> {
        if status != 0 {
            bail!("MLX refused the {} kernel's {what}", self.name);
        }
        Ok(())
    }

    /// A launch's configuration as mlx-c takes it: output shapes and dtypes, grid, block and
    /// template values (`dtype_key` first).
    fn config(&self, launch: &Launch, dtype_key: i32) -> Result<Config> {
        // SAFETY: a fresh config, freed by Config's drop.
        let config = Config(unsafe { mlx_sys::mlx_fast_cuda_kernel_config_new() });
        for (shape, dtype) in &launch.outputs {
            // SAFETY: the shape pointer is valid for the call; mlx-c copies it.
            let status = unsafe {
                mlx_sys::mlx_fast_cuda_kernel_config_add_output_arg(
                    config.0,
                    shape.as_ptr(),
                    shape.len(),
                    *dtype as mlx_sys::mlx_dtype,
                )
            };
            self.check(status, "output")?;
        }
        let [gx, gy, gz] = launch.grid;
        let [tx, ty, tz] = launch.threads;
        // SAFETY: plain integer setters on a live config.
        unsafe {
            self.check(mlx_sys::mlx_fast_cuda_kernel_config_set_grid(config.0, gx, gy, gz), "grid")?;
            self.check(mlx_sys::mlx_fast_cuda_kernel_config_set_thread_group(config.0, tx, ty, tz), "thread group")?;
        }
        let c = c_string("COHORT_DTYPES")?;
        // SAFETY: the name is valid for the call; mlx-c copies it.
        let status =
            unsafe { mlx_sys::mlx_fast_cuda_kernel_config_add_template_arg_int(config.0, c.as_ptr(), dtype_key) };
        self.check(status, "dtype key")?;
        for (name, value) in launch.ints {
            let c = c_string(name)?;
            // SAFETY: the name is valid for the call; mlx-c copies it.
            let status =
                unsafe { mlx_sys::mlx_fast_cuda_kernel_config_add_template_arg_int(config.0, c.as_ptr(), *value) };
            self.check(status, name)?;
        }
        for (name, value) in launch.bools {
            let c = c_string(name)?;
            // SAFETY: as above.
            let status =
                unsafe { mlx_sys::mlx_fast_cuda_kernel_config_add_template_arg_bool(config.0, c.as_ptr(), *value) };
            self.check(status, name)?;
        }
        Ok(config)
    }

    /// Apply the kernel on the GPU stream: one lazy node with one output per declared output.
    pub fn apply(&self, inputs: &[&Array], launch: &Launch) -> Result<Vec<Array>> {
        if launch.outputs.len() != self.outputs {
            bail!("the {} kernel has {} outputs, {} were shaped", self.name, self.outputs, launch.outputs.len());
        }
        // MLX names a compiled kernel by its name and template values only, and caches it by that
        // name (in memory and on disk), while the signature it generates depends on the arrays'
        // dtypes: one more template value, from every input's and output's dtype, keeps a launch
        // in other dtypes from being served a module compiled for the first.
        let dtypes = inputs.iter().map(|a| a.dtype()).chain(launch.outputs.iter().map(|(_, d)| *d));
        let dtype_key = (fnv1a(dtypes.map(|d| d as u8)) & 0x7fff_ffff) as i32;
        let key = launch_key(launch, dtype_key);
        let mut configs = self.configs.lock().unwrap_or_else(|e| e.into_inner());
        if !self.cache_configs || (configs.len() >= MAX_CONFIGS && !configs.contains_key(&key)) {
            configs.clear();
        }
        let config = match configs.entry(key) {
            Entry::Occupied(kept) => kept.into_mut(),
            Entry::Vacant(slot) => slot.insert(self.config(launch, dtype_key)?),
        };
        // SAFETY: the input vector holds new references to live arrays and is freed below; the
        // output vector is filled by the call and each element is taken over by an owned Array.
        // Each kernel reads only within its inputs (its caller checks the shapes) and writes each
        // output element at most once.
        unsafe {
            let vec = mlx_sys::mlx_vector_array_new();
            for a in inputs {
                if mlx_sys::mlx_vector_array_append_value(vec, a.as_ptr()) != 0 {
                    mlx_sys::mlx_vector_array_free(vec);
                    bail!("MLX could not take the {} kernel's inputs", self.name);
                }
            }
            let mut out = mlx_sys::mlx_vector_array_new();
            let stream = mlx_rs::Stream::gpu();
            let status = mlx_sys::mlx_fast_cuda_kernel_apply(&mut out, self.raw, vec, config.0, stream.as_ptr());
            mlx_sys::mlx_vector_array_free(vec);
            if status != 0 || mlx_sys::mlx_vector_array_size(out) != self.outputs {
                mlx_sys::mlx_vector_array_free(out);
                bail!("MLX could not apply the {} kernel", self.name);
            }
            let mut arrays = Vec::with_capacity(self.outputs);
            for i in 0..self.outputs {
                let mut a = mlx_sys::mlx_array_new();
                mlx_sys::mlx_vector_array_get(&mut a, out, i);
                arrays.push(Array::from_ptr(a));
            }
            mlx_sys::mlx_vector_array_free(out);
            Ok(arrays)
        }
    }
}

/// Where a kernel is kept once built: a `static` beside the function that builds it. The first
/// caller builds it; a failed build's error is kept and repeated, so a kernel that cannot compile
/// costs one compile a process.
pub struct KernelCell(std::sync::OnceLock<std::result::Result<CudaKernel, String>>);

impl KernelCell {
    pub const fn new() -> Self {
        KernelCell(std::sync::OnceLock::new())
    }

    /// The kernel, built by `build` on first use.
    pub fn get_or_build(&'static self, build: impl FnOnce() -> Result<CudaKernel>) -> Result<&'static CudaKernel> {
        self.0.get_or_init(|| build().map_err(|e| format!("{e:#}"))).as_ref().map_err(|e| anyhow!("{e}"))
    }
}

impl Default for KernelCell {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compacting_drops_comments_and_indentation_and_keeps_code_literals_and_directives() {
        let text = "#include \"a.cuh\" // why\n\
                    #define TWICE(x) \\\n    (2 * (x))\n\
                    \n\
                    /* a block\n   comment */ const char* s = \"// kept\"; // gone\n\
                    \tconst char c = '/'; int a = 4 /* mid */ / 2;\n";
        assert_eq!(
            compact(text),
            "#include \"a.cuh\"\n#define TWICE(x) \\\n(2 * (x))\nconst char* s = \"// kept\";\n\
             const char c = '/'; int a = 4   / 2;\n"
        );
    }

    #[test]
    fn every_kernel_compacts_to_fewer_bytes_with_no_comment_left_and_its_directives_whole() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/model/cuda");
        let mut seen = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            // The kernel bodies and headers, not the wrappers beside them.
            if !path.extension().is_some_and(|x| x == "cu" || x == "cuh") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let short = compact(&text);
            let name = path.display();
            assert!(short.len() < text.len(), "{name}");
            assert!(!short.contains("//") && !short.contains("/*"), "{name}");
            assert_eq!(compact(&short), short, "{name}: compacting twice changes it");
            let directives = |t: &str| {
                t.lines()
                    .map(str::trim)
                    .filter(|l| l.starts_with('#'))
                    .map(|l| l.split("//").next().unwrap().trim().to_owned())
                    .collect::<Vec<_>>()
            };
            assert_eq!(directives(&short), directives(&text), "{name}");
            if let Some(out) = std::env::var_os("NVRTC_CHECK_COMPACTED_DIR") {
                // For scripts/gpu/nvrtc_check.py: COHORT_KERNEL_DIR=<out> compiles what MLX is given.
                std::fs::write(std::path::Path::new(&out).join(path.file_name().unwrap()), &short).unwrap();
            }
            seen += 1;
        }
        assert!(seen >= 10, "only {seen} kernel files found in {}", dir.display());
    }

    #[test]
    fn launches_that_differ_in_anything_have_different_keys() {
        let launch = |ints: &'static [(&'static str, i32)], bools: &'static [(&'static str, bool)], grid| Launch {
            outputs: vec![(vec![1, 512], Dtype::Bfloat16)],
            grid,
            threads: [32, 4, 1],
            ints,
            bools,
        };
        let base = launch_key(&launch(&[("K", 2048), ("N", 512)], &[], [32, 128, 1]), 7);
        assert_eq!(base, launch_key(&launch(&[("K", 2048), ("N", 512)], &[], [32, 128, 1]), 7));
        let others = [
            launch_key(&launch(&[("K", 2048), ("N", 256)], &[], [32, 128, 1]), 7),
            launch_key(&launch(&[("K", 2048), ("M", 512)], &[], [32, 128, 1]), 7),
            launch_key(&launch(&[("K", 2048)], &[("N", true)], [32, 128, 1]), 7),
            launch_key(&launch(&[("K", 2048), ("N", 512)], &[], [32, 64, 1]), 7),
            launch_key(&launch(&[("K", 2048), ("N", 512)], &[], [32, 128, 1]), 8),
        ];
        for other in others {
            assert_ne!(base, other);
        }
        let mut wider = launch(&[("K", 2048), ("N", 512)], &[], [32, 128, 1]);
        wider.outputs = vec![(vec![1, 1, 512], Dtype::Bfloat16)];
        assert_ne!(base, launch_key(&wider, 7));
    }
}
