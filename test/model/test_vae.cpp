// The HunyuanVideo VAE encoder against diffusers (test/fixtures/hunyuan_vae_parity.safetensors, from
// scripts/make_vae_fixtures.py): fp32 CPU moments within 1e-4 relative; latent shapes and the
// frame/size rules; the tiny preset runs.
#include "model/vae.h"

#include <catch2/catch_test_macros.hpp>
#include <nlohmann/json.hpp>

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "core/errors.h"
#include "core/profiler.h"
#include "core/safetensors.h"
#include "model/vae_blocks.h"
#include "model/vae_flops.h"
#include "model/weights.h"
#include "test/test_util.h"

namespace {

constexpr const char* kFixture = TELETRON_SOURCE_DIR "/test/fixtures/hunyuan_vae_parity.safetensors";

double relative_error(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kFloat32) - b).abs().max().item<double>() / b.abs().max().item<double>();
}

// The parity fixture: diffusers' encoder weights loaded into a teletron VAE (fp32, CPU, eval), the
// tensors (input.sample, output.moments, output.moments_tiled) and the tiling it used.
struct ParityFixture {
  tt::HunyuanVae vae{nullptr};
  tt::safetensors::TensorMap tensors;
  tt::VaeTiling tiling;
};

ParityFixture load_parity_fixture() {
  ParityFixture f;
  std::map<std::string, std::string> metadata;
  f.tensors = tt::safetensors::load(kFixture, {}, &metadata);
  f.vae = tt::HunyuanVae(tt::hunyuan_vae_config_from_json(metadata.at("config"), kFixture));
  f.vae->eval();
  tt::safetensors::TensorMap weights;
  for (const auto& [name, tensor] : f.tensors)
    if (name.rfind("weight.", 0) == 0) weights[name.substr(7)] = tensor;
  tt::load_weights_into(f.vae->diffusers_parameters(), weights, kFixture);
  const nlohmann::json json = nlohmann::json::parse(metadata.at("tiling"));
  f.tiling.temporal = true;
  f.tiling.spatial = true;
  f.tiling.min_frames = json.at("tile_sample_min_num_frames");
  f.tiling.stride_frames = json.at("tile_sample_stride_num_frames");
  f.tiling.min_height = json.at("tile_sample_min_height");
  f.tiling.min_width = json.at("tile_sample_min_width");
  f.tiling.stride_height = json.at("tile_sample_stride_height");
  f.tiling.stride_width = json.at("tile_sample_stride_width");
  return f;
}

}  // namespace

TEST_CASE("VAE encoder: fp32 moments match diffusers within 1e-4", "[vae][parity]") {
  ParityFixture f = load_parity_fixture();
  tt::HunyuanVae& vae = f.vae;
  const auto& tensors = f.tensors;
  CHECK(vae->config().block_out_channels == std::vector<int64_t>{8, 16, 16, 16});
  torch::NoGradGuard no_grad;
  const torch::Tensor moments = vae->moments(tensors.at("input.sample"));
  const torch::Tensor& expected = tensors.at("output.moments");
  REQUIRE(moments.sizes() == expected.sizes());
  const double error = relative_error(moments, expected);
  INFO("relative error " << error);
  CHECK(error <= 1e-4);
  const torch::Tensor latents = vae->encode_mean(tensors.at("input.sample"));
  CHECK(torch::allclose(latents, expected.narrow(1, 0, 4) * 0.476986, 1e-4, 1e-5));
}

TEST_CASE("VAE encoder: the resnet biases folded into the norm and the residual sum give the same moments",
          "[vae][parity]") {
  ParityFixture f = load_parity_fixture();
  torch::NoGradGuard no_grad;
  const torch::Tensor& input = f.tensors.at("input.sample");
  const torch::Tensor expected = f.vae->moments(input);
  tt::VaeRuntime folded;
  folded.fold_bias = true;
  f.vae->set_runtime(folded);
  const torch::Tensor moments = f.vae->moments(input);
  f.vae->set_runtime(tt::VaeRuntime{});
  // The fixture's biases are not small against its activations: leaving any of them out (the
  // shortcut's, conv1's) moves the moments by far more than fp32 rounding.
  const double error = relative_error(moments, expected);
  INFO("relative difference " << error);
  CHECK(error <= 1e-5);
}

