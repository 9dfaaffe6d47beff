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
// + thread y; each row's dot product is affine_dot.cuh's. Every lane keeps one partial sum over
// all K + 1 rows, already weighted, so the warp reduces once.
constexpr int LANES = 32;
constexpr int PER_WORD = 32 / BITS;
constexpr int W = I > IS ? I : IS;
static_assert(I % G == 0 && IS % G == 0, "whole groups a row");

const int lane = threadIdx.x;
const int h = blockIdx.y * blockDim.y + threadIdx.y;
const int n = blockIdx.z;
if (h >= H) {
  return;
}

// This lane's share of one row (of `width` inputs) against act's row `act_row`.
auto partial = [&](const unsigned int* words, decltype(d_s) scales, decltype(d_b) biases, int width, size_t act_row) -> float {
  return affine_partial<BITS, G>(words, scales, biases, act + act_row, width, lane);
};

const int experts = d_w_shape[0];
float total = 0.0f;
for (int j = 0; j < K; ++j) {
  const size_t pair = static_cast<size_t>(n) * K + j;
  const unsigned int expert = ids[pair];
  if (expert >= static_cast<unsigned int>(experts)) {
    continue;  // never from a router; keeps a bad id from reading past the weights
  }
  const size_t row = static_cast<size_t>(expert) * H + h;
  const size_t act_row = (static_cast<size_t>(n) * (K + 1) + j) * W;
  total += static_cast<float>(scores[pair]) *
           partial(d_w + row * (I / PER_WORD), d_s + row * (I / G), d_b + row * (I / G), I, act_row);
}
const int gate_width = gate_shape[1];
const float logit = static_cast<float>(gate[static_cast<size_t>(n) * gate_width + gate_width - 1]);
const float shared_weight = 1.0f / (1.0f + expf(-logit));
const size_t shared_act = (static_cast<size_t>(n) * (K + 1) + K) * W;
total += shared_weight *
         partial(sd_w + static_cast<size_t>(h) * (IS / PER_WORD), sd_s + static_cast<size_t>(h) * (IS / G),
                 sd_b + static_cast<size_t>(h) * (IS / G), IS, shared_act);
#pragma unroll
for (int offset = LANES / 2; offset > 0; offset >>= 1) {
  total += __shfl_xor_sync(0xffffffffu, total, offset);
}
if (lane == 0) {
  y[static_cast<size_t>(n) * H + h] = total;
}
