// bf16 master weights: stochastic rounding (cuda/ops.h stochastic_round_bf16, keyed_bf16_rounding),
// AdamW over bf16 parameters (core/adamw.h) and a bf16 model under CPU autocast, on the CPU (the
// rounding's CUDA path is keyed_uniform's kernel and the same torch ops). Training runs with bf16
// master weights, end to end, are in test/app/test_train_precision.cpp.
#include <torch/torch.h>
#include <catch2/catch_test_macros.hpp>

#include <cmath>
#include <vector>

#include "core/adamw.h"
#include "core/autocast.h"
#include "cuda/ops.h"
#include "test/model/small_model.h"

namespace {

torch::Tensor key_of(int64_t value) { return torch::tensor({value}, torch::kInt64); }

}  // namespace

TEST_CASE("stochastic rounding to bf16: a neighbour each time, unbiased on average, keyed", "[model][bf16]") {
  const int64_t n = 200000;
  // 1 + 0.3 gaps (bf16's gap at 1 is 2^-7), and its negative.
  const double gap = std::ldexp(1.0, -7);
  for (const double x : {1.0 + 0.3 * gap, -(1.0 + 0.3 * gap)}) {
    INFO("x = " << x);
    auto values = torch::full({n}, x, torch::kFloat32);
    auto rounded = tt::stochastic_round_bf16(values, key_of(11), 5);
    CHECK(rounded.scalar_type() == torch::kBFloat16);
    auto r = rounded.to(torch::kFloat64);
    const double low = std::copysign(1.0, x), high = std::copysign(1.0 + gap, x);
    CHECK(((r == low) | (r == high)).all().item<bool>());
    const double mean = r.mean().item<double>();
    // Bernoulli(0.3) mean over n: standard error gap * sqrt(0.21 / n); 6 of them.
    CHECK(std::abs(mean - x) <= 6 * gap * std::sqrt(0.21 / n));
    const double up_share = (r == high).to(torch::kFloat64).mean().item<double>();
    CHECK(std::abs(up_share - 0.3) <= 0.01);
    // Round-to-nearest would give `low` every time.
    CHECK(up_share > 0.2);
    // The same key rounds alike; another key differently.
    CHECK(torch::equal(rounded, tt::stochastic_round_bf16(values, key_of(11), 5)));
    CHECK_FALSE(torch::equal(rounded, tt::stochastic_round_bf16(values, key_of(12), 5)));
  }
  // bf16 values, zero and infinities come back unchanged.
  auto exact = torch::randn({1000}).to(torch::kBFloat16).to(torch::kFloat32);
  exact = torch::cat({exact, torch::tensor({0.0f, -0.0f, INFINITY, -INFINITY})});
  CHECK(torch::equal(tt::stochastic_round_bf16(exact, key_of(3), 1).to(torch::kFloat32), exact));
  CHECK(torch::isnan(tt::stochastic_round_bf16(torch::tensor({NAN}), key_of(3), 1)).all().item<bool>());
}

TEST_CASE("AdamW over bf16 weights follows fp32 master weights where round-to-nearest stalls", "[model][bf16]") {
  torch::manual_seed(9);
  const int64_t n = 4096;
  // Weights near 1 (gap 2^-7) and updates of lr = 1e-3 per step: a quarter gap or less, which
  // round-to-nearest would drop every time.
  auto init = (1.0 + 0.1 * torch::rand({n})).to(torch::kBFloat16).to(torch::kFloat32);
  auto p32 = init.clone(), p16 = init.to(torch::kBFloat16);
  tt::AdamWOptions options;
  options.lr = 1e-3;
  options.weight_decay = 0.0;
  tt::AdamW fp32({p32}, {"w"}, options);
  tt::AdamW bf16({p16}, {"w"}, options, tt::keyed_bf16_rounding(7));
  const auto direction = torch::randn({n});
  const int64_t steps = 100;
  for (int64_t step = 0; step < steps; ++step) {
    auto grad = direction + 0.1 * torch::randn({n});
    p32.mutable_grad() = grad;
    p16.mutable_grad() = grad.to(torch::kBFloat16);
    fp32.step();
    bf16.step();
  }
  auto moved32 = p32 - init, moved16 = p16.to(torch::kFloat32) - init;
  // Each weight moved about lr per step (Adam's normalised step): 0.1 in all, ~13 gaps.
  REQUIRE(moved32.abs().mean().item<double>() > 0.05);
  // Stochastic rounding keeps the movement: the bf16 run's mean movement per weight within 2 % of
  // fp32's. Each rounding adds a zero-mean error of variance <= gap^2 / 4, and the next steps start
  // from the rounded weight: a random walk, so after `steps` the bf16 - fp32 difference has a
  // spread of at most gap sqrt(steps) / 2 and a mean of 0 (within 6 standard errors over n).
  const double ratio = (moved16.abs().mean() / moved32.abs().mean()).item<double>();
  INFO("bf16 movement / fp32 movement " << ratio);
  CHECK(std::abs(ratio - 1.0) <= 0.02);
  const double gap = std::ldexp(1.0, -7), walk = gap * std::sqrt(static_cast<double>(steps)) / 2;
  const auto difference = (p16.to(torch::kFloat64) - p32.to(torch::kFloat64));
  const double spread = difference.square().mean().sqrt().item<double>(), bias = difference.mean().item<double>();
  INFO("bf16 - fp32: rms " << spread << ", mean " << bias << " (random-walk bound " << walk << ")");
  CHECK(spread <= 1.2 * walk);
  CHECK(std::abs(bias) <= 6 * walk / std::sqrt(static_cast<double>(n)));
  // The state is fp32 and counts the steps.
  const auto state = bf16.state_dict();
  CHECK(state.at("optim.w.exp_avg").scalar_type() == torch::kFloat32);
  CHECK(state.at("optim.w.step").item<float>() == static_cast<float>(steps));
}

