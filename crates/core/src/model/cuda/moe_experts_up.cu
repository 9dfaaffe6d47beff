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
// Layout: one warp per (token, slot, channel), a block per (pair, channel group) with pair =
// token * (K+1) + slot. The grid is [groups along y, pairs along z], but a block's pair is its
// linear index modulo the pairs: blocks are issued in linear order, so every pair's block for one
// channel group runs at about the same time, and the pairs routed to one expert (a 16-token
// verify names ~100 distinct experts in 144 pairs) read its rows through L2 together instead of
// from DRAM a token apart. Lane l takes chunks of LW words at word (p * 32 + l) * LW of both rows
// (gate and up), with x's matching values held in registers; both rows' loads are issued before
// either is summed. Which block computes a pair never changes its arithmetic.
constexpr int LANES = 32;
constexpr int PER_WORD = 32 / BITS;
constexpr int WORDS = H / PER_WORD;
constexpr int W = I > IS ? I : IS;
constexpr int LW = lane_words(WORDS, PER_WORD, G);
constexpr int VALS = LW * PER_WORD;
constexpr int PASSES = (WORDS + LANES * LW - 1) / (LANES * LW);
static_assert(H % G == 0, "whole groups a row");

const int lane = threadIdx.x;
const unsigned int linear = blockIdx.y + gridDim.y * blockIdx.z;
const int pair = linear % gridDim.z;
const int channel = (linear / gridDim.z) * blockDim.y + threadIdx.y;
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

// The gate row is `channel` of the slot's matrix, the up row `width + channel`.
const size_t first_row = shared ? 0 : static_cast<size_t>(expert) * 2 * I;
const size_t gate_row = first_row + channel;
const size_t up_row = first_row + width + channel;
const unsigned int* words = shared ? sgu_w : gu_w;
const auto* scales = shared ? sgu_s : gu_s;
const auto* biases = shared ? sgu_b : gu_b;
constexpr int GROUPS = H / G;

Chunk<LW> gate_c[PASSES];
Chunk<LW> up_c[PASSES];
#pragma unroll
for (int p = 0; p < PASSES; ++p) {
  const int word = (p * LANES + lane) * LW;
  if (word < WORDS) {
    gate_c[p] = load_chunk<BITS, G, LW>(words + gate_row * WORDS, scales + gate_row * GROUPS, biases + gate_row * GROUPS, word);
    up_c[p] = load_chunk<BITS, G, LW>(words + up_row * WORDS, scales + up_row * GROUPS, biases + up_row * GROUPS, word);
  }
}
const auto* x_row = x + static_cast<size_t>(n) * H;
float gate = 0.0f;
float up = 0.0f;
#pragma unroll
for (int p = 0; p < PASSES; ++p) {
  const int word = (p * LANES + lane) * LW;
  if (word < WORDS) {
    float v[VALS];
    load_floats<VALS>(x_row + word * PER_WORD, v);
    const float sum_v = sum_of<VALS>(v);
    gate += chunk_dot<BITS, LW>(gate_c[p], v, sum_v);
    up += chunk_dot<BITS, LW>(up_c[p], v, sum_v);
  }
}
gate = warp_sum(gate);
up = warp_sum(up);
if (lane == 0) {
  act[out] = gate / (1.0f + expf(-gate)) * up;
}
