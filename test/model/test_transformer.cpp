// HunyuanVideo Transformer: diffusers key names, shapes, masking, RoPE, conditioning, weights I/O.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <torch/torch.h>

#include <set>
#include <utility>
#include <vector>

#include "core/errors.h"
#include "model/flops.h"
#include "model/rope.h"
#include "model/text_padding.h"
#include "model/transformer.h"
#include "model/weights.h"
#include "test/model/small_model.h"
#include "test/test_util.h"

using Catch::Matchers::ContainsSubstring;

namespace {

tt::HunyuanVideoConfig small_config() { return tt::test::small_model_config(); }

tt::TransformerInputs make_inputs(const tt::HunyuanVideoConfig& c, int64_t batch, int64_t length) {
  return tt::test::small_model_inputs(c, batch, length);
}

void randomise(tt::HunyuanVideoTransformer& model) { tt::test::randomise_weights(model, 3); }

}  // namespace

TEST_CASE("parameter names are diffusers' keys", "[model]") {
  tt::HunyuanVideoTransformer model(small_config());
  std::set<std::string> names;
  for (const auto& item : model->diffusers_parameters()) names.insert(item.first);
  const char* expected[] = {
      "x_embedder.proj.weight",
      "x_embedder.proj.bias",
      "context_embedder.time_text_embed.timestep_embedder.linear_1.weight",
      "context_embedder.time_text_embed.text_embedder.linear_2.bias",
      "context_embedder.proj_in.weight",
      "context_embedder.token_refiner.refiner_blocks.0.norm1.weight",
      "context_embedder.token_refiner.refiner_blocks.0.attn.to_q.weight",
      "context_embedder.token_refiner.refiner_blocks.0.attn.to_out.0.weight",
      "context_embedder.token_refiner.refiner_blocks.0.ff.net.0.proj.weight",
      "context_embedder.token_refiner.refiner_blocks.0.ff.net.2.weight",
      "context_embedder.token_refiner.refiner_blocks.0.norm_out.linear.weight",
      "time_text_embed.timestep_embedder.linear_1.weight",
      "time_text_embed.text_embedder.linear_1.weight",
      "time_text_embed.guidance_embedder.linear_2.weight",
      "transformer_blocks.0.norm1.linear.weight",
      "transformer_blocks.0.norm1_context.linear.weight",
      "transformer_blocks.0.attn.to_q.weight",
      "transformer_blocks.0.attn.norm_q.weight",
      "transformer_blocks.0.attn.add_k_proj.bias",
      "transformer_blocks.0.attn.norm_added_k.weight",
      "transformer_blocks.0.attn.to_out.0.weight",
      "transformer_blocks.0.attn.to_add_out.weight",
      "transformer_blocks.0.ff.net.0.proj.weight",
      "transformer_blocks.0.ff_context.net.2.weight",
      "single_transformer_blocks.0.attn.to_v.weight",
      "single_transformer_blocks.0.attn.norm_k.weight",
      "single_transformer_blocks.0.norm.linear.weight",
      "single_transformer_blocks.0.proj_mlp.weight",
      "single_transformer_blocks.0.proj_out.weight",
      "norm_out.linear.weight",
      "proj_out.weight",
  };
  for (const char* name : expected) {
    INFO(name);
    CHECK(names.count(name) == 1);
  }
  // Nothing outside the diffusers layout (e.g. no weights on the affine-free norms).
  CHECK(names.count("transformer_blocks.0.norm2.weight") == 0);
  CHECK(names.count("single_transformer_blocks.0.attn.to_out.0.weight") == 0);
  CHECK(names.size() == 92);  // counted by hand from diffusers' module layout
}

