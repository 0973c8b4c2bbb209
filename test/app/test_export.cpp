// `teletron export`: a full checkpoint as a diffusers model folder (config.json, one file or shards
// with the index) that reads back as the checkpoint's weights and architecture; a LoRA checkpoint as
// pytorch_lora_weights.safetensors with alpha/r folded into B, or merged into the base.
#include <torch/torch.h>

#include <cmath>
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <nlohmann/json.hpp>

#include <filesystem>

#include "core/checkpoint.h"
#include "core/errors.h"
#include "core/safetensors.h"
#include "model/diffusers_config.h"
#include "model/lora_io.h"
#include "model/weight_io.h"
#include "test/app/train_runs.h"
#include "test/test_util.h"

using Catch::Matchers::ContainsSubstring;
using tt::test::run_teletron;

namespace {

using Workspace = tt::test::TrainWorkspace;

std::map<std::string, torch::Tensor> exported(const std::string& folder) {
  return tt::read_weights(tt::open_weights(folder));
}

}  // namespace

TEST_CASE(
    "export: a full checkpoint is a diffusers model folder with its weights and architecture; shards; bf16",
    "[export]") {
  Workspace ws(4);
  ws.train("run", "--max-steps 2");
  const std::string run = ws.dir / "run";
  const auto ckpt = tt::checkpoint::load(run + "/checkpoints/step_0000002");

  auto fp32 = run_teletron("export " + run + " --output " + (ws.dir / "fp32") + " --dtype fp32");
  INFO(fp32.output);
  REQUIRE(fp32.exit_code == 0);
  CHECK_THAT(fp32.output, ContainsSubstring("HunyuanVideoTransformer3DModel.from_pretrained"));
  CHECK(std::filesystem::exists(ws.dir / "fp32/diffusion_pytorch_model.safetensors"));
  const auto weights = exported(ws.dir / "fp32");
  REQUIRE(weights.size() == ckpt.model.size());
  for (const auto& [name, tensor] : ckpt.model) {
    INFO(name);
    CHECK(torch::equal(weights.at(name), tensor));
  }
  const nlohmann::json config = nlohmann::json::parse(tt::test::read_file(ws.dir / "fp32/config.json"));
  CHECK(config["_class_name"] == "HunyuanVideoTransformer3DModel");
  const tt::HunyuanVideoConfig architecture = tt::hunyuan_config_from_diffusers_json(config);
  CHECK(architecture.num_layers == 1);  // the workspace's model (test/app/train_runs.cpp)
  CHECK(architecture.num_attention_heads == 2);

  auto sharded =
      run_teletron("export " + run + " --output " + (ws.dir / "bf16") + " --max-shard-size 100000");
  INFO(sharded.output);
  REQUIRE(sharded.exit_code == 0);
  CHECK(std::filesystem::exists(ws.dir / "bf16/diffusion_pytorch_model.safetensors.index.json"));
  const auto bf16 = exported(ws.dir / "bf16");
  for (const auto& [name, tensor] : ckpt.model) {
    INFO(name);
    CHECK(bf16.at(name).scalar_type() == torch::kBFloat16);
    CHECK(torch::equal(bf16.at(name), tensor.to(torch::kBFloat16)));
  }

  auto merge = run_teletron("export " + run + " --output " + (ws.dir / "merge") + " --merge-lora");
  CHECK(merge.exit_code == tt::error_exit_code(tt::ErrorCode::kConfig));
  auto nothing = run_teletron("export " + (ws.dir / "nowhere") + " --output " + (ws.dir / "x"));
  CHECK(nothing.exit_code == tt::error_exit_code(tt::ErrorCode::kCheckpoint));
}