TEST_CASE(
    "VAE encoder: the down blocks' last sums written into the downsamplers' padded inputs change no value",
    "[vae][parity]") {
  ParityFixture f = load_parity_fixture();
  torch::NoGradGuard no_grad;
  const torch::Tensor& input = f.tensors.at("input.sample");
  for (const bool fold : {false, true}) {
    tt::VaeRuntime runtime;
    runtime.fold_bias = fold;
    f.vae->set_runtime(runtime);
    const torch::Tensor expected = f.vae->moments(input);
    runtime.residual_pads = true;
    f.vae->set_runtime(runtime);
    const torch::Tensor moments = f.vae->moments(input);
    INFO("fold_bias " << fold);
    CHECK(torch::equal(moments, expected));
  }
  f.vae->set_runtime(tt::VaeRuntime{});
}

TEST_CASE(
    "VaeResnet::forward_padded is forward then the causal padding, with and without a shortcut and folds",
    "[vae]") {
  torch::manual_seed(21);
  for (const int64_t in : {int64_t{8}, int64_t{16}}) {  // 8 -> 16 has a 1x1 shortcut convolution
    tt::VaeResnet resnet(in, 16, 4);
    for (auto& p : resnet->parameters()) {
      torch::NoGradGuard no_grad;
      p.normal_(0.0, 0.5);  // biases far from zero: a bias left out or added twice shows
    }
    torch::NoGradGuard no_grad;
    const torch::Tensor x = torch::randn({1, in, 3, 6, 5});
    for (const bool fold : {false, true}) {
      tt::VaeRuntime rt;
      rt.fold_bias = fold;
      const torch::Tensor expected = tt::vae_causal_pad(resnet->forward(x, rt), 2, 1);
      const torch::Tensor padded = resnet->forward_padded(x, rt, 2, 1);
      INFO("in " << in << ", fold_bias " << fold);
      REQUIRE(padded.sizes() == expected.sizes());
      CHECK(torch::equal(padded, expected));
    }
  }
}

TEST_CASE("VAE encoder: tiled encoding matches diffusers' tiled encode within 1e-4", "[vae][parity]") {
  ParityFixture f = load_parity_fixture();
  tt::HunyuanVae& vae = f.vae;
  const auto& tensors = f.tensors;
  const tt::VaeTiling& tiling = f.tiling;
  torch::NoGradGuard no_grad;
  const torch::Tensor& expected = tensors.at("output.moments_tiled");
  // One crop at a time, auto (border tiles batched), and up to 3 of a shape together: the same moments.
  for (int64_t tile_batch : {int64_t{1}, tt::kTileBatchAuto, int64_t{3}}) {
    tt::VaeRuntime runtime;
    runtime.tile_batch = tile_batch;
    vae->set_runtime(runtime);
    const torch::Tensor tiled = vae->moments_tiled(tensors.at("input.sample"), tiling);
    REQUIRE(tiled.sizes() == expected.sizes());
    const double error = relative_error(tiled, expected);
    INFO("tile_batch " << tile_batch << " (0 = auto): relative error " << error);
    CHECK(error <= 1e-4);
  }
  // The fixture really splits: tiled and whole-clip moments differ.
  CHECK(relative_error(expected, tensors.at("output.moments")) > 1e-3);
}

namespace {

// The crops' shapes moments_tiled makes of a (1, 3, frames, height, width) clip, in its order.
std::vector<std::vector<int64_t>> crop_shapes(int64_t frames, int64_t height, int64_t width, const tt::VaeTiling& t) {
  return tt::vae_crop_shapes(tt::hunyuan_vae_preset("hunyuan"), 1, frames, height, width, t);
}

int64_t voxels(const std::vector<int64_t>& shape) { return shape[0] * shape[2] * shape[3] * shape[4]; }

}  // namespace

