// Chunks of rows for the kernels whose backward reduces over tokens (cuda/gated_residual.cu,
// cuda/layer_norm_modulate.cu): one block per chunk of a sample's rows, `chunk` rows each unless the
// grid's limit of `max_chunks` blocks along the tokens asks for more. Host code; no torch here.
#pragma once

#include <cstdint>

namespace tt::kernels {

inline int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

/// Rows per chunk: `chunk`, more when that would need over max_chunks chunks.
inline int64_t chunk_rows(int64_t rows, int64_t chunk, int64_t max_chunks) {
  const int64_t least = ceil_div(rows, max_chunks);
  return least > chunk ? least : chunk;
}

/// Chunks of chunk_rows(...) rows covering `rows` (0 for none).
inline int64_t chunk_count(int64_t rows, int64_t chunk, int64_t max_chunks) {
  return rows == 0 ? 0 : ceil_div(rows, chunk_rows(rows, chunk, max_chunks));
}

}  // namespace tt::kernels
