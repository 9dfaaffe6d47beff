// The MoE block's first half after routing (CUDA, through MLX's custom-kernel mechanism; this
// file is the kernel *body*): for every token, the gate and up products of its K routed experts
// and of the shared expert, and SwiGLU over them, in one launch. It replaces the experts'
// gather_qmm, the shared expert's product, their splits and their two SwiGLU nodes.
//
// Inputs  x [N, H] (model dtype); ids [N, K] uint32, the router's experts;
//         gu_w [E, 2I, H*BITS/32] uint32, gu_s / gu_b [E, 2I, H/G]: the experts' stacked
//         [gate | up], affine (value = scale * q + bias, q packed low bits first);
//         sgu_w [2IS, H*BITS/32], sgu_s / sgu_b [2IS, H/G]: the shared expert's stacked [gate | up].
// Output  act [N, K+1, W] float32, W = max(I, IS): silu(gate) * up for slot j < K (expert
//         ids[n, j]) and for slot K (the shared expert); channels past a slot's width are zero.
//
// Layout: one warp per (token, slot, channel): block z = token * (K+1) + slot, channel = block
// y * blockDim.y + thread y; each row's dot product is affine_dot.cuh's, lanes striding over
// its packed words.
constexpr int LANES = 32;
constexpr int PER_WORD = 32 / BITS;
constexpr int WORDS = H / PER_WORD;
constexpr int GROUPS = H / G;
constexpr int W = I > IS ? I : IS;
static_assert(H % G == 0, "whole groups a row");

const int lane = threadIdx.x;
const int channel = blockIdx.y * blockDim.y + threadIdx.y;
const int pair = blockIdx.z;
const int n = pair / (K + 1);
const int slot = pair % (K + 1);
if (channel >= W) {
  return;
}
const bool shared = slot == K;
const int width = shared ? IS : I;
const size_t out = static_cast<size_t>(pair) * W + channel;
const unsigned int expert = shared ? 0u : ids[static_cast<size_t>(n) * K + slot];
// A router never names an expert past E; the guard keeps a bad id from reading past the weights.
if (channel >= width || (!shared && expert >= static_cast<unsigned int>(gu_w_shape[0]))) {
  if (lane == 0) {
    act[out] = 0.0f;
  }
  return;
}

const auto* x_row = x + static_cast<size_t>(n) * H;
// One row of the stacked matrix against x's row n, summed over the warp.
auto dot = [&](const unsigned int* words, decltype(gu_s) scales, decltype(gu_b) biases) -> float {
  float acc = affine_partial<BITS, G>(words, scales, biases, x_row, H, lane);
#pragma unroll
  for (int offset = LANES / 2; offset > 0; offset >>= 1) {
    acc += __shfl_xor_sync(0xffffffffu, acc, offset);
  }
  return acc;
};

// The gate row is `channel` of the slot's matrix, the up row `width + channel`.
const size_t first_row = shared ? 0 : static_cast<size_t>(expert) * 2 * I;
const size_t gate_row = first_row + channel;
const size_t up_row = first_row + width + channel;
float gate;
float up;
if (shared) {
  gate = dot(sgu_w + gate_row * WORDS, sgu_s + gate_row * GROUPS, sgu_b + gate_row * GROUPS);
  up = dot(sgu_w + up_row * WORDS, sgu_s + up_row * GROUPS, sgu_b + up_row * GROUPS);
} else {
  gate = dot(gu_w + gate_row * WORDS, gu_s + gate_row * GROUPS, gu_b + gate_row * GROUPS);
  up = dot(gu_w + up_row * WORDS, gu_s + up_row * GROUPS, gu_b + up_row * GROUPS);
}
if (lane == 0) {
  act[out] = gate / (1.0f + expf(-gate)) * up;
}
