// LoRA adapters (see lora.h).
#include "model/lora.h"

#include <torch/torch.h>

#include <cmath>
#include <regex>

#include "core/errors.h"

namespace tt {

std::vector<std::string> default_lora_targets() {
  return {"to_q",
          "to_k",
          "to_v",
          "to_out.0",
          "add_q_proj",
          "add_k_proj",
          "add_v_proj",
          "to_add_out",
          "ff.net.0.proj",
          "ff.net.2",
          "ff_context.net.0.proj",
          "ff_context.net.2",
          "proj_mlp",
          "proj_out"};
}

namespace {

// peft's rule: a list entry is a name suffix; we take an entry with a regex character as a
// whole-name regular expression ('.' alone does not count: it separates module names).
bool is_pattern(const std::string& target) {
  return target.find_first_of("\\^$|?*+()[]{}") != std::string::npos;
}

}  // namespace

bool lora_target_matches(const std::vector<std::string>& targets, const std::string& module) {
  for (const std::string& target : targets) {
    if (is_pattern(target)) {
      if (std::regex_match(module, std::regex(target))) return true;
      continue;
    }
    if (module == target) return true;
    if (module.size() > target.size() &&
        module.compare(module.size() - target.size(), target.size(), target) == 0 &&
        module[module.size() - target.size() - 1] == '.')
      return true;
  }
  return false;
}

LoraAdapterImpl::LoraAdapterImpl(int64_t in_features, std::vector<LoraPart> parts,
                                 const std::vector<bool>& adapted, const LoraOptions& options)
    : in_features_(in_features), parts_(std::move(parts)), options_(options) {
  TT_ASSERT(options.rank > 0, "LoRA rank must be > 0");
  TT_ASSERT(adapted.size() == parts_.size(), "one adapted flag per LoRA part");
  const int64_t r = options.rank;
  for (size_t i = 0; i < parts_.size(); ++i) {
    if (!adapted[i]) {
      pair_of_part_.push_back(-1);
      continue;
    }
    Pair pair;
    pair.module = parts_[i].module;
    const std::string index = std::to_string(pairs_.size());
    pair.a = register_parameter("a" + index, torch::empty({r, in_features}));
    pair.b = register_parameter("b" + index, torch::zeros({parts_[i].rows, r}));
    torch::NoGradGuard no_grad;
    if (options.init == "gaussian") {
      pair.a.normal_(0.0, 1.0 / static_cast<double>(r));
    } else {
      TT_ASSERT(options.init == "kaiming", "LoRA init must be kaiming or gaussian, got ", options.init);
      torch::nn::init::kaiming_uniform_(pair.a, std::sqrt(5.0));
    }
    pair_of_part_.push_back(static_cast<int>(pairs_.size()));
    pairs_.push_back(pair);
  }
  TT_ASSERT(!pairs_.empty(), "a LoRA adapter needs at least one adapted part");
}

torch::Tensor LoraAdapterImpl::down_weight() const {
  if (pairs_.size() == 1) return pairs_[0].a;
  std::vector<torch::Tensor> a;
  for (const Pair& pair : pairs_) a.push_back(pair.a);
  return torch::cat(a, 0);
}

torch::Tensor LoraAdapterImpl::down(const torch::Tensor& x) const {
  const torch::Tensor input = has_dropout() ? torch::dropout(x, options_.dropout, is_training()) : x;
  return torch::linear(input, down_weight());
}

torch::Tensor LoraAdapterImpl::up_weight() const {
  const int64_t r = options_.rank, k = static_cast<int64_t>(pairs_.size());
  const double scale = options_.scale();
  if (parts_.size() == 1) return pairs_[0].b * scale;
  // Block-diagonal: part i's rows see only its own pair's r columns of `down`.
  std::vector<torch::Tensor> blocks;
  for (size_t i = 0; i < parts_.size(); ++i) {
    const int j = pair_of_part_[i];
    const auto options = pairs_[0].b.options();
    if (j < 0) {
      blocks.push_back(torch::zeros({parts_[i].rows, k * r}, options));
      continue;
    }
    std::vector<torch::Tensor> row;
    if (j > 0) row.push_back(torch::zeros({parts_[i].rows, j * r}, options));
    row.push_back(pairs_[j].b);
    if (j < k - 1) row.push_back(torch::zeros({parts_[i].rows, (k - 1 - j) * r}, options));
    blocks.push_back(row.size() == 1 ? row[0] : torch::cat(row, 1));
  }
  return torch::cat(blocks, 0) * scale;
}

torch::Tensor LoraAdapterImpl::add_up(const torch::Tensor& base_out, const torch::Tensor& down) const {
  const int64_t rows = base_out.size(-1);
  const auto dtype = base_out.scalar_type();
  const torch::Tensor sum = torch::addmm(
      base_out.reshape({-1, rows}), down.reshape({-1, down.size(-1)}).to(dtype), up_weight().to(dtype).t());
  return sum.view(base_out.sizes());
}

torch::Tensor with_lora(const LoraAdapter& lora, const torch::Tensor& base_out, const torch::Tensor& x) {
  return lora ? lora->add_up(base_out, lora->down(x)) : base_out;
}

torch::Tensor lora_linear(torch::nn::Linear& base, const LoraAdapter& lora, const torch::Tensor& x) {
  return with_lora(lora, base(x), x);
}

std::vector<std::pair<std::string, torch::Tensor>> LoraSet::named_parameters() const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const LoraAdapter& adapter : adapters) {
    for (const auto& pair : adapter->pairs()) {
      out.emplace_back(pair.module + ".lora_A.weight", pair.a);
      out.emplace_back(pair.module + ".lora_B.weight", pair.b);
    }
  }
  return out;
}

int64_t LoraSet::parameter_count() const {
  int64_t count = 0;
  for (const auto& [name, tensor] : named_parameters()) count += tensor.numel();
  return count;
}

std::vector<std::string> LoraSet::modules() const {
  std::vector<std::string> out;
  for (const LoraAdapter& adapter : adapters)
    for (const auto& pair : adapter->pairs()) out.push_back(pair.module);
  return out;
}

void LoraSet::train(bool on) {
  for (LoraAdapter& adapter : adapters) adapter->train(on);
}

}  // namespace tt
