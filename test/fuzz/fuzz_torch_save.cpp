// Fuzz target: the torch.save reader (core/torch_save.h): a zip archive with a pickled state dict.
// Two kinds of input, told apart by their first bytes:
// - "PK...": a whole file (the zip directory and records as they are; miniz checks CRCs, so
//   mutations mostly exercise the archive checks);
// - anything else: the bytes are data.pkl, wrapped by LibTorch's PyTorchStreamWriter into a valid
//   archive with version and storage records data/0 .. data/3 (256 bytes each), so that mutations
//   reach the unpickler and the record checks past the CRC.
// read_state_dict must return records that lie inside the file or throw tt::Error. Known finding
// until the hardening branch lands: a pickle that appends a list to itself recurses without a
// limit (stack overflow), see test/fuzz/regressions/torch_save/.
#include <caffe2/serialize/inline_container.h>

#include <cstring>
#include <string>

#include "core/torch_save.h"
#include "test/fuzz/fuzz_util.h"

namespace {

void write_archive(const std::string& path, const uint8_t* pickle, size_t size) {
  caffe2::serialize::PyTorchStreamWriter writer(path);
  writer.writeRecord("data.pkl", pickle, size);
  static const std::string storage(256, '\x11');
  for (int i = 0; i < 4; ++i) writer.writeRecord("data/" + std::to_string(i), storage.data(), storage.size());
  writer.writeEndOfFile();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tt::fuzz::quiet_logs();
  std::string path;
  if (size >= 2 && std::memcmp(data, "PK", 2) == 0) {
    path = tt::fuzz::write_input(data, size, "input.pt");
  } else {
    path = tt::fuzz::scratch_dir() + "/archive.pt";
    write_archive(path, data, size);
  }
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
