//! Affine-quantized matrix products for small row blocks on the CPU, computed by cohort itself.
//!
//! MLX's CPU backend has two routes for a quantized layer and neither suits decoding: its
//! quantized matmul is a scalar loop (7.7 tok/s on the default model), and the float32 copy that
//! reaches OpenBLAS reads 4 bytes per weight every step, so B1 decode is bound by weight traffic
//! (540 MB a token). This kernel keeps the 4-bit (or 8-bit) codes and their per-group scale and
//! bias, dequantizes 32 codes at a time into registers (AVX2 + FMA) and multiplies them against
//! float32 activations: an eighth of the bytes for 4-bit weights, float32 arithmetic throughout.
//!
//! Every row of a block is computed with exactly the operations a single-row product would use
//! (same dequantized values, same accumulators, same summation order), so a T=2 verify block
//! equals two single steps bit for bit and an AR cohort row equals its solo run: the exactness
//! probe's row-by-row route costs nothing here.

use std::ops::Range;

use anyhow::{Result, bail};
use mlx_rs::{Array, Dtype};

use crate::model::config::QuantSpec;

/// Codes are dequantized in sub-blocks of this many values (one group holds one or more).
const SUB: usize = 32;

/// Blocks of up to this many rows dequantize each sub-block in registers for every row;
/// larger ones dequantize a few output rows once into a scratch buffer that every row then
/// reads.
const DIRECT_ROWS: usize = 2;

/// Blocks of up to this many rows take one output at a time straight from the codes: each
/// sub-block is dequantized once in registers and used by every row (one accumulator each),
/// with no scratch buffer written and read back. Every output reads all the rows again, so
/// they must stay in the L1 cache ([`ONE_PASS_FLOATS`]); wider blocks (the down projection's
/// 8 x 1536) were faster through the scratch buffer.
const ONE_PASS_ROWS: usize = 8;

/// Floats of activations (24 KiB) up to which a block takes the one-pass path.
const ONE_PASS_FLOATS: usize = 6 * 1024;

/// Output rows are stored interleaved in tiles of this many: sub-block j of a tile's rows side
/// by side, then sub-block j+1, and likewise their scales and biases, so the kernel reads a tile
/// it computes together as one stream (four streams of the 49152-row LM head ran at half the
/// speed of one).
const TILE: usize = 4;

/// A product is cut into about this many chunks per thread of the pool.
const CHUNKS_PER_THREAD: usize = 8;

/// Blocks past the direct paths dequantize this many outputs at a time into scratch (up to
/// 384 KiB of float32 at an input of 1,536, so it stays in L2), and every row then reads them
/// a few rows at a time, so those rows' activations stay in L1 while every output of the piece
/// passes over them: a 512-row prompt chunk no longer streams all its activations once per
/// four outputs.
const SCRATCH_OUTS: usize = 64;

/// The instruction set a product runs on. Every one computes each output element with the same
/// operations in the same order (see the module's note), so they agree bit for bit and a CPU's
/// choice never shows in a row's result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isa {
    /// Plain Rust, on every CPU.
    Portable,
    /// x86_64 with AVX2 and FMA.
    Avx2,
    /// The AVX2 route with blocks of more than [`ONE_PASS_ROWS`] rows on AVX-512 (F, DQ and VL):
    /// two outputs' eight-lane accumulators side by side in one register.
    Avx512,
}

impl Isa {
    /// The widest route this CPU runs.
    pub fn detected() -> Isa {
        static DETECTED: std::sync::LazyLock<Isa> = std::sync::LazyLock::new(|| {
            #[cfg(target_arch = "x86_64")]
            {
                use std::arch::is_x86_feature_detected as has;
                if has!("avx2") && has!("fma") {
                    return if has!("avx512f") && has!("avx512dq") && has!("avx512vl") {
                        Isa::Avx512
                    } else {
                        Isa::Avx2
                    };
                }
            }
            Isa::Portable
        });
        *DETECTED
    }

    /// Whether this CPU runs `self`.
    pub fn runs_here(self) -> bool {
        matches!(
            (self, Isa::detected()),
            (Isa::Portable, _) | (Isa::Avx2, Isa::Avx2 | Isa::Avx512) | (Isa::Avx512, Isa::Avx512)
        )
    }
}

/// A weight matrix `[out, in]` kept as affine codes: `w[o][i] = scale[o][g] * code + bias[o][g]`
/// with `g = i / group`.
pub struct PackedMatrix {
    out: usize,
    inp: usize,
    bits: u32,
    group: usize,
    /// `inp * bits / 8` bytes per output row, tiled ([`TILE`]; the last tile padded with zeros).
    /// 4-bit sub-blocks hold value k in the low nibble of byte k and value k+16 in its high
    /// nibble; 8-bit codes are stored in order.
    codes: Vec<u8>,
    scales: Vec<f32>,
    biases: Vec<f32>,
}

