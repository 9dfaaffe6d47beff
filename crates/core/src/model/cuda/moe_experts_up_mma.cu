// The MoE block's first half after routing on the tensor cores, for bf16 blocks of up to 16
// tokens with 4-bit experts (CUDA, through MLX's custom-kernel mechanism; this file is the kernel
// *body*). Same inputs, output and grid as moe_experts_up.cu, which it replaces where it fits
// (model/cuda/moe_experts.rs): for every (token, slot) pair silu(gate) * up of the slot's expert.
//
// Why: at a B8 verify's 16 tokens the scalar kernel decodes each weight once for every pair
// that reads it (144 pairs, ~100 distinct experts) and spends about four instructions a weight
// on every one of them; Nsight Compute put it at 84 us a layer on an H100, more than the bytes
// it reads need. Here a block takes one expert and every pair routed to it as the rows of one
// `mma.sync`: each weight is decoded once a block, two at a time, and multiplied into all of the
// expert's tokens at once.
//
// Inputs  x [N, H] bf16; ids [N, K] uint32; gu_w [E, 2I, H/8] uint32, gu_s / gu_b [E, 2I, H/G]
//         bf16; sgu_w [2IS, H/8], sgu_s / sgu_b [2IS, H/G]: as moe_experts_up.cu.
// Output  act [N, K+1, W] float32, W = max(I, IS).
// Constants H, I, IS, K, BITS (4), G; WARPS, the warps of a block (an 8-channel tile each).
//
// Layout: a block of WARPS warps per (pair, WARPS * 8 channels); a block's pair is its linear
// index modulo the pairs, as in moe_experts_up.cu. The first pair that names an expert takes
// every pair naming it (the shared expert: token 0's pair takes every token), 16 at a time as
// the mma's rows; the other pairs' blocks leave at once. Warp w takes the block's w-th 8-channel
// tile over the whole k axis, span after span (a span is 128 inputs, 32 per lane of a quad). Two
// mma tiles a warp: the tile's 8 gate channels and the matching 8 up channels, so SwiGLU needs
// no exchange between lanes.
//
// Why a warp a tile over all of k rather than the warps sharing k: at 16 tokens most experts
// hold one or two of them, so a block's arithmetic is small and its fixed costs (finding the
// expert's pairs, the barriers) set its time; a first version with 8 warps on one tile's k axis
// ran 95 us a layer on an H100, slower than the scalar kernel. Eight tiles a block pay those
// costs once for eight times the work and need no sum across warps.
//
// Why a row's bits do not depend on the others: an mma computes each output element from its
// own row of A and its column of B, so what the other rows hold never reaches it, and every row
// takes the same spans, steps and warp order whatever the block's rows or which block took it.
// A row alone and a row beside 15 others meet the same sums (`cohort-lab device --check-invariance`).
//
// Decoding: a word holds codes c0..c7, four bits each, low bits first. (word >> 4i) & 0x000F000F
// puts c_i and c_{i+4} in the low bits of two 16-bit halves; ORed with 0x4300 each half is the
// bf16 128 + c exactly (its 7 mantissa bits count units at 2^7), and subtracting 128 in bf16 is
// exact. One bf16 fma then gives round(scale * c + bias) for two weights. The inputs of the
// product's k axis are taken in the order this pairs them (c_i with c_{i+4}), x's the same way.
constexpr int PER_WORD = 8;
constexpr int WORDS = H / PER_WORD;
constexpr int LW = 4;
constexpr int CODES = LW * PER_WORD;
constexpr int SPAN = 4 * CODES;
constexpr int ROWS = 16;
constexpr int W = I > IS ? I : IS;
static_assert(BITS == 4, "4-bit experts");
static_assert(WARPS >= 1, "a warp a block at least");
static_assert(H % SPAN == 0 && G % CODES == 0, "whole spans a row, one group a lane's codes");

__shared__ int tile_token[ROWS];
__shared__ int tile_out[ROWS];
__shared__ int tile_count;
__shared__ int tile_next;

