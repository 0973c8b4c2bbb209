// A read-only memory mapping of a whole file, for the weight readers (safetensors, torch.save
// archives streamed by model/weight_io). Mapping instead of reading lets a header-only pass touch no
// data pages and lets a streamed load drop each tensor's pages once it is copied.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace tt {

class MappedFile {
 public:
  /// Maps `path` read-only. Throws kIo naming the path when it cannot be opened or mapped or is not
  /// a regular file (a directory or device would make mmap fail with a confusing message). An empty
  /// file is not mapped (mmap rejects length 0): data() is then null and size() 0.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  /// The file's bytes; never write through it (the mapping is PROT_READ). Null for an empty file.
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

  /// madvise(advice) on the pages holding bytes [offset, offset + length), clipped to the file; a
  /// hint only, so failures are ignored.
  void advise(uint64_t offset, uint64_t length, int advice) const;

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace tt
