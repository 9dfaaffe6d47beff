//! What a lazy graph will run, counted before it is evaluated: one entry per primitive kind.
//! On MLX's CUDA backend every node costs host time to encode whatever the bytes it reads, so a
//! step's node count, not its arithmetic, is what bounds a small-batch step (issue 9's profile).

use std::collections::BTreeMap;
use std::ffi::CString;

use anyhow::{Result, bail};
use mlx_rs::Array;

unsafe extern "C" {
    fn fopen(path: *const std::os::raw::c_char, mode: *const std::os::raw::c_char) -> *mut mlx_sys::FILE;
    fn fclose(file: *mut mlx_sys::FILE) -> std::os::raw::c_int;
}

/// The unevaluated nodes behind `outputs`, by primitive name (MLX's own names: `Add`,
/// `QuantizedMatmul`, `Compiled...`), and their total.
#[derive(Debug, Default, serde::Serialize)]
pub struct GraphStats {
    pub nodes: usize,
    pub by_primitive: BTreeMap<String, usize>,
}

impl GraphStats {
    /// Counts through MLX's graph printer (`mlx_print_graph`), the one public walk of a tape:
    /// a line per node after the inputs and outputs headers, the primitive's name first.
    pub fn of(outputs: &[&Array]) -> Result<Self> {
        // One file per call: threads of one process (tests) may count graphs at once.
        static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("cohort-graph-{}-{call}.txt", std::process::id()));
        let c_path = CString::new(path.to_string_lossy().as_bytes())?;
        // SAFETY: the vector holds copies of the arrays' handles and is freed below; the file is
        // opened, written by mlx-c and closed before it is read.
        unsafe {
            let vec = mlx_sys::mlx_vector_array_new();
            for a in outputs {
                mlx_sys::mlx_vector_array_append_value(vec, a.as_ptr());
            }
            let file = fopen(c_path.as_ptr(), c"w".as_ptr());
            if file.is_null() {
                mlx_sys::mlx_vector_array_free(vec);
                bail!("could not open {} for the graph listing", path.display());
            }
            let namer = mlx_sys::mlx_node_namer_new();
            let status = mlx_sys::mlx_print_graph(file, namer, vec);
            mlx_sys::mlx_node_namer_free(namer);
            fclose(file);
            mlx_sys::mlx_vector_array_free(vec);
            if status != 0 {
                bail!("MLX could not list the graph");
            }
        }
        let text = std::fs::read_to_string(&path)?;
        let _ = std::fs::remove_file(&path);
        Ok(Self::parse(&text))
    }

    fn parse(listing: &str) -> Self {
        let mut stats = GraphStats::default();
        for line in listing.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with("Inputs") || line.starts_with("Outputs") {
                continue;
            }
            let name = line.split(|c: char| c.is_whitespace() || c == '(' || c == '{').next().unwrap_or(line);
            *stats.by_primitive.entry(name.to_owned()).or_default() += 1;
            stats.nodes += 1;
        }
        stats
    }
}
