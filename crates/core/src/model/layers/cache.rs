//! Row-owned state: every row of a batch owns its attention KV (with a committed offset kept
//! apart from physical capacity), its Gated DeltaNet conv tail and recurrent state, and its MTP
//! history KV. A batched step gathers rows' state, runs once, and hands each row its part back.

use anyhow::{Result, bail};
use mlx_rs::Array;

pub use super::gdn_batch::GdnState;
pub use super::kv_slots::PackedKv;
use super::kv_slots::Slot;
pub use crate::model::ops::{gather_rows, row};
use crate::model::ops::{own_copy, slice_axis, slice_update};

/// Positions added to a KV buffer at a time (a verify's two-token write rarely reallocates).
pub const KV_STEP: i32 = 256;

/// `n` positions rounded up to whole KV_STEPs.
pub fn whole_steps(n: i32) -> i32 {
    (n + KV_STEP - 1) / KV_STEP * KV_STEP
}

/// One row's keys and values for one attention layer: [1, kv_heads, capacity, head_dim].
#[derive(Default, Clone)]
pub struct KvCache {
    keys: Option<Array>,
    values: Option<Array>,
    /// Positions that are part of the row's logical context.
    offset: i32,
    /// Positions holding written data; equals `offset` after every commit or trim.
    physical: i32,
    /// Set when a cohort packed this row's KV into a shared buffer (`keys`/`values` are then
    /// unused): the row keeps its offsets, the storage is the cohort's.
    slot: Option<Slot>,
}

impl KvCache {
    pub fn offset(&self) -> i32 {
        self.offset
    }

    pub fn physical(&self) -> i32 {
        self.physical
    }

    pub fn capacity(&self) -> i32 {
        match &self.slot {
            Some(slot) => slot.capacity(),
            None => self.keys.as_ref().map(|k| k.shape()[2]).unwrap_or(0),
        }
    }

    pub fn slot(&self) -> Option<&Slot> {
        self.slot.as_ref()
    }

    /// Hand the storage to a cohort's shared buffer (which already holds the committed data).
    pub fn move_to_slot(&mut self, slot: Slot) {
        self.keys = None;
        self.values = None;
        self.slot = Some(slot);
    }

    /// Take the storage back from a cohort's shared buffer: the committed positions become the
    /// row's own arrays again (a row left alone decodes as a solo row does).
    pub fn unpack(&mut self) {
        if self.slot.is_some() {
            let committed = self.committed();
            self.slot = None;
            (self.keys, self.values) = committed.unzip();
        }
    }

    /// The committed positions in buffers of the row's own, evaluated
    /// ([`crate::model::ops::own_copy`]): a row unpacked from a cohort's slot holds views that
    /// keep the whole shared buffer alive, which a cache entry must not (its byte count would not
    /// see it).
    pub fn detach(&mut self) -> Result<()> {
        self.unpack();
        if let (Some(k), Some(v)) = (&self.keys, &self.values) {
            // Whole KV_STEPs where the row's own buffer has them, as a buffer grows (a row resumed
            // from the copy then packs into buffers of the usual sizes); a row unpacked from a
            // slot holds only its committed positions, and its copy holds just those.
            let keep = whole_steps(self.offset).min(k.shape()[2]);
            let (k, v) = (slice_axis(k, 2, 0, keep)?, slice_axis(v, 2, 0, keep)?);
            (self.keys, self.values) = (Some(own_copy(&k)?), Some(own_copy(&v)?));
            self.physical = self.offset;
        }
        Ok(())
    }

    /// Count `t` positions a batched write has put into the slot.
    pub fn advance(&mut self, t: i32) {
        self.offset += t;
        self.physical = self.offset;
    }

    /// Write `k`, `v` ([1, kv_heads, T, head_dim]) at the offset, which moves past them. Take
    /// views (`view`) only after every row of a step has written: a buffer nothing else reads is
    /// updated in place, one with a live view is copied whole.
    pub fn write(&mut self, k: &Array, v: &Array) -> Result<()> {
        let t = k.shape()[2];
        let needed = self.offset + t;
        if let Some(slot) = &self.slot {
            slot.write(self.offset, k, v)?;
            self.advance(t);
            return Ok(());
        }
        if needed > self.capacity() {
            let grow = whole_steps(needed - self.capacity());
            let mut shape = k.shape().to_vec();
            shape[2] = grow;
            let zeros_k = mlx_rs::ops::zeros_dtype(&shape, k.dtype())?;
            let mut vshape = v.shape().to_vec();
            vshape[2] = grow;
            let zeros_v = mlx_rs::ops::zeros_dtype(&vshape, v.dtype())?;
            // Only committed positions are carried over: anything past the offset is dead.
            self.keys = Some(match &self.keys {
                Some(old) => mlx_rs::ops::concatenate(&[slice_axis(old, 2, 0, self.offset)?, zeros_k], 2)?,
                None => zeros_k,
            });
            self.values = Some(match &self.values {
                Some(old) => mlx_rs::ops::concatenate(&[slice_axis(old, 2, 0, self.offset)?, zeros_v], 2)?,
                None => zeros_v,
            });
        }
        self.keys = Some(slice_update(self.keys.as_ref().unwrap(), k, &[0, 0, self.offset, 0])?);
        self.values = Some(slice_update(self.values.as_ref().unwrap(), v, &[0, 0, self.offset, 0])?);
        self.advance(t);
        Ok(())
    }

