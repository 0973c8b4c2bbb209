// The HunyuanVideo VAE decoder against diffusers (test/fixtures/hunyuan_vae_decoder_parity.safetensors,
// from scripts/make_vae_decoder_fixtures.py): fp32 CPU video within 1e-4 relative to max |reference|
// in each of diffusers' decode modes (whole, its default frame windows, spatial tiles, both), the
// pipeline's scaling, the loader's strictness, and bf16 on the GPU.
#include "model/vae_decoder.h"

#include <catch2/catch_test_macros.hpp>
#include <nlohmann/json.hpp>

#include <torch/torch.h>

#include <filesystem>

#include "core/errors.h"
#include "core/safetensors.h"
#include "model/weights.h"
#include "test/test_util.h"

namespace {

constexpr const char* kFixture = TELETRON_SOURCE_DIR "/test/fixtures/hunyuan_vae_decoder_parity.safetensors";

double relative_error(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kFloat32) - b).abs().max().item<double>() / b.abs().max().item<double>();
}

struct Fixture {
  tt::safetensors::TensorMap tensors;
  std::map<std::string, std::string> metadata;
  tt::safetensors::TensorMap weights;  // diffusers keys
  tt::HunyuanVaeConfig config;
};

Fixture load_fixture() {
  Fixture f;
  f.tensors = tt::safetensors::load(kFixture, {}, &f.metadata);
  for (const auto& [name, tensor] : f.tensors)
    if (name.rfind("weight.", 0) == 0) f.weights[name.substr(7)] = tensor;
  f.config = tt::hunyuan_vae_config_from_json(f.metadata.at("config"), kFixture);
  return f;
}

tt::HunyuanVaeDecoder make_decoder(const Fixture& f) {
  tt::HunyuanVaeDecoder decoder(f.config);
  decoder->eval();
  tt::load_weights_into(decoder->diffusers_parameters(), f.weights, kFixture);
  return decoder;
}

// The fixture's small tiles (metadata "spatial_tiles", "frame_tiles") on diffusers' defaults.
tt::VaeDecodeTiling fixture_tiling(const Fixture& f, bool temporal, bool spatial, bool small_frames) {
  tt::VaeDecodeTiling tiling;
  tiling.temporal = temporal;
  tiling.spatial = spatial;
  if (spatial) {
    const nlohmann::json tiles = nlohmann::json::parse(f.metadata.at("spatial_tiles"));
    tiling.min_height = tiles.at("tile_sample_min_height");
    tiling.min_width = tiles.at("tile_sample_min_width");
    tiling.stride_height = tiles.at("tile_sample_stride_height");
    tiling.stride_width = tiles.at("tile_sample_stride_width");
  }
  if (small_frames) {
    const nlohmann::json frames = nlohmann::json::parse(f.metadata.at("frame_tiles"));
    tiling.min_frames = frames.at("tile_sample_min_num_frames");
    tiling.stride_frames = frames.at("tile_sample_stride_num_frames");
  }
  return tiling;
}

void check_mode(const char* mode, bool temporal, bool spatial, bool small_frames) {
  const Fixture f = load_fixture();
  tt::HunyuanVaeDecoder decoder = make_decoder(f);
  const torch::Tensor& latents = f.tensors.at(std::string(mode) + ".latents");
  const torch::Tensor& expected = f.tensors.at(std::string(mode) + ".video");
  const torch::Tensor video = decoder->decode(latents, fixture_tiling(f, temporal, spatial, small_frames));
  REQUIRE(video.sizes() == expected.sizes());
  const double error = relative_error(video, expected);
  INFO(mode << ": relative error " << error);
  CHECK(error <= 1e-4);
  if (temporal || spatial) {
    // The fixture really splits: decoding whole gives another video.
    CHECK(relative_error(decoder->decode(latents), expected) > 1e-3);
  }
}

}  // namespace

