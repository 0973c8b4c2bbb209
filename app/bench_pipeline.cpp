// `teletron bench --suite pipeline` (see bench_pipeline.h).
#include "app/bench_pipeline.h"

#include <ATen/Parallel.h>
#include <torch/cuda.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <sched.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <sstream>
#include <thread>

#include "app/bench_flow.h"
#include "app/bench_folder.h"
#include "app/bench_video.h"
#include "app/options.h"
#include "app/trainer.h"
#include "core/device.h"
#include "core/errors.h"
#include "core/file_io.h"
#include "core/safetensors.h"
#include "cuda/ops.h"
#include "model/vae.h"
#include "pipeline/augment.h"
#include "pipeline/frame_sampler.h"
#include "pipeline/optical_flow.h"
#include "pipeline/video_reader.h"

namespace tt {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

bool gpu_here(const std::string& device, std::string* why) {
  try {
    if (resolve_device(device, "--device").is_cuda()) return true;
    *why = "--device cpu";
  } catch (const Error& error) {
    *why = first_line(error.what());
  }
  return false;
}

BenchStageRow skipped_row(const std::string& stage, const std::string& name, const std::string& why) {
  BenchStageRow row;
  row.stage = stage;
  row.name = name;
  row.where = "cuda";
  row.skipped = why;
  return row;
}

// A bench-video run as a row.
BenchStageRow video_row(const std::string& stage, const std::string& name, const BenchPipelineOptions& o,
                        const std::string& mode, const std::string& device, int workers,
                        bool decoded_frames) {
  BenchStageRow row;
  row.stage = stage;
  row.name = name;
  row.where = mode == "cpu" || device == "cpu" ? "cpu" : "cuda";
  row.workers = workers;
  BenchVideoOptions v;
  v.clips = o.clips;
  v.mode = mode;
  v.device = device;
  v.workers = workers;
  v.passes = o.passes;
  v.frames = o.frames;
  v.sampler = o.sampler;
  v.height = o.height;
  v.width = o.width;
  v.label = str_cat(stage, ": ", name);
  try {
    const BenchVideoResult result = run_bench_video(v);
    if (decoded_frames) {
      row.value = result.decoded_frames_per_s;
      row.unit = "frames/s";
    } else if (stage == "pipeline") {
      row.value = result.clips_per_s;
      row.unit = "clips/s";
    } else {
      row.value = result.sampled_frames_per_s;
      row.unit = "frames/s";
    }
  } catch (const Error& error) {
    row.skipped = first_line(error.what());
  }
  return row;
}

// The sampled frames of the first clip, decoded on the CPU: the colour + augment stage's input.
DecodedFrames sampled_planes(const BenchPipelineOptions& o) {
  VideoReader reader(o.clips.front());
  FrameSamplerOptions sampler;
  TT_CHECK(parse_frame_sample_mode(o.sampler, &sampler.mode), ErrorCode::kConfig, "--sampler: unknown mode ",
           o.sampler);
  sampler.samples = o.frames;
  if (sampler.mode == FrameSampleMode::kFps || sampler.mode == FrameSampleMode::kMotion)
    sampler.target_fps = 24.0;
  std::vector<int64_t> frames = sample_frames(sampler, reader.index().times(), 1234, 0, 0, nullptr);
  frames.erase(std::unique(frames.begin(), frames.end()), frames.end());
  return reader.decode(frames);
}

// Planes -> RGB -> rotation -> the fused augment, as the clip loader does it.
torch::Tensor colour_augment(const DecodedFrames& planes, int rotation, const AugmentOptions& augment,
                             int64_t height, int64_t width, int64_t sample) {
  const torch::Tensor rgb = rotate_frames(yuv420_to_rgb(planes.y, planes.uv, yuv_format(planes)), rotation);
  return augment_clip(rgb, draw_augment_params(augment, 1234, 0, sample), height, width, augment.dtype);
}

std::vector<BenchStageRow> colour_rows(const BenchPipelineOptions& o, int workers) {
  std::vector<BenchStageRow> rows;
  const DecodedFrames planes = sampled_planes(o);
  const int rotation = VideoReader(o.clips.front()).info().rotation;
  const int64_t frames = planes.y.size(0);
  const int64_t repeats = std::max<int64_t>(4, 2 * o.passes);
  AugmentOptions augment;
  augment.flip = 0.5;
  {  // CPU: W threads of one LibTorch thread, each converting the clip `repeats` times.
    BenchStageRow row;
    row.stage = "colour+augment";
    row.name = str_cat("CPU reference, ", workers, " thread(s)");
    row.where = "cpu";
    row.workers = workers;
    augment.dtype = torch::kFloat32;
    const TorchThreads one(1);
    const auto start = Clock::now();
    run_threads(workers, [&](int w) {
      for (int64_t r = 0; r < repeats; ++r) colour_augment(planes, rotation, augment, o.height, o.width, w * repeats + r);
    });
    row.value = static_cast<double>(workers * repeats * frames) / seconds_since(start);
    row.unit = "frames/s";
    rows.push_back(row);
  }
  std::string why;
  if (!gpu_here(o.device, &why)) {
    rows.push_back(skipped_row("colour+augment", "CUDA kernels", why));
    return rows;
  }
  BenchStageRow row;
  row.stage = "colour+augment";
  row.name = "CUDA kernels";
  row.where = "cuda";
  const torch::Device device = resolve_device(o.device, "--device");
  DecodedFrames on_gpu = planes;
  on_gpu.y = planes.y.to(device);
  on_gpu.uv = planes.uv.to(device);
  augment.dtype = torch::kBFloat16;
  for (int64_t r = 0; r < 2; ++r) colour_augment(on_gpu, rotation, augment, o.height, o.width, r);  // warm-up
  torch::cuda::synchronize(device.index());
  const int64_t count = repeats * workers;
  const auto start = Clock::now();
  for (int64_t r = 0; r < count; ++r) colour_augment(on_gpu, rotation, augment, o.height, o.width, r);
  torch::cuda::synchronize(device.index());
  row.value = static_cast<double>(count * frames) / seconds_since(start);
  row.unit = "frames/s";
  rows.push_back(row);
  return rows;
}

BenchStageRow flow_row(const BenchPipelineOptions& o, const std::string& name, const std::string& algorithm,
                       const std::string& device) {
  BenchFlowOptions f;
  f.device = device;
  f.frames = o.frames;
  f.height = o.height;
  f.width = o.width;
  f.pairs = 10;
  FlowOptions flow;
  flow.algorithm = algorithm;
  flow.fallback = "error";
  const BenchFlowRow r = bench_flow_sample(name, flow, device, f);
  BenchStageRow row;
  row.stage = "flow";
  row.name = name;
  row.where = device == "cpu" ? "cpu" : "cuda";
  row.skipped = r.skipped;
  if (r.skipped.empty() && r.ms_per_sample > 0) {
    row.value = 1000.0 / r.ms_per_sample;
    row.unit = "samples/s";
  }
  return row;
}

BenchStageRow vae_row(const BenchPipelineOptions& o) {
  BenchStageRow row;
  row.stage = "vae";
  row.name = str_cat("VAE encode (", o.vae_preset, ", random weights, frame windows)");
  std::string why;
  const bool gpu = gpu_here(o.device, &why);
  if (!gpu && o.vae_preset != "tiny") {
    row.where = "cuda";
    row.skipped = why;
    return row;
  }
  const torch::Device device = gpu ? resolve_device(o.device, "--device") : torch::Device(torch::kCPU);
  row.where = device.is_cuda() ? "cuda" : "cpu";
  try {
    const torch::Dtype dtype = device.is_cuda() ? torch::kBFloat16 : torch::kFloat32;
    HunyuanVae vae(hunyuan_vae_preset(o.vae_preset, "--vae-preset"));
    vae->randomize_weights(0);
    vae->to(device, dtype);
    vae->eval();
    torch::NoGradGuard no_grad;
    const torch::Tensor clip = (torch::rand({1, 3, o.frames, o.height, o.width}) * 2 - 1).to(device, dtype);
    const VaeTiling tiling;  // diffusers' default: frame windows
    auto sync = [&] {
      if (device.is_cuda()) torch::cuda::synchronize(device.index());
    };
    vae->encode_mean(clip, tiling);
    sync();
    const int64_t count = device.is_cuda() ? 5 : 1;
    const auto start = Clock::now();
    for (int64_t i = 0; i < count; ++i) vae->encode_mean(clip, tiling);
    sync();
    row.value = static_cast<double>(count) / seconds_since(start);
    row.unit = "samples/s";
  } catch (const Error& error) {
    row.skipped = first_line(error.what());
  }
  return row;
}

// Pins the calling thread (and the threads it starts from now on) to the first `cores` CPUs it may
// use, and LibTorch's pool to that many threads; restores both when it goes.
class PinnedCores {
 public:
  explicit PinnedCores(int cores) : threads_(cores) {
    CPU_ZERO(&before_);
    if (sched_getaffinity(0, sizeof(before_), &before_) != 0) return;
    cpu_set_t mine;
    CPU_ZERO(&mine);
    int taken = 0;
    for (int cpu = 0; cpu < CPU_SETSIZE && taken < cores; ++cpu)
      if (CPU_ISSET(cpu, &before_)) {
        CPU_SET(cpu, &mine);
        ++taken;
      }
    pinned_ = sched_setaffinity(0, sizeof(mine), &mine) == 0;
  }
  ~PinnedCores() {
    if (pinned_) sched_setaffinity(0, sizeof(before_), &before_);
  }
  // Note: the threads that exist already (LibTorch's pool, CUDA's) keep their own affinity; the
  // trainer's data threads, started after this, inherit it.
  PinnedCores(const PinnedCores&) = delete;
  PinnedCores& operator=(const PinnedCores&) = delete;