    /// Keys and values of every position up to the offset, [1, kv_heads, offset, head_dim] each.
    pub fn view(&self) -> Result<(Array, Array)> {
        self.view_first(self.offset)
    }

    /// The first `len` positions of the storage (up to its capacity; past the offset they are
    /// stale and must be masked).
    pub fn view_first(&self, len: i32) -> Result<(Array, Array)> {
        if let Some(slot) = &self.slot {
            return slot.view(len);
        }
        match (&self.keys, &self.values) {
            (Some(k), Some(v)) => Ok((slice_axis(k, 2, 0, len)?, slice_axis(v, 2, 0, len)?)),
            _ => bail!("this KV cache holds nothing yet"),
        }
    }

    /// Drop the last `n` positions from the logical context; the physical bound follows.
    pub fn trim(&mut self, n: i32) -> Result<()> {
        if n < 0 || n > self.offset {
            bail!("cannot trim {n} positions from a KV cache holding {}", self.offset);
        }
        self.offset -= n;
        self.physical = self.offset;
        Ok(())
    }

    /// The storage a block of `t` positions was just written to, for host attention.
    pub fn host_kv(&self, t: i32) -> Result<crate::model::cpu::attention_cpu::RowKv> {
        self.storage(self.offset - t).ok_or_else(|| anyhow::anyhow!("this KV cache holds nothing yet"))
    }

    /// The storage as it stands, with the offset as the count of positions it holds (None when
    /// nothing was written yet).
    pub fn stored_kv(&self) -> Option<crate::model::cpu::attention_cpu::RowKv> {
        if self.offset == 0 { None } else { self.storage(self.offset) }
    }

    /// The storage (a slot's shared buffer or the row's own arrays), `offset` positions before
    /// the block its reader attends.
    fn storage(&self, offset: i32) -> Option<crate::model::cpu::attention_cpu::RowKv> {
        if let Some(slot) = &self.slot {
            let (keys, values) = slot.storage();
            return Some(crate::model::cpu::attention_cpu::RowKv { keys, values, slot: slot.index, offset });
        }
        match (&self.keys, &self.values) {
            (Some(k), Some(v)) => {
                Some(crate::model::cpu::attention_cpu::RowKv { keys: k.clone(), values: v.clone(), slot: 0, offset })
            }
            _ => None,
        }
    }

    /// Arrays to evaluate so the cache holds no pending graph (a slot's buffer is the cohort's
    /// to evaluate).
    pub fn arrays(&self) -> Vec<&Array> {
        self.keys.iter().chain(self.values.iter()).collect()
    }

    /// The row's own buffers, whole (capacity and all), as a saved cache entry keeps them; None
    /// where nothing was written or the storage is a cohort's slot.
    pub fn stored(&self) -> Option<(Array, Array)> {
        match (&self.slot, &self.keys, &self.values) {
            (None, Some(k), Some(v)) => Some((k.clone(), v.clone())),
            _ => None,
        }
    }

    /// A cache holding `keys` and `values` ([1, kv_heads, capacity, head_dim]) with its first
    /// `offset` positions committed: a saved entry's buffers read back ([`Self::stored`]).
    pub fn restored(keys: Array, values: Array, offset: i32) -> Result<Self> {
        let fits = |a: &Array| a.ndim() == 4 && a.shape()[2] >= offset;
        if offset < 0 || !fits(&keys) || !fits(&values) || keys.shape() != values.shape() {
            bail!("saved keys {:?} and values {:?} cannot hold {offset} positions", keys.shape(), values.shape());
        }
        Ok(KvCache { keys: Some(keys), values: Some(values), offset, physical: offset, slot: None })
    }
}

/// One layer's state in one row.
#[derive(Clone)]
pub enum LayerState {
    Attention(KvCache),
    GatedDelta(GdnState),
}