TEST_CASE("VAE decoder: whole decode matches diffusers within 1e-4", "[vae][vae_decoder][parity]") {
  const Fixture f = load_fixture();
  CHECK(f.config.block_out_channels == std::vector<int64_t>{8, 8, 16, 16});
  tt::HunyuanVaeDecoder decoder = make_decoder(f);
  const torch::Tensor& latents = f.tensors.at("whole.latents");  // (2, 4, 3, 3, 4)
  const torch::Tensor& expected = f.tensors.at("whole.video");   // (2, 3, 9, 24, 32)
  const torch::Tensor video = decoder->decode(latents);
  REQUIRE(video.sizes() == expected.sizes());
  const double error = relative_error(video, expected);
  INFO("relative error " << error);
  CHECK(error <= 1e-4);
  // Nothing splits at diffusers' default tiles (3 latent frames, 24x32 pixels): the tiled entry
  // point decodes whole, with and without spatial tiling.
  tt::VaeDecodeTiling tiling;
  CHECK(torch::equal(decoder->decode(latents, tiling), video));
  tiling.spatial = true;
  CHECK(torch::equal(decoder->decode(latents, tiling), video));
  // HunyuanVideoPipeline's step: the Transformer's latents are divided by scaling_factor first.
  const torch::Tensor scaled = latents * f.config.scaling_factor;
  CHECK(relative_error(decoder->decode_latents(scaled, tt::VaeDecodeTiling{}), expected) <= 1e-4);
}

TEST_CASE("VAE decoder: diffusers' default frame windows within 1e-4", "[vae][vae_decoder][parity]") {
  // 7 latent frames: windows of 4 + 1 every 3 (the last a single frame), blended over 4 frames.
  check_mode("temporal", true, false, false);
}

TEST_CASE("VAE decoder: spatial tiles (enable_tiling) within 1e-4", "[vae][vae_decoder][parity]") {
  // A 2 x 3 grid of 3x4-latent tiles every 2x2, blended over 8 rows and 16 columns.
  check_mode("spatial", false, true, false);
}

TEST_CASE("VAE decoder: frame windows of spatial tiles within 1e-4", "[vae][vae_decoder][parity]") {
  // 5 latent frames in windows of 3 + 1 every 2, each window a 2 x 3 grid of tiles.
  check_mode("both", true, true, true);
}

TEST_CASE("VAE decoder: shapes and argument errors", "[vae][vae_decoder]") {
  tt::HunyuanVaeConfig config = tt::hunyuan_vae_preset("tiny");
  tt::HunyuanVaeDecoder decoder(config);
  decoder->randomize_weights(7);
  decoder->eval();
  const torch::Tensor video = decoder->decode(torch::randn({1, 16, 2, 2, 3}));
  CHECK(video.sizes() == torch::IntArrayRef({1, 3, 5, 16, 24}));
  CHECK(torch::isfinite(video).all().item<bool>());
  // One latent frame decodes to one frame.
  CHECK(decoder->decode(torch::randn({1, 16, 1, 1, 1})).sizes() == torch::IntArrayRef({1, 3, 1, 8, 8}));
  CHECK(tt::test::expect_error([&] {
          decoder->decode(torch::randn({1, 8, 2, 2, 3}));
        }).code() == tt::ErrorCode::kData);
  CHECK(tt::test::expect_error([&] {
          decoder->decode(torch::randn({16, 2, 2, 3}));
        }).code() == tt::ErrorCode::kData);
  tt::VaeDecodeTiling bad;
  bad.stride_frames = 20;  // larger than the tile
  CHECK(tt::test::expect_error([&] {
          decoder->decode(torch::randn({1, 16, 2, 2, 3}), bad);
        }).code() == tt::ErrorCode::kConfig);
  bad = tt::VaeDecodeTiling{};
  bad.min_height = 100;  // not a multiple of 8
  CHECK(tt::test::expect_error([&] {
          decoder->decode(torch::randn({1, 16, 2, 2, 3}), bad);
        }).code() == tt::ErrorCode::kConfig);
  config.temporal_compression_ratio = 8;  // diffusers' decoder refuses it too
  CHECK(tt::test::expect_error([&] { tt::HunyuanVaeDecoder{config}; }).code() == tt::ErrorCode::kConfig);
  // Keys as diffusers names them.
  const auto keys = decoder->diffusers_parameters();
  CHECK(keys.count("post_quant_conv.weight") == 1);
  CHECK(keys.count("decoder.up_blocks.0.upsamplers.0.conv.conv.weight") == 1);
  CHECK(keys.count("decoder.up_blocks.3.upsamplers.0.conv.conv.weight") ==
        0);                                                                   // the last block keeps its size
  CHECK(keys.count("decoder.up_blocks.3.resnets.1.conv2.conv.weight") == 1);  // layers_per_block + 1 resnets
  CHECK(keys.count("decoder.mid_block.attentions.0.to_out.0.weight") == 1);
}