 private:
  TorchThreads threads_;
  cpu_set_t before_;
  bool pinned_ = false;
};

// `teletron train` on the clips, per core count and path (see bench_pipeline.h).
std::vector<BenchStageRow> training_rows(const BenchPipelineOptions& o, bool gpu, int cores) {
  std::vector<BenchStageRow> rows;
  if (o.train_steps <= 0) return rows;
  BenchFolder work(o.work_dir);
  const HunyuanVideoConfig model = model_config_from(o.config.model);
  std::string manifest_text;
  torch::manual_seed(11);
  for (size_t k = 0; k < o.clips.size(); ++k) {
    const std::string embeddings =
        (std::filesystem::path(work.path()) / str_cat("text_", k, ".safetensors")).string();
    safetensors::save(embeddings, {{"text_states", torch::randn({o.text_tokens, model.text_embed_dim}) * 0.1},
                                   {"text_mask", torch::ones({o.text_tokens}, torch::kUInt8)},
                                   {"pooled", torch::randn({model.pooled_projection_dim}) * 0.1}});
    manifest_text += nlohmann::json{{"video", std::filesystem::absolute(o.clips[k]).string()},
                                    {"text_embeddings", embeddings}}
                         .dump() +
                     "\n";
  }
  const std::string manifest = (std::filesystem::path(work.path()) / "manifest.jsonl").string();
  write_text_synced(manifest, manifest_text);
  const int64_t total = o.train_warmup + o.train_steps;
  const int64_t every = std::gcd(std::max<int64_t>(1, o.train_warmup), o.train_steps);
  // Every W: the GPU path (with a GPU) and the CPU path; then, at the largest W, the first path
  // again with the flow stage off, so that the stage's cost shows as a difference of wall times.
  struct Spec {
    int workers;
    bool gpu_path, flow_off;
  };
  std::vector<Spec> specs;
  int largest = 0;
  for (int w : o.cores) {
    if (w > cores) continue;
    largest = std::max(largest, w);
    if (gpu) specs.push_back({w, true, false});
    specs.push_back({w, false, false});
  }
  if (largest > 0 && o.config.data_pipeline.optical_flow.algorithm != "none") specs.push_back({largest, gpu, true});
  for (const Spec& spec : specs) {
    {
      const int w = spec.workers;
      const bool gpu_path = spec.gpu_path;
      BenchStageRow row;
      row.stage = "training";
      row.name = str_cat(gpu_path ? "GPU path" : "CPU path", ", ", w, " core(s)", spec.flow_off ? ", flow stage off" : "");
      row.where = gpu_path ? "cuda" : "cpu";
      row.workers = w;
      Config c = o.config;
      c.data.source = "video";
      c.data.manifest = manifest;
      c.data.buckets = {Bucket{o.frames, o.height, o.width}};
      c.vae.preset = o.vae_preset;
      c.vae.weights = "random";
      c.data_pipeline.workers = w;
      c.data_pipeline.video_decoding = gpu_path ? "nvdec" : "cpu";
      c.data_pipeline.frame_sampler.mode = o.sampler;
      c.data_pipeline.frame_sampler.target_fps = 24.0;
      if (spec.flow_off) c.data_pipeline.optical_flow.algorithm = "none";
      c.batch_size = 1;
      c.batch_size_dynamic = false;
      c.gradient_accumulation = 1;
      c.train.device = gpu ? o.device : "cpu";
      c.train.max_steps = total;
      c.train.log_every = every;
      c.train.checkpoint_every = total;
      // The rows time steps, not start-up: the memory estimate's probes (shallow models' steps in two
      // checkpointing modes) are left out of every row's start; a step that does not fit still stops
      // its row with TT_ERR_MEMORY, which the table shows.
      c.train.memory_check = false;
      c.train.output_dir = (std::filesystem::path(work.path()) / str_cat("run_", rows.size())).string();
      TrainRequest request{c, "", {}, ""};
      request.checkpoints = false;
      spdlog::info("bench --suite pipeline: training, {}", row.name);
      try {
        const PinnedCores pinned(w);
        run_training(request);
      } catch (...) {
        row.skipped = first_line(format_error(error_of_current_exception()));
        rows.push_back(row);
        continue;
      }
      double samples = 0, seconds = 0, waited = 0, flow_ms = 0, flow_s = 0;
      int64_t previous = 0;
      for (const nlohmann::json& m : read_jsonl(c.train.output_dir + "/metrics.jsonl")) {
        const int64_t step = m.at("step").get<int64_t>();
        const int64_t covered = step - previous;
        previous = step;
        if (step <= o.train_warmup || step > total) continue;
        const double s = m.at("step_ms").get<double>() / 1000.0 * static_cast<double>(covered);
        seconds += s;
        samples += m.at("samples_per_s").get<double>() * s;
        waited += m.value("data_wait_share", 0.0) * s;
        if (m.contains("flow_gpu_ms_per_sample")) {
          flow_ms += m.at("flow_gpu_ms_per_sample").get<double>() * s;
          flow_s += s;
        }
      }
      if (seconds <= 0) {
        row.skipped = "no timed steps in metrics.jsonl";
      } else {
        row.value = samples / seconds;
        row.unit = "samples/s";
        row.data_wait_share = waited / seconds;
        row.step_ms = 1000.0 * seconds / static_cast<double>(o.train_steps);
        if (flow_s > 0) row.flow_gpu_ms = flow_ms / flow_s;
      }
      rows.push_back(row);
    }
  }
  return rows;
}

nlohmann::json to_json(const BenchStageRow& r) {
  return {{"stage", r.stage},     {"name", r.name},       {"where", r.where},
          {"workers", r.workers}, {"value", r.value},     {"unit", r.unit},
          {"vs_cpu", r.vs_cpu},   {"skipped", r.skipped}, {"data_wait_share", r.data_wait_share}};
}

std::string format(const char* pattern, double value) {
  char text[48];
  std::snprintf(text, sizeof(text), pattern, value);
  return text;
}

}  // namespace

