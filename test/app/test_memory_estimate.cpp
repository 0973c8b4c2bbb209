// The step's memory estimate (app/memory_estimate.h): the counted parts equal what the trainer
// allocates (LoRA's trainable count equals attach_lora's), the linear extrapolation places the
// checkpointed blocks as the model does, a step that does not fit is TT_ERR_MEMORY with the ways
// out; on the GPU the estimate from shallow probes meets the full model's measured peak.
#include <torch/torch.h>
#include <catch2/catch_test_macros.hpp>

#include <catch2/matchers/catch_matchers_floating_point.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <limits>

#include <cmath>

#include "app/config.h"
#include "app/memory_estimate.h"
#include "app/options.h"
#include "core/errors.h"
#include "model/flops.h"
#include "model/lora.h"
#include "model/transformer.h"
#include "test/model/small_model.h"
#include "test/test_util.h"

using Catch::Matchers::ContainsSubstring;
using Catch::Matchers::WithinRel;

namespace {

tt::Config config_of(const std::string& yaml) { return tt::load_config_text(yaml, "(test)", {}); }

// The tiny preset widened (4 heads of 64) so that activations, not weights, make a step's peak.
tt::HunyuanVideoConfig wide_tiny_model(int64_t doubles, int64_t singles) {
  tt::HunyuanVideoConfig model = tt::hunyuan_preset("tiny");
  model.num_attention_heads = 4;
  model.attention_head_dim = 64;
  model.rope_axes_dim = {16, 24, 24};
  model.num_layers = doubles;
  model.num_single_layers = singles;
  return model;
}

}  // namespace

TEST_CASE("memory estimate: LoRA's trainable count equals what attach_lora makes", "[memory]") {
  tt::HunyuanVideoConfig model = tt::test::small_model_config();
  model.num_layers = 3;
  model.num_single_layers = 4;
  for (const std::string& targets :
       {std::string("[]"), std::string("[to_q, proj_out, norm1.linear]"),
        std::string("['single_transformer_blocks\\.[13]\\.proj_mlp', ff.net.2]")}) {
    INFO("targets " << targets);
    const tt::Config config = config_of("tele_tron:\n  model:\n    lora:\n      rank: 3\n      targets: " + targets + "\n");
    tt::HunyuanVideoTransformer transformer(model);
    const tt::LoraSet set = transformer->attach_lora(tt::lora_options_from(config.model));
    const tt::CountedMemory counted = tt::count_memory(config, model, /*cuda=*/true);
    CHECK(counted.trainable == set.parameter_count());
    CHECK(counted.parameters == transformer->parameter_count());
    // The frozen base in bf16 under autocast, the adapters, their gradients and two moments in fp32.
    CHECK(counted.weight_bytes == 2.0 * counted.parameters + 4.0 * counted.trainable);
    CHECK(counted.gradient_bytes == 4.0 * counted.trainable);
    CHECK(counted.optimizer_bytes == 8.0 * counted.trainable);
  }
}

TEST_CASE("memory estimate: full training counts fp32 or bf16 master weights, gradients and AdamW state",
          "[memory]") {
  const tt::HunyuanVideoConfig model = tt::hunyuan_preset("13b");
  const double params = static_cast<double>(tt::transformer_parameter_count(model));
  const tt::CountedMemory fp32 = tt::count_memory(config_of("tele_tron: {}\n"), model, true);
  CHECK(fp32.trainable == fp32.parameters);
  CHECK(fp32.weight_bytes == 4.0 * params);
  CHECK(fp32.gradient_bytes == 4.0 * params);
  CHECK(fp32.optimizer_bytes == 8.0 * params);
  // The 13B's fp32 state alone is more than an H200 holds: 16 bytes per parameter, ~205 GB.
  CHECK(fp32.weight_bytes + fp32.gradient_bytes + fp32.optimizer_bytes > 200e9);
  const tt::CountedMemory bf16 =
      tt::count_memory(config_of("tele_tron:\n  mixed_precision:\n    master_weights: bf16\n"), model, true);
  CHECK(bf16.weight_bytes == 2.0 * params);
  CHECK(bf16.gradient_bytes == 2.0 * params);
  CHECK(bf16.optimizer_bytes == 8.0 * params);
}