/// Everything one row owns of the model's state.
#[derive(Clone)]
pub struct RowCache {
    pub layers: Vec<LayerState>,
    /// The MTP module's own attention KV (the MTP history).
    pub mtp: KvCache,
    /// Tokens in the row's committed context.
    pub len: i32,
}

impl RowCache {
    /// Move `rows`' KV into one buffer per attention layer, row b in slot b, so a cycle attends
    /// every row at once; each row keeps its own offsets. The buffers come back for the caller
    /// to evaluate with each step's outputs.
    pub fn pack(rows: &mut [RowCache]) -> Result<PackedKv> {
        super::kv_slots::pack(rows)
    }

    pub fn new(kinds: &[crate::model::config::LayerKind]) -> Self {
        let layers = kinds
            .iter()
            .map(|k| match k {
                crate::model::config::LayerKind::Full => LayerState::Attention(KvCache::default()),
                crate::model::config::LayerKind::GatedDelta => LayerState::GatedDelta(GdnState::default()),
            })
            .collect();
        Self { layers, mtp: KvCache::default(), len: 0 }
    }

    /// The recurrent part of the row (what a rejected verify must restore).
    pub fn recurrent_snapshot(&self) -> Vec<Option<GdnState>> {
        self.layers
            .iter()
            .map(|l| match l {
                LayerState::GatedDelta(s) => Some(s.clone()),
                LayerState::Attention(_) => None,
            })
            .collect()
    }

    pub fn restore_recurrent(&mut self, snap: &[Option<GdnState>]) {
        for (layer, saved) in self.layers.iter_mut().zip(snap) {
            if let (LayerState::GatedDelta(s), Some(saved)) = (layer, saved) {
                *s = saved.clone();
            }
        }
    }

    /// Drop the last `n` tokens from every attention layer (GDN state is restored separately).
    pub fn trim_attention(&mut self, n: i32) -> Result<()> {
        for layer in &mut self.layers {
            if let LayerState::Attention(kv) = layer {
                kv.trim(n)?;
            }
        }
        self.len -= n;
        Ok(())
    }

    /// Whether every layer can be cut back to an earlier position (attention only).
    pub fn cuts_back(&self) -> bool {
        self.layers.iter().all(|l| matches!(l, LayerState::Attention(_)))
    }

    /// The row as a read of its first `keep` tokens leaves it, less the last position's hidden
    /// state: every attention layer's KV cut back to `keep` positions and the MTP history to
    /// `keep` entries (its last pairs position `keep - 1` with token `keep`, which the next read
    /// starts at, so that read writes its history as a prompt's first chunk does). None where a
    /// layer cannot be cut back (a Gated DeltaNet state holds every token it has read) or the row
    /// holds no more than `keep` tokens.
    pub fn cut_back(mut self, keep: i32) -> Result<Option<RowCache>> {
        if !self.cuts_back() || keep < 1 || keep >= self.len {
            return Ok(None);
        }
        self.trim_attention(self.len - keep)?;
        let history = self.mtp.offset();
        if history > keep {
            self.mtp.trim(history - keep)?;
        }
        Ok(Some(self))
    }

    /// Every attention layer's KV (the MTP history too) back in the row's own arrays.
    pub fn unpack(&mut self) {
        for layer in &mut self.layers {
            if let LayerState::Attention(kv) = layer {
                kv.unpack();
            }
        }
        self.mtp.unpack();
    }

    /// Every attention layer's KV (the MTP history too) in buffers of the row's own
    /// ([`KvCache::detach`]).
    pub fn detach(&mut self) -> Result<()> {
        for layer in &mut self.layers {
            if let LayerState::Attention(kv) = layer {
                kv.detach()?;
            }
        }
        self.mtp.detach()
    }

    /// Every array the row holds, for evaluation at step boundaries.
    pub fn arrays(&self) -> Vec<&Array> {
        let mut out = Vec::new();
        for layer in &self.layers {
            match layer {
                LayerState::Attention(kv) => out.extend(kv.arrays()),
                LayerState::GatedDelta(s) => out.extend(s.arrays()),
            }
        }
        out.extend(self.mtp.arrays());
        out
    }

    /// Committed and physical offsets of the first attention layer (all attention layers move
    /// together), for telemetry and tests.
    pub fn attention_offsets(&self) -> Option<(i32, i32)> {
        self.layers.iter().find_map(|l| match l {
            LayerState::Attention(kv) => Some((kv.offset(), kv.physical())),
            LayerState::GatedDelta(_) => None,
        })
    }
}

impl KvCache {
    /// Committed keys and values, [1, kv_heads, offset, head_dim] each (tests compare them).
    pub fn committed(&self) -> Option<(Array, Array)> {
        self.view().ok()
    }
}
