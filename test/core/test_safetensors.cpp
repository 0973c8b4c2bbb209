// Tests for core/safetensors: round trips of every dtype, metadata, header-only and partial reads,
// a file laid out byte by byte the way Hugging Face's `safetensors` writes it, and the errors a
// damaged, truncated, missing or unwritable file must produce.
#include "core/safetensors.h"

#include <catch2/catch_test_macros.hpp>

#include <torch/torch.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <sys/stat.h>

#include "core/errors.h"
#include "test/test_util.h"

namespace st = tt::safetensors;

namespace {

// Runs `fn`, which must throw tt::Error, and returns the error for inspection.
bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::string le64(uint64_t value) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((value >> (8 * i)) & 0xff);
  return bytes;
}

// Length field + header (space-padded to 8 bytes, as Hugging Face pads) + data.
std::string assemble(std::string header, const std::string& data) {
  header.append((8 - header.size() % 8) % 8, ' ');
  return le64(header.size()) + header + data;
}

st::TensorMap every_dtype() {
  torch::manual_seed(7);
  st::TensorMap tensors;
  tensors["f64"] = torch::randn({3, 4}, torch::kFloat64);
  tensors["f32"] = torch::randn({2, 3, 5});
  tensors["f16"] = torch::randn({7}).to(torch::kFloat16);
  tensors["bf16"] = torch::randn({4, 3}).to(torch::kBFloat16);
  tensors["i64"] = torch::tensor({int64_t{1} << 40, int64_t{-5}, int64_t{0}});
  tensors["i32"] = torch::arange(-6, 6, torch::kInt32).reshape({3, 4});
  tensors["i16"] = torch::tensor({-32768, 32767, 5}, torch::kInt16);
  tensors["i8"] = torch::tensor({-128, 127, 0, 3}, torch::kInt8);
  tensors["u8"] = torch::tensor({0, 255, 17}, torch::kUInt8);
  tensors["bool"] = torch::tensor({true, false, true, true, false});
  tensors["scalar"] = torch::tensor(3.5f);                       // 0-d
  tensors["empty"] = torch::empty({0, 3});                         // no bytes
  tensors["strided"] = torch::arange(12, torch::kFloat32).reshape({3, 4}).t();  // non-contiguous
  return tensors;
}

}  // namespace

TEST_CASE("safetensors round-trips every dtype, 0-d and empty tensors", "[safetensors]") {
  tt::test::TempDir dir;
  std::string path = dir / "all.safetensors";
  st::TensorMap saved = every_dtype();
  st::save(path, saved);
  st::TensorMap loaded = st::load(path);
  REQUIRE(loaded.size() == saved.size());
  for (const auto& [name, tensor] : saved) {
    INFO(name);
    REQUIRE(loaded.count(name) == 1);
    CHECK(loaded[name].scalar_type() == tensor.scalar_type());
    CHECK(loaded[name].sizes() == tensor.sizes());
    CHECK(loaded[name].is_contiguous());
    CHECK(torch::equal(loaded[name], tensor));
  }
  CHECK(loaded["scalar"].dim() == 0);
  CHECK(loaded["empty"].numel() == 0);
}

TEST_CASE("safetensors header is padded to 8 bytes and tensors are aligned", "[safetensors]") {
  tt::test::TempDir dir;
  std::string path = dir / "a.safetensors";
  st::save(path, every_dtype(), {{"format", "pt"}});
  std::string bytes = tt::test::read_file(path);
  uint64_t header_size = 0;
  std::memcpy(&header_size, bytes.data(), 8);
  CHECK(header_size % 8 == 0);
  st::Header header = st::read_header(path);
  int64_t data_size = static_cast<int64_t>(bytes.size() - 8 - header_size);
  int64_t covered = 0;
  for (const auto& [name, info] : header.tensors) {
    INFO(name);
    int64_t element = torch::elementSize(info.dtype);
    CHECK(info.offset_begin % element == 0);
    covered += info.offset_end - info.offset_begin;
  }
  CHECK(covered == data_size);  // no gaps, no overlap
}

