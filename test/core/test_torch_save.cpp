// Tests for core/torch_save against hostile files: every archive here is crafted byte by byte in a
// temporary folder (a pickle written opcode by opcode, stored by LibTorch's PyTorchStreamWriter as
// torch.save stores it, then patched where the zip itself must lie). Each must fail with kCheckpoint
// naming the file and what is wrong; none may crash, recurse without bound or read out of bounds.
// The readable files torch.save and LibTorch write are covered in test/model/test_weight_io.cpp.
#include "core/torch_save.h"

#include <caffe2/serialize/inline_container.h>
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "core/errors.h"
#include "test/test_util.h"

using Catch::Matchers::ContainsSubstring;
namespace ts = tt::torch_save;

namespace {

// A protocol-2 pickle, opcode by opcode.
struct Pickle {
  std::string bytes = std::string("\x80\x02", 2);  // PROTO 2

  Pickle& op(int c) {
    bytes.push_back(static_cast<char>(c));
    return *this;
  }
  Pickle& str(const std::string& s) {  // BINUNICODE
    op('X');
    for (int i = 0; i < 4; ++i) op((s.size() >> (8 * i)) & 0xff);
    bytes += s;
    return *this;
  }
  Pickle& integer(int64_t v) {  // LONG1 of 8 bytes: any int64, negative ones included
    op(0x8a).op(8);
    for (int i = 0; i < 8; ++i) op((static_cast<uint64_t>(v) >> (8 * i)) & 0xff);
    return *this;
  }
  Pickle& global(const std::string& module, const std::string& name) {
    bytes += "c" + module + "\n" + name + "\n";
    return *this;
  }
  Pickle& int_tuple(const std::vector<int64_t>& values) {
    op('(');
    for (int64_t v : values) integer(v);
    return op('t');
  }
  // _rebuild_tensor_v2(storage, offset, size, stride, False, OrderedDict()), as torch.save writes
  // it, leaving the tensor on the stack.
  Pickle& tensor(const std::string& storage_key, int64_t storage_numel, int64_t offset,
                 const std::vector<int64_t>& shape, const std::vector<int64_t>& strides,
                 const std::string& storage_type = "FloatStorage") {
    global("torch._utils", "_rebuild_tensor_v2");
    op('(');
    op('(').str("storage").global("torch", storage_type).str(storage_key).str("cpu").integer(storage_numel);
    op('t').op('Q');  // BINPERSID
    integer(offset).int_tuple(shape).int_tuple(strides);
    op(0x89);  // requires_grad False
    global("collections", "OrderedDict").op(')').op('R');
    return op('t').op('R');
  }
};

// {"w": tensor(...)} as a complete pickle.
std::string one_tensor_pickle(int64_t storage_numel, int64_t offset, const std::vector<int64_t>& shape,
                              const std::vector<int64_t>& strides) {
  Pickle p;
  p.op('}').str("w").tensor("0", storage_numel, offset, shape, strides).op('s').op('.');
  return p.bytes;
}

// An archive laid out as torch.save writes one: data.pkl, byteorder, data/<key> records.
void write_archive(const std::string& path, const std::string& pickle,
                   const std::vector<std::pair<std::string, std::string>>& records = {
                       {"0", std::string(24, '\0')}}) {
  caffe2::serialize::PyTorchStreamWriter writer(path);
  writer.writeRecord("data.pkl", pickle.data(), pickle.size());
  writer.writeRecord("byteorder", "little", 6);
  for (const auto& [key, bytes] : records) writer.writeRecord("data/" + key, bytes.data(), bytes.size());
  writer.writeEndOfFile();
}

uint32_t read_u32(const std::string& bytes, size_t at) {
  uint32_t v = 0;
  std::memcpy(&v, bytes.data() + at, 4);
  return v;
}
void write_u32(std::string& bytes, size_t at, uint32_t v) {
  std::memcpy(bytes.data() + at, &v, 4);
}

// Offset of the central-directory entry whose name ends with `suffix` (archive names carry a
// folder prefix).
size_t central_entry(const std::string& zip, const std::string& suffix) {
  for (size_t at = zip.find("PK\x01\x02"); at != std::string::npos; at = zip.find("PK\x01\x02", at + 4)) {
    uint16_t name_length = 0;
    std::memcpy(&name_length, zip.data() + at + 28, 2);
    std::string name = zip.substr(at + 46, name_length);
    if (name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
      return at;
  }
  FAIL("no central directory entry " << suffix);
  return 0;
}

// read_state_dict must throw kCheckpoint naming the file and containing `part`.
void expect_rejected(const std::string& path, const std::string& part) {
  tt::Error error = tt::test::expect_error([&] { ts::read_state_dict(path); });
  INFO(error.what());
  CHECK(error.code() == tt::ErrorCode::kCheckpoint);
  CHECK_THAT(std::string(error.what()), ContainsSubstring(path));
  CHECK_THAT(std::string(error.what()), ContainsSubstring(part));
}

void expect_pickle_rejected(const std::string& path, const std::string& pickle, const std::string& part) {
  write_archive(path, pickle);
  expect_rejected(path, part);
}

}  // namespace

TEST_CASE("torch_save: a well-formed crafted archive is read", "[torch_save]") {
  tt::test::TempDir dir;
  std::string path = dir / "ok.pt";
  write_archive(path, one_tensor_pickle(6, 1, {2, 2}, {3, 1}));
  ts::StateDict state = ts::read_state_dict(path);
  REQUIRE(state.tensors.count("w") == 1);
  const ts::TensorRecord& w = state.tensors.at("w");
  CHECK(w.shape == std::vector<int64_t>{2, 2});
  CHECK(w.strides == std::vector<int64_t>{3, 1});
  CHECK(w.dtype == torch::kFloat32);
  // The record's data starts 64-byte aligned; element 0 of the view is 1 float in.
  CHECK(w.file_offset % 64 == 4);

  // Zero-element tensors read nothing: any strides, an offset up to the storage's end.
  write_archive(path, one_tensor_pickle(6, 6, {0, 5}, {1000, 1}));
  CHECK(ts::read_state_dict(path).tensors.at("w").shape == std::vector<int64_t>{0, 5});
}

TEST_CASE("torch_save: self-referencing and deeply nested pickles are errors, not stack overflows",
          "[torch_save]") {
  tt::test::TempDir dir;
  std::string path = dir / "cycle.pt";

  SECTION("_rebuild_from_type_v2 whose argument list holds itself") {
    // L = [_rebuild_from_type_v2, None, L]; REDUCE(_rebuild_from_type_v2, L) calls L[0](*L[2]), ...
    Pickle p;
    p.global("torch._tensor", "_rebuild_from_type_v2").op('q').op(1);  // BINPUT 1
    p.op(']').op('q').op(0);                                           // L, BINPUT 0
    p.op('h').op(1).op('a');                                           // L.append(G)
    p.op('N').op('a');                                                 // L.append(None)
    p.op('h').op(0).op('a');                                           // L.append(L)
    p.op('R').op('.');
    expect_pickle_rejected(path, p.bytes, "_rebuild_from_type_v2 nests more than 16 deep");
  }
  SECTION("a list that contains itself, next to a valid tensor") {
    Pickle p;
    p.op('}').str("w").tensor("0", 6, 0, {6}, {1}).op('s');
    p.str("x").op(']').op(0x94).op('h').op(0).op('a').op('s').op('.');  // MEMOIZE, BINGET 0, APPEND
    expect_pickle_rejected(path, p.bytes, "a list contains itself");
  }
  SECTION("a dict that contains itself") {
    Pickle p;
    p.op('}').op(0x94).str("self").op('h').op(0).op('s');  // d["self"] = d
    p.str("w").tensor("0", 6, 0, {6}, {1}).op('s').op('.');
    expect_pickle_rejected(path, p.bytes, "a dict contains itself");
  }
  SECTION("lists nested 300,000 deep through the memo (a few bytes per level)") {
    // memo[0] = innermost; each level: BINGET 0, EMPTY_LIST, BINPUT 0, APPEND, POP.
    Pickle p;
    p.op('}').str("deep").op(']').op('q').op(0);
    for (int i = 0; i < 300'000; ++i) p.op('h').op(0).op(']').op('q').op(0).op('a').op('0');
    p.op('s').str("w").tensor("0", 6, 0, {6}, {1}).op('s').op('.');
    expect_pickle_rejected(path, p.bytes, "containers nest more than 1000 deep");
  }
  SECTION("1001 nested tuples built on the stack") {
    Pickle p;
    p.op('}').str("deep").op(')');
    for (int i = 0; i < 1001; ++i) p.op(0x85);  // TUPLE1
    p.op('s').op('.');
    expect_pickle_rejected(path, p.bytes, "containers nest more than 1000 deep");
  }
}

TEST_CASE("torch_save: pickles that would exhaust memory hit their limits", "[torch_save]") {
  tt::test::TempDir dir;
  std::string path = dir / "big.pt";
  SECTION("more than 2^20 values on the stack") {
    Pickle p;
    p.bytes.append((size_t{1} << 20) + 1, 'N');
    expect_pickle_rejected(path, p.bytes, "pickle stack grows past 1048576 values");
  }
  SECTION("more than 2^20 open MARKs") {
    Pickle p;
    p.bytes.append((size_t{1} << 20) + 1, '(');
    expect_pickle_rejected(path, p.bytes, "open MARKs");
  }
  SECTION("more than 2^22 memo entries") {
    Pickle p;
    p.op('N');
    p.bytes.append((size_t{1} << 22) + 1, static_cast<char>(0x94));  // MEMOIZE, each a new entry
    expect_pickle_rejected(path, p.bytes, "pickle memo grows past 4194304 entries");
  }
  SECTION("a memo entry that was never written") {
    Pickle p;
    p.op('h').op(7).op('.');
    expect_pickle_rejected(path, p.bytes, "memo entry 7, which was never written");
  }
  SECTION("a pickle without STOP") {
    Pickle p;
    p.op('}');
    expect_pickle_rejected(path, p.bytes, "pickle ends without STOP");
  }
  SECTION("a string longer than the pickle") {
    Pickle p;
    p.op('X').op(0xff).op(0xff).op(0xff).op(0x7f);
    expect_pickle_rejected(path, p.bytes, "pickle is truncated");
  }
}

TEST_CASE("torch_save: sizes, strides and offsets are checked without overflow", "[torch_save]") {
  tt::test::TempDir dir;
  std::string path = dir / "t.pt";
  const int64_t big = int64_t{1} << 32;
  SECTION("an element count that wraps to 0 (2^32 * 2^32, stride 0 so the extent fits)") {
    expect_pickle_rejected(path, one_tensor_pickle(6, 0, {big, big}, {0, 0}),
                           "element count: 4294967296 * 4294967296 overflows 64-bit arithmetic");
  }
  SECTION("an element count that wraps, with strides reaching past the storage") {
    expect_pickle_rejected(path, one_tensor_pickle(6, 0, {big, big}, {1, 1}),
                           "element count: 4294967296 * 4294967296 overflows");
  }
  SECTION("(size - 1) * stride overflows") {
    expect_pickle_rejected(path, one_tensor_pickle(6, 0, {int64_t{1} << 62, 3}, {4, 1}),
                           "stride extent: 4611686018427387903 * 4 overflows 64-bit arithmetic");
  }
  SECTION("offset + extent overflows") {
    expect_pickle_rejected(path, one_tensor_pickle(6, INT64_MAX, {2}, {1}), "overflows 64-bit arithmetic");
  }
  SECTION("a stride past the storage") {
    expect_pickle_rejected(
        path, one_tensor_pickle(6, 0, {2, 3}, {3, 2}),
        "size [2, 3], stride [3, 2] and offset 0 reach element 7 of a storage of 6 elements");
  }
  SECTION("an offset past the storage") {
    expect_pickle_rejected(path, one_tensor_pickle(6, 4, {3}, {1}), "reach element 6 of a storage of 6");
  }
  SECTION("a negative storage offset") {
    expect_pickle_rejected(path, one_tensor_pickle(6, -1, {2}, {1}), "negative storage offset -1");
  }
  SECTION("a negative size") {
    expect_pickle_rejected(path, one_tensor_pickle(6, 0, {-1, 3}, {3, 1}), "negative size -1 in dimension 0");
  }
  SECTION("a negative stride") {
    expect_pickle_rejected(path, one_tensor_pickle(6, 5, {2}, {-1}), "negative stride -1 in dimension 0");
  }
  SECTION("sizes and strides of different lengths") {
    expect_pickle_rejected(path, one_tensor_pickle(6, 0, {2, 3}, {1}), "size and stride differ in length");
  }
  SECTION("an empty tensor whose offset is past its storage") {
    expect_pickle_rejected(path, one_tensor_pickle(6, 100, {0}, {1}),
                           "storage offset 100 is past its storage");
  }
  SECTION("a storage larger than its record") {
    expect_pickle_rejected(path, one_tensor_pickle(100, 0, {6}, {1}),
                           "storage of 100 elements (400 bytes) does not fit its 24-byte record");
  }
  SECTION("a storage whose byte size overflows") {
    expect_pickle_rejected(path, one_tensor_pickle(int64_t{1} << 62, 0, {6}, {1}),
                           "storage byte size: 4611686018427387904 * 4 overflows 64-bit arithmetic");
  }
  SECTION("a negative storage size") {
    expect_pickle_rejected(path, one_tensor_pickle(-6, 0, {0}, {1}), "storage has a negative size");
  }
  SECTION("an unknown storage type") {
    Pickle p;
    p.op('}').str("w").tensor("0", 6, 0, {6}, {1}, "ComplexFloatStorage").op('s').op('.');
    expect_pickle_rejected(path, p.bytes, "storage type torch.ComplexFloatStorage is not supported");
  }
  SECTION("a storage record that is not in the archive") {
    Pickle p;
    p.op('}').str("w").tensor("7", 6, 0, {6}, {1}).op('s').op('.');
    expect_pickle_rejected(path, p.bytes, "storage record data/7 is missing");
  }
}

TEST_CASE("torch_save: truncated archives and zip directories that lie", "[torch_save]") {
  tt::test::TempDir dir;
  std::string path = dir / "zip.pt";
  write_archive(path, one_tensor_pickle(6, 0, {6}, {1}));
  std::string zip = tt::test::read_file(path);

  SECTION("truncated to half") {
    tt::test::write_file(path, zip.substr(0, zip.size() / 2));
    expect_rejected(path, "cannot read the zip archive");
  }
  SECTION("truncated to the local header only") {
    tt::test::write_file(path, zip.substr(0, 40));
    expect_rejected(path, "cannot read the zip archive");
  }
  SECTION("a storage record whose directory sizes run past the end of the file") {
    // Sizes that still pass miniz's own check (local header + 30 + size <= archive) but, after the
    // record's name and alignment padding, end beyond the file.
    size_t entry = central_entry(zip, "data/0");
    uint32_t local = read_u32(zip, entry + 42);
    uint32_t size = static_cast<uint32_t>(zip.size() - local - 30);
    write_u32(zip, entry + 20, size);  // compressed
    write_u32(zip, entry + 24, size);  // uncompressed
    tt::test::write_file(path, zip);
    tt::Error error = tt::test::expect_error([&] { ts::read_state_dict(path); });
    INFO(error.what());
    CHECK(error.code() == tt::ErrorCode::kCheckpoint);
    CHECK_THAT(std::string(error.what()), ContainsSubstring(path));
    // Whichever notices first: our bound, or miniz validating the directory.
    bool ours = std::string(error.what()).find("zip directory puts storage record data/0 at bytes") !=
                std::string::npos;
    bool miniz = std::string(error.what()).find("cannot read the zip archive") != std::string::npos;
    CHECK((ours || miniz));
  }
  SECTION("data.pkl whose uncompressed size claims 4 GB") {
    size_t entry = central_entry(zip, "data.pkl");
    write_u32(zip, entry + 24, 0xfffffff0u);
    tt::test::write_file(path, zip);
    tt::Error error = tt::test::expect_error([&] { ts::read_state_dict(path); });
    INFO(error.what());
    CHECK(error.code() == tt::ErrorCode::kCheckpoint);
    CHECK_THAT(std::string(error.what()), ContainsSubstring(path));
  }
  SECTION("a compressed storage record") {
    size_t entry = central_entry(zip, "data/0");
    uint32_t local = read_u32(zip, entry + 42);
    zip[local + 8] = 8;  // deflate, in the local header teletron reads
    tt::test::write_file(path, zip);
    expect_rejected(path, "is compressed (method 8)");
  }
  SECTION("a file that is not a zip archive") {
    tt::test::write_file(path, "PK\x03\x04 but nothing else");
    expect_rejected(path, "cannot read the zip archive");
  }
}
