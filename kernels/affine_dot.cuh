// Shared by the MoE expert kernels (passed to MLX as the kernels' header, ahead of their
// bodies): one lane's share of a dot product between a row of an affine-quantized matrix and a
// float vector. The row's `width` inputs are packed PER_WORD codes a uint32 word, low bits first,
// each group of G inputs with one scale and one bias (value = scale * q + bias). Lanes take words
// lane, lane + 32, ..., so a warp's loads of one row are contiguous; the caller sums the lanes.
template <int BITS, int G, typename Scale, typename Vector>
__device__ inline float affine_partial(const unsigned int* words, const Scale* scales, const Scale* biases,
                                       const Vector* v, int width, int lane) {
  constexpr int PER_WORD = 32 / BITS;
  constexpr unsigned int MASK = (1u << BITS) - 1u;
  static_assert(32 % BITS == 0, "codes must not straddle words");
  static_assert(G % PER_WORD == 0, "a word must lie inside one group");
  float acc = 0.0f;
  for (int w = lane; w < width / PER_WORD; w += 32) {
    const unsigned int packed = words[w];
    const int first = w * PER_WORD;
    float qv = 0.0f;
    float sv = 0.0f;
#pragma unroll
    for (int i = 0; i < PER_WORD; ++i) {
      const float value = static_cast<float>(v[first + i]);
      qv += value * static_cast<float>((packed >> (i * BITS)) & MASK);
      sv += value;
    }
    const int g = first / G;
    acc += static_cast<float>(scales[g]) * qv + static_cast<float>(biases[g]) * sv;
  }
  return acc;
}
