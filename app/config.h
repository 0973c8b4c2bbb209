// The resolved teletron configuration: the typed image of the YAML file (rooted at `tele_tron:`)
// after defaults, environment variables and `--set` overrides. Only app/ reads YAML; components
// get their own Options structs built from this.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pipeline/buckets.h"

namespace tt {

/// model.activation_checkpointing: auto (ModelSection::activation_checkpointing_every_n).
inline constexpr int64_t kCheckpointingAuto = -1;

struct ModelSection {
  std::string preset = "1b";  // tiny | 1b | 13b
  std::optional<std::string> weights;
  // Architecture overrides, diffusers config.json names; unset = the preset's value.
  std::optional<int64_t> num_attention_heads, attention_head_dim, num_layers, num_single_layers,
      num_refiner_layers, patch_size, patch_size_t, in_channels, out_channels, text_embed_dim,
      pooled_projection_dim;
  std::optional<double> mlp_ratio, rope_theta;
  std::optional<std::vector<int64_t>> rope_axes_dim;
  std::optional<bool> guidance_embeds;
  std::optional<std::string> qk_norm;  // rms_norm
  std::optional<std::string> image_condition_type;  // null (text-to-video) | latent_concat
  // false -> 0, true -> 1, {every_n: k} -> k, auto -> kCheckpointingAuto (the trainer's plan from
  // the memory estimate, app/memory_estimate.h).
  int64_t activation_checkpointing_every_n = 0;
  bool fused_kernels = true;       // HunyuanVideoConfig::fused_kernels (whose own default is off)
  bool segment_attention = false;  // HunyuanVideoConfig::segment_attention
  bool per_sample_attention = true;         // HunyuanVideoConfig::per_sample_attention
  bool checkpoint_keeps_attention = false;  // HunyuanVideoConfig::checkpoint_keeps_attention
  // LoRA (model/lora.h): rank 0 = off, the whole model trains.
  int64_t lora_rank = 0;
  double lora_alpha = 0.0;  // 0 = rank
  double lora_dropout = 0.0;
  std::vector<std::string> lora_targets;  // empty = default_lora_targets()
  std::string lora_init = "kaiming";      // kaiming | gaussian
  std::optional<std::string> lora_weights;  // a LoRA file to start from (model/lora_io.h's layouts)

  bool operator==(const ModelSection&) const = default;
};

struct VaeSection {
  std::string preset = "hunyuan";  // hunyuan | tiny
  std::optional<std::string> weights;
  std::string tiling = "auto";  // auto | on | off
  int64_t tile_batch = 0;         // tiles / frame windows of one shape encoded together; 0 = auto (model/vae.h)
  double memory_share = 0.25;     // the most of the GPU the encoder's activations may take (CUDA)
  bool fused_padding = true;      // the norm writes into the causal convolution's padded input (CUDA)
  bool gemm_kernels = true;       // first convolution and mid attention as cuBLAS GEMMs (CUDA)
  bool cuda_graphs = false;       // each encoder pass shape captured as a CUDA graph and replayed

  bool operator==(const VaeSection&) const = default;
};

struct DataSection {
  std::string source = "latents";  // latents | video
  std::string manifest = "data/train.jsonl";  // relative to the working directory, not to the file
  std::vector<Bucket> buckets = {Bucket{}};
  double caption_dropout = 0.0;  // share of samples trained on the empty caption's embedding
  std::optional<std::string> text_cache;  // captions' embeddings (encode-text); null: text_cache/ beside the manifest
  double max_failed_share = 0.01;
  std::optional<double> min_motion;  // motion filters (data.source: video): <manifest>.motion.json's scores
  std::optional<double> max_motion;
  int64_t prefetch = 2;  // data.source: latents: batches read ahead on a thread (0 = inside the step)
  std::string text_padding = "auto";  // auto | full | trim: text padding kept (masked) or trimmed per batch
  int64_t text_trim_multiple = 64;    // masked trimmed text: a multiple of this many columns (at most all)

  bool operator==(const DataSection&) const = default;
};

struct FrameSamplerSection {
  std::string mode = "fps";  // uniform | stratified | random | fps | motion
  std::optional<int64_t> samples_per_clip;
  int64_t stride = 1;
  std::optional<double> target_fps = 24.0;

  bool operator==(const FrameSamplerSection&) const = default;
};

struct OpticalFlowSection {
  std::string algorithm = "nvofa";  // none | nvofa | raft | tvl1
  std::string fallback = "tvl1";    // tvl1 | none | error: where nvofa cannot run
  std::string warp_mode = "cuda";   // cuda | cpu (tvl1 only)
  int64_t grid = 4;                 // nvofa: one vector per grid x grid pixels (1 | 2 | 4)
  std::string preset = "medium";    // nvofa: slow | medium | fast
  std::optional<std::string> weights;  // raft: a torchvision state dict saved as safetensors
  int64_t pairs = 4;                // frame pairs per clip or sample for motion scores (K)

