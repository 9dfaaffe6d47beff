//! The Llama family's decode path on the host, for MLX's CPU backend with the kernel weight
//! policy.
//!
//! On the CPU kernel route each of a layer's host pieces (projections, RoPE, attention) needed
//! its input evaluated, and the MLX ops between them (norms, reshapes, residual adds, the KV
//! write) ran as small graphs on MLX's stream thread: 6-7 evaluations a layer, about half of a
//! B1 step (docs/benchmarks.md). Here a block of any size (a decode step, a verify, a prompt
//! chunk) stays on the host from the embedding to the logits. MLX keeps the KV storage: each
//! layer's new keys and values are written with the same lazy update as before, and the
//! attention takes the block's own positions from the host, so one evaluation per forward (of
//! the storage, at its start) settles every write of the step before.
//!
//! Every piece computes a row the same way whatever else is in its block (the kernel, RoPE and
//! attention already did; norms and element-wise ops are per row), so a verify still equals
//! its chain bit for bit.

use anyhow::{Context, Result, bail};
use mlx_rs::Array;

use super::{DecoderLayer, LlamaModel, MtpModule};
use crate::model::config::RopeSpec;
use crate::model::cpu::attention_cpu::RowKv;
use crate::model::cpu::cpu_qmm::PackedMatrix;
use crate::model::cpu::host_ops::{add_assign, rms_norm, silu_mul, to_host, token_ids, values};
use crate::model::forward::{ForwardOutput, Logits};
use crate::model::layers::attention::{self, HostQkv};
use crate::model::layers::cache::{KvCache, LayerState, RowCache};
use crate::model::layers::linear::Linear;
use crate::model::layers::norm::RmsNorm;

static SERVED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Blocks (forwards and MTP drafts) the host path has run in this process (tests check which
/// route served).
pub fn blocks_served() -> u64 {
    SERVED.load(std::sync::atomic::Ordering::Relaxed)
}

fn packed(l: &Linear) -> Option<&PackedMatrix> {
    match l {
        Linear::CpuPacked { packed, .. } => Some(packed),
        _ => None,
    }
}

fn proj(l: &Linear) -> Result<&PackedMatrix> {
    packed(l).context("a projection left the CPU kernel")
}

/// The embedding table's float32 rows and the head's codes, when both are there.
struct HostIo<'a> {
    table: &'a [f32],
    head: &'a PackedMatrix,
}

fn norm_ready(n: &RmsNorm) -> bool {
    values(&n.weight).is_ok()
}

fn layer_ready(l: &DecoderLayer) -> bool {
    let a = &l.attn;
    [&a.q_proj, &a.k_proj, &a.v_proj, &a.o_proj, &l.mlp.gate_proj, &l.mlp.up_proj, &l.mlp.down_proj]
        .iter()
        .all(|l| packed(l).is_some())
        && norm_ready(&l.input_norm)
        && norm_ready(&l.post_norm)
}

impl LlamaModel {
    /// Whether the body (and, separately, the MTP head) can run on the host: every projection
    /// on the CPU kernel, float32 norms, an embedding table to read and a head on the kernel.
    pub(super) fn host_support(&self) -> (bool, bool) {
        let io = self.host_io().is_some();
        let body = io && self.layers.iter().all(layer_ready) && norm_ready(&self.norm);
        let mtp = body
            && self.mtp.as_ref().is_some_and(|m| {
                packed(&m.fc).is_some()
                    && layer_ready(&m.layer)
                    && [&m.pre_fc_norm_embedding, &m.pre_fc_norm_hidden, &m.norm].into_iter().all(norm_ready)
            });
        (body, mtp)
    }