TEST_CASE("safetensors metadata round-trips", "[safetensors]") {
  tt::test::TempDir dir;
  std::string path = dir / "m.safetensors";
  std::map<std::string, std::string> metadata = {{"format", "pt"}, {"step", "1200"}, {"note", "a \"quoted\" value"}};
  st::save(path, {{"w", torch::ones({2})}}, metadata);
  std::map<std::string, std::string> loaded_metadata;
  st::load(path, {}, &loaded_metadata);
  CHECK(loaded_metadata == metadata);
  CHECK(st::read_header(path).metadata == metadata);
}

TEST_CASE("safetensors reads headers alone and subsets of tensors", "[safetensors]") {
  tt::test::TempDir dir;
  std::string path = dir / "h.safetensors";
  st::save(path, {{"a", torch::zeros({2, 3}, torch::kBFloat16)}, {"b", torch::ones({5}, torch::kInt64)}});
  st::Header header = st::read_header(path);
  REQUIRE(header.tensors.size() == 2);
  CHECK(header.tensors["a"].dtype == torch::kBFloat16);
  CHECK(header.tensors["a"].shape == std::vector<int64_t>{2, 3});
  CHECK(header.tensors["a"].offset_end - header.tensors["a"].offset_begin == 12);
  CHECK(header.tensors["b"].shape == std::vector<int64_t>{5});
  CHECK(header.metadata.empty());

  st::TensorMap only_b = st::load(path, {"b"});
  REQUIRE(only_b.size() == 1);
  CHECK(torch::equal(only_b["b"], torch::ones({5}, torch::kInt64)));

  tt::Error error = tt::test::expect_error([&] { st::load(path, {"b", "missing_weight"}); });
  CHECK(error.code() == tt::ErrorCode::kData);
  CHECK(contains(error.what(), "missing_weight"));
  CHECK(contains(error.what(), path));
}

TEST_CASE("safetensors loads a file laid out as Hugging Face writes it", "[safetensors]") {
  // Tensor order in the JSON differs from data order, __metadata__ comes first, the header is
  // space-padded, values are little-endian.
  std::string header =
      R"({"__metadata__":{"format":"pt"},"b":{"dtype":"I32","shape":[2],"data_offsets":[0,8]},)"
      R"("a":{"dtype":"F32","shape":[1,2],"data_offsets":[8,16]},)"
      R"("c":{"dtype":"BF16","shape":[],"data_offsets":[16,18]},)"
      R"("d":{"dtype":"BOOL","shape":[3],"data_offsets":[18,21]}})";
  std::string data("\x01\x00\x00\x00\xfe\xff\xff\xff"  // b = [1, -2]
                   "\x00\x00\x80\x3f\x00\x00\x20\xc0"  // a = [[1.0, -2.5]]
                   "\x80\x3f"                          // c = 1.0 (bf16)
                   "\x01\x00\x01",                     // d = [true, false, true]
                   21);
  tt::test::TempDir dir;
  std::string path = dir / "hf.safetensors";
  tt::test::write_file(path, assemble(header, data));

  std::map<std::string, std::string> metadata;
  st::TensorMap tensors = st::load(path, {}, &metadata);
  CHECK(metadata == std::map<std::string, std::string>{{"format", "pt"}});
  CHECK(torch::equal(tensors["b"], torch::tensor({1, -2}, torch::kInt32)));
  CHECK(torch::equal(tensors["a"], torch::tensor({1.0f, -2.5f}).reshape({1, 2})));
  CHECK(tensors["c"].dim() == 0);
  CHECK(tensors["c"].scalar_type() == torch::kBFloat16);
  CHECK(tensors["c"].item<float>() == 1.0f);
  CHECK(torch::equal(tensors["d"], torch::tensor({true, false, true})));
}

