//! A packed cohort's attention for a short query block (a B8 verify's 2 positions, an AR step's
//! or a draft's 1) as one CUDA kernel (`attention_short.cu`): every row's queries over
//! its own keys in the slot buffer, visible by the row's offset, online softmax in float32. Where
//! a row holds more than [`SEGMENT`] keys the keys are split into segments of that many positions,
//! a block each, and `attention_merge.cu` combines them in order. On
//! MLX CUDA the masked SDPA it replaces (`attention::attend_cohort`) falls back to ops for
//! head_dim 256: per attention layer a mask made on the host and uploaded, a where over the whole
//! buffer (19 us of a B8 verify's device time a layer, docs/benchmarks.md, session 31), a
//! softmax, two batched matmuls with their pointer set-ups, and the views between them, each a
//! node the host pays for.
//!
//! **Off by default, not yet run on the GPU**: `COHORT_ATTENTION_KERNEL=1` turns it on (CUDA
//! only). The lab's `checks::attention_check` holds it to a float64 host attention and to itself,
//! and runs MLX's masked SDPA as the cohort takes it against the same reference on any backend,
//! which checks the reference on the CPU (tests/kernels/attention_kernel.rs).

use anyhow::{Result, bail};
use mlx_rs::{Array, Dtype};

use super::cuda_kernel::{CudaKernel, KernelCell, Launch};

const SOURCE: &str = include_str!("attention_short.cu");
const MERGE_SOURCE: &str = include_str!("attention_merge.cu");

/// Key positions one block of a split launch takes. A B1 step at 128k positions is then 2,048
/// blocks of the real geometry's 16 heads instead of 16 (each warp read 8,192 keys one after
/// another: 94% of the step's device time on an H100, docs/benchmarks.md); a row of at most this
/// many keys gets the bits of an unsplit launch.
pub const SEGMENT: i32 = 1024;
/// load_floats and warp_sum, shared with the expert kernels.
const HEADER: (&str, &str) = ("affine_dot.cuh", include_str!("affine_dot.cuh"));

/// Floats of shared memory the warps' parts take at most (32 KB: WARPS x T x D).
const SHARED_FLOATS: i32 = 8192;

/// Warps a block (one block per row and query head): 16 where their parts fit the shared
/// memory, else 8. At a B8 verify the grid is only 128 blocks, about one an SM, so the warps of
/// a block are all the loads an SM has in flight.
fn warps_for(t: i32, d: i32) -> i32 {
    if 16 * t * d <= SHARED_FLOATS { 16 } else { 8 }
}

/// Query positions a block takes at most: each lane holds a running output of D / 32 floats
/// for every one of them.
pub const MAX_QUERIES: i32 = 2;

fn kernel() -> Result<&'static CudaKernel> {
    static KERNEL: KernelCell = KernelCell::new();
    KERNEL.get_or_build(|| {
        CudaKernel::new(
            "cohort_attention_short",
            "attention_short.cu",
            &["q", "keys", "values", "offsets"],
            &["out", "parts", "stats"],
            SOURCE,
            Some(HEADER),
        )
    })
}

fn merge_kernel() -> Result<&'static CudaKernel> {
    static KERNEL: KernelCell = KernelCell::new();
    KERNEL.get_or_build(|| {
        CudaKernel::new(
            "cohort_attention_merge",
            "attention_merge.cu",
            &["parts", "stats"],
            &["out"],
            MERGE_SOURCE,
            None,
        )
    })
}

/// Segments a launch over rows whose longest sees `longest` keys takes (1: unsplit).
fn segments(longest: i32) -> i32 {
    (longest + SEGMENT - 1) / SEGMENT
}

/// Whether the kernel's layout holds these shapes: q [B, NH, T, D] with T <= [`MAX_QUERIES`],
/// keys and values [B, NKV, CAP, D] with NKV dividing NH, D a multiple of 32 up to 512, one
/// floating dtype throughout.
fn fits(q: &Array, keys: &Array, values: &Array) -> bool {
    let (qs, ks) = (q.shape(), keys.shape());
    if qs.len() != 4 || ks.len() != 4 || values.shape() != ks {
        return false;
    }
    let (b, nh, t, d) = (qs[0], qs[1], qs[2], qs[3]);
    let nkv = ks[1];
    ks[0] == b
        && ks[3] == d
        && t >= 1
        && nkv >= 1
        && nh % nkv == 0
        && d % 32 == 0
        && (32..=512).contains(&d)
        && 8 * t.min(MAX_QUERIES) * d <= SHARED_FLOATS
        && b * nh * segments(ks[2].max(1)) <= 65535
        // The merge takes a block a (row, head, query).
        && b * nh * t <= 65535
        && q.dtype() == keys.dtype()
        && q.dtype() == values.dtype()
        && matches!(q.dtype(), Dtype::Float32 | Dtype::Bfloat16 | Dtype::Float16)
}

/// Whether the cohort's attention takes the kernel for this block: turned on, or the invariant
/// block route is (whatever the switch says: a row's queries then meet the same code alone or in
/// a cohort and at one query or two, since warps take keys by index, a query skips the keys it
/// does not see, and the warps' parts meet in one order, which the exactness gate needs of a
/// verify); on CUDA; and a layout it holds.
pub fn serves(q: &Array, keys: &Array, values: &Array) -> bool {
    let routes = crate::model::routes::current();
    let wanted = routes.attention_kernel || routes.block == crate::model::routes::BlockRoute::Invariant;
    wanted && crate::platform::backend::Backend::is_cuda() && fits(q, keys, values)
}