namespace {

// Builds the small model with `seed` both ways, placed while built and built then moved, and checks
// every parameter is the same value in the same dtype on the same device.
void check_placed_equals_moved(const torch::Device& device, torch::Dtype dtype) {
  torch::manual_seed(11);
  tt::HunyuanVideoTransformer moved(small_config());
  moved->to(device, dtype);
  torch::manual_seed(11);
  tt::HunyuanVideoTransformer placed(small_config(), device, dtype);
  const auto a = moved->named_parameters(), b = placed->named_parameters();
  REQUIRE(a.size() == b.size());
  for (const auto& item : a) {
    INFO(item.key() << " on " << device << " " << dtype);
    const torch::Tensor& other = b[item.key()];
    CHECK(other.device() == device);
    CHECK(other.scalar_type() == dtype);
    CHECK(torch::equal(item.value(), other));
  }
}

}  // namespace

TEST_CASE("a model built onto a device and dtype equals one built on the host and moved", "[model]") {
  check_placed_equals_moved(torch::kCPU, torch::kBFloat16);
  check_placed_equals_moved(torch::kCPU, torch::kFloat32);
}

TEST_CASE("a model built onto the GPU in bf16 equals one built on the host and moved", "[model][gpu]") {
  TT_REQUIRE_GPU();
  check_placed_equals_moved(torch::Device(torch::kCUDA, 0), torch::kBFloat16);  // tensors report cuda:0, not cuda
}

TEST_CASE("shapes, zero-initialised output and finite values", "[model]") {
  auto c = small_config();
  tt::HunyuanVideoTransformer model(c);
  auto in = make_inputs(c, 2, 6);
  auto out = model->forward(in);
  CHECK(out.sizes() == in.hidden_states.sizes());
  // The official initialisation zeroes the final projection: the untrained model predicts 0.
  CHECK(out.abs().max().item<float>() == 0.0f);
  randomise(model);
  out = model->forward(in);
  CHECK(torch::isfinite(out).all().item<bool>());
  CHECK(out.abs().max().item<float>() > 0.0f);
}

TEST_CASE("padded text tokens do not change the output", "[model]") {
  auto c = small_config();
  tt::HunyuanVideoTransformer model(c);
  randomise(model);
  auto in = make_inputs(c, 2, 6);
  auto reference = model->forward(in);
  // Sample 0 has tokens 3..5 masked: any values there must be invisible.
  in.encoder_hidden_states[0].slice(0, 3).copy_(torch::randn({3, c.text_embed_dim}) * 50);
  auto changed = model->forward(in);
  CHECK(torch::allclose(reference, changed, 1e-5, 1e-5));
  // Sample 1 is fully valid: changing its last token must matter.
  in.encoder_hidden_states[1][5].fill_(3.0);
  auto changed_valid = model->forward(in);
  CHECK_FALSE(torch::allclose(reference[1], changed_valid[1], 1e-4, 1e-4));
}

TEST_CASE("an all-zero text mask gives a finite output (the refiner's masked mean is 0, not 0/0)", "[model]") {
  auto c = small_config();
  tt::HunyuanVideoTransformer model(c);
  randomise(model);
  auto in = make_inputs(c, 2, 6);
  in.encoder_attention_mask[0].fill_(false);  // sample 0: no valid text token at all
  auto out = model->forward(in);
  CHECK(torch::isfinite(out).all().item<bool>());
  // Its text is invisible: other values there change nothing.
  in.encoder_hidden_states[0].copy_(torch::randn({6, c.text_embed_dim}) * 50);
  CHECK(torch::allclose(out, model->forward(in), 1e-5, 1e-5));
}

TEST_CASE("batch elements are independent", "[model]") {
  auto c = small_config();
  tt::HunyuanVideoTransformer model(c);
  randomise(model);
  auto in = make_inputs(c, 2, 6);
  auto both = model->forward(in);
  tt::TransformerInputs first;
  first.hidden_states = in.hidden_states.slice(0, 0, 1);
  first.timestep = in.timestep.slice(0, 0, 1);
  first.encoder_hidden_states = in.encoder_hidden_states.slice(0, 0, 1);
  first.encoder_attention_mask = in.encoder_attention_mask.slice(0, 0, 1);
  first.pooled_projections = in.pooled_projections.slice(0, 0, 1);
  first.guidance = in.guidance.slice(0, 0, 1);
  CHECK(torch::allclose(both.slice(0, 0, 1), model->forward(first), 1e-5, 1e-5));
}