    fn host_io(&self) -> Option<HostIo<'_>> {
        let table = match &self.embed.table {
            Linear::Dense { weight } | Linear::CpuPacked { dense: weight, .. } => values(weight).ok()?,
            Linear::Quantized { .. } => return None,
        };
        let head = match &self.lm_head {
            Some(l) => packed(l)?,
            None => packed(&self.embed.table)?,
        };
        Some(HostIo { table, head })
    }

    /// Whether blocks take the host path: every block, whatever its rows, so a prompt chunk and
    /// a decode step compute a row alike.
    pub(super) fn host_serves(&self, mtp: bool) -> bool {
        crate::model::routes::current().host_layers && if mtp { self.host_mtp } else { self.host_body }
    }

    /// [`crate::model::forward::LanguageModel::forward`] on the host.
    pub(super) fn host_forward(
        &self,
        tokens: &Array,
        rows: &mut [&mut RowCache],
        logits: Logits,
    ) -> Result<ForwardOutput> {
        let (b, t) = (tokens.shape()[0] as usize, tokens.shape()[1] as usize);
        let io = self.host_io().context("the host path lost its embedding or head")?;
        SERVED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let ids = token_ids(tokens)?;
        let mut x = embed(&io, &ids, self.cfg.vocab_size)?;
        let mut per_layer: Vec<Vec<&mut KvCache>> = (0..self.layers.len()).map(|_| Vec::with_capacity(b)).collect();
        for r in rows.iter_mut() {
            for (li, state) in r.layers.iter_mut().enumerate() {
                match state {
                    LayerState::Attention(kv) if li < per_layer.len() => per_layer[li].push(kv),
                    _ => bail!("row state does not match layer {li} (not a Llama row)"),
                }
            }
        }
        let stored: Vec<Vec<Option<RowKv>>> = per_layer.iter().map(|c| attention::stored_before(c)).collect();
        settle(stored.iter().flatten())?;
        for ((layer, caches), stored) in self.layers.iter().zip(&mut per_layer).zip(stored) {
            self.host_layer(layer, &mut x, caches, stored, t)?;
        }
        for r in rows.iter_mut() {
            r.len += t as i32;
        }
        let h = self.cfg.hidden_size as usize;
        let hidden = self.norm.host(&x)?;
        let logits = match logits {
            Logits::All => Some(head(&io, &hidden, b, t)?),
            Logits::Last => {
                let last: Vec<f32> =
                    hidden.chunks_exact(t * h).flat_map(|r| r[(t - 1) * h..].iter().copied()).collect();
                Some(head(&io, &last, b, 1)?)
            }
            Logits::None => None,
        };
        Ok(ForwardOutput {
            hidden: Array::from_slice(&hidden, &[b as i32, t as i32, h as i32]),
            logits,
            captures: (0..self.layers.len()).map(|_| None).collect(),
        })
    }

    /// The head on final-norm hidden states [B, T, H] through the CPU kernel, as
    /// [`Self::host_forward`] computes its logits.
    pub(super) fn host_head_logits(&self, hidden: &Array) -> Result<Array> {
        let io = self.host_io().context("the host path lost its embedding or head")?;
        let shape = hidden.shape();
        if shape.len() != 3 {
            bail!("the head takes hidden states [B, T, H], not {shape:?}");
        }
        head(&io, &to_host(hidden)?, shape[0] as usize, shape[1] as usize)
    }

    /// [`crate::model::forward::LanguageModel::mtp_forward`] on the host; the logits only when
    /// `logits` asks for them (a history write needs none).
    pub(super) fn host_mtp_forward(
        &self,
        mtp: &MtpModule,
        hidden: &Array,
        tokens: &Array,
        rows: &mut [&mut RowCache],
        logits: bool,
    ) -> Result<Option<Array>> {
        let (b, t) = (tokens.shape()[0] as usize, tokens.shape()[1] as usize);
        let h = self.cfg.hidden_size as usize;
        let io = self.host_io().context("the host path lost its embedding or head")?;
        SERVED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let states = to_host(hidden)?;
        if states.len() != b * t * h {
            bail!("MTP: hidden states {:?} for tokens {:?}", hidden.shape(), tokens.shape());
        }
        let ids = token_ids(tokens)?;
        let e = mtp.pre_fc_norm_embedding.host(&embed(&io, &ids, self.cfg.vocab_size)?)?;
        let s = mtp.pre_fc_norm_hidden.host(&states)?;
        let joined: Vec<f32> =
            e.chunks_exact(h).zip(s.chunks_exact(h)).flat_map(|(e, s)| e.iter().chain(s)).copied().collect();
        let mut x = packed(&mtp.fc).context("MTP fc")?.matmul(&joined, b * t);
        let mut caches: Vec<&mut KvCache> = rows.iter_mut().map(|r| &mut r.mtp).collect();
        let stored = attention::stored_before(&caches);
        settle(stored.iter())?;
        self.host_layer(&mtp.layer, &mut x, &mut caches, stored, t)?;
        if !logits {
            return Ok(None);
        }
        head(&io, &mtp.norm.host(&x)?, b, t).map(Some)
    }

    /// One decoder layer over `x` [B*T, H], in place.
    fn host_layer(
        &self,
        layer: &DecoderLayer,
        x: &mut [f32],
        caches: &mut [&mut KvCache],
        stored: Vec<Option<RowKv>>,
        t: usize,
    ) -> Result<()> {
        let a = &layer.attn;
        let m = caches.len() * t;
        let normed = layer.input_norm.host(x)?;
        let [q, k, v]: [Vec<f32>; 3] =
            PackedMatrix::matmul_each(&[proj(&a.q_proj)?, proj(&a.k_proj)?, proj(&a.v_proj)?], &normed, m)
                .try_into()
                .expect("three products");
        let qkv = HostQkv {
            q,
            k,
            v,
            t,
            heads: a.heads as usize,
            kv_heads: a.kv_heads as usize,
            head_dim: a.head_dim as usize,
        };
        let rope = RopeSpec { dims: a.head_dim, traditional: a.rope_traditional, base: a.rope_theta };
        let attended = attention::attend_host(caches, stored, qkv, rope, (a.head_dim as f32).powf(-0.5))?;
        add_assign(x, &proj(&a.o_proj)?.matmul(&attended, m));
        let normed = layer.post_norm.host(x)?;
        let [mut gate, up]: [Vec<f32>; 2] =
            PackedMatrix::matmul_each(&[proj(&layer.mlp.gate_proj)?, proj(&layer.mlp.up_proj)?], &normed, m)
                .try_into()
                .expect("two products");
        silu_mul(&mut gate, &up);
        add_assign(x, &proj(&layer.mlp.down_proj)?.matmul(&gate, m));
        Ok(())
    }
}

