// `teletron train` on raw videos (data.source: video) on the CPU, end to end: clips made with the
// ffmpeg CLI (through the media cache), text embeddings written here, the tiny VAE (fixed random
// weights) and the tiny Transformer; the loss falls. A broken clip is skipped, logged and replaced
// when data.max_failed_share allows it, and stops the run with TT_ERR_DATA when it does not.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "test/test_util.h"

using Catch::Matchers::ContainsSubstring;
using tt::test::TempDir;

namespace {

// Six different moving clips, 24 frames each, at sizes around the 64x64 bucket.
std::vector<std::string> make_clips() {
  const char* sources[] = {"testsrc2=size=96x80", "testsrc2=size=80x96", "smptebars=size=96x96",
                           "rgbtestsrc=size=80x80", "testsrc=size=96x80", "mandelbrot=size=96x96"};
  std::vector<std::string> paths;
  for (int i = 0; i < 6; ++i) {
    const std::string name = "tv_clip" + std::to_string(i) + ".mp4";
    const auto result = tt::test::media_command("ffmpeg -v error -y -f lavfi -i " + std::string(sources[i]) +
                                                ":rate=25 -vf \"hue=h=" + std::to_string(20 * i) +
                                                "*t\" -frames:v 24 -c:v libx264 -g 8 -pix_fmt yuv420p '{media}/" +
                                                name + "'");
    INFO(result.output);
    REQUIRE(result.exit_code == 0);
    paths.push_back(tt::test::media_dir() + "/" + name);
  }
  return paths;
}

// Per clip: text embeddings of the tiny preset's widths (64, pooled 32), 8 tokens, 6 valid, with a
// value pattern that differs between clips so the text tells them apart.
void write_embeddings(const std::string& path, int index) {
  torch::manual_seed(100 + index);
  auto states = torch::randn({8, 64});
  auto mask = torch::ones({8}, torch::kUInt8);
  mask.narrow(0, 6, 2).zero_();
  tt::safetensors::save(path, {{"text_states", states}, {"text_mask", mask}, {"pooled", torch::randn({32})}});
}

std::string write_config(const TempDir& dir, const std::string& manifest, int64_t steps, double failed_share) {
  std::ostringstream yaml;
  yaml << "tele_tron:\n"
       << "  model: {preset: tiny}\n"
       << "  vae: {preset: tiny}\n"
       << "  data:\n    source: video\n    manifest: " << manifest << "\n"
       << "    buckets: [{frames: 9, height: 64, width: 64}]\n"
       << "    max_failed_share: " << failed_share << "\n"
       << "  data_pipeline: {frame_sampler: {mode: stratified}, augment: {flip: 0.5, crop: random}}\n"
       << "  batch_size: 2\n"
       << "  optimizer: {lr: 1.0e-3, warmup_steps: 5, weight_decay: 0.0}\n"
       << "  flow_matching: {shift: 1.0}\n"
       << "  train: {device: cpu, max_steps: " << steps << ", seed: 3, log_every: 5, checkpoint_every: " << steps
       << ", keep_checkpoints: 1}\n";
  const std::string path = dir / "train_video.yaml";
  tt::test::write_file(path, yaml.str());
  return path;
}

std::vector<nlohmann::json> read_metrics(const std::string& path) {
  std::vector<nlohmann::json> rows;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) rows.push_back(nlohmann::json::parse(line));
  return rows;
}

}  // namespace

TEST_CASE("train on raw videos (tiny VAE + tiny Transformer, CPU): the loss falls", "[train][video]") {
  const std::vector<std::string> clips = make_clips();
  TempDir dir("tt_train_video");
  std::string manifest_text;
  for (size_t i = 0; i < clips.size(); ++i) {
    const std::string embeddings = dir / ("text" + std::to_string(i) + ".safetensors");
    write_embeddings(embeddings, static_cast<int>(i));
    manifest_text += "{\"video\": \"" + clips[i] + "\", \"text_embeddings\": \"" + embeddings + "\"}\n";
  }
  const std::string manifest = dir / "manifest.jsonl";
  tt::test::write_file(manifest, manifest_text);
  const std::string config = write_config(dir, manifest, 80, 0.0);
  const auto result = tt::test::run_teletron("train '" + config + "' --output '" + (dir / "run") + "' 2>&1");
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  CHECK_THAT(result.output, ContainsSubstring("videos -> 9x64x64"));
  const auto rows = read_metrics(dir / "run/metrics.jsonl");
  REQUIRE(rows.size() == 16);
  const double first = (rows[0]["loss"].get<double>() + rows[1]["loss"].get<double>()) / 2;
  const double last = (rows[14]["loss"].get<double>() + rows[15]["loss"].get<double>()) / 2;
  INFO("first two logs " << first << ", last two " << last);
  CHECK(last < 0.7 * first);
}