TEST_CASE("VAE decoder weights load from a diffusers folder and a file; strictly",
          "[vae][vae_decoder][weights]") {
  const Fixture f = load_fixture();
  tt::safetensors::TensorMap weights = f.weights;
  weights["encoder.conv_in.conv.weight"] = torch::ones({2, 2, 1, 1, 1});  // an encoder key: skipped
  weights["quant_conv.weight"] = torch::ones({8, 8, 1, 1, 1});
  tt::test::TempDir dir("tt_vae_decoder");
  std::filesystem::create_directories(dir / "pipe/vae");
  tt::safetensors::save(dir / "pipe/vae/diffusion_pytorch_model.safetensors", weights);
  tt::test::write_file(dir / "pipe/vae/config.json", f.metadata.at("config"));
  tt::safetensors::save(dir / "bare.safetensors", weights);

  const torch::Tensor& latents = f.tensors.at("whole.latents");
  const torch::Tensor& expected = f.tensors.at("whole.video");
  tt::HunyuanVaeDecoder from_pipeline =
      tt::load_hunyuan_vae_decoder(dir / "pipe", tt::hunyuan_vae_preset("tiny"));
  CHECK(from_pipeline->config().block_out_channels == f.config.block_out_channels);
  CHECK(relative_error(from_pipeline->decode(latents), expected) <= 1e-4);
  CHECK_FALSE(from_pipeline->parameters()[0].requires_grad());  // frozen
  tt::HunyuanVaeDecoder from_file = tt::load_hunyuan_vae_decoder(dir / "bare.safetensors", f.config);
  CHECK(relative_error(from_file->decode(latents), expected) <= 1e-4);

  // A missing key and a mis-shaped one: one kCheckpoint error naming both.
  tt::safetensors::TensorMap broken = f.weights;
  broken.erase("decoder.conv_out.conv.bias");
  broken["post_quant_conv.weight"] = torch::ones({4, 4, 3, 1, 1});
  tt::safetensors::save(dir / "broken.safetensors", broken);
  const tt::Error error =
      tt::test::expect_error([&] { tt::load_hunyuan_vae_decoder(dir / "broken.safetensors", f.config); });
  CHECK(error.code() == tt::ErrorCode::kCheckpoint);
  CHECK(std::string(error.what()).find("decoder.conv_out.conv.bias") != std::string::npos);
  CHECK(std::string(error.what()).find("post_quant_conv.weight") != std::string::npos);
  // An encoder-only file (teletron's own bench-vae dump, say) has no decoder to load.
  tt::safetensors::save(
      dir / "encoder_only.safetensors",
      tt::safetensors::TensorMap{{"encoder.conv_in.conv.weight", torch::ones({2, 2, 1, 1, 1})}});
  const tt::Error empty = tt::test::expect_error(
      [&] { tt::load_hunyuan_vae_decoder(dir / "encoder_only.safetensors", f.config); });
  CHECK(empty.code() == tt::ErrorCode::kCheckpoint);
  CHECK(std::string(empty.what()).find("no decoder weights") != std::string::npos);
}

TEST_CASE("VAE decoder: bf16 on the GPU matches diffusers' fp32 video", "[gpu][vae][vae_decoder]") {
  TT_REQUIRE_GPU();
  const Fixture f = load_fixture();
  tt::HunyuanVaeDecoder decoder = make_decoder(f);
  decoder->to(torch::kCUDA, torch::kBFloat16);
  // Channels-last with the fused GroupNorm+SiLU (the default runtime), then LibTorch's NCDHW path.
  for (bool fast : {true, false}) {
    decoder->set_runtime(tt::VaeRuntime{fast, fast, 1});
    for (const char* mode : {"whole", "both"}) {
      const bool tiled = std::string(mode) == "both";
      const torch::Tensor latents =
          f.tensors.at(std::string(mode) + ".latents").to(torch::kCUDA, torch::kBFloat16);
      const torch::Tensor& expected = f.tensors.at(std::string(mode) + ".video");
      const torch::Tensor video = decoder->decode(latents, fixture_tiling(f, tiled, tiled, tiled)).cpu();
      REQUIRE(video.sizes() == expected.sizes());
      CHECK(video.scalar_type() == torch::kBFloat16);
      // diffusers' own bf16 CPU decode of these latents is 3.0e-2 (max) and 2.7e-3 (mean) off its fp32.
      const double max_error = relative_error(video, expected);
      const double mean_error = (video.to(torch::kFloat32) - expected).abs().mean().item<double>() /
                                expected.abs().max().item<double>();
      INFO(mode << (fast ? " channels-last, fused norm" : " NCDHW") << ": max " << max_error << ", mean "
                << mean_error);
      CHECK(max_error <= 6e-2);
      CHECK(mean_error <= 1e-2);
    }
  }
}
