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
// Constants H, I, IS, K, BITS, G; CPW, the channels a warp takes.
//
// Layout: one warp per (token, slot, CPW consecutive channels): block z = token * (K+1) + slot,
// the warp's first channel = (block y * blockDim.y + thread y) * CPW. Lane l takes chunks of LW
// words at word (p * 32 + l) * LW of each row (gate and up of every channel), and every row's
// loads are issued before any is summed; x's matching values are loaded once a pass for all of
// them. CPW > 1 (the caller's choice for blocks of several tokens) divides the reading of x by
// CPW.
constexpr int LANES = 32;
constexpr int PER_WORD = 32 / BITS;
constexpr int WORDS = H / PER_WORD;
constexpr int W = I > IS ? I : IS;
constexpr int LW = lane_words_filling(WORDS, PER_WORD, G);
constexpr int VALS = LW * PER_WORD;
constexpr int PASSES = (WORDS + LANES * LW - 1) / (LANES * LW);
constexpr int GROUPS = H / G;
static_assert(H % G == 0, "whole groups a row");

const int lane = threadIdx.x;
const int first = (blockIdx.y * blockDim.y + threadIdx.y) * CPW;
const int pair = blockIdx.z;
const int n = pair / (K + 1);
const int slot = pair % (K + 1);
if (first >= W) {
  return;
}
const bool shared = slot == K;
const int width = shared ? IS : I;
const unsigned int expert = shared ? 0u : ids[static_cast<size_t>(n) * K + slot];
// A router never names an expert past E; the guard keeps a bad id from reading past the weights.
const bool valid = shared || expert < static_cast<unsigned int>(gu_w_shape[0]);
const size_t out = static_cast<size_t>(pair) * W + first;
if (!valid || first >= width) {
  if (lane == 0) {
#pragma unroll
    for (int c = 0; c < CPW; ++c) {
      if (first + c < W) {
        act[out + c] = 0.0f;
      }
    }
  }
  return;
}

// Channel c's gate row is `first + c` of the slot's matrix, its up row `width + first + c`;
// channels past the slot's width read its last channel's rows and are written as zero.
const size_t first_row = shared ? 0 : static_cast<size_t>(expert) * 2 * I;
auto channel = [&](int c) -> int { return first + c < width ? first + c : width - 1; };
const unsigned int* words = shared ? sgu_w : gu_w;
const auto* scales = shared ? sgu_s : gu_s;
const auto* biases = shared ? sgu_b : gu_b;
const auto* x_row = x + static_cast<size_t>(n) * H;

float gate[CPW];
float up[CPW];
#pragma unroll
for (int c = 0; c < CPW; ++c) {
  gate[c] = 0.0f;
  up[c] = 0.0f;
}
Chunk<LW> gate_c[PASSES][CPW];
Chunk<LW> up_c[PASSES][CPW];
#pragma unroll
for (int p = 0; p < PASSES; ++p) {
  const int word = (p * LANES + lane) * LW;
  if (word < WORDS) {
#pragma unroll
    for (int c = 0; c < CPW; ++c) {
      const size_t gate_row = first_row + channel(c);
      const size_t up_row = gate_row + width;
      gate_c[p][c] = load_chunk<BITS, G, LW>(words + gate_row * WORDS, scales + gate_row * GROUPS, biases + gate_row * GROUPS, word);
      up_c[p][c] = load_chunk<BITS, G, LW>(words + up_row * WORDS, scales + up_row * GROUPS, biases + up_row * GROUPS, word);
    }
  }
}
#pragma unroll
for (int p = 0; p < PASSES; ++p) {
  const int word = (p * LANES + lane) * LW;
  if (word < WORDS) {
    float v[VALS];
    load_floats<VALS>(x_row + word * PER_WORD, v);
    const float sum_v = sum_of<VALS>(v);
#pragma unroll
    for (int c = 0; c < CPW; ++c) {
      gate[c] += chunk_dot<BITS, LW>(gate_c[p][c], v, sum_v);
      up[c] += chunk_dot<BITS, LW>(up_c[p][c], v, sum_v);
    }
  }
}
#pragma unroll
for (int c = 0; c < CPW; ++c) {
  const float g = warp_sum(gate[c]);
  const float u = warp_sum(up[c]);
  if (lane == 0 && first + c < W) {
    act[out + c] = first + c < width ? g / (1.0f + expf(-g)) * u : 0.0f;
  }
}
