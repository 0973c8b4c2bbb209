// `teletron bench-video` (see bench_video.h).
#include "app/bench_video.h"

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#ifdef TELETRON_WITH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

#include <atomic>
#include <chrono>
#include <cstdio>
#include <exception>
#include <fstream>
#include <memory>
#include <thread>

#include "app/bench_folder.h"
#include "core/device.h"
#include "core/errors.h"
#include "core/stream_handoff.h"
#include "cuda/ops.h"
#include "pipeline/clip_loader.h"
#include "pipeline/video_reader.h"

namespace tt {
namespace {

struct Totals {
  std::atomic<int64_t> clips{0}, decoded{0}, needed{0}, nvdec{0}, seeks{0}, inits{0};
  std::atomic<int64_t> gpu_stage_us{0}, gpu_stage_clips{0};  // --time-gpu-stages
  // Each clip's wall time in its worker: opening the reader (demuxer, codec and NVDEC device context,
  // the frame index: every packet demuxed), the mode's work (decoding and what follows), closing it
  // (the decoder and its surfaces freed: on NVDEC, cuvidDestroyDecoder and cuMemFree).
  std::atomic<int64_t> open_us{0}, work_us{0}, close_us{0};
};

using Clock = std::chrono::steady_clock;

int64_t micros_since(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start).count();
}

// What the per-clip work of a mode is, for the printed line.
const char* work_name(const std::string& mode) {
  if (mode == "decode-only") return "decoding every frame";
  if (mode == "sample") return "seeking and decoding the sampled frames";
  return "decoding, colour and augment";
}

// One clip through the chosen pipeline; returns after its output exists (GPU work finished).
void process(const BenchVideoOptions& o, const std::string& path, int64_t sample_index, Totals& totals) {
  VideoReaderOptions reader_options;
  reader_options.skip_unneeded_frames = o.skip_unneeded;
  reader_options.reseek_gap = o.reseek_gap;
  reader_options.flush_on_seek = o.flush_on_seek;
  reader_options.thread_count = 1;  // parallel across clips, as the workers are
  reader_options.device = o.mode == "cpu" ? torch::Device(torch::kCPU) : resolve_device(o.device, "--device");
  const Clock::time_point opening = Clock::now();
  auto owned = std::make_unique<VideoReader>(path, reader_options);
  VideoReader& reader = *owned;
  const Clock::time_point opened = Clock::now();
  totals.open_us += micros_since(opening);
  if (o.mode == "decode-only") {
    const ScanReport report = reader.scan();
    totals.decoded += report.frames_decoded;
    totals.needed += report.frames_decoded;
  } else if (o.mode == "sample") {
    FrameSamplerOptions sampler;
    TT_CHECK(parse_frame_sample_mode(o.sampler, &sampler.mode), ErrorCode::kConfig, "--sampler: unknown mode ",
             o.sampler);
    sampler.samples = o.frames;
    if (sampler.mode == FrameSampleMode::kFps || sampler.mode == FrameSampleMode::kMotion) sampler.target_fps = 24.0;
    std::vector<int64_t> frames = sample_frames(sampler, reader.index().times(), 1234, 0, sample_index, nullptr);
    frames.erase(std::unique(frames.begin(), frames.end()), frames.end());
    const DecodedFrames decoded = reader.decode(frames);
#ifdef TELETRON_WITH_CUDA
    if (decoded.y.is_cuda()) c10::cuda::getCurrentCUDAStream(decoded.y.device().index()).synchronize();
#endif
    totals.decoded += reader.last_decoded_count();
    totals.needed += static_cast<int64_t>(frames.size());
  } else {
    ClipRequest request;
    TT_CHECK(parse_frame_sample_mode(o.sampler, &request.sampler.mode), ErrorCode::kConfig, "--sampler: unknown mode ",
             o.sampler);
    request.sampler.samples = o.frames;
    if (request.sampler.mode == FrameSampleMode::kFps || request.sampler.mode == FrameSampleMode::kMotion)
      request.sampler.target_fps = 24.0;
    request.augment.flip = 0.5;
    request.augment.dtype = torch::kBFloat16;
    request.height = o.height;
    request.width = o.width;
    request.seed = 1234;
    request.sample_index = sample_index;
    request.time_gpu_stages = o.time_gpu_stages;
    const LoadedClip loaded = load_clip(reader, request);
    if (loaded.gpu_stages) {
      totals.gpu_stage_us += static_cast<int64_t>(loaded.gpu_stages->elapsed_ms() * 1000.0);
      ++totals.gpu_stage_clips;
    }
    const torch::Tensor& clip = loaded.pixels;  // (3, T, H, W) bf16
    TT_CHECK(clip.size(1) == o.frames, ErrorCode::kInternal, "bench-video produced ", clip.size(1), " frames");
    std::vector<int64_t> unique = loaded.frames;
    unique.erase(std::unique(unique.begin(), unique.end()), unique.end());
#ifdef TELETRON_WITH_CUDA
    if (clip.is_cuda()) c10::cuda::getCurrentCUDAStream(clip.device().index()).synchronize();
#endif
    totals.decoded += reader.last_decoded_count();
    totals.needed += static_cast<int64_t>(unique.size());
  }
  totals.work_us += micros_since(opened);
  totals.nvdec += reader.info().decode_path == "nvdec" ? 1 : 0;
  totals.seeks += reader.last_seek_count();
  totals.inits += reader.nvdec_decoder_inits();
  const Clock::time_point closing = Clock::now();
  owned.reset();
  totals.close_us += micros_since(closing);
  ++totals.clips;
}

}  // namespace

