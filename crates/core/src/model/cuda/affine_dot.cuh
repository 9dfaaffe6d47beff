// Shared by the MoE expert kernels (passed to MLX as the kernels' header, ahead of their
// bodies): a warp's dot products between rows of an affine-quantized matrix and float vectors.
// A row's inputs are packed PER_WORD codes a uint32 word, low bits first, each group of G inputs
// with one scale and one bias (value = scale * q + bias).
//
// Why this shape: at one to sixteen tokens every (token, expert) pair reads its expert's rows
// once, so the kernels are bound by how many bytes are in flight, not by arithmetic. Each lane
// takes a chunk of LW consecutive words per pass (one 16-byte load where the row allows) and the
// matching vector values stay in registers, so a warp issues every load of its rows before it
// waits on any of them.

// Words a lane loads at once for rows of `words` words: the widest of 4, 2, 1 that divides the
// row and keeps the chunk inside one quantization group (so it has one scale and one bias).
__host__ __device__ constexpr int lane_words(int words, int per_word, int g) {
  return (words % 4 == 0 && 4 * per_word <= g && g % (4 * per_word) == 0)   ? 4
         : (words % 2 == 0 && 2 * per_word <= g && g % (2 * per_word) == 0) ? 2
                                                                            : 1;
}

// The same, preferring a width that gives every lane of a warp a chunk of the row (a 512-input
// 4-bit row is 64 words: 16 lanes of 4 words would leave half the warp without loads, 32 lanes
// of 2 words fill it).
__host__ __device__ constexpr bool lane_words_fit(int lw, int words, int per_word, int g) {
  return words % lw == 0 && lw * per_word <= g && g % (lw * per_word) == 0;
}
__host__ __device__ constexpr int lane_words_filling(int words, int per_word, int g) {
  return (lane_words_fit(4, words, per_word, g) && words >= 4 * 32)   ? 4
         : (lane_words_fit(2, words, per_word, g) && words >= 2 * 32) ? 2
                                                                       : lane_words(words, per_word, g);
}

// One lane's chunk of a row: its packed words, and the group's scale and bias as floats.
template <int LW>
struct Chunk {
  unsigned int w[LW];
  float scale;
  float bias;
};

template <int LW>
__device__ inline void load_words(const unsigned int* p, unsigned int* out) {
#pragma unroll
  for (int i = 0; i < LW; ++i) {
    out[i] = p[i];
  }
}
template <>
__device__ inline void load_words<4>(const unsigned int* p, unsigned int* out) {
  const uint4 v = *reinterpret_cast<const uint4*>(p);
  out[0] = v.x;
  out[1] = v.y;
  out[2] = v.z;
  out[3] = v.w;
}
template <>
__device__ inline void load_words<2>(const unsigned int* p, unsigned int* out) {
  const uint2 v = *reinterpret_cast<const uint2*>(p);
  out[0] = v.x;
  out[1] = v.y;
}

// N consecutive vector values as floats; 16-byte loads for float32 and bf16 where N allows
// (callers keep chunks aligned: rows are whole groups, chunks start at multiples of N).
template <typename T, int N>
struct Floats {
  __device__ static void load(const T* p, float* out) {
#pragma unroll
    for (int i = 0; i < N; ++i) {
      out[i] = static_cast<float>(p[i]);
    }
  }
};
template <int N>
struct Floats<float, N> {
  __device__ static void load(const float* p, float* out) {
    if (N % 4 == 0) {
#pragma unroll
      for (int i = 0; i < N / 4; ++i) {
        const float4 v = reinterpret_cast<const float4*>(p)[i];
        out[4 * i] = v.x;
        out[4 * i + 1] = v.y;
        out[4 * i + 2] = v.z;
        out[4 * i + 3] = v.w;
      }
    } else {
#pragma unroll
      for (int i = 0; i < N; ++i) {
        out[i] = p[i];
      }
    }
  }
};
template <int N>
struct Floats<__nv_bfloat16, N> {
  __device__ static void load(const __nv_bfloat16* p, float* out) {
    if (N % 8 == 0) {
      // A bf16 is the top half of a float32: widen by shifting, no conversion instruction.
#pragma unroll
      for (int i = 0; i < N / 8; ++i) {
        const uint4 v = reinterpret_cast<const uint4*>(p)[i];
        const unsigned int u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          out[8 * i + 2 * j] = __uint_as_float(u[j] << 16);
          out[8 * i + 2 * j + 1] = __uint_as_float(u[j] & 0xffff0000u);
        }
      }
    } else {
#pragma unroll
      for (int i = 0; i < N; ++i) {
        out[i] = __bfloat162float(p[i]);
      }
    }
  }
};