TEST_CASE("memory estimate: the probes extrapolate linearly, checkpointed blocks placed as the model places them",
          "[memory]") {
  // A made-up device where the rest of the model costs 10, each double block 7 (checkpointed 2),
  // each single 5 (checkpointed 1), the backward's scratch 3, and a recomputed block's activations 6.
  auto truth = [](int64_t doubles, int64_t singles, int64_t every_n) {
    double peak = 10.0 + 3.0;
    bool any = false;
    for (int64_t i = 0; i < doubles + singles; ++i) {
      const bool ck = every_n > 0 && i % every_n == 0;
      any = any || ck;
      peak += i < doubles ? (ck ? 2.0 : 7.0) : (ck ? 1.0 : 5.0);
    }
    return peak + (any ? 6.0 : 0.0);
  };
  const tt::ProbePeaks none{truth(1, 1, 0), truth(2, 1, 0), truth(1, 2, 0)};
  const tt::ProbePeaks all{truth(1, 1, 1), truth(2, 1, 1), truth(1, 2, 1)};
  for (int64_t every_n : {0, 1, 2, 3, 7}) {
    INFO("every_n " << every_n);
    CHECK(tt::extrapolate_peak(none, all, 20, 40, every_n) == truth(20, 40, every_n));
    CHECK(tt::extrapolate_peak(none, all, 3, 5, every_n) == truth(3, 5, every_n));
    // The same by counts: every_n's counts give every_n's peak.
    CHECK(tt::extrapolate_peak(none, all, 20, 40, tt::checkpoint_counts(20, 40, every_n)) ==
          truth(20, 40, every_n));
  }
  CHECK(tt::checkpoint_counts(20, 40, 3) == tt::CheckpointCounts{7, 13});  // 0, 3, .., 18; 21, .., 57
  CHECK(tt::checkpoint_counts(20, 40, 0) == tt::CheckpointCounts{0, 0});
  // A run probes only the mode it uses (the other stays NaN): its peak must not become NaN.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const tt::ProbePeaks unprobed{nan, nan, nan};
  CHECK(tt::extrapolate_peak(none, unprobed, 20, 40, 0) == truth(20, 40, 0));
  CHECK(tt::extrapolate_peak(unprobed, all, 20, 40, 1) == truth(20, 40, 1));
}

namespace {

// A made-up device as above, with the per-block costs as parameters: the rest 10, scratch 3, a
// recomputed block's activations 6; the first `d_ck` doubles and `s_ck` singles recomputed.
double made_up_peak(int64_t doubles, int64_t singles, int64_t d_ck, int64_t s_ck, double d_keep,
                    double d_ck_cost, double s_keep, double s_ck_cost) {
  const double peak = 13.0 + static_cast<double>(d_ck) * d_ck_cost +
                      static_cast<double>(doubles - d_ck) * d_keep + static_cast<double>(s_ck) * s_ck_cost +
                      static_cast<double>(singles - s_ck) * s_keep;
  return peak + (d_ck + s_ck > 0 ? 6.0 : 0.0);
}

}  // namespace

