// `x W^T` for rows in tiles of 16 (a block a tile) against an affine-quantized W, every row reduced
// in one fixed order whatever the block's row count (CUDA, through MLX's custom-kernel mechanism;
// this file is the kernel *body*). MLX picks its quantized kernel by the number of rows (a vector
// kernel for one, tiled ones for more, cuBLAS on a dequantized copy for wide blocks), and each sums
// a row's products in its own order: a T=2 verify's first position then differs from the single-
// token step it stands for, and a B8 row from the same row alone (issue 41). Here a row's output
// channel is always one warp's: lane l takes the same chunks of the row in the same passes, and the
// warp's 32 partial sums meet in one butterfly. Nothing a row computes depends on the other rows,
// so the result is bit-identical alone or beside up to 15 others.
//
// Inputs  x [.., K] (model dtype), M rows in all (runtime: x_shape, x_ndim), 16 a tile;
//         w [N', K*BITS/32] uint32, s / b [N', K/G]: the packed weight, N' >= N (padded rows
//         past N are not read).
// Output  y [M, N] (model dtype).
// Header  affine_dot.cuh (load_chunk, chunk_dot, load_floats, warp_sum).
// Constants K, N, BITS, G; CPW, the output channels a warp takes (the caller's choice by N
//         alone, never by M).
//
// Layout: one warp per CPW consecutive output channels, WARPS warps a block (block y). Every
// pass a lane loads its chunk of each channel's row once and dots it with the matching values of
// every row of x, so the weight is read once for the whole block.
constexpr int LANES = 32;
constexpr int MAX_ROWS = 16;
constexpr int PER_WORD = 32 / BITS;
constexpr int WORDS = K / PER_WORD;
constexpr int LW = lane_words_filling(WORDS, PER_WORD, G);
constexpr int VALS = LW * PER_WORD;
constexpr int PASSES = (WORDS + LANES * LW - 1) / (LANES * LW);
static_assert(K % G == 0 && G % PER_WORD == 0, "whole groups a row, whole words a group");

const int lane = threadIdx.x;
const int first = (blockIdx.y * blockDim.y + threadIdx.y) * CPW;
// Warp-uniform: a warp past the last channel leaves whole, before any shuffle.
if (first >= N) {
  return;
}
// The rows are every leading axis of x together, so a caller need not flatten it first.
int x_rows = 1;
for (int d = 0; d + 1 < x_ndim; ++d) {
  x_rows *= x_shape[d];
}
// A block takes the rows of its tile (blockIdx.z), at most MAX_ROWS: a tile's rows meet the same
// code as a launch of just those rows, so a row's bits do not depend on how many rows there are.
const int row0 = static_cast<int>(blockIdx.z) * MAX_ROWS;
const int m = x_rows - row0 < MAX_ROWS ? x_rows - row0 : MAX_ROWS;
x += static_cast<size_t>(row0) * K;
y += static_cast<size_t>(row0) * N;
// Channels past N (the last warp's, where CPW does not divide N) read the last row and are not
// written.
auto channel = [&](int c) -> int { return first + c < N ? first + c : N - 1; };

float acc[MAX_ROWS][CPW] = {};
#pragma unroll
for (int p = 0; p < PASSES; ++p) {
  const int word = (p * LANES + lane) * LW;
  if (word < WORDS) {
    Chunk<LW> rows[CPW];
#pragma unroll
    for (int c = 0; c < CPW; ++c) {
      const size_t row = static_cast<size_t>(channel(c));
      rows[c] = load_chunk<BITS, G, LW>(w + row * WORDS, s + row * (K / G), b + row * (K / G), word);
    }
#pragma unroll
    for (int r = 0; r < MAX_ROWS; ++r) {
      if (r < m) {
        float v[VALS];
        load_floats<VALS>(x + static_cast<size_t>(r) * K + word * PER_WORD, v);
        const float sum_v = sum_of<VALS>(v);
#pragma unroll
        for (int c = 0; c < CPW; ++c) {
          acc[r][c] += chunk_dot<BITS, LW>(rows[c], v, sum_v);
        }
      }
    }
  }
}
store_warp_sums<MAX_ROWS, CPW>(acc, m, lane, first, N, y);
