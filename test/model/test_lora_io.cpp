// LoRA files (model/lora_io.h): musubi-tuner's kohya layout with .alpha, ComfyUI's official names and
// diffusers' PEFT layout with its metadata are read into diffusers' modules (fused official modules
// split as diffusers' converter splits them) and loaded into a model's adapters with the scale
// carried over; keys that are no LoRA pair, or that do not fit the run's adapters, are TT_ERR_CHECKPOINT.
#include <torch/torch.h>
#include <catch2/catch_test_macros.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <functional>
#include <map>

#include "core/safetensors.h"
#include "model/lora_io.h"
#include "model/transformer.h"
#include "small_model.h"
#include "test/test_util.h"

namespace {

using tt::test::small_model_config;
using tt::test::TempDir;

const tt::LoraAdapterImpl::Pair& pair_of(const tt::LoraSet& set, const std::string& module) {
  for (const auto& adapter : set.adapters)
    for (const auto& pair : adapter->pairs())
      if (pair.module == module) return pair;
  FAIL("no adapter on " << module);
  throw std::logic_error("unreachable");
}

}  // namespace

TEST_CASE(
    "LoRA files: musubi-tuner's lora_unet_ layout with .alpha loads into diffusers' modules, fused ones "
    "split",
    "[lora]") {
  const tt::HunyuanVideoConfig c = small_model_config();
  const int64_t h = c.hidden_size(), mlp = c.mlp_hidden(), r = 2;
  torch::manual_seed(21);
  tt::safetensors::TensorMap musubi;
  const torch::Tensor qkv_a = torch::randn({r, h}), qkv_b = torch::randn({3 * h, r});
  musubi["lora_unet_double_blocks_0_img_attn_qkv.lora_down.weight"] = qkv_a;
  musubi["lora_unet_double_blocks_0_img_attn_qkv.lora_up.weight"] = qkv_b;
  musubi["lora_unet_double_blocks_0_img_attn_qkv.alpha"] = torch::tensor(4.0f);  // scale 2
  const torch::Tensor l1_a = torch::randn({r, h}), l1_b = torch::randn({3 * h + mlp, r});
  musubi["lora_unet_single_blocks_0_linear1.lora_down.weight"] = l1_a;
  musubi["lora_unet_single_blocks_0_linear1.lora_up.weight"] = l1_b;
  const torch::Tensor fc2_a = torch::randn({r, mlp}), fc2_b = torch::randn({h, r});
  musubi["lora_unet_double_blocks_0_txt_mlp_fc2.lora_down.weight"] = fc2_a;
  musubi["lora_unet_double_blocks_0_txt_mlp_fc2.lora_up.weight"] = fc2_b;
  TempDir dir("tt_lora_io");
  const std::string path = dir / "musubi.safetensors";
  tt::safetensors::save(path, musubi);

  const tt::LoraFile file = tt::read_lora_file(path);
  CHECK(file.format == "musubi");
  CHECK(file.modules.size() == 3 + 4 + 1);
  const tt::LoraFilePair& k = file.modules.at("transformer_blocks.0.attn.to_k");
  CHECK(torch::equal(k.a, qkv_a));  // the down projection copied to each part
  CHECK(torch::equal(k.b, qkv_b.slice(0, h, 2 * h)));
  CHECK(k.scale == 2.0);
  CHECK(torch::equal(file.modules.at("single_transformer_blocks.0.proj_mlp").b, l1_b.slice(0, 3 * h)));
  CHECK(
      torch::equal(file.modules.at("single_transformer_blocks.0.attn.to_v").b, l1_b.slice(0, 2 * h, 3 * h)));
  CHECK(file.modules.at("single_transformer_blocks.0.attn.to_q").scale == 1.0);  // no .alpha: alpha = r
  CHECK(torch::equal(file.modules.at("transformer_blocks.0.ff_context.net.2").a, fc2_a));

  // Into a model whose adapters have scale 1 (alpha = r): B carries the file's scale of 2.
  tt::HunyuanVideoTransformer model(c);
  tt::LoraOptions options;
  options.rank = r;
  const tt::LoraSet set = model->attach_lora(options);
  const std::vector<std::string> missing = tt::load_lora_into(set, file, path);
  CHECK(missing.size() == set.modules().size() - file.modules.size());
  const auto& to_k = pair_of(set, "transformer_blocks.0.attn.to_k");
  CHECK(torch::equal(to_k.a, qkv_a));
  CHECK(torch::allclose(to_k.b, qkv_b.slice(0, h, 2 * h) * 2.0));
  CHECK(torch::equal(pair_of(set, "single_transformer_blocks.0.proj_mlp").b, l1_b.slice(0, 3 * h)));

  // A rank that does not fit, and a module the run does not adapt, are the user's to fix.
  tt::HunyuanVideoTransformer other(c);
  tt::LoraOptions rank3 = options;
  rank3.rank = 3;
  const tt::LoraSet wider = other->attach_lora(rank3);
  const tt::Error rank_error = tt::test::expect_error([&] { tt::load_lora_into(wider, file, path); });
  CHECK(rank_error.code() == tt::ErrorCode::kCheckpoint);
  CHECK(std::string(rank_error.hint()).find("model.lora.rank") != std::string::npos);
  tt::HunyuanVideoTransformer narrow_model(c);
  tt::LoraOptions narrow = options;
  narrow.targets = {"to_q"};
  const tt::LoraSet only_q = narrow_model->attach_lora(narrow);
  CHECK(tt::test::expect_error([&] { tt::load_lora_into(only_q, file, path); }).code() ==
        tt::ErrorCode::kCheckpoint);
}