TEST_CASE("timestep and guidance condition the output", "[model]") {
  auto c = small_config();
  tt::HunyuanVideoTransformer model(c);
  randomise(model);
  auto in = make_inputs(c, 2, 6);
  auto reference = model->forward(in);
  auto other_time = in;
  other_time.timestep = in.timestep + 100;
  CHECK_FALSE(torch::allclose(reference, model->forward(other_time), 1e-4, 1e-4));
  auto other_guidance = in;
  other_guidance.guidance = in.guidance * 6;
  CHECK_FALSE(torch::allclose(reference, model->forward(other_guidance), 1e-4, 1e-4));
}

TEST_CASE("timestep sinusoid puts cos first", "[model]") {
  auto features = tt::timestep_sinusoid(torch::tensor({0.0f, 10.0f}), 256);
  REQUIRE(features.sizes() == torch::IntArrayRef({2, 256}));
  CHECK(torch::allclose(features[0].slice(0, 0, 128), torch::ones({128})));
  CHECK(torch::allclose(features[0].slice(0, 128), torch::zeros({128})));
  // Highest frequency is 1: features[1][0] = cos(10), features[1][128] = sin(10).
  CHECK(std::abs(features[1][0].item<float>() - std::cos(10.0f)) < 1e-5);
  CHECK(std::abs(features[1][128].item<float>() - std::sin(10.0f)) < 1e-5);
}

TEST_CASE("RoPE: interleaved pairs, norm preserved, relative positions", "[model]") {
  std::vector<int64_t> axes = {4, 6, 6};
  auto table = tt::build_rope_table(3, 4, 5, axes, 256.0, torch::kCPU);
  REQUIRE(table.cos.sizes() == torch::IntArrayRef({60, 16}));
  // Position (0, 0, 0) is the identity.
  CHECK(torch::allclose(table.cos[0], torch::ones({16})));
  CHECK(torch::allclose(table.sin[0], torch::zeros({16})));
  // Pairs share an angle.
  CHECK(torch::equal(table.cos.slice(1, 0, 16, 2), table.cos.slice(1, 1, 16, 2)));
  // Token (t=1, h=0, w=0) is row 20: the temporal block's first frequency is theta^0 = 1.
  CHECK(std::abs(table.cos[20][0].item<float>() - std::cos(1.0f)) < 1e-6);
  CHECK(std::abs(table.cos[20][4].item<float>() - 1.0f) < 1e-6);  // height axis at h=0

  torch::manual_seed(1);
  auto q = torch::randn({1, 1, 60, 16});
  auto rotated = tt::apply_rope(q, table);
  CHECK(torch::allclose(rotated.norm(2, -1), q.norm(2, -1), 1e-5, 1e-5));
  // <R(m) q, R(n) k> depends only on m - n: shift both along the width axis by one token.
  auto k = torch::randn({1, 1, 60, 16});
  auto same_q = q.clone(), same_k = k.clone();
  same_q[0][0][1] = q[0][0][0];
  same_k[0][0][3] = k[0][0][2];
  auto rq = tt::apply_rope(same_q, table), rk = tt::apply_rope(same_k, table);
  auto dot_shifted = (rq[0][0][1] * rk[0][0][3]).sum().item<float>();
  auto rq0 = tt::apply_rope(q, table), rk0 = tt::apply_rope(k, table);
  auto dot_original = (rq0[0][0][0] * rk0[0][0][2]).sum().item<float>();
  CHECK(std::abs(dot_shifted - dot_original) < 1e-4);
}

