// `teletron bench --suite flow` (see bench_flow.h).
#include "app/bench_flow.h"

#include <ATen/Parallel.h>
#include <torch/cuda.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <thread>

#include "app/bench_folder.h"
#include "core/device.h"
#include "core/errors.h"
#include "core/file_io.h"
#include "pipeline/flow_pairs.h"
#include "pipeline/motion.h"
#include "pipeline/optical_flow.h"
#include "pipeline/video_reader.h"

namespace tt {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

void synchronize(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

// One accuracy case: a pair with its true flow and the pixels where the flow is defined.
struct FlowCase {
  std::string name;
  FlowPair pair;
  torch::Tensor valid;  // (H, W) bool
};

// Away from the border: 1/16 of the shorter side, at least 4 px.
torch::Tensor inner(int64_t height, int64_t width) {
  const int64_t margin = std::max<int64_t>(4, std::min(height, width) / 16);
  torch::Tensor valid = torch::zeros({height, width}, torch::kBool);
  valid.slice(0, margin, height - margin).slice(1, margin, width - margin).fill_(true);
  return valid;
}

// The texture's periods grow with the frame (at most 1: the tests' 64-px texture).
std::vector<FlowCase> texture_cases(int64_t height, int64_t width) {
  const double scale = std::min(1.0, 64.0 / static_cast<double>(std::min(height, width)));
  return {{"texture translation (5.3, 3.2) px", translated_pair(height, width, 5.3, 3.2, scale),
           inner(height, width)},
          {"texture rotation 3 deg", rotated_pair(height, width, 3.0, scale), inner(height, width)}};
}

// The middle frame of `video`, gray in [0, 1] (BT.709 luma at its own size), resized to (height, width).
torch::Tensor real_frame(const std::string& video, int64_t height, int64_t width) {
  VideoReader reader(video);
  const torch::Tensor rgb = reader.decode_rgb({reader.info().frame_count / 2});  // (1, H, W, 3) uint8
  const torch::Tensor gray = motion_frames(rgb.permute({0, 3, 1, 2}), std::min(rgb.size(1), rgb.size(2)));
  namespace F = torch::nn::functional;
  return F::interpolate(gray.unsqueeze(1), F::InterpolateFuncOptions()
                                               .size(std::vector<int64_t>{height, width})
                                               .mode(torch::kBilinear)
                                               .align_corners(false))
      .view({height, width})
      .clamp(0.0, 1.0)
      .contiguous();
}

std::vector<FlowCase> frame_cases(const torch::Tensor& frame) {
  const int64_t h = frame.size(0), w = frame.size(1);
  std::vector<FlowCase> cases;
  cases.push_back(
      {"frame translation (3.7, -2.1) px", moved_frame(frame, Translation{3.7, -2.1}), inner(h, w)});
  cases.push_back({"frame rotation 2 deg", moved_frame(frame, Rotation(h, w, 2.0)), inner(h, w)});
  cases.push_back({"frame zoom 4 %", moved_frame(frame, Zoom(h, w, 1.04)), inner(h, w)});
  // Two layers: the background moves by b, the central third (rows y0..y1, columns x0..x1) by f and
  // is drawn over it. The flow of i0's pixels: f inside the rectangle, b outside. Undefined: a band
  // of 8 px around the rectangle's edges in i0, and background pixels that land under the moved
  // rectangle (covered in i1).
  const double bx = 2.0, by = 1.0, fx = -6.0, fy = 3.0;
  const int64_t y0 = h / 3, y1 = 2 * h / 3, x0 = w / 3, x1 = 2 * w / 3, band = 8;
  auto ys = torch::arange(h, torch::kFloat64).view({h, 1}).expand({h, w});
  auto xs = torch::arange(w, torch::kFloat64).view({1, w}).expand({h, w});
  auto in_box = [&](const torch::Tensor& x, const torch::Tensor& y, double grow) {
    return (x >= x0 - grow) & (x < x1 + grow) & (y >= y0 - grow) & (y < y1 + grow);
  };
  // In i1 the rectangle is at its place + f: q shows the foreground when q - f lies in it.
  const torch::Tensor shows_front = in_box(xs - fx, ys - fy, 0.0);
  FlowPair layers;
  layers.i0 = frame;
  layers.i1 = torch::where(shows_front, sample_image_at(frame, xs - fx, ys - fy),
                           sample_image_at(frame, xs - bx, ys - by));
  const torch::Tensor front = in_box(xs, ys, 0.0);
  layers.flow = torch::stack({torch::where(front, torch::full_like(xs, fx), torch::full_like(xs, bx)),
                              torch::where(front, torch::full_like(ys, fy), torch::full_like(ys, by))})
                    .to(torch::kFloat32);
  const torch::Tensor edge = in_box(xs, ys, band) & ~in_box(xs, ys, -band);
  const torch::Tensor covered = ~front & in_box(xs + bx - fx, ys + by - fy, band);
  cases.push_back({"frame two layers (2, 1) / (-6, 3) px", layers, inner(h, w) & ~edge & ~covered});
  return cases;
}

double case_epe(const torch::Tensor& flow, const FlowCase& c) {
  const torch::Tensor d = flow.cpu().to(torch::kFloat32) - c.pair.flow;
  const torch::Tensor length = torch::sqrt((d * d).sum(0));
  return length.masked_select(c.valid).mean().item<double>();
}

// One GPU (or single-caller CPU) row: EPE on both pairs, then `pairs` timed calls after `warmup`.
BenchFlowRow time_row(const std::string& name, const FlowOptions& flow_options, const torch::Device& device,
                      const std::vector<FlowCase>& cases, const BenchFlowOptions& o) {
  BenchFlowRow row;
  row.name = name;
  row.algorithm = flow_options.algorithm;
  row.where = device.str();
  try {
    FlowEstimator estimator(flow_options, device);
    if (estimator.algorithm() != flow_options.algorithm) {
      row.skipped = estimator.fallback_reason();
      return row;
    }
    for (const FlowCase& c : cases)
      row.epe.emplace_back(c.name, case_epe(estimator.flow(c.pair.i0.to(device), c.pair.i1.to(device)), c));
    const torch::Tensor t0 = cases.front().pair.i0.to(device), t1 = cases.front().pair.i1.to(device);
    for (int64_t i = 0; i < o.warmup; ++i) estimator.flow(t0, t1);
    synchronize(device);
    const auto start = Clock::now();
    for (int64_t i = 0; i < o.pairs; ++i) estimator.flow(t0, t1);
    synchronize(device);
    row.ms_per_pair = 1000.0 * seconds_since(start) / static_cast<double>(o.pairs);
  } catch (const Error& error) {
    row.skipped = first_line(error.what());
  }
  return row;
}

// The CPU reference in `workers` threads of one LibTorch thread each, every worker on its own copy
// of the translation pair: wall time per pair over all of them (throughput), the CPU baseline.
BenchFlowRow cpu_row(int64_t workers, const std::vector<FlowCase>& cases, const BenchFlowOptions& o) {
  BenchFlowRow row;
  row.algorithm = "tvl1";
  row.name = str_cat("TV-L1, CPU reference, ", workers, " worker(s) x 1 thread");
  row.where = str_cat("cpu x", workers);
  FlowOptions options;
  options.algorithm = "tvl1";
  for (const FlowCase& c : cases)
    row.epe.emplace_back(c.name, case_epe(tvl1_flow(c.pair.i0, c.pair.i1, options.tvl1), c));
  const TorchThreads one(1);
  const auto start = Clock::now();
  run_threads(static_cast<int>(workers), [&](int) {
    const torch::Tensor a = cases.front().pair.i0.clone(), b = cases.front().pair.i1.clone();
    for (int64_t i = 0; i < o.cpu_pairs; ++i) tvl1_flow(a, b, options.tvl1);
  });
  row.ms_per_pair = 1000.0 * seconds_since(start) / static_cast<double>(workers * o.cpu_pairs);
  return row;
}

// The flow stage per training sample: sample_motion on a (3, frames, H, W) bf16 clip.
BenchFlowRow sample_row(const std::string& name, const FlowOptions& flow_options, const torch::Device& device,
                        const BenchFlowOptions& o) {
  BenchFlowRow row;
  row.name = name;
  row.algorithm = flow_options.algorithm;
  row.where = device.str();
  try {
    MotionOptions motion;
    motion.pairs = o.motion_pairs;
    motion.flow = flow_options;
    FlowEstimator estimator(flow_options, device);
    if (estimator.algorithm() != flow_options.algorithm) {
      row.skipped = estimator.fallback_reason();
      return row;
    }
    torch::manual_seed(3);
    const torch::Tensor clip =
        (torch::rand({3, o.frames, o.height, o.width}, torch::TensorOptions().device(device)) * 2 - 1)
            .to(device.is_cuda() ? torch::kBFloat16 : torch::kFloat32);
    for (int64_t i = 0; i < (device.is_cuda() ? o.warmup : 0); ++i) sample_motion(clip, motion, estimator);
    synchronize(device);
    const int64_t samples = device.is_cuda() ? o.pairs : 1;
    const auto start = Clock::now();
    for (int64_t i = 0; i < samples; ++i) sample_motion(clip, motion, estimator);
    synchronize(device);
    row.ms_per_sample = 1000.0 * seconds_since(start) / static_cast<double>(samples);
  } catch (const Error& error) {
    row.skipped = first_line(error.what());
  }
  return row;
}

std::string number(double value, const char* format) {
  if (value < 0) return "-";
  char text[32];
  std::snprintf(text, sizeof(text), format, value);
  return text;
}

}  // namespace

BenchFlowRow bench_flow_sample(const std::string& name, const FlowOptions& flow,
                               const std::string& device_name, const BenchFlowOptions& options) {
  return sample_row(name, flow, resolve_device(device_name, "--device"), options);
}

std::vector<BenchFlowRow> run_bench_flow(const BenchFlowOptions& o) {
  const torch::Device device = resolve_device(o.device, "--device");
  TT_CHECK(o.height >= 32 && o.width >= 32, ErrorCode::kConfig,
           "bench --suite flow: frames of at least 32x32 px, got ", o.height, "x", o.width);
  std::vector<FlowCase> cases = texture_cases(o.height, o.width);
  if (o.flow_frames) {
    const std::vector<FlowCase> real = frame_cases(real_frame(*o.flow_frames, o.height, o.width));
    cases.insert(cases.end(), real.begin(), real.end());
  }
  std::printf(
      "bench --suite flow: %lldx%lld frames (height x width), %s, %lld timed pairs per GPU row, %d CPU "
      "cores here\n",
      static_cast<long long>(o.height), static_cast<long long>(o.width), device.str().c_str(),
      static_cast<long long>(o.pairs), allowed_cpu_count());
  std::fflush(stdout);
  std::vector<BenchFlowRow> rows;
  auto add = [&](BenchFlowRow row) {
    std::printf("  %-46s %s\n", row.name.c_str(),
                row.skipped.empty() ? (row.ms_per_sample >= 0 ? number(row.ms_per_sample, "%.2f ms/sample")
                                                              : number(row.ms_per_pair, "%.2f ms/pair"))
                                          .c_str()
                                    : ("skipped: " + row.skipped).c_str());
    std::fflush(stdout);
    rows.push_back(std::move(row));
  };
  for (int64_t workers : o.cpu_workers) add(cpu_row(workers, cases, o));
  if (device.is_cuda()) {
    FlowOptions tvl1;
    tvl1.algorithm = "tvl1";
    add(time_row("TV-L1, CUDA kernels", tvl1, device, cases, o));
    FlowOptions reference = tvl1;
    reference.tvl1.kernels = false;
    add(time_row("TV-L1, tensor ops on the GPU", reference, device, cases, o));
    for (const int64_t grid : {4, 2, 1})
      for (const NvofaPreset preset : {NvofaPreset::kFast, NvofaPreset::kMedium, NvofaPreset::kSlow}) {
        if (grid != 4 && preset != NvofaPreset::kMedium) continue;  // the grid's effect at one preset
        FlowOptions nvofa;
        nvofa.fallback = "error";
        nvofa.nvofa.grid = grid;
        nvofa.nvofa.preset = preset;
        add(time_row(str_cat("NVOFA, grid ", grid, ", preset ", nvofa_preset_name(preset)), nvofa, device,
                     cases, o));
      }
    if (o.raft_weights) {
      FlowOptions raft;
      raft.algorithm = "raft";
      raft.raft_weights = o.raft_weights;
      raft.raft_bf16 = false;
      raft.raft_graphs = false;
      add(time_row("RAFT (12 updates), fp32, eager", raft, device, cases, o));
      raft.raft_bf16 = true;
      add(time_row("RAFT (12 updates), bf16 autocast, eager", raft, device, cases, o));
      raft.raft_graphs = true;
      add(time_row("RAFT (12 updates), bf16 autocast, CUDA graph", raft, device, cases, o));
    }
    FlowOptions stage;  // the default: nvofa, grid 4, medium
    stage.fallback = "error";
    add(sample_row(str_cat("flow stage per sample: NVOFA, K = ", o.motion_pairs, " at 256 px"), stage, device,
                   o));
    add(sample_row(str_cat("flow stage per sample: TV-L1 CUDA, K = ", o.motion_pairs, " at 256 px"), tvl1,
                   device, o));
  } else {
    FlowOptions tvl1;
    tvl1.algorithm = "tvl1";
    add(sample_row(str_cat("flow stage per sample: TV-L1 CPU, K = ", o.motion_pairs, " at 256 px"), tvl1,
                   device, o));
  }

  // The speed table (speed-ups over the first CPU row, at equal iterations: TV-L1's defaults
  // everywhere), then the accuracy table (one column per case).
  const double baseline = rows.empty() || !rows.front().skipped.empty() ? 0 : rows.front().ms_per_pair;
  std::printf("\n| row | where | ms per pair | vs CPU | ms per sample |\n|---|---|---|---|---|\n");
  for (const BenchFlowRow& r : rows) {
    if (!r.skipped.empty()) {
      std::printf("| %s | %s | skipped: %s | | |\n", r.name.c_str(), r.where.c_str(), r.skipped.c_str());
      continue;
    }
    const bool pair_row = r.ms_per_sample < 0;
    std::printf("| %s | %s | %s | %s | %s |\n", r.name.c_str(), r.where.c_str(),
                pair_row ? number(r.ms_per_pair, "%.2f").c_str() : "-",
                pair_row && baseline > 0 ? number(baseline / r.ms_per_pair, "%.1fx").c_str() : "-",
                number(r.ms_per_sample, "%.2f").c_str());
  }
  std::printf("\nend-point error (px, mean over the pixels with defined flow):\n| row |");
  for (const FlowCase& c : cases) std::printf(" %s |", c.name.c_str());
  std::printf("\n|---|");
  for (size_t k = 0; k < cases.size(); ++k) std::printf("---|");
  std::printf("\n");
  for (const BenchFlowRow& r : rows) {
    if (r.epe.empty() || (r.where.rfind("cpu x", 0) == 0 && &r != &rows.front())) continue;  // one CPU row
    std::printf("| %s |", r.name.c_str());
    for (const auto& [name, value] : r.epe) std::printf(" %.3f |", value);
    std::printf("\n");
  }
  std::fflush(stdout);
  if (!o.json_path.empty()) {
    nlohmann::json j = {{"suite", "flow"},
                        {"height", o.height},
                        {"width", o.width},
                        {"device", device.str()},
                        {"cpu_cores", allowed_cpu_count()},
                        {"rows", nlohmann::json::array()}};
    for (const BenchFlowRow& r : rows)
      j["rows"].push_back({{"name", r.name},
                           {"algorithm", r.algorithm},
                           {"where", r.where},
                           {"ms_per_pair", r.ms_per_pair},
                           {"epe", nlohmann::json(r.epe)},
                           {"ms_per_sample", r.ms_per_sample},
                           {"skipped", r.skipped}});
    write_text_synced(o.json_path, j.dump(2) + "\n");
  }
  return rows;
}

}  // namespace tt