TEST_CASE(
    "LoRA files: ComfyUI's diffusion_model. names and diffusers' layout with lora_adapter_metadata; junk "
    "keys",
    "[lora]") {
  const tt::HunyuanVideoConfig c = small_model_config();
  const int64_t h = c.hidden_size(), r = 2;
  torch::manual_seed(22);
  TempDir dir("tt_lora_io");
  tt::safetensors::TensorMap comfy;
  const torch::Tensor a = torch::randn({r, h}), b = torch::randn({3 * h, r});
  comfy["diffusion_model.double_blocks.0.txt_attn_qkv.lora_A.weight"] = a;
  comfy["diffusion_model.double_blocks.0.txt_attn_qkv.lora_B.weight"] = b;
  tt::safetensors::save(dir / "comfy.safetensors", comfy);
  const tt::LoraFile comfy_file = tt::read_lora_file(dir / "comfy.safetensors");
  CHECK(comfy_file.format == "comfyui");
  CHECK(torch::equal(comfy_file.modules.at("transformer_blocks.0.attn.add_v_proj").b, b.slice(0, 2 * h)));

  tt::safetensors::TensorMap peft;
  peft["transformer.transformer_blocks.0.attn.to_out.0.lora_A.weight"] = a;
  peft["transformer.transformer_blocks.0.attn.to_out.0.lora_B.weight"] = b.slice(0, 0, h).contiguous();
  const nlohmann::json adapter = {{"transformer.r", r}, {"transformer.lora_alpha", 1.0}};
  tt::safetensors::save(dir / "peft.safetensors", peft, {{"lora_adapter_metadata", adapter.dump()}});
  const tt::LoraFile peft_file = tt::read_lora_file(dir / "peft.safetensors");
  CHECK(peft_file.format == "diffusers");
  CHECK(peft_file.modules.at("transformer_blocks.0.attn.to_out.0").scale == 0.5);

  peft["transformer.transformer_blocks.0.attn.to_out.0.weight"] = torch::zeros({h, h});  // a base weight
  tt::safetensors::save(dir / "mixed.safetensors", peft);
  const tt::Error junk = tt::test::expect_error([&] { tt::read_lora_file(dir / "mixed.safetensors"); });
  CHECK(junk.code() == tt::ErrorCode::kCheckpoint);
  CHECK(std::string(junk.what()).find("to_out.0.weight") != std::string::npos);
}

