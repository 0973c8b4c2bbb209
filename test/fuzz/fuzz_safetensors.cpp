// Fuzz target: the safetensors reader (core/safetensors.h). The input is a whole file: header
// length, JSON header, data. read_header then load (every tensor, with metadata) must either
// return tensors that lie inside the file or throw tt::Error.
#include <torch/torch.h>

#include <map>
#include <string>

#include "core/safetensors.h"
#include "test/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tt::fuzz::quiet_logs();
  const std::string path = tt::fuzz::write_input(data, size, "input.safetensors");
  try {
    tt::safetensors::Header header = tt::safetensors::read_header(path);
    std::map<std::string, std::string> metadata;
    tt::safetensors::TensorMap tensors = tt::safetensors::load(path, {}, &metadata);
    if (tensors.size() != header.tensors.size()) tt::fuzz::property_failed("load and read_header disagree on the tensor count");
    for (const auto& [name, tensor] : tensors) {
      const tt::safetensors::TensorInfo& info = header.tensors.at(name);
      if (tensor.scalar_type() != info.dtype) tt::fuzz::property_failed("dtype differs from the header: " + name);
      if (tensor.sizes().vec() != info.shape) tt::fuzz::property_failed("shape differs from the header: " + name);
      if (static_cast<size_t>(tensor.nbytes()) > size) tt::fuzz::property_failed("tensor larger than the file: " + name);
      // Touch every byte so that a tensor pointing outside its buffer shows up under ASan.
      if (tensor.numel() > 0) (void)tensor.to(torch::kFloat64).sum().item<double>();
    }
  } catch (const tt::Error& error) {
    tt::fuzz::rejected(error);
  }
  return 0;
}
