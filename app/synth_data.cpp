// Synthetic moving-blob latent dataset (see synth_data.h).
#include "app/synth_data.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>

#include "core/errors.h"
#include "core/safetensors.h"

namespace tt {
namespace {

constexpr int64_t kBlobs = 2;
constexpr int64_t kProjections = 8;  // distinct token projections, cycled along the text

// Blob parameters of one clip: per blob centre (2), velocity (2), radius (1), colour (C).
torch::Tensor draw_parameters(int64_t channels, torch::Generator& gen) {
  auto options = torch::TensorOptions().dtype(torch::kFloat32);
  std::vector<torch::Tensor> parts;
  for (int64_t b = 0; b < kBlobs; ++b) {
    parts.push_back(torch::rand({2}, gen, options) * 0.6 + 0.2);   // centre in [0.2, 0.8]
    parts.push_back(torch::rand({2}, gen, options) * 0.2 - 0.1);   // velocity per latent frame
    parts.push_back(torch::rand({1}, gen, options) * 0.15 + 0.1);  // radius
    parts.push_back(torch::randn({channels}, gen, options) * 1.5);  // colour
  }
  return torch::cat(parts);
}

// (C, T, H, W) latents rendered from the parameters.
torch::Tensor render(const torch::Tensor& params, const SynthDataOptions& o) {
  auto options = torch::TensorOptions().dtype(torch::kFloat32);
  auto ys = (torch::arange(o.height, options) + 0.5) / o.height;
  auto xs = (torch::arange(o.width, options) + 0.5) / o.width;
  auto latents = torch::zeros({o.channels, o.frames, o.height, o.width}, options);
  const int64_t per_blob = 5 + o.channels;
  for (int64_t b = 0; b < kBlobs; ++b) {
    auto p = params.slice(0, b * per_blob, (b + 1) * per_blob);
    const double cy = p[0].item<double>(), cx = p[1].item<double>();
    const double vy = p[2].item<double>(), vx = p[3].item<double>(), r = p[4].item<double>();
    auto colour = p.slice(0, 5).view({o.channels, 1, 1});
    for (int64_t t = 0; t < o.frames; ++t) {
      auto dy = (ys - (cy + vy * t)).view({-1, 1});
      auto dx = (xs - (cx + vx * t)).view({1, -1});
      auto blob = torch::exp(-(dy * dy + dx * dx) / (2 * r * r));  // (H, W)
      latents.select(1, t) += colour * blob.unsqueeze(0);
    }
  }
  return latents - 0.5;  // a constant offset, like real latents' non-zero mean
}

}  // namespace

std::string write_synthetic_latents(const SynthDataOptions& o) {
  namespace fs = std::filesystem;
  TT_CHECK(o.samples > 0 && o.channels > 0 && o.frames > 0 && o.height > 0 && o.width > 0 &&
               o.text_length > 0 && o.text_dim > 0 && o.pooled_dim > 0,
           ErrorCode::kConfig, "synth-data: every size must be > 0");
  std::error_code error;
  fs::create_directories(o.output, error);
  TT_CHECK(!error, ErrorCode::kIo, "cannot create ", o.output, ": ", error.message());

  auto gen = at::detail::createCPUGenerator(o.seed);
  const int64_t param_count = kBlobs * (5 + o.channels);
  // Fixed projections from blob parameters to text token features and the pooled vector.
  auto token_proj = torch::randn({kProjections, o.text_dim, param_count}, gen) / std::sqrt(double(param_count));
  auto pooled_proj = torch::randn({o.pooled_dim, param_count}, gen) / std::sqrt(double(param_count));

  const std::string manifest_path = (fs::path(o.output) / "manifest.jsonl").string();
  std::ofstream manifest(manifest_path, std::ios::trunc);
  TT_CHECK(manifest.good(), ErrorCode::kIo, "cannot write ", manifest_path);
  for (int64_t i = 0; i < o.samples; ++i) {
    auto params = draw_parameters(o.channels, gen);
    auto latents = render(params, o);
    // Captions of different lengths: the first `valid` tokens carry the description, the rest is
    // right padding (zeros, masked out).
    const int64_t min_valid = std::max<int64_t>(1, o.text_length / 4);
    const int64_t valid = min_valid + torch::randint(o.text_length - min_valid + 1, {1}, gen).item<int64_t>();
    auto text = torch::zeros({o.text_length, o.text_dim});
    auto mask = torch::zeros({o.text_length}, torch::kBool);
    for (int64_t j = 0; j < valid; ++j) {
      text[j] = torch::tanh(torch::mv(token_proj[j % kProjections], params));
      mask[j] = true;
    }
    text.slice(0, 0, valid) += 0.05 * torch::randn({valid, o.text_dim}, gen);
    auto pooled = torch::tanh(torch::mv(pooled_proj, params));

    char name[64];
    std::snprintf(name, sizeof(name), "sample_%05lld.safetensors", static_cast<long long>(i));
    safetensors::save((fs::path(o.output) / name).string(),
                      {{"latents", latents}, {"text_states", text}, {"text_mask", mask}, {"pooled", pooled}},
                      {{"generator", "teletron synth-data"}, {"seed", std::to_string(o.seed)}});
    manifest << "{\"latents\": \"" << name << "\"}\n";
  }
  manifest.close();
  TT_CHECK(!manifest.fail(), ErrorCode::kIo, "cannot write ", manifest_path);
  spdlog::info("synth-data: wrote {} samples of latents [{}, {}, {}, {}] to {}", o.samples, o.channels, o.frames,
               o.height, o.width, manifest_path);
  return manifest_path;
}

}  // namespace tt
