// The MoE router after its product, for one token per thread block (CUDA, through MLX's
// custom-kernel mechanism; this file is the kernel *body*): softmax over the E experts in
// float32, the top K by probability (ties to the lower expert id), and with NORM the K scores
// renormalised to sum to one. It replaces the softmax, argpartition, gather, sum and divide
// nodes the ops route builds per MoE layer.
//
// Input   logits [N, W] (model dtype): the router's product; W > E when the product also carries
//         other stacked outputs after the E experts' columns (they are not read).
// Outputs indices [N, K] uint32, descending by probability; scores [N, K] float32.
//
// Layout: blockDim.x = E rounded up to a warp, one thread per expert; block y = token. Each
// thread ranks its expert against all E probabilities held in shared memory, so the selection
// needs no sort and no atomics; an expert of rank r < K writes slot r.
constexpr int LANES = 32;
constexpr int WARPS = (E + LANES - 1) / LANES;
static_assert(K <= E, "K must not exceed E");
__shared__ float probs[E];
__shared__ float partial[WARPS];
__shared__ float top[K];
__shared__ unsigned int top_id[K];

const int n = blockIdx.y;
const int e = threadIdx.x;
const int lane = e % LANES;
const int warp = e / LANES;
const int width = logits_shape[1];

float x = e < E ? static_cast<float>(logits[static_cast<size_t>(n) * width + e]) : -3.402823466e38f;  // below every logit, without <cmath>
float m = x;
#pragma unroll
for (int offset = LANES / 2; offset > 0; offset >>= 1) {
  m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, offset));
}
if (lane == 0) {
  partial[warp] = m;
}
__syncthreads();
m = partial[0];
for (int w = 1; w < WARPS; ++w) {
  m = fmaxf(m, partial[w]);
}
__syncthreads();

float p = e < E ? expf(x - m) : 0.0f;
float total = p;
#pragma unroll
for (int offset = LANES / 2; offset > 0; offset >>= 1) {
  total += __shfl_xor_sync(0xffffffffu, total, offset);
}
if (lane == 0) {
  partial[warp] = total;
}
__syncthreads();
total = 0.0f;
for (int w = 0; w < WARPS; ++w) {
  total += partial[w];
}
p /= total;
if (e < E) {
  probs[e] = p;
}
__syncthreads();

if (e < E) {
  int rank = 0;
  for (int j = 0; j < E; ++j) {
    const float other = probs[j];
    rank += (other > p) || (other == p && j < e);
  }
  if (rank < K) {
    top[rank] = p;
    top_id[rank] = static_cast<unsigned int>(e);
  }
}
__syncthreads();

if (e < K) {
  float kept = 1.0f;
  if constexpr (NORM) {
    kept = 0.0f;
    for (int j = 0; j < K; ++j) {
      kept += top[j];
    }
  }
  const size_t out = static_cast<size_t>(n) * K + e;
  indices[out] = top_id[e];
  scores[out] = top[e] / kept;
}
