// The Gated DeltaNet mixer from its stacked input projection to the recurrence's output, all T
// positions of a block in one launch (CUDA, through MLX's custom-kernel mechanism; this file is
// the kernel *body*, like gated_delta.cu, whose recurrence it extends). Before the recurrence it
// does what the ops route builds as a dozen nodes per layer: the causal depthwise convolution
// over [carried tail | new rows] with SiLU, the L2 normalisation of q and k (q also scaled by
// 1/sqrt(DK)), the decay g = exp(-exp(A_log) * softplus(a + dt_bias)) and the write strength
// beta = sigmoid(b). With NORM it also does what follows the recurrence up to the output
// projection: the gated RMSNorm, rounded where MLX's ops round it. All other arithmetic is
// float32.
//
// Inputs  proj [B, T, P] (model dtype T): the stacked product [qkv (C) | z (HV*DV) | b (HV) |
//         a (HV) | padding], with C = 2*HK*DK + HV*DV (P may exceed the parts' sum: a product
//         padded at load to MLX's tile width is read in place); tail [B, KS-1, C] (T), the
//         carried convolution rows; conv_w [C, KS, 1]; a_log, dt_bias [HV]; state_in
//         [B, HV, DV, DK] float32; norm_w [DV] (T), the gated norm's weight (read with NORM);
//         place (read with PLACED) [B, 2] int32. With PLACED the carried rows and states are
//         read where a verify left them: tail is a verify's conv_in [B, L, C] and row b's
//         carried rows start at place[b, 1]; state_in is its states [B, S, HV, DV, DK] and row
//         b's is at position place[b, 0]. Slicing them out first would make MLX copy the
//         strided slices to contiguous arrays before the launch (16.8 MB a layer at a B8
//         verify at the real geometry).
// Outputs y [B, T, HV, DV] float32, the recurrence's output (without NORM; with it a one-element
//         placeholder); state_out [B, HV, DV, DK] float32; states as in gated_delta.cu (with
//         CAPTURE the state after every position, else a placeholder); conv_in [B, KS-1+T, C]
//         (T), the convolution's input, whose last KS-1 rows (or, with capture, the KS-1 rows
//         ending at a position) are the next carried tail; out [B, T, HV*DV] (T): with NORM
//         T(silu(z) * rms_norm(T(y)) * norm_w) as MLX's ops give it, else a placeholder.
// Header  round_to.cuh.
// Constants HK, HV, DK, DV, KS, CAPTURE, PLACED; CPB value channels per thread block (DV with NORM,
//         which needs a whole head in one block), WARPS (blockDim.y); NORM, EPS_BITS (the norm's
//         epsilon as float32 bits).
//
// Layout: block z = (row, value head), block y = a run of CPB channels of that head; each warp
// takes channels warp, warp + WARPS, ... of the run, holding each one's DK-long state slice in
// registers (DK / 32 values a lane) for the whole block. At each position the block's threads
// share out the convolutions it needs (its key head's q and k rows, 2 x DK channels, and its
// run's CPB value channels) into shared memory, so each is computed once a block rather than
// once a warp (or, for a value, once a lane); every value is the same float either way. Each
// block recomputes them rather than reading them from a node of their own: a few multiply-adds
// a thread cost less than a kernel launch does the host. With NORM, each position's outputs meet
// in shared memory for the head's norm. conv_in is copied by a grid-stride loop over all threads.
constexpr int LANES = 32;
constexpr int PER_LANE = DK / LANES;
constexpr int C = 2 * HK * DK + HV * DV;
constexpr int TAIL = KS - 1;
constexpr int PER_WARP = (CPB + WARPS - 1) / WARPS;
static_assert(DK % LANES == 0, "DK must be a multiple of 32");
static_assert(!NORM || CPB == DV, "the norm needs the whole head in one block");