TEST_CASE(
    "activation_checkpointing auto: the fewest blocks within the budget, the kind that frees more first",
    "[memory]") {
  for (const bool doubles_free_more : {true, false}) {
    // A double block keeps 7 (2 when recomputed), a single 5 (1): doubles free 5 a block, singles 4;
    // or the other way round (doubles 6 -> 2 free 4, singles 7 -> 2 free 5).
    const double d_keep = doubles_free_more ? 7.0 : 6.0, d_ck = 2.0;
    const double s_keep = doubles_free_more ? 5.0 : 7.0, s_ck = doubles_free_more ? 1.0 : 2.0;
    auto truth = [&](int64_t doubles, int64_t singles, int64_t dc, int64_t sc) {
      return made_up_peak(doubles, singles, dc, sc, d_keep, d_ck, s_keep, s_ck);
    };
    const tt::ProbePeaks none{truth(1, 1, 0, 0), truth(2, 1, 0, 0), truth(1, 2, 0, 0)};
    const tt::ProbePeaks all{truth(1, 1, 1, 1), truth(2, 1, 2, 1), truth(1, 2, 1, 2)};
    const int64_t doubles = 20, singles = 40;
    const double peak_none = truth(doubles, singles, 0, 0),
                 peak_all = truth(doubles, singles, doubles, singles);
    INFO("doubles free more: " << doubles_free_more << ", none " << peak_none << ", all " << peak_all);
    // Enough memory: nothing recomputed. Too little even for every block: every block (the fit check says
    // so).
    CHECK(tt::fewest_checkpointed(none, all, doubles, singles, peak_none) == tt::CheckpointCounts{0, 0});
    CHECK(tt::fewest_checkpointed(none, all, doubles, singles, peak_all - 1.0) ==
          tt::CheckpointCounts{doubles, singles});
    CHECK(tt::fewest_checkpointed(none, all, doubles, singles, peak_all) ==
          tt::CheckpointCounts{doubles, singles});
    // Every budget in between: the plan fits it, one block fewer in the same order does not.
    for (double budget = peak_all; budget < peak_none; budget += 3.0) {
      INFO("budget " << budget);
      const tt::CheckpointCounts plan = tt::fewest_checkpointed(none, all, doubles, singles, budget);
      CHECK(truth(doubles, singles, plan.doubles, plan.singles) <= budget);
      CHECK(tt::extrapolate_peak(none, all, doubles, singles, plan) ==
            truth(doubles, singles, plan.doubles, plan.singles));
      if (doubles_free_more) {
        CHECK((plan.singles == 0 || plan.doubles == doubles));  // doubles first
        if (plan.singles > 0)
          CHECK(truth(doubles, singles, plan.doubles, plan.singles - 1) > budget);
        else if (plan.doubles > 0)
          CHECK(truth(doubles, singles, plan.doubles - 1, 0) > budget);
      } else {
        CHECK((plan.doubles == 0 || plan.singles == singles));  // singles first
        if (plan.doubles > 0)
          CHECK(truth(doubles, singles, plan.doubles - 1, plan.singles) > budget);
        else if (plan.singles > 0)
          CHECK(truth(doubles, singles, 0, plan.singles - 1) > budget);
      }
    }
    // A middle budget takes some blocks of the first kind only.
    const double middle = 0.5 * (peak_none + peak_all);
    const tt::CheckpointCounts plan = tt::fewest_checkpointed(none, all, doubles, singles, middle);
    CHECK(plan.total() > 0);
    CHECK(plan.total() < doubles + singles);
  }
  // The probes without checkpointing ran out of memory: every block.
  const tt::ProbePeaks all{20.0, 22.0, 21.0};
  const tt::ProbePeaks oom{std::nan(""), std::nan(""), std::nan("")};
  CHECK(tt::fewest_checkpointed(oom, all, 3, 4, 1e12) == tt::CheckpointCounts{3, 4});
}

TEST_CASE("memory estimate: a step that does not fit is TT_ERR_MEMORY with the numbers and the ways out",
          "[memory]") {
  const tt::Config config = config_of("tele_tron: {}\n");
  tt::MemoryEstimate e;
  e.counted = tt::count_memory(config, tt::hunyuan_preset("13b"), true);
  e.shape = tt::step_shape_of_clip(33, 480, 832, 1, 256);
  e.measured = true;
  e.peak_bytes = 300.0 * (1ull << 30);
  e.peak_without_checkpointing = e.peak_bytes;
  e.peak_with_checkpointing = 250.0 * (1ull << 30);
  const double capacity = 139.8 * (1ull << 30);
  try {
    tt::check_estimate_fits(e, config, capacity);
    FAIL("expected TT_ERR_MEMORY");
  } catch (const tt::Error& error) {
    CHECK(error.code() == tt::ErrorCode::kMemory);
    const std::string text = std::string(error.what()) + " " + error.hint();
    CHECK_THAT(text, ContainsSubstring("needs about 300 GiB"));
    CHECK_THAT(text, ContainsSubstring("139.8 GiB"));
    CHECK_THAT(text, ContainsSubstring("model.activation_checkpointing: true (250 GiB)"));
    CHECK_THAT(text, ContainsSubstring("model.lora.rank"));
    CHECK_THAT(text, ContainsSubstring("smaller bucket"));
    CHECK_THAT(text, ContainsSubstring("more GPUs"));
  }
  e.peak_bytes = 100.0 * (1ull << 30);
  CHECK_NOTHROW(tt::check_estimate_fits(e, config, capacity));
}

