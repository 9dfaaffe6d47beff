//! `cohort-lab bench-step --node-costs`: the host time MLX spends on one node of each kind a decode
//! step is made of, at the real geometry's B1 shapes. A step on MLX's CUDA backend is bound by
//! the host handing nodes to the device (bench-step's B1 split), so a step's node counts
//! (`--graph-stats`) times these costs say where its time goes, and which nodes are worth
//! removing or fusing. Each kind: `COUNT` independent nodes on evaluated inputs, built, handed
//! over with `async_eval`, then waited for; the median of 5 batches per node.

use std::time::Instant;

use anyhow::Result;
use mlx_rs::{Array, Dtype};

const COUNT: usize = 400;

/// Makes the i-th node of a kind.
type MakeNode<'a> = Box<dyn Fn(usize) -> Result<Array> + 'a>;

/// One kind's per-node figures, in microseconds.
#[derive(serde::Serialize)]
pub struct NodeCost {
    pub kind: &'static str,
    pub build_us: f64,
    pub enqueue_us: f64,
    pub total_us: f64,
}

fn random(shape: &[i32], dtype: Dtype) -> Result<Array> {
    let a = mlx_rs::random::normal::<f32>(shape, None, None, None)?.as_dtype(dtype)?;
    a.eval()?;
    Ok(a)
}

/// Time `COUNT` nodes made by `make` (median of 5 batches after one warm-up).
fn measure(kind: &'static str, make: &dyn Fn(usize) -> Result<Array>) -> Result<NodeCost> {
    let mut runs = Vec::new();
    for batch in 0..6 {
        let t = Instant::now();
        let nodes = (0..COUNT).map(make).collect::<Result<Vec<_>>>()?;
        let built = t.elapsed().as_secs_f64();
        mlx_rs::transforms::async_eval(nodes.iter())?;
        let enqueued = t.elapsed().as_secs_f64();
        mlx_rs::transforms::eval(nodes.iter())?;
        let total = t.elapsed().as_secs_f64();
        if batch > 0 {
            runs.push((built, enqueued - built, total));
        }
    }
    let per = |f: fn(&(f64, f64, f64)) -> f64| {
        let mut v: Vec<f64> = runs.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2] * 1e6 / COUNT as f64
    };
    Ok(NodeCost { kind, build_us: per(|r| r.0), enqueue_us: per(|r| r.1), total_us: per(|r| r.2) })
}