const int lane = threadIdx.x;
const int warp = threadIdx.y;
const int row_head = blockIdx.z;
const int rows = proj_shape[0];
const int steps = proj_shape[1];
const int width = proj_shape[2];
// Where row r's carried rows start in `tail`, and how many rows `tail` holds a batch row.
// Without PLACED `place` is a stand-in of another type and never read.
const int tail_rows = PLACED ? tail_shape[1] : TAIL;
auto tail_at = [&](int r) -> int {
  if constexpr (PLACED) {
    return static_cast<int>(place[2 * r + 1]);
  } else {
    return 0;
  }
};

// The convolution's input, [tail | qkv columns of proj], for the next block's tail.
{
  const size_t threads = static_cast<size_t>(gridDim.z) * gridDim.y * WARPS * LANES;
  const size_t first = ((static_cast<size_t>(blockIdx.z) * gridDim.y + blockIdx.y) * WARPS + warp) * LANES + lane;
  const size_t total = static_cast<size_t>(rows) * (TAIL + steps) * C;
  for (size_t i = first; i < total; i += threads) {
    const int ch = static_cast<int>(i % C);
    const size_t rs = i / C;
    const int s = static_cast<int>(rs % (TAIL + steps));
    const int r = static_cast<int>(rs / (TAIL + steps));
    conv_in[i] = s < TAIL ? tail[(static_cast<size_t>(r) * tail_rows + tail_at(r) + s) * C + ch]
                          : proj[(static_cast<size_t>(r) * steps + (s - TAIL)) * width + ch];
  }
}
const int b = row_head / HV;
const int hv = row_head % HV;
const int hk = hv / (HV / HK);