TEST_CASE(
    "dynamic batch: a bucket's measured step counts the gradients it made once, whether or not they "
    "existed before it",
    "[memory][train]") {
  constexpr int64_t kGiB = int64_t{1} << 30;
  // Weights and optimizer state 13 GiB, gradients 4 GiB, 10 GiB of activations per sample; a
  // budget of 71 GiB.
  const double room = 71.0 * static_cast<double>(kGiB);
  // The run's first step: the gradients are made by it (allocated before: 13 GiB).
  const tt::MicroBatchFit first = tt::fit_micro_batch(13 * kGiB, 4 * kGiB, (13 + 4 + 2 * 10) * kGiB, 2, room);
  CHECK_THAT(first.per_sample, WithinRel(10.0 * kGiB, 1e-12));
  CHECK(first.fits == 5);  // (71 - 17) / 10
  // A later bucket's first step: the gradients exist as it begins (kept for graphs, or freed at its
  // start and made again), so the same activations give the same answer. Counting them again
  // (the old arithmetic) said 8 GiB per sample and 6 samples: out of memory at 6 * 10 + 17 = 77 GiB.
  const tt::MicroBatchFit later = tt::fit_micro_batch(17 * kGiB, 0, (17 + 2 * 10) * kGiB, 2, room);
  CHECK_THAT(later.per_sample, WithinRel(10.0 * kGiB, 1e-12));
  CHECK(later.fits == 5);
  // A peak no higher than the fixed part says nothing; a room below it fits nothing.
  CHECK(tt::fit_micro_batch(17 * kGiB, 0, 17 * kGiB, 2, room).per_sample == 0);
  CHECK(tt::fit_micro_batch(17 * kGiB, 0, 37 * kGiB, 2, 16.0 * static_cast<double>(kGiB)).fits == 0);
}

TEST_CASE("memory estimate: a step plans for the share of the device the allocator can reach, less 2 %",
          "[memory]") {
  constexpr double kGiBytes = 1024.0 * 1024.0 * 1024.0;
  tt::GpuMemory memory;
  memory.known = true;
  memory.total = static_cast<int64_t>(79.18 * kGiBytes);
  // The CUDA context and the libraries hold 0.73 GiB the allocator cannot get (an H100's, measured).
  memory.available = static_cast<int64_t>(78.45 * kGiBytes);
  CHECK_THAT(tt::planning_capacity(memory, 1.0) / kGiBytes, WithinRel(0.98 * 78.45, 1e-9));
  // A memory cap below what the allocator reaches: the cap's share of the whole device.
  CHECK_THAT(tt::planning_capacity(memory, 0.5) / kGiBytes, WithinRel(0.98 * 0.5 * 79.18, 1e-9));
  CHECK(tt::planning_capacity(memory, 2.0) == tt::planning_capacity(memory, 1.0));
  // Another process holds most of the device: what is left is what a step may plan for.
  memory.available = static_cast<int64_t>(10.0 * kGiBytes);
  CHECK_THAT(tt::planning_capacity(memory, 0.5) / kGiBytes, WithinRel(9.8, 1e-9));
  // Unknown reach (0): the device's total.
  memory.available = 0;
  CHECK_THAT(tt::planning_capacity(memory, 1.0) / kGiBytes, WithinRel(0.98 * 79.18, 1e-9));
}

TEST_CASE("memory estimate: the step shape is the largest bucket at the micro-batch (dynamic: its minimum)",
          "[memory]") {
  const tt::Config config = config_of(
      "tele_tron:\n  data:\n    source: video\n    buckets: [{frames: 9, height: 320, width: 576}, "
      "{frames: 13, height: 480, width: 832}, {frames: 5, height: 720, width: 1280}]\n  batch_size: 2\n");
  const tt::StepShape shape = tt::largest_step_shape(config, {16, 9, 60, 104}, 200);
  // 13x480x832 has the most pixels (5.2 M), 5x720x1280 the most latent tokens (2x90x160 against 4x60x104).
  CHECK(shape.describe() == "5x720x1280");
  CHECK(shape.batch == 2);
  CHECK(shape.text_tokens == 200);
  const tt::Config dynamic = config_of("tele_tron:\n  batch_size: dynamic\n  dynamic_batch:\n    min: 3\n");
  const tt::StepShape cached = tt::largest_step_shape(dynamic, {16, 5, 30, 52}, 77);
  CHECK(cached.batch == 3);
  CHECK(cached.describe() == "17x240x416");
}

