// Read-only whole-file mmap (see mapped_file.h).
#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/errors.h"

namespace tt {

MappedFile::MappedFile(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  TT_CHECK(fd >= 0, ErrorCode::kIo, "cannot open ", path, ": ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int saved = errno;
    ::close(fd);
    throw Error(ErrorCode::kIo, str_cat("cannot stat ", path, ": ", std::strerror(saved)));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(ErrorCode::kIo, str_cat("cannot read ", path, ": ",
                                        S_ISDIR(st.st_mode) ? "it is a directory" : "not a regular file"));
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* addr = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    int saved = errno;
    ::close(fd);  // the mapping keeps the file alive
    TT_CHECK(addr != MAP_FAILED, ErrorCode::kIo, "cannot mmap ", path, ": ", std::strerror(saved));
    data_ = static_cast<const uint8_t*>(addr);
  } else {
    ::close(fd);
  }
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

void MappedFile::advise(uint64_t offset, uint64_t length, int advice) const {
  if (data_ == nullptr || length == 0 || offset >= size_) return;
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  uint64_t end = length > size_ - offset ? size_ : offset + length;  // clipped: no overflow past size_
  uint64_t begin = offset / page * page;
  end = end / page * page + (end % page != 0 ? page : 0);
  if (end > size_) end = size_;  // the last page is partial; madvise takes the remainder
  ::madvise(const_cast<uint8_t*>(data_) + begin, static_cast<size_t>(end - begin), advice);
}

}  // namespace tt
