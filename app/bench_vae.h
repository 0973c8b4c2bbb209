// `teletron bench-vae`: times the VAE encoder (VAE encode per clip, the pipeline's most expensive
// stage) on a random clip, whole and tiled, and reports ms per clip and peak memory. `--dump DIR`
// also writes the weights (diffusers layout + config.json), the input and teletron's moments, so
// scripts/bench_vae_diffusers.py can time diffusers on the same weights and input in the same run
// and compare the outputs.
#pragma once

#include <cstdint>
#include <string>

namespace tt {

struct BenchVaeOptions {
  std::string preset = "hunyuan";
  std::string weights;  // "" or "random" = fixed random weights
  std::string device = "cuda";
  int64_t frames = 33, height = 480, width = 832;
  // Which encodes to time, comma-separated: whole, frames (framewise windows, diffusers' default and
  // training's vae.tiling auto), tiled (windows + spatial tiles); off = whole, on = tiled, both =
  // whole,tiled.
  std::string tiling = "both";
  // How the encoder runs (VaeRuntime), comma-separated, each timed side by side: plain (NCDHW,
  // LibTorch GroupNorm, one tile at a time), channels-last, fused (GroupNorm+SiLU kernel), fast (both),
  // fast-auto (both + tiles of one shape batched within the largest crop's voxels), fast-padded
  // (fast-auto + the norm written straight into the causal convolution's padded input), fast-folded
  // (fast-padded + the resnet biases added by the norm and the residual sum), fast-gemm (fast-folded +
  // the first convolution and the mid attention as cuBLAS GEMMs, vae.gemm_kernels),
  // fast-gemm-borders (fast-gemm with the norm writing the padded buffer's interior and one kernel
  // its borders; with fast-folded's folds, vae.fused_padding: the default and training's),
  // fast-residual-pads (fast-gemm-borders + each down block's last residual sum written straight into
  // the downsampler's padded input; not in training yet),
  // fast-graphs (fast-auto + each pass shape a CUDA graph, replayed), fast-batched (both + up to 4
  // tiles of one shape batched), fast-padded-batched (fast-batched + the padded norm).
  std::string runtimes = "fast-gemm-borders";
  bool cudnn_benchmark = true;  // let cuDNN time its convolution algorithms per shape
  int64_t warmup = 2, steps = 5;
  std::string dump;         // folder for the diffusers comparison ("" = none)
  std::string json;         // append results here
  bool count_only = false;  // print each mode's FLOP count (model/vae_flops.h) and time nothing
  // After each timed row, `steps` more encodes with the encoder's stage hook: time per stage (GPU
  // intervals between the stages on CUDA, wall time on the CPU) beside its FLOPs, TFLOP/s and MFU,
  // and the time outside the passes (crops, batching, blends).
  bool stages = false;
  // After each timed row, 2 more encodes traced into <trace>/<tiling>_<runtime>.json and where the
  // GPU's time went printed (kernel time by kind, the convolutions' achieved rate, the longest
  // kernels; "" = none).
  std::string trace;
};

void run_bench_vae(const BenchVaeOptions& options);

}  // namespace tt