BenchVideoResult run_bench_video(const BenchVideoOptions& o) {
  TT_CHECK(!o.clips.empty(), ErrorCode::kConfig, "bench-video needs at least one clip");
  TT_CHECK(o.mode == "decode-only" || o.mode == "sample" || o.mode == "gpu" || o.mode == "cpu", ErrorCode::kConfig,
           "--mode: decode-only, sample, gpu or cpu, got ", o.mode);
  // One core per worker in cpu mode (the workers are the parallelism); LibTorch's count comes back
  // however this returns.
  const TorchThreads threads(o.mode == "cpu" ? 1 : at::get_num_threads());
  const bool on_gpu = o.mode != "cpu" && resolve_device(o.device, "--device").is_cuda();  // a bad --device: here
  const int workers = std::max(1, o.workers);
  // Every worker busy for the whole row: with fewer clips than workers the list is cycled (each
  // repeat samples other frames: the sample index differs), else a 16-worker row timed 4 clips.
  const int64_t tasks =
      std::max(static_cast<int64_t>(o.clips.size()), static_cast<int64_t>(workers)) * std::max(1, o.passes);

  auto run_workers = [&](int64_t count, Totals& totals) {
    std::atomic<int64_t> next{0};
    std::vector<std::thread> threads;
    std::vector<std::exception_ptr> errors(workers);
    for (int w = 0; w < workers; ++w) {
      threads.emplace_back([&, w] {
        try {
          const SideStream stream(on_gpu && torch::cuda::is_available() ? torch::Device(torch::kCUDA, 0)
                                                                         : torch::Device(torch::kCPU));
          for (int64_t t = next++; t < count; t = next++)
            process(o, o.clips[t % o.clips.size()], t, totals);
        } catch (...) {
          errors[w] = std::current_exception();
        }
      });
    }
    for (auto& thread : threads) thread.join();
    for (const std::exception_ptr& error : errors)  // the first worker's error, as it was thrown
      if (error) std::rethrow_exception(error);
  };

  Totals warmup;
  run_workers(workers, warmup);  // one clip per worker: CUDA/NVDEC start-up, allocator, page cache
  Totals totals;
  const auto start = Clock::now();
  run_workers(tasks, totals);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();

  const int cpus = allowed_cpu_count();
  const double clips_per_s = static_cast<double>(totals.clips) / seconds;
  const double decoded_per_s = static_cast<double>(totals.decoded) / seconds;
  std::printf("bench-video %s: mode %s, %d workers, %d CPU cores, skip %s: %lld clips in %.2f s -> %.2f clips/s, "
              "%.0f decoded frames/s (%lld decoded, %lld needed, %.1f decoded, %.1f seeks and %.1f NVDEC decoder inits per "
              "clip; %lld of %lld clips on NVDEC)\n",
              o.label.c_str(), o.mode.c_str(), workers, cpus, o.skip_unneeded ? "on" : "off",
              static_cast<long long>(totals.clips.load()), seconds, clips_per_s, decoded_per_s,
              static_cast<long long>(totals.decoded.load()), static_cast<long long>(totals.needed.load()),
              static_cast<double>(totals.decoded) / static_cast<double>(totals.clips),
              static_cast<double>(totals.seeks) / static_cast<double>(totals.clips),
              static_cast<double>(totals.inits) / static_cast<double>(totals.clips),
              static_cast<long long>(totals.nvdec.load()), static_cast<long long>(totals.clips.load()));
  const double gpu_stage_ms =
      totals.gpu_stage_clips > 0
          ? static_cast<double>(totals.gpu_stage_us) / 1000.0 / static_cast<double>(totals.gpu_stage_clips)
          : -1.0;
  if (gpu_stage_ms >= 0)
    std::printf("bench-video %s: GPU kernels after decoding (colour, rotation, gather, augment): %.2f ms per clip "
                "(CUDA events; NVDEC runs on its own engines, not the SMs)\n",
                o.label.c_str(), gpu_stage_ms);
  const double clips_done = static_cast<double>(std::max<int64_t>(1, totals.clips));
  const double open_ms = static_cast<double>(totals.open_us) / 1000.0 / clips_done;
  const double work_ms = static_cast<double>(totals.work_us) / 1000.0 / clips_done;
  const double close_ms = static_cast<double>(totals.close_us) / 1000.0 / clips_done;
  std::printf("bench-video %s: per clip in its worker, %.1f ms opening it (demuxer, decoder, frame index), %.1f ms "
              "%s, %.1f ms closing it\n",
              o.label.c_str(), open_ms, work_ms, work_name(o.mode), close_ms);
  if (!o.json.empty()) {
    nlohmann::json row = {{"label", o.label},          {"mode", o.mode},
                          {"workers", workers},        {"cpu_cores", cpus},
                          {"skip_unneeded", o.skip_unneeded}, {"reseek_gap", o.reseek_gap},
                          {"flush_on_seek", o.flush_on_seek},
                          {"frames", o.frames},        {"sampler", o.sampler},
                          {"clips", totals.clips.load()}, {"seconds", seconds},
                          {"clips_per_s", clips_per_s}, {"decoded_frames", totals.decoded.load()},
                          {"needed_frames", totals.needed.load()}, {"decoded_frames_per_s", decoded_per_s},
                          {"nvdec_clips", totals.nvdec.load()}, {"seeks", totals.seeks.load()}, {"nvdec_inits", totals.inits.load()},
                          {"gpu_stage_ms_per_clip", gpu_stage_ms}, {"open_ms_per_clip", open_ms},
                          {"work_ms_per_clip", work_ms}, {"close_ms_per_clip", close_ms}};
    std::ofstream out(o.json, std::ios::app);
    out << row.dump() << "\n";
  }
  BenchVideoResult result;
  result.clips = totals.clips;
  result.seconds = seconds;
  result.clips_per_s = clips_per_s;
  result.decoded_frames_per_s = decoded_per_s;
  result.sampled_frames_per_s = o.mode == "decode-only" ? decoded_per_s : clips_per_s * static_cast<double>(o.frames);
  result.cpu_cores = cpus;
  result.nvdec_clips = totals.nvdec;
  return result;
}

}  // namespace tt
