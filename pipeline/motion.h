// Motion scores (issue 13): how much a clip moves, as the mean optical-flow magnitude in pixels per
// frame at a fixed working resolution, over a few frame pairs spread over the clip. Used to leave
// out static clips (data.min_motion) or the wildest ones (data.max_motion), and to choose frames.
//
// The working resolution is a short side of 256 pixels (the frames resized to it, up or down,
// keeping their aspect), so that scores of clips of different sizes compare: a pan that crosses
// the picture in 10 s scores the same at 480p and at 1080p. Each pair is two frames `gap` frames
// apart; its flow magnitude is divided by the gap.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "pipeline/frame_sampler.h"
#include "pipeline/optical_flow.h"

namespace tt {

struct MotionOptions {
  int64_t pairs = 4;          // frame pairs per clip (K)
  int64_t short_side = 256;   // working resolution: the frames' shorter side, in pixels
  FlowOptions flow;           // the estimator (nvofa by default, TV-L1 where it cannot run)
};

/// The first frames of `pairs` pairs (i, i + 1) spread over a clip of `frames` frames: the middle
/// of `pairs` equal strata, each at most frames - 2 (fewer pairs when the clip is shorter than
/// that; none for a clip of fewer than 2 frames).
std::vector<int64_t> motion_pair_starts(int64_t frames, int64_t pairs);

/// The frames (N, H, W) grayscale or (N, 3, H, W) RGB, float in [0, 1] or uint8, on any device, resized
/// to the working resolution (bilinear, antialiased when shrinking) and made grayscale (BT.709 luma
/// weights): (N, h, w) float32.
torch::Tensor motion_frames(const torch::Tensor& frames, int64_t short_side);

/// The score of pairs given as `first` and `second` (K, h, w) at the working resolution (as
/// motion_frames returns them) with the frame gap of each pair: the mean over pairs of the mean
/// flow magnitude over the picture divided by the gap, in pixels per frame. 0 pairs: TT_ERR_DATA.
double motion_score(const torch::Tensor& first, const torch::Tensor& second, const std::vector<int64_t>& gaps,
                    const MotionOptions& options = {});
/// As motion_score, each pair's own score (its mean flow magnitude over the gap). Builds an
/// estimator of options.flow for the frames' device; the overload below takes one.
std::vector<double> motion_pair_scores(const torch::Tensor& first, const torch::Tensor& second,
                                       const std::vector<int64_t>& gaps, const MotionOptions& options = {});
std::vector<double> motion_pair_scores(const torch::Tensor& first, const torch::Tensor& second,
                                       const std::vector<int64_t>& gaps, FlowEstimator& flow);

/// The training pipeline's flow stage: the motion score of one sample's frames `pixels` (3, T, H,
/// W) in [-1, 1] (as the clip loader gives them), on their device and LibTorch's current stream,
/// without waiting: the pairs are consecutive sampled frames at motion_pair_starts(T,
/// options.pairs), each at the working resolution; a 0-dim float32 tensor on the frames' device,
/// in pixels per sampled frame. TT_ERR_DATA for fewer than 2 frames.
torch::Tensor sample_motion(const torch::Tensor& pixels, const MotionOptions& options, FlowEstimator& flow);

class VideoReader;

/// The motion score of the clip `reader` reads: options.pairs pairs (i, i + 1) from
/// motion_pair_starts, decoded on the reader's path, flow on the frames' device. TT_ERR_DATA for a
/// clip of fewer than 2 frames.
double clip_motion_score(VideoReader& reader, const MotionOptions& options = {});

/// A clip's score and the profile it comes from: each pair at (start + 1/2) / (frames - 1) of the
/// clip with its own score (the frame sampler's motion mode draws windows by it).
struct ClipMotion {
  double score = 0;
  MotionProfile profile;
};
/// As clip_motion_score, with the profile. The flow comes from `flow` when given (its owner keeps
/// NVOFA sessions or RAFT between clips), else from an estimator of options.flow made for the call.
ClipMotion clip_motion(VideoReader& reader, const MotionOptions& options = {}, FlowEstimator* flow = nullptr);

/// The per-manifest motion cache `teletron validate-data --motion` writes beside the manifest
/// (<manifest>.motion.json) and training reads for data.min_motion / data.max_motion. Scores are
/// keyed by the clip's resolved path and stand only while its file stamp (size and modification
/// time, as the datasets' content hashes see files) is the one recorded; the scoring's settings are
/// recorded with them.
struct MotionCache {
  struct Entry {
    double score = 0;
    std::string stamp;  // core/content_hash.h file_stamp of the clip when scored
    MotionProfile profile;  // per pair (empty in caches written before profiles were recorded)
  };
  std::string algorithm = "tvl1";
  int64_t pairs = 4;
  int64_t short_side = 256;
  std::map<std::string, Entry> clips;

  /// <manifest>.motion.json
  static std::string path_for(const std::string& manifest);
  /// Reads `path`; a missing file is an empty cache, a damaged one TT_ERR_DATA naming it.
  static MotionCache read(const std::string& path);
  /// Writes it (atomically: a temporary file renamed over the old one).
  void write(const std::string& path) const;
  /// The entry of `video` for its file as it is now (size and modification time), else nothing.
  std::optional<double> score_of(const std::string& video) const;
  /// The profile of `video` for its file as it is now, when one was recorded, else nothing.
  std::optional<MotionProfile> profile_of(const std::string& video) const;
  /// Records `score` (and its profile) for `video` as the file is now.
  void set(const std::string& video, double score, const MotionProfile& profile = {});
};

}  // namespace tt