  bool operator==(const OpticalFlowSection&) const = default;
};

struct AugmentSection {
  double flip = 0.5;
  std::string crop = "random";  // random | center
  double brightness = 0.0, contrast = 0.0, saturation = 0.0, hue = 0.0;

  bool operator==(const AugmentSection&) const = default;
};

struct DataPipelineSection {
  std::string video_decoding = "nvdec";  // nvdec | cpu
  FrameSamplerSection frame_sampler;
  OpticalFlowSection optical_flow;
  AugmentSection augment;
  int64_t prefetch = 5;
  int64_t workers = 2;

  bool operator==(const DataPipelineSection&) const = default;
};

struct DynamicBatchSection {
  int64_t initial = 32;
  double memory_fraction = 0.9;
  int64_t min = 1, max = 256;
  std::optional<int64_t> global_batch;  // samples per optimizer step; null = initial × gradient_accumulation
  // memory: every bucket's step holds global_batch samples. token_budget: the bucket with the most
  // video tokens holds global_batch, each other about the same tokens (pipeline/data_cursor.h).
  std::string mode = "memory";

  bool operator==(const DynamicBatchSection&) const = default;
};

struct MixedPrecisionSection {
  bool enabled = true;
  std::string dtype = "bf16";  // bf16 | fp16
  int64_t loss_scale_window = 2000;
  double init_scale = 65536.0;
  int64_t max_skipped_steps = 20;
  std::string master_weights = "fp32";  // fp32 | bf16 (bf16 needs enabled and dtype bf16)

  bool operator==(const MixedPrecisionSection&) const = default;
  /// bf16 master weights are used as bf16 only under bf16 autocast: false for bf16 weights
  /// without it (the loader refuses that; the trainer checks configs built in code).
  bool master_weights_usable() const { return master_weights != "bf16" || (enabled && dtype == "bf16"); }
};

struct CudaGraphSection {
  /// "auto" (on when training on CUDA), "true" or "false".
  std::string enabled = "auto";
  int64_t warmup_steps = 100;
  int64_t capture_frequency = 5;
  int64_t retry = 3;        // env TELETRON_GRAPH_RETRY overrides
  double threshold = 0.8;   // env TELETRON_GRAPH_THRESHOLD overrides
  std::string scope = "auto";  // auto | step | blocks: what a capture takes (StepGraphOptions::scope)

  bool operator==(const CudaGraphSection&) const = default;
};

struct OptimizerSection {
  std::string name = "adamw";
  double lr = 1.0e-5;
  double beta1 = 0.9, beta2 = 0.999;  // YAML: betas: [b1, b2]
  double weight_decay = 0.01;
  double eps = 1.0e-8;
  double max_grad_norm = 1.0;  // 0 = no clipping
  int64_t warmup_steps = 100;
  std::string schedule = "constant";  // constant | cosine

  bool operator==(const OptimizerSection&) const = default;
};

struct FlowMatchingSection {
  std::string timestep_sampling = "logit_normal";  // logit_normal | uniform
  double logit_mean = 0.0, logit_std = 1.0;
  double shift = 7.0;
  double guidance = 1.0;

  bool operator==(const FlowMatchingSection&) const = default;
};

struct TrainSection {
  std::string device = "auto";  // auto | cpu | cuda
  int64_t max_steps = 1000;
  int64_t seed = 42;
  std::string output_dir = "runs/train";
  int64_t log_every = 10;
  int64_t checkpoint_every = 500;
  int64_t keep_checkpoints = 3;
  bool expandable_segments = false;  // the CUDA caching allocator's expandable segments
  double memory_cap = 1.0;           // in (0, 1]: the share of the GPU the allocator may take; 1 = no cap
  bool tensorboard = true;           // metrics.jsonl's scalars also in a TensorBoard event file
  bool memory_check = true;          // estimate the step's GPU memory before step 0 (app/memory_estimate.h)
  double ema_decay = 0.0;            // [0, 1): an EMA of the trained tensors in checkpoints; 0 = off

  bool operator==(const TrainSection&) const = default;
};

// validation: a video sampled from the current weights every `every` optimizer steps (app/validation.h).
struct ValidationSection {
  int64_t every = 0;  // 0 = off
  std::optional<std::string> text_embeddings;  // a text-embeddings file (text_states, text_mask, pooled)
  std::optional<std::string> prompt;           // or a prompt, encoded into data.text_cache by encode-text
  int64_t steps = 30;
  int64_t frames = 33, height = 480, width = 832;
  double guidance = 6.0;  // embedded guidance scale (HunyuanVideoPipeline's default), x1000 into the model
  double flow_shift = 7.0;
  int64_t seed = 0;

