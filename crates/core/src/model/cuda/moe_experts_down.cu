// The MoE block's second half (CUDA, through MLX's custom-kernel mechanism; this file is the
// kernel *body*): for every token and output channel, the down products of its K routed experts
// weighted by the router's scores, plus the shared expert's down product weighted by the sigmoid
// of its gate, in one launch. It replaces the experts' down gather_qmm, the weighted sum, the
// shared expert's down product, its gate and the final add.
//
// Inputs  act [N, K+1, W] float32 (moe_experts_up.cu's output, W = max(I, IS)); ids [N, K]
//         uint32; scores [N, K] (float32 or model dtype);
//         gate [N, GW] (model dtype): a product whose last column is the shared expert's gate
//         logit (the router's stacked product, or the shared expert gate's own [N, 1]);
//         d_w [E, H, I*BITS/32] uint32, d_s / d_b [E, H, I/G]: the experts' down projection;
//         sd_w [H, IS*BITS/32], sd_s / sd_b [H, IS/G]: the shared expert's.
// Output  y [N, H] (model dtype).
// Constants H, I, IS, K, BITS, G; CPW, the output channels a warp takes.
//
// Layout: one warp per (token, CPW consecutive output channels): block z = token, the warp's
// first channel = (block y * blockDim.y + thread y) * CPW. For each slot the warp loads its lanes'
// share of act's row once (chunks that fill the warp where the row allows, affine_dot.cuh) and
// dots it with the CPW channels' rows, which lie next to each other in the expert's matrix. A
// float32 act row holds eight times the bytes of a 4-bit weight row, so with one channel a warp
// the block read act's rows far more than the weights (0.34 TB/s at a 16-token verify); CPW > 1
// (the caller's choice for blocks of several tokens) divides that reading by CPW.
constexpr int LANES = 32;
constexpr int PER_WORD = 32 / BITS;
constexpr int W = I > IS ? I : IS;
static_assert(I % G == 0 && IS % G == 0, "whole groups a row");
// The routed experts' rows (I inputs) and the shared expert's (IS inputs) chunk alike only when
// their widths allow, so each has its own chunking.
constexpr int E_WORDS = I / PER_WORD;
constexpr int E_LW = lane_words_filling(E_WORDS, PER_WORD, G);
constexpr int E_VALS = E_LW * PER_WORD;
constexpr int E_PASSES = (E_WORDS + LANES * E_LW - 1) / (LANES * E_LW);
constexpr int S_WORDS = IS / PER_WORD;
constexpr int S_LW = lane_words_filling(S_WORDS, PER_WORD, G);
constexpr int S_VALS = S_LW * PER_WORD;
constexpr int S_PASSES = (S_WORDS + LANES * S_LW - 1) / (LANES * S_LW);

const int lane = threadIdx.x;
const int first = (blockIdx.y * blockDim.y + threadIdx.y) * CPW;
const int n = blockIdx.z;
if (first >= H) {
  return;
}
// Channels past H (the last warp's, where CPW does not divide H) read the last row and are not
// written.
auto channel = [&](int c) -> int { return first + c < H ? first + c : H - 1; };

const int experts = d_w_shape[0];
float total[CPW];
#pragma unroll
for (int c = 0; c < CPW; ++c) {
  total[c] = 0.0f;
}
// Slots are taken JG at a time, each group's rows loaded before any is summed, so a lane has
// about eight chunks in flight whatever CPW is.
constexpr int JG = CPW >= 8 ? 1 : 8 / CPW;
#pragma unroll
for (int j0 = 0; j0 < K; j0 += JG) {
  Chunk<E_LW> rows[JG][E_PASSES][CPW];
  float weight[JG];
#pragma unroll
  for (int jj = 0; jj < JG; ++jj) {
    const int j = j0 + jj;
    if (j < K) {
      const size_t pair = static_cast<size_t>(n) * K + j;
      const unsigned int id = ids[pair];
      // A router never names an expert past E; a bad id reads expert 0 and counts for nothing.
      const bool valid = id < static_cast<unsigned int>(experts);
      weight[jj] = valid ? static_cast<float>(scores[pair]) : 0.0f;
      const size_t first_row = static_cast<size_t>(valid ? id : 0u) * H;
#pragma unroll
      for (int p = 0; p < E_PASSES; ++p) {
        const int word = (p * LANES + lane) * E_LW;
        if (word < E_WORDS) {
#pragma unroll
          for (int c = 0; c < CPW; ++c) {
            const size_t row = first_row + channel(c);
            rows[jj][p][c] =
                load_chunk<BITS, G, E_LW>(d_w + row * E_WORDS, d_s + row * (I / G), d_b + row * (I / G), word);
          }
        }
      }
    }
  }
#pragma unroll
  for (int jj = 0; jj < JG; ++jj) {
    const int j = j0 + jj;
    if (j < K) {
      const float* act_row = act + (static_cast<size_t>(n) * (K + 1) + j) * W;
      float part[CPW];
#pragma unroll
      for (int c = 0; c < CPW; ++c) {
        part[c] = 0.0f;
      }
#pragma unroll
      for (int p = 0; p < E_PASSES; ++p) {
        const int word = (p * LANES + lane) * E_LW;
        if (word < E_WORDS) {
          float v[E_VALS];
          load_floats<E_VALS>(act_row + word * PER_WORD, v);
          const float sum_v = sum_of<E_VALS>(v);
#pragma unroll
          for (int c = 0; c < CPW; ++c) {
            part[c] += chunk_dot<BITS, E_LW>(rows[jj][p][c], v, sum_v);
          }
        }
      }
#pragma unroll
      for (int c = 0; c < CPW; ++c) {
        total[c] += weight[jj] * part[c];
      }
    }
  }
}

const int gate_width = gate_shape[1];
const float logit = static_cast<float>(gate[static_cast<size_t>(n) * gate_width + gate_width - 1]);
const float shared_weight = 1.0f / (1.0f + expf(-logit));
const float* shared_act = act + (static_cast<size_t>(n) * (K + 1) + K) * W;
float shared_part[CPW];
#pragma unroll
for (int c = 0; c < CPW; ++c) {
  shared_part[c] = 0.0f;
}
#pragma unroll
for (int p = 0; p < S_PASSES; ++p) {
  const int word = (p * LANES + lane) * S_LW;
  if (word < S_WORDS) {
    Chunk<S_LW> rows[CPW];
#pragma unroll
    for (int c = 0; c < CPW; ++c) {
      const size_t row = channel(c);
      rows[c] = load_chunk<BITS, G, S_LW>(sd_w + row * S_WORDS, sd_s + row * (IS / G), sd_b + row * (IS / G), word);
    }
    float v[S_VALS];
    load_floats<S_VALS>(shared_act + word * PER_WORD, v);
    const float sum_v = sum_of<S_VALS>(v);
#pragma unroll
    for (int c = 0; c < CPW; ++c) {
      shared_part[c] += chunk_dot<BITS, S_LW>(rows[c], v, sum_v);
    }
  }
}
#pragma unroll
for (int c = 0; c < CPW; ++c) {
  const float sum = warp_sum(total[c] + shared_weight * shared_part[c]);
  if (lane == 0 && first + c < H) {
    y[static_cast<size_t>(n) * H + first + c] = sum;
  }
}
