// LoRA adapters (model/lora.h): the adapted model starts as the base, the fused GEMMs' block-diagonal
// adapters equal per-module diffusers LoRA (the merged weights W + scale B A give the same output),
// only the adapters get gradients, and the fused autograd paths agree with the plain ones.
#include <torch/torch.h>
#include <catch2/catch_test_macros.hpp>

#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "core/autocast.h"
#include "core/profiler.h"
#include "model/fused_ops.h"
#include "model/layers.h"
#include "model/lora.h"
#include "model/transformer.h"
#include "small_model.h"
#include "test/test_util.h"

namespace {

using tt::test::randomise_weights;
using tt::test::small_model_config;
using tt::test::small_model_inputs;

// Every adapter's B (zero at init) random, so that the adapters change the output.
void randomise_adapters(const tt::LoraSet& set, uint64_t seed) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(seed);
  for (const auto& [name, tensor] : set.named_parameters()) tensor.copy_(torch::randn_like(tensor) * 0.3);
}

double max_difference(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

}  // namespace

TEST_CASE("LoRA targets match as peft's target_modules do: a suffix at a dot, or a whole-name regex",
          "[lora]") {
  const std::vector<std::string> plain = {"to_q", "ff.net.2"};
  CHECK(tt::lora_target_matches(plain, "transformer_blocks.0.attn.to_q"));
  CHECK(tt::lora_target_matches(plain, "to_q"));
  CHECK_FALSE(tt::lora_target_matches(plain, "transformer_blocks.0.attn.add_to_q"));  // not at a dot
  CHECK(tt::lora_target_matches(plain, "transformer_blocks.3.ff.net.2"));
  CHECK_FALSE(tt::lora_target_matches(plain, "transformer_blocks.3.ff_context.net.2"));
  const std::vector<std::string> pattern = {"single_transformer_blocks\\.[0-9]+\\.proj_out"};
  CHECK(tt::lora_target_matches(pattern, "single_transformer_blocks.12.proj_out"));
  CHECK_FALSE(tt::lora_target_matches(pattern, "x.single_transformer_blocks.12.proj_out"));  // whole name
  CHECK_FALSE(tt::lora_target_matches(pattern, "single_transformer_blocks.12.proj_mlp"));
}

TEST_CASE("LoRA: the adapted model starts as the base; the default targets; the base is frozen", "[lora]") {
  const tt::HunyuanVideoConfig c = small_model_config();
  tt::HunyuanVideoTransformer model(c);
  randomise_weights(model, 3);
  const tt::TransformerInputs in = small_model_inputs(c, 2, 6);
  torch::NoGradGuard no_grad;
  const torch::Tensor base = model->forward(in);

  tt::LoraOptions options;
  options.rank = 4;
  options.alpha = 8;
  const tt::LoraSet set = model->attach_lora(options);
  CHECK(torch::equal(model->forward(in), base));  // B = 0
  for (const auto& p : model->parameters()) CHECK_FALSE(p.requires_grad());
  // The base's names and views are unchanged: the adapters are not submodules.
  for (const auto& [name, tensor] : model->diffusers_parameters())
    CHECK(name.find("lora") == std::string::npos);

  std::set<std::string> names;
  for (const auto& [name, tensor] : set.named_parameters()) {
    names.insert(name);
    CHECK(tensor.requires_grad());
    CHECK(tensor.scalar_type() == torch::kFloat32);
  }
  const int64_t hidden = c.hidden_size(), mlp = c.mlp_hidden();
  for (const char* module :
       {"transformer_blocks.0.attn.to_q", "transformer_blocks.0.attn.to_k", "transformer_blocks.0.attn.to_v",
        "transformer_blocks.0.attn.to_out.0", "transformer_blocks.0.attn.add_q_proj",
        "transformer_blocks.0.attn.add_k_proj", "transformer_blocks.0.attn.add_v_proj",
        "transformer_blocks.0.attn.to_add_out", "transformer_blocks.0.ff.net.0.proj",
        "transformer_blocks.0.ff.net.2", "transformer_blocks.0.ff_context.net.0.proj",
        "transformer_blocks.0.ff_context.net.2", "single_transformer_blocks.0.attn.to_q",
        "single_transformer_blocks.0.attn.to_k", "single_transformer_blocks.0.attn.to_v",
        "single_transformer_blocks.0.proj_mlp", "single_transformer_blocks.0.proj_out"}) {
    INFO(module);
    CHECK(names.count(std::string(module) + ".lora_A.weight") == 1);
    CHECK(names.count(std::string(module) + ".lora_B.weight") == 1);
  }
  CHECK(names.size() == 2 * 17);  // nothing else: no modulation, refiner or embedder by default
  const int64_t r = 4;
  // A (r, in) and B (rows, r) per module: 8 hidden -> hidden modules in the double block, 3 in the single
  // one.
  const int64_t expected = 8 * r * (hidden + hidden) + 2 * r * (hidden + mlp) + 2 * r * (mlp + hidden) +
                           3 * r * (hidden + hidden) + r * (hidden + mlp) + r * (hidden + mlp + hidden);
  CHECK(set.parameter_count() == expected);

  // A target that names nothing an adapter can go on is the user's error.
  tt::HunyuanVideoTransformer other(c);
  tt::LoraOptions wrong = options;
  wrong.targets = {"to_qq"};
  const tt::Error error = tt::test::expect_error([&] { other->attach_lora(wrong); });
  CHECK(error.code() == tt::ErrorCode::kConfig);
  CHECK(std::string(error.what()).find("tele_tron.model.lora.targets: 'to_qq'") != std::string::npos);
  wrong.targets = {"context_embedder.proj_in"};  // outside the double and single blocks
  CHECK(tt::test::expect_error([&] { other->attach_lora(wrong); }).code() == tt::ErrorCode::kConfig);
}