  bool operator==(const ValidationSection&) const = default;
};

struct TextEncoderSection {
  std::optional<std::string> pipeline;  // a diffusers HunyuanVideo pipeline folder (text_encoder*, tokenizer*)
  int64_t batch_size = 8;               // captions encoded at once
  std::string dtype = "auto";           // auto (bf16 on CUDA, fp32 on the CPU) | bf16 | fp32

  bool operator==(const TextEncoderSection&) const = default;
};

struct DistributedSection {
  std::string backend = "nccl";
  int64_t zero_stage = 0;

  bool operator==(const DistributedSection&) const = default;
};

/// A key the input wrote: its path below the root ("vae.tiling") and where ("config.yaml:9:5",
/// "--set vae.tiling=on", "environment variable TELETRON_GRAPH_RETRY=5").
struct ConfigSetKey {
  std::string path;
  std::string where;
};

struct Config {
  ModelSection model;
  VaeSection vae;
  DataSection data;
  DataPipelineSection data_pipeline;
  bool batch_size_dynamic = false;  // YAML: batch_size: dynamic
  int64_t batch_size = 1;           // YAML: batch_size: <int>
  DynamicBatchSection dynamic_batch;
  int64_t gradient_accumulation = 1;
  MixedPrecisionSection mixed_precision;
  CudaGraphSection cuda_graph;
  OptimizerSection optimizer;
  FlowMatchingSection flow_matching;
  TrainSection train;
  DistributedSection distributed;
  TextEncoderSection text_encoder;
  ValidationSection validation;

  /// Folder of the config file (for reference; relative paths resolve against the cwd).
  std::string source_path;
  /// Every key the file, the environment or --set wrote, in reading order. A key counts as set
  /// whatever its value, also when that is the default: writing a key is asking for it, so a key
  /// that then does nothing gets a warning (warn_unused_keys). Keys left out are never warned about.
  std::vector<ConfigSetKey> set_keys;
};

/// Loads, validates and resolves a config file. `overrides` are "key=value" strings from --set
/// (paths without the `tele_tron.` root); the environment variables TELETRON_GRAPH_RETRY and
/// TELETRON_GRAPH_THRESHOLD override cuda_graph.retry / threshold. Precedence: file < env < --set.
/// Throws tt::Error(kConfig) naming the key path, file:line:col, the expected form and, for an
/// unknown key, the nearest valid one.
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {});

/// Same, from YAML text (`origin` names it in error messages).
Config load_config_text(const std::string& text, const std::string& origin,
                        const std::vector<std::string>& overrides = {});

/// The resolved tree with every key, as YAML rooted at `tele_tron:` (what `teletron config` prints
/// and what the run folder's config.resolved.yaml holds). load_config_text(to_yaml(c)) == c.
std::string config_to_yaml(const Config& config);

/// True when the input wrote `path` (below the root, e.g. "data.manifest").
bool config_key_set(const Config& config, const std::string& path);

// ---- which keys each command reads (app/config_use.cpp) ---------------------------------------

/// Every subcommand. A new one is one entry here and one case in app/config_use.cpp's
/// command_reads(), which says which keys it reads (the compiler flags a switch that misses it).
enum class Command {
  kTrain,
  kConfig,  // answers as train does: the file is a training config
  kSynthData,
  kModelCheck,
  kBench,
  kProbe,  // probe, bench-video and bench-vae take no config: they read no key
  kValidateData,
  kBenchVideo,
  kPreprocess,
  kBenchVae,
  kEncodeText,
  kSample,
};

/// The subcommand's name on the command line ("validate-data").
const char* command_name(Command command);

/// One line per set key that does nothing for `command` (for train and config: with this
/// data.source), each naming the key, where it was set and why; keys of features not built yet
/// say "has no effect yet". Keys `command` simply does not read and has nothing specific to say
/// about are named together on one last line. Empty when every set key takes effect.
std::vector<std::string> unused_key_warnings(const Config& config, Command command);

/// Logs unused_key_warnings() with spdlog::warn; every command calls it once at start-up.
void warn_unused_keys(const Config& config, Command command);

/// The reference of every key (path, type, default, allowed values, meaning, who reads it), as
/// `teletron config --explain` prints it, and as Markdown: docs/CONFIG.md is this text.
std::string config_reference_text();
std::string config_reference_markdown();

}  // namespace tt
