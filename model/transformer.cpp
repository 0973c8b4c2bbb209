// HunyuanVideo Transformer forward pass (see transformer.h and docs/ARCHITECTURE.md's model facts).
#include "model/transformer.h"

#include "core/errors.h"
#include "model/activation_checkpoint.h"
#include "model/fused_ops.h"
#include "model/per_sample_attention.h"
#include "model/segment_attention.h"

namespace tt {
namespace {

// A holder module so that parameters land under a diffusers prefix such as `x_embedder.proj`.
struct HolderImpl : torch::nn::Module {};
TORCH_MODULE(Holder);

AttentionOptions attention_options(int64_t heads, int64_t head_dim, bool qk_norm, bool input, bool added,
                                   bool output, bool fused_kernels = false) {
  AttentionOptions options;
  options.heads = heads;
  options.head_dim = head_dim;
  options.qk_norm = qk_norm;
  options.input_projection = input;
  options.added_stream = added;
  options.output_projection = output;
  options.fused_kernels = fused_kernels;
  return options;
}

// Joint attention: per sample without a mask when the keys come with host lengths and no graph is
// being captured; segment attention (no mask) when they come as segments and the kernels take q;
// otherwise SDPA with the key mask (none when every token is valid).
torch::Tensor attend_joint(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                           const JointKeys& keys) {
  if (!keys.lengths.empty() && per_sample_attention_allowed(q))
    return per_sample_attention(q, k, v, keys.lengths);
  if (keys.segments.defined() && segment_attention_takes(q)) return segment_attention(q, k, v, keys.segments);
  return attend(q, k, v, keys.mask);
}

// The token refiner's MLP is 4x wide whatever the blocks' mlp_ratio (diffusers builds
// HunyuanVideoTokenRefiner without passing mlp_ratio, the official SingleTokenRefiner likewise).
constexpr double kRefinerMlpRatio = 4.0;

}  // namespace

// ---------------------------------------------------------------- token refiner

TokenRefinerBlockImpl::TokenRefinerBlockImpl(int64_t heads, int64_t head_dim, double mlp_ratio) {
  const int64_t hidden = heads * head_dim;
  auto norm_options = torch::nn::LayerNormOptions({hidden}).eps(1e-6).elementwise_affine(true);
  norm1_ = register_module("norm1", torch::nn::LayerNorm(norm_options));
  attn_ = register_module("attn", Attention(attention_options(heads, head_dim, false, true, false, true)));
  norm2_ = register_module("norm2", torch::nn::LayerNorm(norm_options));
  ff_ = register_module(
      "ff", FeedForward(hidden, static_cast<int64_t>(hidden * mlp_ratio), FeedForwardActivation::kSilu));
  norm_out_ = register_module("norm_out", Modulation(hidden, 2));
}

torch::Tensor TokenRefinerBlockImpl::forward(const torch::Tensor& x, const torch::Tensor& temb,
                                             const torch::Tensor& pair_mask) {
  auto qkv = attn_->project(norm1_(x));
  auto attn = attn_->output(attend(qkv[0], qkv[1], qkv[2], pair_mask));
  auto gates = norm_out_(temb);  // gate_msa, gate_mlp: (B, hidden)
  auto h = x + attn * gates[0].unsqueeze(1);
  return h + ff_(norm2_(h)) * gates[1].unsqueeze(1);
}

TokenRefinerImpl::TokenRefinerImpl(int64_t text_dim, int64_t heads, int64_t head_dim, int64_t layers,
                                   double mlp_ratio) {
  const int64_t hidden = heads * head_dim;
  auto time_text_embed = register_module("time_text_embed", Holder());
  timestep_embedder_ = time_text_embed->register_module("timestep_embedder", MlpEmbedder(256, hidden));
  text_embedder_ = time_text_embed->register_module("text_embedder", MlpEmbedder(text_dim, hidden));
  proj_in_ = register_module("proj_in", torch::nn::Linear(text_dim, hidden));
  auto token_refiner = register_module("token_refiner", Holder());
  auto list = token_refiner->register_module("refiner_blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < layers; ++i) {
    blocks_.push_back(TokenRefinerBlock(heads, head_dim, mlp_ratio));
    list->push_back(blocks_.back());
  }
}

torch::Tensor TokenRefinerImpl::forward(const torch::Tensor& text, const torch::Tensor& timestep,
                                        const torch::Tensor& mask, bool all_valid) {
  // Masked mean over valid tokens, in fp32.
  auto mask_f = mask.to(torch::kFloat32).unsqueeze(-1);  // (B, L, 1)
  // An all-zero mask (rejected at load, but the model does not rely on it) averages to 0, not 0/0.
  auto pooled = (text.to(torch::kFloat32) * mask_f).sum(1) / mask_f.sum(1).clamp_min(1.0);  // (B, text_dim)
  pooled = pooled.to(text.scalar_type());
  auto temb =
      timestep_embedder_(timestep_sinusoid(timestep).to(pooled.scalar_type())) + text_embedder_(pooled);
  auto h = proj_in_(text);
  // Pairwise mask: token i may see token j when both are valid; the first key column is forced
  // on so that rows of padding tokens are never fully masked (no NaN from softmax). Without
  // padding there is nothing to mask.
  torch::Tensor pair_mask;
  if (!all_valid) {
    const int64_t length = mask.size(1);
    auto row = mask.view({mask.size(0), 1, 1, length});
    pair_mask = row & row.transpose(2, 3);  // (B, 1, L, L)
    pair_mask.select(3, 0).fill_(true);
  }
  for (auto& block : blocks_) h = block(h, temb, pair_mask);
  return h;
}

// ---------------------------------------------------------------- double / single blocks

DoubleBlockImpl::DoubleBlockImpl(int64_t heads, int64_t head_dim, int64_t mlp_hidden, bool fused_kernels)
    : fused_kernels_(fused_kernels) {
  const int64_t hidden = heads * head_dim;
  norm1_ = register_module("norm1", Modulation(hidden, 6));
  norm1_context_ = register_module("norm1_context", Modulation(hidden, 6));
  attn_ = register_module(
      "attn", Attention(attention_options(heads, head_dim, true, true, true, true, fused_kernels)));
  const auto gelu = FeedForwardActivation::kGeluTanh;
  ff_ = register_module("ff", FeedForward(hidden, mlp_hidden, gelu, fused_kernels));
  ff_context_ = register_module("ff_context", FeedForward(hidden, mlp_hidden, gelu, fused_kernels));
}

std::pair<torch::Tensor, torch::Tensor> DoubleBlockImpl::forward(const torch::Tensor& video,
                                                                 const torch::Tensor& text,
                                                                 const torch::Tensor& vec,
                                                                 const JointKeys& keys,
                                                                 const RopeTable& rope) {
  // Chunks: shift1, scale1, gate1, shift2, scale2, gate2.
  auto m = norm1_(vec);
  auto c = norm1_context_(vec);
  const int64_t n = video.size(1);
  // Joint q, k, v of the video tokens (RoPE on every one), then the text tokens.
  const auto qkv = attn_->project_joint_modulated(video, m[0], m[1], text, c[0], c[1], &rope, n);
  auto joint = attend_joint(qkv[0], qkv[1], qkv[2], keys);  // (B, N+L, hidden)
  const auto [joint_video, joint_text] = split_at(joint, 1, n);
  auto video_attn = attn_->output(joint_video);
  auto text_attn = attn_->output_added(joint_text);

  // Gated residuals, one kernel each: x + f(x) * gate.
  const bool fused = fused_kernels_;
  auto video_out = gated_residual(video, video_attn, m[2], fused);
  auto text_out = gated_residual(text, text_attn, c[2], fused);
  // Recomputed for backward: an MLP output whose gate needs no gradient is never read (only its
  // input's gradient is wanted), so its down-projection's GEMM is skipped.
  const bool recompute = skip_unread_ && recomputing_for_backward();
  video_out = gated_residual(
      video_out, ff_->forward_modulated(video_out, m[3], m[4], recompute && !m[5].requires_grad()), m[5],
      fused);
  text_out = gated_residual(
      text_out, ff_context_->forward_modulated(text_out, c[3], c[4], recompute && !c[5].requires_grad()),
      c[5], fused);
  return {video_out, text_out};
}

SingleBlockImpl::SingleBlockImpl(int64_t heads, int64_t head_dim, int64_t mlp_hidden, bool fused_kernels)
    : fused_kernels_(fused_kernels) {
  const int64_t hidden = heads * head_dim;
  attn_ = register_module(
      "attn", Attention(attention_options(heads, head_dim, true, false, false, false, fused_kernels)));
  norm_ = register_module("norm", Modulation(hidden, 3));
  // [q; k; v; mlp_in] in one GEMM (the official linear1); diffusers' to_q/to_k/to_v/proj_mlp are views.
  linear1_ = register_module("linear1", torch::nn::Linear(hidden, 3 * hidden + mlp_hidden));
  proj_out_ = register_module("proj_out", torch::nn::Linear(hidden + mlp_hidden, hidden));
  hidden_ = hidden;
}

torch::Tensor SingleBlockImpl::forward(const torch::Tensor& x, int64_t video_tokens, const torch::Tensor& vec,
                                       const JointKeys& keys, const RopeTable& rope) {
  auto m = norm_(vec);  // shift, scale, gate
  // (B, N+L, 3*hidden + mlp)
  auto fused = modulated_linear(linear1_, lora_linear1, x, m[0], m[1], fused_kernels_);
  // q, k, v and the MLP's input (v and the MLP's input views of linear1's output); QK-norm on every
  // token, RoPE on the video tokens only.
  const auto parts = attn_->split_single(fused, &rope, video_tokens);
  const torch::Tensor& mlp_in = parts[3];
  auto attn = attend_joint(parts[0], parts[1], parts[2], keys);
  // With fused kernels, GELU, concatenation and linear2 keep only attn and the MLP's input (a view).
  // Recomputed for backward with a gate that needs no gradient, linear2's result is never read.
  const bool unread = skip_unread_ && recomputing_for_backward() && !m[2].requires_grad();
  auto out = gelu_then_linear(proj_out_, lora_proj_out, attn, mlp_in, fused_kernels_, unread);
  return gated_residual(x, out, m[2], fused_kernels_);
}

// ---------------------------------------------------------------- the model

HunyuanVideoTransformerImpl::HunyuanVideoTransformerImpl(const HunyuanVideoConfig& config)
    : HunyuanVideoTransformerImpl(config, torch::kCPU, torch::kFloat32) {}

HunyuanVideoTransformerImpl::HunyuanVideoTransformerImpl(const HunyuanVideoConfig& config,
                                                         const torch::Device& device, torch::Dtype dtype)
    : config_(config) {
  const bool move = device != torch::Device(torch::kCPU) || dtype != torch::kFloat32;
  validate_hunyuan_config(config, "tele_tron.model.");
  const int64_t hidden = config.hidden_size();
  const int64_t heads = config.num_attention_heads;
  const int64_t head_dim = config.attention_head_dim;

  auto x_embedder = register_module("x_embedder", Holder());
  std::vector<int64_t> patch = {config.patch_size_t, config.patch_size, config.patch_size};
  patch_embed_ = x_embedder->register_module(
      "proj", torch::nn::Conv3d(torch::nn::Conv3dOptions(config.in_channels, hidden, patch).stride(patch)));

  context_embedder_ = register_module(
      "context_embedder",
      TokenRefiner(config.text_embed_dim, heads, head_dim, config.num_refiner_layers, kRefinerMlpRatio));

  auto time_text_embed = register_module("time_text_embed", Holder());
  timestep_embedder_ = time_text_embed->register_module("timestep_embedder", MlpEmbedder(256, hidden));
  text_embedder_ =
      time_text_embed->register_module("text_embedder", MlpEmbedder(config.pooled_projection_dim, hidden));
  if (config.guidance_embeds) {
    guidance_embedder_ = time_text_embed->register_module("guidance_embedder", MlpEmbedder(256, hidden));
  }

  auto doubles = register_module("transformer_blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < config.num_layers; ++i) {
    double_blocks_.push_back(DoubleBlock(heads, head_dim, config.mlp_hidden(), config.fused_kernels));
    if (move) double_blocks_.back()->to(device, dtype);
    doubles->push_back(double_blocks_.back());
  }
  auto singles = register_module("single_transformer_blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < config.num_single_layers; ++i) {
    single_blocks_.push_back(SingleBlock(heads, head_dim, config.mlp_hidden(), config.fused_kernels));
    if (move) single_blocks_.back()->to(device, dtype);
    singles->push_back(single_blocks_.back());
  }

  norm_out_ = register_module("norm_out", Modulation(hidden, 2));
  const int64_t patch_volume = config.patch_size_t * config.patch_size * config.patch_size;
  proj_out_ = register_module("proj_out", torch::nn::Linear(hidden, patch_volume * config.out_channels));
  {
    // The official final layer starts at zero, so the untrained model predicts 0.
    torch::NoGradGuard no_grad;
    proj_out_->weight.zero_();
    proj_out_->bias.zero_();
  }
  if (move) to(device, dtype);  // the embedders and the final layer (the blocks are there already)
  rope_cache_ = std::make_shared<RopeCache>(config.rope_axes_dim, config.rope_theta);
}

void HunyuanVideoTransformerImpl::set_activation_checkpointing(int64_t every_n) {
  checkpointed_ =
      every_nth_block(static_cast<int64_t>(double_blocks_.size() + single_blocks_.size()), every_n);
}

void HunyuanVideoTransformerImpl::set_checkpointed_blocks(int64_t doubles, int64_t singles) {
  const size_t d = double_blocks_.size();
  checkpointed_.assign(d + single_blocks_.size(), false);
  for (size_t i = 0; i < checkpointed_.size(); ++i)
    checkpointed_[i] = i < d ? static_cast<int64_t>(i) < doubles : static_cast<int64_t>(i - d) < singles;
}

std::pair<int64_t, int64_t> HunyuanVideoTransformerImpl::checkpointed_blocks() const {
  return checkpointed_by_kind(checkpointed_, static_cast<int64_t>(double_blocks_.size()));
}

void HunyuanVideoTransformerImpl::set_recompute_skips_unread(bool on) {
  for (auto& block : double_blocks_) block->set_recompute_skips_unread(on);
  for (auto& block : single_blocks_) block->set_recompute_skips_unread(on);
}

int64_t HunyuanVideoTransformerImpl::parameter_count() const {
  int64_t count = 0;
  for (const auto& p : parameters()) count += p.numel();
  return count;
}

std::map<std::string, torch::Tensor> HunyuanVideoTransformerImpl::diffusers_parameters() {
  return diffusers_view(/*gradients=*/false);
}

std::map<std::string, torch::Tensor> HunyuanVideoTransformerImpl::diffusers_gradients() {
  return diffusers_view(/*gradients=*/true);
}

std::map<std::string, torch::Tensor> HunyuanVideoTransformerImpl::diffusers_view(bool gradients) {
  const int64_t hidden = config_.hidden_size();
  // Fused parameter suffix -> the diffusers names of its row blocks and their sizes.
  struct Fused {
    const char* suffix;
    std::vector<std::string> parts;
    std::vector<int64_t> sizes;
  };
  const std::vector<Fused> fused = {
      {"attn.to_qkv", {"attn.to_q", "attn.to_k", "attn.to_v"}, {hidden, hidden, hidden}},
      {"attn.add_qkv_proj",
       {"attn.add_q_proj", "attn.add_k_proj", "attn.add_v_proj"},
       {hidden, hidden, hidden}},
      {"linear1",
       {"attn.to_q", "attn.to_k", "attn.to_v", "proj_mlp"},
       {hidden, hidden, hidden, config_.mlp_hidden()}},
  };
  std::map<std::string, torch::Tensor> out;
  for (const auto& item : named_parameters(/*recurse=*/true)) {
    const std::string& name = item.key();
    const torch::Tensor tensor = gradients ? item.value().grad() : item.value();
    bool split = false;
    for (const auto& f : fused) {
      for (const char* kind : {".weight", ".bias"}) {
        const std::string tail = std::string(f.suffix) + kind;
        if (name.size() < tail.size() || name.compare(name.size() - tail.size(), tail.size(), tail) != 0)
          continue;
        const std::string prefix = name.substr(0, name.size() - tail.size());
        int64_t begin = 0;
        for (size_t i = 0; i < f.parts.size(); ++i) {
          out[prefix + f.parts[i] + kind] =
              tensor.defined() ? tensor.slice(0, begin, begin + f.sizes[i]) : torch::Tensor();
          begin += f.sizes[i];
        }
        split = true;
      }
    }
    if (!split) out[name] = tensor;
  }
  return out;
}

namespace {

std::vector<torch::Tensor> with_adapters(std::vector<torch::Tensor> tensors,
                                         std::initializer_list<const LoraAdapter*> adapters) {
  for (const LoraAdapter* adapter : adapters)
    if (*adapter)
      for (const auto& p : (*adapter)->parameters()) tensors.push_back(p);
  return tensors;
}

}  // namespace

std::vector<torch::Tensor> DoubleBlockImpl::graph_tensors() {
  return with_adapters(parameters(),
                       {&attn_->lora_qkv, &attn_->lora_added_qkv, &attn_->lora_out, &attn_->lora_added_out,
                        &ff_->lora_proj, &ff_->lora_out, &ff_context_->lora_proj, &ff_context_->lora_out,
                        &norm1_->lora, &norm1_context_->lora});
}

std::vector<torch::Tensor> SingleBlockImpl::graph_tensors() {
  return with_adapters(parameters(), {&lora_linear1, &lora_proj_out, &norm_->lora});
}

std::vector<HunyuanVideoTransformerImpl::LoraHost> HunyuanVideoTransformerImpl::lora_hosts() {
  const int64_t hidden = config_.hidden_size(), mlp = config_.mlp_hidden();
  std::vector<LoraHost> hosts;
  auto host = [&](const std::string& prefix, int64_t in, std::vector<std::pair<const char*, int64_t>> parts,
                  LoraAdapter* slot) {
    LoraHost h;
    h.in_features = in;
    for (const auto& [name, rows] : parts) h.parts.push_back({prefix + name, rows});
    h.slot = slot;
    hosts.push_back(std::move(h));
  };
  for (size_t i = 0; i < double_blocks_.size(); ++i) {
    DoubleBlockImpl& b = *double_blocks_[i];
    const std::string p = "transformer_blocks." + std::to_string(i) + ".";
    host(p, hidden, {{"attn.to_q", hidden}, {"attn.to_k", hidden}, {"attn.to_v", hidden}},
         &b.attn_->lora_qkv);
    host(p, hidden, {{"attn.add_q_proj", hidden}, {"attn.add_k_proj", hidden}, {"attn.add_v_proj", hidden}},
         &b.attn_->lora_added_qkv);
    host(p, hidden, {{"attn.to_out.0", hidden}}, &b.attn_->lora_out);
    host(p, hidden, {{"attn.to_add_out", hidden}}, &b.attn_->lora_added_out);
    host(p, hidden, {{"ff.net.0.proj", mlp}}, &b.ff_->lora_proj);
    host(p, mlp, {{"ff.net.2", hidden}}, &b.ff_->lora_out);
    host(p, hidden, {{"ff_context.net.0.proj", mlp}}, &b.ff_context_->lora_proj);
    host(p, mlp, {{"ff_context.net.2", hidden}}, &b.ff_context_->lora_out);
    host(p, hidden, {{"norm1.linear", 6 * hidden}}, &b.norm1_->lora);
    host(p, hidden, {{"norm1_context.linear", 6 * hidden}}, &b.norm1_context_->lora);
  }
  for (size_t i = 0; i < single_blocks_.size(); ++i) {
    SingleBlockImpl& b = *single_blocks_[i];
    const std::string p = "single_transformer_blocks." + std::to_string(i) + ".";
    host(p, hidden, {{"attn.to_q", hidden}, {"attn.to_k", hidden}, {"attn.to_v", hidden}, {"proj_mlp", mlp}},
         &b.lora_linear1);
    host(p, hidden + mlp, {{"proj_out", hidden}}, &b.lora_proj_out);
    host(p, hidden, {{"norm.linear", 3 * hidden}}, &b.norm_->lora);
  }
  return hosts;
}

LoraSet HunyuanVideoTransformerImpl::attach_lora(const LoraOptions& options) {
  TT_CHECK_HINT(options.rank > 0, ErrorCode::kConfig, "set tele_tron.model.lora.rank to e.g. 32",
                "tele_tron.model.lora.rank must be > 0, got ", options.rank);
  LoraSet set;
  set.options = options;
  // The defaults name both block kinds; a model without one of them (e.g. single blocks only)
  // adapts what it has. Targets a user names must each find a module (a typo is an error).
  const bool named = !set.options.targets.empty();
  if (!named) set.options.targets = default_lora_targets();
  std::vector<LoraHost> hosts = lora_hosts();
  for (const LoraHost& h : hosts) TT_ASSERT(!*h.slot, "attach_lora called twice");
  for (const std::string& target : named ? set.options.targets : std::vector<std::string>{}) {
    bool found = false;
    for (const LoraHost& h : hosts)
      for (const LoraPart& part : h.parts) found = found || lora_target_matches({target}, part.module);
    TT_CHECK_HINT(
        found, ErrorCode::kConfig,
        "name a Linear of the double or single blocks by its diffusers name or suffix: to_q, to_k, to_v, "
        "to_out.0, add_q_proj, add_k_proj, add_v_proj, to_add_out, ff.net.0.proj, ff.net.2, "
        "ff_context.net.0.proj, ff_context.net.2, norm1.linear, norm1_context.linear (double blocks); "
        "to_q, to_k, to_v, proj_mlp, proj_out, norm.linear (single blocks); or a regular expression "
        "matching the whole name, e.g. single_transformer_blocks\\.[0-9]+\\.proj_out",
        "tele_tron.model.lora.targets: '", target, "' names no module that takes a LoRA adapter");
  }
  const torch::Device device = patch_embed_->weight.device();
  for (LoraHost& h : hosts) {
    std::vector<bool> adapted;
    bool any = false;
    for (const LoraPart& part : h.parts) {
      adapted.push_back(lora_target_matches(set.options.targets, part.module));
      any = any || adapted.back();
    }
    if (!any) continue;
    LoraAdapter adapter(h.in_features, h.parts, adapted, set.options);
    adapter->to(device, torch::kFloat32);
    adapter->train(is_training());
    *h.slot = adapter;
    set.adapters.push_back(adapter);
  }
  for (auto& parameter : parameters()) parameter.set_requires_grad(false);
  return set;
}

torch::Tensor HunyuanVideoTransformerImpl::condition_vector(const TransformerInputs& in) {
  auto pooled = in.pooled_projections;
  auto vec =
      timestep_embedder_(timestep_sinusoid(in.timestep).to(pooled.scalar_type())) + text_embedder_(pooled);
  if (config_.guidance_embeds) {
    TT_ASSERT(in.guidance.defined(), "guidance input missing for a model with guidance_embeds");
    vec = vec + guidance_embedder_(timestep_sinusoid(in.guidance).to(pooled.scalar_type()));
  }
  return vec;  // (B, hidden)
}

torch::Tensor HunyuanVideoTransformerImpl::forward(const TransformerInputs& in) {
  const auto& x = in.hidden_states;
  TT_ASSERT(x.dim() == 5 && x.size(1) == config_.in_channels, "hidden_states must be (B, ",
            config_.in_channels, ", T, H, W), got ", x.sizes());
  const int64_t batch = x.size(0);
  const int64_t pt = config_.patch_size_t, p = config_.patch_size;
  TT_CHECK(x.size(2) % pt == 0 && x.size(3) % p == 0 && x.size(4) % p == 0, ErrorCode::kData, "latent shape ",
           x.sizes(), " is not divisible by the patch size [", pt, ",", p, ",", p, "]");
  const int64_t t = x.size(2) / pt, h = x.size(3) / p, w = x.size(4) / p;

  auto vec = condition_vector(in);
  auto video = patch_embed_(x).flatten(2).transpose(1, 2);  // (B, N, hidden)
  auto text =
      context_embedder_(in.encoder_hidden_states, in.timestep, in.encoder_attention_mask, in.text_all_valid);
  const int64_t n = video.size(1);

  // Keys: every video token, valid text tokens only (no mask at all when every token is valid);
  // with right-padded text and config.segment_attention, as segments too (the blocks choose).
  JointKeys keys;
  if (!in.text_all_valid) {
    auto text_valid = in.encoder_attention_mask.to(torch::kBool);
    auto video_keys = torch::ones({batch, n}, text_valid.options());
    keys.mask = torch::cat({video_keys, text_valid}, 1).view({batch, 1, 1, -1});  // (B, 1, 1, N+L)
    if (config_.segment_attention && in.text_right_padded && x.is_cuda())
      keys.segments = segment_offsets(text_valid.sum(1) + n, n + text_valid.size(1));
    if (config_.per_sample_attention && !in.text_lengths.empty()) {
      for (const int64_t length : in.text_lengths) {
        TT_ASSERT(length >= 0 && length <= text_valid.size(1), "text length ", length, " outside [0, ",
                  text_valid.size(1), "]");
        keys.lengths.push_back(n + length);
      }
    }
  }
  const RopeTable& rope = rope_cache_->get(t, h, w, x.device());

  // Block i is recomputed in backward when activation checkpointing selects it.
  int64_t block_index = 0;
  auto checkpoint_this = [&]() {
    const size_t i = static_cast<size_t>(block_index);
    const bool selected = i < checkpointed_.size() && checkpointed_[i];
    block_index += 1;
    return selected && is_training() && torch::GradMode::is_enabled();
  };
  // Checkpointed blocks get the keys' tensors among their inputs, after the block's own.
  const bool has_mask = keys.mask.defined(), has_segments = keys.segments.defined();
  auto with_keys = [&](std::vector<torch::Tensor> inputs) {
    if (has_mask) inputs.push_back(keys.mask);
    if (has_segments) inputs.push_back(keys.segments);
    return inputs;
  };
  // Host lengths travel by value (a recompute runs the same per-sample calls); block graphs never
  // get them (a graph would bake them in).
  auto keys_from = [has_mask, has_segments](const std::vector<torch::Tensor>& inputs, size_t first,
                                            std::vector<int64_t> lengths = {}) {
    JointKeys k;
    if (has_mask) k.mask = inputs.at(first++);
    if (has_segments) k.segments = inputs.at(first);
    k.lengths = std::move(lengths);
    return k;
  };
  // Checkpointed blocks run again during backward, after forward returned: their closures hold
  // only values (module handles, sizes, the cached RoPE table's address), never locals by reference.
  const RopeTable* rope_table = &rope;

  const bool keep_attention = config_.checkpoint_keeps_attention;
  // Block graphs, when active, take every block that is not checkpointed (same block function).
  const bool graphed =
      block_graphs_ && block_graphs_->active() && is_training() && torch::GradMode::is_enabled();
  for (auto& block : double_blocks_) {
    const int64_t index = block_index;
    const bool recompute = checkpoint_this();
    if (recompute || graphed) {
      BlockFunction fn = [impl = block.ptr(), rope_table, keys_from,
                          lengths = recompute ? keys.lengths : std::vector<int64_t>{}](
                             const std::vector<torch::Tensor>& in_) {
        auto result = impl->forward(in_[0], in_[1], in_[2], keys_from(in_, 3, lengths), *rope_table);
        return std::vector<torch::Tensor>{result.first, result.second};
      };
      auto outputs =
          recompute ? checkpointed(fn, with_keys({video, text, vec}), block->graph_tensors(), keep_attention)
                    : block_graphs_->run(index, fn, with_keys({video, text, vec}), block->graph_tensors());
      video = outputs[0];
      text = outputs[1];
    } else {
      std::tie(video, text) = block(video, text, vec, keys, rope);
    }
  }
  auto joint = torch::cat({video, text}, 1);
  for (auto& block : single_blocks_) {
    const int64_t index = block_index;
    const bool recompute = checkpoint_this();
    if (recompute || graphed) {
      BlockFunction fn = [impl = block.ptr(), n, rope_table, keys_from,
                          lengths = recompute ? keys.lengths : std::vector<int64_t>{}](
                             const std::vector<torch::Tensor>& in_) {
        return std::vector<torch::Tensor>{
            impl->forward(in_[0], n, in_[1], keys_from(in_, 2, lengths), *rope_table)};
      };
      joint = recompute ? checkpointed(fn, with_keys({joint, vec}), block->graph_tensors(), keep_attention)[0]
                        : block_graphs_->run(index, fn, with_keys({joint, vec}), block->graph_tensors())[0];
    } else {
      joint = block(joint, n, vec, keys, rope);
    }
  }
  video = joint.slice(1, 0, n);

  auto mod = norm_out_(vec);  // diffusers' AdaLayerNormContinuous: scale first, then shift
  auto out = proj_out_(norm_modulate(video, mod[1], mod[0]));  // (B, N, C*pt*p*p)
  out = out.reshape({batch, t, h, w, config_.out_channels, pt, p, p});
  out = out.permute({0, 4, 1, 5, 2, 6, 3, 7});
  return out.reshape({batch, config_.out_channels, t * pt, h * p, w * p});
}

}  // namespace tt
