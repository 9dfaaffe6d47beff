// A residual sum and the RMSNorm that follows it, for one row per thread block (CUDA, through
// MLX's custom-kernel mechanism; this file is the kernel *body*). Every decoder layer adds its
// mixer's output to the residual stream and norms the sum, then adds its MLP's output and norms
// that for the next layer: two kernel nodes each time on the ops route, one here.
//
// Inputs  x, r [N, D] (model dtype T): the residual stream and the block output added to it;
//         w [D] (T): the norm's weight.
// Outputs h [N, D] (T): x + r rounded to T, as MLX's add gives it;
//         y [N, D] (T): rms_norm(h) * w as MLX's rms_norm gives it: the mean square of h in
//         float32, then w * T(h * rsqrt(mean + eps)).
// Header  round_to.cuh.
// Constants D, THREADS (blockDim.x, a multiple of 32), EPS_BITS (eps's float32 bits).
//
// Layout: block x = row; thread t takes columns t, t + THREADS, ... (coalesced), holding its
// sums in registers between the reduction and the output.
constexpr int LANES = 32;
constexpr int PER = (D + THREADS - 1) / THREADS;
constexpr int WARPS = THREADS / LANES;
static_assert(THREADS % LANES == 0, "whole warps");
__shared__ float partial[WARPS];

const size_t base = static_cast<size_t>(blockIdx.x) * D;
const int t = threadIdx.x;
float sum[PER];
float squares = 0.0f;
#pragma unroll
for (int k = 0; k < PER; ++k) {
  const int i = k * THREADS + t;
  sum[k] = 0.0f;
  if (i < D) {
    const auto s = round_to(x, static_cast<float>(x[base + i]) + static_cast<float>(r[base + i]));
    h[base + i] = s;
    sum[k] = static_cast<float>(s);
    squares += sum[k] * sum[k];
  }
}
#pragma unroll
for (int offset = LANES / 2; offset > 0; offset >>= 1) {
  squares += __shfl_xor_sync(0xffffffffu, squares, offset);
}
if (t % LANES == 0) {
  partial[t / LANES] = squares;
}
__syncthreads();
squares = 0.0f;
#pragma unroll
for (int j = 0; j < WARPS; ++j) {
  squares += partial[j];
}
const float normalizer = rsqrtf(squares / D + __int_as_float(EPS_BITS));
#pragma unroll
for (int k = 0; k < PER; ++k) {
  const int i = k * THREADS + t;
  if (i < D) {
    // T x T is exact in float32 for bf16 and fp16, so one rounding gives T's own product.
    const float scaled = static_cast<float>(round_to(x, sum[k] * normalizer));
    y[base + i] = round_to(x, static_cast<float>(w[i]) * scaled);
  }
}
