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
//
// Layout: one warp per (token, output channel): block z = token, channel = block y * blockDim.y
// + thread y. Every lane first loads its chunks (affine_dot.cuh) of all K + 1 rows, then sums
// them against act's matching values, already weighted, so the warp waits on memory once and
// reduces once.
constexpr int LANES = 32;
constexpr int PER_WORD = 32 / BITS;
constexpr int W = I > IS ? I : IS;
static_assert(I % G == 0 && IS % G == 0, "whole groups a row");
// The routed experts' rows (I inputs) and the shared expert's (IS inputs) chunk alike only when
// their widths allow, so each has its own chunking.
constexpr int E_WORDS = I / PER_WORD;
constexpr int E_LW = lane_words(E_WORDS, PER_WORD, G);
constexpr int E_VALS = E_LW * PER_WORD;
constexpr int E_PASSES = (E_WORDS + LANES * E_LW - 1) / (LANES * E_LW);
constexpr int S_WORDS = IS / PER_WORD;
constexpr int S_LW = lane_words(S_WORDS, PER_WORD, G);
constexpr int S_VALS = S_LW * PER_WORD;
constexpr int S_PASSES = (S_WORDS + LANES * S_LW - 1) / (LANES * S_LW);

const int lane = threadIdx.x;
const int h = blockIdx.y * blockDim.y + threadIdx.y;
const int n = blockIdx.z;
if (h >= H) {
  return;
}

const int experts = d_w_shape[0];
float weight[K];
Chunk<E_LW> rows[K][E_PASSES];
#pragma unroll
for (int j = 0; j < K; ++j) {
  const size_t pair = static_cast<size_t>(n) * K + j;
  const unsigned int id = ids[pair];
  // A router never names an expert past E; a bad id reads expert 0 and counts for nothing.
  const bool valid = id < static_cast<unsigned int>(experts);
  weight[j] = valid ? static_cast<float>(scores[pair]) : 0.0f;
  const size_t row = static_cast<size_t>(valid ? id : 0u) * H + h;
#pragma unroll
  for (int p = 0; p < E_PASSES; ++p) {
    const int word = (p * LANES + lane) * E_LW;
    if (word < E_WORDS) {
      rows[j][p] = load_chunk<BITS, G, E_LW>(d_w + row * E_WORDS, d_s + row * (I / G), d_b + row * (I / G), word);
    }
  }
}
Chunk<S_LW> shared_row[S_PASSES];
#pragma unroll
for (int p = 0; p < S_PASSES; ++p) {
  const int word = (p * LANES + lane) * S_LW;
  if (word < S_WORDS) {
    shared_row[p] = load_chunk<BITS, G, S_LW>(sd_w + static_cast<size_t>(h) * S_WORDS, sd_s + static_cast<size_t>(h) * (IS / G),
                                               sd_b + static_cast<size_t>(h) * (IS / G), word);
  }
}

float total = 0.0f;
#pragma unroll
for (int j = 0; j < K; ++j) {
  const float* act_row = act + (static_cast<size_t>(n) * (K + 1) + j) * W;
  float part = 0.0f;
#pragma unroll
  for (int p = 0; p < E_PASSES; ++p) {
    const int word = (p * LANES + lane) * E_LW;
    if (word < E_WORDS) {
      float v[E_VALS];
      load_floats<E_VALS>(act_row + word * PER_WORD, v);
      part += chunk_dot<BITS, E_LW>(rows[j][p], v, sum_of<E_VALS>(v));
    }
  }
  total += weight[j] * part;
}
const int gate_width = gate_shape[1];
const float logit = static_cast<float>(gate[static_cast<size_t>(n) * gate_width + gate_width - 1]);
const float shared_weight = 1.0f / (1.0f + expf(-logit));
const float* shared_act = act + (static_cast<size_t>(n) * (K + 1) + K) * W;
float shared_part = 0.0f;
#pragma unroll
for (int p = 0; p < S_PASSES; ++p) {
  const int word = (p * LANES + lane) * S_LW;
  if (word < S_WORDS) {
    float v[S_VALS];
    load_floats<S_VALS>(shared_act + word * PER_WORD, v);
    shared_part += chunk_dot<BITS, S_LW>(shared_row[p], v, sum_of<S_VALS>(v));
  }
}
total = warp_sum(total + shared_weight * shared_part);
if (lane == 0) {
  y[static_cast<size_t>(n) * H + h] = total;
}