// Row s of the convolution's input at column ch, as float.
auto input = [&](int s, int ch) -> float {
  return s < TAIL ? static_cast<float>(tail[(static_cast<size_t>(b) * tail_rows + tail_at(b) + s) * C + ch])
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
const int b_col = C + HV * DV + hv;
const int a_col = b_col + HV;

// This warp's channels: the j-th is first + WARPS * j, kept while below the run's end and DV.
const int first_channel = blockIdx.y * CPB + warp;
auto channel_of = [&](int j) -> int { return first_channel + WARPS * j; };
auto owns = [&](int j) -> bool {
  const int ch = channel_of(j);
  return WARPS * j + warp < CPB && ch < DV;
};
// The row's state: [b, hv] of state_in, or with PLACED [b, place[b, 0], hv].
size_t state_head = static_cast<size_t>(row_head);
if constexpr (PLACED) {
  state_head = (static_cast<size_t>(b) * state_in_shape[1] + static_cast<int>(place[2 * b])) * HV + hv;
}
float s[PER_WARP][PER_LANE];
#pragma unroll
for (int j = 0; j < PER_WARP; ++j) {
  if (owns(j)) {
    const size_t base = (state_head * DV + channel_of(j)) * DK;
#pragma unroll
    for (int i = 0; i < PER_LANE; ++i) {
      s[j][i] = state_in[base + lane + LANES * i];
    }
  }
}

// With NORM: one position's outputs of the whole head, and the norm's scale for them.
__shared__ float head_out[NORM ? DV : 1];
__shared__ float head_scale;
// One position's convolutions: q [DK], k [DK], then the run's CPB value channels.
__shared__ float conv_out[2 * DK + CPB];
const int thread = warp * LANES + lane;

for (int t = 0; t < steps; ++t) {
  // The last position's readers are done with conv_out before it is written again.
  __syncthreads();
  for (int i = thread; i < 2 * DK + CPB; i += WARPS * LANES) {
    if (i < 2 * DK) {
      conv_out[i] = conv(t, (i < DK ? hk * DK + i : HK * DK + hk * DK + i - DK));
    } else if (blockIdx.y * CPB + (i - 2 * DK) < DV) {
      conv_out[i] = conv(t, 2 * HK * DK + hv * DV + blockIdx.y * CPB + (i - 2 * DK));
    }
  }
  __syncthreads();
  float key[PER_LANE];
  float query[PER_LANE];
  float kk = 0.0f;
  float qq = 0.0f;
#pragma unroll
  for (int i = 0; i < PER_LANE; ++i) {
    const int d = lane + LANES * i;
    query[i] = conv_out[d];
    key[i] = conv_out[DK + d];
    qq += query[i] * query[i];
    kk += key[i] * key[i];
  }
  // L2 normalisation as the ops route's rms_norm with eps 1e-6 / DK: x / sqrt(sum x^2 + 1e-6).
  const float k_scale = rsqrtf(warp_sum(kk) + 1e-6f);
  const float q_scale = rsqrtf(warp_sum(qq) + 1e-6f) * rsqrtf(static_cast<float>(DK));
#pragma unroll
  for (int i = 0; i < PER_LANE; ++i) {
    key[i] *= k_scale;
    query[i] *= q_scale;
  }

  const size_t proj_row = (static_cast<size_t>(b) * steps + t) * width;
  const float a = static_cast<float>(proj[proj_row + a_col]) + bias;
  const float softplus = a > 20.0f ? a : log1pf(expf(a));
  const float decay = expf(-decay_rate * softplus);
  const float write = 1.0f / (1.0f + expf(-static_cast<float>(proj[proj_row + b_col])));
  const size_t head_index = (static_cast<size_t>(b) * steps + t) * HV + hv;

#pragma unroll
  for (int j = 0; j < PER_WARP; ++j) {
    if (!owns(j)) {
      continue;
    }
    const int channel = channel_of(j);
    const float value = conv_out[2 * DK + channel - blockIdx.y * CPB];
    float recalled = 0.0f;
#pragma unroll
    for (int i = 0; i < PER_LANE; ++i) {
      s[j][i] *= decay;
      recalled += s[j][i] * key[i];
    }
    recalled = warp_sum(recalled);
    const float delta = (value - recalled) * write;
    float read = 0.0f;
#pragma unroll
    for (int i = 0; i < PER_LANE; ++i) {
      s[j][i] += key[i] * delta;
      read += s[j][i] * query[i];
    }
    read = warp_sum(read);
    const size_t out_index = head_index * DV + channel;
    if (lane == 0) {
      if constexpr (NORM) {
        head_out[channel] = read;
      } else {
        y[out_index] = read;
      }
    }
    if constexpr (CAPTURE) {
#pragma unroll
      for (int i = 0; i < PER_LANE; ++i) {
        states[out_index * DK + lane + LANES * i] = s[j][i];
      }
    }
  }

  if constexpr (NORM) {
    // The ops route rounds y to T, norms it as MLX's rms_norm does (the mean square in float32,
    // then w * T(y * rsqrt(mean + eps))), and gates it in float32 with silu(z), rounding last.
    __syncthreads();
    if (warp == 0) {
      float squares = 0.0f;
      for (int c = lane; c < DV; c += LANES) {
        const float r = static_cast<float>(round_to(proj, head_out[c]));
        squares += r * r;
      }
      squares = warp_sum(squares);
      if (lane == 0) {
        head_scale = rsqrtf(squares / DV + __int_as_float(EPS_BITS));
      }
    }
    __syncthreads();
    for (int c = warp * LANES + lane; c < DV; c += WARPS * LANES) {
      const float r = static_cast<float>(round_to(proj, head_out[c]));
      const float scaled = static_cast<float>(round_to(proj, r * head_scale));
      const float normed = static_cast<float>(round_to(proj, static_cast<float>(norm_w[c]) * scaled));
      const float z = static_cast<float>(proj[proj_row + C + hv * DV + c]);
      const float gate = z / (1.0f + expf(-z));
      out[head_index * DV + c] = round_to(proj, gate * normed);
    }
    // The next position writes head_out again only after every thread has read this one's.
    __syncthreads();
  }
}

#pragma unroll
for (int j = 0; j < PER_WARP; ++j) {
  if (owns(j)) {
    const size_t base = (static_cast<size_t>(row_head) * DV + channel_of(j)) * DK;
#pragma unroll
    for (int i = 0; i < PER_LANE; ++i) {
      state_out[base + lane + LANES * i] = s[j][i];
    }
  }
}