std::vector<BenchStageRow> run_bench_pipeline(const BenchPipelineOptions& o, int* regressions) {
  TT_CHECK_HINT(!o.clips.empty(), ErrorCode::kConfig, "e.g. --clips a.mp4,b.mp4",
                "bench --suite pipeline needs video clips (--clips)");
  const int cores = allowed_cpu_count();
  const int workers = std::max(1, std::min(o.workers, cores));
  std::string why_not_gpu;
  const bool gpu = gpu_here(o.device, &why_not_gpu);
  std::printf(
      "bench --suite pipeline: %zu clip(s), %lld frames -> %lldx%lld, sampler %s, %d of %d CPU cores for "
      "the stage rows, %s\n",
      o.clips.size(), static_cast<long long>(o.frames), static_cast<long long>(o.height),
      static_cast<long long>(o.width), o.sampler.c_str(), workers, cores,
      gpu ? ("GPU rows on " + o.device).c_str() : ("no GPU rows: " + why_not_gpu).c_str());
  std::fflush(stdout);
  std::vector<BenchStageRow> rows;
  auto gpu_row = [&](const std::string& stage, const std::string& name, auto make) {
    rows.push_back(gpu ? make() : skipped_row(stage, name, why_not_gpu));
  };
  rows.push_back(video_row("decode", str_cat("FFmpeg on the CPU, ", workers, " thread(s)"), o, "decode-only",
                           "cpu", workers, true));
  gpu_row("decode", str_cat("NVDEC, ", workers, " session(s)"), [&] {
    return video_row("decode", str_cat("NVDEC, ", workers, " session(s)"), o, "decode-only", o.device,
                     workers, true);
  });
  rows.push_back(video_row("sampling", str_cat("sampled frames decoded on the CPU, ", workers, " thread(s)"),
                           o, "sample", "cpu", workers, false));
  gpu_row("sampling", str_cat("sampled frames decoded on NVDEC, ", workers, " session(s)"), [&] {
    return video_row("sampling", str_cat("sampled frames decoded on NVDEC, ", workers, " session(s)"), o,
                     "sample", o.device, workers, false);
  });
  for (BenchStageRow& row : colour_rows(o, workers)) rows.push_back(row);
  rows.push_back(flow_row(o, "TV-L1 on the CPU, K = 4 at 256 px", "tvl1", "cpu"));
  gpu_row("flow", "NVOFA, K = 4 at 256 px",
          [&] { return flow_row(o, "NVOFA, K = 4 at 256 px", "nvofa", o.device); });
  gpu_row("flow", "TV-L1 CUDA, K = 4 at 256 px",
          [&] { return flow_row(o, "TV-L1 CUDA, K = 4 at 256 px", "tvl1", o.device); });
  rows.push_back(vae_row(o));
  for (int w : o.cores) {
    if (w > cores) {
      std::printf("  pipeline with %d workers: skipped, this process may use %d cores\n", w, cores);
      continue;
    }
    rows.push_back(video_row("pipeline", str_cat("CPU path, ", w, " worker(s)"), o, "cpu", "cpu", w, false));
    gpu_row("pipeline", str_cat("GPU path, ", w, " worker(s)"), [&] {
      return video_row("pipeline", str_cat("GPU path, ", w, " worker(s)"), o, "gpu", o.device, w, false);
    });
  }

  for (BenchStageRow& row : training_rows(o, gpu, cores)) rows.push_back(row);

  // Ratios to each stage's CPU row (the pipeline and training rows: to the CPU path with the same
  // workers).
  auto flow_off = [](const BenchStageRow& r) { return r.name.find(", flow stage off") != std::string::npos; };
  for (BenchStageRow& row : rows) {
    if (!row.skipped.empty() || row.value <= 0 || flow_off(row)) continue;
    for (const BenchStageRow& base : rows)
      if (base.stage == row.stage && base.where == "cpu" && base.skipped.empty() && base.value > 0 && !flow_off(base) &&
          ((row.stage != "pipeline" && row.stage != "training") || base.workers == row.workers)) {
        row.vs_cpu = row.value / base.value;
        break;
      }
  }
  // Training rows also: the data wait, and the flow stage's GPU time per sample against the step's
  // wall time per sample (batch 1: the step's), the issue's < 2 % target.
  std::printf("\n| stage | row | where | throughput | vs CPU | data wait | flow / step |\n"
              "|---|---|---|---|---|---|---|\n");
  for (const BenchStageRow& r : rows) {
    if (!r.skipped.empty()) {
      std::printf("| %s | %s | %s | skipped: %s | | | |\n", r.stage.c_str(), r.name.c_str(), r.where.c_str(),
                  r.skipped.c_str());
      continue;
    }
    const std::string flow_share =
        r.flow_gpu_ms >= 0 && r.step_ms > 0
            ? str_cat(format("%.2f", r.flow_gpu_ms), " / ", format("%.0f", r.step_ms), " ms = ",
                      format("%.2f %%", 100.0 * r.flow_gpu_ms / r.step_ms))
            : "-";
    std::printf("| %s | %s | %s | %s %s | %s | %s | %s |\n", r.stage.c_str(), r.name.c_str(), r.where.c_str(),
                format(r.value >= 100 ? "%.0f" : "%.2f", r.value).c_str(), r.unit.c_str(),
                r.vs_cpu > 0 ? format("%.2fx", r.vs_cpu).c_str() : "-",
                r.data_wait_share >= 0 ? format("%.0f %%", 100.0 * r.data_wait_share).c_str() : "-",
                flow_share.c_str());
  }
  // The flow stage's cost in training: the same path and cores with the stage on and off.
  for (const BenchStageRow& off : rows) {
    const std::string suffix = ", flow stage off";
    if (off.stage != "training" || !off.skipped.empty() || off.name.size() < suffix.size() ||
        off.name.compare(off.name.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    const std::string on_name = off.name.substr(0, off.name.size() - suffix.size());
    for (const BenchStageRow& on : rows)
      if (on.stage == "training" && on.name == on_name && on.skipped.empty() && off.step_ms > 0)
        std::printf("flow stage in training (%s): %.1f ms/step with it, %.1f ms without: %+.2f %% of the step\n",
                    on_name.c_str(), on.step_ms, off.step_ms, 100.0 * (on.step_ms - off.step_ms) / off.step_ms);
  }
  std::fflush(stdout);
  if (!o.json_path.empty()) {
    nlohmann::json j = {{"suite", "pipeline"}, {"clips", o.clips},
                        {"frames", o.frames},  {"height", o.height},
                        {"width", o.width},    {"sampler", o.sampler},
                        {"cpu_cores", cores},  {"rows", nlohmann::json::array()}};
    for (const BenchStageRow& r : rows) j["rows"].push_back(to_json(r));
    write_text_synced(o.json_path, j.dump(2) + "\n");
  }
  if (!o.plot_path.empty()) write_pipeline_plot(rows, o.plot_path);
  const int flagged =
      o.compare_path.empty() ? 0 : compare_pipeline_rows(rows, o.compare_path, o.compare_threshold);
  if (regressions != nullptr) *regressions = flagged;
  return rows;
}

int compare_pipeline_rows(const std::vector<BenchStageRow>& rows, const std::string& old_json,
                          double threshold) {
  std::ifstream in(old_json);
  TT_CHECK_HINT(in.good(), ErrorCode::kIo, "give a file an earlier `bench --suite pipeline --json` wrote",
                "--compare: cannot read ", old_json);
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json old = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  TT_CHECK_HINT(old.is_object() && old.value("suite", "") == "pipeline" && old.contains("rows") &&
                    old["rows"].is_array(),
                ErrorCode::kData, "give a file an earlier `bench --suite pipeline --json` wrote",
                "--compare: ", old_json, " is not a bench --suite pipeline JSON file");
  std::map<std::pair<std::string, std::string>, double> before;
  try {
    for (const nlohmann::json& r : old["rows"])
      if (r.is_object() && r.value("skipped", "").empty() && r.value("value", 0.0) > 0)
        before[{r.value("stage", ""), r.value("name", "")}] = r.value("value", 0.0);
  } catch (const nlohmann::json::exception& error) {  // a field of another type
    throw Error(ErrorCode::kData, str_cat("--compare: ", old_json, ": a row is not a bench row (", error.what(), ")"),
                "give a file an earlier `bench --suite pipeline --json` wrote");
  }
  std::printf(
      "\ncompared with %s (flagged: slower than %.0f %% of before)\n| stage | row | before | now | ratio |  "
      "|\n"
      "|---|---|---|---|---|---|\n",
      old_json.c_str(), 100.0 * (1.0 - threshold));
  int flagged = 0;
  for (const BenchStageRow& r : rows) {
    const auto found = before.find({r.stage, r.name});
    if (found == before.end() || !r.skipped.empty() || r.value <= 0) continue;
    const double ratio = r.value / found->second;
    const bool slower = ratio < 1.0 - threshold;
    flagged += slower ? 1 : 0;
    std::printf("| %s | %s | %.2f | %.2f | %.2fx | %s |\n", r.stage.c_str(), r.name.c_str(), found->second,
                r.value, ratio, slower ? "REGRESSION" : "");
  }
  std::printf("%d regression(s)\n", flagged);
  std::fflush(stdout);
  return flagged;
}

void write_pipeline_plot(const std::vector<BenchStageRow>& rows, const std::string& path) {
  std::vector<const BenchStageRow*> shown;
  for (const BenchStageRow& r : rows)
    if (r.skipped.empty() && r.value > 0) shown.push_back(&r);
  double high = 1.0;
  for (const BenchStageRow* r : shown) high = std::max(high, r->value);
  const double top = std::pow(10.0, std::ceil(std::log10(high)));
  const double bottom = std::pow(10.0, std::floor(std::log10(std::max(1e-3, top / 1e6))));
  const int left = 420, bar_area = 520, row_h = 22, head = 40;
  const int height = head + row_h * static_cast<int>(shown.size()) + 40;
  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << left + bar_area + 140 << "\" height=\""
      << height << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
      << "<text x=\"10\" y=\"20\" font-size=\"14\">teletron bench --suite pipeline: throughput per stage "
         "(log "
         "scale; blue CPU, green GPU)</text>\n";
  auto x_of = [&](double v) {
    return left + bar_area * (std::log10(std::max(v, bottom)) - std::log10(bottom)) /
                      (std::log10(top) - std::log10(bottom));
  };
  for (double tick = bottom; tick <= top * 1.0001; tick *= 10)
    svg << "<line x1=\"" << x_of(tick) << "\" y1=\"" << head - 8 << "\" x2=\"" << x_of(tick) << "\" y2=\""
        << height - 30 << "\" stroke=\"#ddd\"/><text x=\"" << x_of(tick) << "\" y=\"" << height - 14
        << "\" text-anchor=\"middle\">" << format(tick >= 1 ? "%.0f" : "%g", tick) << "</text>\n";
  auto escape = [](const std::string& text) {
    std::string out;
    for (char c : text) out += c == '&' ? "&amp;" : c == '<' ? "&lt;" : c == '>' ? "&gt;" : std::string(1, c);
    return out;
  };
  for (size_t i = 0; i < shown.size(); ++i) {
    const BenchStageRow& r = *shown[i];
    const int y = head + row_h * static_cast<int>(i);
    svg << "<text x=\"" << left - 6 << "\" y=\"" << y + 14 << "\" text-anchor=\"end\">"
        << escape(r.stage + ": " + r.name) << "</text><rect x=\"" << left << "\" y=\"" << y + 3
        << "\" width=\"" << std::max(1.0, x_of(r.value) - left) << "\" height=\"" << row_h - 6 << "\" fill=\""
        << (r.where == "cpu" ? "#4a7bd0" : "#3fa34d") << "\"/><text x=\"" << x_of(r.value) + 4 << "\" y=\""
        << y + 14 << "\">" << format(r.value >= 100 ? "%.0f" : "%.2f", r.value) << " " << r.unit
        << "</text>\n";
  }
  svg << "</svg>\n";
  write_text_synced(path, svg.str());
}

}  // namespace tt