const int lane = threadIdx.x;
const int warp = threadIdx.y;
const int group = lane >> 2;
const int t = lane & 3;
const unsigned int linear = blockIdx.y + gridDim.y * blockIdx.z;
const int pair = linear % gridDim.z;
const int block_first = (linear / gridDim.z) * 8 * WARPS;
const int first = block_first + warp * 8;
const int n = pair / (K + 1);
const int slot = pair % (K + 1);
const int tokens = ids_shape[0];
const int total = tokens * K;
const bool shared = slot == K;
// Block-uniform exits, before any barrier: a tile past the output, the shared expert's pairs
// after token 0's, and a pair whose expert an earlier pair names (that pair's block takes it).
if (block_first >= W || (shared && n != 0)) {
  return;
}
const int me = n * K + slot;
const unsigned int expert = shared ? 0u : ids[me];
if (!shared) {
  for (int base = 0; base < me; base += 32) {
    const int idx = base + lane;
    if (__any_sync(0xffffffffu, idx < me && ids[idx] == expert)) {
      return;
    }
  }
}
const int width = shared ? IS : I;
// A router never names an expert past E; such pairs get zeros, like the scalar kernel's, and so
// do tiles past the slot's width (where the routed and shared widths differ) without reading.
const bool valid = first < width && (shared || expert < static_cast<unsigned int>(gu_w_shape[0]));
// Lanes of quad `group` load channel first + group of the tile (the last row past the slot's
// width; those channels are written as zeros).
const int channel = first + group < width ? first + group : width - 1;
const size_t first_row = shared || !valid ? 0 : static_cast<size_t>(expert) * 2 * I;
const size_t gate_row = first_row + channel;
const size_t up_row = first_row + width + channel;
const unsigned int* words = shared ? sgu_w : gu_w;
const auto* scales = shared ? sgu_s : gu_s;
const auto* biases = shared ? sgu_b : gu_b;
constexpr int GROUPS = H / G;

