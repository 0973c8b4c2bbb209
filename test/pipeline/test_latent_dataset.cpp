// Tests for pipeline/latent_dataset: a good manifest loads and batches with fp32/bool conversion;
// every kind of bad row stops construction with kData naming the manifest line, the file and the
// problem; epoch_order is a deterministic permutation pinned to platform-independent values.
#include "pipeline/latent_dataset.h"

#include <catch2/catch_test_macros.hpp>

#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <limits>
#include <numeric>

#include "core/errors.h"
#include "core/safetensors.h"
#include "test/test_util.h"

namespace st = tt::safetensors;

namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Small dimensions: C = 4, latents (4, 2, 3, 5), L = 7, text_dim = 8, pooled_dim = 6.
tt::LatentDatasetOptions small_options(const std::string& manifest) {
  tt::LatentDatasetOptions options;
  options.manifest = manifest;
  options.latent_channels = 4;
  options.text_dim = 8;
  options.pooled_dim = 6;
  return options;
}

st::TensorMap good_row(int64_t seed, torch::Dtype latent_dtype = torch::kBFloat16,
                       torch::Dtype mask_dtype = torch::kUInt8, int64_t length = 7) {
  torch::manual_seed(seed);
  st::TensorMap row;
  row["latents"] = torch::randn({4, 2, 3, 5}).to(latent_dtype);
  row["text_states"] = torch::randn({length, 8}).to(torch::kBFloat16);
  row["text_mask"] = (torch::arange(length) < 4 + seed % 3).to(mask_dtype);
  row["pooled"] = torch::randn({6});
  return row;
}

// A folder with rows a.safetensors, b.safetensors (good) and a manifest written from `lines`.
struct Fixture {
  tt::test::TempDir dir{"tt_latents"};
  std::string manifest = dir / "train.jsonl";
  Fixture() {
    st::save(dir / "a.safetensors", good_row(1, torch::kBFloat16, torch::kUInt8));
    st::save(dir / "b.safetensors", good_row(2, torch::kFloat32, torch::kBool));
  }
  void write_manifest(const std::string& text) { tt::test::write_file(manifest, text); }
  // Writes `tensors` as bad.safetensors and a manifest whose line 2 names it.
  tt::Error bad_row(const st::TensorMap& tensors) {
    st::save(dir / "bad.safetensors", tensors);
    write_manifest("{\"latents\": \"a.safetensors\"}\n{\"latents\": \"bad.safetensors\"}\n");
    return construct_error();
  }
  tt::Error construct_error() {
    return tt::test::expect_error([&] { tt::LatentDataset dataset(small_options(manifest)); });
  }
};

void check_row_error(const tt::Error& error, const std::string& where, const std::string& problem) {
  INFO(error.what());
  CHECK(error.code() == tt::ErrorCode::kData);
  CHECK(contains(error.what(), where));
  CHECK(contains(error.what(), problem));
  CHECK_FALSE(error.hint().empty());
}

}  // namespace