TEST_CASE("VAE tile batches: auto never holds more voxels than the largest crop; a fixed cap chunks each shape",
          "[vae]") {
  // Frame windows of 33x480x832: (0, 17), (12, 17), (24, 9). Auto encodes them one at a time (two
  // 17-frame windows together would need twice the largest crop's memory); a cap of 4 pairs the two.
  tt::VaeTiling frames;
  const auto windows = crop_shapes(33, 480, 832, frames);
  REQUIRE(windows.size() == 3);
  CHECK(tt::vae_tile_batches(windows, tt::kTileBatchAuto) == std::vector<std::vector<size_t>>{{0}, {1}, {2}});
  CHECK(tt::vae_tile_batches(windows, 4) == std::vector<std::vector<size_t>>{{0, 1}, {2}});
  CHECK(tt::vae_tile_batches(windows, 1) == std::vector<std::vector<size_t>>{{0}, {1}, {2}});

  // 256-px tiles: per window, rows 0/192/384 (256, 256, 96 px) x columns 0..768 (256 x4, 64).
  tt::VaeTiling tiled;
  tiled.spatial = true;
  const auto tiles = crop_shapes(33, 480, 832, tiled);
  REQUIRE(tiles.size() == 45);
  int64_t largest = 0;
  for (const auto& shape : tiles) largest = std::max(largest, voxels(shape));
  for (int64_t cap : {tt::kTileBatchAuto, int64_t{1}, int64_t{4}}) {
    const auto batches = tt::vae_tile_batches(tiles, cap);
    std::vector<size_t> seen;
    size_t widest = 0;
    for (const auto& batch : batches) {
      INFO("cap " << cap << " (0 = auto), batch of " << batch.size() << " from crop " << batch.front());
      REQUIRE_FALSE(batch.empty());
      int64_t held = 0;
      for (size_t i : batch) {
        CHECK(tiles[i] == tiles[batch.front()]);  // one shape a batch
        held += voxels(tiles[i]);
        seen.push_back(i);
      }
      for (size_t k = 1; k < batch.size(); ++k) CHECK(batch[k] > batch[k - 1]);  // crop order kept
      if (cap == tt::kTileBatchAuto) CHECK(held <= largest);
      if (cap > 0) CHECK(batch.size() <= static_cast<size_t>(cap));
      widest = std::max(widest, batch.size());
    }
    std::sort(seen.begin(), seen.end());
    std::vector<size_t> all(tiles.size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = i;
    CHECK(seen == all);  // every crop exactly once
    // Auto still batches the small border tiles: the two windows' four 17x256x64 tiles go together
    // (a quarter of a 17x256x256 tile each), as do the 17x96x64 corners.
    if (cap == tt::kTileBatchAuto) CHECK(widest == 4);
    if (cap == 1) CHECK(widest == 1);
    if (cap == 4) CHECK(widest == 4);
  }
  CHECK(tt::test::expect_error([&] { tt::vae_tile_batches(tiles, -1); }).code() == tt::ErrorCode::kConfig);

  // The pass that holds the most: a whole 17-frame window (auto), both 17-frame windows (a cap of 4),
  // one 17x256x256 tile (tiled, auto), the whole clip (no tiling).
  const tt::HunyuanVaeConfig vae = tt::hunyuan_vae_preset("hunyuan");
  CHECK(tt::vae_largest_pass(vae, 1, 33, 480, 832, frames, tt::kTileBatchAuto) ==
        std::vector<int64_t>{1, 3, 17, 480, 832});
  CHECK(tt::vae_largest_pass(vae, 1, 33, 480, 832, frames, 4) == std::vector<int64_t>{2, 3, 17, 480, 832});
  CHECK(tt::vae_largest_pass(vae, 1, 33, 480, 832, tiled, tt::kTileBatchAuto) ==
        std::vector<int64_t>{1, 3, 17, 256, 256});
  CHECK(tt::vae_largest_pass(vae, 1, 33, 480, 832, tiled, 4) == std::vector<int64_t>{4, 3, 17, 256, 256});
  tt::VaeTiling whole;
  whole.temporal = false;
  CHECK(tt::vae_largest_pass(vae, 2, 33, 480, 832, whole, tt::kTileBatchAuto) ==
        std::vector<int64_t>{2, 3, 33, 480, 832});
}

TEST_CASE("VAE encoder: bf16 on the GPU matches diffusers' fp32 moments in every runtime, whole and tiled",
          "[gpu][vae][parity]") {
  TT_REQUIRE_GPU();
  ParityFixture f = load_parity_fixture();
  f.vae->to(torch::kCUDA, torch::kBFloat16);
  const torch::Tensor input = f.tensors.at("input.sample").to(torch::kCUDA, torch::kBFloat16);
  // Heuristic cuDNN algorithms: the runtimes that compute the same thing give the same bits.
  const bool benchmark = at::globalContext().benchmarkCuDNN();
  at::globalContext().setBenchmarkCuDNN(false);
  struct Named {
    const char* name;
    tt::VaeRuntime runtime;
  };
  std::vector<Named> runtimes = {{"plain", {false, false, 1}}, {"channels-last", {true, false, 1}},
                                 {"fused", {false, true, 1}},  {"fast", {true, true, 1}},
                                 {"fast-auto", {}},           {"fast-batched", {true, true, 4}}};
  tt::VaeRuntime padded, graphs;
  padded.norm_pads = true;
  runtimes.push_back({"fast-padded", padded});
  graphs.cuda_graphs = true;
  runtimes.push_back({"fast-graphs", graphs});
  tt::VaeRuntime folded = padded;
  folded.fold_bias = true;
  runtimes.push_back({"fast-folded", folded});
  tt::VaeRuntime gemm = folded;
  gemm.gemm_first_and_attention = true;
  runtimes.push_back({"fast-gemm", gemm});
  tt::VaeRuntime borders = gemm;
  borders.border_kernel = true;
  runtimes.push_back({"fast-gemm-borders", borders});
  tt::VaeRuntime residual_pads = borders;
  residual_pads.residual_pads = true;
  runtimes.push_back({"fast-residual-pads", residual_pads});
  std::map<std::string, torch::Tensor> auto_moments, gemm_moments;  // fast-auto's and fast-gemm's, per mode
  torch::NoGradGuard no_grad;
  for (const auto& [name, runtime] : runtimes) {
    f.vae->set_runtime(runtime);
    for (const bool tiled : {false, true}) {
      const std::string mode = tiled ? "tiled" : "whole";
      auto encode = [&] { return (tiled ? f.vae->moments_tiled(input, f.tiling) : f.vae->moments(input)).cpu(); };
      // fast-graphs: the first encode runs each pass shape eagerly and captures it; the second replays.
      if (runtime.cuda_graphs) (void)encode();
      const torch::Tensor moments = encode();
      const torch::Tensor& expected = f.tensors.at(tiled ? "output.moments_tiled" : "output.moments");
      REQUIRE(moments.sizes() == expected.sizes());
      CHECK(moments.scalar_type() == torch::kBFloat16);
      // diffusers' own bf16 CPU encode of this fixture is 1.7e-2 (max) and 2.8e-3 (mean) off its fp32
      // whole, 3.1e-2 and 4.0e-3 tiled.
      const double max_error = relative_error(moments, expected);
      const double mean_error =
          (moments.to(torch::kFloat32) - expected).abs().mean().item<double>() / expected.abs().max().item<double>();
      INFO(name << " " << mode << ": max " << max_error << ", mean " << mean_error);
      CHECK(max_error <= 6e-2);
      CHECK(mean_error <= 1e-2);
      if (std::string(name) == "fast-auto") auto_moments[mode] = moments;
      // Where the pads get written changes no value: the same bits as fast-gemm.
      if (std::string(name) == "fast-gemm") gemm_moments[mode] = moments;
      if (std::string(name) == "fast-gemm-borders" || std::string(name) == "fast-residual-pads")
        CHECK(torch::equal(moments, gemm_moments.at(mode)));
      // Writing the norm into the padded buffer, or replaying captured passes, changes no value: the
      // same bits as fast-auto.
      if (std::string(name) == "fast-padded" || std::string(name) == "fast-graphs")
        CHECK(torch::equal(moments, auto_moments.at(mode)));
    }
  }
  // A replay reads the new input: another clip through the captured whole pass gives its own moments.
  f.vae->set_runtime(graphs);
  const torch::Tensor other = (input * -0.5).contiguous();
  const torch::Tensor replayed = f.vae->moments(other).cpu();
  f.vae->set_runtime(tt::VaeRuntime{});
  CHECK(torch::equal(replayed, f.vae->moments(other).cpu()));
  CHECK_FALSE(torch::equal(replayed, auto_moments.at("whole")));
  at::globalContext().setBenchmarkCuDNN(benchmark);
}

TEST_CASE("VAE encoder: latent shapes, frame and size rules, the tiny preset", "[vae]") {
  const tt::HunyuanVaeConfig hunyuan = tt::hunyuan_vae_preset("hunyuan");
  CHECK(tt::vae_latent_shape(hunyuan, 33, 480, 832) == std::vector<int64_t>{16, 9, 60, 104});
  CHECK(tt::vae_latent_shape(hunyuan, 1, 64, 64) == std::vector<int64_t>{16, 1, 8, 8});
  CHECK(tt::test::expect_error([&] { tt::vae_latent_shape(hunyuan, 32, 480, 832); }).code() == tt::ErrorCode::kData);
  CHECK(tt::test::expect_error([&] { tt::vae_latent_shape(hunyuan, 33, 484, 832); }).code() == tt::ErrorCode::kData);
  CHECK(tt::test::expect_error([&] { tt::hunyuan_vae_preset("huge"); }).code() == tt::ErrorCode::kConfig);

  tt::HunyuanVae tiny(tt::hunyuan_vae_preset("tiny"));
  tiny->eval();
  torch::NoGradGuard no_grad;
  const torch::Tensor clip = torch::rand({1, 3, 5, 32, 48}) * 2 - 1;
  const torch::Tensor latents = tiny->encode_mean(clip);
  CHECK(latents.sizes() == torch::IntArrayRef({1, 16, 2, 4, 6}));
  CHECK(torch::isfinite(latents).all().item<bool>());
  // Not causal end to end: the convolutions are, but GroupNorm's statistics span the whole clip, so
  // changing later frames moves the first latent frame a little too (diffusers behaves the same).
}

TEST_CASE("VAE weights load from a diffusers folder, a pipeline folder and a file; strictly", "[vae][weights]") {
  std::map<std::string, std::string> metadata;
  auto tensors = tt::safetensors::load(kFixture, {}, &metadata);
  tt::safetensors::TensorMap weights;
  for (const auto& [name, tensor] : tensors)
    if (name.rfind("weight.", 0) == 0) weights[name.substr(7)] = tensor;
  weights["decoder.conv_in.conv.weight"] = torch::ones({2, 2, 1, 1, 1});  // a decoder key: skipped
  weights["post_quant_conv.weight"] = torch::ones({4, 4, 1, 1, 1});
  tt::test::TempDir dir("tt_vae");
  std::filesystem::create_directories(dir / "pipe/vae");
  tt::safetensors::save(dir / "pipe/vae/diffusion_pytorch_model.safetensors", weights);
  tt::test::write_file(dir / "pipe/vae/config.json", metadata.at("config"));
  tt::safetensors::save(dir / "bare.safetensors", weights);

  const torch::Tensor input = tensors.at("input.sample");
  const torch::Tensor& expected = tensors.at("output.moments");
  torch::NoGradGuard no_grad;
  tt::HunyuanVae from_pipeline = tt::load_hunyuan_vae(dir / "pipe", tt::hunyuan_vae_preset("tiny"));
  CHECK(relative_error(from_pipeline->moments(input), expected) <= 1e-4);
  CHECK_FALSE(from_pipeline->parameters()[0].requires_grad());  // frozen
  // A bare file takes its architecture from the config given.
  const tt::HunyuanVaeConfig fixture_config = tt::hunyuan_vae_config_from_json(metadata.at("config"), kFixture);
  tt::HunyuanVae from_file = tt::load_hunyuan_vae(dir / "bare.safetensors", fixture_config);
  CHECK(relative_error(from_file->moments(input), expected) <= 1e-4);
  // The wrong architecture for the file: one kCheckpoint error listing the mismatches.
  const tt::Error error = tt::test::expect_error(
      [&] { tt::load_hunyuan_vae(dir / "bare.safetensors", tt::hunyuan_vae_preset("tiny")); });
  CHECK(error.code() == tt::ErrorCode::kCheckpoint);
  CHECK(std::string(error.what()).find("encoder.conv_in.conv.weight") != std::string::npos);
  CHECK(tt::test::expect_error([&] { tt::load_hunyuan_vae(dir / "nothing", fixture_config); }).code() ==
        tt::ErrorCode::kCheckpoint);

  // A NaN or an integer tensor in the file: kCheckpoint naming the tensor.
  const std::string key = "encoder.conv_in.conv.weight";
  for (const bool nan : {true, false}) {
    tt::safetensors::TensorMap damaged = weights;
    damaged[key] = nan ? weights.at(key).clone().index_put_({0, 0, 0, 0, 0}, std::nan("")) : weights.at(key).to(torch::kInt32);
    tt::safetensors::save(dir / "damaged.safetensors", damaged);
    const tt::Error bad = tt::test::expect_error([&] { tt::load_hunyuan_vae(dir / "damaged.safetensors", fixture_config); });
    CHECK(bad.code() == tt::ErrorCode::kCheckpoint);
    CHECK(std::string(bad.what()).find(key + (nan ? " holds non-finite values" : " is Int, not floating point")) !=
          std::string::npos);
  }
  // A crafted config.json far past any VAE: kConfig before anything is built.
  for (const bool layers : {true, false}) {
    INFO((layers ? "layers_per_block" : "block_out_channels"));
    nlohmann::json config = nlohmann::json::parse(metadata.at("config"));
    if (layers) {
      config["layers_per_block"] = 1'000'000;
    } else {
      config["block_out_channels"].back() = int64_t{1} << 30;  // divisible by any group count
    }
    const tt::Error crafted = tt::test::expect_error([&] { tt::hunyuan_vae_config_from_json(config.dump(), "crafted"); });
    CHECK(std::string(crafted.what()).find("is beyond") != std::string::npos);
    CHECK(crafted.code() == tt::ErrorCode::kConfig);
  }
}

TEST_CASE("teletron bench-vae times the encoder and dumps weights a diffusers folder loader reads", "[vae][bench]") {
  tt::test::TempDir dir("tt_bench_vae");
  const auto result = tt::test::run_teletron("bench-vae --preset tiny --device cpu --frames 9 --height 64 --width 64 "
                                             "--warmup 0 --steps 1 --dump '" + (dir / "dump") + "' 2>&1");
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  CHECK(result.output.find("ms per clip") != std::string::npos);
  auto io = tt::safetensors::load(dir / "dump/io.safetensors");
  CHECK(io.at("moments").sizes() == torch::IntArrayRef({1, 32, 3, 8, 8}));
  // The dump is a diffusers VAE folder: teletron's own loader takes it and reproduces the moments.
  tt::HunyuanVae reloaded = tt::load_hunyuan_vae(dir / "dump", tt::hunyuan_vae_preset("hunyuan"));
  torch::NoGradGuard no_grad;
  CHECK(relative_error(reloaded->moments(io.at("input")), io.at("moments")) <= 1e-5);

  // --stages: a row per encoder stage and the time outside the passes, also in the JSON.
  const auto staged = tt::test::run_teletron("bench-vae --preset tiny --device cpu --frames 9 --height 64 --width 64 "
                                             "--tiling frames --warmup 0 --steps 1 --stages --json '" +
                                             (dir / "stages.jsonl") + "' 2>&1");
  INFO(staged.output);
  REQUIRE(staged.exit_code == 0);
  CHECK(staged.output.find("| down0 | ") != std::string::npos);
  CHECK(staged.output.find("| outside the passes (crops, batching, blends, host) | ") != std::string::npos);
  const nlohmann::json row = nlohmann::json::parse(tt::test::read_file(dir / "stages.jsonl"));
  const std::vector<std::string> names = tt::vae_stage_names(tt::hunyuan_vae_preset("tiny"));
  REQUIRE(row.at("stages").size() == names.size() + 1);
  double flops = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    CHECK(row["stages"][i]["stage"] == names[i]);
    CHECK(row["stages"][i]["ms"].get<double>() > 0);  // every stage did work, timed on the host
    flops += row["stages"][i]["matmul_flops"].get<double>();
  }
  CHECK(flops == row.at("matmul_flops").get<double>());
}

