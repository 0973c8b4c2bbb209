// `teletron train` on raw videos (data.source: video) on the CPU, end to end: clips made with the
// ffmpeg CLI (through the media cache), text embeddings written here, the tiny VAE (fixed random
// weights) and the tiny Transformer; the loss falls. A broken clip is skipped, logged and replaced
// when data.max_failed_share allows it, and stops the run with TT_ERR_DATA when it does not.
// preprocess names its files by content, so an edited manifest re-encodes the changed rows; a resume
// reuses the checkpoint's bucket assignment and may split the global batch differently.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/errors.h"
#include "core/safetensors.h"
#include "model/vae.h"
#include "test/app/train_runs.h"
#include "test/test_util.h"

using Catch::Matchers::ContainsSubstring;
using tt::test::TempDir;

using tt::test::count_of;
using tt::test::read_metrics;

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

// A manifest.jsonl in `dir`: one row per video, each with its own embeddings file (text<row>).
std::string write_manifest(const TempDir& dir, const std::vector<std::string>& videos) {
  std::string text;
  for (size_t r = 0; r < videos.size(); ++r) {
    const std::string embeddings = dir / ("text" + std::to_string(r) + ".safetensors");
    write_embeddings(embeddings, static_cast<int>(r));
    text += "{\"video\": \"" + videos[r] + "\", \"text_embeddings\": \"" + embeddings + "\"}\n";
  }
  tt::test::write_file(dir / "manifest.jsonl", text);
  return dir / "manifest.jsonl";
}

std::string write_config(const TempDir& dir, const std::string& manifest, int64_t steps, double failed_share,
                         int64_t prefetch = 2, const std::string& name = "train_video.yaml",
                         const std::string& device = "cpu", const std::string& flow = "none") {
  std::ostringstream yaml;
  // The flow stage is off unless asked for: TV-L1 at its 256-px working resolution costs the CPU
  // runs more than the tiny model's steps.
  yaml << "tele_tron:\n"
       << "  model: {preset: tiny}\n"
       << "  vae: {preset: tiny}\n"
       << "  data:\n    source: video\n    manifest: " << manifest << "\n"
       << "    buckets: [{frames: 9, height: 64, width: 64}]\n"
       << "    max_failed_share: " << failed_share << "\n"
       << "  data_pipeline: {frame_sampler: {mode: stratified}, augment: {flip: 0.5, crop: random}, prefetch: "
       << prefetch << ", optical_flow: {algorithm: " << flow << "}}\n"
       << "  batch_size: 2\n"
       << "  optimizer: {lr: 1.0e-3, warmup_steps: 5, weight_decay: 0.0}\n"
       << "  flow_matching: {shift: 1.0}\n"
       << "  train: {device: " << device << ", max_steps: " << steps << ", seed: 3, log_every: 5, checkpoint_every: " << steps
       << ", keep_checkpoints: 1}\n";
  const std::string path = dir / name;
  tt::test::write_file(path, yaml.str());
  return path;
}

// `teletron train CONFIG --output OUT EXTRA`, which must succeed; returns what it printed.
std::string train_ok(const std::string& config, const std::string& out, const std::string& extra = "") {
  const auto result = tt::test::run_teletron("train '" + config + "' --output '" + out + "' " + extra + " 2>&1");
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  return result.output;
}

// Two runs' model.safetensors hold the same tensors, bit for bit.
void check_same_weights(const std::string& a_path, const std::string& b_path) {
  const auto a = tt::safetensors::load(a_path);
  const auto b = tt::safetensors::load(b_path);
  REQUIRE(a.size() == b.size());
  for (const auto& [name, tensor] : a) {
    INFO(name);
    CHECK(torch::equal(tensor, b.at(name)));
  }
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) lines.push_back(line);
  return lines;
}

// The latents files preprocess's manifest lists, in its order ("latents/<key>.safetensors").
std::vector<std::string> listed_latents(const std::string& out) {
  std::vector<std::string> files;
  for (const std::string& line : split_lines(tt::test::read_file(out + "/manifest.jsonl")))
    files.push_back(nlohmann::json::parse(line).at("latents").get<std::string>());
  return files;
}

// Row r of `files` was made from clips[r] (manifest line r + 1) and holds text r's embeddings.
void check_pairing(const std::string& out, const std::vector<std::string>& files, const std::vector<std::string>& clips,
                   const TempDir& dir) {
  for (size_t r = 0; r < files.size(); ++r) {
    INFO("row " << r << ": " << files[r]);
    CHECK(files[r].rfind("latents/", 0) == 0);
    const auto header = tt::safetensors::read_header(out + "/" + files[r]);
    CHECK(header.metadata.at("source") == clips[r]);
    CHECK(header.metadata.at("manifest_line") == std::to_string(r + 1));
    const auto stored = tt::safetensors::load(out + "/" + files[r], {"text_states"});
    const auto text = tt::safetensors::load(dir / ("text" + std::to_string(r) + ".safetensors"), {"text_states"});
    CHECK(torch::equal(stored.at("text_states"), text.at("text_states")));
  }
}

}  // namespace

TEST_CASE("train on raw videos (tiny VAE + tiny Transformer, CPU): the loss falls", "[train][video]") {
  const std::vector<std::string> clips = make_clips();
  TempDir dir("tt_train_video");
  const std::string manifest = write_manifest(dir, clips);
  const std::string config = write_config(dir, manifest, 80, 0.0);
  CHECK_THAT(train_ok(config, dir / "run"), ContainsSubstring("videos -> 9x64x64"));
  const auto rows = read_metrics(dir / "run/metrics.jsonl");
  REQUIRE(rows.size() == 16);
  const double first = (rows[0]["loss"].get<double>() + rows[1]["loss"].get<double>()) / 2;
  const double last = (rows[14]["loss"].get<double>() + rows[15]["loss"].get<double>()) / 2;
  INFO("first two logs " << first << ", last two " << last);
  CHECK(last < 0.7 * first);
}