TEST_CASE("latent dataset loads a good manifest and batches", "[latent_dataset]") {
  Fixture f;
  std::filesystem::create_directory(f.dir / "sub");
  st::save(f.dir / "sub/c.safetensors", good_row(3, torch::kFloat16, torch::kInt64));
  f.write_manifest("{\"latents\": \"a.safetensors\"}\n"
                   "\n"
                   "{\"latents\": \"sub/c.safetensors\", \"caption\": \"ignored\"}\n"
                   "   \n"
                   "{\"latents\": \"" + (f.dir / "b.safetensors") + "\"}\n");
  tt::LatentDataset dataset(small_options(f.manifest));
  REQUIRE(dataset.size() == 3);
  CHECK(dataset.latent_shape() == std::vector<int64_t>{4, 2, 3, 5});
  CHECK(dataset.text_length() == 7);
  CHECK(dataset.file(1) == f.dir / "sub/c.safetensors");

  tt::LatentSample sample = dataset.get(0);
  st::TensorMap want = good_row(1, torch::kBFloat16, torch::kUInt8);
  CHECK(sample.latents.scalar_type() == torch::kFloat32);
  CHECK(sample.text_states.scalar_type() == torch::kFloat32);
  CHECK(sample.text_mask.scalar_type() == torch::kBool);
  CHECK(sample.pooled.scalar_type() == torch::kFloat32);
  CHECK(torch::equal(sample.latents, want["latents"].to(torch::kFloat32)));
  CHECK(torch::equal(sample.text_mask, want["text_mask"].to(torch::kBool)));
  CHECK(torch::equal(sample.pooled, want["pooled"]));

  tt::LatentBatch batch = dataset.get_batch({2, 1, 0});
  CHECK(batch.latents.sizes() == torch::IntArrayRef({3, 4, 2, 3, 5}));
  CHECK(batch.text_states.sizes() == torch::IntArrayRef({3, 7, 8}));
  CHECK(batch.text_mask.sizes() == torch::IntArrayRef({3, 7}));
  CHECK(batch.text_mask.scalar_type() == torch::kBool);
  CHECK(batch.pooled.sizes() == torch::IntArrayRef({3, 6}));
  CHECK(torch::equal(batch.latents[2], sample.latents));
  CHECK(torch::equal(batch.text_mask[1], good_row(3, torch::kFloat16, torch::kInt64)["text_mask"].to(torch::kBool)));
}

TEST_CASE("latent dataset: rows of other latent shapes are buckets of their own", "[latent_dataset]") {
  Fixture f;
  st::TensorMap wide = good_row(3);
  wide["latents"] = torch::randn({4, 2, 6, 10});
  st::save(f.dir / "wide.safetensors", wide);
  f.write_manifest("{\"latents\": \"a.safetensors\"}\n{\"latents\": \"wide.safetensors\"}\n"
                   "{\"latents\": \"b.safetensors\"}\n");
  tt::LatentDataset dataset(small_options(f.manifest));
  REQUIRE(dataset.size() == 3);
  CHECK(dataset.bucket_shapes() == std::vector<std::vector<int64_t>>{{4, 2, 3, 5}, {4, 2, 6, 10}});
  CHECK(dataset.row_buckets() == std::vector<int64_t>{0, 1, 0});
  CHECK(dataset.get_batch({0, 2}).latents.sizes() == torch::IntArrayRef({2, 4, 2, 3, 5}));
  CHECK(dataset.get_batch({1}).latents.sizes() == torch::IntArrayRef({1, 4, 2, 6, 10}));
  // One shape: no buckets (the trainer then takes samples in plain epoch order).
  f.write_manifest("{\"latents\": \"a.safetensors\"}\n{\"latents\": \"b.safetensors\"}\n");
  CHECK(tt::LatentDataset(small_options(f.manifest)).row_buckets().empty());
}