TEST_CASE("bench-vae on CUDA counts the graphs' private pool in a graphed runtime's peak",
          "[vae][bench][gpu]") {
  TT_REQUIRE_GPU();
  // Replays allocate nothing: without the pool the graphed row's peak would be the input's and the
  // output's alone, far below the eager row's, which holds the activations.
  tt::test::TempDir dir("tt_bench_vae_graphs");
  const auto result = tt::test::run_teletron(
      "bench-vae --preset tiny --device cuda --frames 17 --height 128 --width 128 --tiling whole "
      "--runtimes fast-auto,fast-graphs --warmup 2 --steps 2 --json '" +
      (dir / "rows.jsonl") + "' 2>&1");
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  std::map<std::string, double> peak;
  std::istringstream rows(tt::test::read_file(dir / "rows.jsonl"));
  for (std::string line; std::getline(rows, line);)
    if (!line.empty()) {
      const nlohmann::json row = nlohmann::json::parse(line);
      peak[row.at("runtime").get<std::string>()] = row.at("peak_gb").get<double>();
    }
  REQUIRE(peak.count("fast-auto") == 1);
  REQUIRE(peak.count("fast-graphs") == 1);
  CHECK(peak["fast-graphs"] >= 0.9 * peak["fast-auto"]);
}

TEST_CASE("VAE encoder stages: the hook marks each pass's stages in order; their FLOPs add up to the count",
          "[vae]") {
  tt::HunyuanVae tiny(tt::hunyuan_vae_preset("tiny"));
  tiny->eval();
  std::vector<std::string> marks;
  tiny->set_stage_hook([&](const char* stage) { marks.emplace_back(stage); });
  torch::NoGradGuard no_grad;
  const torch::Tensor clip = torch::rand({1, 3, 9, 32, 48}) * 2 - 1;
  (void)tiny->moments(clip);
  std::vector<std::string> pass{"begin"};
  for (const std::string& name : tt::vae_stage_names(tiny->config())) pass.push_back(name);
  CHECK(pass.size() == 4 + tiny->config().block_out_channels.size() + 1);  // begin conv_in down* mid out quant
  CHECK(marks == pass);
  // Windows of 4 + 1 frames every 4: (0, 5) and (4, 5) are one shape, so auto encodes them apart
  // (two passes), a cap of 2 together (one pass).
  tt::VaeTiling windows;
  windows.min_frames = 4;
  windows.stride_frames = 4;
  for (const auto& [cap, passes] : {std::pair<int64_t, size_t>{tt::kTileBatchAuto, 3}, {2, 2}}) {
    marks.clear();
    tt::VaeRuntime runtime;
    runtime.tile_batch = cap;
    tiny->set_runtime(runtime);
    (void)tiny->moments_tiled(clip, windows);  // windows (0, 5), (4, 5), (8, 1)
    INFO("tile_batch " << cap);
    CHECK(marks.size() == passes * pass.size());
  }
  tiny->set_stage_hook(nullptr);
  marks.clear();
  (void)tiny->moments(clip);
  CHECK(marks.empty());

  // The released VAE at 33x480x832: the stages' counts add up to the whole count in every mode,
  // and the tiled mode counts each of its 45 passes in every stage.
  const tt::HunyuanVaeConfig vae = tt::hunyuan_vae_preset("hunyuan");
  tt::VaeTiling whole, frames, tiled;
  whole.temporal = false;
  tiled.spatial = true;
  for (const tt::VaeTiling& tiling : {whole, frames, tiled}) {
    const auto stages = tt::vae_encoder_stage_flops(vae, 1, 33, 480, 832, tiling);
    const tt::VaeFlops total = tt::vae_encoder_flops(vae, 1, 33, 480, 832, tiling);
    REQUIRE(stages.size() == tt::vae_stage_names(vae).size());
    double matmul = 0, norm = 0, elementwise = 0;
    for (size_t i = 0; i < stages.size(); ++i) {
      CHECK(stages[i].first == tt::vae_stage_names(vae)[i]);
      CHECK(stages[i].second.passes == total.passes);
      matmul += stages[i].second.matmul();
      norm += stages[i].second.norm;
      elementwise += stages[i].second.elementwise;
    }
    CHECK(matmul == total.matmul());
    CHECK(norm == total.norm);
    CHECK(elementwise == total.elementwise);
  }
  CHECK(tt::vae_encoder_flops(vae, 1, 33, 480, 832, tiled).passes == 45);
  // The first down block, at full resolution, carries the most of the whole clip's convolutions.
  const auto stages = tt::vae_encoder_stage_flops(vae, 1, 33, 480, 832, whole);
  CHECK(stages[1].second.conv > stages[2].second.conv);
}

