// `teletron model-check` reproduces the diffusers parity fixture from a diffusers folder and from an
// official-layout file; `teletron train` starts from a diffusers folder's weights.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "core/errors.h"
#include "core/safetensors.h"
#include "model/weight_io.h"
#include "test/test_util.h"

using Catch::Matchers::ContainsSubstring;
using tt::test::run_teletron;
using tt::test::TempDir;

namespace {

constexpr const char* kFixture = TELETRON_SOURCE_DIR "/test/fixtures/hunyuan_parity.safetensors";

struct Fixture {
  std::map<std::string, torch::Tensor> weights, inputs;
  torch::Tensor sample;
  nlohmann::json config;
};

Fixture read_fixture() {
  std::map<std::string, std::string> metadata;
  auto tensors = tt::safetensors::load(kFixture, {}, &metadata);
  Fixture f;
  for (const auto& [name, tensor] : tensors) {
    if (name.rfind("weight.", 0) == 0) f.weights[name.substr(7)] = tensor;
    if (name.rfind("input.", 0) == 0) f.inputs[name.substr(6)] = tensor;
  }
  f.sample = tensors.at("output.sample");
  f.config = nlohmann::json::parse(metadata.at("config"));
  return f;
}

double relative_error(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>() / b.abs().max().item<double>();
}

}  // namespace

TEST_CASE("model-check reproduces the diffusers fixture from a folder and from the official layout",
          "[cli][model-check]") {
  Fixture f = read_fixture();
  TempDir dir("tt_check");
  tt::save_diffusers_weights(dir / "model", f.weights, &f.config, /*max_shard_bytes=*/400'000);  // sharded
  tt::safetensors::save(dir / "inputs.safetensors", f.inputs);

  auto folder = run_teletron("model-check --weights " + (dir / "model") + " --inputs " + (dir / "inputs.safetensors") +
                             " --output " + (dir / "out.safetensors"));
  INFO(folder.output);
  REQUIRE(folder.exit_code == 0);
  auto sample = tt::safetensors::load(dir / "out.safetensors").at("sample");
  CHECK(relative_error(sample, f.sample) <= 1e-4);

  // Official layout: no config.json, so the architecture comes from a YAML file.
  tt::save_official_weights(dir / "official.safetensors", f.weights);
  const auto& c = f.config;
  std::string yaml = "tele_tron:\n  model:\n";
  for (const char* key : {"num_attention_heads", "attention_head_dim", "num_layers", "num_single_layers",
                          "num_refiner_layers", "mlp_ratio", "patch_size", "patch_size_t", "in_channels",
                          "out_channels", "text_embed_dim", "pooled_projection_dim", "rope_theta",
                          "guidance_embeds"}) {
    yaml += std::string("    ") + key + ": " + c.at(key).dump() + "\n";
  }
  yaml += "    rope_axes_dim: " + c.at("rope_axes_dim").dump() + "\n";
  tt::test::write_file(dir / "arch.yaml", yaml);
  auto official = run_teletron("model-check " + (dir / "arch.yaml") + " --weights " + (dir / "official.safetensors") +
                               " --inputs " + (dir / "inputs.safetensors") + " --output " + (dir / "out2.safetensors"));
  INFO(official.output);
  REQUIRE(official.exit_code == 0);
  auto sample2 = tt::safetensors::load(dir / "out2.safetensors").at("sample");
  CHECK(torch::equal(sample2, sample));

  // Missing input: TT_ERR_DATA naming it.
  auto partial = f.inputs;
  partial.erase("pooled_projections");
  tt::safetensors::save(dir / "partial.safetensors", partial);
  auto missing = run_teletron("model-check --weights " + (dir / "model") + " --inputs " +
                              (dir / "partial.safetensors") + " --output " + (dir / "out3.safetensors"));
  CHECK(missing.exit_code == tt::error_exit_code(tt::ErrorCode::kData));
  CHECK_THAT(missing.output, ContainsSubstring("pooled_projections"));
}

TEST_CASE("a config.json too large for its weights, or past any sane size, stops before the model is built",
          "[cli][model-check]") {
  Fixture f = read_fixture();
  TempDir dir("tt_check_size");
  tt::safetensors::save(dir / "inputs.safetensors", f.inputs);
  auto check_with = [&](const std::string& name, const nlohmann::json& config) {
    tt::save_diffusers_weights(dir / name, f.weights, &config);
    return run_teletron("model-check --weights " + (dir / name) + " --inputs " + (dir / "inputs.safetensors") +
                        " --output " + (dir / (name + ".safetensors")));
  };
  nlohmann::json wider = f.config;
  wider["num_single_layers"] = f.config.at("num_single_layers").get<int64_t>() + 40;  // weights of fewer
  auto larger = check_with("larger", wider);
  CHECK(larger.exit_code == tt::error_exit_code(tt::ErrorCode::kCheckpoint));
  CHECK_THAT(larger.output, ContainsSubstring("they do not belong together"));
  nlohmann::json absurd = f.config;
  absurd["num_attention_heads"] = 1'000'000'000;
  auto huge = check_with("huge", absurd);
  CHECK(huge.exit_code == tt::error_exit_code(tt::ErrorCode::kConfig));
  CHECK_THAT(huge.output, ContainsSubstring("num_attention_heads: 1000000000 is beyond 1024"));
  absurd = f.config;
  absurd["mlp_ratio"] = 1e12;
  CHECK_THAT(check_with("mlp", absurd).output, ContainsSubstring("mlp_ratio: must be in (0, 64]"));
}
