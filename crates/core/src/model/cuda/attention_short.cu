// Attention for a short query block (a B8 verify's 2 positions, an AR step's or a draft's 1) of
// every row of a cohort over that row's own keys in the cohort's slot buffer, in one launch
// (CUDA, through MLX's custom-kernel mechanism; this file is the kernel *body*). On MLX CUDA the
// masked SDPA it replaces falls back to ops for head_dim 256: a host-made mask, a where, a
// softmax, two batched matmuls with their pointer set-ups, and views, for every attention layer.
//
// Inputs  q [B, NH, Q, D] (model dtype): the block's queries, rotated; keys, values
//         [B, NKV, CAP, D] (model dtype): the slot buffer, row b's block already written at
//         offsets[b]; offsets [B] int32: row b's position before the block. Query t of row b
//         sees keys 0 ..= offsets[b] + t.
// Outputs out [B, NH, Q, D] (model dtype); parts [B, NH, Q, S, D] and stats [B, NH, Q, S, 2]
//         (float32) where SPLIT, else [1] each and unused (out likewise where SPLIT).
// Header  affine_dot.cuh (load_floats, warp_sum).
// Constants NH, NKV, D, T (the queries a block takes: 1 or 2), WARPS (blockDim.y); SCALE_BITS
//         (the softmax scale's float32 bits); SPLIT, SEG.
//
// A block of more than T queries (a prompt read's piece on the invariant route) is taken T at a
// time, block x a tile of T queries at their own offsets; the last tile may hold fewer. A query
// meets the same code in any tile as in a step's or a verify's launch of its own.
// Layout: a block per (row, head), block z = b * NH + h, on the key/value head h / (NH / NKV);
// where SPLIT (a row of the launch holds more than SEG keys), a block per (row, head, segment of
// SEG key positions), z = (b * NH + h) * S + segment, so a long context spreads over the GPU
// (a B1 step at 128k positions had 16 blocks, each reading 8,192 keys a warp: 94% of the step).
// Warp w takes the keys of its segment at w, w + WARPS, ... up to the row's last visible one, two
// a pass; lane l holds dims [l * DPL, (l + 1) * DPL) of the queries, of each key and value row and
// of its running outputs. Each warp keeps a running max, sum and output per query (online
// softmax), in float32; the warps' parts meet in shared memory at the end, one thread a dim,
// giving the segment's unnormalised output, max and sum (SPLIT: written to parts and stats for
// attention_merge.cu to combine in segment order) or the output.
//
// A query's arithmetic depends only on key positions (segments are fixed by position, warps take
// keys by index), never on the other rows, the block's length or the segment count, which the
// exactness gate needs of a verify and a cohort. One segment merged gives the bits of no split:
// its weight is exp(0) = 1.
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
const int queries = q_shape[2];
const int first_query = static_cast<int>(blockIdx.x) * T;
const int in_tile = queries - first_query < T ? queries - first_query : T;
// Outputs come without shapes: the segment count is the grid's z over the (row, head) pairs.
const int segs = SPLIT ? static_cast<int>(gridDim.z) / (keys_shape[0] * NH) : 1;
const int bh = blockIdx.z / segs;
const int seg = blockIdx.z % segs;
const int b = bh / NH;
const int h = bh % NH;
const int kv_head = h / (NH / NKV);
const int cap = keys_shape[2];
const int offset = offsets[b] + first_query;
// A row's keys past the buffer cannot be read; a caller keeps offsets + Q within it.
const int len = min(offset + in_tile, cap);
const int lo = SPLIT ? seg * SEG : 0;
const int hi = SPLIT ? min(len, lo + SEG) : len;
const float scale = __int_as_float(SCALE_BITS);
const float NEG_INF = __int_as_float(0xff800000);

float qv[T][DPL];
float run_max[T];
float run_sum[T];
float acc[T][DPL];
#pragma unroll
for (int t = 0; t < T; ++t) {
  // A tile's missing query (the last tile's, at an odd count) computes on the first's values
  // and is never written.
  const int qt = first_query + (t < in_tile ? t : 0);
  load_floats<DPL>(q + ((static_cast<size_t>(b) * NH + h) * queries + qt) * D + lane * DPL, qv[t]);
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
for (int j = lo + warp; j < hi; j += 2 * WARPS) {
  const int j2 = j + WARPS;
  const bool second = j2 < hi;
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

// Key 0 is visible to every query, so without SPLIT some warp's max is finite, and a warp that
// saw no key adds exp(-inf) = 0. A segment may hold no key a query sees: its part is max -inf,
// sum 0, output 0, which the merge weighs by exp(-inf) = 0.
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
  if (!SPLIT || top != NEG_INF) {
#pragma unroll
    for (int w = 0; w < WARPS; ++w) {
      const float weight = expf(part_max[w][t] - top);
      sum += part_sum[w][t] * weight;
      o += part_out[w][t][d] * weight;
    }
  }
  if (t >= in_tile) {
    continue;
  }
  const size_t at = (static_cast<size_t>(b) * NH + h) * queries + first_query + t;
  if (SPLIT) {
    parts[(at * segs + seg) * D + d] = o;
    if (d == 0) {
      stats[(at * segs + seg) * 2] = top;
      stats[(at * segs + seg) * 2 + 1] = sum;
    }
  } else {
    out[at * D + d] = o / sum;
  }
}
