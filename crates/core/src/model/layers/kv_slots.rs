//! A cohort's attention KV kept in one buffer per layer, [W, kv_heads, capacity, head_dim], with
//! row b in slot b. Rows still own their offsets (committed and physical); only the storage is
//! shared, so a whole-cohort step can RoPE, write and attend every row with one op each instead
//! of one chain per row (`attention` decides when it does). On MLX's CPU backend the per-row chain cost more than the projections
//! (docs/benchmarks.md, "Batched cohort attention").

use std::cell::RefCell;
use std::rc::Rc;

use anyhow::{Result, bail};
use mlx_rs::Array;

use super::cache::{KvCache, LayerState, RowCache, whole_steps};
use crate::model::ops::{slice, slice_update};

/// One layer's keys and values for every slot.
pub struct SlotBuffer {
    keys: Array,
    values: Array,
}

/// A shared buffer; the cohort that packed it evaluates it once per cycle.
pub type SlotHandle = Rc<RefCell<SlotBuffer>>;

/// Where a packed row's KV lives.
#[derive(Clone)]
pub struct Slot {
    pub buffer: SlotHandle,
    pub index: i32,
}

impl SlotBuffer {
    fn capacity(&self) -> i32 {
        self.keys.shape()[2]
    }

    fn width(&self) -> i32 {
        self.keys.shape()[0]
    }

    /// Grow every slot to hold `needed` positions, in steps of KV_STEP.
    fn reserve(&mut self, needed: i32) -> Result<()> {
        let capacity = self.capacity();
        if needed <= capacity {
            return Ok(());
        }
        let grow = whole_steps(needed - capacity);
        let widen = |a: &Array| -> Result<Array> {
            let mut shape = a.shape().to_vec();
            shape[2] = grow;
            let zeros = mlx_rs::ops::zeros_dtype(&shape, a.dtype())?;
            Ok(mlx_rs::ops::concatenate(&[a.clone(), zeros], 2)?)
        };
        self.keys = widen(&self.keys)?;
        self.values = widen(&self.values)?;
        Ok(())
    }
}

/// The whole shared buffer (keys, values), every slot.
pub(super) fn storage(buffer: &SlotHandle) -> (Array, Array) {
    let buf = buffer.borrow();
    (buf.keys.clone(), buf.values.clone())
}

/// The shared buffers of a packed cohort's KV (none where its rows keep their own): what a
/// cycle must evaluate with its outputs. Made by [`crate::model::layers::cache::RowCache::pack`].
#[derive(Clone, Default)]
pub struct PackedKv(Vec<SlotHandle>);

impl PackedKv {
    /// Rows that keep their own KV: nothing shared to evaluate.
    pub fn none() -> Self {
        PackedKv(Vec::new())
    }

    /// How many layers' KV is in shared buffers (0: the rows keep their own).
    pub fn layers(&self) -> usize {
        self.0.len()
    }

    /// Evaluate `arrays` together with the buffers' current arrays, at a step boundary, so no
    /// pending graph is carried into the next step.
    pub fn eval_with<'a>(&self, arrays: impl IntoIterator<Item = &'a Array>) -> Result<()> {
        Ok(mlx_rs::transforms::eval(&self.with_buffers(arrays))?)
    }

    /// `arrays` and the buffers' current arrays: what [`PackedKv::eval_with`] evaluates
    /// (benchmarks that time the graph's handover to the device evaluate it themselves).
    pub fn with_buffers<'a>(&self, arrays: impl IntoIterator<Item = &'a Array>) -> Vec<Array> {
        let mut all: Vec<Array> = arrays.into_iter().cloned().collect();
        for h in &self.0 {
            let b = h.borrow();
            all.extend([b.keys.clone(), b.values.clone()]);
        }
        all
    }
}

impl Slot {
    pub fn capacity(&self) -> i32 {
        self.buffer.borrow().capacity()
    }

    /// One row's write at `offset` ([1, kv_heads, T, head_dim]).
    pub fn write(&self, offset: i32, k: &Array, v: &Array) -> Result<()> {
        let mut buf = self.buffer.borrow_mut();
        buf.reserve(offset + k.shape()[2])?;
        buf.keys = slice_update(&buf.keys, k, &[self.index, 0, offset, 0])?;
        buf.values = slice_update(&buf.values, v, &[self.index, 0, offset, 0])?;
        Ok(())
    }

    /// The whole shared buffer (keys, values), every slot.
    pub fn storage(&self) -> (Array, Array) {
        storage(&self.buffer)
    }

    /// This slot's first `len` positions, [1, kv_heads, len, head_dim] each.
    pub fn view(&self, len: i32) -> Result<(Array, Array)> {
        let buf = self.buffer.borrow();
        let part = |a: &Array| {
            let s = a.shape();
            slice(a, &[self.index, 0, 0, 0], &[self.index + 1, s[1], len, s[3]])
        };
        Ok((part(&buf.keys)?, part(&buf.values)?))
    }
}