TEST_CASE("safetensors loads bytes written by Python's safetensors 0.8.0", "[safetensors]") {
  // @generated by:
  //   save_file({"zeta": torch.tensor([0, 1, 2, -3], dtype=torch.int32),
  //              "alpha": torch.tensor([[1.0], [2.0], [3.0]], dtype=torch.bfloat16),
  //              "b": torch.tensor([True, False, True]), "s": torch.tensor(1.5, dtype=torch.float64),
  //              "e": torch.empty(0, 2)}, "py.safetensors", metadata={"format": "pt", "x": "y"})
  // Note the unsorted metadata, the header order that follows the data order, and the 6 spaces.
  std::string header =
      R"({"__metadata__":{"x":"y","format":"pt"},"s":{"dtype":"F64","shape":[],"data_offsets":[0,8]},)"
      R"("e":{"dtype":"F32","shape":[0,2],"data_offsets":[8,8]},)"
      R"("zeta":{"dtype":"I32","shape":[4],"data_offsets":[8,24]},)"
      R"("alpha":{"dtype":"BF16","shape":[3,1],"data_offsets":[24,30]},)"
      R"("b":{"dtype":"BOOL","shape":[3],"data_offsets":[30,33]}}      )";
  REQUIRE(header.size() == 328);
  const unsigned char data[] = {0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xf8, 0x3f, 0x00, 0x00, 0x00,
                                0x00, 0x01, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0xfd, 0xff,
                                0xff, 0xff, 0x80, 0x3f, 0x00, 0x40, 0x40, 0x40, 0x01, 0x00, 0x01};
  tt::test::TempDir dir;
  std::string path = dir / "py.safetensors";
  tt::test::write_file(path, le64(328) + header + std::string(reinterpret_cast<const char*>(data), sizeof(data)));

  std::map<std::string, std::string> metadata;
  st::TensorMap tensors = st::load(path, {}, &metadata);
  CHECK(metadata == std::map<std::string, std::string>{{"format", "pt"}, {"x", "y"}});
  CHECK(tensors["s"].dim() == 0);
  CHECK(tensors["s"].item<double>() == 1.5);
  CHECK(tensors["e"].sizes() == torch::IntArrayRef({0, 2}));
  CHECK(torch::equal(tensors["zeta"], torch::tensor({0, 1, 2, -3}, torch::kInt32)));
  CHECK(torch::equal(tensors["alpha"], torch::tensor({1.0f, 2.0f, 3.0f}).reshape({3, 1}).to(torch::kBFloat16)));
  CHECK(torch::equal(tensors["b"], torch::tensor({true, false, true})));
}

TEST_CASE("safetensors dtype names", "[safetensors]") {
  CHECK(st::dtype_name(torch::kBFloat16) == "BF16");
  CHECK(st::dtype_from_name("U8") == torch::kUInt8);
  tt::Error error = tt::test::expect_error([] { st::dtype_from_name("F8_E4M3"); });
  CHECK(error.code() == tt::ErrorCode::kData);
  CHECK(contains(error.what(), "F8_E4M3"));
  CHECK(tt::test::expect_error([] { st::dtype_name(torch::kComplexFloat); }).code() == tt::ErrorCode::kData);
}

