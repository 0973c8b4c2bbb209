// BatchPrefetcher and the stream hand-off behind it:
// - on the video source, batches prepared `capacity` ahead (on their own CUDA stream on a GPU) equal
//   the batches of synchronous loading, in order (CPU and [gpu] variants; the GPU one also checks
//   that the tensors arrive on the device). The VAE's convolutions run on two threads there, and
//   LibTorch keeps cuDNN's benchmark results per thread: with benchmarking on, each thread times the
//   algorithms itself and, on a busy GPU, may pick another one, whose bf16 result differs in the last
//   bits on every batch. The test pins cuDNN's heuristic choice (TELETRON_CUDNN_BENCHMARK=0), the
//   same on both threads;
// - the hazard test: a spin kernel holds the consumer's stream while the producer frees, re-allocates
//   and overwrites a handed-off batch's memory. With record_stream (the default) the consumer still
//   reads the batch; with it switched off (a test-only switch) it reads the producer's sentinel, every
//   time, which shows that the check can fail;
// - the order in which the producer hints and loads planned batches.
#include <catch2/catch_test_macros.hpp>
#include <torch/torch.h>

#ifdef TELETRON_WITH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

#include <cstdlib>
#include <future>
#include <mutex>
#include <string>
#include <vector>

#include "app/config.h"
#include "app/options.h"
#include "app/prefetch.h"
#include "app/training_data.h"
#include "core/safetensors.h"
#include "core/stream_handoff.h"
#include "cuda/ops.h"
#include "test/test_util.h"

namespace {

using tt::test::TempDir;

// A batch of one row, `row`, from epoch 0.
tt::PlannedBatch one_row_plan(int64_t row) {
  tt::PlannedBatch plan;
  plan.indices = {row};
  plan.epochs = {0};
  return plan;
}

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
          manifest + "\n    buckets: [{frames: 9, height: 64, width: 64}]\n  batch_size: 2\n" +
          // On the GPU the flow stage (NVOFA) runs on the producer's stream too; on the CPU it is off
          // (TV-L1 at its working resolution would cost this test more than the rest).
          "  data_pipeline: {optical_flow: {algorithm: " + (device_name == "cpu" ? "none" : "nvofa") + "}}\n",
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
    const torch::Tensor got = item.batch.latents.cpu();
    INFO("batch " << k << ": max |prefetched - synchronous| = "
                  << (got - expected[static_cast<size_t>(k)]).abs().max().item<float>());
    CHECK(torch::equal(got, expected[static_cast<size_t>(k)]));
  }
}

}  // namespace

TEST_CASE("prefetched batches equal synchronous ones (CPU)", "[prefetch]") { check_prefetch_equals_synchronous("cpu"); }

TEST_CASE("prefetched batches equal synchronous ones on a side stream (CUDA)", "[gpu][prefetch]") {
  TempDir record("tt_prefetch_record");
  (void)make_dataset(record);  // record the clips before the GPU check on machines with the CLI
  TT_REQUIRE_GPU();
  at::globalContext().setDeterministicCuDNN(true);
  // The video source sets cuDNN's benchmark flag from TELETRON_CUDNN_BENCHMARK (on unless "0"); the
  // same algorithms on the producer's thread as on this one need it off. Not overwritten when set,
  // so TELETRON_CUDNN_BENCHMARK=1 shows the per-thread choice on a busy GPU.
  setenv("TELETRON_CUDNN_BENCHMARK", "0", /*overwrite=*/0);
  check_prefetch_equals_synchronous("cuda:0");
}

#ifdef TELETRON_WITH_CUDA
namespace {

struct HazardResult {
  bool consumer_saw_batch = false;     // every value the consumer read was the batch's
  bool consumer_saw_sentinel = false;  // some value was the producer's sentinel
  bool same_block = false;             // the producer's new tensor got the batch's memory
  bool timed_out = false;              // the spin kernel gave up waiting for the producer's flag
};

// Batch 0 (all 1) goes to the consumer, whose stream is then held by a spin kernel; behind it the
// consumer queues a copy of the batch, and drops the batch. Only then does the producer make batch
// 1: it allocates a tensor of batch 0's size on its stream, fills it with the sentinel -7 and sets
// the flag that releases the spin. Without record_stream the allocator gives the producer batch 0's
// memory at once, and the consumer's copy (run after the spin) reads -7.
//
// While the spin runs, nothing may wait for the whole device, or it waits for the spin, which waits
// for the producer: a deadlock until the spin's timeout. Two things do that unless prepared: the
// first launch of a kernel (CUDA loads modules lazily, and loading one waits for the device) and
// cudaMalloc. So every kernel used during the spin has run once before it, and every tensor made
// during it comes from memory the caching allocator already holds: the consumer's copy is allocated
// before the spin, and the producer keeps a spare block (twice the size, so that with record_stream
// off the exact-size block of batch 0 is still the best fit).
class Release {  // sets the promise when the test leaves early, so that the producer never waits forever
 public:
  explicit Release(std::promise<void>& promise) : promise_(promise) {}
  ~Release() { set(); }
  void set() {
    if (!done_) promise_.set_value();
    done_ = true;
  }

