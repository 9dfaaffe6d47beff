// The segments of a split short-block attention (attention_short.cu with SPLIT) combined into
// each query's output, in segment order (CUDA, through MLX's custom-kernel mechanism; this file
// is the kernel *body*).
//
// Inputs  parts [B, NH, T, S, D] float32: each segment's unnormalised output; stats
//         [B, NH, T, S, 2] float32: its max and sum (max -inf, sum 0 where the query saw none of
//         its keys).
// Output  out [B, NH, T, D] (model dtype).
//
// Layout: a block per (row, head, query), block z, a thread per dim. The arithmetic repeats the
// warps' meeting in attention_short.cu one level up (weights exp(max - top), sums in order), so
// a query whose keys all lie in its first segment gets the bits of an unsplit launch.
const int d = threadIdx.x;
const int q = blockIdx.z;
const int segs = parts_shape[3];
const float NEG_INF = __int_as_float(0xff800000);
const float* st = stats + static_cast<size_t>(q) * segs * 2;
const float* pt = parts + static_cast<size_t>(q) * segs * parts_shape[4] + d;
float top = NEG_INF;
for (int s = 0; s < segs; ++s) {
  top = fmaxf(top, st[2 * s]);
}
// Segment 0 holds key 0, which every query sees: top is finite. A segment the query saw nothing
// of is skipped rather than added as zeros (0 + -0 would turn a -0 output into +0), and the
// first term starts the sums, so one segment gives exactly its own output and sum.
float sum = 0.0f;
float o = 0.0f;
bool first = true;
for (int s = 0; s < segs; ++s) {
  if (st[2 * s] == NEG_INF) {
    continue;
  }
  const float weight = expf(st[2 * s] - top);
  const float part_sum = st[2 * s + 1] * weight;
  const float part_out = pt[static_cast<size_t>(s) * parts_shape[4]] * weight;
  sum = first ? part_sum : sum + part_sum;
  o = first ? part_out : o + part_out;
  first = false;
}
out[static_cast<size_t>(q) * parts_shape[4] + d] = o / sum;