TEST_CASE("LoRA: the default targets adapt a model of one block kind; named targets still must match",
          "[lora]") {
  for (const bool singles_only : {true, false}) {
    INFO((singles_only ? "single blocks only" : "double blocks only"));
    tt::HunyuanVideoConfig c = small_model_config();
    (singles_only ? c.num_layers : c.num_single_layers) = 0;
    tt::HunyuanVideoTransformer model(c);
    tt::LoraOptions options;
    options.rank = 2;
    const tt::LoraSet set = model->attach_lora(options);
    std::set<std::string> modules;
    for (const auto& adapter : set.adapters)
      for (const auto& pair : adapter->pairs()) modules.insert(pair.module);
    const std::string kind = singles_only ? "single_transformer_blocks." : "transformer_blocks.";
    CHECK(modules.size() == (singles_only ? 5u * c.num_single_layers : 12u * c.num_layers));
    for (const std::string& module : modules) CHECK(module.rfind(kind, 0) == 0);
    // A named target of the missing kind alone finds nothing: the user's error, as before.
    tt::HunyuanVideoTransformer other(c);
    tt::LoraOptions named = options;
    named.targets = {singles_only ? "ff_context.net.2" : "proj_mlp"};
    CHECK(tt::test::expect_error([&] { other->attach_lora(named); }).code() == tt::ErrorCode::kConfig);
  }
}

// The model with `targets` adapted (random A and B) and the same base with each adapter merged into
// its diffusers module, W + (alpha/r) B A, as diffusers' fuse_lora does: max |difference| of the
// outputs, and the adapted modules.
std::pair<double, std::set<std::string>> lora_against_merged(const std::vector<std::string>& targets) {
  const tt::HunyuanVideoConfig c = small_model_config();
  tt::HunyuanVideoTransformer model(c), merged(c);
  randomise_weights(model, 5);
  randomise_weights(merged, 5);
  const tt::TransformerInputs in = small_model_inputs(c, 2, 6);
  tt::LoraOptions options;
  options.rank = 3;
  options.alpha = 6;
  options.targets = targets;
  const tt::LoraSet set = model->attach_lora(options);
  randomise_adapters(set, 11);
  std::map<std::string, torch::Tensor> views = merged->diffusers_parameters();
  std::set<std::string> modules;
  torch::NoGradGuard no_grad;
  for (const auto& adapter : set.adapters)
    for (const auto& pair : adapter->pairs()) {
      modules.insert(pair.module);
      views.at(pair.module + ".weight").add_(pair.b.matmul(pair.a) * options.scale());
    }
  const torch::Tensor adapted = model->forward(in), expected = merged->forward(in);
  // The adapters matter: the base alone differs.
  tt::HunyuanVideoTransformer plain(c);
  randomise_weights(plain, 5);
  CHECK(max_difference(plain->forward(in), expected) > 1e-3);
  return {max_difference(adapted, expected), modules};
}

