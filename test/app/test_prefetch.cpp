// BatchPrefetcher on the video source: batches prepared `capacity` ahead (on their own CUDA stream on
// a GPU) equal the batches of synchronous loading, in order, while the consumer keeps its own stream
// busy and churns the caching allocator between batches (a use-after-free of a prefetched tensor's
// memory would change its contents). CPU and [gpu] variants; the GPU one also checks that the
// tensors arrive on the device.
#include <catch2/catch_test_macros.hpp>
#include <torch/torch.h>

#ifdef TELETRON_WITH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

#include <mutex>
#include <string>
#include <vector>

#include "app/config.h"
#include "app/options.h"
#include "app/prefetch.h"
#include "app/training_data.h"
#include "core/safetensors.h"
#include "test/test_util.h"

namespace {

using tt::test::TempDir;

std::string make_dataset(const TempDir& dir) {
  std::string manifest;
  for (int i = 0; i < 4; ++i) {
    const std::string name = "pf_clip" + std::to_string(i) + ".mp4";
    const auto result = tt::test::media_command("ffmpeg -v error -y -f lavfi -i testsrc2=size=96x80:rate=25 -vf \"hue=h=" +
                                                std::to_string(40 * i) + "*t\" -frames:v 17 -c:v libx264 -g 8 "
                                                "-pix_fmt yuv420p '{media}/" + name + "'");
    INFO(result.output);
    REQUIRE(result.exit_code == 0);
    const std::string embeddings = dir / ("text" + std::to_string(i) + ".safetensors");
    torch::manual_seed(i);
    tt::safetensors::save(embeddings, {{"text_states", torch::randn({4, 64})},
                                       {"text_mask", torch::ones({4}, torch::kUInt8)},
                                       {"pooled", torch::randn({32})}});
    manifest += "{\"video\": \"" + tt::test::media_dir() + "/" + name + "\", \"text_embeddings\": \"" + embeddings +
                "\"}\n";
  }
  tt::test::write_file(dir / "manifest.jsonl", manifest);
  return dir / "manifest.jsonl";
}

void check_prefetch_equals_synchronous(const std::string& device_name) {
  TempDir dir("tt_prefetch_batches");
  const std::string manifest = make_dataset(dir);
  const tt::Config config = tt::load_config_text(
      "tele_tron:\n  model: {preset: tiny}\n  vae: {preset: tiny}\n  data:\n    source: video\n    manifest: " +
          manifest + "\n    buckets: [{frames: 9, height: 64, width: 64}]\n  batch_size: 2\n",
      "(test)");
  const torch::Device device(device_name);
  auto data = tt::make_training_data(config, tt::model_config_from(config.model), device);
  // Plan: 10 batches of 2 over the 4 rows, epochs 0.. in turn.
  auto plan_of = [](int64_t k) {
    tt::PlannedBatch plan;
    for (int64_t j = 0; j < 2; ++j) {
      const int64_t position = 2 * k + j;
      plan.indices.push_back(position % 4);
      plan.epochs.push_back(position / 4);
    }
    return plan;
  };
  std::vector<torch::Tensor> expected;
  for (int64_t k = 0; k < 10; ++k) expected.push_back(data->get_batch(plan_of(k).indices, plan_of(k).epochs).latents.cpu());

  int64_t planned = 0;
  tt::BatchPrefetcher prefetcher(
      4, device, [&] { return plan_of(planned++); },
      [&](const tt::PlannedBatch& plan) { return data->get_batch(plan.indices, plan.epochs); });
  torch::Tensor busy = torch::randn({512, 512}, torch::TensorOptions().device(device));
  for (int64_t k = 0; k < 10; ++k) {
    tt::BatchPrefetcher::Item item = prefetcher.next();
    CHECK(item.batch.latents.device() == device);
    // Consumer work on its own stream, and allocator churn of the same sizes as the batches.
    for (int i = 0; i < 20; ++i) busy = torch::tanh(busy.matmul(busy) * 1e-3);
    std::vector<torch::Tensor> churn;
    for (int i = 0; i < 8; ++i) churn.push_back(torch::full_like(item.batch.latents, 7.0));
    INFO("batch " << k);
    CHECK(torch::equal(item.batch.latents.cpu(), expected[static_cast<size_t>(k)]));
  }
}

}  // namespace

TEST_CASE("prefetched batches equal synchronous ones (CPU)", "[prefetch]") { check_prefetch_equals_synchronous("cpu"); }

TEST_CASE("prefetched batches equal synchronous ones on a side stream (CUDA)", "[gpu][prefetch]") {
  TempDir record("tt_prefetch_record");
  (void)make_dataset(record);  // record the clips before the GPU check on machines with the CLI
  TT_REQUIRE_GPU();
  at::globalContext().setDeterministicCuDNN(true);
  at::globalContext().setBenchmarkCuDNN(false);
  check_prefetch_equals_synchronous("cuda:0");
}

TEST_CASE("the prefetch producer hints planned batches in order, lookahead ahead of the one it loads", "[prefetch]") {
  std::mutex mutex;
  std::vector<int64_t> hinted, loaded;
  int64_t planned = 0;
  bool loaded_before_hinted = false;  // Catch2's CHECK is not for other threads: checked at the end
  {
    tt::BatchPrefetcher prefetcher(
        2, torch::kCPU,
        [&] {
          tt::PlannedBatch plan;
          plan.indices = {planned++};
          plan.epochs = {0};
          return plan;
        },
        [&](const tt::PlannedBatch& plan) {
          std::lock_guard<std::mutex> lock(mutex);
          // Every batch is hinted before it is loaded, with `lookahead` later ones hinted as well.
          if (static_cast<int64_t>(hinted.size()) < plan.indices[0] + 1 + 3) loaded_before_hinted = true;
          loaded.push_back(plan.indices[0]);
          tt::LatentBatch batch;
          batch.latents = torch::full({1}, static_cast<double>(plan.indices[0]));
          return batch;
        },
        [&](const tt::PlannedBatch& plan) {
          std::lock_guard<std::mutex> lock(mutex);
          hinted.push_back(plan.indices[0]);
        },
        3);
    for (int64_t k = 0; k < 6; ++k) CHECK(prefetcher.next().batch.latents.item<double>() == static_cast<double>(k));
  }
  CHECK_FALSE(loaded_before_hinted);
  CHECK(loaded.size() >= 6);
  for (size_t i = 0; i < hinted.size(); ++i) CHECK(hinted[i] == static_cast<int64_t>(i));
  for (size_t i = 0; i < loaded.size(); ++i) CHECK(loaded[i] == static_cast<int64_t>(i));
}