TEST_CASE("LoRA files: damaged factors and alphas are TT_ERR_CHECKPOINT naming the key; alpha 0 means alpha = rank",
          "[lora]") {
  const int64_t h = 8, r = 2;
  const std::string a_key = "lora_unet_double_blocks_0_img_attn_proj.lora_down.weight";
  const std::string b_key = "lora_unet_double_blocks_0_img_attn_proj.lora_up.weight";
  const std::string alpha_key = "lora_unet_double_blocks_0_img_attn_proj.alpha";
  auto good = [&] {
    torch::manual_seed(4);
    tt::safetensors::TensorMap t;
    t[a_key] = torch::randn({r, h});
    t[b_key] = torch::randn({h, r});
    t[alpha_key] = torch::tensor(4.0);
    return t;
  };
  // Each damage, and a piece of what the message must say.
  std::vector<std::pair<std::function<void(tt::safetensors::TensorMap&)>, std::string>> damages = {
      {[&](auto& t) { t[a_key][0][1] = std::nan(""); }, a_key + " holds non-finite values"},
      {[&](auto& t) { t[b_key][1][0] = INFINITY; }, b_key + " holds non-finite values"},
      {[&](auto& t) { t[a_key] = t[a_key].to(torch::kInt32); }, "not floating point"},
      {[&](auto& t) { t[a_key] = t[a_key].unsqueeze(0); }, "are not a LoRA pair"},
      {[&](auto& t) { t[a_key] = torch::zeros({0, h}); t[b_key] = torch::zeros({h, 0}); }, "are not a LoRA pair"},
      {[&](auto& t) { t[alpha_key] = torch::ones({2}); }, alpha_key + " must hold one number"},
      {[&](auto& t) { t[alpha_key] = torch::tensor(-1.0); }, "an alpha must be a finite number >= 0"},
      {[&](auto& t) { t[alpha_key] = torch::tensor(std::nan("")); }, "an alpha must be a finite number >= 0"},
  };
  const std::map<std::string, std::string> no_metadata;
  for (size_t i = 0; i < damages.size(); ++i) {
    INFO("damage " << i);
    tt::safetensors::TensorMap t = good();
    damages[i].first(t);
    const tt::Error error = tt::test::expect_error([&] { tt::read_lora_tensors(t, no_metadata, "crafted", h); });
    CHECK(error.code() == tt::ErrorCode::kCheckpoint);
    CHECK(std::string(error.what()).find(damages[i].second) != std::string::npos);
    CHECK(error.hint().find("tele_tron.model.lora.weights") != std::string::npos);
  }
  tt::safetensors::TensorMap t = good();
  CHECK(tt::read_lora_tensors(t, no_metadata, "good", h).modules.at("transformer_blocks.0.attn.to_out.0").scale ==
        2.0);  // 4 / 2
  t[alpha_key] = torch::tensor(0.0);
  CHECK(tt::read_lora_tensors(t, no_metadata, "alpha 0", h).modules.at("transformer_blocks.0.attn.to_out.0").scale ==
        1.0);
  const std::map<std::string, std::string> bad_metadata = {
      {"lora_adapter_metadata", R"({"transformer.r": 2, "transformer.lora_alpha": -3})"}};
  tt::safetensors::TensorMap peft;
  peft["transformer.transformer_blocks.0.attn.to_out.0.lora_A.weight"] = torch::randn({r, h});
  peft["transformer.transformer_blocks.0.attn.to_out.0.lora_B.weight"] = torch::randn({h, r});
  CHECK(tt::test::expect_error([&] { tt::read_lora_tensors(peft, bad_metadata, "peft", h); }).code() ==
        tt::ErrorCode::kCheckpoint);
}
