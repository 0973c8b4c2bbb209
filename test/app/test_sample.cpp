// End to end through the built executable: `teletron sample` on a tiny model and the tiny VAE writes
// an MP4 of the asked frames and size (read back with the project's VideoReader) and, with the same
// seed, the same latents; `validation.every` writes <run>/samples/step_N.mp4 and a GIF image summary
// during training without changing what training computes.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <torch/torch.h>

#include <filesystem>
#include <set>
#include <string>

#include "core/checkpoint.h"
#include "core/safetensors.h"
#include "core/tensorboard.h"
#include "pipeline/video_reader.h"
#include "test/app/train_runs.h"
#include "test/test_util.h"

using Catch::Matchers::ContainsSubstring;

namespace {

// A prompt for the tiny preset (text_embed_dim 64, pooled 32): 8 tokens, the last 3 padding.
std::string write_prompt(const std::string& path) {
  torch::manual_seed(5);
  torch::Tensor mask = torch::zeros({8}, torch::kUInt8);
  mask.slice(0, 0, 5).fill_(1);
  tt::safetensors::save(path, {{"text_states", torch::randn({8, 64})}, {"text_mask", mask}, {"pooled", torch::randn({32})}});
  return path;
}

const char* const kTinyVae = "  vae: {preset: tiny}\n";

}  // namespace

TEST_CASE("teletron sample writes an MP4 of the asked frames and size, reproducibly", "[sample]") {
  tt::test::TrainWorkspace ws(4, kTinyVae, "tt_sample");
  ws.train("run", "--max-steps 1");
  const auto latest = tt::checkpoint::find_latest(ws.dir / "run/checkpoints");
  REQUIRE(latest.has_value());
  const std::string weights = *latest + "/" + tt::checkpoint::kModelWeightsFile;
  const std::string prompt = write_prompt(ws.dir / "prompt.safetensors");
  const std::string base = "sample " + ws.config + " --weights " + weights + " --text-embeddings " + prompt +
                           " --height 32 --width 48 --steps 2 --seed 11 --device cpu";
  const std::string common = base + " --frames 5";

  const auto first = tt::test::run_teletron(common + " --output " + (ws.dir / "a.mp4") + " --latents-out " +
                                            (ws.dir / "a.safetensors"));
  INFO(first.output);
  REQUIRE(first.exit_code == 0);
  CHECK_THAT(first.output, ContainsSubstring("step 2/2"));
  CHECK_THAT(first.output, ContainsSubstring("s per video"));
  tt::VideoReader reader(ws.dir / "a.mp4");
  CHECK(reader.info().frame_count == 5);
  CHECK(reader.info().height == 32);
  CHECK(reader.info().width == 48);

  const auto second = tt::test::run_teletron(common + " --output " + (ws.dir / "b.mp4") + " --latents-out " +
                                             (ws.dir / "b.safetensors"));
  REQUIRE(second.exit_code == 0);
  const torch::Tensor a = tt::safetensors::load(ws.dir / "a.safetensors").at("latents");
  const torch::Tensor b = tt::safetensors::load(ws.dir / "b.safetensors").at("latents");
  CHECK(a.sizes() == torch::IntArrayRef({1, 16, 2, 4, 6}));
  CHECK(torch::equal(a, b));

  // --weights random: the config's architecture freshly initialised (timing at real shapes).
  const auto random = tt::test::run_teletron("sample " + ws.config + " --weights random --text-embeddings " + prompt +
                                             " --height 32 --width 48 --steps 2 --frames 5 --device cpu --output " +
                                             (ws.dir / "r.mp4"));
  INFO(random.output);
  CHECK(random.exit_code == 0);
  CHECK_THAT(random.output, ContainsSubstring("timing only"));
  CHECK(std::filesystem::exists(ws.dir / "r.mp4"));

  // A shape the VAE cannot make is TT_ERR_CONFIG before anything is built.
  const auto bad = tt::test::run_teletron(base + " --frames 6 --output " + (ws.dir / "c.mp4"));
  CHECK(bad.exit_code != 0);
  CHECK_THAT(bad.output, ContainsSubstring("TT_ERR_CONFIG"));
  CHECK_THAT(bad.output, ContainsSubstring("4n + 1"));
}

TEST_CASE("validation.every writes videos and GIFs during training and changes nothing else", "[sample][validation]") {
  tt::test::TrainWorkspace ws(4, kTinyVae, "tt_validation");
  const std::string prompt = write_prompt(ws.dir / "prompt.safetensors");
  const std::string validation = " --set validation.every=2 --set validation.steps=2 --set validation.frames=5 "
                                 "--set validation.height=32 --set validation.width=32 --set "
                                 "validation.text_embeddings=" + prompt;
  const auto run = ws.train("with", "--max-steps 4" + validation);
  CHECK_THAT(run.output, ContainsSubstring("validation: step 4"));
  for (const char* name : {"step_000002.mp4", "step_000004.mp4"}) {
    const std::string path = ws.dir / ("with/samples/" + std::string(name));
    REQUIRE(std::filesystem::exists(path));
    tt::VideoReader reader(path);
    CHECK(reader.info().frame_count == 5);
    CHECK(reader.info().width == 32);
  }
  CHECK_FALSE(std::filesystem::exists(ws.dir / "with/samples/step_000001.mp4"));
  std::set<int64_t> gif_steps;
  for (const auto& file : tt::tensorboard_event_files(ws.dir / "with"))
    for (const auto& event : tt::read_tensorboard_events(file))
      for (const auto& image : event.images)
        if (image.tag == "validation/video") gif_steps.insert(event.step);
  CHECK(gif_steps == std::set<int64_t>{2, 4});

  // The same run without validation ends with the same weights, bit for bit.
  ws.train("without", "--max-steps 4");
  const auto with = tt::checkpoint::find_latest(ws.dir / "with/checkpoints");
  const auto without = tt::checkpoint::find_latest(ws.dir / "without/checkpoints");
  REQUIRE((with && without));
  CHECK(tt::test::weight_difference(*with, *without) == 0.0);

  // Without a prompt: TT_ERR_CONFIG naming the key, before step 0.
  const auto missing = tt::test::run_teletron("train " + ws.config + " --output " + (ws.dir / "missing") +
                                              " --max-steps 2 --set validation.every=2");
  CHECK(missing.exit_code != 0);
  CHECK_THAT(missing.output, ContainsSubstring("validation.text_embeddings"));
}