TEST_CASE("train on raw videos with frame_sampler mode motion: without the clips' motion profiles TT_ERR_CONFIG "
          "names validate-data --motion; with them it trains", "[train][video][motion]") {
  const std::vector<std::string> clips = make_clips();
  TempDir dir("tt_train_motion");
  const std::string manifest = write_manifest(dir, std::vector<std::string>(clips.begin(), clips.begin() + 2));
  const std::string config = write_config(dir, manifest, 2, 0.0);
  const std::string motion = " --set data_pipeline.frame_sampler.mode=motion --set data_pipeline.frame_sampler.target_fps=24";
  const auto unscored = tt::test::run_teletron("train '" + config + "' --output '" + dir / "none" + "'" + motion + " 2>&1");
  INFO(unscored.output);
  CHECK(unscored.exit_code != 0);
  CHECK_THAT(unscored.output, ContainsSubstring("TT_ERR_CONFIG"));
  CHECK_THAT(unscored.output, ContainsSubstring("2 of 2 clips have no current motion profile"));
  CHECK_THAT(unscored.output, ContainsSubstring("validate-data CONFIG --motion"));
  const auto scored = tt::test::run_teletron("validate-data '" + config +
                                             "' --device cpu --motion --set data_pipeline.optical_flow.algorithm=tvl1 2>&1");
  INFO(scored.output);
  REQUIRE(scored.exit_code == 0);
  CHECK_THAT(train_ok(config, dir / "run", motion), ContainsSubstring("motion sampling"));
  CHECK_FALSE(read_metrics(dir / "run/metrics.jsonl").empty());
}

