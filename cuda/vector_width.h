// The widest vector (in elements, up to 16 bytes) that a channels-last kernel can load and store:
// it must divide the run of consecutive elements and keep both pointers aligned to its size.
#pragma once

#include <cstdint>

namespace tt::kernels {

inline int vector_width(int64_t run, int element_size, const void* a, const void* b) {
  for (int vec = 16 / element_size; vec > 1; vec /= 2) {
    const auto bytes = static_cast<uintptr_t>(vec * element_size);
    if (run % vec == 0 && reinterpret_cast<uintptr_t>(a) % bytes == 0 &&
        reinterpret_cast<uintptr_t>(b) % bytes == 0)
      return vec;
  }
  return 1;
}

}  // namespace tt::kernels
