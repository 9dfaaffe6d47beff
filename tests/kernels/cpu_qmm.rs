//! The CPU kernel's quantized products (`model::cpu::cpu_qmm`) against a float64 reference written
//! here, and against MLX's own quantize/dequantize for the packed layout it reads.

use crate::common;

use cohort::model::config::QuantSpec;
use cohort::model::cpu::cpu_qmm::{Isa, PackedMatrix, simd_available};
use mlx_rs::{Array, Dtype};

/// A small deterministic generator (xorshift64*), so failures replay.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// Uniform in [-1, 1).
    fn float(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
}

struct Case {
    codes: Vec<u8>,
    scales: Vec<f32>,
    biases: Vec<f32>,
    out: usize,
    inp: usize,
    spec: QuantSpec,
}

fn case(out: usize, inp: usize, bits: i32, group: i32, seed: u64) -> Case {
    let mut rng = Rng(seed);
    let groups = out * inp / group as usize;
    Case {
        codes: (0..out * inp).map(|_| (rng.next() % (1 << bits)) as u8).collect(),
        scales: (0..groups).map(|_| 0.01 + 0.05 * rng.float().abs()).collect(),
        biases: (0..groups).map(|_| 0.3 * rng.float()).collect(),
        out,
        inp,
        spec: QuantSpec { bits, group_size: group },
    }
}

fn activations(rows: usize, inp: usize, seed: u64) -> Vec<f32> {
    let mut rng = Rng(seed);
    (0..rows * inp).map(|_| rng.float()).collect()
}

/// `x W^T` in float64 straight from the definition `w = scale * code + bias`.
fn reference(c: &Case, x: &[f32], rows: usize) -> Vec<f64> {
    let g = c.spec.group_size as usize;
    let mut y = vec![0f64; rows * c.out];
    for r in 0..rows {
        for o in 0..c.out {
            let mut acc = 0f64;
            for i in 0..c.inp {
                let k = o * c.inp + i;
                let gi = k / g;
                let w = c.scales[gi] as f64 * c.codes[k] as f64 + c.biases[gi] as f64;
                acc += w * x[r * c.inp + i] as f64;
            }
            y[r * c.out + o] = acc;
        }
    }
    y
}

/// Largest error relative to the largest magnitude of the reference.
fn rel_err(got: &[f32], want: &[f64]) -> f64 {
    let scale = want.iter().fold(0f64, |m, v| m.max(v.abs()));
    got.iter().zip(want).map(|(g, w)| (*g as f64 - w).abs()).fold(0f64, f64::max) / scale
}

fn packed(c: &Case) -> PackedMatrix {
    PackedMatrix::from_codes(&c.codes, &c.scales, &c.biases, c.out, c.inp, c.spec).unwrap()
}

#[test]
fn products_match_a_float64_reference_for_4_and_8_bit_codes() {
    eprintln!("SIMD route available: {}", simd_available());
    for (bits, group) in [(4, 32), (4, 64), (8, 32), (8, 128)] {
        let c = case(70, 256, bits, group, 7 + bits as u64 + group as u64);
        let m = packed(&c);
        for rows in [1, 2, 3, 8, 16] {
            let x = activations(rows, c.inp, 99 + rows as u64);
            let want = reference(&c, &x, rows);
            for (route, got) in [("dispatch", m.matmul(&x, rows)), ("portable", m.matmul_portable(&x, rows))] {
                let err = rel_err(&got, &want);
                assert!(err < 2e-6, "{bits}-bit g{group}, {rows} rows, {route}: relative error {err:.2e}");
            }
        }
    }
}

#[test]
fn every_row_of_a_block_equals_its_single_row_product_bit_for_bit() {
    // What makes a T=2 verify equal two single steps, and a cohort row equal its solo run.
    for (bits, group) in [(4, 32), (8, 64)] {
        let c = case(42, 192, bits, group, 31);
        let m = packed(&c);
        for rows in [2, 5, 16] {
            let x = activations(rows, c.inp, 5 + rows as u64);
            let block = m.matmul(&x, rows);
            for r in 0..rows {
                let single = m.matmul(&x[r * c.inp..(r + 1) * c.inp], 1);
                assert_eq!(&block[r * c.out..(r + 1) * c.out], &single[..], "{bits}-bit, row {r} of {rows}");
            }
        }
    }
}

#[test]
fn several_matrices_in_one_dispatch_give_each_matrix_s_own_product() {
    // A layer's q, k, v (or gate, up) share one pool dispatch; each result must be its matrix's
    // product: all outputs covered once, none from a neighbour. Sizes that are not multiples
    // of a strip, a part smaller than a chunk, and blocks on both sides of the one-pass limit.
    for (inp, group) in [(256, 32), (1024, 64)] {
        let cases = [case(70, inp, 4, group, 3), case(24, inp, 4, group, 4), case(9, inp, 4, group, 5)];
        let parts: Vec<PackedMatrix> = cases.iter().map(packed).collect();
        let refs: Vec<&PackedMatrix> = parts.iter().collect();
        for rows in [1, 3, 7, 8, 16] {
            let x = activations(rows, inp, 11 + rows as u64);
            let each = PackedMatrix::matmul_each(&refs, &x, rows);
            assert_eq!(each.len(), 3);
            for ((c, m), got) in cases.iter().zip(&parts).zip(&each) {
                assert_eq!(got, &m.matmul(&x, rows), "[{}, {inp}], {rows} rows: not the matrix's own product", c.out);
                let err = rel_err(got, &reference(c, &x, rows));
                assert!(err < 2e-6, "[{}, {inp}], {rows} rows: relative error {err:.2e}", c.out);
            }
        }
    }
}