TEST_CASE("safetensors read errors name the path and the problem", "[safetensors]") {
  tt::test::TempDir dir;
  auto check_data_error = [&](const std::string& name, const std::string& bytes, const std::string& part) {
    std::string path = dir / name;
    tt::test::write_file(path, bytes);
    tt::Error error = tt::test::expect_error([&] { st::load(path); });
    INFO(error.what());
    CHECK(error.code() == tt::ErrorCode::kData);
    CHECK(contains(error.what(), path));
    CHECK(contains(error.what(), part));
    CHECK(tt::test::expect_error([&] { st::read_header(path); }).code() == tt::ErrorCode::kData);
  };

  SECTION("missing file is kIo") {
    std::string path = dir / "nope.safetensors";
    tt::Error error = tt::test::expect_error([&] { st::load(path); });
    CHECK(error.code() == tt::ErrorCode::kIo);
    CHECK(contains(error.what(), path));
    CHECK(tt::test::expect_error([&] { st::read_header(path); }).code() == tt::ErrorCode::kIo);
  }
  SECTION("a directory is kIo") {
    CHECK(tt::test::expect_error([&] { st::load(dir.path()); }).code() == tt::ErrorCode::kIo);
  }
  SECTION("zero-length file") { check_data_error("zero.safetensors", "", "too short"); }
  SECTION("header length beyond the file") {
    check_data_error("long.safetensors", le64(1000) + "{}", "exceeds");
  }
  SECTION("garbage header") {
    check_data_error("garbage.safetensors", le64(16) + "this is not json", "not valid JSON");
  }
  SECTION("header that is JSON but not an object") {
    check_data_error("array.safetensors", assemble("[1, 2]", ""), "not a JSON object");
  }
  SECTION("offsets beyond the file") {
    std::string header = R"({"w":{"dtype":"F32","shape":[100],"data_offsets":[0,400]}})";
    check_data_error("beyond.safetensors", assemble(header, std::string(8, '\0')), "beyond the data section");
  }
  SECTION("offsets inconsistent with the shape") {
    std::string header = R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})";
    check_data_error("size.safetensors", assemble(header, std::string(8, '\0')), "needs 12");
  }
  SECTION("negative shape") {
    std::string header = R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}})";
    check_data_error("neg.safetensors", assemble(header, ""), "shape");
  }
  SECTION("unsupported dtype") {
    std::string header = R"({"w":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}})";
    check_data_error("f8.safetensors", assemble(header, std::string(2, '\0')), "F8_E4M3");
  }
  SECTION("non-string metadata") {
    check_data_error("meta.safetensors", assemble(R"({"__metadata__":{"n":1}})", ""), "__metadata__");
  }
  SECTION("truncated data section") {
    std::string path = dir / "cut.safetensors";
    st::save(path, {{"w", torch::randn({64})}});
    std::filesystem::resize_file(path, std::filesystem::file_size(path) - 4);
    tt::Error error = tt::test::expect_error([&] { st::load(path); });
    CHECK(error.code() == tt::ErrorCode::kData);
    CHECK(contains(error.what(), "truncated"));
  }
  SECTION("truncated inside the header") {
    std::string path = dir / "cut_header.safetensors";
    st::save(path, {{"w", torch::randn({64})}});
    std::filesystem::resize_file(path, 12);
    CHECK(tt::test::expect_error([&] { st::load(path); }).code() == tt::ErrorCode::kData);
  }
}

TEST_CASE("safetensors write errors are kIo", "[safetensors]") {
  SECTION("missing folder") {
    tt::test::TempDir dir;
    std::string path = dir / "no/such/folder/x.safetensors";
    tt::Error error = tt::test::expect_error([&] { st::save(path, {{"w", torch::ones({2})}}); });
    CHECK(error.code() == tt::ErrorCode::kIo);
    CHECK(contains(error.what(), path));
  }
  SECTION("disk full (/dev/full)") {
    struct stat before {};
    if (::stat("/dev/full", &before) != 0 || !S_ISCHR(before.st_mode)) SKIP("no /dev/full device");
    tt::Error error = tt::test::expect_error([] { st::save("/dev/full", {{"w", torch::ones({1024})}}); });
    CHECK(error.code() == tt::ErrorCode::kIo);
    CHECK(contains(error.what(), "/dev/full"));
    CHECK(contains(error.what(), "short write"));
    CHECK(contains(error.what(), "disk full?"));
    struct stat after {};
    CHECK(::stat("/dev/full", &after) == 0);  // a device is never "cleaned up"
    CHECK(S_ISCHR(after.st_mode));
  }
  SECTION("unsupported dtype is kData") {
    tt::test::TempDir dir;
    auto save_complex = [&] { st::save(dir / "c.safetensors", {{"z", torch::ones({2}, torch::kComplexFloat)}}); };
    CHECK(tt::test::expect_error(save_complex).code() == tt::ErrorCode::kData);
  }
}

