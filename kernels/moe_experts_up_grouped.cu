// moe_experts_up.cu's products for a block of a few tokens (a verify, a cohort's AR step), with
// each expert's rows read once for all the tokens that picked it. Per (token, slot) pair, as
// moe_experts_up.cu does it, a B8 verify's 16 tokens x 8 slots read ~128 experts' gate/up rows
// and the shared expert's 16 times, where only ~100 distinct experts were picked: a third more
// bytes than the weights the block needs.
//
// Inputs, output and constants as moe_experts_up.cu's (act [N, K+1, W] float32).
//
// Layout: one warp per (group, channel), channel = block y * blockDim.y + thread y. Block z = 0
// is the shared expert's group: every token, slot K. Block z = 1 + p serves pick p = n * K + j
// (token n's slot j) when p is its expert's first pick in the block, and then every later token
// that picked the same expert; a pick whose expert was picked before leaves at once. The warp
// loads its channel's gate and up rows once and runs each of the group's tokens against them.
// N * K must be small (the caller keeps N <= 32): every warp scans the picks before its own.
constexpr int LANES = 32;
constexpr int PER_WORD = 32 / BITS;
constexpr int WORDS = H / PER_WORD;
constexpr int W = I > IS ? I : IS;
constexpr int LW = lane_words(WORDS, PER_WORD, G);
constexpr int VALS = LW * PER_WORD;
constexpr int PASSES = (WORDS + LANES * LW - 1) / (LANES * LW);
constexpr int GROUPS = H / G;
static_assert(H % G == 0, "whole groups a row");
static_assert(K <= LANES, "a token's picks fit one warp's lanes");

const int lane = threadIdx.x;
const int channel = blockIdx.y * blockDim.y + threadIdx.y;
const int tokens = x_shape[0];
if (channel >= W) {
  return;
}
const bool shared = blockIdx.z == 0;
const int pick = static_cast<int>(blockIdx.z) - 1;
const unsigned int expert = shared ? 0u : ids[pick];
if (!shared) {
  // Leave unless this is the expert's first pick.
  bool seen = false;
  for (int q = lane; q < pick; q += LANES) {
    seen = seen || ids[q] == expert;
  }
  if (__any_sync(0xffffffffu, seen)) {
    return;
  }
}
const int width = shared ? IS : I;
// A router never names an expert past E; such a group's pairs are written as zeros, as are the
// channels past its width.
const bool zero = channel >= width || (!shared && expert >= static_cast<unsigned int>(gu_w_shape[0]));

const size_t first_row = shared ? 0 : static_cast<size_t>(expert) * 2 * I;
const size_t gate_row = first_row + (zero ? 0 : channel);
const size_t up_row = first_row + (zero ? 0 : width + channel);
const unsigned int* words = shared ? sgu_w : gu_w;
const auto* scales = shared ? sgu_s : gu_s;
const auto* biases = shared ? sgu_b : gu_b;

Chunk<LW> gate_c[PASSES];
Chunk<LW> up_c[PASSES];
if (!zero) {
#pragma unroll
  for (int p = 0; p < PASSES; ++p) {
    const int word = (p * LANES + lane) * LW;
    if (word < WORDS) {
      gate_c[p] = load_chunk<BITS, G, LW>(words + gate_row * WORDS, scales + gate_row * GROUPS, biases + gate_row * GROUPS, word);
      up_c[p] = load_chunk<BITS, G, LW>(words + up_row * WORDS, scales + up_row * GROUPS, biases + up_row * GROUPS, word);
    }
  }
}

for (int n = shared ? 0 : pick / K; n < tokens; ++n) {
  // The slots where token n picked this expert (one, from a router; every one is written all
  // the same, so that no pair of act is left unwritten).
  unsigned int slots = 1u << K;
  if (!shared) {
    const bool here = lane < K && ids[static_cast<size_t>(n) * K + lane] == expert;
    slots = __ballot_sync(0xffffffffu, here);
    if (slots == 0u) {
      continue;
    }
  }
  float value = 0.0f;
  if (!zero) {
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
    value = gate / (1.0f + expf(-gate)) * up;
  }
  if (lane == 0) {
    for (; slots != 0u; slots &= slots - 1u) {
      const int slot = __ffs(slots) - 1;
      act[(static_cast<size_t>(n) * (K + 1) + slot) * W + channel] = value;
    }
  }
}