TEST_CASE("train on raw videos: a broken clip is skipped within max_failed_share, else TT_ERR_DATA",
          "[train][video]") {
  const std::vector<std::string> clips = make_clips();
  TempDir dir("tt_train_video_bad");
  tt::test::write_file(dir / "broken.mp4", "not a video at all");
  std::string manifest_text;
  for (size_t i = 0; i < 4; ++i) {
    const std::string embeddings = dir / ("text" + std::to_string(i) + ".safetensors");
    write_embeddings(embeddings, static_cast<int>(i));
    const std::string video = i == 2 ? dir / "broken.mp4" : clips[i];
    manifest_text += "{\"video\": \"" + video + "\", \"text_embeddings\": \"" + embeddings + "\"}\n";
  }
  const std::string manifest = dir / "manifest.jsonl";
  tt::test::write_file(manifest, manifest_text);
  {
    const std::string config = write_config(dir, manifest, 4, 0.5);  // 2 of 4 rows may fail
    const auto result = tt::test::run_teletron("train '" + config + "' --output '" + (dir / "ok") + "' 2>&1");
    INFO(result.output);
    CHECK(result.exit_code == 0);
    CHECK_THAT(result.output, ContainsSubstring("skipping sample (line 3 of"));
    CHECK_THAT(result.output, ContainsSubstring("broken.mp4"));
  }
  {
    const std::string config = write_config(dir, manifest, 4, 0.0);
    const auto result = tt::test::run_teletron("train '" + config + "' --output '" + (dir / "stop") + "' 2>&1");
    INFO(result.output);
    CHECK(result.exit_code == 3);
    CHECK_THAT(result.output, ContainsSubstring("TT_ERR_DATA"));
    CHECK_THAT(result.output, ContainsSubstring("max_failed_share"));
  }
}

TEST_CASE("preprocess writes the cached-latent dataset, resumes without duplicates, and trains", "[train][video]") {
  const std::vector<std::string> clips = make_clips();
  TempDir dir("tt_preprocess");
  std::string manifest_text;
  for (size_t i = 0; i < clips.size(); ++i) {
    const std::string embeddings = dir / ("text" + std::to_string(i) + ".safetensors");
    write_embeddings(embeddings, static_cast<int>(i));
    manifest_text += "{\"video\": \"" + clips[i] + "\", \"text_embeddings\": \"" + embeddings + "\"}\n";
  }
  tt::test::write_file(dir / "manifest.jsonl", manifest_text);
  const std::string config = write_config(dir, dir / "manifest.jsonl", 4, 0.0);
  const std::string out = dir / "cache";
  const auto first = tt::test::run_teletron("preprocess '" + config + "' --output '" + out + "' --jobs 2 2>&1");
  INFO(first.output);
  REQUIRE(first.exit_code == 0);
  const std::string manifest = tt::test::read_file(out + "/manifest.jsonl");
  CHECK(manifest == "{\"latents\": \"latents/000001.safetensors\"}\n{\"latents\": \"latents/000002.safetensors\"}\n"
                    "{\"latents\": \"latents/000003.safetensors\"}\n{\"latents\": \"latents/000004.safetensors\"}\n"
                    "{\"latents\": \"latents/000005.safetensors\"}\n{\"latents\": \"latents/000006.safetensors\"}\n");
  auto sample = tt::safetensors::load(out + "/latents/000003.safetensors");
  CHECK(sample.at("latents").sizes() == torch::IntArrayRef({16, 3, 8, 8}));  // 9x64x64 through 4x/8x
  const std::string third = tt::test::read_file(out + "/latents/000003.safetensors");

  // An interrupted run: one file missing, the manifest gone, a stale temporary left behind.
  std::filesystem::remove(out + "/latents/000003.safetensors");
  std::filesystem::remove(out + "/manifest.jsonl");
  tt::test::write_file(out + "/latents/000004.safetensors.tmp", "partial");
  const auto second = tt::test::run_teletron("preprocess '" + config + "' --output '" + out + "' 2>&1");
  INFO(second.output);
  REQUIRE(second.exit_code == 0);
  CHECK_THAT(second.output, ContainsSubstring("5 already done, 1 to encode"));
  CHECK(tt::test::read_file(out + "/manifest.jsonl") == manifest);
  CHECK(tt::test::read_file(out + "/latents/000003.safetensors") == third);  // deterministic: the same bytes
  CHECK_FALSE(std::filesystem::exists(out + "/latents/000004.safetensors.tmp"));

  // The cache trains as data.source: latents.
  std::string latent_config = tt::test::read_file(config);
  latent_config.replace(latent_config.find("source: video"), 13, "source: latents");
  latent_config.replace(latent_config.find(dir / "manifest.jsonl"), (dir / "manifest.jsonl").size(), out + "/manifest.jsonl");
  tt::test::write_file(dir / "latents.yaml", latent_config);
  const auto train = tt::test::run_teletron("train '" + (dir / "latents.yaml") + "' --output '" + (dir / "run") + "' 2>&1");
  INFO(train.output);
  CHECK(train.exit_code == 0);
}