TEST_CASE("safetensors rejects hostile headers with a message, never a crash or an out-of-bounds read",
          "[safetensors]") {
  tt::test::TempDir dir;
  auto check_data_error = [&](const std::string& bytes, const std::string& part) {
    std::string path = dir / "hostile.safetensors";
    tt::test::write_file(path, bytes);
    for (int reader = 0; reader < 2; ++reader) {
      tt::Error error =
          tt::test::expect_error([&] { reader == 0 ? (void)st::load(path) : (void)st::read_header(path); });
      INFO(error.what());
      CHECK(error.code() == tt::ErrorCode::kData);
      CHECK(contains(error.what(), path));
      CHECK(contains(error.what(), part));
    }
    // The in-memory entry point (for fuzzing) says the same.
    tt::Error error = tt::test::expect_error(
        [&] { st::parse_header(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "in-memory"); });
    CHECK(error.code() == tt::ErrorCode::kData);
    CHECK(contains(error.what(), part));
  };

  SECTION("a header length over the 100 MB limit is rejected before anything is allocated") {
    check_data_error(le64(100'000'001) + "{}", "exceeds the format's limit of 100000000 bytes");
    check_data_error(le64(~uint64_t{0}) + "{}", "exceeds the format's limit");
  }
  SECTION("overlapping data_offsets") {
    std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                         R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
    check_data_error(assemble(header, std::string(12, '\0')),
                     "tensor \"b\" has data_offsets [4, 12] overlapping tensor \"a\" [0, 8]");
  }
  SECTION("data_offsets with begin after end") {
    std::string header = R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})";
    check_data_error(assemble(header, std::string(8, '\0')), "data_offsets [8, 4] with begin after end");
  }
  SECTION("negative data_offsets") {
    std::string header = R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})";
    check_data_error(assemble(header, std::string(8, '\0')), "not non-negative integers");
  }
  SECTION("data_offsets past the end of the file, at the top of uint64") {
    std::string header =
        R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[18446744073709551614,18446744073709551615]}})";
    check_data_error(assemble(header, std::string(8, '\0')), "beyond the data section");
  }
  SECTION("an element count that overflows 64 bits") {
    std::string header = R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})";
    check_data_error(assemble(header, ""), "has shape [4294967296, 4294967296], too large to address");
  }
  SECTION("a byte size that overflows 64 bits") {
    std::string header = R"({"w":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,0]}})";
    check_data_error(assemble(header, ""), "too large to address");
  }
  SECTION("an empty tensor whose contiguous strides would overflow") {
    std::string header = R"({"w":{"dtype":"F32","shape":[0,4294967296,4294967296],"data_offsets":[0,0]}})";
    check_data_error(assemble(header, ""), "too large to address");
  }
  SECTION("a dimension above int64, followed by a deeply nested one (not printed)") {
    std::string nested = std::string(100'000, '[') + std::string(100'000, ']');
    std::string header =
        R"({"w":{"dtype":"F32","shape":[9223372036854775808,)" + nested + R"(],"data_offsets":[0,0]}})";
    check_data_error(assemble(header, ""), "has shape [9223372036854775808, ?], too large to address");
  }
  SECTION("a fractional shape entry") {
    std::string header = R"({"w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,6]}})";
    check_data_error(assemble(header, std::string(8, '\0')), "not a non-negative integer");
  }
  SECTION("a dtype that is not a string") {
    std::string header = R"({"w":{"dtype":4,"shape":[1],"data_offsets":[0,4]}})";
    check_data_error(assemble(header, std::string(8, '\0')), "has no string \"dtype\"");
  }
  SECTION("a dtype name in the wrong case") {
    std::string header = R"({"w":{"dtype":"f32","shape":[1],"data_offsets":[0,4]}})";
    check_data_error(assemble(header, std::string(8, '\0')),
                     "has dtype f32, which teletron does not support");
  }
  SECTION("data_offsets that are not a pair") {
    std::string header = R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}})";
    check_data_error(assemble(header, std::string(8, '\0')), "has no \"data_offsets\" pair");
  }
  SECTION("JSON nested 1,000,000 deep") {
    std::string deep = std::string(1'000'000, '[') + std::string(1'000'000, ']');
    check_data_error(assemble(R"({"__metadata__":)" + deep + "}", ""), "__metadata__ is not a JSON object");
  }
  SECTION("empty tensors may share an offset; a tensor may end exactly at the end of the file") {
    std::string header = R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},)"
                         R"("b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                         R"("c":{"dtype":"F32","shape":[0,3],"data_offsets":[8,8]}})";
    std::string path = dir / "fine.safetensors";
    tt::test::write_file(path, assemble(header, std::string(8, '\0')));
    st::TensorMap tensors = st::load(path);
    CHECK(tensors.at("b").numel() == 2);
    CHECK(tensors.at("c").sizes() == torch::IntArrayRef({0, 3}));
    CHECK(st::read_header(path).data_start == 8 + 168);
  }
}
