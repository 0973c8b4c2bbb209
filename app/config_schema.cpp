// The one table of teletron's YAML keys (see config_schema.h): form, who reads each key and what
// it means; how their scalars are spelled, and the nearest-key lookup. Defaults live in config.h's
// initializers; docs/CONFIG.md is generated from both (`teletron config --explain --markdown`).
#include "app/config_schema.h"

#include <charconv>
#include <algorithm>
#include <cmath>
#include <limits>

namespace tt {
namespace {

constexpr ConfigRange kPositive = {0, kConfigInf, true, false};      // > 0
constexpr ConfigRange kNonNegative = {0, kConfigInf, false, false};  // >= 0
constexpr ConfigRange kAtLeastOne = {1, kConfigInf, false, false};   // >= 1
constexpr ConfigRange kProbability = {0, 1, false, false};           // [0, 1]
constexpr ConfigRange kBeta = {0, 1, false, true};                   // [0, 1)
constexpr ConfigRange kFraction = {0, 1, true, false};               // (0, 1]
constexpr ConfigRange kThreshold = {0, 10, true, false};             // (0, 10]
constexpr ConfigRange kZeroStage = {0, 3, false, false};             // 0..3
constexpr ConfigRange kGrid = {1, 4, false, false};                // 1, 2 or 4 (video_data.cpp)
constexpr ConfigRange kRopeAxis = {2, kConfigInf, false, false};     // >= 2 (and even: config.cpp)

// The features a key waits for; "tele_tron.<key>: set, but has no effect yet (arrives with <feature>)".
constexpr const char* kDistributed = "multi-GPU training";

// Who reads what (kRead* bits, config_schema.h). Checked against the code that reads each key:
// train reads everything it is given except, with cached latents, the VAE, the video pipeline,
// the buckets and the failure share; bench builds the model (random weights) and times a step
// with AdamW at one fixed timestep; preprocess and validate-data read the data side and the
// model's latent and text sizes; synth-data the model's sizes and the first bucket; model-check
// the architecture (weights, device and dtype come from its flags).
constexpr unsigned kT = kReadTrain;
constexpr unsigned kTV = kReadTrainVideo;
constexpr unsigned kB = kReadBench;
constexpr unsigned kP = kReadPreprocess;
constexpr unsigned kV = kReadValidateData;
constexpr unsigned kS = kReadSynthData;
constexpr unsigned kM = kReadModelCheck;
constexpr unsigned kSm = kReadSample;
constexpr unsigned kArchitecture = kT | kB | kM | kSm;  // a Transformer is built
constexpr unsigned kTextSizes = kArchitecture | kP | kV | kS;  // text embeddings are checked or made
constexpr unsigned kVideoSide = kTV | kP;  // clips are sampled, decoded, augmented and encoded
constexpr unsigned kSampling = kVideoSide | kV;  // clips are opened and sampled

// The member of Config a row fills; `path` is spelled out separately because a few YAML keys
// (betas, batch_size, activation_checkpointing) do not map one to one onto a member.
#define TT_AT(member) [](Config& c) -> void* { return &c.member; }

using K = ConfigKind;

// One row per key: its form on the first line, who reads it and what it means on the second.
// clang-format off
const ConfigField kFields[] = {
    {.path = "model.preset", .kind = K::kString, .at = TT_AT(model.preset), .choices = "tiny|1b|13b",
     .read_by = kTextSizes, .doc = "Architecture preset: tiny (tests), 1b (about 1.1 B parameters) or 13b (the released HunyuanVideo); the keys below override single fields."},
    {.path = "model.weights", .kind = K::kOptString, .at = TT_AT(model.weights),
     .read_by = kT, .doc = "Initial Transformer weights: a diffusers folder (its config.json then defines the architecture), a safetensors file or index, or the official layout; null = random initialisation."},
    {.path = "model.num_attention_heads", .kind = K::kOptInt, .at = TT_AT(model.num_attention_heads), .range = kAtLeastOne,
     .read_by = kArchitecture, .doc = "Attention heads per block; null = the preset's."},
    {.path = "model.attention_head_dim", .kind = K::kOptInt, .at = TT_AT(model.attention_head_dim), .range = kAtLeastOne,
     .read_by = kArchitecture, .doc = "Channels per attention head (hidden size = heads x head dim); null = the preset's."},
    {.path = "model.num_layers", .kind = K::kOptInt, .at = TT_AT(model.num_layers), .range = kAtLeastOne,
     .read_by = kArchitecture, .doc = "Double-stream blocks (video and text with separate weights); null = the preset's."},
    {.path = "model.num_single_layers", .kind = K::kOptInt, .at = TT_AT(model.num_single_layers), .range = kAtLeastOne,
     .read_by = kArchitecture, .doc = "Single-stream blocks (video and text tokens concatenated); null = the preset's."},
    {.path = "model.num_refiner_layers", .kind = K::kOptInt, .at = TT_AT(model.num_refiner_layers), .range = kAtLeastOne,
     .read_by = kArchitecture, .doc = "Blocks of the token refiner that prepares the text states; null = the preset's."},
    {.path = "model.mlp_ratio", .kind = K::kOptFloat, .at = TT_AT(model.mlp_ratio), .range = kPositive,
     .read_by = kArchitecture, .doc = "Feed-forward width as a multiple of the hidden size; null = the preset's."},
    {.path = "model.patch_size", .kind = K::kOptInt, .at = TT_AT(model.patch_size), .range = kAtLeastOne,
     .read_by = kArchitecture, .doc = "Spatial patch size on the latents (tokens per latent frame = H/p x W/p); null = the preset's."},
    {.path = "model.patch_size_t", .kind = K::kOptInt, .at = TT_AT(model.patch_size_t), .range = kAtLeastOne,
     .read_by = kArchitecture, .doc = "Temporal patch size on the latents; null = the preset's."},
    {.path = "model.in_channels", .kind = K::kOptInt, .at = TT_AT(model.in_channels), .range = kAtLeastOne,
     .read_by = kArchitecture, .doc = "Channels the patch embedding takes (16 for text-to-video, 33 for image-to-video); null = the preset's."},
    {.path = "model.out_channels", .kind = K::kOptInt, .at = TT_AT(model.out_channels), .range = kAtLeastOne,
     .read_by = kArchitecture | kP | kS, .doc = "Latent channels the model predicts, the VAE's latent channels (16); null = the preset's."},
    {.path = "model.text_embed_dim", .kind = K::kOptInt, .at = TT_AT(model.text_embed_dim), .range = kAtLeastOne,
     .read_by = kTextSizes, .doc = "Width of the text encoder's token states (text_states); null = the preset's."},
    {.path = "model.pooled_projection_dim", .kind = K::kOptInt, .at = TT_AT(model.pooled_projection_dim), .range = kAtLeastOne,
     .read_by = kTextSizes, .doc = "Width of the pooled text embedding (pooled); null = the preset's."},
    // Whether the three sizes add up to attention_head_dim is checked where the preset is resolved.
    {.path = "model.rope_axes_dim", .kind = K::kOptIntList, .at = TT_AT(model.rope_axes_dim), .range = kRopeAxis, .list_size = 3,
     .read_by = kArchitecture, .doc = "Rotary embedding channels for the (time, height, width) axes, summing to attention_head_dim; null = the preset's."},
    {.path = "model.rope_theta", .kind = K::kOptFloat, .at = TT_AT(model.rope_theta), .range = kPositive,
     .read_by = kArchitecture, .doc = "Base of the rotary embedding frequencies; null = the preset's."},
    {.path = "model.guidance_embeds", .kind = K::kOptBool, .at = TT_AT(model.guidance_embeds),
     .read_by = kArchitecture, .doc = "Whether the model has a guidance embedder (guidance-distilled checkpoints); null = the preset's."},
    {.path = "model.qk_norm", .kind = K::kOptString, .at = TT_AT(model.qk_norm), .choices = "rms_norm",
     .read_by = kArchitecture, .doc = "Normalisation of queries and keys before attention; null = the preset's."},
    {.path = "model.image_condition_type", .kind = K::kOptString, .at = TT_AT(model.image_condition_type), .choices = "latent_concat",
     .read_by = kArchitecture, .doc = "null for text-to-video; latent_concat conditions on an image by concatenating its latents (in_channels becomes 2 x out_channels + 1)."},
    {.path = "model.fused_kernels", .kind = K::kBool, .at = TT_AT(model.fused_kernels),
     .read_by = kT | kB, .doc = "On CUDA, run the gated residuals, QK RMSNorm + RoPE and GELU-tanh through teletron's fused kernels, whose backward passes save fewer activations; on every device, the MLPs' GELU and down-projection, and each Linear on a modulated LayerNorm, as functions that recompute the GELU or the modulated input in backward instead of keeping it. Measured at the 1b shape (BENCHMARKS.md): the step 1.21–1.23× faster with 33–38 % less activation memory, 1.28–1.29× torch.compiled diffusers in the same call (H200, H100). On by default; false runs the plain torch composition (the same math up to rounding)."},
    {.path = "model.segment_attention", .kind = K::kBool, .at = TT_AT(model.segment_attention),
     .read_by = kT | kB, .doc = "On CUDA in bf16/fp16, joint attention over padded text runs as flash attention's variable-length segments (each sample's valid tokens, then its padding apart) instead of SDPA with a mask: the same loss and gradients, static shapes for CUDA graphs. fp32 and the CPU keep the mask. Off by default until measured on a GPU."},
    {.path = "model.per_sample_attention", .kind = K::kBool, .at = TT_AT(model.per_sample_attention),
     .read_by = kT | kB, .doc = "Joint attention over padded text runs once per sample at its own length (all video tokens, then its caption) without a mask, in eager steps: PyTorch gives cuDNN a key mask as a bias, and cuDNN's kernel with a bias ran at 0.58x the speed of its kernel without one at the 1b preset's 33x480x832 (H100, scripts/attention_bench.py). The same loss and gradients up to rounding; a step captured into a CUDA graph keeps the mask. Each new length costs cuDNN one plan build. In training, the 1b preset's default stack on mixed buckets ran 1.26x as fast as with the mask, with the same loss (H100, BENCHMARKS.md). On by default; false keeps the mask."},
    {.path = "model.checkpoint_keeps_attention", .kind = K::kBool, .at = TT_AT(model.checkpoint_keeps_attention),
     .read_by = kT | kB, .doc = "Blocks recomputed in backward (model.activation_checkpointing) keep their attention's output and log-sum-exp from the forward (hidden x 2 + heads x 4 bytes per token and block in bf16) and skip the attention kernel when they are recomputed: attention is the largest part of a long sequence's forward. Attention with a key mask (padded text that is not trimmed), segments, or a backend other than flash or cuDNN is recomputed as before. The memory estimate and activation_checkpointing: auto count the kept tensors. Off by default until measured on a GPU."},
    {.path = "model.lora.rank", .kind = K::kInt, .at = TT_AT(model.lora_rank), .range = kNonNegative,
     .read_by = kT | kB, .doc = "LoRA: the rank r of low-rank adapters (A r x in, B out x r, fp32) on the Transformer's Linear layers, trained while the base stays frozen (in the autocast dtype on CUDA); 0 = no LoRA, the whole model trains. Peers use 16-64."},
    {.path = "model.lora.alpha", .kind = K::kFloat, .at = TT_AT(model.lora_alpha), .range = kNonNegative,
     .read_by = kT | kB, .doc = "LoRA: each update is scaled by alpha / rank; 0 means alpha = rank (scale 1)."},
    {.path = "model.lora.dropout", .kind = K::kFloat, .at = TT_AT(model.lora_dropout), .range = kBeta,
     .read_by = kT | kB, .doc = "LoRA: dropout on the adapters' input in training (the base sees the input unchanged). Above 0 the fused paths keep the adapters' input, which costs activation memory."},
    {.path = "model.lora.targets", .kind = K::kStringList, .at = TT_AT(model.lora_targets),
     .read_by = kT | kB, .doc = "LoRA: the modules that get adapters, by diffusers module name as peft's target_modules: a name matches a module it equals or ends (after a dot), e.g. to_q or ff.net.2; an entry with a regular-expression character must match the whole name. Empty: both streams' attention projections (to_q, to_k, to_v, to_out.0, add_q_proj, add_k_proj, add_v_proj, to_add_out) and MLPs (ff.net.0.proj, ff.net.2, ff_context.net.0.proj, ff_context.net.2) of the double blocks, and the single blocks' linear1 parts (to_q, to_k, to_v, proj_mlp) and proj_out. The adaLN modulations (norm1.linear, norm1_context.linear, norm.linear) can be named; modules outside the double and single blocks take none."},
    {.path = "model.lora.init", .kind = K::kString, .at = TT_AT(model.lora_init), .choices = "kaiming|gaussian",
     .read_by = kT | kB, .doc = "LoRA: A's initialisation, kaiming-uniform (a = sqrt 5, as torch.nn.Linear and peft) or N(0, 1/r); B starts at zero either way, so training starts from the base model."},
    {.path = "model.lora.weights", .kind = K::kOptString, .at = TT_AT(model.lora_weights),
     .read_by = kT, .doc = "LoRA: a LoRA file to start from instead of B = 0, to continue an adapter trained elsewhere: diffusers/PEFT (transformer.<module>.lora_A/lora_B.weight, its scale from lora_adapter_metadata), ComfyUI / diffusion-pipe (diffusion_model.<official module>.lora_A/lora_B.weight) or musubi-tuner / kohya (lora_unet_<module>.lora_down/lora_up.weight with .alpha); official fused modules are split as diffusers splits them. Its rank and modules must fit model.lora.rank and .targets; modules it lacks keep their initialisation (logged). A resume reads the checkpoint's adapters instead."},
    {.path = "model.activation_checkpointing", .kind = K::kCheckpointing, .at = TT_AT(model.activation_checkpointing_every_n),
     .read_by = kT | kB, .doc = "Recompute blocks in the backward pass to save memory: true = every block, {every_n: k} = every k-th, "
            "auto = the fewest blocks whose estimated step peak fits 90 % of the memory the check offers (what a step "
            "may use, see train.memory_check, less the online VAE's share), at the micro-batch the check uses (batch_size, or "
            "dynamic_batch.min), the block kind that frees more first; the plan is logged. auto runs the estimate's "
            "probes even with train.memory_check: false, and recomputes nothing on the CPU. "
            "Under LoRA (gates that need no gradient) a recomputed block skips the GEMMs of its last Linears, whose "
            "results the recompute never reads (`teletron bench --recompute-all` times the difference)."},

    {.path = "vae.preset", .kind = K::kString, .at = TT_AT(vae.preset), .choices = "hunyuan|tiny",
     .read_by = kT | kP | kSm, .doc = "VAE architecture that encodes clips to latents (data.source: video, preprocess) and decodes sampled latents (`teletron sample`, validation videos): hunyuan (needs vae.weights) or tiny (fixed random weights, tests)."},
    {.path = "vae.weights", .kind = K::kOptString, .at = TT_AT(vae.weights),
     .read_by = kT | kP | kSm, .doc = "The HunyuanVideo VAE: a diffusers VAE folder or a pipeline folder with vae/ (the encoder for video training and preprocess, the decoder for sample and validation videos); random = fixed random weights (benchmarks only)."},
    {.path = "vae.tiling", .kind = K::kString, .at = TT_AT(vae.tiling), .choices = "auto|on|off", .aliases = "true=on,false=off",
     .read_by = kT | kP | kSm, .doc = "auto encodes in windows of 16 + 1 frames and decodes in windows of 4 + 1 latent frames (blended over 4 frames), as diffusers does; on adds 256-px spatial tiles (diffusers' enable_tiling); off encodes and decodes the clip whole."},
    {.path = "vae.memory_share", .kind = K::kFloat, .at = TT_AT(vae.memory_share), .range = kFraction,
     .read_by = kVideoSide, .doc = "On CUDA, the share of the GPU's memory the VAE encoder's activations may take: its largest pass (window, tile or batch of them) is measured once per bucket at start-up; one that needs more stops with TT_ERR_MEMORY naming the way out (vae.tiling: on, a smaller bucket, a larger share). Training leaves what it measured free beside the step (the memory check and the dynamic batch count it), since the encoder runs while the step does."},
    {.path = "vae.fused_padding", .kind = K::kBool, .at = TT_AT(vae.fused_padding), .read_by = kVideoSide,
     .doc = "On CUDA, the encoder's fused GroupNorm+SiLU writes straight into the padded input of the causal convolution after it (one copy of each activation fewer), and each resnet's convolutions run without their bias: the norm that reads conv1's output adds conv1's, the residual sum adds conv2's and the shortcut's (one pass over each output fewer; fp32 sums, the latents within bf16 rounding of the unfused ones and closer to fp32). The norm writes the padded buffer's interior and one kernel copies its replicate borders. bench-vae runtimes fast-padded, fast-folded and fast-gemm-borders (with vae.gemm_kernels): 2.60x, 2.81x and 3.13x diffusers on a whole 33x480x832 clip, 3.05x in frame windows, at the same peak on an H100 (BENCHMARKS.md). false keeps LibTorch's padding copies and bias adds."},
    {.path = "vae.gemm_kernels", .kind = K::kBool, .at = TT_AT(vae.gemm_kernels), .read_by = kVideoSide,
     .doc = "On CUDA, the encoder's first convolution (3 input channels) runs as an im2col matrix times its weight in one cuBLAS GEMM, and the mid block's attention (one head 512 wide, past the flash kernels' sizes) as two cuBLAS products with an fp32 softmax, instead of cuDNN's convolution (2 % of the matmul rate there) and SDPA's memory-efficient kernel. bench-vae runtime fast-gemm: 3.02x diffusers whole, 2.97x frame windows, 2.84x tiled on an H100 at the same peaks (BENCHMARKS.md). false keeps cuDNN and SDPA."},
    {.path = "vae.cuda_graphs", .kind = K::kBool, .at = TT_AT(vae.cuda_graphs), .read_by = kVideoSide,
     .doc = "On CUDA, each encoder pass shape (window, tile or batch of them) runs eagerly once, is captured as a CUDA graph and replayed after (the same latents bit for bit; the graphs hold their memory while the run lives). Off: measured on an H100 it gains nothing (the passes are a few long kernels; bench-vae runtime fast-graphs, BENCHMARKS.md)."},
    {.path = "vae.tile_batch", .kind = K::kIntOrAuto, .at = TT_AT(vae.tile_batch), .range = kAtLeastOne,
     .read_by = kVideoSide, .doc = "Windows or tiles of one shape encoded in one batch: more is faster, 1 needs the least memory; auto batches a shape only while the batch holds no more voxels than the largest window or tile, so the encoder's peak stays that of its largest crop alone (as diffusers' one-at-a-time loop)."},

    {.path = "data.source", .kind = K::kString, .at = TT_AT(data.source), .choices = "latents|video",
     .read_by = kT | kP | kV | kReadEncodeText, .doc = "What the manifest lists: latents (cached, written by preprocess or synth-data) or video (clips encoded by the VAE while training)."},
    {.path = "data.manifest", .kind = K::kString, .at = TT_AT(data.manifest),
     .read_by = kT | kP | kV | kReadEncodeText, .doc = "The JSONL manifest, relative to the working directory; the paths inside it are relative to its folder."},
    {.path = "data.buckets", .kind = K::kBuckets, .at = TT_AT(data.buckets),
     .read_by = kSampling | kS, .doc = "Clip shapes {frames: 4n+1, height: 16k, width: 16k}; each clip goes to the bucket it fills with the closest aspect ratio."},
    {.path = "data.caption_dropout", .kind = K::kFloat, .at = TT_AT(data.caption_dropout), .range = kProbability,
     .read_by = kT, .doc = "Share of samples trained on the empty caption's embedding (from data.text_cache, which `teletron encode-text` always writes), each sample chosen from (train.seed, step, its place in the global batch), so a resume draws the same; classifier-free guidance needs it, peers use 0.1."},
    {.path = "data.text_cache", .kind = K::kOptString, .at = TT_AT(data.text_cache),
     .read_by = kT | kP | kV | kReadEncodeText, .doc = "The folder of caption embeddings: `teletron encode-text` writes one file per distinct caption there (named by a hash of the caption and the encoders) and encoder.json; manifest rows with a caption (or a <video stem>.txt) are trained on their file, and data.caption_dropout takes the empty caption's; null = text_cache/ beside data.manifest."},
    {.path = "data.max_failed_share", .kind = K::kFloat, .at = TT_AT(data.max_failed_share), .range = kProbability,
     .read_by = kVideoSide, .doc = "Share of the rows that may fail to load (each replaced by another row of its bucket) before TT_ERR_DATA stops the run."},
    {.path = "data.prefetch", .kind = K::kInt, .at = TT_AT(data.prefetch), .range = kNonNegative,
     .read_by = kReadTrainLatents, .doc = "data.source: latents: batches read, pinned and copied to the GPU ahead of the step on a thread and CUDA stream of their own; 0 = inside the step."},
    {.path = "data.text_padding", .kind = K::kString, .at = TT_AT(data.text_padding), .choices = "auto|full|trim",
     .read_by = kT, .doc = "Text padding in a batch: trim drops the columns that are padding in every sample (attention unmasked when none is left), full keeps the dataset's text length with the mask, so that the step has one shape per bucket; auto: trim without CUDA graphs; with them, chosen per bucket by measurement: during its warm-up every other step runs trimmed and eagerly (max(cuda_graph.warmup_steps, 3) of them), the others padded (full) through the graphs, which are kept only while faster than both kinds of eager step; once given up (dropped, out of retries, or no room for them), the bucket runs eagerly, trimmed or padded, whichever ran faster eagerly as timed. The same loss either way, up to rounding."},
    {.path = "data.text_trim_multiple", .kind = K::kInt, .at = TT_AT(data.text_trim_multiple), .range = kPositive,
     .read_by = kT, .doc = "Trimmed text (data.text_padding trim, or auto's eager steps) of a batch that keeps padding, and so runs masked, keeps a multiple of this many columns, at most the dataset's text length: fewer distinct masked text lengths, so fewer step shapes for the attention kernels to plan for (cuDNN builds a plan per new shape), for a few more masked columns. A batch with no padding left at its exact length (one sample, or captions of one length) stays exact and unmasked. 1 = exactly the longest caption of the batch. The same loss either way, up to rounding. With 64 the traced eager steps of mixed buckets at micro-batch 2 took 12 % less time than with 1 in a short run (H200, BENCHMARKS.md; the plans are built once per shape, so the gain shrinks as a run sees every length)."},
    {.path = "data.min_motion", .kind = K::kOptFloat, .at = TT_AT(data.min_motion), .range = kNonNegative,
     .read_by = kTV, .doc = "data.source: video: clips whose motion score (mean optical-flow magnitude in pixels per frame at a 256-px short side, from <manifest>.motion.json, which `teletron validate-data --motion` writes) is below this are left out; null = keep all."},
    {.path = "data.max_motion", .kind = K::kOptFloat, .at = TT_AT(data.max_motion), .range = kNonNegative,
     .read_by = kTV, .doc = "data.source: video: clips whose motion score is above this are left out (cuts, shaky footage); null = keep all."},

    {.path = "data_pipeline.video_decoding", .kind = K::kString, .at = TT_AT(data_pipeline.video_decoding), .choices = "nvdec|cpu",
     .read_by = kSampling, .doc = "nvdec decodes on the GPU and keeps every later stage there (a file NVDEC refuses falls back to the CPU); cpu runs decode, colour and augment on the host."},
    {.path = "data_pipeline.frame_sampler.mode", .kind = K::kString, .at = TT_AT(data_pipeline.frame_sampler.mode), .choices = "uniform|stratified|random|fps|motion",
     .read_by = kSampling, .doc = "How frames are picked: fps (the default: contiguous frames by their timestamps at target_fps, so the clip plays at that rate whatever its own or variable frame rate; the start drawn from (seed, epoch, sample)), motion (as fps, the window drawn by the clip's motion profile from `teletron validate-data --motion`: one of 16 starts with probability proportional to the window's motion plus 10 % of the clip's mean, so moving parts are seen more often and still parts sometimes), uniform (evenly spaced over the clip), stratified (one random frame in each of N equal strata: the whole clip at a jittered low rate), random (contiguous with stride)."},
    // 4n+1 is NOT required here: the original design's example asks for 16. app/video_data.cpp
    // checks it against the VAE's temporal stride, and only when data.source is video.
    {.path = "data_pipeline.frame_sampler.samples_per_clip", .kind = K::kOptInt, .at = TT_AT(data_pipeline.frame_sampler.samples_per_clip), .range = kAtLeastOne,
     .read_by = kSampling, .doc = "Frames per sample; null = the bucket's frame count (with data.source: video it must equal it)."},
    {.path = "data_pipeline.frame_sampler.stride", .kind = K::kInt, .at = TT_AT(data_pipeline.frame_sampler.stride), .range = kAtLeastOne,
     .read_by = kSampling, .doc = "random mode: distance in frames between consecutive samples (1 = contiguous)."},
    {.path = "data_pipeline.frame_sampler.target_fps", .kind = K::kOptFloat, .at = TT_AT(data_pipeline.frame_sampler.target_fps), .range = kPositive,
     .read_by = kSampling, .doc = "fps and motion modes: the rate the frames are sampled at, by their timestamps (24: HunyuanVideo's training rate)."},
    {.path = "data_pipeline.optical_flow.algorithm", .kind = K::kString, .at = TT_AT(data_pipeline.optical_flow.algorithm), .choices = "none|nvofa|raft|tvl1",
     .read_by = kTV | kV, .doc = "The flow stage's estimator (motion scores: validate-data --motion, and with data.source: video each sample's score in metrics.jsonl): nvofa (the GPU's optical flow engine, free SMs; where it cannot run, fallback), raft (torchvision's RAFT, needs weights), tvl1 (TV-L1, weight-free, CUDA kernels on a GPU), none (no flow stage)."},
    {.path = "data_pipeline.optical_flow.fallback", .kind = K::kString, .at = TT_AT(data_pipeline.optical_flow.fallback), .choices = "tvl1|none|error",
     .read_by = kTV | kV, .doc = "What runs where nvofa cannot (a CPU device, no libnvidia-opticalflow, a GPU without the engine): tvl1, none (no flow stage), or error (TT_ERR_CONFIG). Logged once."},
    {.path = "data_pipeline.optical_flow.warp_mode", .kind = K::kString, .at = TT_AT(data_pipeline.optical_flow.warp_mode), .choices = "cuda|cpu",
     .read_by = kTV | kV, .doc = "tvl1: cuda warps and iterates on the frames' device (CUDA kernels on a GPU); cpu copies the frames to the host and runs the CPU reference there (the baseline, slow). Does not apply to nvofa (hardware block matching) or raft (its correlation lookup)."},
    {.path = "data_pipeline.optical_flow.grid", .kind = K::kInt, .at = TT_AT(data_pipeline.optical_flow.grid), .range = kGrid,
     .read_by = kTV | kV, .doc = "nvofa: 1, 2 or 4: one flow vector per grid x grid pixels, upsampled bilinearly to every pixel (a grid the GPU lacks is TT_ERR_CONFIG)."},
    {.path = "data_pipeline.optical_flow.preset", .kind = K::kString, .at = TT_AT(data_pipeline.optical_flow.preset), .choices = "slow|medium|fast",
     .read_by = kTV | kV, .doc = "nvofa: the engine's speed/quality preset."},
    {.path = "data_pipeline.optical_flow.weights", .kind = K::kOptString, .at = TT_AT(data_pipeline.optical_flow.weights),
     .read_by = kTV | kV, .doc = "raft: a torchvision raft_large or raft_small state dict saved as safetensors (save_file(model.state_dict(), path)); which one is told by its keys. Required for raft."},
    {.path = "data_pipeline.optical_flow.pairs", .kind = K::kInt, .at = TT_AT(data_pipeline.optical_flow.pairs), .range = kAtLeastOne,
     .read_by = kTV | kV, .doc = "Frame pairs per motion score (K): validate-data --motion takes them at the middles of K equal stretches of the clip, training from each sample's frames; each pair's flow at a 256-px short side."},
    {.path = "data_pipeline.augment.flip", .kind = K::kFloat, .at = TT_AT(data_pipeline.augment.flip), .range = kProbability,
     .read_by = kVideoSide, .doc = "Probability of flipping a clip horizontally."},
    {.path = "data_pipeline.augment.crop", .kind = K::kString, .at = TT_AT(data_pipeline.augment.crop), .choices = "random|center",
     .read_by = kVideoSide, .doc = "Where the bucket-sized window is cut from the frame, resized to cover it: a random position or the centre."},
    {.path = "data_pipeline.augment.brightness", .kind = K::kFloat, .at = TT_AT(data_pipeline.augment.brightness), .range = kNonNegative,
     .read_by = kVideoSide, .doc = "Brightness factor per clip drawn from [1 - b, 1 + b] (floored at 0); 0 = none."},
    {.path = "data_pipeline.augment.contrast", .kind = K::kFloat, .at = TT_AT(data_pipeline.augment.contrast), .range = kNonNegative,
     .read_by = kVideoSide, .doc = "Contrast factor per clip drawn from [1 - c, 1 + c] (floored at 0); 0 = none."},
    {.path = "data_pipeline.augment.saturation", .kind = K::kFloat, .at = TT_AT(data_pipeline.augment.saturation), .range = kNonNegative,
     .read_by = kVideoSide, .doc = "Saturation factor per clip drawn from [1 - s, 1 + s] (floored at 0); 0 = none."},
    {.path = "data_pipeline.augment.hue", .kind = K::kFloat, .at = TT_AT(data_pipeline.augment.hue), .range = kNonNegative,
     .read_by = kVideoSide, .doc = "Hue rotation per clip drawn from [-h, h] turns (h at most 0.5); 0 = none."},
    {.path = "data_pipeline.prefetch", .kind = K::kInt, .at = TT_AT(data_pipeline.prefetch), .range = kNonNegative,
     .read_by = kTV, .doc = "Batches the video pipeline prepares ahead on its own thread and CUDA stream; 0 = inside the step."},
    {.path = "data_pipeline.workers", .kind = K::kInt, .at = TT_AT(data_pipeline.workers), .range = kNonNegative,
     .read_by = kVideoSide, .doc = "Threads that decode and augment the clips of the next batches (preprocess: of the next rows) while the VAE encodes; 0 = the producer (preprocess: each job) does it."},

    // batch_size fills Config::batch_size and Config::batch_size_dynamic.
    {.path = "batch_size", .kind = K::kBatchSize, .at = [](Config& c) -> void* { return &c; },
     .read_by = kT, .doc = "Samples per micro-batch, all from one bucket; dynamic sizes each bucket's micro-batch to GPU memory."},
    {.path = "dynamic_batch.initial", .kind = K::kInt, .at = TT_AT(dynamic_batch.initial), .range = kAtLeastOne,
     .read_by = kT, .doc = "batch_size: dynamic: each bucket's first micro-batch (also without a GPU to measure), within [min, max]."},
    {.path = "dynamic_batch.memory_fraction", .kind = K::kFloat, .at = TT_AT(dynamic_batch.memory_fraction), .range = kFraction,
     .read_by = kT, .doc = "batch_size: dynamic: the share of GPU memory a bucket's micro-batch may fill at its peak."},
    {.path = "dynamic_batch.min", .kind = K::kInt, .at = TT_AT(dynamic_batch.min), .range = kAtLeastOne,
     .read_by = kT, .doc = "batch_size: dynamic: the smallest micro-batch; an out-of-memory error below it stops the run."},
    {.path = "dynamic_batch.max", .kind = K::kInt, .at = TT_AT(dynamic_batch.max), .range = kAtLeastOne,
     .read_by = kT, .doc = "batch_size: dynamic: the largest micro-batch (at least dynamic_batch.min)."},
    {.path = "dynamic_batch.global_batch", .kind = K::kOptInt, .at = TT_AT(dynamic_batch.global_batch), .range = kAtLeastOne,
     .read_by = kT, .doc = "batch_size: dynamic: samples per optimizer step, whatever the micro-batches; null = initial x gradient_accumulation."},
    {.path = "dynamic_batch.mode", .kind = K::kString, .at = TT_AT(dynamic_batch.mode), .choices = "memory|token_budget",
     .read_by = kT, .doc = "batch_size: dynamic: memory = every bucket's step holds the global batch; token_budget = the bucket with the most video tokens holds it and every other bucket floor(global batch x its tokens / that bucket's tokens) samples, so each step trains on about the same tokens (the learning rate stays per step)."},
    {.path = "gradient_accumulation", .kind = K::kInt, .at = TT_AT(gradient_accumulation), .range = kAtLeastOne,
     .read_by = kT, .doc = "Micro-batches whose gradients add up to one optimizer step (samples per step = batch_size x this)."},

    {.path = "mixed_precision.enabled", .kind = K::kBool, .at = TT_AT(mixed_precision.enabled),
     .read_by = kT | kB, .doc = "On CUDA, run the step under autocast (mixed_precision.dtype) over the master weights (mixed_precision.master_weights); false, or the CPU with fp32 master weights: fp32."},
    {.path = "mixed_precision.dtype", .kind = K::kString, .at = TT_AT(mixed_precision.dtype), .choices = "bf16|fp16",
     .read_by = kT | kB, .doc = "The autocast type: bf16, or fp16 with dynamic loss scaling (which also runs on the CPU's fp32 step)."},
    {.path = "mixed_precision.loss_scale_window", .kind = K::kInt, .at = TT_AT(mixed_precision.loss_scale_window), .range = kAtLeastOne,
     .read_by = kT, .doc = "fp16: clean steps in a row before the loss scale doubles (a non-finite gradient halves it and skips the update)."},
    {.path = "mixed_precision.init_scale", .kind = K::kFloat, .at = TT_AT(mixed_precision.init_scale), .range = kPositive,
     .read_by = kT, .doc = "fp16: the first loss scale."},
    {.path = "mixed_precision.max_skipped_steps", .kind = K::kInt, .at = TT_AT(mixed_precision.max_skipped_steps), .range = kAtLeastOne,
     .read_by = kT, .doc = "fp16: skipped steps in a row that stop the run with TT_ERR_NAN (without loss scaling the first one does)."},
    // bf16 with fp16 or without mixed precision is refused at load (config.cpp, check_master_weights).
    {.path = "mixed_precision.master_weights", .kind = K::kString, .at = TT_AT(mixed_precision.master_weights), .choices = "fp32|bf16",
     .read_by = kT, .doc = "The dtype the weights and gradients are kept in. fp32: AdamW updates fp32 weights (16 bytes per parameter with the moments). bf16 (needs enabled: true and dtype: bf16; then the CPU runs bf16 autocast too): the model is converted once to bf16 on the device, with no fp32 copy; AdamW keeps fp32 moments and rounds each updated weight back stochastically, keyed by train.seed, the parameter and the step, so resumes and replays are exact (12 bytes per parameter: half the weight and gradient memory). The trade-off: an update smaller than half a bf16 gap (2^-8 near 1.0) is kept only in expectation, and each rounding adds noise of up to a gap, so the weights random-walk around the fp32 run's. A resume may not change it."},

    {.path = "cuda_graph.enabled", .kind = K::kString, .at = TT_AT(cuda_graph.enabled), .choices = "auto|true|false",
     .read_by = kT, .doc = "Capture the whole training step as a CUDA graph per step shape and replay it (auto: on when training on CUDA; the CPU always runs eagerly)."},
    {.path = "cuda_graph.warmup_steps", .kind = K::kInt, .at = TT_AT(cuda_graph.warmup_steps), .range = kNonNegative,
     .read_by = kT, .doc = "Eager steps of a step shape before its capture (at least 2; the first is not timed)."},
    {.path = "cuda_graph.capture_frequency", .kind = K::kInt, .at = TT_AT(cuda_graph.capture_frequency), .range = kAtLeastOne,
     .read_by = kT, .doc = "Replays between two comparisons of replay and eager time (no eager step is re-run for them); eager steps between a failed capture and its retry."},
    {.path = "cuda_graph.retry", .kind = K::kInt, .at = TT_AT(cuda_graph.retry), .range = kNonNegative,
     .read_by = kT, .doc = "Failed captures of a step shape tolerated (each logged as a TT_ERR_GRAPH warning, the step run eagerly); one more and the shape runs eagerly for good. TELETRON_GRAPH_RETRY overrides it."},
    {.path = "cuda_graph.scope", .kind = K::kString, .at = TT_AT(cuda_graph.scope), .choices = "auto|step|blocks",
     .read_by = kT, .doc = "What is captured. step: the whole step (forward, backward, unscale, clip, optimizer). blocks: each Transformer block that is not checkpointed, forward and backward, one graph pair per block and step shape; the embedders, the loss and the optimizer run eagerly around them (what survives ops that cannot be captured). auto: the whole step, and the blocks for a step shape whose whole-step captures failed `retry` + 1 times. Steps with block graphs are timed against the shape's eager steps and dropped by the same threshold."},
    {.path = "cuda_graph.threshold", .kind = K::kFloat, .at = TT_AT(cuda_graph.threshold), .range = kThreshold,
     .read_by = kT, .doc = "The speed-up over eager (eager / replay GPU time) a graph must keep to stay, counted as max(threshold, 1): a graph slower than eager is always dropped, and a value above 1 asks for that much (1.1 = 10 % faster). TELETRON_GRAPH_THRESHOLD overrides it."},

    {.path = "optimizer.name", .kind = K::kString, .at = TT_AT(optimizer.name), .choices = "adamw",
     .read_by = kT | kB, .doc = "The optimizer: AdamW with decoupled weight decay and fp32 moments."},
    {.path = "optimizer.lr", .kind = K::kFloat, .at = TT_AT(optimizer.lr), .range = kPositive,
     .read_by = kT | kB, .doc = "Peak learning rate, reached after optimizer.warmup_steps."},
    // betas fills OptimizerSection::beta1 and beta2.
    {.path = "optimizer.betas", .kind = K::kBetas, .at = TT_AT(optimizer), .range = kBeta,
     .read_by = kT | kB, .doc = "AdamW's decay rates of the first and second moment estimates."},
    {.path = "optimizer.weight_decay", .kind = K::kFloat, .at = TT_AT(optimizer.weight_decay), .range = kNonNegative,
     .read_by = kT | kB, .doc = "Decoupled weight decay, scaled by the learning rate."},
    {.path = "optimizer.eps", .kind = K::kFloat, .at = TT_AT(optimizer.eps), .range = kPositive,
     .read_by = kT | kB, .doc = "Added to the root of the second moment in AdamW's denominator."},
    {.path = "optimizer.max_grad_norm", .kind = K::kFloat, .at = TT_AT(optimizer.max_grad_norm), .range = kNonNegative,
     .read_by = kT | kB, .doc = "Gradients are scaled down to this global L2 norm before the update; 0 = no clipping."},
    {.path = "optimizer.warmup_steps", .kind = K::kInt, .at = TT_AT(optimizer.warmup_steps), .range = kNonNegative,
     .read_by = kT, .doc = "Optimizer steps of linear warmup from 0 to optimizer.lr."},
    {.path = "optimizer.schedule", .kind = K::kString, .at = TT_AT(optimizer.schedule), .choices = "constant|cosine",
     .read_by = kT, .doc = "After warmup: constant keeps optimizer.lr, cosine decays it to 0 at train.max_steps."},

    {.path = "flow_matching.timestep_sampling", .kind = K::kString, .at = TT_AT(flow_matching.timestep_sampling), .choices = "logit_normal|uniform", .aliases = "sigmoid=logit_normal",
     .read_by = kT, .doc = "How sigma is drawn before the shift: logit_normal (sigmoid of a normal; called sigmoid elsewhere) or uniform in (0, 1)."},
    {.path = "flow_matching.logit_mean", .kind = K::kFloat, .at = TT_AT(flow_matching.logit_mean),
     .read_by = kT, .doc = "logit_normal: mean of the normal whose sigmoid is sigma."},
    {.path = "flow_matching.logit_std", .kind = K::kFloat, .at = TT_AT(flow_matching.logit_std), .range = kPositive,
     .read_by = kT, .doc = "logit_normal: standard deviation of that normal."},
    {.path = "flow_matching.shift", .kind = K::kFloat, .at = TT_AT(flow_matching.shift), .range = kPositive,
     .read_by = kT, .doc = "Timestep shift s: sigma becomes s*sigma / (1 + (s-1)*sigma), pushing samples towards noise; 1 = none."},
    {.path = "flow_matching.guidance", .kind = K::kFloat, .at = TT_AT(flow_matching.guidance), .range = kNonNegative,
     .read_by = kT, .doc = "Value fed to the guidance embedder, times 1000 (only models with guidance_embeds); match the recipe you compare with."},

    {.path = "train.device", .kind = K::kString, .at = TT_AT(train.device), .choices = "auto|cpu|cuda",
     .read_by = kT | kB | kP | kV | kReadEncodeText | kSm, .doc = "Where the work runs: auto = cuda when a GPU is visible, else cpu; the commands' --device overrides it."},
    {.path = "train.max_steps", .kind = K::kInt, .at = TT_AT(train.max_steps), .range = kAtLeastOne,
     .read_by = kT, .doc = "Total optimizer steps, counted across resumes; --max-steps overrides it."},
    {.path = "train.seed", .kind = K::kInt, .at = TT_AT(train.seed), .range = kNonNegative,
     .read_by = kT | kP, .doc = "Seed of the initial weights, the data order, the noise and timesteps, frame sampling and augmentation."},
    {.path = "train.output_dir", .kind = K::kString, .at = TT_AT(train.output_dir),
     .read_by = kT, .doc = "The run folder (metrics, checkpoints, resolved config), relative to the working directory; --output overrides it."},
    {.path = "train.log_every", .kind = K::kInt, .at = TT_AT(train.log_every), .range = kAtLeastOne,
     .read_by = kT, .doc = "Steps between log lines and metrics.jsonl rows."},
    {.path = "train.checkpoint_every", .kind = K::kInt, .at = TT_AT(train.checkpoint_every), .range = kAtLeastOne,
     .read_by = kT, .doc = "Steps between checkpoints (the last step always writes one)."},
    {.path = "train.keep_checkpoints", .kind = K::kInt, .at = TT_AT(train.keep_checkpoints), .range = kNonNegative,
     .read_by = kT, .doc = "How many of the newest checkpoints stay; 0 = keep all."},
    {.path = "train.expandable_segments", .kind = K::kBool, .at = TT_AT(train.expandable_segments),
     .read_by = kT, .doc = "On CUDA, the caching allocator grows its segments in place instead of making new ones (less fragmentation when shapes vary, e.g. buckets or a dynamic batch); a PYTORCH_ALLOC_CONF or PYTORCH_CUDA_ALLOC_CONF that names expandable_segments wins. CUDA graphs' private pool keeps plain segments. The CPU ignores it."},
    {.path = "train.memory_cap", .kind = K::kFloat, .at = TT_AT(train.memory_cap), .range = kFraction,
     .read_by = kT, .doc = "On CUDA, the share of the GPU's memory the caching allocator may take (its per-process memory fraction); past it an allocation is out of memory (TT_ERR_MEMORY, or a smaller micro-batch with batch_size: dynamic, which budgets with min(dynamic_batch.memory_fraction, this)). 1.0 = no cap. The CPU ignores it."},
    {.path = "train.memory_check", .kind = K::kBool, .at = TT_AT(train.memory_check),
     .read_by = kT, .doc = "On CUDA, before step 0, estimate the step's peak GPU memory (parameters, gradients and AdamW state counted; the rest measured by two steps of one- and two-block copies of the model at the largest bucket and micro-batch, extrapolated to the full depth), log it, and stop with TT_ERR_MEMORY and the ways out when it exceeds what a step may use: the device's memory times train.memory_cap, no more than the CUDA allocator can reach (the CUDA context's memory is not its), less 2 % for the estimate's error; with train.expandable_segments: false, a peak above 80 % of that is warned of fragmentation. Costs a few seconds at start-up; false skips it. `teletron memory CONFIG` prints the same estimate."},
    {.path = "train.ema_decay", .kind = K::kFloat, .at = TT_AT(train.ema_decay), .range = kBeta,
     .read_by = kT, .doc = "Keep an exponential moving average of the trained tensors (the adapters in a LoRA run, else every weight) in fp32 on the device, updated after each optimizer step as diffusers' EMAModel does without warm-up: decay_t = min(ema_decay, (1 + t) / (10 + t)) at the t-th step (0-based, so the first step copies the weights); a skipped (non-finite) step leaves it unchanged. Saved in each checkpoint's state (ema.<key>; resume continues it exactly) and written by `teletron export --ema`. Costs 4 bytes per trained parameter of GPU memory (counted by the memory estimate). 0 = off; 0.999-0.9999 are usual."},
    {.path = "train.tensorboard", .kind = K::kBool, .at = TT_AT(train.tensorboard),
     .read_by = kT, .doc = "Also write every metrics.jsonl scalar (and, later, validation videos as animated GIFs) into a TensorBoard event file in the run folder (events.out.tfevents.*; view with tensorboard --logdir RUN). A failing event file is logged and never stops training."},

    {.path = "distributed.backend", .kind = K::kString, .at = TT_AT(distributed.backend), .choices = "nccl|gloo", .not_yet = kDistributed,
     .doc = "Collective backend between processes."},
    {.path = "distributed.zero_stage", .kind = K::kInt, .at = TT_AT(distributed.zero_stage), .range = kZeroStage, .not_yet = kDistributed,
     .doc = "ZeRO sharding stage: 0 none, 1 optimizer state, 2 + gradients, 3 + weights."},

    {.path = "text_encoder.pipeline", .kind = K::kOptString, .at = TT_AT(text_encoder.pipeline),
     .read_by = kReadEncodeText, .doc = "`teletron encode-text`: a diffusers HunyuanVideo pipeline folder whose text_encoder + tokenizer (LLaVA-Llama-3) and text_encoder_2 + tokenizer_2 (CLIP-L) encode the captions as HunyuanVideoPipeline.encode_prompt does; --pipeline overrides it."},
    {.path = "text_encoder.batch_size", .kind = K::kInt, .at = TT_AT(text_encoder.batch_size), .range = kAtLeastOne,
     .read_by = kReadEncodeText, .doc = "`teletron encode-text`: captions encoded at once; --batch-size overrides it."},
    {.path = "text_encoder.dtype", .kind = K::kString, .at = TT_AT(text_encoder.dtype), .choices = "auto|bf16|fp32",
     .read_by = kReadEncodeText, .doc = "`teletron encode-text`: the encoders' precision and the files' dtype: auto = bf16 on CUDA (as the released pipeline runs), fp32 on the CPU. Another dtype is another cache identity (other files)."},

    {.path = "validation.every", .kind = K::kInt, .at = TT_AT(validation.every), .range = kNonNegative,
     .read_by = kT, .doc = "Every this many optimizer steps (after the step, never inside a CUDA graph capture), sample a video from the current weights (the model in eval mode, LoRA included) with the flow-matching sampler of `teletron sample`, decode it with the VAE of vae.*, write <run>/samples/step_<step>.mp4 and, with train.tensorboard, an animated GIF image summary `validation/video`; 0 = off. Draws no random numbers from the training streams: a resume trains the same."},
    {.path = "validation.text_embeddings", .kind = K::kOptString, .at = TT_AT(validation.text_embeddings),
     .read_by = kT, .doc = "The prompt: a text-embeddings file (text_states (L, text_embed_dim), text_mask (L), pooled (pooled_projection_dim)), e.g. one that `teletron encode-text --prompt` wrote; this or validation.prompt is required when validation.every > 0."},
    {.path = "validation.prompt", .kind = K::kOptString, .at = TT_AT(validation.prompt),
     .read_by = kT | kReadEncodeText, .doc = "The prompt as text instead: `teletron encode-text` encodes it into data.text_cache with the captions, and training takes its file from there (TT_ERR_DATA saying to run encode-text when it is missing). Set this or validation.text_embeddings, not both."},
    {.path = "validation.steps", .kind = K::kInt, .at = TT_AT(validation.steps), .range = kAtLeastOne,
     .read_by = kT, .doc = "Sampler steps (each one forward pass)."},
    {.path = "validation.frames", .kind = K::kInt, .at = TT_AT(validation.frames), .range = kAtLeastOne,
     .read_by = kT, .doc = "Frames of the video (4n + 1)."},
    {.path = "validation.height", .kind = K::kInt, .at = TT_AT(validation.height), .range = kAtLeastOne,
     .read_by = kT, .doc = "Height of the video in pixels (a multiple of 16)."},
    {.path = "validation.width", .kind = K::kInt, .at = TT_AT(validation.width), .range = kAtLeastOne,
     .read_by = kT, .doc = "Width of the video in pixels (a multiple of 16)."},
    {.path = "validation.guidance", .kind = K::kFloat, .at = TT_AT(validation.guidance), .range = kNonNegative,
     .read_by = kT, .doc = "Embedded guidance scale fed to guidance-distilled models (times 1000), HunyuanVideoPipeline's default 6.0; training feeds flow_matching.guidance instead."},
    {.path = "validation.flow_shift", .kind = K::kFloat, .at = TT_AT(validation.flow_shift), .range = kPositive,
     .read_by = kT, .doc = "The sampler's sigma shift k: sigma becomes k sigma / (1 + (k - 1) sigma), HunyuanVideoPipeline's flow_shift."},
    {.path = "validation.seed", .kind = K::kInt, .at = TT_AT(validation.seed), .range = kNonNegative,
     .read_by = kT, .doc = "Seed of the initial noise (teletron's keyed generator, not torch.randn's stream): the same video noise at every validation, so the videos show what training changed."},
};
// clang-format on

#undef TT_AT

}  // namespace

std::span<const ConfigField> config_fields() { return kFields; }

const ConfigField* find_config_field(const std::string& path) {
  for (const ConfigField& field : kFields) {
    if (path == field.path) return &field;
  }
  return nullptr;
}

namespace config_text {

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    size_t end = text.find(sep, start);
    parts.push_back(text.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) return parts;
    start = end + 1;
  }
}