TEST_CASE("weights round trip and strict mismatch report", "[model]") {
  auto c = small_config();
  tt::HunyuanVideoTransformer model(c);
  randomise(model);
  auto weights = tt::snapshot_weights(model->diffusers_parameters());
  tt::HunyuanVideoTransformer other(c);
  tt::load_weights_into(other->diffusers_parameters(), weights, "memory");
  auto in = make_inputs(c, 2, 6);
  CHECK(torch::equal(model->forward(in), other->forward(in)));

  auto broken = weights;
  broken.erase("proj_out.bias");
  broken["extra.weight"] = torch::zeros({1});
  broken["norm_out.linear.weight"] = torch::zeros({3, 3});
  try {
    tt::load_weights_into(other->diffusers_parameters(), broken, "broken.safetensors");
    FAIL("expected a checkpoint error");
  } catch (const tt::Error& error) {
    CHECK(error.code() == tt::ErrorCode::kCheckpoint);
    std::string text = error.what();
    CHECK_THAT(text, ContainsSubstring("broken.safetensors"));
    CHECK_THAT(text, ContainsSubstring("missing: proj_out.bias"));
    CHECK_THAT(text, ContainsSubstring("unexpected: extra.weight"));
    CHECK_THAT(text, ContainsSubstring("mis-shaped: norm_out.linear.weight"));
  }
}

TEST_CASE("presets: 1b is about one billion parameters, configs validate", "[model]") {
  auto one_b = tt::hunyuan_preset("1b");
  CHECK(one_b.hidden_size() == 1536);
  auto bad = tt::hunyuan_preset("tiny");
  bad.rope_axes_dim = {8, 8, 8};
  CHECK_THROWS_AS(tt::validate_hunyuan_config(bad, "tele_tron.model."), tt::Error);
  CHECK_THROWS_AS(tt::hunyuan_preset("7b"), tt::Error);
}

TEST_CASE("trimmed text padding gives the same output as the masked full text", "[model]") {
  auto c = small_config();
  tt::HunyuanVideoTransformer model(c);
  randomise(model);
  auto in = make_inputs(c, 2, 6);
  in.encoder_attention_mask[1].slice(0, 5).fill_(false);  // sample 1: 5 valid, sample 0: 3 valid
  auto reference = model->forward(in);

  auto trimmed = tt::trim_text_padding(in.encoder_hidden_states, in.encoder_attention_mask);
  CHECK(trimmed.states.size(1) == 5);
  CHECK_FALSE(trimmed.all_valid);
  auto batch_in = in;
  batch_in.encoder_hidden_states = trimmed.states;
  batch_in.encoder_attention_mask = trimmed.mask;
  CHECK(torch::allclose(model->forward(batch_in), reference, 1e-5, 1e-5));

  // One sample alone: no padding left, attention runs without a mask.
  auto single = tt::trim_text_padding(in.encoder_hidden_states.slice(0, 0, 1), in.encoder_attention_mask.slice(0, 0, 1));
  CHECK(single.states.size(1) == 3);
  CHECK(single.all_valid);
  tt::TransformerInputs one;
  one.hidden_states = in.hidden_states.slice(0, 0, 1);
  one.timestep = in.timestep.slice(0, 0, 1);
  one.encoder_hidden_states = single.states;
  one.encoder_attention_mask = single.mask;
  one.pooled_projections = in.pooled_projections.slice(0, 0, 1);
  one.guidance = in.guidance.slice(0, 0, 1);
  one.text_all_valid = true;
  CHECK(torch::allclose(model->forward(one), reference.slice(0, 0, 1), 1e-5, 1e-5));
}