TEST_CASE(
    "LoRA on the fused GEMMs equals per-module adapters: merged weights W + (alpha/r) B A give the same "
    "output",
    "[lora]") {
  // Every default target, plus the modulations: the fused q, k, v GEMMs hold three and four adapters.
  std::vector<std::string> all = tt::default_lora_targets();
  all.insert(all.end(), {"norm1.linear", "norm1_context.linear", "norm.linear"});
  const auto [all_difference, all_modules] = lora_against_merged(all);
  INFO("every module: max |LoRA - merged| " << all_difference);
  CHECK(all_difference < 1e-4);
  CHECK(all_modules.size() == 17 + 3);

  // Only some parts of the fused GEMMs: the others keep the base's rows (k, not q or v, in both
  // blocks; the text stream's v; the single block's MLP input), plus a modulation and projections.
  const auto [difference, modules] = lora_against_merged(
      {"attn.to_k", "add_v_proj", "proj_mlp", "norm1_context.linear", "proj_out", "ff.net.2"});
  INFO("some parts: max |LoRA - merged| " << difference);
  CHECK(difference < 1e-4);
  CHECK(modules ==
        std::set<std::string>{"transformer_blocks.0.attn.to_k", "single_transformer_blocks.0.attn.to_k",
                              "transformer_blocks.0.attn.add_v_proj", "single_transformer_blocks.0.proj_mlp",
                              "transformer_blocks.0.norm1_context.linear",
                              "single_transformer_blocks.0.proj_out", "transformer_blocks.0.ff.net.2"});
}

TEST_CASE("LoRA: a backward pass reaches every adapter and no base weight", "[lora]") {
  const tt::HunyuanVideoConfig c = small_model_config();
  tt::HunyuanVideoTransformer model(c);
  randomise_weights(model, 5);
  tt::LoraOptions options;
  options.rank = 2;
  options.targets = tt::default_lora_targets();
  options.targets.push_back("norm.linear");  // the single blocks' modulation too
  const tt::LoraSet set = model->attach_lora(options);
  randomise_adapters(set, 13);
  const torch::Tensor out = model->forward(small_model_inputs(c, 2, 6));
  out.square().mean().backward();
  for (const auto& [name, tensor] : set.named_parameters()) {
    INFO(name);
    REQUIRE(tensor.grad().defined());
    CHECK(tensor.grad().abs().sum().item<double>() > 0.0);
  }
  for (const auto& item : model->named_parameters()) {
    INFO(item.key());
    CHECK_FALSE(item.value().grad().defined());
  }
}

TEST_CASE("LoRA with activation checkpointing: the adapters' gradients equal the plain backward's",
          "[lora][checkpoint]") {
  // The frozen base gives the first block inputs that need no gradient: a checkpointed block must
  // still make its output depend on its adapters (the 13B LoRA bench with checkpointing stopped
  // with "element 0 of tensors does not require grad" before the blocks passed their adapters).
  const tt::HunyuanVideoConfig c = small_model_config();
  tt::HunyuanVideoTransformer model(c);
  randomise_weights(model, 5);
  model->train();
  tt::LoraOptions options;
  options.rank = 2;
  options.targets = tt::default_lora_targets();
  const tt::LoraSet set = model->attach_lora(options);
  randomise_adapters(set, 17);
  const tt::TransformerInputs inputs = small_model_inputs(c, 2, 6);
  auto gradients = [&](int64_t every_n) {
    model->set_activation_checkpointing(every_n);
    for (const auto& [name, tensor] : set.named_parameters()) tensor.mutable_grad() = torch::Tensor();
    const torch::Tensor out = model->forward(inputs);
    REQUIRE(out.requires_grad());
    out.square().mean().backward();
    std::map<std::string, torch::Tensor> grads;
    for (const auto& [name, tensor] : set.named_parameters()) {
      REQUIRE(tensor.grad().defined());
      grads[name] = tensor.grad().clone();
    }
    return grads;
  };
  const auto plain = gradients(0);
  for (int64_t every_n : {1, 2}) {
    const auto recomputed = gradients(every_n);
    for (const auto& [name, grad] : plain) {
      INFO(name << ", checkpointing every " << every_n);
      CHECK(grad.abs().sum().item<double>() > 0.0);
      CHECK(max_difference(recomputed.at(name), grad) <= 1e-5 * (1.0 + grad.abs().max().item<double>()));
    }
  }
  for (const auto& item : model->named_parameters()) {
    INFO(item.key());
    CHECK_FALSE(item.value().grad().defined());
  }
}