TEST_CASE("latent dataset rejects bad rows naming the line and the file", "[latent_dataset]") {
  Fixture f;
  SECTION("missing file") {
    f.write_manifest("{\"latents\": \"a.safetensors\"}\n{\"latents\": \"nope.safetensors\"}\n");
    check_row_error(f.construct_error(), "train.jsonl:2: nope.safetensors", "file not found");
  }
  SECTION("wrong text_states width") {
    st::TensorMap row = good_row(4);
    row["text_states"] = torch::zeros({7, 5});
    check_row_error(f.bad_row(row), "train.jsonl:2: bad.safetensors: ", "text_states has shape [7, 5], expected [L, 8]");
  }
  SECTION("wrong latent channels") {
    st::TensorMap row = good_row(4);
    row["latents"] = torch::zeros({3, 2, 3, 5});
    check_row_error(f.bad_row(row), "train.jsonl:2: bad.safetensors", "latents has shape [3, 2, 3, 5], expected [4, T', H', W']");
  }
  SECTION("wrong latent rank") {
    st::TensorMap row = good_row(4);
    row["latents"] = torch::zeros({4, 3, 5});
    check_row_error(f.bad_row(row), "train.jsonl:2: bad.safetensors", "latents has shape [4, 3, 5]");
  }
  SECTION("latents as I64") {
    st::TensorMap row = good_row(4);
    row["latents"] = torch::zeros({4, 2, 3, 5}, torch::kInt64);
    check_row_error(f.bad_row(row), "train.jsonl:2: bad.safetensors", "latents has dtype I64, expected one of F32, BF16, F16");
  }
  SECTION("text_mask as F32") {
    st::TensorMap row = good_row(4);
    row["text_mask"] = torch::ones({7});
    check_row_error(f.bad_row(row), "train.jsonl:2: bad.safetensors", "text_mask has dtype F32");
  }
  SECTION("text_mask length differs from text_states") {
    st::TensorMap row = good_row(4);
    row["text_mask"] = torch::ones({6}, torch::kBool);
    check_row_error(f.bad_row(row), "train.jsonl:2: bad.safetensors", "text_mask has shape [6], expected [7]");
  }
  SECTION("wrong pooled width") {
    st::TensorMap row = good_row(4);
    row["pooled"] = torch::zeros({5});
    check_row_error(f.bad_row(row), "train.jsonl:2: bad.safetensors", "pooled has shape [5], expected [6]");
  }
  SECTION("missing tensor") {
    st::TensorMap row = good_row(4);
    row.erase("pooled");
    check_row_error(f.bad_row(row), "train.jsonl:2: bad.safetensors", "has no tensor \"pooled\"");
  }
  SECTION("L differs between rows") {
    check_row_error(f.bad_row(good_row(4, torch::kFloat32, torch::kBool, 9)), "train.jsonl:2: bad.safetensors",
                    "text_states has L = 9, expected L = 7 like line 1");
  }
  SECTION("not a safetensors file") {
    tt::test::write_file(f.dir / "junk.safetensors", "hello");
    f.write_manifest("{\"latents\": \"a.safetensors\"}\n\n{\"latents\": \"junk.safetensors\"}\n");
    check_row_error(f.construct_error(), "train.jsonl:3: ", "junk.safetensors");
  }
  SECTION("missing key") {
    f.write_manifest("{\"latents\": \"a.safetensors\"}\n{\"video\": \"clip.mp4\"}\n");
    check_row_error(f.construct_error(), "train.jsonl:2: ", "missing key \"latents\"");
  }
  SECTION("invalid JSON") {
    f.write_manifest("{\"latents\": \"a.safetensors\"}\n\n\n{\"latents\": \n");
    check_row_error(f.construct_error(), "train.jsonl:4: ", "invalid JSON");
  }
  SECTION("a row that is not an object") {
    f.write_manifest("[\"a.safetensors\"]\n");
    check_row_error(f.construct_error(), "train.jsonl:1: ", "expected a JSON object");
  }
  SECTION("empty manifest") {
    f.write_manifest("\n  \n");
    check_row_error(f.construct_error(), "train.jsonl", "manifest has no rows");
  }
  SECTION("manifest not found") {
    f.manifest = f.dir / "missing.jsonl";
    check_row_error(f.construct_error(), "missing.jsonl", "manifest not found");
  }
}

TEST_CASE("latent dataset get names the row when a file disappears", "[latent_dataset]") {
  Fixture f;
  f.write_manifest("{\"latents\": \"a.safetensors\"}\n{\"latents\": \"b.safetensors\"}\n");
  tt::LatentDataset dataset(small_options(f.manifest));
  std::filesystem::remove(f.dir / "b.safetensors");
  tt::Error error = tt::test::expect_error([&] { dataset.get(1); });
  CHECK(error.code() == tt::ErrorCode::kData);
  CHECK(contains(error.what(), "train.jsonl:2: "));
  CHECK(contains(error.what(), "b.safetensors"));
}