impl PackedMatrix {
    /// Whether a layer of this quantization can be packed.
    pub fn supports(spec: QuantSpec) -> bool {
        matches!(spec.bits, 4 | 8) && spec.group_size > 0 && (spec.group_size as usize).is_multiple_of(SUB)
    }

    /// Build from MLX's packed layout: `weight` uint32 `[out, in*bits/32]` (value j of a word in
    /// bits `bits*j..`), `scales` and `biases` `[out, in/group]`.
    pub fn from_mlx(weight: &Array, scales: &Array, biases: &Array, spec: QuantSpec) -> Result<Self> {
        if !Self::supports(spec) {
            bail!("the CPU kernel takes 4- or 8-bit codes in groups of a multiple of {SUB}, not {spec:?}");
        }
        let (bits, group) = (spec.bits as u32, spec.group_size as usize);
        let shape = weight.shape();
        if shape.len() != 2 || weight.dtype() != Dtype::Uint32 {
            bail!("packed weight of shape {shape:?} and dtype {:?} is not [out, words] uint32", weight.dtype());
        }
        let out = shape[0] as usize;
        let inp = shape[1] as usize * 32 / bits as usize;
        if !inp.is_multiple_of(group)
            || scales.shape() != [out as i32, (inp / group) as i32]
            || biases.shape() != scales.shape()
        {
            bail!(
                "scales {:?} / biases {:?} do not fit a [{out}, {inp}] matrix in groups of {group}",
                scales.shape(),
                biases.shape()
            );
        }
        let words = weight.contiguous()?;
        let words = words.try_as_slice::<u32>()?;
        let to_f32 = |a: &Array| -> Result<Vec<f32>> {
            let a = a.as_dtype(Dtype::Float32)?.contiguous()?;
            Ok(a.try_as_slice::<f32>()?.to_vec())
        };
        let codes = match bits {
            4 => repack_nibbles(words),
            _ => words.iter().flat_map(|w| w.to_le_bytes()).collect(),
        };
        Ok(Self::tiled(out, inp, bits, group, &codes, &to_f32(scales)?, &to_f32(biases)?))
    }

    /// Build from plain values (tests): codes `[out, in]` in `0..2^bits`, scales and biases
    /// `[out, in/group]`.
    pub fn from_codes(
        codes: &[u8],
        scales: &[f32],
        biases: &[f32],
        out: usize,
        inp: usize,
        spec: QuantSpec,
    ) -> Result<Self> {
        let (bits, group) = (spec.bits as u32, spec.group_size as usize);
        if !Self::supports(spec) || codes.len() != out * inp || !inp.is_multiple_of(group) {
            bail!("{} codes do not make a [{out}, {inp}] matrix of {spec:?}", codes.len());
        }
        if scales.len() != out * inp / group || biases.len() != scales.len() {
            bail!("{} scales / {} biases for {} groups", scales.len(), biases.len(), out * inp / group);
        }
        if codes.iter().any(|&c| u32::from(c) >> bits != 0) {
            bail!("a code does not fit in {bits} bits");
        }
        let packed = match bits {
            4 => codes.chunks(SUB).flat_map(|sb| (0..SUB / 2).map(move |k| sb[k] | (sb[k + SUB / 2] << 4))).collect(),
            _ => codes.to_vec(),
        };
        Ok(Self::tiled(out, inp, bits, group, &packed, scales, biases))
    }

    /// Lay row-major codes (in sub-block order) and parameters out in tiles.
    fn tiled(out: usize, inp: usize, bits: u32, group: usize, codes: &[u8], scales: &[f32], biases: &[f32]) -> Self {
        let padded = out.div_ceil(TILE) * TILE;
        let mut m = Self {
            out,
            inp,
            bits,
            group,
            codes: vec![0; padded * inp * bits as usize / 8],
            scales: vec![0.0; padded * (inp / group)],
            biases: vec![0.0; padded * (inp / group)],
        };
        let (sub_bytes, subs, groups) = (m.sub_bytes(), inp / SUB, inp / group);
        for o in 0..out {
            for sb in 0..subs {
                let (from, to) = ((o * subs + sb) * sub_bytes, m.code_at(o, sb));
                m.codes[to..to + sub_bytes].copy_from_slice(&codes[from..from + sub_bytes]);
            }
            for g in 0..groups {
                let to = m.param_at(o, g);
                m.scales[to] = scales[o * groups + g];
                m.biases[to] = biases[o * groups + g];
            }
        }
        m
    }

    pub fn out_features(&self) -> usize {
        self.out
    }

    pub fn in_features(&self) -> usize {
        self.inp
    }

    /// Bytes of codes, scales and biases.
    pub fn nbytes(&self) -> usize {
        self.codes.len() + 4 * (self.scales.len() + self.biases.len())
    }