namespace {

// Under LoRA the gates need no gradient, so a recomputed block's last Linears (the double block's
// two MLP down-projections, the single block's linear2) feed results nobody reads: with the skip on,
// the recompute runs 2 * doubles + singles fewer GEMMs and the adapters' gradients are those of the
// full recompute (within `tolerance` of their largest). A full fine-tune's gates need gradients:
// nothing is skipped. On `device`, under bf16 autocast when `autocast`.
void check_recompute_skips_unread(const torch::Device& device, bool autocast, double tolerance) {
  tt::HunyuanVideoConfig c = small_model_config();
  c.num_layers = 2;
  c.num_single_layers = 3;
  const tt::TransformerInputs inputs = tt::test::inputs_on(small_model_inputs(c, 2, 6), device);
  tt::test::TempDir dir("tt_unread");
  for (const bool fused : {false, true}) {  // on the CPU, fused runs the fused autograd functions
    for (const bool lora : {true, false}) {
      INFO("fused " << fused << ", LoRA " << lora);
      c.fused_kernels = fused;
      tt::HunyuanVideoTransformer model = tt::test::checkpointed_model_on(c, device, 5);
      std::vector<std::pair<std::string, torch::Tensor>> trained;
      if (lora) {
        tt::LoraOptions options;
        options.rank = 2;
        options.targets = tt::default_lora_targets();
        const tt::LoraSet set = model->attach_lora(options);
        randomise_adapters(set, 17);
        trained = set.named_parameters();
      } else {
        for (const auto& item : model->named_parameters()) trained.emplace_back(item.key(), item.value());
      }
      // The GEMMs the step runs (forward, recompute and backward) and the gradients.
      auto step = [&](bool skip) {
        model->set_recompute_skips_unread(skip);
        for (auto& [name, tensor] : trained) tensor.mutable_grad() = torch::Tensor();
        const nlohmann::json trace = tt::trace_work(device, dir / "trace.json", false, [&] {
          torch::Tensor out;
          {
            tt::AutocastScope scope(autocast, torch::kBFloat16, device.type());
            out = model->forward(inputs);
          }
          out.to(torch::kFloat32).square().mean().backward();
        });
        int64_t gemms = 0;
        for (const auto& e : trace["traceEvents"]) {
          const std::string name = e.value("name", std::string());
          if (e.value("cat", std::string()) == "cpu_op" && (name == "aten::mm" || name == "aten::addmm"))
            ++gemms;
        }
        std::map<std::string, torch::Tensor> grads;
        for (const auto& [name, tensor] : trained)
          if (tensor.grad().defined()) grads[name] = tensor.grad().to(torch::kFloat32).cpu();
        return std::make_pair(gemms, grads);
      };
      const auto [full_gemms, full] = step(false);
      const auto [skipping_gemms, with_skip] = step(true);
      INFO("GEMMs run: " << full_gemms << " in full, " << skipping_gemms << " skipping");
      CHECK(full_gemms - skipping_gemms == (lora ? 2 * c.num_layers + c.num_single_layers : 0));
      REQUIRE(with_skip.size() == full.size());
      for (const auto& [name, grad] : full) {
        INFO(name);
        CHECK(max_difference(with_skip.at(name), grad) <=
              tolerance * (1.0 + grad.abs().max().item<double>()));
      }
    }
  }
}

}  // namespace

TEST_CASE(
    "a block recomputed for backward skips the GEMM of a Linear nobody reads, under LoRA only; same "
    "gradients",
    "[lora][checkpoint]") {
  check_recompute_skips_unread(torch::kCPU, false, 1e-6);
}

