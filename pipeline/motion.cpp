// Motion scores from optical flow (see motion.h).
#include "pipeline/motion.h"

#include <torch/nn/functional.h>
#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <numeric>
#include <sstream>

#include "core/content_hash.h"
#include "core/errors.h"
#include "core/file_io.h"
#include "pipeline/video_reader.h"

namespace tt {

namespace F = torch::nn::functional;

std::vector<int64_t> motion_pair_starts(int64_t frames, int64_t pairs) {
  std::vector<int64_t> starts;
  if (frames < 2 || pairs < 1) return starts;
  const int64_t last = frames - 2;  // the last first frame that has a next frame
  const int64_t count = std::min(pairs, last + 1);
  for (int64_t k = 0; k < count; ++k) {
    // The middle of stratum k of `count` equal strata over [0, last].
    const double middle = (static_cast<double>(k) + 0.5) * static_cast<double>(last + 1) / static_cast<double>(count);
    starts.push_back(std::min<int64_t>(last, static_cast<int64_t>(std::floor(middle))));
  }
  return starts;
}

torch::Tensor motion_frames(const torch::Tensor& frames, int64_t short_side) {
  TT_CHECK(short_side >= 16, ErrorCode::kConfig, "motion: the working resolution's short side must be >= 16, got ",
           short_side);
  TT_CHECK((frames.dim() == 3 || (frames.dim() == 4 && frames.size(1) == 3)) && frames.size(-1) >= 2 &&
               frames.size(-2) >= 2,
           ErrorCode::kData, "motion: frames (N, H, W) or (N, 3, H, W) are needed, got ", frames.sizes());
  torch::Tensor x = frames.scalar_type() == torch::kUInt8 ? frames.to(torch::kFloat32) / 255.0
                                                          : frames.to(torch::kFloat32);
  if (x.dim() == 4) {
    const torch::Tensor luma = torch::tensor({0.2126f, 0.7152f, 0.0722f}, x.options()).view({1, 3, 1, 1});
    x = (x * luma).sum(1);
  }
  const int64_t h = x.size(1), w = x.size(2);
  const double scale = static_cast<double>(short_side) / static_cast<double>(std::min(h, w));
  const auto nh = std::max<int64_t>(2, std::lround(static_cast<double>(h) * scale));
  const auto nw = std::max<int64_t>(2, std::lround(static_cast<double>(w) * scale));
  if (nh == h && nw == w) return x;
  return F::interpolate(x.unsqueeze(1), F::InterpolateFuncOptions()
                                            .size(std::vector<int64_t>{nh, nw})
                                            .mode(torch::kBilinear)
                                            .align_corners(false)
                                            .antialias(scale < 1.0))
      .squeeze(1);
}

double motion_score(const torch::Tensor& first, const torch::Tensor& second, const std::vector<int64_t>& gaps,
                    const MotionOptions& options) {
  const std::vector<double> scores = motion_pair_scores(first, second, gaps, options);
  return std::accumulate(scores.begin(), scores.end(), 0.0) / static_cast<double>(scores.size());
}

std::vector<double> motion_pair_scores(const torch::Tensor& first, const torch::Tensor& second,
                                       const std::vector<int64_t>& gaps, const MotionOptions& options) {
  FlowEstimator flow(options.flow, first.device());
  return motion_pair_scores(first, second, gaps, flow);
}

namespace {

void check_pairs(const torch::Tensor& first, const torch::Tensor& second, size_t gaps) {
  TT_CHECK(first.dim() == 3 && first.sizes() == second.sizes() && first.size(0) > 0 &&
               static_cast<size_t>(first.size(0)) == gaps,
           ErrorCode::kData, "motion: K pairs of (h, w) frames and K gaps are needed, got ", first.sizes(), ", ",
           second.sizes(), " and ", gaps, " gaps");
}

// (K, 2, h, w) flow -> (K) mean magnitude over the picture, float32 on the flow's device.
torch::Tensor mean_magnitude(const torch::Tensor& flow) { return torch::sqrt((flow * flow).sum(1)).mean({1, 2}); }

}  // namespace

std::vector<double> motion_pair_scores(const torch::Tensor& first, const torch::Tensor& second,
                                       const std::vector<int64_t>& gaps, FlowEstimator& flow) {
  check_pairs(first, second, gaps.size());
  const torch::Tensor magnitude = mean_magnitude(flow.flow(first, second)).to(torch::kFloat64).cpu();
  std::vector<double> scores;
  for (size_t k = 0; k < gaps.size(); ++k) {
    TT_CHECK(gaps[k] >= 1, ErrorCode::kData, "motion: pair ", k, " has a frame gap of ", gaps[k]);
    scores.push_back(magnitude[static_cast<int64_t>(k)].item<double>() / static_cast<double>(gaps[k]));
  }
  return scores;
}

torch::Tensor sample_motion(const torch::Tensor& pixels, const MotionOptions& options, FlowEstimator& flow) {
  TT_CHECK(pixels.dim() == 4 && pixels.size(0) == 3, ErrorCode::kData,
           "motion: a sample's pixels (3, T, H, W) are needed, got ", pixels.sizes());
  const std::vector<int64_t> starts = motion_pair_starts(pixels.size(1), options.pairs);
  TT_CHECK(!starts.empty(), ErrorCode::kData, "motion: a sample of ", pixels.size(1),
           " frame(s) has no frame pair");
  torch::NoGradGuard no_grad;
  // The pairs' frames as views of the sample (no index tensor to copy to the device): the K first
  // frames, then the K second ones, (2K, 3, H, W) in [0, 1], resized together.
  std::vector<torch::Tensor> frames;
  for (const int64_t offset : {0, 1})
    for (const int64_t s : starts) frames.push_back(pixels.select(1, s + offset));
  const torch::Tensor work =
      motion_frames(((torch::stack(frames).to(torch::kFloat32) + 1.0) * 0.5).clamp_(0.0, 1.0), options.short_side);
  const int64_t k = static_cast<int64_t>(starts.size());
  return mean_magnitude(flow.flow(work.slice(0, 0, k), work.slice(0, k, 2 * k))).mean();
}

double clip_motion_score(VideoReader& reader, const MotionOptions& options) {
  return clip_motion(reader, options).score;
}

ClipMotion clip_motion(VideoReader& reader, const MotionOptions& options, FlowEstimator* flow) {
  const int64_t frames = reader.info().frame_count;
  const std::vector<int64_t> starts = motion_pair_starts(frames, options.pairs);
  TT_CHECK(!starts.empty(), ErrorCode::kData, reader.info().path, ": ", frames,
           " frame(s): a motion score needs at least 2");
  // Every frame once, in order: the pairs' frames, shared where pairs touch.
  std::vector<int64_t> wanted;
  for (int64_t s : starts) {
    wanted.push_back(s);
    wanted.push_back(s + 1);
  }
  std::sort(wanted.begin(), wanted.end());
  wanted.erase(std::unique(wanted.begin(), wanted.end()), wanted.end());
  const torch::Tensor rgb = reader.decode_rgb(wanted);  // (N, H, W, 3) uint8
  const torch::Tensor work = motion_frames(rgb.permute({0, 3, 1, 2}), options.short_side);
  std::vector<int64_t> first, second, gaps;
  auto position = [&](int64_t frame) {
    return static_cast<int64_t>(std::lower_bound(wanted.begin(), wanted.end(), frame) - wanted.begin());
  };
  for (int64_t s : starts) {
    first.push_back(position(s));
    second.push_back(position(s + 1));
    gaps.push_back(1);
  }
  const auto index = [&](const std::vector<int64_t>& at) {
    return torch::tensor(at, torch::TensorOptions().dtype(torch::kInt64)).to(work.device());
  };
  std::unique_ptr<FlowEstimator> own;
  if (flow == nullptr) {
    own = std::make_unique<FlowEstimator>(options.flow, work.device());
    flow = own.get();
  }
  ClipMotion motion;
  motion.profile.score =
      motion_pair_scores(work.index_select(0, index(first)), work.index_select(0, index(second)), gaps, *flow);
  for (int64_t s : starts)
    motion.profile.at.push_back((static_cast<double>(s) + 0.5) / static_cast<double>(frames - 1));
  motion.score = std::accumulate(motion.profile.score.begin(), motion.profile.score.end(), 0.0) /
                 static_cast<double>(motion.profile.score.size());
  return motion;
}

std::string MotionCache::path_for(const std::string& manifest) { return manifest + ".motion.json"; }

MotionCache MotionCache::read(const std::string& path) {
  MotionCache cache;
  std::ifstream in(path);
  if (!in.good()) return cache;
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  const char* hint = "delete it and run `teletron validate-data CONFIG --motion` again";
  TT_CHECK_HINT(j.is_object() && j.value("version", 0) == 1 && j.contains("clips") && j["clips"].is_object(),
                ErrorCode::kData, hint, path, ": not a teletron motion cache (version 1)");
  try {
    cache.algorithm = j.at("algorithm").get<std::string>();
    cache.pairs = j.at("pairs").get<int64_t>();
    cache.short_side = j.at("short_side").get<int64_t>();
    for (const auto& [video, entry] : j.at("clips").items()) {
      Entry& e = cache.clips[video];
      e.score = entry.at("score").get<double>();
      e.stamp = entry.at("stamp").get<std::string>();
      if (entry.contains("profile")) {
        e.profile.at = entry.at("profile").at("at").get<std::vector<double>>();
        e.profile.score = entry.at("profile").at("score").get<std::vector<double>>();
        TT_CHECK_HINT(e.profile.at.size() == e.profile.score.size(), ErrorCode::kData, hint, path, ": clip ",
                      video, " has ", e.profile.at.size(), " profile positions and ", e.profile.score.size(),
                      " scores");
      }
    }
  } catch (const nlohmann::json::exception& error) {
    throw Error(ErrorCode::kData, str_cat(path, ": a damaged motion cache (", error.what(), ")"), hint);
  }
  return cache;
}

void MotionCache::write(const std::string& path) const {
  nlohmann::json j;
  j["version"] = 1;
  j["algorithm"] = algorithm;
  j["pairs"] = pairs;
  j["short_side"] = short_side;
  j["unit"] = "mean optical-flow magnitude, pixels per frame at the working resolution";
  j["clips"] = nlohmann::json::object();
  for (const auto& [video, entry] : clips) {
    j["clips"][video] = {{"score", entry.score}, {"stamp", entry.stamp}};
    if (!entry.profile.score.empty())
      j["clips"][video]["profile"] = {{"at", entry.profile.at}, {"score", entry.profile.score}};
  }
  write_text_synced(path, j.dump(1) + "\n");
}

std::optional<double> MotionCache::score_of(const std::string& video) const {
  const auto found = clips.find(video);
  if (found == clips.end()) return std::nullopt;
  try {
    if (file_stamp(video) != found->second.stamp) return std::nullopt;
  } catch (const Error&) {  // gone, or unreadable: no current score
    return std::nullopt;
  }
  return found->second.score;
}

std::optional<MotionProfile> MotionCache::profile_of(const std::string& video) const {
  if (!score_of(video)) return std::nullopt;
  const MotionProfile& profile = clips.at(video).profile;
  if (profile.score.empty()) return std::nullopt;
  return profile;
}

void MotionCache::set(const std::string& video, double score, const MotionProfile& profile) {
  clips[video] = Entry{score, file_stamp(video), profile};
}

}  // namespace tt
