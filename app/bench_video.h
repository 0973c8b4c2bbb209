// `teletron bench-video CLIP...`: times the video data pipeline on real files, for BENCHMARKS.md.
// Modes: decode-only (every frame, VideoReader::scan, no conversion: the decoder's ceiling), sample
// (the sampler's frames decoded, planes only: frame sampling without colour or augment), gpu
// (NVDEC where the GPU takes the stream -> sampled frames -> CUDA colour kernel -> fused augment
// kernel -> (3, T, H, W) bf16 per clip on the GPU) and cpu (CPU decode -> colour reference ->
// torch resize/crop/normalise on the host: every stage on the CPU). Workers are threads, each
// with its own reader per clip (one NVDEC session each) and, on the GPU, its own stream. Reports
// decoded frames/s (every frame the decoder produced, needed or not), clips/s (a clip = every
// frame its sample needs decoded and augmented) and the CPU cores the process may run on.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tt {

struct BenchVideoOptions {
  std::vector<std::string> clips;
  std::string mode = "gpu";    // decode-only | sample | gpu | cpu
  int workers = 4;             // concurrent clips (NVDEC sessions on the GPU)
  int passes = 2;              // max(clips, workers) x passes clips timed, the list cycled (after one
                               // warm-up clip per worker)
  int64_t frames = 33;         // samples per clip
  std::string sampler = "stratified";
  int64_t height = 480, width = 832;
  bool skip_unneeded = true;   // skip_frame NONREF on frames no sample needs
  int64_t reseek_gap = -1;     // VideoReaderOptions::reseek_gap (-1: the reader's default)
  int flush_on_seek = -1;      // VideoReaderOptions::flush_on_seek (-1: the reader's default)
  std::string device = "cuda"; // for decode-only, sample and gpu (sample on cpu: the CPU decoder)
  bool time_gpu_stages = false; // gpu mode: CUDA-event time of the kernels after decoding, per clip
  std::string label;           // printed with the result
  std::string json;            // append a JSON line here
};

struct BenchVideoResult {
  int64_t clips = 0;
  double seconds = 0;
  double clips_per_s = 0;
  double decoded_frames_per_s = 0;
  double sampled_frames_per_s = 0;  // clips/s x frames per sample (decode-only: decoded frames/s)
  int cpu_cores = 0;
  int64_t nvdec_clips = 0;
};

/// Prints its line (and appends the JSON line) and returns the numbers.
BenchVideoResult run_bench_video(const BenchVideoOptions& options);

}  // namespace tt