TEST_CASE(
    "export: a LoRA checkpoint as pytorch_lora_weights.safetensors with alpha/r folded into B, or merged",
    "[export][lora]") {
  Workspace ws(4);
  ws.train("base", "--max-steps 20");
  const std::string base = ws.dir / "base/checkpoints/step_0000020/model.safetensors";
  ws.train("lora", "--max-steps 3 --set model.weights=" + base +
                       " --set model.lora.rank=2 --set model.lora.alpha=6 --set optimizer.lr=1.0e-2 "
                       "--set train.ema_decay=0.5");
  const std::string run = ws.dir / "lora";
  const auto ckpt = tt::checkpoint::load(run + "/checkpoints/step_0000003");

  auto lora = run_teletron("export " + run + " --output " + (ws.dir / "lora_out") + " --dtype fp32");
  INFO(lora.output);
  REQUIRE(lora.exit_code == 0);
  const std::string file = ws.dir / "lora_out/pytorch_lora_weights.safetensors";
  const auto written = tt::safetensors::load(file);
  REQUIRE(written.size() == ckpt.model.size());
  const std::string b_key = "transformer.transformer_blocks.0.attn.to_q.lora_B.weight";
  const std::string a_key = "transformer.transformer_blocks.0.attn.to_q.lora_A.weight";
  CHECK(torch::allclose(written.at(b_key), ckpt.model.at(b_key) * 3.0));  // alpha / r = 6 / 2
  CHECK(torch::equal(written.at(a_key), ckpt.model.at(a_key)));
  const tt::LoraFile read = tt::read_lora_file(file);
  CHECK(read.format == "diffusers");
  CHECK(read.modules.at("transformer_blocks.0.attn.to_q").scale == 1.0);

  // --ema: the adapters' averages (train.ema_decay), B folded the same way.
  auto averaged = run_teletron("export " + run + " --output " + (ws.dir / "ema_out") + " --dtype fp32 --ema");
  INFO(averaged.output);
  REQUIRE(averaged.exit_code == 0);
  const auto written_ema = tt::safetensors::load(ws.dir / "ema_out/pytorch_lora_weights.safetensors");
  REQUIRE(written_ema.size() == ckpt.model.size());
  CHECK(torch::allclose(written_ema.at(b_key), ckpt.state.at("ema." + b_key) * 3.0));
  CHECK(torch::equal(written_ema.at(a_key), ckpt.state.at("ema." + a_key)));
  CHECK_FALSE(torch::equal(written_ema.at(b_key), written.at(b_key)));  // the average lags the weights

  auto merged =
      run_teletron("export " + run + " --output " + (ws.dir / "merged") + " --dtype fp32 --merge-lora");
  INFO(merged.output);
  REQUIRE(merged.exit_code == 0);
  CHECK_THAT(merged.output, ContainsSubstring("merged"));
  const auto merged_weights = exported(ws.dir / "merged");
  const auto base_weights = tt::read_weights(tt::open_weights(base));
  const torch::Tensor expected = base_weights.at("transformer_blocks.0.attn.to_q.weight") +
                                 ckpt.model.at(b_key).matmul(ckpt.model.at(a_key)) * 3.0;
  CHECK(torch::allclose(merged_weights.at("transformer_blocks.0.attn.to_q.weight"), expected, 1e-5, 1e-6));
  // A module without an adapter is the base's.
  CHECK(torch::equal(merged_weights.at("proj_out.weight"), base_weights.at("proj_out.weight")));

  // bf16 (the default): the model held in bf16, each merge added in fp32 and rounded once; this fp32
  // base was rounded at load too: within half a bf16 step of the base plus half a step of the result
  // (|x| 2^-8 each) of the fp32 merge.
  auto merged16 = run_teletron("export " + run + " --output " + (ws.dir / "merged16") + " --merge-lora");
  INFO(merged16.output);
  REQUIRE(merged16.exit_code == 0);
  const auto merged16_weights = exported(ws.dir / "merged16");
  const torch::Tensor& q16 = merged16_weights.at("transformer_blocks.0.attn.to_q.weight");
  CHECK(q16.scalar_type() == torch::kBFloat16);
  const torch::Tensor& q_base = base_weights.at("transformer_blocks.0.attn.to_q.weight");
  const torch::Tensor bound = (q_base.abs() + expected.abs()) * std::ldexp(1.0, -8) + 1e-30;
  const torch::Tensor error = (q16.to(torch::kFloat32) - expected).abs();
  INFO("max |bf16 merge - fp32 merge| " << error.max().item<double>() << ", max over the bound "
                                        << (error / bound).max().item<double>());
  CHECK((error <= bound).all().item<bool>());
  CHECK_FALSE(torch::equal(q16.to(torch::kFloat32), base_weights.at("transformer_blocks.0.attn.to_q.weight")
                                                        .to(torch::kBFloat16)
                                                        .to(torch::kFloat32)));  // the adapter is in it
  CHECK(torch::equal(merged16_weights.at("proj_out.weight"), base_weights.at("proj_out.weight").to(torch::kBFloat16)));

  // A checkpoint whose adapters were damaged since (a NaN): TT_ERR_CHECKPOINT pointing at the run's
  // other checkpoints, not at model.lora.weights (the hint for a LoRA file a user gives).
  const std::string adapters = run + "/checkpoints/step_0000003/" + tt::checkpoint::kLoraWeightsFile;
  auto tensors = tt::safetensors::load(adapters);
  tensors.at(a_key)[0][0] = std::nan("");
  tt::safetensors::save(adapters, tensors, tt::safetensors::read_header(adapters).metadata);
  auto damaged = run_teletron("export " + run + " --output " + (ws.dir / "damaged") + " 2>&1");
  INFO(damaged.output);
  CHECK(damaged.exit_code == tt::error_exit_code(tt::ErrorCode::kCheckpoint));
  CHECK_THAT(damaged.output, ContainsSubstring(a_key + " holds non-finite values"));
  CHECK_THAT(damaged.output,
             ContainsSubstring("export another checkpoint of the run (" + run + "/checkpoints/step_*)"));
  CHECK_THAT(damaged.output, !ContainsSubstring("model.lora.weights"));
  CHECK_FALSE(std::filesystem::exists(ws.dir / "damaged/pytorch_lora_weights.safetensors"));
  // The checkpoint folder itself, given with a trailing slash: the same run's checkpoints are named.
  auto named =
      run_teletron("export " + run + "/checkpoints/step_0000003/ --output " + (ws.dir / "damaged") + " 2>&1");
  INFO(named.output);
  CHECK(named.exit_code == tt::error_exit_code(tt::ErrorCode::kCheckpoint));
  CHECK_THAT(named.output,
             ContainsSubstring("export another checkpoint of the run (" + run + "/checkpoints/step_*)"));
}

