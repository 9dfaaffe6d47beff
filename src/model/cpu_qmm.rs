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

use anyhow::{Result, bail};
use mlx_rs::{Array, Dtype};

use super::config::QuantSpec;

/// Codes are dequantized in sub-blocks of this many values (one group holds one or more).
const SUB: usize = 32;

/// Blocks of up to this many rows dequantize each sub-block in registers for every pair of rows;
/// larger ones dequantize an output row once into a scratch buffer that every row then reads.
const DIRECT_ROWS: usize = 4;

/// A weight matrix `[out, in]` kept as affine codes: `w[o][i] = scale[o][g] * code + bias[o][g]`
/// with `g = i / group`.
pub struct PackedMatrix {
    out: usize,
    inp: usize,
    bits: u32,
    group: usize,
    /// Per output row `inp * bits / 8` bytes. 4-bit sub-blocks hold value k in the low nibble
    /// of byte k and value k+16 in its high nibble; 8-bit codes are stored in order.
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
        Ok(Self { out, inp, bits, group, codes, scales: to_f32(scales)?, biases: to_f32(biases)? })
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
        Ok(Self { out, inp, bits, group, codes: packed, scales: scales.to_vec(), biases: biases.to_vec() })
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
        self.product(x, rows, simd_available())
    }

    /// The same product on the portable route whatever the CPU has (for tests of both routes).
    pub fn matmul_portable(&self, x: &[f32], rows: usize) -> Vec<f32> {
        self.product(x, rows, false)
    }

    fn product(&self, x: &[f32], rows: usize, simd: bool) -> Vec<f32> {
        assert_eq!(x.len(), rows * self.inp, "x is not [{rows}, {}]", self.inp);
        let mut y = vec![0f32; rows * self.out];
        let pool = super::cpu_pool::Pool::global();
        // Parts of whole 8-output strips, at most one per thread.
        let parts = pool.threads().min(self.out.div_ceil(8)).max(1);
        let per = self.out.div_ceil(parts);
        let dst = super::cpu_pool::Disjoint(y.as_mut_ptr());
        let dst = &dst;
        pool.run(parts, &|t| {
            let (lo, hi) = (t * per, ((t + 1) * per).min(self.out));
            if lo < hi {
                // SAFETY: every part writes the columns lo..hi of each row, disjoint from the
                // other parts' columns, and `y` outlives `run`.
                let y = unsafe { std::slice::from_raw_parts_mut(dst.0, rows * self.out) };
                self.columns(x, rows, lo, hi, y, simd);
            }
        });
        y
    }

    fn columns(&self, x: &[f32], rows: usize, lo: usize, hi: usize, y: &mut [f32], simd: bool) {
        #[cfg(target_arch = "x86_64")]
        if simd {
            // SAFETY: the CPU has AVX2 and FMA (checked above); indices stay inside the slices
            // (`from_mlx`/`from_codes` checked the shapes, `matmul` checked x).
            unsafe { avx2::columns(self, x, rows, lo, hi, y) };
            return;
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = simd;
        scalar::columns(self, x, rows, lo, hi, y);
    }

    fn row_codes(&self, o: usize) -> &[u8] {
        let n = self.inp * self.bits as usize / 8;
        &self.codes[o * n..(o + 1) * n]
    }

    fn group_params(&self, o: usize) -> (&[f32], &[f32]) {
        let g = self.inp / self.group;
        (&self.scales[o * g..(o + 1) * g], &self.biases[o * g..(o + 1) * g])
    }
}

/// True when this CPU runs the SIMD kernel (x86_64 with AVX2 and FMA).
pub fn simd_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
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

/// The portable route. It keeps the SIMD route's shape (four accumulators of eight lanes, the
/// same reduction tree) so both give the same kind of rounding; row independence holds in both.
mod scalar {
    use super::{PackedMatrix, SUB};

    fn dequantize(m: &PackedMatrix, o: usize, w: &mut [f32]) {
        let codes = m.row_codes(o);
        let (scales, biases) = m.group_params(o);
        for (i, wi) in w.iter_mut().enumerate() {
            let code = match m.bits {
                4 => {
                    let (sb, k) = (i / SUB, i % SUB);
                    let byte = codes[sb * SUB / 2 + k % (SUB / 2)];
                    if k < SUB / 2 { byte & 0xf } else { byte >> 4 }
                }
                _ => codes[i],
            };
            let g = i / m.group;
            *wi = f32::from(code).mul_add(scales[g], biases[g]);
        }
    }

    fn dot(w: &[f32], x: &[f32]) -> f32 {
        let mut acc = [[0f32; 8]; 4];
        for (wb, xb) in w.chunks_exact(SUB).zip(x.chunks_exact(SUB)) {
            for (k, a) in acc.iter_mut().enumerate() {
                for l in 0..8 {
                    a[l] = wb[8 * k + l].mul_add(xb[8 * k + l], a[l]);
                }
            }
        }
        let mut v = [0f32; 8];
        for l in 0..8 {
            v[l] = (acc[0][l] + acc[1][l]) + (acc[2][l] + acc[3][l]);
        }
        super::hsum8(v)
    }