/// Move every attention layer's KV (the MTP history included) of `rows` into shared buffers,
/// row b in slot b. Returns the buffers for the caller to evaluate. A layer no row has written
/// yet (the MTP history of an AR cohort) stays unpacked.
pub(super) fn pack(rows: &mut [RowCache]) -> Result<PackedKv> {
    let Some(first) = rows.first() else { return Ok(PackedKv::none()) };
    let (layers, width) = (first.layers.len(), rows.len());
    let mut handles = Vec::new();
    for li in 0..=layers {
        let mut caches: Vec<&mut KvCache> = Vec::with_capacity(rows.len());
        for r in rows.iter_mut() {
            if li == layers {
                caches.push(&mut r.mtp);
            } else {
                match r.layers.get_mut(li) {
                    Some(LayerState::Attention(kv)) => caches.push(kv),
                    Some(LayerState::GatedDelta(_)) => break,
                    None => bail!("rows of one cohort differ in layer count"),
                }
            }
        }
        if caches.len() != width {
            continue; // a recurrent layer
        }
        if let Some(h) = pack_layer(&mut caches)? {
            handles.push(h);
        }
    }
    Ok(PackedKv(handles))
}

fn pack_layer(caches: &mut [&mut KvCache]) -> Result<Option<SlotHandle>> {
    let committed: Vec<Option<(Array, Array)>> = caches.iter().map(|c| c.committed()).collect();
    let Some((k0, v0)) = committed.iter().flatten().next() else { return Ok(None) };
    let (kshape, vshape, dtype) = (k0.shape().to_vec(), v0.shape().to_vec(), k0.dtype());
    let longest = caches.iter().map(|c| c.offset()).max().unwrap_or(0);
    // Room for a verify block before the first growth.
    let capacity = whole_steps(longest + 2);
    let padded = |part: Option<&Array>, shape: &[i32]| -> Result<Array> {
        let have = part.map(|p| p.shape()[2]).unwrap_or(0);
        let mut zshape = shape.to_vec();
        zshape[2] = capacity - have;
        let zeros = mlx_rs::ops::zeros_dtype(&zshape, dtype)?;
        Ok(match part {
            Some(p) if have > 0 => mlx_rs::ops::concatenate(&[p.clone(), zeros], 2)?,
            _ => zeros,
        })
    };
    let mut keys = Vec::with_capacity(caches.len());
    let mut values = Vec::with_capacity(caches.len());
    for c in &committed {
        keys.push(padded(c.as_ref().map(|c| &c.0), &kshape)?);
        values.push(padded(c.as_ref().map(|c| &c.1), &vshape)?);
    }
    let buffer = Rc::new(RefCell::new(SlotBuffer {
        keys: mlx_rs::ops::concatenate(&keys, 0)?,
        values: mlx_rs::ops::concatenate(&values, 0)?,
    }));
    for (i, c) in caches.iter_mut().enumerate() {
        c.move_to_slot(Slot { buffer: buffer.clone(), index: i as i32 });
    }
    Ok(Some(buffer))
}

/// Write `k`, `v` [W, kv_heads, T, d] into every slot of `buffer`, row b at `offsets[b]`: one
/// scatter for keys and one for values.
pub(super) fn put_block(buffer: &SlotHandle, offsets: &[i32], k: &Array, v: &Array) -> Result<()> {
    let t = k.shape()[2];
    let longest = offsets.iter().max().copied().unwrap_or(0) + t;
    let positions: Vec<i32> = offsets.iter().flat_map(|&o| (0..t).map(move |i| o + i)).collect();
    let index = Array::from_slice(&positions, &[offsets.len() as i32, 1, t, 1]);
    let mut buf = buffer.borrow_mut();
    buf.reserve(longest)?;
    let put = |dst: &Array, src: &Array| -> Result<Array> {
        let idx = mlx_rs::ops::broadcast_to(&index, src.shape())?;
        Ok(mlx_rs::ops::indexing::put_along_axis(dst, &idx, src, 2)?)
    };
    buf.keys = put(&buf.keys, k)?;
    buf.values = put(&buf.values, v)?;
    Ok(())
}

/// The shared buffer when `caches` are exactly its slots, in order.
pub(super) fn shared_buffer(caches: &[&mut KvCache]) -> Option<SlotHandle> {
    let first = caches.first()?.slot()?;
    let whole = first.buffer.borrow().width() == caches.len() as i32
        && caches
            .iter()
            .enumerate()
            .all(|(i, c)| c.slot().is_some_and(|s| s.index == i as i32 && Rc::ptr_eq(&s.buffer, &first.buffer)));
    whole.then(|| first.buffer.clone())
}