    /// `y = x W^T` for `rows` rows: `x` is `[rows, in]`, the result `[rows, out]`. Output rows are
    /// shared out over the kernel's threads ([`super::cpu_pool::Pool`]).
    pub fn matmul(&self, x: &[f32], rows: usize) -> Vec<f32> {
        self.product(x, rows, Isa::detected())
    }

    /// The same product on the portable route whatever the CPU has (for tests of both routes).
    pub fn matmul_portable(&self, x: &[f32], rows: usize) -> Vec<f32> {
        self.product(x, rows, Isa::Portable)
    }

    /// The same product on `isa`, where this CPU runs it (tests of every route).
    pub fn matmul_on(&self, x: &[f32], rows: usize, isa: Isa) -> Option<Vec<f32>> {
        isa.runs_here().then(|| self.product(x, rows, isa))
    }

    fn product(&self, x: &[f32], rows: usize, isa: Isa) -> Vec<f32> {
        Self::products(&[self], x, rows, isa).pop().expect("one product")
    }

    /// `x W^T` for each of several matrices of one input width (a layer's q, k and v, or its
    /// gate and up), in one dispatch of the pool: the threads meet once at the end instead of
    /// once per matrix.
    pub fn matmul_each(parts: &[&PackedMatrix], x: &[f32], rows: usize) -> Vec<Vec<f32>> {
        Self::products(parts, x, rows, Isa::detected())
    }

    fn products(parts: &[&PackedMatrix], x: &[f32], rows: usize, isa: Isa) -> Vec<Vec<f32>> {
        for m in parts {
            assert_eq!(x.len(), rows * m.inp, "x is not [{rows}, {}]", m.inp);
        }
        let mut ys: Vec<Vec<f32>> = parts.iter().map(|m| vec![0f32; rows * m.out]).collect();
        let pool = super::cpu_pool::Pool::global();
        // Chunks of whole 8-output strips (two tiles), several per thread, claimed as threads
        // come free: one that starts late or is descheduled takes fewer.
        let strips: usize = parts.iter().map(|m| m.out.div_ceil(8)).sum();
        let chunks = match pool.threads() {
            1 => 1,
            n => (n * CHUNKS_PER_THREAD).min(strips).max(1),
        };
        let per = strips.div_ceil(chunks) * 8;
        let work: Vec<(usize, Range<usize>)> = parts
            .iter()
            .enumerate()
            .flat_map(|(i, m)| (0..m.out).step_by(per).map(move |lo| (i, lo..(lo + per).min(m.out))))
            .collect();
        let dst: Vec<super::cpu_pool::Disjoint> =
            ys.iter_mut().map(|y| super::cpu_pool::Disjoint(y.as_mut_ptr())).collect();
        let dst = &dst;
        pool.run_chunks(work.len(), &|mine| {
            let share = mine.map(|c| {
                let (i, ref cols) = work[c];
                let m = parts[i];
                // SAFETY: every chunk writes the columns of its own outputs in each row of its
                // own matrix's result, disjoint from the other chunks', and `ys` outlives
                // `run_chunks`.
                let y = unsafe { std::slice::from_raw_parts_mut(dst[i].0, rows * m.out) };
                Columns { m, y, cols: cols.clone() }
            });
            columns(x, rows, share, isa);
        });
        ys
    }

    fn sub_bytes(&self) -> usize {
        SUB * self.bits as usize / 8
    }

    /// Where output o's sub-block sb starts in `codes`; sub-block sb+1 is `TILE * sub_bytes` on.
    fn code_at(&self, o: usize, sb: usize) -> usize {
        ((o / TILE * (self.inp / SUB) + sb) * TILE + o % TILE) * self.sub_bytes()
    }

    /// Where output o's group g sits in `scales`/`biases`; group g+1 is `TILE` on.
    fn param_at(&self, o: usize, g: usize) -> usize {
        (o / TILE * (self.inp / self.group) + g) * TILE + o % TILE
    }
}

/// Outputs `cols` of every row of one matrix's product, written into `y` (`[rows, m.out]`).
struct Columns<'a> {
    m: &'a PackedMatrix,
    y: &'a mut [f32],
    cols: Range<usize>,
}

/// One thread's chunks of a product, in the order it claims them; its working buffers last
/// for all of them.
fn columns<'a>(x: &[f32], rows: usize, share: impl Iterator<Item = Columns<'a>>, isa: Isa) {
    debug_assert!(isa.runs_here());
    #[cfg(target_arch = "x86_64")]
    match isa {
        // SAFETY: the CPU has AVX2 and FMA (`products`' callers ask only for an `Isa` that runs
        // here); indices stay inside the slices (`from_mlx`/`from_codes` checked the shapes,
        // `products` checked x).
        Isa::Avx2 => return unsafe { avx2::columns(x, rows, share, false) },
        // SAFETY: as above, and the CPU has AVX-512 F and DQ.
        Isa::Avx512 => return unsafe { avx2::columns(x, rows, share, true) },
        Isa::Portable => {}
    }
    scalar::columns(x, rows, share);
}

