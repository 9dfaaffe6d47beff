// `x W^T` for rows in tiles of 16 (a block a tile) against a float weight W (bf16, fp16 or
// float32), every row reduced in one fixed order whatever the block's row count: affine_rows.cu's
// contract for checkpoints stored unquantized (CUDA, through MLX's custom-kernel mechanism; this
// file is the kernel *body*). MLX sends one row to a vector kernel and more to cuBLAS, whose
// algorithm and split of the inputs follow M, so a row's sums change with the rows beside it.
//
// Inputs  x [.., K] (model dtype), M rows in all (runtime: x_shape, x_ndim), 16 a tile;
//         w [N', K] (weight dtype), N' >= N.
// Output  y [M, N] (model dtype).
// Header  affine_dot.cuh (load_floats, warp_sum).
// Constants K, N; CPW, the output channels a warp takes (by N alone, never by M).
//
// Layout: one warp per CPW consecutive output channels, a block of warps along y. Lane l takes
// VALS consecutive inputs a pass (16 bytes of a bf16 row) at VALS * (p * 32 + l); the warp's
// partial sums meet in one butterfly.
constexpr int LANES = 32;
constexpr int MAX_ROWS = 16;
constexpr int VALS = K % 8 == 0 ? 8 : (K % 4 == 0 ? 4 : 1);
constexpr int PASSES = (K / VALS + LANES - 1) / LANES;

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
auto channel = [&](int c) -> int { return first + c < N ? first + c : N - 1; };

float acc[MAX_ROWS][CPW] = {};
#pragma unroll
for (int p = 0; p < PASSES; ++p) {
  const int at = (p * LANES + lane) * VALS;
  if (at < K) {
    float wv[CPW][VALS];
#pragma unroll
    for (int c = 0; c < CPW; ++c) {
      load_floats<VALS>(w + static_cast<size_t>(channel(c)) * K + at, wv[c]);
    }
#pragma unroll
    for (int r = 0; r < MAX_ROWS; ++r) {
      if (r < m) {
        float v[VALS];
        load_floats<VALS>(x + static_cast<size_t>(r) * K + at, v);
#pragma unroll
        for (int c = 0; c < CPW; ++c) {
          float part = 0.0f;
#pragma unroll
          for (int i = 0; i < VALS; ++i) {
            part += v[i] * wv[c][i];
          }
          acc[r][c] += part;
        }
      }
    }
  }
}
store_warp_sums<MAX_ROWS, CPW>(acc, m, lane, first, N, y);
