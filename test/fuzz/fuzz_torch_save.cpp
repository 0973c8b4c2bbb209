// Fuzz target: the torch.save reader (core/torch_save.h): a zip archive with a pickled state dict.
// The input is the whole file; read_state_dict must return records that lie inside the file or
// throw tt::Error. Known finding until the hardening branch lands: a pickle that puts a list into
// itself recurses without a limit (stack overflow), see test/fuzz/regressions/torch_save/.
#include <string>

#include "core/torch_save.h"
#include "test/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tt::fuzz::quiet_logs();
  const std::string path = tt::fuzz::write_input(data, size, "input.pt");
  try {
    (void)tt::torch_save::is_zip_file(path);
    tt::torch_save::StateDict state = tt::torch_save::read_state_dict(path);
    for (const auto& [name, record] : state.tensors) {
      if (record.shape.size() != record.strides.size())
        tt::fuzz::property_failed("shape and strides differ in rank: " + name);
      if (record.file_offset < 0) tt::fuzz::property_failed("negative file offset: " + name);
    }
  } catch (const tt::Error& error) {
    tt::fuzz::rejected(error);
  }
  return 0;
}