std::string join(const std::vector<std::string>& parts, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? sep : "") + parts[i];
  return out;
}

std::string format_double(double value) {
  char buffer[64];
  auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  std::string text(buffer, result.ptr);
  if (text.find_first_of(".ni") != std::string::npos) return text;  // has '.', or inf/nan
  size_t e = text.find('e');
  if (e == std::string::npos) return text + ".0";
  return text.substr(0, e) + ".0" + text.substr(e);
}

std::string range_text(const ConfigRange& r) {
  bool has_lo = std::isfinite(r.lo), has_hi = std::isfinite(r.hi);
  auto num = [](double v) {
    return v == std::floor(v) ? std::to_string(int64_t(v)) : format_double(v);
  };
  std::string lo = has_lo ? num(r.lo) : "", hi = has_hi ? num(r.hi) : "";
  if (has_lo && has_hi) return "in " + std::string(r.lo_open ? "(" : "[") + lo + ", " + hi + (r.hi_open ? ")" : "]");
  if (has_lo) return std::string(r.lo_open ? "> " : ">= ") + lo;
  if (has_hi) return std::string(r.hi_open ? "< " : "<= ") + hi;
  return "";
}

bool parse_int(std::string text, int64_t* out) {
  if (!text.empty() && text[0] == '+') text.erase(0, 1);
  const char* end = text.data() + text.size();
  auto result = std::from_chars(text.data(), end, *out);
  return !text.empty() && result.ec == std::errc() && result.ptr == end;
}