TEST_CASE("train on raw videos: a broken clip is skipped within max_failed_share, else TT_ERR_DATA",
          "[train][video]") {
  const std::vector<std::string> clips = make_clips();
  TempDir dir("tt_train_video_bad");
  tt::test::write_file(dir / "broken.mp4", "not a video at all");
  const std::string manifest = write_manifest(dir, {clips[0], clips[1], dir / "broken.mp4", clips[3]});
  {
    const std::string config = write_config(dir, manifest, 4, 0.5);  // 2 of 4 rows may fail
    const auto result = tt::test::run_teletron("train '" + config + "' --output '" + (dir / "ok") + "' 2>&1");
    INFO(result.output);
    CHECK(result.exit_code == 0);
    CHECK_THAT(result.output, ContainsSubstring("1 of 4 rows fit none of data.buckets and are left out"));
    CHECK_THAT(result.output, ContainsSubstring("line 3 "));
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

TEST_CASE("train on raw videos: a clip that opens but fails to decode mid-run is skipped, logged and replaced",
          "[train][video]") {
  const std::vector<std::string> clips = make_clips();
  // A clip whose container and index are whole (moov first) but whose frame data from 45 % on is
  // zeroed: it passes the start-up probe and fails only when a later frame is decoded.
  const auto made = tt::test::media_command(
      "ffmpeg -v error -y -f lavfi -i testsrc2=size=96x80:rate=25 -frames:v 24 -c:v libx264 -g 8 -pix_fmt yuv420p "
      "-movflags +faststart '{media}/tv_faststart.mp4'");
  INFO(made.output);
  REQUIRE(made.exit_code == 0);
  TempDir dir("tt_train_video_midrun");
  std::string bytes = tt::test::read_file(tt::test::media_dir() + "/tv_faststart.mp4");
  const size_t from = bytes.size() * 45 / 100;
  std::fill(bytes.begin() + static_cast<std::ptrdiff_t>(from), bytes.end(), '\0');
  tt::test::write_file(dir / "damaged.mp4", bytes);
  const std::string manifest = write_manifest(dir, {clips[0], clips[1], dir / "damaged.mp4", clips[3]});
  for (int64_t prefetch : {0, 2}) {  // synchronous, and through the prefetch producer + clip workers
    INFO("prefetch " << prefetch);
    const std::string config =
        write_config(dir, manifest, 4, 0.5, prefetch, "midrun" + std::to_string(prefetch) + ".yaml");
    const auto result = tt::test::run_teletron("train '" + config + "' --output '" +
                                               (dir / ("ok" + std::to_string(prefetch))) + "' 2>&1");
    INFO(result.output);
    CHECK(result.exit_code == 0);
    CHECK_THAT(result.output, !ContainsSubstring("fit none of data.buckets"));  // the probe passed it
    CHECK_THAT(result.output, ContainsSubstring("skipping sample (line 3 of"));
    CHECK_THAT(result.output, ContainsSubstring("damaged.mp4"));
    CHECK_THAT(result.output, ContainsSubstring("never came out of the decoder"));
    CHECK_THAT(result.output, ContainsSubstring("1 failed so far"));
    CHECK_THAT(result.output, ContainsSubstring("step 4/4"));
  }
  const std::string strict = write_config(dir, manifest, 4, 0.0, 2, "strict.yaml");
  const auto stopped = tt::test::run_teletron("train '" + strict + "' --output '" + (dir / "stop") + "' 2>&1");
  INFO(stopped.output);
  CHECK(stopped.exit_code == 3);
  CHECK_THAT(stopped.output, ContainsSubstring("TT_ERR_DATA: 1 of 4 rows failed (samples that failed to load), more than data.max_failed_share"));
}

TEST_CASE("preprocess writes the cached-latent dataset, resumes without duplicates, and trains", "[train][video]") {
  const std::vector<std::string> clips = make_clips();
  TempDir dir("tt_preprocess");
  write_manifest(dir, clips);
  const std::string config = write_config(dir, dir / "manifest.jsonl", 4, 0.0);
  const std::string out = dir / "cache";
  const auto first = tt::test::run_teletron("preprocess '" + config + "' --output '" + out + "' --jobs 2 2>&1");
  INFO(first.output);
  REQUIRE(first.exit_code == 0);
  const std::string manifest = tt::test::read_file(out + "/manifest.jsonl");
  const std::vector<std::string> files = listed_latents(out);
  REQUIRE(files.size() == 6);
  check_pairing(out, files, clips, dir);  // row r's file holds clip r's latents and text r
  auto sample = tt::safetensors::load(out + "/" + files[2]);
  CHECK(sample.at("latents").sizes() == torch::IntArrayRef({16, 3, 8, 8}));  // 9x64x64 through 4x/8x
  const std::string third = tt::test::read_file(out + "/" + files[2]);
  // Decoded ahead by data_pipeline.workers (2 here) or by each job itself: the same bytes.
  const std::string inline_out = dir / "cache_inline";
  const auto inline_run = tt::test::run_teletron("preprocess '" + config + "' --output '" + inline_out +
                                                 "' --set data_pipeline.workers=0 2>&1");
  INFO(inline_run.output);
  REQUIRE(inline_run.exit_code == 0);
  CHECK_THAT(first.output, ContainsSubstring("2 job(s) encoding, 2 decode worker(s) ahead of them"));
  CHECK_THAT(first.output, !ContainsSubstring("encoded once on blank pixels"));  // CUDA only
  // Where a row's time went (on the CPU: no GPU intervals to report).
  CHECK_THAT(first.output, ContainsSubstring("preprocess: per row "));
  CHECK_THAT(first.output, ContainsSubstring("ms loading (waiting for the decoders' clip"));
  for (const std::string& file : files) {
    INFO(file);
    CHECK(tt::test::read_file(inline_out + "/" + file) == tt::test::read_file(out + "/" + file));
  }

  // An interrupted run: one file missing, the manifest gone, a stale temporary left behind.
  std::filesystem::remove(out + "/" + files[2]);
  std::filesystem::remove(out + "/manifest.jsonl");
  tt::test::write_file(out + "/" + files[3] + ".tmp", "partial");
  const auto second = tt::test::run_teletron("preprocess '" + config + "' --output '" + out + "' 2>&1");
  INFO(second.output);
  REQUIRE(second.exit_code == 0);
  CHECK_THAT(second.output, ContainsSubstring("5 already done, 1 to encode"));
  CHECK(tt::test::read_file(out + "/manifest.jsonl") == manifest);
  CHECK(tt::test::read_file(out + "/" + files[2]) == third);  // deterministic: the same bytes
  CHECK_FALSE(std::filesystem::exists(out + "/" + files[3] + ".tmp"));

  // The cache trains as data.source: latents.
  std::string latent_config = tt::test::read_file(config);
  latent_config.replace(latent_config.find("source: video"), 13, "source: latents");
  latent_config.replace(latent_config.find(dir / "manifest.jsonl"), (dir / "manifest.jsonl").size(), out + "/manifest.jsonl");
  tt::test::write_file(dir / "latents.yaml", latent_config);
  train_ok(dir / "latents.yaml", dir / "run");
}

TEST_CASE("preprocess with a VAE whose weights overflow: TT_ERR_NAN names the row, writes no file for it",
          "[train][video][preprocess]") {
  const std::vector<std::string> clips = make_clips();
  TempDir dir("tt_preprocess_overflow");
  write_manifest(dir, std::vector<std::string>(clips.begin(), clips.begin() + 2));
  // The tiny VAE's fixed weights with its first convolution scaled to near float's largest value:
  // finite (the loader accepts them), but every clip's activations overflow to inf, then NaN.
  tt::HunyuanVae vae(tt::hunyuan_vae_preset("tiny"));
  vae->randomize_weights(7);
  tt::safetensors::TensorMap weights;
  for (const auto& [name, tensor] : vae->diffusers_parameters()) weights[name] = tensor.detach().clone();
  REQUIRE(weights.count("encoder.conv_in.conv.weight") == 1);
  weights["encoder.conv_in.conv.weight"].fill_(3.0e38f);
  tt::safetensors::save(dir / "overflow.safetensors", weights);
  const std::string config = write_config(dir, dir / "manifest.jsonl", 2, 0.0);
  const auto result =
      tt::test::run_teletron("preprocess '" + config + "' --output '" + (dir / "cache") +
                             "' --set vae.weights='" + (dir / "overflow.safetensors") + "' 2>&1");
  INFO(result.output);
  CHECK(result.exit_code == 8);  // TT_ERR_NAN's
  CHECK_THAT(result.output, ContainsSubstring("TT_ERR_NAN"));
  CHECK_THAT(result.output, ContainsSubstring("the VAE's latents hold non-finite values"));
  CHECK_THAT(result.output, ContainsSubstring("line 1 ("));
  CHECK_THAT(result.output, ContainsSubstring("tele_tron.vae.weights"));
  CHECK(listed_latents(dir / "cache").empty());
  REQUIRE(std::filesystem::is_directory(dir / "cache/latents"));
  for (const auto& entry : std::filesystem::directory_iterator(dir / "cache/latents")) {
    INFO(entry.path());
    CHECK(entry.path().extension() != ".safetensors");
  }
}

TEST_CASE(
    "preprocess on a full disk: TT_ERR_IO stops the run at the first failed write, the rows written stay "
    "listed and the next run encodes only the rest",
    "[train][video][preprocess]") {
  const std::vector<std::string> clips = make_clips();
  TempDir dir("tt_preprocess_full");
  write_manifest(dir, clips);
  const std::string config = write_config(dir, dir / "manifest.jsonl", 2, 0.0);
  const std::string out = dir / "cache";
  const std::string command = "preprocess '" + config + "' --output '" + out + "' --jobs 1 2>&1";
  setenv("TELETRON_FAULTS", "disk_full@3", 1);  // the third row file this run writes meets a full disk
  const auto full = tt::test::run_teletron(command);
  unsetenv("TELETRON_FAULTS");
  INFO(full.output);
  CHECK(full.exit_code == 10);  // TT_ERR_IO's
  CHECK_THAT(full.output, ContainsSubstring("TT_ERR_IO"));
  CHECK_THAT(full.output, ContainsSubstring("preprocess: line 3 ("));
  CHECK_THAT(full.output, ContainsSubstring("No space left on device"));
  CHECK_THAT(full.output,
             ContainsSubstring("run the same command again: the rows this run wrote (2 by then) are "
                               "kept"));
  CHECK_THAT(full.output, !ContainsSubstring("left out"));  // no row is blamed for the disk
  CHECK(listed_latents(out).size() == 2);                   // rows 1 and 2, listed
  for (const auto& entry : std::filesystem::directory_iterator(out + "/latents")) {
    INFO(entry.path());
    CHECK(entry.path().extension() == ".safetensors");  // no temporary left
  }
  const auto rest = tt::test::run_teletron(command);
  INFO(rest.output);
  REQUIRE(rest.exit_code == 0);
  CHECK_THAT(rest.output, ContainsSubstring("2 already done, 4 to encode"));
  const std::vector<std::string> files = listed_latents(out);
  REQUIRE(files.size() == 6);
  check_pairing(out, files, clips, dir);
}

TEST_CASE("preprocess on CUDA: jobs encoding at once on streams of their own write what one job writes",
          "[gpu][train][video]") {
  const std::vector<std::string> clips = make_clips();  // recorded before the GPU check (media cache)
  TT_REQUIRE_GPU();
  TempDir dir("tt_gpu_preprocess_jobs");
  write_manifest(dir, clips);
  const std::string config = write_config(dir, dir / "manifest.jsonl", 2, 0.0, 2, "jobs.yaml", "cuda");
  // cuDNN's heuristic algorithms in both processes (its timed search may pick others per process).
  setenv("TELETRON_CUDNN_BENCHMARK", "0", 1);
  const auto one = tt::test::run_teletron("preprocess '" + config + "' --output '" + (dir / "one") + "' --jobs 1 2>&1");
  const auto three =
      tt::test::run_teletron("preprocess '" + config + "' --output '" + (dir / "three") + "' --jobs 3 2>&1");
  unsetenv("TELETRON_CUDNN_BENCHMARK");
  INFO(one.output);
  INFO(three.output);
  REQUIRE(one.exit_code == 0);
  REQUIRE(three.exit_code == 0);
  CHECK_THAT(three.output, ContainsSubstring("3 job(s) encoding"));
  const std::vector<std::string> files = listed_latents(dir / "one");
  REQUIRE(files.size() == 6);  // as the CPU preprocess test: every clip of make_clips
  CHECK(listed_latents(dir / "three") == files);
  for (const std::string& file : files) {
    INFO(file);
    CHECK(tt::test::read_file((dir / "three") + "/" + file) == tt::test::read_file((dir / "one") + "/" + file));
  }
  check_pairing(dir / "three", files, clips, dir);
}

TEST_CASE("preprocess on CUDA: each job encodes its buckets once on blank pixels on its own thread first",
          "[gpu][train][video]") {
  const std::vector<std::string> clips = make_clips();  // recorded before the GPU check (media cache)
  TT_REQUIRE_GPU();
  TempDir dir("tt_gpu_preprocess_prepare");
  write_manifest(dir, clips);
  const std::string config = write_config(dir, dir / "manifest.jsonl", 2, 0.0, 2, "prepare.yaml", "cuda");
  const std::string line = "bucket shape(s) encoded once on blank pixels on this job's thread";
  const auto two =
      tt::test::run_teletron("preprocess '" + config + "' --output '" + (dir / "out") + "' --jobs 2 2>&1");
  INFO(two.output);
  REQUIRE(two.exit_code == 0);
  CHECK(count_of(two.output, "vae: 1 " + line) == 2);  // one bucket, two job threads
  CHECK(count_of(two.output, line) == 2);
  CHECK(listed_latents(dir / "out").size() == 6);
  // Nothing left to encode: no job prepares anything.
  const auto again =
      tt::test::run_teletron("preprocess '" + config + "' --output '" + (dir / "out") + "' --jobs 2 2>&1");
  INFO(again.output);
  REQUIRE(again.exit_code == 0);
  CHECK_THAT(again.output, ContainsSubstring("6 already done, 0 to encode"));
  CHECK(count_of(again.output, line) == 0);
}

TEST_CASE("preprocess after a manifest edit: changed rows are encoded again, no old latent pairs with a new row",
          "[train][video][preprocess]") {
  const std::vector<std::string> clips = make_clips();
  TempDir dir("tt_preprocess_edit");
  std::vector<std::string> videos(clips.begin(), clips.begin() + 5);
  write_manifest(dir, videos);  // rows r: (clip r, text r)
  const std::string config = write_config(dir, dir / "manifest.jsonl", 4, 0.0);
  const std::string out = dir / "cache";
  const auto first = tt::test::run_teletron("preprocess '" + config + "' --output '" + out + "' 2>&1");
  INFO(first.output);
  REQUIRE(first.exit_code == 0);
  const std::vector<std::string> before = listed_latents(out);
  REQUIRE(before.size() == 5);

  // Rows 0 and 1 swapped (video and text together), row 3 takes another clip with its text, rows 2
  // and 4 stay.
  std::vector<std::string> lines = split_lines(tt::test::read_file(dir / "manifest.jsonl"));
  REQUIRE(lines.size() == 5);
  std::swap(lines[0], lines[1]);
  lines[3].replace(lines[3].find(clips[3]), clips[3].size(), clips[5]);
  std::string edited;
  for (const std::string& line : lines) edited += line + "\n";
  tt::test::write_file(dir / "manifest.jsonl", edited);
  const auto second = tt::test::run_teletron("preprocess '" + config + "' --output '" + out + "' 2>&1");
  INFO(second.output);
  REQUIRE(second.exit_code == 0);
  CHECK_THAT(second.output, ContainsSubstring("2 already done, 3 to encode"));
  CHECK_THAT(second.output, ContainsSubstring("3 file(s)"));  // the old files of rows 0, 1 and 3, unlisted
  const std::vector<std::string> after = listed_latents(out);
  REQUIRE(after.size() == 5);
  CHECK(after[2] == before[2]);
  CHECK(after[4] == before[4]);
  for (size_t r : {0, 1, 3}) CHECK(std::find(before.begin(), before.end(), after[r]) == before.end());
  // Every listed file is its row's: the row's video and the row's text embeddings.
  const std::vector<std::string> now = {clips[1], clips[0], clips[2], clips[5], clips[4]};
  const std::vector<int> texts = {1, 0, 2, 3, 4};
  for (size_t r = 0; r < after.size(); ++r) {
    INFO("row " << r << ": " << after[r]);
    const auto header = tt::safetensors::read_header(out + "/" + after[r]);
    CHECK(header.metadata.at("source") == now[r]);
    CHECK(header.metadata.at("manifest_line") == std::to_string(r + 1));
    const auto stored = tt::safetensors::load(out + "/" + after[r], {"text_states"});
    const auto text = tt::safetensors::load(dir / ("text" + std::to_string(texts[r]) + ".safetensors"), {"text_states"});
    CHECK(torch::equal(stored.at("text_states"), text.at("text_states")));
  }
}

TEST_CASE("train on raw videos: prefetching ahead gives the synchronous run's weights; resume is exact",
          "[train][video][prefetch]") {
  const std::vector<std::string> clips = make_clips();
  TempDir dir("tt_prefetch");
  write_manifest(dir, clips);
  const std::string step10 = "/checkpoints/step_0000010/model.safetensors";
  // 10 steps of 2 samples over 6 rows: the epoch boundary falls inside the prefetched window.
  const std::string synchronous = write_config(dir, dir / "manifest.jsonl", 10, 0.0, 0, "sync.yaml");
  const std::string ahead = write_config(dir, dir / "manifest.jsonl", 10, 0.0, 4, "ahead.yaml");
  train_ok(synchronous, dir / "sync");
  const std::string log = train_ok(ahead, dir / "ahead");
  CHECK_THAT(log, ContainsSubstring("runs up to 4 batches ahead"));
  check_same_weights(dir / "sync" + step10, dir / "ahead" + step10);
  // Stop at step 4 (checkpoint), resume with prefetch to step 10: the same weights as straight.
  const std::string half = write_config(dir, dir / "manifest.jsonl", 10, 0.0, 4, "half.yaml");
  std::string half_text = tt::test::read_file(half);
  half_text.replace(half_text.find("checkpoint_every: 10"), 20, "checkpoint_every: 4 ");
  tt::test::write_file(half, half_text);
  train_ok(half, dir / "resumed", "--max-steps 4");
  train_ok(half, dir / "resumed", "--resume auto --max-steps 10");
  check_same_weights(dir / "sync" + step10, dir / "resumed" + step10);
}

TEST_CASE("train on raw videos with two buckets: clips go to the closest aspect ratio; resume is exact",
          "[train][video][buckets]") {
  const std::vector<std::string> clips = make_clips();  // 0: 96x80, 1: 80x96, 2: 96x96, 3: 80x80, 4: 96x80, 5: 96x96
  TempDir dir("tt_buckets");
  // Landscape and square clips, then the portrait clip three times.
  std::vector<std::string> videos;
  for (size_t r : {0, 2, 3, 4, 5, 1, 1, 1}) videos.push_back(clips[r]);
  write_manifest(dir, videos);
  std::string yaml = tt::test::read_file(write_config(dir, dir / "manifest.jsonl", 8, 0.0, 2, "buckets.yaml"));
  yaml.replace(yaml.find("buckets: [{frames: 9, height: 64, width: 64}]"), 45,
               "buckets: [{frames: 9, height: 64, width: 80}, {frames: 9, height: 80, width: 64}]");
  yaml.replace(yaml.find("checkpoint_every: 8"), 19, "checkpoint_every: 4");
  tt::test::write_file(dir / "buckets.yaml", yaml);
  const std::string config = dir / "buckets.yaml";
  const std::string log = train_ok(config, dir / "straight");
  CHECK_THAT(log, ContainsSubstring("9x64x80: 5 clips, 9x80x64: 3 clips"));
  train_ok(config, dir / "resumed", "--max-steps 4");
  train_ok(config, dir / "resumed", "--resume auto");
  check_same_weights(dir / "straight/checkpoints/step_0000008/model.safetensors",
                     dir / "resumed/checkpoints/step_0000008/model.safetensors");
}

TEST_CASE("train on raw videos: the hunyuan VAE needs weights (or `random`, for benchmarks)", "[train][video]") {
  const std::vector<std::string> clips = make_clips();
  TempDir dir("tt_vae_weights");
  write_manifest(dir, {clips[0]});
  std::string yaml = tt::test::read_file(write_config(dir, dir / "manifest.jsonl", 1, 0.0, 0, "c.yaml"));
  yaml.replace(yaml.find("batch_size: 2"), 13, "batch_size: 1");
  yaml.replace(yaml.find("vae: {preset: tiny}"), 19, "vae: {preset: hunyuan}");
  tt::test::write_file(dir / "c.yaml", yaml);
  const auto refused = tt::test::run_teletron("train '" + (dir / "c.yaml") + "' --output '" + (dir / "a") + "' 2>&1");
  INFO(refused.output);
  CHECK(refused.exit_code == 2);
  CHECK_THAT(refused.output, ContainsSubstring("tele_tron.vae.weights: the hunyuan VAE needs its weights"));
  CHECK_THAT(refused.output, ContainsSubstring("`random`"));
  yaml.replace(yaml.find("vae: {preset: hunyuan}"), 22, "vae: {preset: tiny, weights: random}");
  tt::test::write_file(dir / "c.yaml", yaml);
  const auto random = tt::test::run_teletron("train '" + (dir / "c.yaml") + "' --output '" + (dir / "b") + "' 2>&1");
  INFO(random.output);
  CHECK(random.exit_code == 0);
  CHECK_THAT(random.output, ContainsSubstring("fixed random weights"));
}

TEST_CASE("train on raw videos on CUDA: batches made ahead on the side stream equal synchronous ones; a resume "
          "in the middle of an epoch takes the same batches",
          "[gpu][train][video][prefetch]") {
  const std::vector<std::string> clips = make_clips();  // recorded before the GPU check (media cache)
  TT_REQUIRE_GPU();
  TempDir dir("tt_gpu_resume");
  write_manifest(dir, clips);
  // 10 steps of 2 samples over 6 rows: 3 batches per epoch, so step 4 stops in the middle of epoch 1.
  // The flow stage runs on the GPU's engine (NVOFA) on the producer's stream: it must not change
  // the batches.
  const std::string sync = write_config(dir, dir / "manifest.jsonl", 10, 0.0, 0, "sync.yaml", "cuda", "nvofa");
  const std::string ahead = write_config(dir, dir / "manifest.jsonl", 10, 0.0, 5, "ahead.yaml", "cuda", "nvofa");
  const std::string half = write_config(dir, dir / "manifest.jsonl", 10, 0.0, 5, "half.yaml", "cuda", "nvofa");
  std::string half_text = tt::test::read_file(half);
  half_text.replace(half_text.find("checkpoint_every: 10"), 20, "checkpoint_every: 4 ");
  tt::test::write_file(half, half_text);
  // Heuristic cuDNN algorithms (no per-process timing): the VAE computes the same bits in every run.
  setenv("TELETRON_CUDNN_BENCHMARK", "0", 1);
  auto train = [&](const std::string& config, const std::string& out, const std::string& trace,
                   const std::string& extra) {
    setenv("TELETRON_TRACE_BATCHES", trace.c_str(), 1);
    const auto result = tt::test::run_teletron("train '" + config + "' --output '" + out + "' " + extra + " 2>&1");
    unsetenv("TELETRON_TRACE_BATCHES");
    INFO(result.output);
    REQUIRE(result.exit_code == 0);
    return result.output;
  };
  train(sync, dir / "sync", dir / "sync.trace", "");
  const std::string ahead_log = train(ahead, dir / "ahead", dir / "ahead.trace", "");
  CHECK_THAT(ahead_log, ContainsSubstring("runs up to 5 batches ahead on its own CUDA stream"));
  CHECK_THAT(ahead_log, ContainsSubstring("flow stage nvofa"));
  int64_t scored = 0;
  for (const nlohmann::json& row : read_metrics(dir / "ahead/metrics.jsonl"))
    if (row.contains("motion")) {
      scored += row["motion_samples"].get<int64_t>();
      CHECK(row["motion"].get<double>() > 0.01);
      CHECK(row["flow_gpu_ms_per_sample"].get<double>() > 0);
    }
  CHECK(scored > 0);
  train(half, dir / "resumed", dir / "resumed.trace", "--max-steps 4");
  const std::string resumed_log = train(half, dir / "resumed", dir / "resumed.trace", "--resume auto --max-steps 10");
  unsetenv("TELETRON_CUDNN_BENCHMARK");
  CHECK_THAT(resumed_log, ContainsSubstring("resumed from"));
  const std::vector<nlohmann::json> expected = read_metrics(dir / "sync.trace");
  REQUIRE(expected.size() == 10);
  for (const std::string name : {"ahead.trace", "resumed.trace"}) {
    const std::vector<nlohmann::json> got = read_metrics(dir / name);
    INFO(name);
    REQUIRE(got.size() == expected.size());
    for (size_t k = 0; k < got.size(); ++k) {
      INFO("batch " << k << ": " << got[k].dump() << " vs " << expected[k].dump());
      CHECK(got[k]["indices"] == expected[k]["indices"]);
      CHECK(got[k]["epochs"] == expected[k]["epochs"]);
      CHECK(got[k]["latents_sum"].get<double>() == expected[k]["latents_sum"].get<double>());
      CHECK(got[k]["latents_abs_sum"].get<double>() == expected[k]["latents_abs_sum"].get<double>());
    }
  }
  // The trace covers an epoch boundary inside the prefetch window and the resume inside epoch 1.
  CHECK(expected[3]["epochs"][0] == 1);
  CHECK(expected[4]["epochs"][0] == 1);

  // The CPU path (decode, colour, augment on the host; pinned memory to the GPU's VAE) takes the same
  // samples; its pixels differ from the kernels' within the colour tolerance, so the latents agree
  // only roughly.
  setenv("TELETRON_CUDNN_BENCHMARK", "0", 1);
  train(ahead, dir / "cpu_path", dir / "cpu_path.trace", "--set data_pipeline.video_decoding=cpu");
  unsetenv("TELETRON_CUDNN_BENCHMARK");
  const std::vector<nlohmann::json> cpu_path = read_metrics(dir / "cpu_path.trace");
  REQUIRE(cpu_path.size() == expected.size());
  for (size_t k = 0; k < cpu_path.size(); ++k) {
    INFO("batch " << k << ": " << cpu_path[k].dump() << " vs " << expected[k].dump());
    CHECK(cpu_path[k]["indices"] == expected[k]["indices"]);
    CHECK(cpu_path[k]["epochs"] == expected[k]["epochs"]);
    const double a = cpu_path[k]["latents_abs_sum"].get<double>(), b = expected[k]["latents_abs_sum"].get<double>();
    CHECK(std::abs(a - b) <= 0.02 * b);
  }
}

TEST_CASE("train on raw videos on CUDA: the VAE encoder's largest pass is measured at start-up, bounded by "
          "vae.memory_share and left free beside the step",
          "[gpu][train][video][memory]") {
  const std::vector<std::string> clips = make_clips();  // recorded before the GPU check (media cache)
  TT_REQUIRE_GPU();
  TempDir dir("tt_gpu_vae_share");
  write_manifest(dir, clips);
  const std::string config = write_config(dir, dir / "manifest.jsonl", 2, 0.0, 2, "share.yaml", "cuda");
  const auto ok = tt::test::run_teletron("train '" + config + "' --output '" + (dir / "ok") + "' 2>&1");
  INFO(ok.output);
  REQUIRE(ok.exit_code == 0);
  // The tiny VAE's one 9x64x64 pass takes some memory, far below a quarter of any GPU.
  CHECK_THAT(ok.output, ContainsSubstring("vae: the encoder's largest pass (bucket 9x64x64, vae.tiling: auto) takes "));
  CHECK_THAT(ok.output, ContainsSubstring("(vae.memory_share allows 25 %)"));
  CHECK_THAT(ok.output, ContainsSubstring(" beside the VAE encoder's "));  // the memory check counts it
  // A share smaller than that pass: a stop before step 1 naming the key and the ways out.
  const auto capped = tt::test::run_teletron("train '" + config + "' --output '" + (dir / "capped") +
                                             "' --set vae.memory_share=1e-9 2>&1");
  INFO(capped.output);
  CHECK(capped.exit_code == tt::error_exit_code(tt::ErrorCode::kMemory));
  CHECK_THAT(capped.output, ContainsSubstring("the VAE encoder needs "));
  CHECK_THAT(capped.output, ContainsSubstring("for the largest pass of bucket 9x64x64 (vae.tiling: auto), more than "
                                              "vae.memory_share = 1e-09 of the GPU's "));
  // 256-px tiles would not split a 64x64 clip: not offered.
  CHECK_THAT(capped.output, ContainsSubstring("ways out: a smaller bucket; or raise vae.memory_share"));
  CHECK_FALSE(std::filesystem::exists(dir / "capped/checkpoints"));
}

TEST_CASE("train on raw videos: a resume reuses the checkpoint's bucket assignment; a clip damaged since fails "
          "when loaded and is replaced",
          "[train][video][resume]") {
  const std::vector<std::string> clips = make_clips();
  TempDir dir("tt_bucket_reuse");
  std::vector<std::string> copies;  // copies, so that one can be damaged
  for (size_t i = 0; i < clips.size(); ++i) {
    copies.push_back(dir / ("copy" + std::to_string(i) + ".mp4"));
    std::filesystem::copy_file(clips[i], copies.back());
  }
  write_manifest(dir, copies);
  std::string yaml = tt::test::read_file(write_config(dir, dir / "manifest.jsonl", 10, 0.5, 2, "reuse.yaml"));
  yaml.replace(yaml.find("checkpoint_every: 10"), 20, "checkpoint_every: 4 ");
  tt::test::write_file(dir / "reuse.yaml", yaml);
  const std::string config = dir / "reuse.yaml";
  train_ok(config, dir / "run", "--max-steps 4");
  // Row 3's clip loses its bytes but keeps its size and modification time (the content hash sees
  // only those): the kind of damage a resume cannot see up front.
  const auto time = std::filesystem::last_write_time(copies[2]);
  tt::test::write_file(copies[2], std::string(std::filesystem::file_size(copies[2]), '\0'));
  std::filesystem::last_write_time(copies[2], time);
  // Steps 5..10 take the rest of epoch 1 and all of epoch 2, so row 3 comes up at least once.
  const std::string log = train_ok(config, dir / "run", "--resume auto --max-steps 10");
  CHECK_THAT(log, ContainsSubstring("bucket assignment from the checkpoint (6 rows, 0 left out)"));
  CHECK_THAT(log, !ContainsSubstring("fit none of data.buckets"));
  CHECK_THAT(log, ContainsSubstring("skipping sample (line 3 of"));
  CHECK_THAT(log, ContainsSubstring("step 10/10"));
  // A fresh start probes every file and leaves the row out, dealing other epochs.
  CHECK_THAT(train_ok(config, dir / "fresh", "--max-steps 1"), ContainsSubstring("fit none of data.buckets"));
}

TEST_CASE("train on raw videos with two buckets: after a resume the global batch split differently takes the "
          "same samples in the same steps",
          "[train][video][buckets][resume]") {
  const std::vector<std::string> clips = make_clips();
  TempDir dir("tt_bucket_split");
  std::vector<std::string> videos;
  for (size_t r : {0, 2, 3, 4, 5, 1, 1, 1}) videos.push_back(clips[r]);
  write_manifest(dir, videos);
  std::string yaml = tt::test::read_file(write_config(dir, dir / "manifest.jsonl", 8, 0.0, 2, "split.yaml"));
  yaml.replace(yaml.find("buckets: [{frames: 9, height: 64, width: 64}]"), 45,
               "buckets: [{frames: 9, height: 64, width: 80}, {frames: 9, height: 80, width: 64}]");
  yaml.replace(yaml.find("checkpoint_every: 8"), 19, "checkpoint_every: 4");
  tt::test::write_file(dir / "split.yaml", yaml);
  const std::string config = dir / "split.yaml";
  auto traced = [&](const std::string& out, const std::string& trace, const std::string& extra) {
    setenv("TELETRON_TRACE_BATCHES", trace.c_str(), 1);
    const std::string log = train_ok(config, out, extra);
    unsetenv("TELETRON_TRACE_BATCHES");
    std::vector<int64_t> rows;
    for (const auto& batch : read_metrics(trace))
      for (const auto& row : batch["indices"]) rows.push_back(row.get<int64_t>());
    return std::make_pair(log, rows);
  };
  const auto straight = traced(dir / "straight", dir / "straight.trace", "");
  traced(dir / "resumed", dir / "resumed.trace", "--max-steps 4");
  const auto resumed =
      traced(dir / "resumed", dir / "resumed.trace", "--resume auto --set batch_size=1 --set gradient_accumulation=2");
  CHECK_THAT(resumed.first, ContainsSubstring("the global batch stays 2 samples per step"));
  REQUIRE(straight.second.size() == 16);
  CHECK(resumed.second == straight.second);
}

TEST_CASE("train on raw videos with the flow stage (TV-L1 on the CPU): each metrics row has its samples' mean motion; "
          "with the flow off none", "[train][video][motion]") {
  const std::vector<std::string> clips = make_clips();
  TempDir dir("tt_train_flow_stage");
  const std::string manifest = write_manifest(dir, std::vector<std::string>(clips.begin(), clips.begin() + 2));
  const std::string with_flow = write_config(dir, manifest, 2, 0.0, 0, "flow.yaml", "cpu", "tvl1");
  CHECK_THAT(train_ok(with_flow, dir / "flow"), ContainsSubstring("flow stage tvl1"));
  const std::vector<nlohmann::json> rows = read_metrics(dir / "flow/metrics.jsonl");
  REQUIRE(rows.size() == 1);  // log_every 5: the last step's row covers both steps
  INFO(rows[0].dump());
  REQUIRE(rows[0].contains("motion"));
  CHECK(rows[0]["motion_samples"] == 4);  // 2 steps of 2 samples
  const double motion = rows[0]["motion"].get<double>();
  CHECK(std::isfinite(motion));
  CHECK(motion > 0.01);  // the clips move (test patterns with a turning hue)
  // The same run without the stage: the same weights (the stage only measures), no motion.
  const std::string without = write_config(dir, manifest, 2, 0.0, 0, "noflow.yaml", "cpu", "none");
  CHECK_THAT(train_ok(without, dir / "noflow"), ContainsSubstring("flow stage off"));
  const std::vector<nlohmann::json> plain = read_metrics(dir / "noflow/metrics.jsonl");
  REQUIRE(plain.size() == 1);
  CHECK_FALSE(plain[0].contains("motion"));
  check_same_weights(dir / "flow/checkpoints/step_0000002/model.safetensors",
                     dir / "noflow/checkpoints/step_0000002/model.safetensors");
}

TEST_CASE("train on raw videos: one-frame samples (an image bucket) train with the flow stage on; they get no motion",
          "[train][video][motion]") {
  const std::vector<std::string> clips = make_clips();
  TempDir dir("tt_train_flow_image");
  const std::string manifest = write_manifest(dir, std::vector<std::string>(clips.begin(), clips.begin() + 2));
  std::string yaml = tt::test::read_file(write_config(dir, manifest, 2, 0.0, 0, "image.yaml", "cpu", "tvl1"));
  yaml.replace(yaml.find("frames: 9"), 9, "frames: 1");
  tt::test::write_file(dir / "image.yaml", yaml);
  const std::string log = train_ok(dir / "image.yaml", dir / "run");
  CHECK_THAT(log, !ContainsSubstring("skipping sample"));
  const std::vector<nlohmann::json> rows = read_metrics(dir / "run/metrics.jsonl");
  REQUIRE(rows.size() == 1);
  CHECK_FALSE(rows[0].contains("motion"));
}

TEST_CASE("train on raw videos: data.min_motion / max_motion keep the clips whose validate-data --motion score is in "
          "range; no score is TT_ERR_CONFIG, no clip left TT_ERR_DATA", "[train][video][motion]") {
  const std::vector<std::string> clips = make_clips();
  TempDir dir("tt_train_motion");
  const std::string manifest = write_manifest(dir, clips);
  const std::string config = write_config(dir, manifest, 2, 0.0);
  // No scores yet.
  auto unscored = tt::test::run_teletron("train '" + config + "' --output '" + (dir / "none") +
                                         "' --set data.min_motion=0.1 2>&1");
  INFO(unscored.output);
  CHECK(unscored.exit_code == 2);  // TT_ERR_CONFIG
  CHECK_THAT(unscored.output, ContainsSubstring("6 of 6 clips have no current motion score"));
  CHECK_THAT(unscored.output, ContainsSubstring("teletron validate-data CONFIG --motion"));
  // Score them, then keep those at or above the median score.
  auto scored = tt::test::run_teletron("validate-data '" + config +
                                       "' --motion --set data_pipeline.optical_flow.algorithm=tvl1 2>&1");
  INFO(scored.output);
  REQUIRE(scored.exit_code == 0);
  const nlohmann::json cache = nlohmann::json::parse(tt::test::read_file(manifest + ".motion.json"));
  std::vector<double> scores;
  for (const std::string& clip : clips) scores.push_back(cache.at("clips").at(clip).at("score").get<double>());
  std::vector<double> sorted = scores;
  std::sort(sorted.begin(), sorted.end());
  INFO("scores " << nlohmann::json(scores).dump());
  REQUIRE(sorted[2] < sorted[3]);  // a threshold between them splits the clips 3 / 3
  const double threshold = (sorted[2] + sorted[3]) / 2;
  const auto kept = std::count_if(scores.begin(), scores.end(), [&](double s) { return s >= threshold; });
  const std::string filtered = train_ok(config, dir / "kept", "--set data.min_motion=" + std::to_string(threshold));
  CHECK_THAT(filtered, ContainsSubstring("kept " + std::to_string(kept) + " of 6 clips"));
  // The other side, and nothing left.
  const std::string below = train_ok(config, dir / "below", "--set data.max_motion=" + std::to_string(threshold));
  CHECK_THAT(below, ContainsSubstring("kept " + std::to_string(6 - kept) + " of 6 clips"));
  auto none = tt::test::run_teletron("train '" + config + "' --output '" + (dir / "empty") +
                                     "' --set data.min_motion=1000 2>&1");
  INFO(none.output);
  CHECK(none.exit_code == 3);  // TT_ERR_DATA
  CHECK_THAT(none.output, ContainsSubstring("leave no clip"));
}
