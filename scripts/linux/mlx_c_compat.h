/* Force-included (-include) when building mlx-c 0.7.0 and its Rust bindings on x86_64 Linux.
 *
 * Why: mlx-c declares float16_t / bfloat16_t only on ARM, yet mlx-rs calls the f16/bf16 item/data
 * functions on every target; and GCC 12's libstdc++ lacks std::format, which mlx-c's io.h uses with
 * "{}" placeholders only. Nothing here is needed on macOS, where mlx-rs builds normally. */
#ifndef COHORT_MLX_C_COMPAT_H
#define COHORT_MLX_C_COMPAT_H

#if !defined(__aarch64__) && !defined(__ARM_FEATURE_FP16_SCALAR_ARITHMETIC) && \
    (!defined(__cplusplus) || __has_include(<mlx/types/half_types.h>))
/* (The __has_include test lets CMake's bare compiler checks pass before MLX's include path exists.) */
#define HAS_FLOAT16
#define HAS_BFLOAT16
#ifdef __cplusplus
#include <mlx/types/half_types.h>
typedef mlx::core::float16_t float16_t;
typedef mlx::core::bfloat16_t bfloat16_t;
#else
#include <stdint.h>
/* bindgen (clang) maps __fp16 to the __BindgenFloat16 that mlx-rs expects; bf16 is plain storage. */
typedef __fp16 float16_t;
typedef uint16_t bfloat16_t;
#endif
#endif

#ifdef __cplusplus
#include <version>
#ifndef __cpp_lib_format
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
namespace std {
namespace cohort_format_detail {
inline void put(std::ostringstream& out, std::string_view& fmt) { out << fmt; fmt = {}; }
template <typename First, typename... Rest>
void put(std::ostringstream& out, std::string_view& fmt, First&& first, Rest&&... rest) {
  auto slot = fmt.find("{}");
  if (slot == std::string_view::npos) { out << fmt; fmt = {}; return; }
  out << fmt.substr(0, slot) << std::forward<First>(first);
  fmt.remove_prefix(slot + 2);
  put(out, fmt, std::forward<Rest>(rest)...);
}
}  // namespace cohort_format_detail
/* A "{}"-only stand-in: the only form mlx-c uses. */
template <typename... Args>
std::string format(std::string_view fmt, Args&&... args) {
  std::ostringstream out;
  cohort_format_detail::put(out, fmt, std::forward<Args>(args)...);
  return out.str();
}
}  // namespace std
#endif
#endif

#endif
