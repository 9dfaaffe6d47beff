// An attention layer's per-head query and key RMSNorm and RoPE, read from the stacked q/k/v
// product in place (CUDA, through MLX's custom-kernel mechanism; this file is the kernel *body*).
// On the ops route the queries and keys are slices of that product's rows, which MLX copies
// before each RMSNorm, then rotates: six kernels a layer (copy, norm and rope, for each), here one.
//
// Inputs  p [B, T, N] (model dtype): the stacked product, N >= 2 NH HD + 2 NKV HD (a padded
//         product's zero columns last); head h's query
//         is columns [2 h HD, 2 h HD + HD) (its gate follows it), key head h's is
//         [2 NH HD + h HD, ...), the values come after;
//         qw, kw [HD] (model dtype): the norms' weights; offsets [B] int32: row b's position
//         at t = 0.
// Outputs qo [B, NH, T, HD], ko [B, NKV, T, HD] (model dtype): normed as MLX's rms_norm gives it
//         (the mean square in float32, then w * T(x * rsqrt(mean + eps))), then rotated as
//         MLX's non-traditional RoPE does: for i < HALF, channel i pairs with i + HALF at angle
//         (offset + t) * BASE^(-i / HALF), each output rounded to T once; channels from 2 HALF
//         on pass through.
// Header  round_to.cuh.
// Constants N, NH, NKV, HD, HALF (the rotary dims / 2), EPS_BITS, BASE_BITS (float32 bits), WARPS.
//
// Layout: a warp per (row, position, head), queries' heads first; lane l holds channels
// l, l + 32, ... (a channel and its rotary partner HALF later sit in the same lane). Why a row's
// bits do not depend on the block: each warp reads one head of one position and sums its squares
// in one order (the lane's channels in turn, then a butterfly that gives every lane the same
// total), whatever the rows, positions or heads beside it.
constexpr int LANES = 32;
constexpr int PER = HD / LANES;
constexpr int PAIRS = HALF / LANES;
static_assert(HD % LANES == 0 && HALF % LANES == 0 && 2 * HALF <= HD, "whole warps of channels and pairs");
static_assert(N >= 2 * NH * HD + 2 * NKV * HD, "every head inside a product row");

const int lane = threadIdx.x;
const int rows = p_shape[0];
const int steps = p_shape[1];
const int heads = NH + NKV;
const long item = static_cast<long>(blockIdx.y) * WARPS + threadIdx.y;
if (item >= static_cast<long>(rows) * steps * heads) {
  return;
}
const int head = static_cast<int>(item % heads);
const int at = static_cast<int>(item / heads);
const int b = at / steps;
const int t = at % steps;
const bool query = head < NH;
const int h = query ? head : head - NH;
const size_t src = static_cast<size_t>(at) * N + (query ? static_cast<size_t>(h) * 2 * HD : 2 * NH * HD + static_cast<size_t>(h) * HD);
const auto* w = query ? qw : kw;

float v[PER];
float squares = 0.0f;
#pragma unroll
for (int k = 0; k < PER; ++k) {
  v[k] = static_cast<float>(p[src + lane + LANES * k]);
  squares += v[k] * v[k];
}
#pragma unroll
for (int offset = LANES / 2; offset > 0; offset >>= 1) {
  squares += __shfl_xor_sync(0xffffffffu, squares, offset);
}
const float normalizer = rsqrtf(squares / HD + __int_as_float(EPS_BITS));
#pragma unroll
for (int k = 0; k < PER; ++k) {
  // T x T is exact in float32 for bf16 and fp16, so one rounding gives T's own product.
  const float scaled = static_cast<float>(round_to(p, v[k] * normalizer));
  v[k] = static_cast<float>(round_to(p, static_cast<float>(w[lane + LANES * k]) * scaled));
}
const float position = static_cast<float>(offsets[b] + t);
const float base_log2 = log2f(__int_as_float(BASE_BITS));
#pragma unroll
for (int k = 0; k < PAIRS; ++k) {
  const int i = lane + LANES * k;
  const float theta = position * exp2f(-static_cast<float>(i) / static_cast<float>(HALF) * base_log2);
  const float c = cosf(theta);
  const float s = sinf(theta);
  const float x1 = v[k];
  const float x2 = v[k + PAIRS];
  v[k] = x1 * c - x2 * s;
  v[k + PAIRS] = x1 * s + x2 * c;
}
auto* out = query ? qo : ko;
const int out_heads = query ? NH : NKV;
const size_t dst = ((static_cast<size_t>(b) * out_heads + h) * steps + t) * HD;
#pragma unroll
for (int k = 0; k < PER; ++k) {
  out[dst + lane + LANES * k] = round_to(p, v[k]);
}