TEST_CASE("epoch_order is a deterministic permutation", "[latent_dataset]") {
  std::vector<int64_t> order = tt::epoch_order(1000, 42, 0);
  std::vector<int64_t> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> iota(1000);
  std::iota(iota.begin(), iota.end(), 0);
  CHECK(sorted == iota);
  CHECK(order != iota);
  CHECK(tt::epoch_order(1000, 42, 0) == order);
  CHECK(tt::epoch_order(1000, 42, 1) != order);
  CHECK(tt::epoch_order(1000, 43, 0) != order);
  // Torch's global generator plays no part.
  torch::manual_seed(1);
  CHECK(tt::epoch_order(1000, 42, 0) == order);

  CHECK(tt::epoch_order(0, 42, 0).empty());
  CHECK(tt::epoch_order(1, 42, 5) == std::vector<int64_t>{0});
  // Pinned values (computed independently from the SplitMix64 + Fisher–Yates definition) keep the
  // order identical across platforms and releases, so resumed runs see the same data.
  CHECK(tt::epoch_order(10, 42, 0) == std::vector<int64_t>{4, 6, 7, 0, 9, 5, 1, 2, 3, 8});
  CHECK(tt::epoch_order(10, 42, 1) == std::vector<int64_t>{6, 9, 4, 5, 8, 3, 1, 0, 7, 2});
  CHECK(tt::epoch_order(10, 7, 3) == std::vector<int64_t>{1, 9, 3, 4, 6, 8, 7, 2, 0, 5});
}

TEST_CASE("latent dataset rejects an all-zero text mask and non-finite values when a row is loaded",
          "[latent_dataset]") {
  Fixture f;
  // Row 2 passes the header checks; its values are wrong, which get() finds.
  auto load_error = [&](const st::TensorMap& tensors) {
    st::save(f.dir / "bad.safetensors", tensors);
    f.write_manifest("{\"latents\": \"a.safetensors\"}\n{\"latents\": \"bad.safetensors\"}\n");
    tt::LatentDataset dataset(small_options(f.manifest));
    CHECK_NOTHROW(dataset.get(0));
    return tt::test::expect_error([&] { (void)dataset.get(1); });
  };
  SECTION("all-zero text_mask") {
    st::TensorMap row = good_row(4);
    row["text_mask"] = torch::zeros({7}, torch::kUInt8);
    check_row_error(load_error(row), "train.jsonl:2: ", "bad.safetensors: text_mask marks no token");
  }
  SECTION("no text tokens at all (as a --text-embeddings file may have)") {
    tt::LatentSample empty;
    empty.text_states = torch::zeros({0, 64});
    empty.text_mask = torch::zeros({0}, torch::kBool);
    CHECK(tt::check_sample_values(empty) == "text_mask has no tokens (length 0): the sample has no text to condition on");
  }
  SECTION("NaN in latents") {
    st::TensorMap row = good_row(4, torch::kFloat32);
    row["latents"].view({-1})[17] = std::numeric_limits<float>::quiet_NaN();
    check_row_error(load_error(row), "train.jsonl:2: ",
                    "bad.safetensors: latents holds 1 non-finite value (NaN or inf; the first at flat index 17)");
  }
  SECTION("inf in text_states") {
    st::TensorMap row = good_row(4);
    row["text_states"] = row["text_states"].to(torch::kFloat32);
    row["text_states"][3][2] = -std::numeric_limits<float>::infinity();
    row["text_states"][5][0] = std::numeric_limits<float>::infinity();
    check_row_error(load_error(row), "train.jsonl:2: ", "bad.safetensors: text_states holds 2 non-finite values");
  }
  SECTION("NaN in pooled") {
    st::TensorMap row = good_row(4);
    row["pooled"][0] = std::numeric_limits<float>::quiet_NaN();
    check_row_error(load_error(row), "train.jsonl:2: ", "bad.safetensors: pooled holds 1 non-finite value");
  }
}

TEST_CASE("check_sample_values passes a good sample and skips tensors that are not there", "[latent_dataset]") {
  tt::LatentSample sample;
  sample.text_states = torch::randn({3, 4});
  sample.text_mask = torch::tensor({1, 0, 0}).to(torch::kBool);
  sample.pooled = torch::randn({5});
  CHECK(tt::check_sample_values(sample).empty());  // no latents yet (a video sample before its VAE encode)
  sample.latents = torch::full({2, 2}, std::numeric_limits<float>::infinity());
  CHECK(tt::check_sample_values(sample) == "latents holds 4 non-finite values (NaN or inf; the first at flat index 0)");
}