TEST_CASE("export loads in diffusers: from_pretrained's forward equals teletron's; load_lora_adapter of the LoRA "
          "export equals the merged export",
          "[export][diffusers]") {
  // diffusers, peft and safetensors are pip packages the build does not need: without them this
  // check says so and skips (the GPU machine's script carries the wheels).
  if (tt::test::run_command("python3 -c 'import diffusers, peft, safetensors' 2>&1").exit_code != 0)
    SKIP("python3 lacks diffusers, peft or safetensors (pip install diffusers peft): not checked here");
  Workspace ws(4);
  ws.train("base", "--max-steps 20");
  const std::string base_dir = ws.dir / "base_export";
  REQUIRE(run_teletron("export " + (ws.dir / "base") + " --output " + base_dir + " --dtype fp32").exit_code == 0);
  const std::string script = std::string(TELETRON_SOURCE_DIR) + "/scripts/check_export_diffusers.py";
  auto full = tt::test::run_command("python3 " + script + " --teletron " + TELETRON_BINARY + " --model " + base_dir +
                                    " 2>&1");
  INFO(full.output);
  CHECK(full.exit_code == 0);
  CHECK_THAT(full.output, ContainsSubstring("from_pretrained(export)"));

  ws.train("lora", "--max-steps 3 --set model.weights=" + (ws.dir / "base/checkpoints/step_0000020/model.safetensors") +
                       " --set model.lora.rank=2 --set model.lora.alpha=6 --set optimizer.lr=1.0e-2");
  const std::string lora_dir = ws.dir / "lora_export", merged_dir = ws.dir / "merged_export";
  REQUIRE(run_teletron("export " + (ws.dir / "lora") + " --output " + lora_dir + " --dtype fp32").exit_code == 0);
  REQUIRE(run_teletron("export " + (ws.dir / "lora") + " --output " + merged_dir + " --dtype fp32 --merge-lora")
              .exit_code == 0);
  auto lora = tt::test::run_command("python3 " + script + " --teletron " + TELETRON_BINARY + " --model " + merged_dir +
                                    " --base " + base_dir + " --lora " + lora_dir + " 2>&1");
  INFO(lora.output);
  CHECK(lora.exit_code == 0);
  CHECK_THAT(lora.output, ContainsSubstring("load_lora_adapter(export)"));
}
