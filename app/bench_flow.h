// `teletron bench --suite flow` (and the flow rows of `--suite pipeline`): the flow stage's
// algorithms side by side on one device at one frame size — NVOFA per grid and preset, TV-L1 as
// CUDA kernels, as tensor ops on the GPU and as the CPU reference in W single-threaded workers (the
// CPU baseline at equal iterations), RAFT when weights are given — each with its time per frame
// pair and its end-point error on pairs with known flow, then the flow stage's cost per training
// sample (K pairs at the 256-px working resolution of a 33-frame clip of that size). Rows that
// cannot run here (no GPU, no engine) are listed with the reason instead of a time.
//
// The accuracy cases: a smooth texture (its periods stretched with the frame size, 6-20 px at a
// 64-px short side) translated by (5.3, 3.2) px and rotated by 3 degrees (evaluated at the moved
// coordinates: exact), and, with --flow-frames VIDEO, a real frame of that
// video (its middle frame, gray, resized to the benchmark's size) moved by known maps and resampled
// bilinearly: a translation by (3.7, -2.1) px, a 2-degree rotation, a 4 % zoom, and two layers (the
// frame moving by (2, 1) px while its central third moves by (-6, 3) px). The error is the mean
// end-point error over the pixels whose motion is defined: away from the border (1/16 of the
// shorter side), and for two layers away from the foreground's edges and the background it covers.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tt {

struct BenchFlowOptions {
  std::string device = "cuda";  // cuda | cpu (cpu: only the CPU rows)
  int64_t height = 480, width = 832;
  int64_t warmup = 3, pairs = 20;           // GPU rows: untimed calls, then timed ones
  std::vector<int64_t> cpu_workers = {16};  // the CPU reference's rows: W workers, one thread each
  int64_t cpu_pairs = 1;                    // pairs per CPU worker
  int64_t frames = 33;                      // the sample of the per-sample rows
  int64_t motion_pairs = 4;                 // K
  std::optional<std::string> raft_weights;
  std::optional<std::string> flow_frames;  // a video whose middle frame makes the real-footage cases
  std::string json_path;
};

struct BenchFlowRow {
  std::string name;
  std::string algorithm;   // nvofa | tvl1 | raft
  std::string where;       // e.g. "cuda", "cpu x16"
  double ms_per_pair = 0;  // wall time per pair (CPU rows: wall / pairs, all workers together)
  std::vector<std::pair<std::string, double>> epe;  // per accuracy case, px (pair rows)
  double ms_per_sample = -1;  // the flow stage per training sample (K pairs at 256 px); -1: not a sample row
  std::string skipped;        // why the row did not run ("" when it ran)
};

struct FlowOptions;

/// One row of the flow stage per training sample (sample_motion on a random (3, options.frames, H,
/// W) clip, options.motion_pairs pairs at the 256-px working resolution): ms per sample, or the
/// reason it cannot run with `flow` on `device_name` (a fallback counts as cannot).
BenchFlowRow bench_flow_sample(const std::string& name, const FlowOptions& flow,
                               const std::string& device_name, const BenchFlowOptions& options);

/// Runs the rows, prints the table (with each row's speed-up over the first CPU row) and writes
/// the JSON when asked.
std::vector<BenchFlowRow> run_bench_flow(const BenchFlowOptions& options);

}  // namespace tt
