//! `cohort device --check-invariance`: the row-invariant route's kernels against float64 and
//! against themselves (issue 41). Each product must be within rounding of a float64 product and
//! give every row of a block bit for bit what the row gives alone; the short-block attention
//! kernel must give a verify block's queries bit for bit what single-token steps and lone rows
//! give. CUDA only: the kernels have no other backend.

use anyhow::{Result, ensure};
use mlx_rs::Dtype;

use crate::model::attention_kernel::{self, Shape};
use crate::model::config::QuantSpec;
use crate::model::row_invariant;

/// Largest relative error a product may show against float64: float32 accumulation over at
/// most a few thousand inputs, then the output rounded to its dtype.
fn tolerance(dtype: Dtype) -> f64 {
    if dtype == Dtype::Float32 { 1e-5 } else { 1e-2 }
}

/// (inputs, outputs, bits, group; bits 0: a float weight): the default model's projections and
/// tied 8-bit LM head, two of the real Qwen3.6-35B-A3B geometry's, and float weights of the same
/// shapes (checkpoints stored unquantized).
const PRODUCTS: [(i32, i32, i32, i32); 10] = [
    (576, 576, 4, 32),
    (576, 192, 4, 32),
    (576, 1536, 4, 32),
    (1536, 576, 4, 32),
    (576, 49_152, 8, 32),
    (2048, 4096, 4, 64),
    (4096, 2048, 4, 64),
    (576, 192, 0, 0),
    (1536, 576, 0, 0),
    (576, 49_152, 0, 0),
];

pub fn run() -> Result<()> {
    ensure!(
        crate::engine::runtime::Backend::is_cuda(),
        "the row-invariant kernels run only where MLX drives CUDA (this backend: {:?})",
        crate::engine::runtime::Backend::detect()
    );
    let mut failures = Vec::new();
    for dtype in [Dtype::Bfloat16, Dtype::Float32] {
        for (input, out, bits, group_size) in PRODUCTS {
            for rows in [2, 8, 16] {
                let spec = (bits > 0).then_some(QuantSpec { bits, group_size });
                let weight = if bits > 0 { format!("{bits}-bit g{group_size}") } else { "float".into() };
                let r = row_invariant::check(rows, input, out, spec, dtype, 41 + rows as u64)?;
                println!(
                    "row-invariant product {input}->{out} {weight} {dtype:?}, {rows} rows: relative error {:.2e}, rows differing from alone {}",
                    r.relative_error, r.rows_differing
                );
                if r.relative_error > tolerance(dtype) || r.rows_differing > 0 {
                    failures.push(format!("product {input}->{out} {weight} {dtype:?} x{rows}"));
                }
            }
        }
    }
    let small = Shape { heads: 9, kv_heads: 3, head_dim: 64, queries: 2, capacity: 512 };
    for (name, shape) in [("default model", small), ("Qwen3.6 real", Shape::REAL)] {
        for dtype in [Dtype::Bfloat16, Dtype::Float32] {
            let offsets: Vec<i32> = (0..8).map(|r| 1 + r * (shape.capacity - 3) / 7).collect();
            let differing = attention_kernel::check_invariance(shape, &offsets, dtype, 7)?;
            println!(
                "short-block attention, {name} ({dtype:?}), 8 rows: outputs differing from steps or lone rows {differing}"
            );
            if differing > 0 {
                failures.push(format!("attention {name} {dtype:?}"));
            }
        }
    }
    ensure!(failures.is_empty(), "not row-invariant or off the float64 product: {}", failures.join(", "));
    println!("every row-invariant kernel is exact against itself and within tolerance of float64");
    Ok(())
}