/// Row b's queries `q` [B, NH, T, D] over its keys and values [B, NKV, CAP, D] at positions
/// 0 ..= offsets[b] + t for query t, scaled by `scale`: [B, NH, T, D] in q's dtype. A block of
/// more than [`MAX_QUERIES`] queries (a prompt read's piece on the invariant route) is taken
/// [`MAX_QUERIES`] at a time, a tile of thread blocks each at its queries' own offsets: a query's
/// bits depend only on the key positions it sees, so they are those of the same query in a step
/// or a verify.
pub fn attend(q: &Array, keys: &Array, values: &Array, offsets: &[i32], scale: f32) -> Result<Array> {
    if !fits(q, keys, values) {
        bail!(
            "the short-block attention kernel does not fit q {:?}, keys {:?}, values {:?} ({:?})",
            q.shape(),
            keys.shape(),
            values.shape(),
            q.dtype()
        );
    }
    let (b, nh, t, d) = (q.shape()[0], q.shape()[1], q.shape()[2], q.shape()[3]);
    let (nkv, cap) = (keys.shape()[1], keys.shape()[2]);
    if offsets.len() != b as usize || offsets.iter().any(|&o| o < 0 || o + t > cap) {
        bail!("the short-block attention kernel's offsets {offsets:?} do not fit {b} rows of {cap} positions");
    }
    let segs = segments(offsets.iter().max().map_or(0, |o| o + t));
    let split = segs > 1;
    let offsets = Array::from_slice(offsets, &[b]);
    let tile = t.min(MAX_QUERIES);
    let tiles = (t + tile - 1) / tile;
    let warps = warps_for(tile, d);
    let unused = (vec![1], Dtype::Float32);
    let outputs = if split {
        vec![(vec![1], q.dtype()), (vec![b, nh, t, segs, d], Dtype::Float32), (vec![b, nh, t, segs, 2], Dtype::Float32)]
    } else {
        vec![(q.shape().to_vec(), q.dtype()), unused.clone(), unused]
    };
    let launch = Launch {
        outputs,
        grid: [32 * tiles, warps, b * nh * segs],
        threads: [32, warps, 1],
        ints: &[
            ("NH", nh),
            ("NKV", nkv),
            ("D", d),
            ("T", tile),
            ("WARPS", warps),
            ("SCALE_BITS", scale.to_bits() as i32),
            ("SEG", SEGMENT),
        ],
        bools: &[("SPLIT", split)],
    };
    let mut outs = kernel()?.apply(&[q, keys, values, &offsets], &launch)?;
    if !split {
        return Ok(outs.swap_remove(0));
    }
    let merge = Launch {
        outputs: vec![(q.shape().to_vec(), q.dtype())],
        grid: [d, 1, b * nh * t],
        threads: [d, 1, 1],
        ints: &[],
        bools: &[],
    };
    Ok(merge_kernel()?.apply(&[&outs[1], &outs[2]], &merge)?.pop().expect("one output"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zeros(shape: &[i32], dtype: Dtype) -> Array {
        Array::zeros::<f32>(shape).unwrap().as_dtype(dtype).unwrap()
    }

    /// The layout's limits: no query, a head width off the warp, mixed
    /// dtypes or heads that do not group keep the masked SDPA.
    #[test]
    fn the_kernel_takes_only_the_layouts_it_holds() {
        let bf = Dtype::Bfloat16;
        let kv = zeros(&[8, 2, 64, 256], bf);
        assert!(fits(&zeros(&[8, 16, 2, 256], bf), &kv, &kv));
        assert!(fits(&zeros(&[8, 16, 1, 256], bf), &kv, &kv));
        assert!(fits(&zeros(&[8, 16, 16, 256], bf), &kv, &kv), "sixteen queries, launched two at a time");
        assert!(!fits(&zeros(&[8, 16, 0, 256], bf), &kv, &kv), "no query");
        assert!(!fits(&zeros(&[8, 16, 2, 256], Dtype::Float32), &kv, &kv), "mixed dtypes");
        assert!(!fits(&zeros(&[8, 15, 2, 256], bf), &kv, &kv), "15 heads on 2 key heads");
        let narrow = zeros(&[8, 2, 64, 48], bf);
        assert!(!fits(&zeros(&[8, 16, 2, 48], bf), &narrow, &narrow), "48 dims");
        assert!(!fits(&zeros(&[4, 16, 2, 256], bf), &kv, &kv), "rows differ");
    }

    /// Off by default, and on only where MLX drives CUDA even when forced.
    #[test]
    fn the_kernel_is_off_unless_forced_on_cuda() {
        let bf = Dtype::Bfloat16;
        let (q, kv) = (zeros(&[2, 16, 1, 256], bf), zeros(&[2, 2, 8, 256], bf));
        use crate::model::routes::{Routes, scoped};
        let defaults = Routes::defaults(crate::platform::backend::Backend::detect());
        assert!(!scoped(defaults, || serves(&q, &kv, &kv)));
        let on = Routes { attention_kernel: true, ..defaults };
        assert_eq!(scoped(on, || serves(&q, &kv, &kv)), crate::platform::backend::Backend::is_cuda());
    }
}