TEST_CASE("trimmed text rounded up to a multiple keeps masked columns and gives the same output", "[model]") {
  auto c = small_config();
  tt::HunyuanVideoTransformer model(c);
  randomise(model);
  auto in = make_inputs(c, 2, 12);
  in.encoder_attention_mask[0].slice(0, 3).fill_(false);  // sample 0: 3 valid
  in.encoder_attention_mask[1].slice(0, 5).fill_(false);  // sample 1: 5 valid
  auto reference = model->forward(in);
  const auto& states = in.encoder_hidden_states;
  const auto& mask = in.encoder_attention_mask;
  // The batch's longest caption (5) rounded up to the multiple, never past the 12 columns there are.
  const std::vector<std::pair<int64_t, int64_t>> expected = {{1, 5}, {4, 8}, {5, 5}, {8, 8}, {64, 12}};
  for (const auto& [multiple, kept] : expected) {
    INFO("multiple " << multiple);
    auto trimmed = tt::trim_text_padding(states, mask, multiple);
    CHECK(trimmed.states.size(1) == kept);
    CHECK(trimmed.mask.size(1) == kept);
    CHECK_FALSE(trimmed.all_valid);
    CHECK(trimmed.mask.sum().item<int64_t>() == 8);  // every valid token kept
    auto batch_in = in;
    batch_in.encoder_hidden_states = trimmed.states;
    batch_in.encoder_attention_mask = trimmed.mask;
    CHECK(torch::allclose(model->forward(batch_in), reference, 1e-5, 1e-5));
  }
  // A batch with no padding left at its exact length (one sample; captions of one length) stays
  // exact and unmasked whatever the multiple: rounding would only add a mask it does not need.
  for (const int64_t multiple : {1, 3, 4, 64}) {
    INFO("multiple " << multiple);
    auto alone = tt::trim_text_padding(states.slice(0, 0, 1), mask.slice(0, 0, 1), multiple);
    CHECK(alone.states.size(1) == 3);
    CHECK(alone.all_valid);
    auto same_lengths = mask.clone();
    same_lengths[1].slice(0, 3).fill_(false);  // both samples 3 valid
    auto equal = tt::trim_text_padding(states, same_lengths, multiple);
    CHECK(equal.states.size(1) == 3);
    CHECK(equal.all_valid);
  }
  CHECK_THROWS_AS(tt::trim_text_padding(states, mask, 0), tt::Error);
}

TEST_CASE("activation checkpointing changes no output and no gradient", "[model][checkpoint]") {
  auto c = small_config();
  tt::HunyuanVideoTransformer model(c);
  randomise(model);
  model->train();
  auto in = make_inputs(c, 2, 6);
  auto run = [&](int64_t every_n) {
    model->set_activation_checkpointing(every_n);
    model->zero_grad();
    auto out = model->forward(in);
    out.pow(2).mean().backward();
    std::map<std::string, torch::Tensor> grads;
    for (const auto& [name, grad] : model->diffusers_gradients()) grads[name] = grad.clone();
    return std::make_pair(out.detach(), grads);
  };
  auto plain = run(0);
  for (int64_t every_n : {1, 2}) {
    auto saved = run(every_n);
    CHECK(torch::allclose(saved.first, plain.first, 1e-6, 1e-6));
    for (const auto& [name, grad] : plain.second) {
      INFO(name << " with every_n " << every_n);
      CHECK(torch::allclose(saved.second.at(name), grad, 1e-5, 1e-6));
    }
  }
}

namespace {

// The autograd nodes of checkpointed blocks in the graph that produced `out`.
int64_t checkpoint_nodes(const torch::Tensor& out) {
  std::vector<torch::autograd::Node*> stack = {out.grad_fn().get()};
  std::set<torch::autograd::Node*> seen;
  int64_t count = 0;
  while (!stack.empty()) {
    torch::autograd::Node* node = stack.back();
    stack.pop_back();
    if (node == nullptr || !seen.insert(node).second) continue;
    if (node->name().find("CheckpointFunction") != std::string::npos) count += 1;
    for (const auto& edge : node->next_edges()) stack.push_back(edge.function.get());
  }
  return count;
}

}  // namespace

