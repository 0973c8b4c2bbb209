// Reading and writing safetensors files (see safetensors.h). Reads go through a read-only mmap so
// that a header-only read never touches the data pages; every header field is validated against
// the file size before any byte of tensor data is used. Writes go through one fd, checked write by
// write, fsynced and closed with the result checked, so a full disk surfaces as kIo.
#include "core/safetensors.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/errors.h"
#include "core/file_io.h"
#include "core/mapped_file.h"

namespace tt::safetensors {
namespace {

// The format is little-endian on disk; tensors are copied byte for byte.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

struct DtypeEntry {
  const char* name;
  torch::Dtype dtype;
  int64_t element_size;
};

const DtypeEntry kDtypes[] = {
    {"F64", torch::kFloat64, 8}, {"F32", torch::kFloat32, 4}, {"F16", torch::kFloat16, 2},
    {"BF16", torch::kBFloat16, 2}, {"I64", torch::kInt64, 8}, {"I32", torch::kInt32, 4},
    {"I16", torch::kInt16, 2},   {"I8", torch::kInt8, 1},     {"U8", torch::kUInt8, 1},
    {"BOOL", torch::kBool, 1},
};

const DtypeEntry* find_dtype(const std::string& name) {
  for (const DtypeEntry& entry : kDtypes)
    if (name == entry.name) return &entry;
  return nullptr;
}

const DtypeEntry* find_dtype(torch::Dtype dtype) {
  for (const DtypeEntry& entry : kDtypes)
    if (dtype == entry.dtype) return &entry;
  return nullptr;
}

std::string supported_dtype_list() {
  std::string out;
  for (const DtypeEntry& entry : kDtypes) {
    if (!out.empty()) out += ' ';
    out += entry.name;
  }
  return out;
}


[[noreturn]] void bad_file(const std::string& path, const std::string& problem) {
  throw Error(ErrorCode::kData, str_cat(path, ": ", problem),
              "the file is damaged or not a safetensors file; re-create it");
}

// "[1, 2, 3]" of the shape as written, for messages (entries may exceed int64).
std::string dim_list(const nlohmann::json& shape) {
  std::string out;
  for (const nlohmann::json& dim : shape)  // only numbers are printed: dump() recurses into nested arrays
    out += (out.empty() ? "" : ", ") + (dim.is_number() ? dim.dump() : std::string("?"));
  return "[" + out + "]";
}

std::map<std::string, std::string> parse_metadata(const std::string& path, const nlohmann::json& value) {
  if (!value.is_object()) bad_file(path, "__metadata__ is not a JSON object");
  std::map<std::string, std::string> metadata;
  for (auto it = value.begin(); it != value.end(); ++it) {
    if (!it->is_string()) bad_file(path, str_cat("__metadata__ value of \"", it.key(), "\" is not a string"));
    metadata[it.key()] = it->get<std::string>();
  }
  return metadata;
}

// Validates one tensor entry against the data section of `data_size` bytes.
TensorInfo parse_tensor(const std::string& path, const std::string& name, const nlohmann::json& value,
                        uint64_t data_size) {
  std::string where = str_cat("tensor \"", name, "\"");
  if (!value.is_object()) bad_file(path, where + " is not a JSON object");
  auto dtype_it = value.find("dtype");
  auto shape_it = value.find("shape");
  auto offsets_it = value.find("data_offsets");
  if (dtype_it == value.end() || !dtype_it->is_string()) bad_file(path, where + " has no string \"dtype\"");
  if (shape_it == value.end() || !shape_it->is_array()) bad_file(path, where + " has no \"shape\" array");
  if (offsets_it == value.end() || !offsets_it->is_array() || offsets_it->size() != 2)
    bad_file(path, where + " has no \"data_offsets\" pair");

  std::string dtype_text = dtype_it->get<std::string>();
  const DtypeEntry* dtype = find_dtype(dtype_text);
  if (dtype == nullptr)
    bad_file(path, str_cat(where, " has dtype ", dtype_text, ", which teletron does not support (supported: ",
                           supported_dtype_list(), ")"));

  TensorInfo info;
  info.dtype = dtype->dtype;
  // `numel` bounds the bytes read; `span` (the product of max(size, 1), what contiguous strides
  // reach) must fit too, or an empty tensor of shape [0, 2^40, 2^40] would overflow the strides
  // that torch::empty and weight_io compute for it.
  uint64_t numel = 1, span = 1;
  for (const nlohmann::json& dim : *shape_it) {
    if (!dim.is_number_unsigned()) bad_file(path, where + " has a shape entry that is not a non-negative integer");
    uint64_t size = dim.get<uint64_t>();
    if (size > static_cast<uint64_t>(INT64_MAX) || __builtin_mul_overflow(numel, size, &numel) ||
        __builtin_mul_overflow(span, std::max<uint64_t>(size, 1), &span) ||
        span > static_cast<uint64_t>(INT64_MAX))
      bad_file(path, str_cat(where, " has shape ", dim_list(*shape_it), ", too large to address"));
    info.shape.push_back(static_cast<int64_t>(size));
  }
  uint64_t nbytes = 0;
  if (__builtin_mul_overflow(numel, static_cast<uint64_t>(dtype->element_size), &nbytes))
    bad_file(path, str_cat(where, " has shape ", dim_list(*shape_it), ", too large to address"));

  const nlohmann::json& begin_json = (*offsets_it)[0];
  const nlohmann::json& end_json = (*offsets_it)[1];
  if (!begin_json.is_number_unsigned() || !end_json.is_number_unsigned())
    bad_file(path, where + " has data_offsets that are not non-negative integers");
  uint64_t begin = begin_json.get<uint64_t>();
  uint64_t end = end_json.get<uint64_t>();
  std::string offsets = str_cat("data_offsets [", begin, ", ", end, "]");
  if (begin > end) bad_file(path, str_cat(where, " has ", offsets, " with begin after end"));
  if (end > data_size)
    bad_file(path, str_cat(where, " has ", offsets, " beyond the data section (", data_size,
                           " bytes; truncated file?)"));
  if (end - begin != nbytes)
    bad_file(path, str_cat(where, " has ", offsets, " spanning ", end - begin, " bytes, but shape ",
                           shape_string(info.shape), " of ", dtype_text, " needs ", nbytes));
  info.offset_begin = static_cast<int64_t>(begin);
  info.offset_end = static_cast<int64_t>(end);
  return info;
}

// Rejects two tensors sharing bytes: a writer never produces that, and a damaged index that makes
// two names alias one range would silently load the same values twice.
void check_no_overlap(const std::string& path, const Header& header) {
  std::vector<std::pair<const std::string*, const TensorInfo*>> ranges;
  for (const auto& [name, info] : header.tensors)
    if (info.offset_end > info.offset_begin) ranges.push_back({&name, &info});  // empty tensors take no bytes
  std::sort(ranges.begin(), ranges.end(),
            [](const auto& a, const auto& b) { return a.second->offset_begin < b.second->offset_begin; });
  for (size_t i = 1; i < ranges.size(); ++i) {
    const TensorInfo& before = *ranges[i - 1].second;
    const TensorInfo& after = *ranges[i].second;
    if (after.offset_begin < before.offset_end)
      bad_file(path, str_cat("tensor \"", *ranges[i].first, "\" has data_offsets [", after.offset_begin, ", ",
                             after.offset_end, "] overlapping tensor \"", *ranges[i - 1].first, "\" [",
                             before.offset_begin, ", ", before.offset_end, "]"));
  }
}

}  // namespace

Header parse_header(const uint8_t* data, size_t size, const std::string& path) {
  if (size < 8)
    bad_file(path, str_cat("file is ", size, " bytes, too short for the 8-byte header length"));
  uint64_t header_size = 0;
  std::memcpy(&header_size, data, 8);  // little-endian on disk and on the host
  // Checked before anything is parsed or allocated: the length field is the first thing a
  // damaged or hostile file controls.
  if (header_size > kMaxHeaderBytes)
    bad_file(path, str_cat("header length ", header_size, " exceeds the format's limit of ", kMaxHeaderBytes,
                           " bytes (not a safetensors file?)"));
  if (header_size > size - 8)
    bad_file(path, str_cat("header length ", header_size, " exceeds the ", size - 8,
                           " bytes after the length field (truncated or not a safetensors file)"));
  const char* text = reinterpret_cast<const char*>(data + 8);
  nlohmann::json json = nlohmann::json::parse(text, text + header_size, nullptr, false);
  if (json.is_discarded()) bad_file(path, "header is not valid JSON");
  if (!json.is_object()) bad_file(path, "header is not a JSON object");

  Header header;
  header.data_start = static_cast<int64_t>(8 + header_size);
  uint64_t data_size = size - (8 + header_size);
  for (auto it = json.begin(); it != json.end(); ++it) {
    if (it.key() == "__metadata__")
      header.metadata = parse_metadata(path, it.value());
    else
      header.tensors[it.key()] = parse_tensor(path, it.key(), it.value(), data_size);
  }
  check_no_overlap(path, header);
  return header;
}

namespace {

std::string name_list(const Header& header) {
  std::string out;
  int shown = 0;
  for (const auto& [name, info] : header.tensors) {
    if (shown++ == 8) return out + ", ...";
    if (!out.empty()) out += ", ";
    out += name;
  }
  return out.empty() ? "none" : out;
}

torch::Tensor copy_tensor(const TensorInfo& info, const uint8_t* data_section) {
  torch::Tensor tensor = torch::empty(info.shape, torch::TensorOptions().dtype(info.dtype));
  size_t nbytes = static_cast<size_t>(info.offset_end - info.offset_begin);
  if (nbytes > 0) std::memcpy(tensor.data_ptr(), data_section + info.offset_begin, nbytes);
  return tensor;
}

// ---- writing -------------------------------------------------------------------------------

// An fd being written to `path`. fail() closes it, removes the partial file (only when it is a
// regular file: never a device such as /dev/full) and throws kIo.
class OutputFile {
 public:
  explicit OutputFile(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    TT_CHECK(fd_ >= 0, ErrorCode::kIo, "cannot create ", path, ": ", std::strerror(errno));
  }
  ~OutputFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  void write_all(const void* data, size_t size) {
    const char* bytes = static_cast<const char*>(data);
    size_t done = 0;
    while (done < size) {
      // Linux writes at most ~2 GiB per call; chunk so that large tensors need no special case.
      size_t chunk = std::min<size_t>(size - done, size_t{1} << 30);
      ssize_t n = ::write(fd_, bytes + done, chunk);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        int saved = n < 0 ? errno : ENOSPC;  // a zero-byte write means no room left
        fail(str_cat("short write to ", path_, " after ", written_ + done, " bytes: ",
                     std::strerror(saved), " (disk full?)"));
      }
      done += static_cast<size_t>(n);
    }
    written_ += size;
  }