TEST_CASE("VAE encoder memory: at its peak the encoder holds about four activations of the first stage, not six",
          "[vae][memory]") {
  // The released architecture (128 channels in the first stage) on a small clip, on the CPU, peak
  // from the allocator's events (core/profiler). At the first stage's second convolution a caller
  // that keeps every intermediate holds the stage's input, conv1's output, the norm's output, the
  // padded copy and conv2's output; teletron lets conv1's output and the norm's output go before
  // the convolution allocates, and the encoder's loop hands each block its input instead of
  // keeping it. The CPU's convolution adds one re-ordered copy of its padded input of its own.
  // Measured here: 4.4 activations whole and per window; 7.4 before those releases (diffusers'
  // encoder, same measure, 33x64x96 whole: 6.2). Bound 5.5: room for another CPU's buffers.
  torch::manual_seed(0);
  tt::HunyuanVae vae(tt::hunyuan_vae_preset("hunyuan"));
  vae->randomize_weights(3);
  vae->eval();
  torch::NoGradGuard no_grad;
  const int64_t channels = vae->config().block_out_channels.front();
  const double bytes_per_frame = static_cast<double>(channels * 64 * 96) * sizeof(float);
  const torch::Tensor whole = torch::randn({1, 3, 17, 64, 96});
  const double whole_peak = static_cast<double>(tt::cpu_peak_bytes_during([&] { (void)vae->moments(whole); }));
  INFO("whole 17x64x96: " << whole_peak / (17 * bytes_per_frame) << " activations of the first stage");
  CHECK(whole_peak <= 5.5 * 17 * bytes_per_frame);  // margin for other CPUs' convolution buffers
  CHECK(whole_peak >= 3.0 * 17 * bytes_per_frame);  // the measure itself sees the pass
  // Frame windows: the peak is one 17-frame window's, whatever the clip's length.
  tt::VaeTiling windows;
  const torch::Tensor clip = torch::randn({1, 3, 33, 64, 96});
  const double window_peak =
      static_cast<double>(tt::cpu_peak_bytes_during([&] { (void)vae->moments_tiled(clip, windows); }));
  INFO("33 frames in windows of 17: " << window_peak / (17 * bytes_per_frame) << " activations of a window");
  CHECK(window_peak <= 5.5 * 17 * bytes_per_frame);
}