TEST_CASE(
    "checkpointing the first blocks of each kind (auto's plans): those blocks recomputed, the same gradients",
    "[model][checkpoint]") {
  auto c = small_config();
  c.num_layers = 2;
  c.num_single_layers = 3;
  tt::HunyuanVideoTransformer model(c);
  randomise(model);
  model->train();
  auto in = make_inputs(c, 2, 6);
  auto run = [&](int64_t doubles, int64_t singles) {
    model->set_checkpointed_blocks(doubles, singles);
    model->zero_grad();
    auto out = model->forward(in);
    const int64_t nodes = checkpoint_nodes(out);
    out.pow(2).mean().backward();
    std::map<std::string, torch::Tensor> grads;
    for (const auto& [name, grad] : model->diffusers_gradients()) grads[name] = grad.clone();
    return std::make_tuple(out.detach(), grads, nodes);
  };
  const auto [plain_out, plain_grads, plain_nodes] = run(0, 0);
  CHECK(plain_nodes == 0);
  CHECK(model->checkpointed_blocks() == std::make_pair<int64_t, int64_t>(0, 0));
  for (const auto& [doubles, singles] :
       std::vector<std::pair<int64_t, int64_t>>{{1, 0}, {2, 1}, {0, 3}, {5, 9}}) {
    INFO(doubles << " doubles, " << singles << " singles");
    const auto [out, grads, nodes] = run(doubles, singles);
    const int64_t d = std::min<int64_t>(doubles, 2), s = std::min<int64_t>(singles, 3);  // counts are capped
    CHECK(model->checkpointed_blocks() == std::make_pair(d, s));
    CHECK(nodes == d + s);
    CHECK(torch::allclose(out, plain_out, 1e-6, 1e-6));
    for (const auto& [name, grad] : plain_grads) {
      INFO(name);
      CHECK(torch::allclose(grads.at(name), grad, 1e-5, 1e-6));
    }
  }
  // every_n places its blocks among both kinds counted together: 0, 2, 4 of 5 blocks.
  model->set_activation_checkpointing(2);
  CHECK(model->checkpointed_blocks() == std::make_pair<int64_t, int64_t>(1, 2));
}

TEST_CASE("diffusers views write through to the fused QKV parameters", "[model]") {
  auto c = small_config();
  tt::HunyuanVideoTransformer model(c);
  auto views = model->diffusers_parameters();
  {
    torch::NoGradGuard no_grad;
    views.at("transformer_blocks.0.attn.to_k.weight").fill_(2.0);
    views.at("single_transformer_blocks.0.proj_mlp.bias").fill_(-1.0);
  }
  auto again = model->diffusers_parameters();
  CHECK(again.at("transformer_blocks.0.attn.to_k.weight").eq(2.0).all().item<bool>());
  CHECK_FALSE(again.at("transformer_blocks.0.attn.to_q.weight").eq(2.0).all().item<bool>());
  CHECK(again.at("single_transformer_blocks.0.proj_mlp.bias").eq(-1.0).all().item<bool>());
  CHECK(again.at("single_transformer_blocks.0.attn.to_v.weight").size(0) == c.hidden_size());
  CHECK(again.at("single_transformer_blocks.0.proj_mlp.weight").size(0) == c.mlp_hidden());
}

TEST_CASE("parameter count: built models match the formula; 13b is the released size", "[model]") {
  for (auto c : {small_config(), tt::hunyuan_preset("tiny")}) {
    tt::HunyuanVideoTransformer model(c);
    CHECK(model->parameter_count() == tt::transformer_parameter_count(c));
  }
  auto i2v = small_config();
  i2v.in_channels = 33;
  i2v.image_condition_type = "latent_concat";
  CHECK(tt::HunyuanVideoTransformer(i2v)->parameter_count() == tt::transformer_parameter_count(i2v));
  // The released HunyuanVideo transformer has 12.82 B parameters; the 1b preset 1.10 B.
  const double thirteen = static_cast<double>(tt::transformer_parameter_count(tt::hunyuan_preset("13b")));
  CHECK(thirteen > 12.7e9);
  CHECK(thirteen < 12.9e9);
  CHECK(tt::transformer_parameter_count(tt::hunyuan_preset("1b")) == 1'103'361'600);
}
