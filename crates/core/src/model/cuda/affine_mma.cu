// `x W^T` for bf16 rows in tiles of 16 (a block a tile) against an affine-quantized W on the tensor
// cores, every row reduced in one fixed order whatever the block's row count (CUDA, through MLX's
// custom-kernel mechanism; this file is the kernel *body*). The scalar kernel (affine_rows.cu)
// decodes every weight once for each row it serves, so at a B8 verify's 16 rows it costs 3 to 10
// times MLX's quantized matmul at the real Qwen3.6 geometry (docs/benchmarks.md); here a warp
// decodes a weight once and one `mma.sync` multiplies it into all 16 rows.
//
// Why the rows stay independent: an mma computes each output element from its own row of A and
// its column of B, so a row's result does not depend on what the other rows hold; rows past the
// block's are zeros. Every row takes the same spans in the same order, and each span's steps in
// the same order, so a row alone and a row beside 15 others meet the same sums bit for bit
// (`cohort-lab device --check-invariance` holds it to that, and to a float64 product).
//
// Inputs  x [.., K] bf16, M rows in all (runtime: x_shape, x_ndim), 16 a tile;
//         w [N', K*BITS/32] uint32, s / b [N', K/G]: the packed weight, N' >= N.
// Output  y [M, N] bf16.
// Constants K, N, BITS, G; LW, the words a lane loads of a channel's row a span (4, 2 or 1,
// chosen by K, G and BITS); NT, the 8-channel tiles a block takes (chosen by N alone, never by
// M); KS, the warps of a block, which share its tiles' k axis (chosen by K, G and BITS alone).
//
// Layout (mma.sync m16n8k16, bf16 in, float32 accumulate): lane = 4 * group + t. A block takes
// 8 * NT consecutive channels; within a tile, lanes of group n load channel n. A span is the
// 4 * LW * PER_WORD inputs a warp covers at once: lane t holds the LW words of its channel at
// inputs t * CODES ... (one quantization group), and x's rows `group` and `group + 8` at the
// same inputs. A step of the span feeds the mma four consecutive inputs of each lane: inputs of
// the product's k axis are taken in a permuted order, the same one for x and for W, which leaves
// each dot product whole.
//
// Why the k axis is shared: at one to sixteen rows the kernel is bound by how many weight bytes
// are in flight. With one warp a tile, a 4096 -> 2048 product had 256 warps on 32 SMs, each
// walking its 32 spans one after another: 30.6 us on an H100 for 4.2 MB (140 GB/s; ncu, one B1
// step at the real geometry). Here warp w of a block takes spans w, w + KS, w + 2 KS, ..., and
// the block adds its warps' sums in warp order at the end. The order depends on the weight's
// shape alone, so a row still meets the same sums alone and beside 15 others.
constexpr int PER_WORD = 32 / BITS;
constexpr int WORDS = K / PER_WORD;
constexpr int CODES = LW * PER_WORD;
constexpr int SPAN = 4 * CODES;
constexpr int SPANS = K / SPAN;
constexpr int STEPS = CODES / 4;
constexpr unsigned int MASK = (1u << BITS) - 1u;
static_assert(K % SPAN == 0 && G % CODES == 0, "whole spans a row, one group a lane's codes");
static_assert(CODES % 8 == 0, "a lane's x values in whole 16-byte loads");
static_assert(KS >= 1 && KS <= SPANS, "every warp of a block takes at least one span");
// Each warp's sums, for the block to add in warp order.
__shared__ float partial[KS > 1 ? KS - 1 : 1][NT][4][32];

const int lane = threadIdx.x;
const int warp = threadIdx.y;
const int group = lane >> 2;
const int t = lane & 3;
const int first = blockIdx.y * 8 * NT;
// Block-uniform: a block past the last channel leaves whole, before any mma or barrier.
if (first >= N) {
  return;
}
// The rows are every leading axis of x together, so a caller need not flatten it first.
int x_rows = 1;
for (int d = 0; d + 1 < x_ndim; ++d) {
  x_rows *= x_shape[d];
}
// A block takes the 16 rows of its tile (blockIdx.z): a tile's rows meet the same code as a
// launch of just those rows, so a row's bits do not depend on how many rows there are.
const int row0 = static_cast<int>(blockIdx.z) * 16;
const int m = x_rows - row0 < 16 ? x_rows - row0 : 16;
x += static_cast<size_t>(row0) * K;
y += static_cast<size_t>(row0) * N;
const bool low = group < m;
const bool high = group + 8 < m;
const uint4* x_low = reinterpret_cast<const uint4*>(x + static_cast<size_t>(low ? group : 0) * K);
const uint4* x_high = reinterpret_cast<const uint4*>(x + static_cast<size_t>(high ? group + 8 : 0) * K);

