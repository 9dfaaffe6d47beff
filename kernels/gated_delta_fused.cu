// The Gated DeltaNet mixer from its stacked input projection to the recurrence's output, all T
// positions of a block in one launch (CUDA, through MLX's custom-kernel mechanism; this file is
// the kernel *body*, like gated_delta.cu, whose recurrence it extends). Before the recurrence it
// does what the ops route builds as a dozen nodes per layer: the causal depthwise convolution
// over [carried tail | new rows] with SiLU, the L2 normalisation of q and k (q also scaled by
// 1/sqrt(DK)), the decay g = exp(-exp(A_log) * softplus(a + dt_bias)) and the write strength
// beta = sigmoid(b). All arithmetic is float32.
//
// Inputs  proj [B, T, P] (model dtype): the stacked product [qkv (C) | z (HV*DV) | b (HV) |
//         a (HV)] with C = 2*HK*DK + HV*DV; tail [B, KS-1, C] (model dtype), the carried
//         convolution rows; conv_w [C, KS, 1]; a_log, dt_bias [HV]; state_in [B, HV, DV, DK]
//         float32.
// Outputs y [B, T, HV, DV] float32; state_out [B, HV, DV, DK] float32; states as in
//         gated_delta.cu (with CAPTURE the state after every position, else a placeholder);
//         conv_in [B, KS-1+T, C] (model dtype), the convolution's input, whose last KS-1 rows
//         (or, with capture, the KS-1 rows ending at a position) are the next carried tail.
//
// Layout: one warp per (row, value head, value channel), as in gated_delta.cu. Each warp
// recomputes its key head's q and k rows (2 x DK channels x KS taps, from L1/L2) rather than
// reading them from a node of their own: a few hundred multiply-adds a lane cost less than a
// kernel launch does the host. conv_in is copied by a grid-stride loop over all threads.
constexpr int LANES = 32;
constexpr int PER_LANE = DK / LANES;
constexpr int C = 2 * HK * DK + HV * DV;
constexpr int TAIL = KS - 1;
static_assert(DK % LANES == 0, "DK must be a multiple of 32");

const int lane = threadIdx.x;
const int channel = blockIdx.y * blockDim.y + threadIdx.y;
const int row_head = blockIdx.z;
const int rows = proj_shape[0];
const int steps = proj_shape[1];
const int width = proj_shape[2];

// The convolution's input, [tail | qkv columns of proj], for the next block's tail.
{
  const size_t threads = static_cast<size_t>(gridDim.z) * gridDim.y * blockDim.y * LANES;
  const size_t first = ((static_cast<size_t>(blockIdx.z) * gridDim.y + blockIdx.y) * blockDim.y + threadIdx.y) * LANES + lane;
  const size_t total = static_cast<size_t>(rows) * (TAIL + steps) * C;
  for (size_t i = first; i < total; i += threads) {
    const int ch = static_cast<int>(i % C);
    const size_t rs = i / C;
    const int s = static_cast<int>(rs % (TAIL + steps));
    const int r = static_cast<int>(rs / (TAIL + steps));
    conv_in[i] = s < TAIL ? tail[(static_cast<size_t>(r) * TAIL + s) * C + ch]
                          : proj[(static_cast<size_t>(r) * steps + (s - TAIL)) * width + ch];
  }
}
if (channel >= DV) {
  return;
}
const int b = row_head / HV;
const int hv = row_head % HV;
const int hk = hv / (HV / HK);

// Row s of the convolution's input at column ch, as float.
auto input = [&](int s, int ch) -> float {
  return s < TAIL ? static_cast<float>(tail[(static_cast<size_t>(b) * TAIL + s) * C + ch])
                  : static_cast<float>(proj[(static_cast<size_t>(b) * steps + (s - TAIL)) * width + ch]);
};
// SiLU of the convolution at output position t (input rows t .. t + KS - 1) for column ch.
auto conv = [&](int t, int ch) -> float {
  float acc = 0.0f;
#pragma unroll
  for (int j = 0; j < KS; ++j) {
    acc += static_cast<float>(conv_w[ch * KS + j]) * input(t + j, ch);
  }
  return acc / (1.0f + expf(-acc));
};
auto warp_sum = [](float x) -> float {
#pragma unroll
  for (int offset = LANES / 2; offset > 0; offset >>= 1) {
    x += __shfl_xor_sync(0xffffffffu, x, offset);
  }
  return x;
};

const float decay_rate = expf(static_cast<float>(a_log[hv]));
const float bias = static_cast<float>(dt_bias[hv]);
const int v_col = 2 * HK * DK + hv * DV + channel;
const int b_col = C + HV * DV + hv;
const int a_col = b_col + HV;

const size_t state_base = (static_cast<size_t>(row_head) * DV + channel) * DK;
float s[PER_LANE];
#pragma unroll
for (int i = 0; i < PER_LANE; ++i) {
  s[i] = state_in[state_base + lane + LANES * i];
}

for (int t = 0; t < steps; ++t) {
  float key[PER_LANE];
  float query[PER_LANE];
  float kk = 0.0f;
  float qq = 0.0f;
#pragma unroll
  for (int i = 0; i < PER_LANE; ++i) {
    const int d = lane + LANES * i;
    query[i] = conv(t, hk * DK + d);
    key[i] = conv(t, HK * DK + hk * DK + d);
    qq += query[i] * query[i];
    kk += key[i] * key[i];
  }
  // L2 normalisation as the ops route's rms_norm with eps 1e-6 / DK: x / sqrt(sum x^2 + 1e-6).
  const float k_scale = rsqrtf(warp_sum(kk) + 1e-6f);
  const float q_scale = rsqrtf(warp_sum(qq) + 1e-6f) * rsqrtf(static_cast<float>(DK));

  const size_t proj_row = (static_cast<size_t>(b) * steps + t) * width;
  const float a = static_cast<float>(proj[proj_row + a_col]) + bias;
  const float softplus = a > 20.0f ? a : log1pf(expf(a));
  const float decay = expf(-decay_rate * softplus);
  const float write = 1.0f / (1.0f + expf(-static_cast<float>(proj[proj_row + b_col])));
  const float value = conv(t, v_col);

  float recalled = 0.0f;
#pragma unroll
  for (int i = 0; i < PER_LANE; ++i) {
    key[i] *= k_scale;
    s[i] *= decay;
    recalled += s[i] * key[i];
  }
  recalled = warp_sum(recalled);

  const size_t out_index = ((static_cast<size_t>(b) * steps + t) * HV + hv) * DV + channel;
  const float delta = (value - recalled) * write;
  float read = 0.0f;
#pragma unroll
  for (int i = 0; i < PER_LANE; ++i) {
    s[i] += key[i] * delta;
    read += s[i] * query[i] * q_scale;
  }
  read = warp_sum(read);
  if (lane == 0) {
    y[out_index] = read;
  }
  if constexpr (CAPTURE) {
    const size_t captured = out_index * DK;
#pragma unroll
    for (int i = 0; i < PER_LANE; ++i) {
      states[captured + lane + LANES * i] = s[i];
    }
  }
}

#pragma unroll
for (int i = 0; i < PER_LANE; ++i) {
  state_out[state_base + lane + LANES * i] = s[i];
}