TEST_CASE("memory estimate on the GPU: shallow probes extrapolated meet the full model's measured peak within 10 %",
          "[memory][gpu]") {
  TT_REQUIRE_GPU();
  const torch::Device cuda(torch::kCUDA, 0);
  const tt::HunyuanVideoConfig model = wide_tiny_model(6, 10);
  const tt::StepShape shape = tt::step_shape_of_clip(33, 256, 256, 2, 64);
  for (const std::string& yaml :
       {std::string("tele_tron:\n  cuda_graph:\n    enabled: false\n"),
        std::string("tele_tron:\n  cuda_graph:\n    enabled: false\n  model:\n    activation_checkpointing: true\n"),
        std::string("tele_tron:\n  model:\n    activation_checkpointing: {every_n: 3}\n    lora:\n      rank: 8\n")}) {
    INFO(yaml);
    const tt::Config config = config_of(yaml);
    const tt::MemoryEstimate e = tt::estimate_step_memory(config, model, shape, cuda);
    REQUIRE(e.measured);
    const double measured =
        tt::measure_step_peak(config, model, shape, cuda, config.model.activation_checkpointing_every_n);
    INFO("estimated " << e.peak_bytes / 1e9 << " GB, measured " << measured / 1e9 << " GB");
    CHECK(std::abs(e.peak_bytes - measured) <= 0.1 * measured);
  }
}

TEST_CASE(
    "activation_checkpointing auto on the GPU: a budget between the extremes recomputes some blocks and fits",
    "[memory][gpu]") {
  TT_REQUIRE_GPU();
  const torch::Device cuda(torch::kCUDA, 0);
  const tt::HunyuanVideoConfig model = wide_tiny_model(6, 10);
  const tt::StepShape shape = tt::step_shape_of_clip(33, 256, 256, 2, 64);
  const tt::MemoryEstimate fixed = tt::estimate_step_memory(
      config_of("tele_tron:\n  cuda_graph:\n    enabled: false\n"), model, shape, cuda);
  REQUIRE(fixed.measured);
  REQUIRE(fixed.peak_with_checkpointing < fixed.peak_without_checkpointing);
  const double budget = 0.5 * (fixed.peak_with_checkpointing + fixed.peak_without_checkpointing);
  const tt::Config config = config_of(
      "tele_tron:\n  cuda_graph:\n    enabled: false\n  model:\n    activation_checkpointing: auto\n");
  const tt::MemoryEstimate e = tt::estimate_step_memory(config, model, shape, cuda, true, budget);
  INFO("budget " << budget / 1e9 << " GB: " << e.checkpointed.doubles << " doubles, "
                 << e.checkpointed.singles << " singles, estimated " << e.peak_bytes / 1e9 << " GB");
  CHECK(e.checkpointed.total() > 0);
  CHECK(e.checkpointed.total() < 16);
  CHECK(e.peak_bytes <= budget);
  const double measured = tt::measure_step_peak(config, model, shape, cuda, e.checkpointed);
  INFO("measured " << measured / 1e9 << " GB");
  CHECK(std::abs(e.peak_bytes - measured) <= 0.1 * measured);
  // Measured within the room auto leaves for the estimate's error (a 90 % share of the capacity).
  CHECK(measured <= budget / tt::kAutoCheckpointShare);
}

TEST_CASE("the longest clip by the estimate: the line's prediction, or the boundary found around it", "[memory][gpu]") {
  TT_REQUIRE_GPU();
  const torch::Device cuda(torch::kCUDA, 0);
  const tt::HunyuanVideoConfig model = wide_tiny_model(2, 2);
  const tt::Config config = config_of("tele_tron:\n  cuda_graph:\n    enabled: false\n");
  // A capacity between the estimates at 65 and 129 frames (256x256, batch 1): the boundary lies
  // between them whatever the GPU.
  auto peak_at = [&](int64_t frames) {
    return tt::estimate_step_memory(config, model, tt::step_shape_of_clip(frames, 256, 256, 1, 32), cuda, false)
        .peak_bytes;
  };
  const double capacity = 0.5 * (peak_at(65) + peak_at(129));
  std::vector<std::pair<int64_t, double>> tried;
  const int64_t found = tt::longest_clip_frames(config, model, 256, 256, 1, 32, cuda, capacity, &tried);
  INFO("capacity " << capacity / 1e6 << " MB, longest " << found << " frames after " << tried.size() << " estimates");
  CHECK((found - 1) % 4 == 0);
  CHECK(found > 65);
  CHECK(found < 129);
  CHECK(peak_at(found) <= capacity);
  CHECK(peak_at(found + 4) > capacity);
  // No neighbour checks: the two estimates (33 and 65 frames) and the line's crossing alone.
  tried.clear();
  const int64_t predicted = tt::longest_clip_frames(config, model, 256, 256, 1, 32, cuda, capacity, &tried, 0);
  CHECK(tried.size() == 2);
  CHECK(std::abs(predicted - found) <= 8);  // the line misses by at most a latent frame or two
}