/// True when this CPU runs the SIMD kernel (x86_64 with AVX2 and FMA).
pub fn simd_available() -> bool {
    Isa::detected() != Isa::Portable
}

/// MLX's 4-bit words (value j in bits 4j..4j+4) to the kernel's sub-block nibble order.
fn repack_nibbles(words: &[u32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(words.len() * 4);
    for sb in words.chunks(SUB / 8) {
        let value = |k: usize| ((sb[k / 8] >> (4 * (k % 8))) & 0xf) as u8;
        out.extend((0..SUB / 2).map(|k| value(k) | (value(k + SUB / 2) << 4)));
    }
    out
}

/// The portable route: the SIMD route's arithmetic element for element (the same dequantized
/// values, one eight-lane accumulator per row and output fed in input order, the same final
/// sum), so both routes agree bit for bit.
mod scalar {

    use super::{PackedMatrix, SUB};

    fn dequantize(m: &PackedMatrix, o: usize, w: &mut [f32]) {
        for (i, wi) in w.iter_mut().enumerate() {
            let (sb, k) = (i / SUB, i % SUB);
            let codes = &m.codes[m.code_at(o, sb)..];
            let code = match m.bits {
                4 => {
                    let byte = codes[k % (SUB / 2)];
                    if k < SUB / 2 { byte & 0xf } else { byte >> 4 }
                }
                _ => codes[k],
            };
            let p = m.param_at(o, i / m.group);
            *wi = f32::from(code).mul_add(m.scales[p], m.biases[p]);
        }
    }

    fn dot(w: &[f32], x: &[f32]) -> f32 {
        let mut acc = [0f32; 8];
        for (wb, xb) in w.chunks_exact(8).zip(x.chunks_exact(8)) {
            for l in 0..8 {
                acc[l] = wb[l].mul_add(xb[l], acc[l]);
            }
        }
        super::hsum8(acc)
    }

    pub fn columns<'a>(x: &[f32], rows: usize, share: impl Iterator<Item = super::Columns<'a>>) {
        let mut w = Vec::new();
        for super::Columns { m, y, cols } in share {
            w.resize(m.inp, 0.0);
            for o in cols {
                dequantize(m, o, &mut w);
                for r in 0..rows {
                    y[r * m.out + o] = dot(&w, &x[r * m.inp..(r + 1) * m.inp]);
                }
            }
        }
    }
}