  void sync_and_close() {
    if (::fsync(fd_) != 0) fail(str_cat("fsync of ", path_, " failed: ", std::strerror(errno), " (disk full?)"));
    int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) {
      int saved = errno;
      remove_partial();
      throw Error(ErrorCode::kIo, str_cat("closing ", path_, " failed: ", std::strerror(saved),
                                          " (disk full?); the partial file was removed"));
    }
  }

 private:
  [[noreturn]] void fail(const std::string& problem) {
    bool removed = is_regular();
    ::close(fd_);
    fd_ = -1;
    if (removed) ::unlink(path_.c_str());
    throw Error(ErrorCode::kIo, problem + (removed ? "; the partial file was removed" : ""));
  }
  bool is_regular() const {
    struct stat st {};
    return ::fstat(fd_, &st) == 0 && S_ISREG(st.st_mode);
  }
  void remove_partial() {
    struct stat st {};
    if (::lstat(path_.c_str(), &st) == 0 && S_ISREG(st.st_mode)) ::unlink(path_.c_str());
  }

  std::string path_;
  int fd_ = -1;
  uint64_t written_ = 0;
};

struct PendingTensor {
  std::string name;
  torch::Tensor data;  // CPU, contiguous
  int64_t element_size = 0;
};

// Orders data by element size (largest first), then by name, as Hugging Face does: with the header
// padded to 8 bytes every tensor then starts at an offset aligned to its own element size.
std::vector<PendingTensor> prepare_tensors(const TensorMap& tensors) {
  std::vector<PendingTensor> pending;
  for (const auto& [name, tensor] : tensors) {
    TT_CHECK(tensor.defined(), ErrorCode::kInternal, "safetensors::save: tensor \"", name, "\" is undefined");
    const DtypeEntry* dtype = find_dtype(tensor.scalar_type());
    TT_CHECK(dtype != nullptr, ErrorCode::kData, "safetensors::save: tensor \"", name, "\" has dtype ",
             tensor.scalar_type(), ", which safetensors files cannot hold (supported: ",
             supported_dtype_list(), ")");
    pending.push_back({name, tensor.detach().to(torch::kCPU).contiguous(), dtype->element_size});
  }
  std::stable_sort(pending.begin(), pending.end(), [](const PendingTensor& a, const PendingTensor& b) {
    return a.element_size > b.element_size;  // names are already sorted (TensorMap order)
  });
  return pending;
}

