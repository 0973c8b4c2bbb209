// Weight I/O: official <-> diffusers key map, every on-disk layout (single file, shards + index,
// save_pretrained and pipeline folders, official safetensors and torch.save archives), strict
// errors, dtype conversion, config.json, and the transient memory of a streamed load.
#include <caffe2/serialize/inline_container.h>
#include <torch/serialize.h>
#include <torch/torch.h>
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <filesystem>
#include <cmath>
#include <fstream>
#include <functional>
#include <set>

#include "core/errors.h"
#include "core/safetensors.h"
#include "model/diffusers_config.h"
#include "model/key_map.h"
#include "model/transformer.h"
#include "model/weight_io.h"
#include "test/model/small_model.h"
#include "test/test_util.h"

using Catch::Matchers::ContainsSubstring;
using TensorMap = std::map<std::string, torch::Tensor>;
namespace fs = std::filesystem;

namespace {

// Small, with a fractional mlp_ratio (hidden 32 -> MLP 80) so that linear1's split is uneven.
tt::HunyuanVideoConfig small_config() {
  tt::HunyuanVideoConfig c = tt::test::small_model_config();
  c.num_single_layers = 2;
  c.mlp_ratio = 2.5;
  return c;
}

tt::TransformerInputs make_inputs(const tt::HunyuanVideoConfig& c) { return tt::test::small_model_inputs(c, 2, 6); }

tt::HunyuanVideoTransformer random_model(const tt::HunyuanVideoConfig& c, uint64_t seed) {
  tt::HunyuanVideoTransformer model(c);
  tt::test::randomise_weights(model, seed);
  return model;
}

// The model's parameters by diffusers key: load_weights' destinations.
TensorMap parameters_of(tt::HunyuanVideoTransformer model) {
  TensorMap out;
  for (const auto& [name, tensor] : model->diffusers_parameters()) out[name] = tensor;
  return out;
}

TensorMap detached_copy(const TensorMap& tensors, torch::Dtype dtype = torch::kFloat32) {
  TensorMap out;
  for (const auto& [key, tensor] : tensors) out[key] = tensor.detach().to(dtype).clone();
  return out;
}

void require_equal_maps(const TensorMap& expected, const TensorMap& actual) {
  REQUIRE(expected.size() == actual.size());
  for (const auto& [key, tensor] : expected) {
    INFO(key);
    REQUIRE(actual.count(key) == 1);
    CHECK(torch::equal(tensor, actual.at(key)));
  }
}

torch::Tensor forward(tt::HunyuanVideoTransformer& model) {
  torch::NoGradGuard no_grad;
  return model->forward(make_inputs(model->config()));
}

// ---- a torch.save writer that emits what Python's torch.save writes --------------------------
// Protocol-2 pickle of {"module": OrderedDict(state) with _metadata (BUILD), plus DeepSpeed-style
// extras (a version string, torch.Size lists, an opaque config object, numbers)}; every tensor is
// a view into one shared storage per dtype (like parameters flattened into one buffer), stored
// uncompressed in a zip archive by LibTorch's PyTorchStreamWriter, as torch.save does.
class PythonPickle {
 public:
  std::string bytes;
  void op(int c) { bytes.push_back(static_cast<char>(c)); }
  void u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) op((v >> (8 * i)) & 0xff);
  }
  void str(const std::string& s) {
    op('X');
    u32(static_cast<uint32_t>(s.size()));
    bytes += s;
  }
  void integer(int64_t v) {
    if (v >= 0 && v < 256) {
      op('K');
      op(static_cast<int>(v));
    } else if (v >= 0 && v < 65536) {
      op('M');
      op(v & 0xff);
      op((v >> 8) & 0xff);
    } else {
      op('J');
      u32(static_cast<uint32_t>(v));
    }
  }
  void global(const std::string& module, const std::string& name) {
    bytes += "c" + module + "\n" + name + "\n";
  }
  void int_tuple(const std::vector<int64_t>& values) {
    op('(');
    for (int64_t v : values) integer(v);
    op('t');
  }
};

const char* storage_name(torch::Dtype dtype) {
  if (dtype == torch::kBFloat16) return "BFloat16Storage";
  if (dtype == torch::kFloat16) return "HalfStorage";
  return "FloatStorage";
}