/// The horizontal sum both routes end with: pairs, then pairs of pairs.
fn hsum8(v: [f32; 8]) -> f32 {
    let q = [v[0] + v[4], v[1] + v[5], v[2] + v[6], v[3] + v[7]];
    let d = [q[0] + q[2], q[1] + q[3]];
    d[0] + d[1]
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::{DIRECT_ROWS, ONE_PASS_FLOATS, ONE_PASS_ROWS, PackedMatrix, SCRATCH_OUTS, SUB, TILE};

    /// Outputs dequantized together on the direct path.
    const OUTS: usize = TILE;

    /// Eight f32 lanes from the low 8 bytes of `v`.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn widen(v: __m128i) -> __m256 {
        _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v))
    }

    /// The 32 weights of one sub-block, dequantized: `code * scale + bias`.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn sub_block(bits: u32, codes: *const u8, s: __m256, b: __m256) -> [__m256; 4] {
        // SAFETY: the caller passes a pointer to a whole sub-block (16 or 32 bytes).
        let (a, c) = unsafe {
            if bits == 4 {
                let v = _mm_loadu_si128(codes as *const __m128i);
                let mask = _mm_set1_epi8(0x0f);
                (_mm_and_si128(v, mask), _mm_and_si128(_mm_srli_epi16(v, 4), mask))
            } else {
                (_mm_loadu_si128(codes as *const __m128i), _mm_loadu_si128(codes.add(16) as *const __m128i))
            }
        };
        [
            _mm256_fmadd_ps(widen(a), s, b),
            _mm256_fmadd_ps(widen(_mm_srli_si128(a, 8)), s, b),
            _mm256_fmadd_ps(widen(c), s, b),
            _mm256_fmadd_ps(widen(_mm_srli_si128(c, 8)), s, b),
        ]
    }

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn finish(acc: __m256) -> f32 {
        let mut lanes = [0f32; 8];
        // SAFETY: `lanes` holds 8 floats.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), acc) };
        super::hsum8(lanes)
    }

    /// `v[i] + v[i + 4]` of two accumulators: `[qa0..qa3 | qb0..qb3]`.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn halves(a: __m256, b: __m256) -> __m256 {
        _mm256_add_ps(_mm256_permute2f128_ps::<0x20>(a, b), _mm256_permute2f128_ps::<0x31>(a, b))
    }

    /// `q0 + q2, q1 + q3` of four accumulators' halves: `[da0 da1 dc0 dc1 | db0 db1 dd0 dd1]`
    /// from `halves(a, b)` and `halves(c, d)`.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn quarters(ab: __m256, cd: __m256) -> __m256 {
        _mm256_add_ps(_mm256_shuffle_ps::<0b01_00_01_00>(ab, cd), _mm256_shuffle_ps::<0b11_10_11_10>(ab, cd))
    }

    /// [`finish`] of eight accumulators at once: the same additions in the same order as
    /// [`super::hsum8`] (so the same bits), in 11 vector operations instead of eight stores and
    /// 56 scalar additions; small products spent about a tenth of their time in `finish`.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn finish8(v: [__m256; 8]) -> [f32; 8] {
        let abcd = quarters(halves(v[0], v[1]), halves(v[2], v[3]));
        let efgh = quarters(halves(v[4], v[5]), halves(v[6], v[7]));
        last_pairs(abcd, efgh)
    }

    /// [`finish`] of four accumulators at once, as [`finish8`]: the second four lanes repeat the
    /// first and are dropped.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn finish4(v: [__m256; 4]) -> [f32; 4] {
        let abcd = quarters(halves(v[0], v[1]), halves(v[2], v[3]));
        let l = last_pairs(abcd, abcd);
        [l[0], l[1], l[2], l[3]]
    }

    /// The last addition of the sums held in `quarters` form, in accumulator order.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn last_pairs(abcd: __m256, efgh: __m256) -> [f32; 8] {
        // [a c e g | b d f h]
        let s = _mm256_add_ps(
            _mm256_shuffle_ps::<0b10_00_10_00>(abcd, efgh),
            _mm256_shuffle_ps::<0b11_01_11_01>(abcd, efgh),
        );
        let mut l = [0f32; 8];
        // SAFETY: `l` holds 8 floats.
        unsafe { _mm256_storeu_ps(l.as_mut_ptr(), s) };
        [l[0], l[4], l[1], l[5], l[2], l[6], l[3], l[7]]
    }

    /// Every accumulator's sum, in blocks of eight and four where they fill one: `put(i, r, sum)`
    /// for output i, row r.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub(super) fn finish_all<const N: usize, const R: usize>(
        acc: &[[__m256; R]; N],
        mut put: impl FnMut(usize, usize, f32),
    ) {
        // Accumulator k is output k / R, row k % R.
        let at = |k: usize| acc[k / R][k % R];
        let mut emit = |k: usize, sums: &[f32]| {
            for (j, &s) in sums.iter().enumerate() {
                put((k + j) / R, (k + j) % R, s);
            }
        };
        let mut k = 0;
        while k + 8 <= N * R {
            emit(k, &finish8(std::array::from_fn(|j| at(k + j))));
            k += 8;
        }
        while k + 4 <= N * R {
            emit(k, &finish4(std::array::from_fn(|j| at(k + j))));
            k += 4;
        }
        while k < N * R {
            emit(k, &[finish(at(k))]);
            k += 1;
        }
    }

    /// # Safety
    /// AVX2 and FMA must be present, and AVX-512 F and DQ where `wide`; for every item, `x` is
    /// `[rows, m.inp]`, `y` is `[rows, m.out]`, and `cols` lies inside `0..m.out`.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn columns<'a>(x: &[f32], rows: usize, share: impl Iterator<Item = super::Columns<'a>>, wide: bool) {
        // Each thread keeps its scratch for the process: a piece's is a few hundred KB, which a
        // fresh allocation per product took from the kernel as new pages to fault in and clear
        // (a 19-token prompt read spent more time there than in its products).
        thread_local! {
            static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::new(Scratch::default());
        }
        SCRATCH.with_borrow_mut(|scratch| {
            for super::Columns { m, y, cols } in share {
                // SAFETY: forwarded from the caller (`wide` vouches for AVX-512).
                unsafe {
                    if wide {
                        range_wide(m, x, rows, cols.start, cols.end, y, scratch)
                    } else {
                        range(m, x, rows, cols.start, cols.end, y, scratch, false)
                    }
                }
            }
        });
    }

    /// One thread's dequantized outputs: in eight-lane rows for the AVX2 tiles, or two
    /// outputs to a 16-lane register for the AVX-512 ones.
    #[derive(Default)]
    struct Scratch {
        narrow: Vec<__m256>,
        wide: Vec<__m512>,
    }

    /// [`range`] where the CPU has AVX-512: the same instructions given its 32 vector registers,
    /// so the direct paths keep their accumulators, weights, scales and biases out of the stack
    /// (1.2x on a B1 product, one thread), and blocks past them on the AVX-512 scratch path.
    ///
    /// # Safety
    /// As [`range`], and AVX-512 F, DQ and VL must be present.
    #[inline(never)]
    #[target_feature(enable = "avx2,fma,avx512f,avx512dq,avx512vl")]
    unsafe fn range_wide(
        m: &PackedMatrix,
        x: &[f32],
        rows: usize,
        lo: usize,
        hi: usize,
        y: &mut [f32],
        scratch: &mut Scratch,
    ) {
        // SAFETY: forwarded from the caller.
        unsafe { range(m, x, rows, lo, hi, y, scratch, true) }
    }

    /// Outputs `lo..hi` of every row.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn range(
        m: &PackedMatrix,
        x: &[f32],
        rows: usize,
        lo: usize,
        hi: usize,
        y: &mut [f32],
        scratch: &mut Scratch,
        wide: bool,
    ) {
        let mut o = lo;
        if rows == 1 {
            // SAFETY (all calls): o + tile <= hi <= m.out, and x holds `rows` rows.
            while o + OUTS <= hi {
                unsafe { direct::<OUTS, 1>(m, x, 0, o, y) };
                o += OUTS;
            }
            while o < hi {
                unsafe { direct::<1, 1>(m, x, 0, o, y) };
                o += 1;
            }
            return;
        }
        if rows <= DIRECT_ROWS {
            // Two outputs for a pair of rows: four accumulators leave registers for the weights.
            while o + 2 <= hi {
                unsafe { direct_rows::<2>(m, x, rows, o, y) };
                o += 2;
            }
            while o < hi {
                unsafe { direct_rows::<1>(m, x, rows, o, y) };
                o += 1;
            }
            return;
        }
        if rows <= ONE_PASS_ROWS && rows * m.inp <= ONE_PASS_FLOATS {
            // One output at a time, each sub-block dequantized once in registers for every row.
            while o < hi {
                // SAFETY: as above.
                unsafe {
                    match rows {
                        3 => direct::<1, 3>(m, x, 0, o, y),
                        4 => direct::<1, 4>(m, x, 0, o, y),
                        5 => direct::<1, 5>(m, x, 0, o, y),
                        6 => direct::<1, 6>(m, x, 0, o, y),
                        7 => direct::<1, 7>(m, x, 0, o, y),
                        _ => direct::<1, 8>(m, x, 0, o, y),
                    }
                }
                o += 1;
            }
            return;
        }
        while o < hi {
            let n = SCRATCH_OUTS.min(hi - o);
            if wide {
                // SAFETY: as above, and the caller vouches for AVX-512 F and DQ.
                unsafe { super::avx512::scratch_block(m, x, rows, o, n, &mut scratch.wide, y) };
            } else {
                if scratch.narrow.len() < n * m.inp / 8 {
                    scratch.narrow.resize(n * m.inp / 8, _mm256_setzero_ps());
                }
                // SAFETY: as above; scratch holds n rows of inp / 8 vectors.
                unsafe { scratch_block(m, x, rows, o, n, &mut scratch.narrow, y) };
            }
            o += n;
        }
    }

    /// Outputs o..o+N for every row straight from the codes: nothing is stored between
    /// dequantizing and using, and N independent accumulators per row hide the FMA latency.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn direct_rows<const N: usize>(m: &PackedMatrix, x: &[f32], rows: usize, o: usize, y: &mut [f32]) {
        let mut r = 0;
        // SAFETY: forwarded from the caller.
        while r + 2 <= rows {
            unsafe { direct::<N, 2>(m, x, r, o, y) };
            r += 2;
        }
        if r < rows {
            unsafe { direct::<N, 1>(m, x, r, o, y) };
        }
    }

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn direct<const N: usize, const R: usize>(m: &PackedMatrix, x: &[f32], r0: usize, o: usize, y: &mut [f32]) {
        let step = TILE * m.sub_bytes();
        let subs_per_group = m.group / SUB;
        let groups = m.inp / m.group;
        // SAFETY (pointers): code_at/param_at address output o+i's first sub-block and group;
        // later ones are whole tiles on, inside the padded storage.
        let codes: [*const u8; N] = std::array::from_fn(|i| unsafe { m.codes.as_ptr().add(m.code_at(o + i, 0)) });
        let params: [usize; N] = std::array::from_fn(|i| m.param_at(o + i, 0));
        let xs: [*const f32; R] = std::array::from_fn(|r| x[(r0 + r) * m.inp..].as_ptr());
        let mut acc = [[_mm256_setzero_ps(); R]; N];
        for g in 0..groups {
            for j in 0..subs_per_group {
                let sb = g * subs_per_group + j;
                for i in 0..N {
                    let p = params[i] + g * TILE;
                    let (s, b) = (_mm256_set1_ps(m.scales[p]), _mm256_set1_ps(m.biases[p]));
                    // SAFETY: sb < inp / SUB, so the codes and every row of x hold it.
                    unsafe {
                        let w = sub_block(m.bits, codes[i].add(sb * step), s, b);
                        for r in 0..R {
                            let xp = xs[r].add(sb * SUB);
                            for (k, wk) in w.iter().enumerate() {
                                acc[i][r] = _mm256_fmadd_ps(*wk, _mm256_loadu_ps(xp.add(8 * k)), acc[i][r]);
                            }
                        }
                    }
                }
            }
        }
        finish_all(&acc, |i, r, s| y[(r0 + r) * m.out + o + i] = s);
    }

    /// Outputs o..o+n for many rows: each output row is dequantized once into `scratch`, then
    /// tiles of two outputs x four rows run over it with the direct path's arithmetic (same
    /// values, same accumulator, same order), four rows at a time across every output.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn scratch_block(
        m: &PackedMatrix,
        x: &[f32],
        rows: usize,
        o: usize,
        n: usize,
        scratch: &mut [__m256],
        y: &mut [f32],
    ) {
        let subs_per_group = m.group / SUB;
        let vecs = m.inp / 8;
        for i in 0..n {
            for g in 0..m.inp / m.group {
                let p = m.param_at(o + i, g);
                let (s, b) = (_mm256_set1_ps(m.scales[p]), _mm256_set1_ps(m.biases[p]));
                for j in 0..subs_per_group {
                    let sb = g * subs_per_group + j;
                    // SAFETY: code_at addresses a whole sub-block of this output.
                    let w = unsafe { sub_block(m.bits, m.codes.as_ptr().add(m.code_at(o + i, sb)), s, b) };
                    scratch[i * vecs + 4 * sb..i * vecs + 4 * sb + 4].copy_from_slice(&w);
                }
            }
        }
        let mut r = 0;
        while r < rows {
            let left = rows - r;
            let mut i = 0;
            while i < n {
                let pair = i + 1 < n;
                // SAFETY: rows r.. and outputs o+i.. are inside x, y and scratch.
                unsafe {
                    match (left, pair) {
                        (4.., true) => tile::<2, 4>(m, x, scratch, r, o, i, y),
                        (4.., false) => tile::<1, 4>(m, x, scratch, r, o, i, y),
                        (3, true) => tile::<2, 3>(m, x, scratch, r, o, i, y),
                        (3, false) => tile::<1, 3>(m, x, scratch, r, o, i, y),
                        (2, true) => tile::<2, 2>(m, x, scratch, r, o, i, y),
                        (2, false) => tile::<1, 2>(m, x, scratch, r, o, i, y),
                        (_, true) => tile::<2, 1>(m, x, scratch, r, o, i, y),
                        (_, false) => tile::<1, 1>(m, x, scratch, r, o, i, y),
                    }
                }
                i += if pair { 2 } else { 1 };
            }
            r += left.min(4);
        }
    }

    // `v` indexes every output's scratch row and every row of x in lockstep.
    #[allow(clippy::needless_range_loop)]
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn tile<const N: usize, const R: usize>(
        m: &PackedMatrix,
        x: &[f32],
        scratch: &[__m256],
        r0: usize,
        o: usize,
        i0: usize,
        y: &mut [f32],
    ) {
        let vecs = m.inp / 8;
        let ws: [&[__m256]; N] = std::array::from_fn(|i| &scratch[(i0 + i) * vecs..(i0 + i + 1) * vecs]);
        let xs: [*const f32; R] = std::array::from_fn(|r| x[(r0 + r) * m.inp..].as_ptr());
        let mut acc = [[_mm256_setzero_ps(); R]; N];
        for v in 0..vecs {
            // SAFETY: v < inp / 8 inside every row of x.
            let xv: [__m256; R] = std::array::from_fn(|r| unsafe { _mm256_loadu_ps(xs[r].add(8 * v)) });
            for i in 0..N {
                let w = ws[i][v];
                for r in 0..R {
                    acc[i][r] = _mm256_fmadd_ps(w, xv[r], acc[i][r]);
                }
            }
        }
        finish_all(&acc, |i, r, s| y[(r0 + r) * m.out + o + i0 + i] = s);
    }
}

