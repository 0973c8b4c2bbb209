// Overflow-checked int64 arithmetic for sizes, strides and offsets read from files. A weight file is
// untrusted input: a shape whose product wraps to 0 or a negative stride would otherwise slip past
// the bound checks that keep reads inside the mapped file. Every helper throws tt::Error with the
// caller's code and a message that starts with `what` (the file and the field being computed).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/errors.h"

namespace tt {

/// a + b, or throws `code` ("<what>: 9223372036854775807 + 1 overflows 64-bit arithmetic").
inline int64_t checked_add(int64_t a, int64_t b, ErrorCode code, const std::string& what) {
  int64_t out = 0;
  TT_CHECK(!__builtin_add_overflow(a, b, &out), code, what, ": ", a, " + ", b,
           " overflows 64-bit arithmetic");
  return out;
}

/// a * b, or throws `code`.
inline int64_t checked_mul(int64_t a, int64_t b, ErrorCode code, const std::string& what) {
  int64_t out = 0;
  TT_CHECK(!__builtin_mul_overflow(a, b, &out), code, what, ": ", a, " * ", b,
           " overflows 64-bit arithmetic");
  return out;
}

/// Product of `shape` (the element count); throws on a negative size or on overflow.
inline int64_t checked_numel(const std::vector<int64_t>& shape, ErrorCode code, const std::string& what) {
  int64_t numel = 1;
  for (int64_t size : shape) {
    TT_CHECK(size >= 0, code, what, ": negative size ", size, " in shape");
    numel = checked_mul(numel, size, code, what + ": element count");
  }
  return numel;
}

/// The storage elements a strided view needs: storage_offset + sum((shape_i - 1) * stride_i) + 1, or
/// 0 when the view has no elements (it then reads nothing, whatever its strides). Rejects negative
/// sizes, strides and offsets (teletron never needs them, and they would let a view reach before
/// its storage) and size/stride lists of different lengths.
inline int64_t checked_strided_extent(const std::vector<int64_t>& shape, const std::vector<int64_t>& strides,
                                      int64_t storage_offset, ErrorCode code, const std::string& what) {
  TT_CHECK(shape.size() == strides.size(), code, what, ": ", shape.size(), " sizes but ", strides.size(),
           " strides");
  TT_CHECK(storage_offset >= 0, code, what, ": negative storage offset ", storage_offset);
  bool empty = false;
  for (size_t d = 0; d < shape.size(); ++d) {
    TT_CHECK(shape[d] >= 0, code, what, ": negative size ", shape[d], " in dimension ", d);
    TT_CHECK(strides[d] >= 0, code, what, ": negative stride ", strides[d], " in dimension ", d);
    empty = empty || shape[d] == 0;
  }
  if (empty) return 0;
  int64_t last = storage_offset;
  for (size_t d = 0; d < shape.size(); ++d)
    last = checked_add(last, checked_mul(shape[d] - 1, strides[d], code, what + ": stride extent"), code,
                       what + ": stride extent");
  return checked_add(last, 1, code, what + ": stride extent");
}

}  // namespace tt