namespace {

// diffusers' blend, slice by slice (vae_blend's former body): the reference for its one-pass form.
torch::Tensor blend_by_slices(const torch::Tensor& a, torch::Tensor b, int64_t dim, int64_t extent) {
  extent = std::min({a.size(dim), b.size(dim), extent});
  for (int64_t k = 0; k < extent; ++k) {
    const double w = static_cast<double>(k) / static_cast<double>(extent);
    b.select(dim, k).copy_(a.select(dim, a.size(dim) - extent + k) * (1.0 - w) + b.select(dim, k) * w);
  }
  return b;
}

}  // namespace

TEST_CASE("vae_blend in one pass gives the slice loop's bits for every dim, extent and float dtype, in place",
          "[vae]") {
  torch::manual_seed(11);
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16, torch::kFloat16}) {
    const torch::Tensor b0 = (torch::randn({2, 3, 5, 8, 9}) * 40).to(dtype);
    for (int64_t dim = 2; dim <= 4; ++dim) {
      std::vector<int64_t> a_shape = b0.sizes().vec();
      a_shape[static_cast<size_t>(dim)] += 1;  // the tile before may be longer along the blended dim
      const torch::Tensor a = (torch::randn(a_shape) * 40).to(dtype);
      for (int64_t extent : {0, 1, 2, 3, 5, 12}) {
        INFO("dtype " << dtype << ", dim " << dim << ", extent " << extent);
        torch::Tensor expected = blend_by_slices(a, b0.clone(), dim, extent);
        torch::Tensor b = b0.clone();
        const torch::Tensor out = tt::vae_blend(a, b, dim, extent);
        CHECK(out.data_ptr() == b.data_ptr());  // in place, b returned
        CHECK(torch::equal(b, expected));
        if (extent > 0) CHECK_FALSE(torch::equal(b, b0));
      }
    }
    // b a view into a larger tensor (tiles are narrowed from their pass's output): only it changes.
    const torch::Tensor a = (torch::randn({2, 3, 5, 11, 9}) * 40).to(dtype);
    torch::Tensor whole = torch::zeros({2, 3, 5, 8, 12}, dtype);
    whole.narrow(4, 2, 9).copy_(b0);
    torch::Tensor view = whole.narrow(4, 2, 9);
    tt::vae_blend(a, view, 3, 4);
    CHECK(torch::equal(whole.narrow(4, 2, 9), blend_by_slices(a, b0.clone(), 3, 4)));
    CHECK(torch::equal(whole.narrow(4, 0, 2), torch::zeros({2, 3, 5, 8, 2}, dtype)));
    CHECK(torch::equal(whole.narrow(4, 11, 1), torch::zeros({2, 3, 5, 8, 1}, dtype)));
  }
}