/// The scratch path on AVX-512: output pairs side by side, `[o | o+1]` eight lanes each, in one
/// 16-lane register, each row's eight activations broadcast to both halves. Each half is the
/// AVX2 tile's accumulator for its output (the same dequantized values, fused multiply-adds in
/// input order, the same final sum), so a row's bits do not depend on the route; a tile holds
/// eight outputs by four rows in 16 registers, twice the AVX2 tile's work per instruction.
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use super::avx2::{finish_all, sub_block};
    use super::{PackedMatrix, SUB};

    /// Outputs a tile computes (four pairs).
    const OUTS: usize = 8;

    /// Rows a tile takes at most: 16 accumulators. The final sums' AVX instructions reach only
    /// the first 16 vector registers, and six rows' 24 accumulators spilled to the stack on every
    /// step (150 against 200 GF/s here).
    const ROWS: usize = 4;

    /// Outputs o..o+n of every row: dequantized into `scratch` (tiles of eight outputs, their
    /// pairs interleaved eight lanes at a time, zeros past n), then tiles of eight outputs x
    /// four rows, rows outermost.
    ///
    /// # Safety
    /// AVX2, FMA and AVX-512 F and DQ must be present; `x` is `[rows, m.inp]`, `y` is
    /// `[rows, m.out]` and o + n <= m.out.
    #[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
    pub(super) unsafe fn scratch_block(
        m: &PackedMatrix,
        x: &[f32],
        rows: usize,
        o: usize,
        n: usize,
        scratch: &mut Vec<__m512>,
        y: &mut [f32],
    ) {
        let vecs = m.inp / 8;
        let tiles = n.div_ceil(OUTS);
        // Grown once, never cleared: every lane read below is written first (the outputs past n
        // with zeros).
        if scratch.len() < tiles * vecs * OUTS / 2 {
            scratch.resize(tiles * vecs * OUTS / 2, _mm512_setzero_ps());
        }
        let base = scratch.as_mut_ptr() as *mut f32;
        for i in n..tiles * OUTS {
            let (tile, pair, half) = (i / OUTS, i % OUTS / 2, i % 2);
            for v in 0..vecs {
                // SAFETY: inside the scratch sized above, as for the outputs below.
                unsafe {
                    _mm256_storeu_ps(base.add(((tile * vecs + v) * 4 + pair) * 16 + half * 8), _mm256_setzero_ps())
                };
            }
        }
        let subs_per_group = m.group / SUB;
        for i in 0..n {
            let (tile, pair, half) = (i / OUTS, i % OUTS / 2, i % 2);
            for g in 0..m.inp / m.group {
                let p = m.param_at(o + i, g);
                let (s, b) = (_mm256_set1_ps(m.scales[p]), _mm256_set1_ps(m.biases[p]));
                for j in 0..subs_per_group {
                    let sb = g * subs_per_group + j;
                    // SAFETY: code_at addresses a whole sub-block of this output; lane
                    // ((tile * vecs + v) * 4 + pair) * 16 + half * 8 and its next seven lie inside
                    // the scratch sized above (v < vecs, pair < 4).
                    unsafe {
                        let w = sub_block(m.bits, m.codes.as_ptr().add(m.code_at(o + i, sb)), s, b);
                        for (k, wk) in w.iter().enumerate() {
                            let v = 4 * sb + k;
                            _mm256_storeu_ps(base.add(((tile * vecs + v) * 4 + pair) * 16 + half * 8), *wk);
                        }
                    }
                }
            }
        }
        let mut r = 0;
        while r < rows {
            let take = (rows - r).min(ROWS);
            for tile in 0..tiles {
                let at = Tile {
                    w: base.cast_const().wrapping_add(tile * vecs * OUTS * 8),
                    vecs,
                    r0: r,
                    o0: o + tile * OUTS,
                    outs: (n - tile * OUTS).min(OUTS),
                };
                // SAFETY: rows r..r+take lie inside x and y, the tile's scratch inside `scratch`.
                unsafe {
                    match take {
                        4 => tile_rows::<4>(m, x, &at, y),
                        3 => tile_rows::<3>(m, x, &at, y),
                        2 => tile_rows::<2>(m, x, &at, y),
                        _ => tile_rows::<1>(m, x, &at, y),
                    }
                }
            }
            r += take;
        }
    }

    /// One tile of [`scratch_block`]: its dequantized outputs, and which rows and outputs it
    /// writes.
    struct Tile {
        w: *const f32,
        vecs: usize,
        r0: usize,
        o0: usize,
        /// Outputs written (the tile's last outputs past the piece are zeros, computed and
        /// dropped).
        outs: usize,
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
    unsafe fn tile_rows<const R: usize>(m: &PackedMatrix, x: &[f32], t: &Tile, y: &mut [f32]) {
        let xs: [*const f32; R] = std::array::from_fn(|r| x[(t.r0 + r) * m.inp..].as_ptr());
        let mut acc = [[_mm512_setzero_ps(); R]; OUTS / 2];
        for v in 0..t.vecs {
            // SAFETY: v < inp / 8 inside every row of x; the tile's scratch holds vecs x 4 pairs.
            unsafe {
                let xv: [__m512; R] =
                    std::array::from_fn(|r| _mm512_broadcast_f32x8(_mm256_loadu_ps(xs[r].add(8 * v))));
                for (pair, acc) in acc.iter_mut().enumerate() {
                    let w = _mm512_loadu_ps(t.w.add((v * 4 + pair) * 16));
                    for r in 0..R {
                        acc[r] = _mm512_fmadd_ps(w, xv[r], acc[r]);
                    }
                }
            }
        }
        // Output 2 * pair + half of row r is half `half` of acc[pair][r].
        let halves: [[__m256; R]; OUTS] = std::array::from_fn(|i| {
            std::array::from_fn(|r| {
                let a = acc[i / 2][r];
                if i % 2 == 0 { _mm512_castps512_ps256(a) } else { _mm512_extractf32x8_ps::<1>(a) }
            })
        });
        finish_all(&halves, |i, r, s| {
            if i < t.outs {
                y[(t.r0 + r) * m.out + t.o0 + i] = s;
            }
        });
    }
}