void write_python_style_torch_save(const std::string& path, const TensorMap& state) {
  REQUIRE(!state.empty());
  torch::Dtype dtype = state.begin()->second.scalar_type();
  std::vector<torch::Tensor> flat;
  for (const auto& [key, tensor] : state) flat.push_back(tensor.detach().contiguous().flatten());
  torch::Tensor storage = torch::cat(flat).contiguous();  // one shared storage "0"

  PythonPickle p;
  p.op(0x80);
  p.op(2);
  p.op('}');  // top-level dict
  p.op('(');
  p.str("module");
  p.global("collections", "OrderedDict");
  p.op('q');  // BINPUT 1
  p.op(1);
  p.op(')');
  p.op('R');
  p.op('(');
  int64_t offset = 0;
  bool first = true;
  for (const auto& [key, tensor] : state) {
    p.str(key);
    if (first) {
      p.global("torch._utils", "_rebuild_tensor_v2");
      p.op('q');  // BINPUT 2
      p.op(2);
      first = false;
    } else {
      p.op('h');  // BINGET 2
      p.op(2);
    }
    p.op('(');
    p.op('(');
    p.str("storage");
    p.global("torch", storage_name(dtype));
    p.str("0");
    p.str("cpu");
    p.integer(storage.numel());
    p.op('t');
    p.op('Q');  // BINPERSID
    p.integer(offset);
    p.int_tuple(tensor.sizes().vec());
    p.int_tuple(tensor.contiguous().strides().vec());
    p.op(0x89);  // requires_grad False
    p.op('h');   // backward hooks: OrderedDict()
    p.op(1);
    p.op(')');
    p.op('R');
    p.op('t');
    p.op('R');
    offset += tensor.numel();
  }
  p.op('u');  // SETITEMS into the OrderedDict
  // state {'_metadata': OrderedDict([('', {'version': 1})])}, applied by BUILD
  p.op('}');
  p.str("_metadata");
  p.op('h');
  p.op(1);
  p.op(')');
  p.op('R');
  p.str("");
  p.op('}');
  p.str("version");
  p.integer(1);
  p.op('s');
  p.op('s');
  p.op('s');
  p.op('b');
  // DeepSpeed-style extras the reader must skip
  p.str("ds_version");
  p.str("0.15.1");
  p.str("param_shapes");
  p.op(']');
  p.op('h');
  p.op(1);
  p.op(')');
  p.op('R');
  p.op('(');
  p.str(state.begin()->first);
  p.global("torch", "Size");
  p.int_tuple(state.begin()->second.sizes().vec());
  p.op(0x85);  // TUPLE1
  p.op('R');
  p.op('u');
  p.op('a');  // APPEND
  p.str("ds_config");
  p.global("deepspeed.runtime.config", "DeepSpeedConfig");
  p.op(')');
  p.op(0x81);  // NEWOBJ
  p.op('}');
  p.str("train_batch_size");
  p.integer(128);
  p.op('s');
  p.op('b');
  p.str("global_steps");
  p.integer(123456);
  p.op('u');  // SETITEMS into the top-level dict
  p.op('.');

  caffe2::serialize::PyTorchStreamWriter writer(path);
  writer.writeRecord("data.pkl", p.bytes.data(), p.bytes.size());
  writer.writeRecord("byteorder", "little", 6);
  writer.writeRecord("data/0", storage.data_ptr(), storage.nbytes());
  writer.writeEndOfFile();
}