#[test]
fn the_simd_and_portable_routes_agree_bit_for_bit() {
    if !simd_available() {
        common::skip("the_simd_and_portable_routes_agree_bit_for_bit", "no AVX2/FMA on this CPU");
        return;
    }
    for (bits, group) in [(4, 64), (8, 32)] {
        let c = case(33, 320, bits, group, 123);
        let m = packed(&c);
        for rows in [1, 4, 7] {
            let x = activations(rows, c.inp, 77);
            assert_eq!(m.matmul(&x, rows), m.matmul_portable(&x, rows), "{bits}-bit, {rows} rows");
        }
    }
}

/// Blocks of every size the engine runs (decode steps, verifies, prompt chunks of up to 512
/// rows), on matrices whose outputs fill no whole tile: each instruction set this CPU runs
/// gives the portable route's bits, and each row of a block its single-row product's.
#[test]
fn every_instruction_set_gives_the_portable_bits_in_blocks_of_any_size() {
    let here: Vec<Isa> = [Isa::Avx2, Isa::Avx512].into_iter().filter(|i| i.runs_here()).collect();
    eprintln!("instruction sets compared with the portable route here: {here:?} (detected {:?})", Isa::detected());
    for (out, inp, bits, group, rows) in [
        (77, 320, 4, 64, 9),
        (130, 256, 8, 32, 37),
        (200, 576, 4, 32, 130),
        (13, 1536, 4, 32, 512),
        (70, 96, 4, 32, 17),
    ] {
        let c = case(out, inp, bits, group, 7 + rows as u64);
        let m = packed(&c);
        let x = activations(rows, c.inp, 31 + rows as u64);
        let portable = m.matmul_portable(&x, rows);
        for &isa in &here {
            let got = m.matmul_on(&x, rows, isa).expect("runs here");
            assert_eq!(got, portable, "[{out}, {inp}] {bits}-bit, {rows} rows on {isa:?}");
        }
        let err = rel_err(&portable, &reference(&c, &x, rows));
        assert!(err < 2e-6, "[{out}, {inp}], {rows} rows: relative error {err:.2e}");
        for r in [0, rows / 2, rows - 1] {
            let single = m.matmul(&x[r * inp..(r + 1) * inp], 1);
            assert_eq!(&portable[r * out..(r + 1) * out], &single[..], "[{out}, {inp}], row {r} of {rows}");
        }
    }
}

#[test]
fn mlx_packed_weights_are_read_in_mlx_s_own_layout() {
    // Quantize with MLX, then check the kernel against MLX's own dequantization of the same
    // tensors, multiplied out in float64 here.
    let (out, inp) = (48, 256);
    let mut rng = Rng(2024);
    let dense: Vec<f32> = (0..out * inp).map(|_| rng.float()).collect();
    let w = Array::from_slice(&dense, &[out as i32, inp as i32]);
    for (bits, group) in [(4, 32), (4, 64), (8, 64)] {
        let (wq, scales, biases) = mlx_rs::ops::quantize(&w, group, bits).unwrap();
        let m = PackedMatrix::from_mlx(&wq, &scales, &biases, QuantSpec { bits, group_size: group }).unwrap();
        assert_eq!((m.out_features(), m.in_features()), (out, inp));
        let deq =
            mlx_rs::ops::dequantize(&wq, &scales, &biases, group, bits).unwrap().as_dtype(Dtype::Float32).unwrap();
        let deq = common::to_f32(&deq);
        let rows = 3;
        let x = activations(rows, inp, 11);
        let want: Vec<f64> = (0..rows * out)
            .map(|k| {
                let (r, o) = (k / out, k % out);
                (0..inp).map(|i| deq[o * inp + i] as f64 * x[r * inp + i] as f64).sum()
            })
            .collect();
        let err = rel_err(&m.matmul(&x, rows), &want);
        assert!(err < 2e-6, "{bits}-bit g{group}: relative error {err:.2e} against MLX's dequantization");
    }
}

#[test]
fn unsupported_or_mismatched_layouts_are_refused_with_the_reason() {
    let w = Array::from_slice(&[0u32; 4 * 12], &[4, 12]);
    let s = Array::from_slice(&[1f32; 4 * 3], &[4, 3]);
    let err = PackedMatrix::from_mlx(&w, &s, &s, QuantSpec { bits: 3, group_size: 32 }).err().unwrap();
    assert!(format!("{err:#}").contains("4- or 8-bit"), "{err:#}");
    let err = PackedMatrix::from_mlx(&w, &s, &s, QuantSpec { bits: 4, group_size: 64 }).err().unwrap();
    assert!(format!("{err:#}").contains("do not fit"), "{err:#}");
    let err = PackedMatrix::from_codes(&[16; 64], &[1.0; 2], &[0.0; 2], 2, 32, QuantSpec { bits: 4, group_size: 32 })
        .err()
        .unwrap();
    assert!(format!("{err:#}").contains("does not fit in 4 bits"), "{err:#}");
}