pub fn run(dtype: Dtype) -> Result<Vec<NodeCost>> {
    let h = 2048;
    let x = random(&[1, h], dtype)?;
    let (w, s, b) = mlx_rs::ops::quantize(&random(&[512, h], dtype)?, 64, 4)?;
    let (ew, es, eb) = mlx_rs::ops::quantize(&random(&[64, 512, h], dtype)?, 64, 4)?;
    mlx_rs::transforms::eval([&w, &s, &b, &ew, &es, &eb])?;
    let xe = x.reshape(&[1, 1, 1, h])?;
    let experts = Array::from_slice(&[3u32, 9, 17, 21, 33, 40, 51, 60], &[1, 8]);
    let rows = Array::from_slice(&[0u32; 8], &[1, 8]);
    let norm_w = random(&[h], dtype)?;
    let logits = random(&[1, 256], Dtype::Float32)?;
    let tail = random(&[1, 3, 8192], dtype)?;
    let new = random(&[1, 1, 8192], dtype)?;
    let spec = cohort_core::model::config::QuantSpec { bits: 4, group_size: 64 };
    let x3 = x.reshape(&[1, 1, h])?;
    x3.eval()?;
    let mut kinds: Vec<(&'static str, MakeNode)> = vec![
        ("Reshape (a view)", Box::new(|_| Ok(x.reshape(&[1, 1, h])?))),
        ("Slice (a view)", Box::new(|i| cohort_core::model::ops::slice_axis(&x, 1, i as i32 % 64, 64 + i as i32 % 64))),
        ("Add [1, 2048]", Box::new(|_| Ok(x.add(&x)?))),
        ("RMSNorm [1, 2048]", Box::new(|_| Ok(mlx_rs::fast::rms_norm(&x, Some(&norm_w), 1e-6)?))),
        (
            "QuantizedMatmul 2048 -> 512, M=1",
            Box::new(|_| Ok(mlx_rs::ops::quantized_matmul(&x, &w, &s, &b, true, 64, 4)?)),
        ),
        (
            "GatherQMM 2048 -> 512, 8 experts",
            Box::new(|_| Ok(mlx_rs::ops::gather_qmm(&xe, &ew, &es, &eb, &rows, &experts, true, 64, 4, false)?)),
        ),
        ("Softmax [1, 256]", Box::new(|_| Ok(mlx_rs::ops::softmax_axis(&logits, -1, true)?))),
        ("ArgPartition [1, 256]", Box::new(|_| Ok(mlx_rs::ops::argpartition_axis(&logits, 248, -1)?))),
        ("Concatenate [1, 3 + 1, 8192]", Box::new(|_| Ok(mlx_rs::ops::concatenate(&[&tail, &new], 1)?))),
        (
            "Add, then RMSNorm [1, 2048] (two nodes)",
            Box::new(|_| Ok(mlx_rs::fast::rms_norm(&x.add(&x)?, Some(&norm_w), 1e-6)?)),
        ),
    ];
    // The same pair as one of cohort's kernels: whether a custom kernel's node costs the host
    // what MLX's own do.
    if cohort_core::platform::backend::Backend::detect() == cohort_core::platform::backend::Backend::Cuda {
        kinds.push((
            "add-norm kernel [1, 2048] (one CustomKernel node)",
            Box::new(|_| Ok(cohort_core::model::cuda::add_norm::add_rms_norm(&x, &x, &norm_w, 1e-6)?.1)),
        ));
        // The invariant route's product, which is every product of a step there: as served, and
        // as it was called before (whole kernel text, a configuration built each call, x
        // flattened and the result reshaped: three nodes).
        if x.dtype() == Dtype::Bfloat16 {
            fn unfit() -> anyhow::Error {
                anyhow::anyhow!("the tensor-core product does not take this shape")
            }
            kinds.push((
                "invariant product 2048 -> 512, M=1, as served (one node)",
                Box::new(|_| {
                    cohort_core::model::cuda::row_invariant::affine_product_mma(&x3, &w, &s, &b, spec, 512)
                        .unwrap_or_else(|| Err(unfit()))
                }),
            ));
            kinds.push((
                "the same as called before (whole text, a config each call, two reshapes)",
                Box::new(|_| {
                    let flat = x3.reshape(&[1, h])?;
                    let before = cohort_core::model::cuda::row_invariant::mma_product_with;
                    let y =
                        before(mma_kernel_as_before, &flat, [&w, &s, &b], spec, 512).unwrap_or_else(|| Err(unfit()))?;
                    Ok(y.reshape(&[1, 1, 512])?)
                }),
            ));
        }
    }
    kinds.iter().map(|(kind, make)| measure(kind, make.as_ref())).collect()
}

pub fn print(costs: &[NodeCost]) {
    println!("\nhost time per node, {COUNT} independent nodes of one kind (medians of 5 batches)");
    println!("| node | built us | handed to the device us | done us |");
    println!("| --- | --- | --- | --- |");
    for c in costs {
        println!("| {} | {:.2} | {:.2} | {:.2} |", c.kind, c.build_us, c.enqueue_us, c.total_us);
    }
}

/// The tensor-core kernel as its calls were before they were made cheaper (its whole text, a
/// configuration built at every call: `CudaKernel::build` not lean), to time a node of each.
fn mma_kernel_as_before() -> anyhow::Result<&'static cohort_core::model::cuda::cuda_kernel::CudaKernel> {
    use cohort_core::model::cuda::cuda_kernel::{CudaKernel, KernelCell};
    static KERNEL: KernelCell = KernelCell::new();
    KERNEL.get_or_build(|| {
        let io: (&[&str], &[&str]) = (&["x", "w", "s", "b"], &["y"]);
        let source = cohort_core::model::cuda::row_invariant::MMA_SOURCE;
        CudaKernel::build("cohort_affine_mma", "affine_mma.cu", io, source, None, false)
    })
}