std::string build_header(const std::vector<PendingTensor>& pending,
                         const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const PendingTensor& entry : pending) {
    uint64_t nbytes = entry.data.nbytes();
    header[entry.name] = {{"dtype", dtype_name(entry.data.scalar_type())},
                          {"shape", entry.data.sizes().vec()},
                          {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::type_error& error) {  // invalid UTF-8 in a name or metadata
    throw Error(ErrorCode::kData, str_cat("safetensors::save: tensor names and metadata must be UTF-8 (",
                                          error.what(), ")"));
  }
  text.append((8 - text.size() % 8) % 8, ' ');  // keeps the data section 8-byte aligned
  return text;
}

}  // namespace

std::string dtype_name(torch::Dtype dtype) {
  const DtypeEntry* entry = find_dtype(dtype);
  TT_CHECK(entry != nullptr, ErrorCode::kData, "dtype ", dtype, " has no safetensors name (supported: ",
           supported_dtype_list(), ")");
  return entry->name;
}

torch::Dtype dtype_from_name(const std::string& name) {
  const DtypeEntry* entry = find_dtype(name);
  TT_CHECK(entry != nullptr, ErrorCode::kData, "safetensors dtype ", name,
           " is not supported (supported: ", supported_dtype_list(), ")");
  return entry->dtype;
}