bool parse_float(std::string text, double* out) {
  if (!text.empty() && text[0] == '+') text.erase(0, 1);
  const char* end = text.data() + text.size();
  auto result = std::from_chars(text.data(), end, *out);
  return !text.empty() && result.ec == std::errc() && result.ptr == end && std::isfinite(*out);
}

bool parse_bool(const std::string& text, bool* out) {
  const char* yes[] = {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON"};
  const char* no[] = {"false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF"};
  for (const char* word : yes) {
    if (text == word) return *out = true, true;
  }
  for (const char* word : no) {
    if (text == word) return *out = false, true;
  }
  return false;
}

// Edits (insert, delete, replace, swap two neighbours) between a and b: "widht" is 1 from "width".
static size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

std::string nearest_name(const std::string& name, const std::vector<std::string>& names) {
  std::string best;
  size_t best_distance = std::max<size_t>(1, name.size() / 3) + 1;
  for (const std::string& candidate : names) {
    size_t distance = edit_distance(name, candidate);
    bool prefix =
        name.size() >= 3 && (candidate.rfind(name, 0) == 0 || name.rfind(candidate, 0) == 0);
    if (prefix) distance = std::min<size_t>(distance, 1);
    if (distance < best_distance) best = candidate, best_distance = distance;
  }
  return best;
}

}  // namespace config_text

}  // namespace tt