int cursor = shared ? 0 : me;
while (true) {
  // The next (up to) 16 pairs of this expert, in order.
  if (shared) {
    if (warp == 0 && lane < ROWS) {
      const int token = cursor + lane;
      if (token < tokens) {
        tile_token[lane] = token;
        tile_out[lane] = token * (K + 1) + K;
      }
      if (lane == 0) {
        tile_count = tokens - cursor < ROWS ? tokens - cursor : ROWS;
        tile_next = cursor + ROWS;
      }
    }
  } else if (warp == 0) {
    int count = 0;
    int at = cursor;
    while (count < ROWS && at < total) {
      const int idx = at + lane;
      const bool hit = idx < total && ids[idx] == expert;
      const unsigned int mask = __ballot_sync(0xffffffffu, hit);
      const int rank = count + __popc(mask & ((1u << lane) - 1u));
      if (hit && rank < ROWS) {
        tile_token[rank] = idx / K;
        tile_out[rank] = idx / K * (K + 1) + idx % K;
      }
      const int room = ROWS - count;
      if (__popc(mask) > room) {
        // Stop at the first hit this tile has no room for.
        unsigned int rest = mask;
        for (int i = 0; i < room; ++i) {
          rest &= rest - 1u;
        }
        at += __ffs(rest) - 1;
        count = ROWS;
      } else {
        count += __popc(mask);
        at += 32;
      }
    }
    if (lane == 0) {
      tile_count = count;
      tile_next = at;
    }
  }
  __syncthreads();
  const int m = tile_count;
  const int next = tile_next;
  if (m == 0) {
    break;
  }
  const bool low = group < m;
  const bool high = group + 8 < m;
  const uint4* x_low = reinterpret_cast<const uint4*>(x + static_cast<size_t>(low ? tile_token[group] : 0) * H);
  const uint4* x_high = reinterpret_cast<const uint4*>(x + static_cast<size_t>(high ? tile_token[group + 8] : 0) * H);

  float acc[2][4] = {};
  if (valid) {
#pragma unroll 2
    for (int span = 0; span < H; span += SPAN) {
      const int at = span + t * CODES;
      // x's rows at this lane's inputs, paired as the codes are: (x[8j + i], x[8j + i + 4]).
      unsigned int xl[CODES / 2];
      unsigned int xh[CODES / 2];
#pragma unroll
      for (int j = 0; j < LW; ++j) {
        const uint4 a = low ? x_low[at / 8 + j] : make_uint4(0, 0, 0, 0);
        const uint4 c = high ? x_high[at / 8 + j] : make_uint4(0, 0, 0, 0);
        xl[4 * j] = __byte_perm(a.x, a.z, 0x5410);
        xl[4 * j + 1] = __byte_perm(a.x, a.z, 0x7632);
        xl[4 * j + 2] = __byte_perm(a.y, a.w, 0x5410);
        xl[4 * j + 3] = __byte_perm(a.y, a.w, 0x7632);
        xh[4 * j] = __byte_perm(c.x, c.z, 0x5410);
        xh[4 * j + 1] = __byte_perm(c.x, c.z, 0x7632);
        xh[4 * j + 2] = __byte_perm(c.y, c.w, 0x5410);
        xh[4 * j + 3] = __byte_perm(c.y, c.w, 0x7632);
      }
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
        const size_t row = nt == 0 ? gate_row : up_row;
        const uint4 q = *reinterpret_cast<const uint4*>(words + row * WORDS + at / PER_WORD);
        const unsigned int wq[LW] = {q.x, q.y, q.z, q.w};
        const __nv_bfloat16 sc = __float2bfloat16(static_cast<float>(scales[row * GROUPS + at / G]));
        const __nv_bfloat16 bi = __float2bfloat16(static_cast<float>(biases[row * GROUPS + at / G]));
        const __nv_bfloat162 scale2 = __halves2bfloat162(sc, sc);
        const __nv_bfloat162 bias2 = __halves2bfloat162(bi, bi);
        const __nv_bfloat162 magic = __halves2bfloat162(__ushort_as_bfloat16(0x4300), __ushort_as_bfloat16(0x4300));
#pragma unroll
        for (int j = 0; j < LW; ++j) {
          unsigned int b[4];
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            unsigned int bits;
            const unsigned int shifted = wq[j] >> (4 * i);
            asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(bits) : "r"(shifted), "n"(0x000F000F), "n"(0x43004300));
            const __nv_bfloat162 code = __hsub2(*reinterpret_cast<const __nv_bfloat162*>(&bits), magic);
            const __nv_bfloat162 value = __hfma2(code, scale2, bias2);
            b[i] = *reinterpret_cast<const unsigned int*>(&value);
          }
          // Two mma steps a word: k slots (2t, 2t+1) and (2t+8, 2t+9) take pairs (0, 1), then (2, 3).
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            asm volatile(
                "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                "{%0, %1, %2, %3};"
                : "+f"(acc[nt][0]), "+f"(acc[nt][1]), "+f"(acc[nt][2]), "+f"(acc[nt][3])
                : "r"(xl[4 * j + 2 * h]), "r"(xh[4 * j + 2 * h]), "r"(xl[4 * j + 2 * h + 1]),
                  "r"(xh[4 * j + 2 * h + 1]), "r"(b[2 * h]), "r"(b[2 * h + 1]));
          }
        }
      }
    }
  }
  {
    // acc[nt][0..1]: row `group`, channels 2t and 2t + 1 of the tile; acc[nt][2..3]: row group + 8.
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int r = group + 8 * hr;
      if (r < m) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int c = first + 2 * t + e;
          if (c < W) {
            const float gate = acc[0][2 * hr + e];
            const float up = acc[1][2 * hr + e];
            const bool inside = valid && c < width;
            act[static_cast<size_t>(tile_out[r]) * W + c] = inside ? gate / (1.0f + expf(-gate)) * up : 0.0f;
          }
        }
      }
    }
  }
  // Every warp has read the tile's rows before the next tile writes them.
  __syncthreads();
  if (next >= (shared ? tokens : total)) {
    break;
  }
  cursor = next;
}