 private:
  std::promise<void>& promise_;
  bool done_ = false;
};

HazardResult run_hazard(bool record_stream) {
  const torch::Device device("cuda:0");
  const int64_t numel = (3 << 20) + 4099;  // 12 MiB + a bit: a block of its own
  const auto floats = torch::TensorOptions().device(device).dtype(torch::kFloat32);
  const auto ints = floats.dtype(torch::kInt32);
  torch::Tensor flag = torch::zeros({1}, ints);
  (void)torch::empty({1}, ints).fill_(1);  // the kernels the spin's window uses, loaded before it
  (void)torch::empty({1}, floats).fill_(-7.0);
  torch::cuda::synchronize();
  std::promise<void> dropped_promise;
  std::shared_future<void> dropped = dropped_promise.get_future().share();
  void* batch_memory = nullptr;
  HazardResult result;
  tt::StreamHandoff::set_record_stream_for_testing(record_stream);
  {
    Release release(dropped_promise);
    int64_t planned = 0;
    tt::BatchPrefetcher prefetcher(
        1, device,
        [&] { return one_row_plan(planned++); },
        [&](const tt::PlannedBatch& plan) {
          tt::LatentBatch batch;
          if (plan.indices[0] == 0) {
            batch.latents = torch::ones({numel}, floats);
            batch_memory = batch.latents.data_ptr();
            (void)torch::empty({2 * numel}, floats);  // the spare block, cached for this stream
          } else if (plan.indices[0] > 1) {
            batch.latents = torch::zeros({1}, floats);  // made ahead while the test ends
          } else {
            dropped.wait();  // the consumer has let batch 0 go
            torch::Tensor reused = torch::empty({numel}, floats);
            result.same_block = reused.data_ptr() == batch_memory;
            reused.fill_(-7.0);
            flag.fill_(1);  // after the sentinel, on this (the producer's) stream
            batch.latents = reused;
          }
          return batch;
        });
    torch::Tensor copy = torch::empty({numel}, floats);
    torch::Tensor timed_out;  // spin_until_set allocates it before the spin starts
    {
      tt::BatchPrefetcher::Item item = prefetcher.next();
      timed_out = tt::spin_until_set(flag, 20.0);
      copy.copy_(item.batch.latents);  // queued behind the spin on the consumer's stream
    }  // the consumer's last reference to batch 0 goes here
    release.set();
    (void)prefetcher.next();
    const torch::Tensor host = copy.cpu();  // waits for the consumer's stream
    result.timed_out = timed_out.item<int32_t>() != 0;
    result.consumer_saw_batch = torch::all(host == 1.0).item<bool>();
    result.consumer_saw_sentinel = torch::any(host == -7.0).item<bool>();
  }
  tt::StreamHandoff::set_record_stream_for_testing(true);
  torch::cuda::synchronize();
  return result;
}

}  // namespace

TEST_CASE("a handed-off batch's memory is not re-used while the consumer's stream still reads it (CUDA)",
          "[gpu][prefetch]") {
  TT_REQUIRE_GPU();
  SECTION("record_stream on (the default): the consumer reads the batch") {
    const HazardResult result = run_hazard(true);
    CHECK_FALSE(result.timed_out);
    CHECK_FALSE(result.same_block);
    CHECK(result.consumer_saw_batch);
    CHECK_FALSE(result.consumer_saw_sentinel);
  }
  SECTION("record_stream off: the test sees the hazard (it can fail)") {
    const HazardResult result = run_hazard(false);
    CHECK_FALSE(result.timed_out);
    CHECK(result.same_block);
    CHECK(result.consumer_saw_sentinel);
  }
}
#endif

TEST_CASE("the prefetch producer hints planned batches in order, lookahead ahead of the one it loads", "[prefetch]") {
  std::mutex mutex;
  std::vector<int64_t> hinted, loaded;
  int64_t planned = 0;
  bool loaded_before_hinted = false;  // Catch2's CHECK is not for other threads: checked at the end
  {
    tt::BatchPrefetcher prefetcher(
        2, torch::kCPU,
        [&] { return one_row_plan(planned++); },
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
