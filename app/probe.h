// `teletron probe VIDEO`: what the data pipeline sees in one file — streams, codec, size, rotation,
// colour metadata, frame count, the decode path chosen and why — and optionally the decoded RGB
// frames (after rotation) written as safetensors for inspection.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tt {

struct ProbeOptions {
  /// The video file.
  std::string path;
  /// Frame indices to decode (any order, duplicates allowed); empty = every frame when dumping.
  std::vector<int64_t> frames;
  /// When set, writes `frames` (T, H, W, 3) uint8 after rotation and `indices` (T) int64 and
  /// `seconds` (T) float64 (frame times) here.
  std::string dump;
  /// "kernel" (tt::yuv420_to_rgb, the pipeline's converter) or "swscale" (as the ffmpeg CLI).
  std::string rgb = "kernel";
  /// "cpu" or "cuda": the decode path asked for.
  std::string device = "cpu";
  /// When set, writes the optical flow between two frames (--frames i,j; default 0,1) here as a
  /// colour-coded PNG (pipeline/flow_picture.h), at the motion scores' working resolution.
  std::string flow;
  /// --flow's estimator: tvl1, nvofa (no fallback: it must run) or raft (with flow_weights).
  std::string flow_algorithm = "tvl1";
  std::string flow_weights;
};

/// Prints the report on stdout; throws tt::Error (kIo / kDecode / kData) like the decoder does.
void run_probe(const ProbeOptions& options);

}  // namespace tt