TEST_CASE("AdamW over bf16 weights: a skipped step changes nothing; a restored state continues alike",
          "[model][bf16]") {
  torch::manual_seed(4);
  auto w = torch::randn({300}).to(torch::kBFloat16);
  tt::AdamWOptions options;
  options.lr = 1e-2;
  tt::AdamW opt({w}, {"w"}, options, tt::keyed_bf16_rounding(1));
  w.mutable_grad() = torch::randn({300}).to(torch::kBFloat16);
  opt.step();
  const auto before = w.clone();
  const auto state = opt.state_dict();
  opt.step(torch::ones({}));  // found_inf: skip
  CHECK(torch::equal(w, before));
  CHECK(opt.state_dict().at("optim.w.step").item<float>() == 1.0f);
  // Two optimizers from the same weights and state take the same next step, bit for bit.
  auto twin = before.clone();
  tt::AdamW other({twin}, {"w"}, options, tt::keyed_bf16_rounding(1));
  other.load_state_dict(state);
  const auto grad = torch::randn({300}).to(torch::kBFloat16);
  w.mutable_grad() = grad;
  twin.mutable_grad() = grad.clone();
  opt.step();
  other.step();
  CHECK(torch::equal(w, twin));
  CHECK_FALSE(torch::equal(w, before));
}

TEST_CASE("a bf16 model runs forward and backward under CPU autocast: bf16 gradients, the same with checkpointed "
          "blocks", "[model][bf16][checkpoint]") {
  const tt::HunyuanVideoConfig config = tt::test::small_model_config();
  tt::HunyuanVideoTransformer model(config);
  tt::test::randomise_weights(model, 3);
  model->to(torch::kBFloat16);
  model->train();
  const tt::TransformerInputs inputs = tt::test::small_model_inputs(config, 2, 8);  // fp32, as the trainer's
  auto gradients = [&](int64_t every_n) {
    model->set_activation_checkpointing(every_n);
    model->zero_grad();
    torch::Tensor out;
    {
      tt::AutocastScope autocast(true, at::kBFloat16, at::kCPU);
      out = model->forward(inputs);
    }
    CHECK(out.scalar_type() == torch::kBFloat16);
    out.to(torch::kFloat32).square().mean().backward();
    std::map<std::string, torch::Tensor> grads;
    for (const auto& item : model->named_parameters()) grads[item.key()] = item.value().grad().clone();
    return grads;
  };
  const auto direct = gradients(0);
  const auto saved = gradients(1);
  // The same gradients, but for the conditioning's: every block adds to the gradient of `vec`,
  // in bf16, in another order when the blocks are recomputed.
  const std::map<std::string, double> errors = tt::test::gradient_errors(saved, direct);
  for (const auto& [name, grad] : direct) {
    INFO(name << ": relative error " << errors.at(name));
    CHECK(grad.scalar_type() == torch::kBFloat16);
    CHECK(torch::isfinite(grad).all().item<bool>());
    if (name.rfind("time_text_embed.", 0) == 0) {
      CHECK(errors.at(name) < 1e-2);
    } else {
      CHECK(torch::equal(saved.at(name), grad));
    }
  }
}