float acc[NT][4] = {};
#pragma unroll 2
for (int span = warp * SPAN; span < K; span += KS * SPAN) {
  const int at = span + t * CODES;
  // Rows `group` and `group + 8` at this lane's inputs, as bf16 pairs (zeros past the block).
  unsigned int xl[CODES / 2];
  unsigned int xh[CODES / 2];
#pragma unroll
  for (int i = 0; i < CODES / 8; ++i) {
    const uint4 a = low ? x_low[at / 8 + i] : make_uint4(0, 0, 0, 0);
    const uint4 c = high ? x_high[at / 8 + i] : make_uint4(0, 0, 0, 0);
    xl[4 * i] = a.x;
    xl[4 * i + 1] = a.y;
    xl[4 * i + 2] = a.z;
    xl[4 * i + 3] = a.w;
    xh[4 * i] = c.x;
    xh[4 * i + 1] = c.y;
    xh[4 * i + 2] = c.z;
    xh[4 * i + 3] = c.w;
  }
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    // Channels past N (the last block's) read the last row and are not written.
    const int channel = first + 8 * nt + group < N ? first + 8 * nt + group : N - 1;
    const size_t row = static_cast<size_t>(channel);
    unsigned int words[LW];
    const unsigned int* wp = w + row * WORDS + at / PER_WORD;
    if constexpr (LW == 4) {
      const uint4 v = *reinterpret_cast<const uint4*>(wp);
      words[0] = v.x;
      words[1] = v.y;
      words[2] = v.z;
      words[3] = v.w;
    } else if constexpr (LW == 2) {
      const uint2 v = *reinterpret_cast<const uint2*>(wp);
      words[0] = v.x;
      words[1] = v.y;
    } else {
      words[0] = wp[0];
    }
    const float scale = static_cast<float>(s[row * (K / G) + at / G]);
    const float bias = static_cast<float>(b[row * (K / G) + at / G]);
#pragma unroll
    for (int step = 0; step < STEPS; ++step) {
      float v[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int code = 4 * step + j;
        const unsigned int q = (words[code / PER_WORD] >> ((code % PER_WORD) * BITS)) & MASK;
        v[j] = fmaf(scale, static_cast<float>(q), bias);
      }
      const __nv_bfloat162 lo = __floats2bfloat162_rn(v[0], v[1]);
      const __nv_bfloat162 hi = __floats2bfloat162_rn(v[2], v[3]);
      const unsigned int b0 = *reinterpret_cast<const unsigned int*>(&lo);
      const unsigned int b1 = *reinterpret_cast<const unsigned int*>(&hi);
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
          "{%0, %1, %2, %3};"
          : "+f"(acc[nt][0]), "+f"(acc[nt][1]), "+f"(acc[nt][2]), "+f"(acc[nt][3])
          : "r"(xl[2 * step]), "r"(xh[2 * step]), "r"(xl[2 * step + 1]), "r"(xh[2 * step + 1]), "r"(b0), "r"(b1));
    }
  }
}
if constexpr (KS > 1) {
  if (warp > 0) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        partial[warp - 1][nt][e][lane] = acc[nt][e];
      }
    }
  }
  __syncthreads();
  if (warp > 0) {
    return;
  }
#pragma unroll
  for (int w = 0; w < KS - 1; ++w) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        acc[nt][e] += partial[w][nt][e][lane];
      }
    }
  }
}
// acc[nt][0..1]: row `group`, channels 2t and 2t + 1 of tile nt; acc[nt][2..3]: row `group + 8`.
#pragma unroll
for (int nt = 0; nt < NT; ++nt) {
  const int c = first + 8 * nt + 2 * t;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = group + 8 * h;
    if (r < m) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        if (c + e < N) {
          y[static_cast<size_t>(r) * N + c + e] = acc[nt][2 * h + e];
        }
      }
    }
  }
}