Header read_header(const std::string& path) {
  MappedFile file(path);
  return parse_header(file.data(), file.size(), path);
}

TensorMap load(const std::string& path, const std::vector<std::string>& names,
               std::map<std::string, std::string>* metadata) {
  MappedFile file(path);
  Header header = parse_header(file.data(), file.size(), path);
  const uint8_t* data_section = file.data() + header.data_start;
  TensorMap tensors;
  if (names.empty()) {
    for (const auto& [name, info] : header.tensors) tensors[name] = copy_tensor(info, data_section);
  } else {
    for (const std::string& name : names) {
      auto it = header.tensors.find(name);
      if (it == header.tensors.end())
        bad_file(path, str_cat("has no tensor \"", name, "\" (it holds: ", name_list(header), ")"));
      tensors[name] = copy_tensor(it->second, data_section);
    }
  }
  if (metadata != nullptr) *metadata = std::move(header.metadata);
  return tensors;
}

void save(const std::string& path, const TensorMap& tensors,
          const std::map<std::string, std::string>& metadata) {
  std::vector<PendingTensor> pending = prepare_tensors(tensors);
  std::string header = build_header(pending, metadata);
  uint64_t header_size = header.size();
  uint8_t size_field[8];
  std::memcpy(size_field, &header_size, 8);  // little-endian host (static_assert above)

  OutputFile out(path);
  out.write_all(size_field, 8);
  out.write_all(header.data(), header.size());
  for (const PendingTensor& entry : pending)
    if (entry.data.nbytes() > 0) out.write_all(entry.data.data_ptr(), entry.data.nbytes());
  out.sync_and_close();
}

}  // namespace tt::safetensors
