// Reading and writing the safetensors format (8-byte little-endian header length, JSON header with
// dtype/shape/data_offsets per tensor and an optional "__metadata__" string map, then raw data).
// Files are read through mmap; loaded tensors are CPU copies that own their memory.
#pragma once

#include <torch/types.h>

#include <map>
#include <string>
#include <vector>

namespace tt::safetensors {

struct TensorInfo {
  torch::Dtype dtype;          // F32, F16, BF16, F64, I64, I32, I16, I8, U8, BOOL
  std::vector<int64_t> shape;
  int64_t offset_begin = 0;    // byte offsets relative to the data section
  int64_t offset_end = 0;
};

struct Header {
  std::map<std::string, TensorInfo> tensors;
  std::map<std::string, std::string> metadata;
  int64_t data_start = 0;  // bytes from the start of the file to the data section (8 + header length)
};

/// The longest JSON header accepted, as Hugging Face's reader (MAX_HEADER_SIZE): a length field
/// above it is rejected before anything is parsed or allocated.
inline constexpr uint64_t kMaxHeaderBytes = 100'000'000;

using TensorMap = std::map<std::string, torch::Tensor>;

/// Header only (no tensor data is touched). Throws kIo when the file cannot be opened,
/// kData when it is not a valid safetensors file (the message names the path and the problem).
Header read_header(const std::string& path);

/// The header of a safetensors file held in memory (`size` bytes at `data`; `path` only names it in
/// messages). What read_header does after mapping the file; every field is checked against `size`:
/// header length (at most kMaxHeaderBytes), dtype names, shapes (no overflow), data_offsets (begin
/// <= end, inside the data section, exactly dtype size * element count bytes, no two tensors
/// overlapping). Throws kData. A fuzz target's entry point.
Header parse_header(const uint8_t* data, size_t size, const std::string& path);

/// All tensors (or only `names`, when non-empty; a missing name throws kData) as CPU tensors.
TensorMap load(const std::string& path, const std::vector<std::string>& names = {},
               std::map<std::string, std::string>* metadata = nullptr);

/// Writes tensors (any device; copied to CPU, made contiguous) in key order. Writes directly to
/// `path`; callers wanting atomicity write to a temporary name and rename. Throws kIo on failure
/// (including a short write, e.g. disk full), never leaving a partially written file at `path`
/// silently: the error says so.
void save(const std::string& path, const TensorMap& tensors,
          const std::map<std::string, std::string>& metadata = {});

/// "F32", "BF16", ... and back; unknown names throw kData.
std::string dtype_name(torch::Dtype dtype);
torch::Dtype dtype_from_name(const std::string& name);

}  // namespace tt::safetensors
