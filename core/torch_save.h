// Reading the tensors of a `torch.save` file (the zip format of PyTorch >= 1.6) without Python and
// without loading them: a restricted unpickler walks the archive's data.pkl and returns where each
// tensor of the state dict lies in the file, so that callers can memory-map it.
//
// Why not torch::pickle_load: LibTorch's unpickler turns every `collections.OrderedDict` into None
// (it expects them only as a tensor's empty backward hooks) and cannot apply BUILD to a dict, so a
// real `torch.save(model.state_dict())` file (an OrderedDict carrying `_metadata`) fails with
// "Expected GenericDict but got None"; it would also read every tensor into memory.
//
// The unpickler never runs code: it knows tensors, storages, containers and scalars; any other
// global becomes an opaque value that is skipped (DeepSpeed checkpoints hold configs and sizes
// next to the weights).
#pragma once

#include <torch/types.h>

#include <map>
#include <string>
#include <vector>

namespace tt::torch_save {

/// A tensor located in the file: element [0, ..., 0] starts `file_offset` bytes into the file
/// (the archive stores records uncompressed and 64-byte aligned); `strides` are in elements.
struct TensorRecord {
  torch::Dtype dtype = torch::kFloat32;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  int64_t file_offset = 0;
};

struct StateDict {
  std::map<std::string, TensorRecord> tensors;
  /// The top-level key the tensors were found under ("module", ...), empty for the root dict.
  std::string container_key;
};

/// True when the file starts like a zip archive (what torch.save writes since PyTorch 1.6).
bool is_zip_file(const std::string& path);

/// Parses `path` and returns the tensors of its state dict: the dict found under the first of
/// `container_keys` present in the top-level dict, else the top-level dict itself. Reads only the
/// zip directory and data.pkl. Throws kCheckpoint when the file is not a torch.save zip archive
/// (legacy pre-1.6 files included, with a conversion hint), holds compressed records, or holds
/// no tensors; kIo when it cannot be read.
StateDict read_state_dict(const std::string& path,
                          const std::vector<std::string>& container_keys = {"module", "model", "state_dict"});

}  // namespace tt::torch_save