impl RmsNorm {
    fn host(&self, x: &[f32]) -> Result<Vec<f32>> {
        Ok(rms_norm(x, values(&self.weight)?, self.eps))
    }
}

/// Evaluate every row's storage at once: the writes of the previous step (or prefill chunk)
/// settle in one evaluation, and the buffers can then be read in place.
fn settle<'a>(stored: impl Iterator<Item = &'a Option<RowKv>>) -> Result<()> {
    let arrays: Vec<&Array> = stored.flatten().flat_map(|r| [&r.keys, &r.values]).collect();
    if !arrays.is_empty() {
        mlx_rs::transforms::eval(arrays)?;
    }
    Ok(())
}

/// Rows of the embedding table for `ids`, [ids.len(), H].
fn embed(io: &HostIo, ids: &[i32], vocab: i32) -> Result<Vec<f32>> {
    let h = io.table.len() / vocab as usize;
    let mut x = Vec::with_capacity(ids.len() * h);
    for &id in ids {
        if id < 0 || id >= vocab {
            bail!("token id {id} is outside the vocabulary of {vocab}");
        }
        x.extend_from_slice(&io.table[id as usize * h..(id as usize + 1) * h]);
    }
    Ok(x)
}

/// Logits [B, T, V] for `hidden` [B*T, H] through the head on the CPU kernel.
fn head(io: &HostIo, hidden: &[f32], b: usize, t: usize) -> Result<Array> {
    let y = io.head.matmul(hidden, b * t);
    Ok(Array::from_slice(&y, &[b as i32, t as i32, io.head.out_features() as i32]))
}