template <int N, typename T>
__device__ inline void load_floats(const T* p, float* out) {
  Floats<T, N>::load(p, out);
}

// The chunk at word `word` of the row starting at `words` (scales and biases at `scales`,
// `biases`, G inputs a group).
template <int BITS, int G, int LW, typename Scale>
__device__ inline Chunk<LW> load_chunk(const unsigned int* words, const Scale* scales, const Scale* biases, int word) {
  constexpr int PER_WORD = 32 / BITS;
  Chunk<LW> c;
  load_words<LW>(words + word, c.w);
  const int g = word * PER_WORD / G;
  c.scale = static_cast<float>(scales[g]);
  c.bias = static_cast<float>(biases[g]);
  return c;
}

// The code at bit `SHIFT` (below 16) of `half_word` as a float, exactly, with no conversion
// instruction: on Hopper an int-to-float conversion issues at 16 a clock on an SM, against 128
// for an FMA and 64 for a logic op, and the kernels made one for every weight value (5% of the
// up kernel's time and 13% of the down kernel's at a B8 verify on the H200, docs/benchmarks.md,
// session 31). Under the exponent 2^(23 - SHIFT) a float's mantissa bits from SHIFT up count
// whole units, so the code ORed in place reads as 2^(23 - SHIFT) plus the code, and taking the
// power of two away again is exact (both lie in one binade).
template <int BITS, int SHIFT>
__device__ inline float code_value(unsigned int half_word) {
  constexpr unsigned int POWER = (127u + 23u - SHIFT) << 23;
  constexpr unsigned int MASK = ((1u << BITS) - 1u) << SHIFT;
  // (half_word & MASK) | POWER as one three-input logic op (lookup table 0xEA: a & b | c); left
  // to itself the compiler spends an AND and an OR on it (two immediates do not fit one).
  unsigned int bits;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(bits) : "r"(half_word), "n"(MASK), "n"(POWER));
  return __uint_as_float(bits) - __uint_as_float(POWER);
}

// acc plus the word's codes J.. (of 32 / BITS) times v[J..], in order; a recursion rather than a
// loop so that each code's shift is a constant the logic op can take.
template <int BITS, int J>
struct WordDot {
  __device__ static float add(unsigned int lo, unsigned int hi, const float* v, float acc) {
    constexpr int PER_HALF = 16 / BITS;
    acc += v[J] * code_value<BITS, (J % PER_HALF) * BITS>(J < PER_HALF ? lo : hi);
    return WordDot<BITS, J + 1>::add(lo, hi, v, acc);
  }
};
template <>
struct WordDot<4, 8> {
  __device__ static float add(unsigned int, unsigned int, const float*, float acc) { return acc; }
};
template <>
struct WordDot<8, 4> {
  __device__ static float add(unsigned int, unsigned int, const float*, float acc) { return acc; }
};

// A chunk's share of the dot product with its vector values `v` (sum_v: their sum). A word's
// upper codes are shifted down by 16 first, so that every code lies below the exponent field.
template <int BITS, int LW>
__device__ inline float chunk_dot(const Chunk<LW>& c, const float* v, float sum_v) {
  static_assert(BITS == 4 || BITS == 8, "4- or 8-bit codes");
  constexpr int PER_WORD = 32 / BITS;
  float qv = 0.0f;
#pragma unroll
  for (int i = 0; i < LW; ++i) {
    qv = WordDot<BITS, 0>::add(c.w[i], c.w[i] >> 16, v + i * PER_WORD, qv);
  }
  return c.scale * qv + c.bias * sum_v;
}

template <int N>
__device__ inline float sum_of(const float* v) {
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    s += v[i];
  }
  return s;
}

__device__ inline float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  }
  return v;
}

// The row-invariant product kernels' ending (affine_rows.cu, dense_rows.cu): each of the block's
// first m rows' CPW channel sums meets in one butterfly and lane 0 writes the channels below n.
template <int ROWS, int CPW, typename T>
__device__ inline void store_warp_sums(float (&acc)[ROWS][CPW], int m, int lane, int first, int n, T* y) {
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    if (r < m) {
#pragma unroll
      for (int c = 0; c < CPW; ++c) {
        const float sum = warp_sum(acc[r][c]);
        if (lane == 0 && first + c < n) {
          y[static_cast<size_t>(r) * n + first + c] = sum;
        }
      }
    }
  }
}