    pub fn columns(m: &PackedMatrix, x: &[f32], rows: usize, lo: usize, hi: usize, y: &mut [f32]) {
        let mut w = vec![0f32; m.inp];
        for o in lo..hi {
            dequantize(m, o, &mut w);
            for r in 0..rows {
                y[r * m.out + o] = dot(&w, &x[r * m.inp..(r + 1) * m.inp]);
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

    use super::{DIRECT_ROWS, PackedMatrix, SUB};

    /// Eight f32 lanes from the low 8 bytes of `v`.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn widen(v: __m128i) -> __m256 {
        _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v))
    }

    /// The 32 weights of one sub-block, dequantized: `code * scale + bias`.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn sub_block(bits: u32, codes: *const u8, s: __m256, b: __m256) -> [__m256; 4] {
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
    fn finish(acc: [__m256; 4]) -> f32 {
        let v = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
        let mut lanes = [0f32; 8];
        // SAFETY: `lanes` holds 8 floats.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), v) };
        super::hsum8(lanes)
    }

    /// One row against dequantized sub-blocks: acc[k] += w[k] * x[8k..8k+8].
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn accumulate(acc: &mut [__m256; 4], w: &[__m256; 4], x: *const f32) {
        for k in 0..4 {
            // SAFETY: the caller passes a pointer to 32 floats.
            acc[k] = _mm256_fmadd_ps(w[k], unsafe { _mm256_loadu_ps(x.add(8 * k)) }, acc[k]);
        }
    }

    /// # Safety
    /// AVX2 and FMA must be present; `x` is `[rows, m.inp]`, `y` is `[rows, m.out]`.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn columns(m: &PackedMatrix, x: &[f32], rows: usize, lo: usize, hi: usize, y: &mut [f32]) {
        let sub_bytes = SUB * m.bits as usize / 8;
        let subs_per_group = m.group / SUB;
        let mut scratch = vec![_mm256_setzero_ps(); if rows > DIRECT_ROWS { m.inp / 8 } else { 0 }];
        for o in lo..hi {
            let codes = m.row_codes(o).as_ptr();
            let (scales, biases) = m.group_params(o);
            if rows <= DIRECT_ROWS {
                // Straight from the codes, one or two rows at a time: nothing is stored between
                // dequantizing and using (a verify's two rows cost about one row's dequantizing).
                let mut r = 0;
                while r < rows {
                    let pair = r + 1 < rows;
                    let (mut a0, mut a1) = ([_mm256_setzero_ps(); 4], [_mm256_setzero_ps(); 4]);
                    let x0 = x[r * m.inp..].as_ptr();
                    let x1 = if pair { x[(r + 1) * m.inp..].as_ptr() } else { x0 };
                    for (g, (&s, &b)) in scales.iter().zip(biases).enumerate() {
                        let (s, b) = (_mm256_set1_ps(s), _mm256_set1_ps(b));
                        for j in 0..subs_per_group {
                            let sb = g * subs_per_group + j;
                            // SAFETY: sb < inp / SUB, so the codes and rows r, r+1 of x hold it.
                            unsafe {
                                let w = sub_block(m.bits, codes.add(sb * sub_bytes), s, b);
                                accumulate(&mut a0, &w, x0.add(sb * SUB));
                                if pair {
                                    accumulate(&mut a1, &w, x1.add(sb * SUB));
                                }
                            }
                        }
                    }
                    y[r * m.out + o] = finish(a0);
                    if pair {
                        y[(r + 1) * m.out + o] = finish(a1);
                    }
                    r += 2;
                }
                continue;
            }
            // Several rows: dequantize the output row once, then run every row over it with the
            // single-row arithmetic (same values, same accumulators, same order).
            for (g, (&s, &b)) in scales.iter().zip(biases).enumerate() {
                let (s, b) = (_mm256_set1_ps(s), _mm256_set1_ps(b));
                for j in 0..subs_per_group {
                    let sb = g * subs_per_group + j;
                    // SAFETY: as above; scratch holds inp / 8 vectors.
                    let w = unsafe { sub_block(m.bits, codes.add(sb * sub_bytes), s, b) };
                    scratch[4 * sb..4 * sb + 4].copy_from_slice(&w);
                }
            }
            let mut r = 0;
            while r < rows {
                let pair = r + 1 < rows;
                let (mut a0, mut a1) = ([_mm256_setzero_ps(); 4], [_mm256_setzero_ps(); 4]);
                let x0 = x[r * m.inp..].as_ptr();
                let x1 = if pair { x[(r + 1) * m.inp..].as_ptr() } else { x0 };
                for (sb, w) in scratch.chunks_exact(4).enumerate() {
                    let w: &[__m256; 4] = w.try_into().expect("four vectors");
                    // SAFETY: sb < inp / SUB inside rows r (and r+1 when paired) of x.
                    unsafe {
                        accumulate(&mut a0, w, x0.add(sb * SUB));
                        if pair {
                            accumulate(&mut a1, w, x1.add(sb * SUB));
                        }
                    }
                }
                y[r * m.out + o] = finish(a0);
                if pair {
                    y[(r + 1) * m.out + o] = finish(a1);
                }
                r += 2;
            }
        }
    }
}