// What LibTorch's own torch::pickle_save writes: {"module": Dict[str, Tensor]}.
void write_libtorch_pickle(const std::string& path, const TensorMap& state) {
  c10::Dict<std::string, at::Tensor> inner;
  for (const auto& [key, tensor] : state) inner.insert(key, tensor);
  c10::impl::GenericDict outer(c10::StringType::get(), c10::AnyType::get());
  outer.insert("module", inner);
  std::vector<char> bytes = torch::pickle_save(outer);
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace

TEST_CASE("key map: every diffusers key has an official home and comes back unchanged", "[weights]") {
  auto c = small_config();
  auto model = random_model(c, 1);
  TensorMap diffusers = detached_copy(parameters_of(model));
  TensorMap official = tt::diffusers_to_official(diffusers);

  const char* expected_official[] = {
      "img_in.proj.weight",
      "time_in.mlp.0.weight",
      "time_in.mlp.2.bias",
      "vector_in.in_layer.weight",
      "vector_in.out_layer.bias",
      "guidance_in.mlp.0.weight",
      "guidance_in.mlp.2.weight",
      "txt_in.input_embedder.weight",
      "txt_in.t_embedder.mlp.0.weight",
      "txt_in.c_embedder.linear_2.bias",
      "txt_in.individual_token_refiner.blocks.0.norm1.weight",
      "txt_in.individual_token_refiner.blocks.0.self_attn_qkv.weight",
      "txt_in.individual_token_refiner.blocks.0.self_attn_proj.bias",
      "txt_in.individual_token_refiner.blocks.0.mlp.fc1.weight",
      "txt_in.individual_token_refiner.blocks.0.adaLN_modulation.1.weight",
      "double_blocks.0.img_mod.linear.weight",
      "double_blocks.0.txt_mod.linear.bias",
      "double_blocks.0.img_attn_qkv.weight",
      "double_blocks.0.img_attn_q_norm.weight",
      "double_blocks.0.img_attn_proj.weight",
      "double_blocks.0.img_mlp.fc2.bias",
      "double_blocks.0.txt_attn_qkv.bias",
      "double_blocks.0.txt_attn_k_norm.weight",
      "double_blocks.0.txt_attn_proj.weight",
      "double_blocks.0.txt_mlp.fc1.weight",
      "single_blocks.1.linear1.weight",
      "single_blocks.1.linear1.bias",
      "single_blocks.1.linear2.weight",
      "single_blocks.1.q_norm.weight",
      "single_blocks.1.modulation.linear.weight",
      "final_layer.linear.weight",
      "final_layer.adaLN_modulation.1.weight",
      "final_layer.adaLN_modulation.1.bias",
  };
  for (const char* key : expected_official) {
    INFO(key);
    CHECK(official.count(key) == 1);
  }
  const int64_t h = c.hidden_size();
  CHECK(official.at("double_blocks.0.img_attn_qkv.weight").sizes() == torch::IntArrayRef({3 * h, h}));
  CHECK(official.at("single_blocks.0.linear1.weight").sizes() ==
        torch::IntArrayRef({3 * h + c.mlp_hidden(), h}));
  CHECK(official.at("single_blocks.0.linear1.bias").size(0) == 3 * h + c.mlp_hidden());
  CHECK(torch::equal(official.at("double_blocks.0.txt_attn_qkv.weight").slice(0, h, 2 * h),
                     diffusers.at("transformer_blocks.0.attn.add_k_proj.weight")));
  CHECK(torch::equal(official.at("single_blocks.1.linear1.bias").slice(0, 3 * h),
                     diffusers.at("single_transformer_blocks.1.proj_mlp.bias")));

  // Final layer: official [shift; scale] is diffusers [scale; shift].
  for (const char* param : {"weight", "bias"}) {
    torch::Tensor off = official.at(std::string("final_layer.adaLN_modulation.1.") + param);
    torch::Tensor dif = diffusers.at(std::string("norm_out.linear.") + param);
    CHECK(torch::equal(off.slice(0, 0, h), dif.slice(0, h)));
    CHECK(torch::equal(off.slice(0, h), dif.slice(0, 0, h)));
  }
  // The refiner's and the double blocks' own modulations are not swapped.
  CHECK(torch::equal(official.at("txt_in.individual_token_refiner.blocks.0.adaLN_modulation.1.weight"),
                     diffusers.at("context_embedder.token_refiner.refiner_blocks.0.norm_out.linear.weight")));

  require_equal_maps(diffusers, tt::official_to_diffusers(official));
  require_equal_maps(diffusers, tt::official_to_diffusers(official, h));

  CHECK(tt::official_to_diffusers_key("double_blocks.0.img_attn_qkv.weight", 3 * h, h).size() == 3);
  CHECK(tt::official_to_diffusers_key("double_blocks.0.img_norm1.weight", h, h).empty());
  CHECK_FALSE(tt::diffusers_to_official_key("transformer_blocks.0.attn.to_q.lora_A.weight").has_value());
  CHECK(tt::test::expect_error([&] {
          tt::official_to_diffusers_key("double_blocks.0.img_attn_qkv.weight", 3 * h + 1, h);
        }).code() == tt::ErrorCode::kCheckpoint);
}

TEST_CASE("official safetensors, official torch.save and sharded diffusers load identically", "[weights]") {
  auto c = small_config();
  auto reference = random_model(c, 1);
  TensorMap weights = detached_copy(parameters_of(reference));
  tt::test::TempDir dir("tt_weights");

  tt::save_official_weights(dir / "official.safetensors", weights);
  fs::create_directories(dir / "official_pt");
  write_python_style_torch_save(dir / "official_pt/mp_rank_00_model_states.pt",
                                tt::diffusers_to_official(weights));
  write_libtorch_pickle(dir / "libtorch.pt", tt::diffusers_to_official(weights));
  nlohmann::json config = tt::hunyuan_config_to_diffusers_json(c);
  tt::save_diffusers_weights(dir / "diffusers", weights, &config, /*max_shard_bytes=*/60'000);
  REQUIRE(fs::exists(dir / "diffusers/diffusion_pytorch_model.safetensors.index.json"));
  REQUIRE(fs::exists(dir / "diffusers/config.json"));
  REQUIRE_FALSE(fs::exists(dir / "diffusers/diffusion_pytorch_model.safetensors"));

  const torch::Tensor expected = forward(reference);
  const std::string paths[] = {dir / "official.safetensors",
                               dir / "official_pt",
                               dir / "official_pt/mp_rank_00_model_states.pt",
                               dir / "libtorch.pt",
                               dir / "diffusers",
                               dir / "diffusers/diffusion_pytorch_model.safetensors.index.json"};
  for (const std::string& path : paths) {
    INFO(path);
    tt::WeightSource source = tt::open_weights(path);
    INFO(source.description);
    bool official = path.find("official") != std::string::npos || path.ends_with(".pt");
    CHECK((source.layout == tt::WeightLayout::kOfficial) == official);
    CHECK(source.hidden_size == (official ? c.hidden_size() : 0));
    auto model = random_model(c, 99);  // different values everywhere
    tt::load_weights(source, parameters_of(model));
    require_equal_maps(weights, detached_copy(parameters_of(model)));
    CHECK(torch::equal(forward(model), expected));
  }
  tt::WeightSource sharded = tt::open_weights(dir / "diffusers");
  CHECK(sharded.files.size() > 2);
  CHECK_THAT(sharded.description, ContainsSubstring("shards"));
  auto json = tt::diffusers_config_json(sharded);
  REQUIRE(json.has_value());
  CHECK(*json == config);
  CHECK_THAT(tt::open_weights(dir / "official_pt").description, ContainsSubstring("under \"module\""));
  CHECK_FALSE(tt::diffusers_config_json(tt::open_weights(dir / "official.safetensors")).has_value());

  // read_weights materialises the same tensors under diffusers names.
  require_equal_maps(weights, detached_copy(tt::read_weights(tt::open_weights(dir / "official_pt"))));
}

TEST_CASE("dtype conversion: bf16 and fp16 files load into fp32 parameters", "[weights]") {
  auto c = small_config();
  auto reference = random_model(c, 2);
  TensorMap weights = detached_copy(parameters_of(reference));
  tt::test::TempDir dir("tt_weights");
  for (torch::Dtype dtype : {torch::kBFloat16, torch::kFloat16}) {
    INFO(dtype);
    TensorMap stored = detached_copy(weights, dtype);
    TensorMap expected;
    for (const auto& [key, tensor] : stored) expected[key] = tensor.to(torch::kFloat32);
    std::string name = dtype == torch::kBFloat16 ? "bf16" : "fp16";
    tt::save_diffusers_weights(dir / ("diffusers_" + name), stored);
    tt::save_official_weights(dir / ("official_" + name + ".safetensors"), stored);
    write_python_style_torch_save(dir / ("official_" + name + ".pt"), tt::diffusers_to_official(stored));
    for (const std::string& path : {dir / ("diffusers_" + name), dir / ("official_" + name + ".safetensors"),
                                    dir / ("official_" + name + ".pt")}) {
      INFO(path);
      auto model = random_model(c, 5);
      tt::load_weights(tt::open_weights(path), parameters_of(model));
      require_equal_maps(expected, detached_copy(parameters_of(model)));
      CHECK(tt::read_weights(tt::open_weights(path)).begin()->second.scalar_type() == dtype);
    }
  }
}

TEST_CASE("destinations may be views into fused tensors", "[weights]") {
  auto c = small_config();
  auto reference = random_model(c, 3);
  TensorMap weights = detached_copy(parameters_of(reference));
  tt::test::TempDir dir("tt_weights");
  tt::save_official_weights(dir / "official.safetensors", weights);

  auto model = random_model(c, 4);
  TensorMap destinations = parameters_of(model);
  const int64_t h = c.hidden_size();
  torch::Tensor fused = torch::zeros({3 * h, h});  // (3*hidden, hidden) fp32, q|k|v
  const char* names[] = {"to_q", "to_k", "to_v"};
  for (int i = 0; i < 3; ++i)
    destinations[std::string("transformer_blocks.0.attn.") + names[i] + ".weight"] =
        fused.narrow(0, i * h, h);
  tt::load_weights(tt::open_weights(dir / "official.safetensors"), destinations);
  CHECK(torch::equal(fused, tt::diffusers_to_official(weights).at("double_blocks.0.img_attn_qkv.weight")));
}

TEST_CASE("strict loading lists missing, unexpected and mis-shaped keys together", "[weights]") {
  auto c = small_config();
  auto reference = random_model(c, 1);
  TensorMap weights = detached_copy(parameters_of(reference));
  weights.erase("proj_out.bias");
  weights["transformer_blocks.0.attn.to_q.lora_A.weight"] = torch::zeros({4, 32});
  weights["x_embedder.proj.weight"] = torch::zeros({32, 16, 1, 2, 3});
  tt::test::TempDir dir("tt_weights");
  tt::save_diffusers_weights(dir / "bad", weights);

  auto model = random_model(c, 9);
  TensorMap before = detached_copy(parameters_of(model));
  tt::Error error =
      tt::test::expect_error([&] { tt::load_weights(tt::open_weights(dir / "bad"), parameters_of(model)); });
  CHECK(error.code() == tt::ErrorCode::kCheckpoint);
  std::string message = error.what();
  CHECK_THAT(message, ContainsSubstring("1 missing, 1 unexpected, 1 mis-shaped"));
  CHECK_THAT(message, ContainsSubstring("missing: proj_out.bias"));
  CHECK_THAT(message, ContainsSubstring("unexpected: transformer_blocks.0.attn.to_q.lora_A.weight"));
  CHECK_THAT(message,
             ContainsSubstring("mis-shaped: x_embedder.proj.weight is [32, 16, 1, 2, 3] in the checkpoint, "
                               "[32, 16, 1, 2, 2] in the model"));
  CHECK_THAT(message, ContainsSubstring(dir / "bad"));
  require_equal_maps(before, detached_copy(parameters_of(model)));  // nothing written

  // Long lists are capped at 20 lines.
  tt::save_diffusers_weights(dir / "one",
                             {{"proj_out.bias", weights.at("transformer_blocks.0.attn.to_q.bias")}});
  error = tt::test::expect_error([&] { tt::load_weights(tt::open_weights(dir / "one"), parameters_of(model)); });
  CHECK_THAT(std::string(error.what()), ContainsSubstring("missing: ... and "));

  // Official keys without a diffusers counterpart are unexpected, under their own name.
  TensorMap official = tt::diffusers_to_official(detached_copy(parameters_of(reference)));
  official["double_blocks.0.img_norm1.weight"] = torch::ones({32});
  tt::safetensors::save(dir / "official_extra.safetensors", official);
  error = tt::test::expect_error(
      [&] { tt::load_weights(tt::open_weights(dir / "official_extra.safetensors"), parameters_of(model)); });
  CHECK_THAT(std::string(error.what()), ContainsSubstring("unexpected: double_blocks.0.img_norm1.weight"));
}

TEST_CASE("corrupt sharded checkpoints are checkpoint errors", "[weights]") {
  auto c = small_config();
  TensorMap weights = detached_copy(parameters_of(random_model(c, 1)));
  tt::test::TempDir dir("tt_weights");
  const std::string index = dir / "m/diffusion_pytorch_model.safetensors.index.json";

  // Shard names as the index lists them.
  auto shard_names = [&] {
    std::set<std::string> names;
    nlohmann::json json = nlohmann::json::parse(tt::test::read_file(index));
    for (const auto& item : json["weight_map"].items()) names.insert(item.value().get<std::string>());
    return std::vector<std::string>(names.begin(), names.end());
  };

  SECTION("a shard is missing") {
    tt::save_diffusers_weights(dir / "m", weights, nullptr, 60'000);
    std::string shard = shard_names().at(1);
    fs::remove(dir / ("m/" + shard));
    tt::Error error = tt::test::expect_error([&] { tt::open_weights(dir / "m"); });
    CHECK(error.code() == tt::ErrorCode::kCheckpoint);
    CHECK_THAT(std::string(error.what()), ContainsSubstring("shard " + shard));
    CHECK_THAT(std::string(error.what()), ContainsSubstring("does not exist"));
  }
  SECTION("the index points a key at a shard that lacks it") {
    tt::save_diffusers_weights(dir / "m", weights, nullptr, 60'000);
    nlohmann::json json = nlohmann::json::parse(tt::test::read_file(index));
    std::string shard = json["weight_map"]["proj_out.weight"];
    std::string other = shard == shard_names().at(0) ? shard_names().at(1) : shard_names().at(0);
    json["weight_map"]["proj_out.weight"] = other;
    tt::test::write_file(index, json.dump());
    tt::Error error = tt::test::expect_error([&] { tt::open_weights(index); });
    CHECK(error.code() == tt::ErrorCode::kCheckpoint);
    CHECK_THAT(std::string(error.what()), ContainsSubstring("index puts proj_out.weight in " + other));
    CHECK_THAT(std::string(error.what()),
               ContainsSubstring(shard + " holds proj_out.weight, which the index does not list"));
  }
  SECTION("the index is not JSON or has no weight_map") {
    fs::create_directories(dir / "m");
    tt::test::write_file(index, "{\"metadata\": ");
    CHECK(tt::test::expect_error([&] { tt::open_weights(dir / "m"); }).code() == tt::ErrorCode::kCheckpoint);
    tt::test::write_file(index, "{\"metadata\": {}}");
    CHECK_THAT(std::string(tt::test::expect_error([&] { tt::open_weights(index); }).what()),
               ContainsSubstring("weight_map"));
  }
  SECTION("a truncated shard") {
    tt::save_diffusers_weights(dir / "m", weights, nullptr, 60'000);
    fs::resize_file(dir / ("m/" + shard_names().at(0)), 1000);
    CHECK(tt::test::expect_error([&] { tt::open_weights(dir / "m"); }).code() == tt::ErrorCode::kCheckpoint);
  }
}

TEST_CASE("weights with non-finite values or an integer dtype are checkpoint errors naming the tensor", "[weights]") {
  auto c = small_config();
  TensorMap weights = detached_copy(parameters_of(random_model(c, 1)));
  tt::test::TempDir dir("tt_weights");
  const std::string key = "transformer_blocks.0.attn.to_k.weight";  // a part of the official fused qkv
  struct Damage {
    std::string name;
    std::function<void(torch::Tensor&)> apply;
    std::string says;
  };
  const std::vector<Damage> damages = {
      {"nan", [](torch::Tensor& t) { t.view(-1)[3] = std::nan(""); }, "holds non-finite values"},
      {"inf", [](torch::Tensor& t) { t.view(-1)[0] = -INFINITY; }, "holds non-finite values"},
      {"int", [](torch::Tensor& t) { t = t.to(torch::kInt32); }, "is Int, not floating point"},
  };
  for (const Damage& damage : damages) {
    TensorMap stored = weights;
    stored[key] = weights.at(key).clone();
    damage.apply(stored[key]);
    std::vector<std::string> paths = {dir / ("diffusers_" + damage.name)};
    tt::save_diffusers_weights(paths[0], stored);
    if (damage.name != "int") {  // the official file fuses q, k, v: concatenation would promote to float
      paths.push_back(dir / ("official_" + damage.name + ".safetensors"));
      tt::save_official_weights(paths[1], stored);
    }
    for (const std::string& path : paths) {
      INFO(path);
      auto model = random_model(c, 5);
      const tt::Error error = tt::test::expect_error([&] { tt::load_weights(tt::open_weights(path), parameters_of(model)); });
      CHECK(error.code() == tt::ErrorCode::kCheckpoint);
      CHECK_THAT(std::string(error.what()), ContainsSubstring(damage.says));
      CHECK_THAT(std::string(error.what()), ContainsSubstring(path.find("official") != std::string::npos
                                                                   ? "double_blocks.0.img_attn_qkv.weight"
                                                                   : key));
    }
  }
}

TEST_CASE("folder layouts: save_pretrained, pipeline, re-saving, nothing there", "[weights]") {
  auto c = small_config();
  TensorMap weights = detached_copy(parameters_of(random_model(c, 1)));
  nlohmann::json config = tt::hunyuan_config_to_diffusers_json(c);
  tt::test::TempDir dir("tt_weights");

  // Pipeline folder: weights and config in transformer/.
  tt::save_diffusers_weights(dir / "pipe/transformer", weights, &config);
  tt::test::write_file(dir / "pipe/model_index.json", "{\"_class_name\": \"HunyuanVideoPipeline\"}");
  tt::WeightSource pipe = tt::open_weights(dir / "pipe");
  CHECK(pipe.files == std::vector<std::string>{dir / "pipe/transformer/diffusion_pytorch_model.safetensors"});
  REQUIRE(tt::diffusers_config_json(pipe).has_value());
  CHECK(tt::hunyuan_config_from_diffusers_json(*tt::diffusers_config_json(pipe)).mlp_ratio == 2.5);
  CHECK(tt::open_weights(dir / "pipe/transformer/diffusion_pytorch_model.safetensors").config_path ==
        dir / "pipe/transformer/config.json");

  // Re-saving sharded over single (and back) leaves no stale weight file behind.
  tt::save_diffusers_weights(dir / "pipe/transformer", weights, &config, 60'000);
  CHECK_FALSE(fs::exists(dir / "pipe/transformer/diffusion_pytorch_model.safetensors"));
  size_t shards = tt::open_weights(dir / "pipe").files.size();
  CHECK(shards > 2);
  tt::save_diffusers_weights(dir / "pipe/transformer", weights, &config, 120'000);  // fewer shards
  CHECK(tt::open_weights(dir / "pipe").files.size() < shards);
  tt::save_diffusers_weights(dir / "pipe/transformer", weights, &config);
  CHECK_FALSE(fs::exists(dir / "pipe/transformer/diffusion_pytorch_model.safetensors.index.json"));
  int files = 0;
  for (const auto& entry : fs::directory_iterator(dir / "pipe/transformer")) files += entry.is_regular_file();
  CHECK(files == 2);  // weights + config.json, no temporaries

  // Official keys under a wrapper prefix.
  TensorMap prefixed;
  for (auto& [key, tensor] : tt::diffusers_to_official(weights))
    prefixed["model.diffusion_model." + key] = tensor;
  tt::safetensors::save(dir / "comfy.safetensors", prefixed);
  tt::WeightSource comfy = tt::open_weights(dir / "comfy.safetensors");
  CHECK(comfy.layout == tt::WeightLayout::kOfficial);
  CHECK_THAT(comfy.description, ContainsSubstring("stripped"));
  auto model = random_model(c, 8);
  tt::load_weights(comfy, parameters_of(model));
  require_equal_maps(weights, detached_copy(parameters_of(model)));

  fs::create_directories(dir / "empty");
  tt::test::write_file(dir / "empty/README.md", "nothing");
  tt::Error error = tt::test::expect_error([&] { tt::open_weights(dir / "empty"); });
  CHECK(error.code() == tt::ErrorCode::kCheckpoint);
  CHECK_THAT(std::string(error.what()), ContainsSubstring("README.md"));
  CHECK(tt::test::expect_error([&] { tt::open_weights(dir / "nope"); }).code() == tt::ErrorCode::kCheckpoint);

  tt::safetensors::save(dir / "other.safetensors", {{"encoder.conv_in.weight", torch::zeros({2})}});
  CHECK_THAT(std::string(tt::test::expect_error([&] { tt::open_weights(dir / "other.safetensors"); }).what()),
             ContainsSubstring("no HunyuanVideo Transformer weights"));
  TensorMap mixed = {{"double_blocks.0.img_mod.linear.weight", torch::zeros({2})},
                     {"transformer_blocks.0.norm1.linear.weight", torch::zeros({2})}};
  tt::safetensors::save(dir / "mixed.safetensors", mixed);
  CHECK_THAT(std::string(tt::test::expect_error([&] { tt::open_weights(dir / "mixed.safetensors"); }).what()),
             ContainsSubstring("mixes official and diffusers"));
}

TEST_CASE("torch.save files that cannot be read say why and how to convert", "[weights]") {
  tt::test::TempDir dir("tt_weights");
  // A legacy (pre-1.6) torch.save file starts with a bare pickle, not a zip archive.
  tt::test::write_file(dir / "legacy.pt",
                       std::string("\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19", 14));
  tt::Error error = tt::test::expect_error([&] { tt::open_weights(dir / "legacy.pt"); });
  CHECK(error.code() == tt::ErrorCode::kCheckpoint);
  CHECK_THAT(error.hint(), ContainsSubstring("safetensors"));
  CHECK_THAT(error.hint(), ContainsSubstring("python -c"));

  // A zip archive whose pickle holds no tensors.
  {
    caffe2::serialize::PyTorchStreamWriter writer(dir / "empty.pt");
    std::string pickle("\x80\x02}q\x00.", 6);
    writer.writeRecord("data.pkl", pickle.data(), pickle.size());
    writer.writeEndOfFile();
  }
  error = tt::test::expect_error([&] { tt::open_weights(dir / "empty.pt"); });
  CHECK(error.code() == tt::ErrorCode::kCheckpoint);
  CHECK_THAT(std::string(error.what()), ContainsSubstring("no tensors"));

  // A pickle that calls into unsupported territory (a non-storage persistent id).
  {
    caffe2::serialize::PyTorchStreamWriter writer(dir / "odd.pt");
    std::string pickle = std::string("\x80\x02(X\x06\x00\x00\x00moduletQ.", 15);
    writer.writeRecord("data.pkl", pickle.data(), pickle.size());
    writer.writeEndOfFile();
  }
  CHECK(tt::test::expect_error([&] { tt::open_weights(dir / "odd.pt"); }).code() == tt::ErrorCode::kCheckpoint);
}

TEST_CASE("config.json round trip and strict parsing", "[weights]") {
  tt::HunyuanVideoConfig c = small_config();
  c.guidance_embeds = false;
  c.out_channels = 8;
  c.rope_theta = 128.0;
  c.patch_size_t = 2;
  nlohmann::json json = tt::hunyuan_config_to_diffusers_json(c);
  CHECK(json["mlp_ratio"] == 2.5);
  CHECK(json["_class_name"] == "HunyuanVideoTransformer3DModel");
  CHECK(json["image_condition_type"].is_null());
  tt::HunyuanVideoConfig back = tt::hunyuan_config_from_diffusers_json(json);
  CHECK(tt::hunyuan_config_to_diffusers_json(back) == json);
  CHECK(back.mlp_hidden() == 80);
  CHECK(back.rope_axes_dim == c.rope_axes_dim);
  CHECK_FALSE(back.guidance_embeds);

  // As diffusers writes it for the released model (hunyuanvideo-community/HunyuanVideo).
  nlohmann::json released = nlohmann::json::parse(R"({
    "_class_name": "HunyuanVideoTransformer3DModel", "_diffusers_version": "0.32.0.dev0",
    "_name_or_path": "/raid/aryan/hunyuan-transformer", "attention_head_dim": 128, "guidance_embeds": true,
    "in_channels": 16, "mlp_ratio": 4.0, "num_attention_heads": 24, "num_layers": 20,
    "num_refiner_layers": 2, "num_single_layers": 40, "out_channels": null, "patch_size": 2,
    "patch_size_t": 1, "pooled_projection_dim": 768, "qk_norm": "rms_norm", "rope_axes_dim": [16, 56, 56],
    "rope_theta": 256.0, "text_embed_dim": 4096})");
  tt::HunyuanVideoConfig full = tt::hunyuan_config_from_diffusers_json(released);
  CHECK(tt::hunyuan_config_to_diffusers_json(full) ==
        tt::hunyuan_config_to_diffusers_json(tt::hunyuan_preset("13b")));
  CHECK(tt::hunyuan_config_from_diffusers_json(nlohmann::json::object()).num_single_layers == 40);

  auto rejected = [&](const char* field, nlohmann::json value) {
    nlohmann::json bad = json;
    bad[field] = std::move(value);
    tt::Error error = tt::test::expect_error([&] { tt::hunyuan_config_from_diffusers_json(bad, "/m/config.json"); });
    CHECK(error.code() == tt::ErrorCode::kConfig);
    CHECK_THAT(std::string(error.what()), ContainsSubstring(std::string("/m/config.json: ") + field));
  };
  rejected("image_condition_type", "token_replace");

  // Image-to-video (latent_concat): 33 = 16 noisy + 16 first-frame + 1 mask input channels.
  nlohmann::json i2v = released;
  i2v["in_channels"] = 33;
  i2v["out_channels"] = 16;
  i2v["image_condition_type"] = "latent_concat";
  tt::HunyuanVideoConfig image = tt::hunyuan_config_from_diffusers_json(i2v);
  CHECK(image.image_condition_type == "latent_concat");
  CHECK(image.in_channels == 33);
  CHECK(tt::hunyuan_config_to_diffusers_json(image)["image_condition_type"] == "latent_concat");
  i2v["in_channels"] = 16;  // inconsistent with latent_concat
  CHECK_THROWS_AS(tt::hunyuan_config_from_diffusers_json(i2v), tt::Error);
  rejected("num_layers", "2");
  rejected("mlp_ratio", "wide");
  rejected("qk_norm", "layer_norm");
  rejected("rope_axes_dim", nlohmann::json::array({4, 6}));
  rejected("guidance_embeds", 1);
  rejected("num_attention_heads", 0);
  rejected("some_new_option", true);
  rejected("_class_name", "FluxTransformer2DModel");
}

TEST_CASE("loading into CUDA parameters matches loading on the CPU", "[weights][gpu]") {
  TT_REQUIRE_GPU();
  auto c = small_config();
  TensorMap weights = detached_copy(parameters_of(random_model(c, 1)), torch::kBFloat16);
  tt::test::TempDir dir("tt_weights");
  tt::save_official_weights(dir / "official.safetensors", weights);
  auto cpu_model = random_model(c, 2);
  tt::load_weights(tt::open_weights(dir / "official.safetensors"), parameters_of(cpu_model));
  auto gpu_model = random_model(c, 3);
  gpu_model->to(torch::kCUDA);
  tt::load_weights(tt::open_weights(dir / "official.safetensors"), parameters_of(gpu_model));
  TensorMap on_gpu = parameters_of(gpu_model);
  for (const auto& [key, tensor] : parameters_of(cpu_model)) {
    INFO(key);
    CHECK(on_gpu.at(key).device().is_cuda());
    CHECK(torch::equal(on_gpu.at(key).cpu(), tensor));
  }
}

TEST_CASE("hostile weight files are checkpoint errors naming the file, never out-of-bounds reads",
          "[weights]") {
  tt::test::TempDir dir("tt_weights");
  std::string path = dir / "w.safetensors";
  tt::safetensors::save(path, {{"proj_out.weight", torch::arange(6, torch::kFloat32).reshape({2, 3})}});
  tt::WeightSource valid = tt::open_weights(path);
  REQUIRE(valid.tensors.count("proj_out.weight") == 1);

  // load_weights re-checks every view against the file it maps: the index may be stale, or (as
  // here) crafted, and from_blob must never be handed a view reaching outside the mapping.
  auto load_crafted = [&](std::vector<int64_t> strides, int64_t offset, const std::string& part) {
    tt::WeightSource source = valid;
    source.tensors.at("proj_out.weight").strides = std::move(strides);
    source.tensors.at("proj_out.weight").offset = offset;
    TensorMap destinations = {{"proj_out.weight", torch::zeros({2, 3})}};
    tt::Error error = tt::test::expect_error([&] { tt::load_weights(source, destinations); });
    INFO(error.what());
    CHECK(error.code() == tt::ErrorCode::kCheckpoint);
    CHECK_THAT(std::string(error.what()), ContainsSubstring(path));
    CHECK_THAT(std::string(error.what()), ContainsSubstring(part));
  };
  int64_t offset = valid.tensors.at("proj_out.weight").offset;
  SECTION("a stride past the end of the file") {
    load_crafted({3, 100'000}, offset, "lie beyond the end of the");
  }
  SECTION("an offset past the end of the file") {
    load_crafted({3, 1}, 1 << 20, "lie beyond the end of the");
  }
  SECTION("a stride whose extent overflows") {
    load_crafted({INT64_MAX, 2}, offset,
                 "stride extent: 9223372036854775807 + 4 overflows 64-bit arithmetic");
  }
  SECTION("a byte size that overflows") {
    load_crafted({int64_t{1} << 61, 1}, offset, "overflows 64-bit arithmetic");
  }
  SECTION("a negative stride") {
    load_crafted({3, -1}, offset, "negative stride -1 in dimension 1");
  }
  SECTION("a negative offset") {
    load_crafted({3, 1}, -4, "negative file offset -4");
  }

  SECTION("a file truncated after it was indexed") {
    std::filesystem::resize_file(path, static_cast<uintmax_t>(offset + 8));
    TensorMap destinations = {{"proj_out.weight", torch::zeros({2, 3})}};
    tt::Error error = tt::test::expect_error([&] { tt::load_weights(valid, destinations); });
    CHECK(error.code() == tt::ErrorCode::kCheckpoint);
    CHECK_THAT(std::string(error.what()), ContainsSubstring("lie beyond the end of the"));
  }
  SECTION("a file emptied after it was indexed") {
    std::filesystem::resize_file(path, 0);
    TensorMap destinations = {{"proj_out.weight", torch::zeros({2, 3})}};
    tt::Error error = tt::test::expect_error([&] { tt::load_weights(valid, destinations); });
    CHECK(error.code() == tt::ErrorCode::kCheckpoint);
    CHECK_THAT(std::string(error.what()), ContainsSubstring(path + ": empty file"));
  }
  SECTION("a safetensors header length over the limit") {
    tt::test::write_file(path, std::string("\x01\xe1\xf5\x05\x00\x00\x00\x00{}", 10));  // 100,000,001
    tt::Error error = tt::test::expect_error([&] { tt::open_weights(path); });
    CHECK(error.code() == tt::ErrorCode::kCheckpoint);
    CHECK_THAT(std::string(error.what()), ContainsSubstring(path));
    CHECK_THAT(std::string(error.what()), ContainsSubstring("exceeds the format's limit"));
  }
  SECTION("a torch.save file whose tensor reaches past its storage") {
    PythonPickle p;
    p.op(0x80);
    p.op(2);
    p.op('}');
    p.str("proj_out.weight");
    p.global("torch._utils", "_rebuild_tensor_v2");
    p.op('(');
    p.op('(');
    p.str("storage");
    p.global("torch", "FloatStorage");
    p.str("0");
    p.str("cpu");
    p.integer(6);
    p.op('t');
    p.op('Q');
    p.integer(0);
    p.int_tuple({2, 3});
    p.int_tuple({3, 100'000});  // reaches element 200,003 of a 6-element storage
    p.op(0x89);
    p.global("collections", "OrderedDict");
    p.op(')');
    p.op('R');
    p.op('t');
    p.op('R');
    p.op('s');
    p.op('.');
    std::string pt = dir / "w.pt";
    {
      caffe2::serialize::PyTorchStreamWriter writer(pt);
      writer.writeRecord("data.pkl", p.bytes.data(), p.bytes.size());
      std::string storage(24, '\0');
      writer.writeRecord("data/0", storage.data(), storage.size());
      writer.writeEndOfFile();
    }
    tt::Error error = tt::test::expect_error([&] { tt::open_weights(pt); });
    INFO(error.what());
    CHECK(error.code() == tt::ErrorCode::kCheckpoint);
    CHECK_THAT(std::string(error.what()), ContainsSubstring(pt + ": tensor \"proj_out.weight\""));
    CHECK_THAT(std::string(error.what()),
               ContainsSubstring("reach element 200003 of a storage of 6 elements"));
  }
}
