// Passed to MLX as a header ahead of a kernel body that needs its inputs' element type: a body
// sees only typed pointers, so rounding to that type goes through the pointer.

// `v` rounded to the element type of `like` (to nearest, as MLX's own casts round).
template <typename T>
__device__ inline T round_to(const T* like, float v) {
  (void)like;
  return static_cast<T>(v);
}
