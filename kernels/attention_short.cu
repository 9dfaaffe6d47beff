// Attention for a short query block (a B8 verify's 2 positions, an AR step's or a draft's 1) of
// every row of a cohort over that row's own keys in the cohort's slot buffer, in one launch
// (CUDA, through MLX's custom-kernel mechanism; this file is the kernel *body*). On MLX CUDA the
// masked SDPA it replaces falls back to ops for head_dim 256: a host-made mask, a where, a
// softmax, two batched matmuls with their pointer set-ups, and views, for every attention layer.
//
// Inputs  q [B, NH, T, D] (model dtype): the block's queries, rotated; keys, values
//         [B, NKV, CAP, D] (model dtype): the slot buffer, row b's block already written at
//         offsets[b]; offsets [B] int32: row b's position before the block. Query t of row b
//         sees keys 0 ..= offsets[b] + t.
// Output  out [B, NH, T, D] (model dtype).
// Header  affine_dot.cuh (load_floats, warp_sum).
// Constants NH, NKV, D, T, WARPS (blockDim.y); SCALE_BITS (the softmax scale's float32 bits).
//
// Layout: a block per (row, head), block z = b * NH + h, on the key/value head h / (NH / NKV).
// Warp w takes keys w, w + WARPS, ... up to the row's last visible one, two a pass; lane l holds dims
// [l * DPL, (l + 1) * DPL) of the queries, of each key and value row and of its running outputs.
// Each warp keeps a running max, sum and output per query (online softmax), in float32; the
// warps' parts meet in shared memory at the end, one thread a dim.
constexpr int LANES = 32;
constexpr int DPL = D / LANES;
static_assert(D % LANES == 0 && DPL <= 16, "a head's dims spread over one warp's lanes");
static_assert(NH % NKV == 0, "whole query-head groups");
static_assert(WARPS * T * D <= 8192, "the warps' parts fit 32 KB of shared memory");
__shared__ float part_max[WARPS][T];
__shared__ float part_sum[WARPS][T];
__shared__ float part_out[WARPS][T][D];

const int lane = threadIdx.x;
const int warp = threadIdx.y;
const int b = blockIdx.z / NH;
const int h = blockIdx.z % NH;
const int kv_head = h / (NH / NKV);
const int cap = keys_shape[2];
const int offset = offsets[b];
// A row's keys past the buffer cannot be read; a caller keeps offsets + T within it.
const int len = min(offset + T, cap);
const float scale = __int_as_float(SCALE_BITS);
const float NEG_INF = __int_as_float(0xff800000);

float qv[T][DPL];
float run_max[T];
float run_sum[T];
float acc[T][DPL];
#pragma unroll
for (int t = 0; t < T; ++t) {
  load_floats<DPL>(q + ((static_cast<size_t>(b) * NH + h) * T + t) * D + lane * DPL, qv[t]);
#pragma unroll
  for (int i = 0; i < DPL; ++i) {
    qv[t][i] *= scale;
    acc[t][i] = 0.0f;
  }
  run_max[t] = NEG_INF;
  run_sum[t] = 0.0f;
}

const size_t head_base = (static_cast<size_t>(b) * NKV + kv_head) * cap * D + lane * DPL;
// Key j's share of query t's running max, sum and output, if the query sees it.
auto take = [&](int j, int t, float s, const float* vj) {
  if (j <= offset + t) {
    const float next_max = fmaxf(run_max[t], s);
    const float keep = expf(run_max[t] - next_max);
    const float p = expf(s - next_max);
    run_sum[t] = run_sum[t] * keep + p;
#pragma unroll
    for (int i = 0; i < DPL; ++i) {
      acc[t][i] = acc[t][i] * keep + p * vj[i];
    }
    run_max[t] = next_max;
  }
};
// Two keys a pass (j and j + WARPS), both rows' loads issued before either is summed and their
// two warp sums interleaved: one key a pass left each warp waiting on one load at a time, with a
// block's few warps all an SM holds at a B8 verify's 128 blocks.
for (int j = warp; j < len; j += 2 * WARPS) {
  const int j2 = j + WARPS;
  const bool second = j2 < len;
  float k1[DPL];
  float v1[DPL];
  float k2[DPL];
  float v2[DPL];
  load_floats<DPL>(keys + head_base + static_cast<size_t>(j) * D, k1);
  load_floats<DPL>(values + head_base + static_cast<size_t>(j) * D, v1);
  if (second) {
    load_floats<DPL>(keys + head_base + static_cast<size_t>(j2) * D, k2);
    load_floats<DPL>(values + head_base + static_cast<size_t>(j2) * D, v2);
  }
#pragma unroll
  for (int t = 0; t < T; ++t) {
    float s1 = 0.0f;
    float s2 = 0.0f;
#pragma unroll
    for (int i = 0; i < DPL; ++i) {
      s1 += qv[t][i] * k1[i];
      s2 += second ? qv[t][i] * k2[i] : 0.0f;
    }
    s1 = warp_sum(s1);
    s2 = warp_sum(s2);
    take(j, t, s1, v1);
    if (second) {
      take(j2, t, s2, v2);
    }
  }
}

#pragma unroll
for (int t = 0; t < T; ++t) {
#pragma unroll
  for (int i = 0; i < DPL; ++i) {
    part_out[warp][t][lane * DPL + i] = acc[t][i];
  }
  if (lane == 0) {
    part_max[warp][t] = run_max[t];
    part_sum[warp][t] = run_sum[t];
  }
}
__syncthreads();

// Key 0 is visible to every query, so some warp's max is finite; a warp that saw no key adds
// exp(-inf) = 0.
for (int e = warp * LANES + lane; e < T * D; e += WARPS * LANES) {
  const int t = e / D;
  const int d = e % D;
  float top = NEG_INF;
#pragma unroll
  for (int w = 0; w < WARPS; ++w) {
    top = fmaxf(top, part_max[w][t]);
  }
  float sum = 0.0f;
  float o = 0.0f;
#pragma unroll
  for (int w = 0; w < WARPS; ++w) {
    const float weight = expf(part_max[w][t] - top);
    sum += part_sum[w][t] * weight;
    o += part_out[w][t][d] * weight;
  }
  out[((static_cast<size_t>(b) * NH + h) * T + t) * D + d] = o / sum;
}
