// Gated DeltaNet recurrence, all T positions of a block in one launch (CUDA, through MLX's
// custom-kernel mechanism: this file is the kernel *body*; MLX generates the signature from the
// input/output names and turns the template arguments HK, HV, DK, DV, CAPTURE into constexprs).
//
// Inputs  q, k [B, T, HK, DK] (model dtype, already L2-normalised and scaled), v [B, T, HV, DV],
//         g, beta [B, T, HV], state_in [B, HV, DV, DK] float32.
// Outputs y [B, T, HV, DV] float32, state_out [B, HV, DV, DK] float32, and states: with CAPTURE
//         [B, T, HV, DV, DK] float32 (the state after every position, for a verify that keeps
//         fewer than T), otherwise a one-element placeholder that is never written (the body is
//         not a template, so both variants must name the same outputs).
//
// Layout: one warp per (row, value head, value channel). That channel's DK-long slice of the
// state is contiguous in memory and lives in registers (DK / 32 values a lane) for the whole
// block, so the state is read once and written once however long the block is; the two dot
// products per position are warp reductions. Value head h reads key head h / (HV / HK), which
// replaces the ops path's repeat of q and k. All arithmetic is float32, as in the ops path.
constexpr int LANES = 32;
constexpr int PER_LANE = DK / LANES;
static_assert(DK % LANES == 0, "DK must be a multiple of 32");

const int lane = threadIdx.x;
const int channel = blockIdx.y * blockDim.y + threadIdx.y;
const int row_head = blockIdx.z;
if (channel >= DV) {
  return;
}
const int b = row_head / HV;
const int hv = row_head % HV;
const int hk = hv / (HV / HK);
const int steps = g_shape[1];

const size_t state_base = (static_cast<size_t>(row_head) * DV + channel) * DK;
float s[PER_LANE];
#pragma unroll
for (int i = 0; i < PER_LANE; ++i) {
  s[i] = state_in[state_base + lane + LANES * i];
}

for (int t = 0; t < steps; ++t) {
  const size_t bt = static_cast<size_t>(b) * steps + t;
  const size_t qk_base = (bt * HK + hk) * DK;
  const size_t gate = bt * HV + hv;
  const float decay = static_cast<float>(g[gate]);
  const float write = static_cast<float>(beta[gate]);

  float key[PER_LANE];
  float recalled = 0.0f;
#pragma unroll
  for (int i = 0; i < PER_LANE; ++i) {
    key[i] = static_cast<float>(k[qk_base + lane + LANES * i]);
    s[i] *= decay;
    recalled += s[i] * key[i];
  }
#pragma unroll
  for (int offset = LANES / 2; offset > 0; offset >>= 1) {
    recalled += __shfl_xor_sync(0xffffffffu, recalled, offset);
  }

  const size_t out_index = (bt * HV + hv) * DV + channel;
  const float delta = (static_cast<float>(v[out_index]) - recalled) * write;
  float read = 0.0f;
#pragma unroll
  for (int i = 0; i < PER_LANE; ++i) {
    s[i] += key[i] * delta;
    read += s[i] * static_cast<float>(q[qk_base + lane + LANES * i]);
  }
#pragma unroll
  for (int offset = LANES / 2; offset > 0; offset >>= 1) {
    read += __shfl_xor_sync(0xffffffffu, read, offset);
  }
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
