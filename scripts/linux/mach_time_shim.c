/* mlx-rs seeds its default RNG key from macOS's mach_approximate_time(); Linux has no such symbol.
 * Any monotonic nanosecond clock serves the same purpose. */
#include <stdint.h>
#include <time.h>

uint64_t mach_approximate_time(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