TEST_CASE("on the GPU in bf16, a recomputed block skips the GEMM of a Linear nobody reads; same gradients",
          "[lora][checkpoint][gpu]") {
  TT_REQUIRE_GPU();
  // The skipped GEMM's output is never an operand: the gradients take the same GEMMs in the same
  // order; 1e-3 leaves room for nothing more than the kernels' own run-to-run choice.
  check_recompute_skips_unread(torch::Device(torch::kCUDA, 0), true, 1e-3);
}

TEST_CASE("LoRA through the fused autograd functions equals the plain composition, gradients included",
          "[lora]") {
  torch::manual_seed(17);
  const int64_t b = 2, n = 5, in = 12, out = 9;
  torch::nn::Linear base(in, out);
  for (auto& p : base->parameters()) p.set_requires_grad(false);
  tt::LoraOptions options;
  options.rank = 3;
  options.alpha = 1.5;
  tt::LoraAdapter lora(in, std::vector<tt::LoraPart>{{"a", 4}, {"b", 5}}, std::vector<bool>{true, true},
                       options);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : lora->parameters()) p.copy_(torch::randn_like(p));
  }
  const torch::Tensor x = torch::randn({b, n, in}, torch::requires_grad());
  const torch::Tensor shift = torch::randn({b, in}, torch::requires_grad());
  const torch::Tensor scale = torch::randn({b, in}, torch::requires_grad());
  const torch::Tensor probe = torch::randn({b, n, out});

  auto run = [&](bool fused) {
    for (const torch::Tensor* t : {&x, &shift, &scale}) t->mutable_grad() = torch::Tensor();
    for (auto& p : lora->parameters()) p.mutable_grad() = torch::Tensor();
    const torch::Tensor y = tt::modulated_linear(base, lora, x, shift, scale, fused);
    (y * probe).sum().backward();
    std::vector<torch::Tensor> got = {y.detach(), x.grad(), shift.grad(), scale.grad()};
    for (auto& p : lora->parameters()) got.push_back(p.grad().clone());
    return got;
  };
  const auto plain = run(false), fused = run(true);
  REQUIRE(plain.size() == fused.size());
  for (size_t i = 0; i < plain.size(); ++i) {
    INFO("output/gradient " << i);
    CHECK(max_difference(plain[i], fused[i]) < 1e-5);
  }
  CHECK_FALSE(base->weight.grad().defined());  // the frozen base's GEMM was skipped

  // GELU then linear, with the single blocks' concatenated attention beside the MLP's input.
  const int64_t a_width = 4, u_width = 8;
  torch::nn::Linear down_base(a_width + u_width, out);
  for (auto& p : down_base->parameters()) p.set_requires_grad(false);
  tt::LoraAdapter down_lora(a_width + u_width, std::vector<tt::LoraPart>{{"proj_out", out}},
                            std::vector<bool>{true}, options);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : down_lora->parameters()) p.copy_(torch::randn_like(p));
  }
  const torch::Tensor a = torch::randn({b, n, a_width}, torch::requires_grad());
  const torch::Tensor u = torch::randn({b, n, u_width}, torch::requires_grad());
  auto run_gelu = [&](bool fused) {
    for (const torch::Tensor* t : {&a, &u}) t->mutable_grad() = torch::Tensor();
    for (auto& p : down_lora->parameters()) p.mutable_grad() = torch::Tensor();
    const torch::Tensor y = tt::gelu_then_linear(down_base, down_lora, a, u, fused);
    (y * probe).sum().backward();
    std::vector<torch::Tensor> got = {y.detach(), a.grad(), u.grad()};
    for (auto& p : down_lora->parameters()) got.push_back(p.grad().clone());
    return got;
  };
  const auto gelu_plain = run_gelu(false), gelu_fused = run_gelu(true);
  for (size_t i = 0; i < gelu_plain.size(); ++i) {
    INFO("gelu output/gradient " << i);
    CHECK(max_difference(gelu_plain[i], gelu_fused[i]) < 1e-5);
  }
  CHECK_FALSE(down_base->weight.grad().defined());
}
