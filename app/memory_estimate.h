// How much GPU memory a training step needs, known before step 0 (issue 14): the parameters,
// gradients and optimizer state counted from the architecture, and the whole step's peak measured
// on shallow copies of the model. Every part of the peak (weights, gradients, optimizer state,
// activations kept for backward, the autocast copies of the weights) grows by a fixed amount per
// double-stream and per single-stream block, and the scratch of one block's backward is the same
// whatever the depth, so three probes - depths (1, 1), (2, 1) and (1, 2), each running two real
// steps (forward, backward, clipping, AdamW) at the run's shape and micro-batch - give the full
// depth's peak by linear extrapolation:
//   peak(D, S) = p11 + (D - 1) (p21 - p11) + (S - 1) (p12 - p11)
// measured once with every block checkpointed and once with none, so that `every_n` in between
// and the two extremes can be told. The probes run on the run's device with its precision, LoRA,
// fused kernels and checkpointing; on the CPU (no allocator statistics) only the counted parts are
// given.
//
// model.activation_checkpointing: auto uses the same line: it recomputes the fewest blocks whose
// extrapolated peak stays within a budget (fewest_checkpointed), so a step that fits without
// recomputing anything runs without it, and one that does not recomputes only as many blocks as
// it must - the kind that frees more per block first.
#pragma once

#include <torch/types.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "app/config.h"
#include "core/device.h"
#include "model/hunyuan_config.h"
#include "model/transformer.h"

namespace tt {

/// The step's shape: micro-batch and the latents' size (after the VAE, before patching) and text.
struct StepShape {
  int64_t batch = 1;
  int64_t latent_frames = 9, latent_height = 60, latent_width = 104;  // 33 x 480 x 832
  int64_t text_tokens = 256;
  /// Video tokens the Transformer sees for `config` (latents / patch).
  int64_t video_tokens(const HunyuanVideoConfig& config) const;
  /// "33x480x832" (the pixel clip the latents come from).
  std::string describe() const;
};

/// The latent shape of a clip of frames x height x width pixels (frames 4n+1, sizes multiples of 16).
StepShape step_shape_of_clip(int64_t frames, int64_t height, int64_t width, int64_t batch, int64_t text_tokens);

/// Measured peaks (bytes) of the three shallow probes in one checkpointing mode.
struct ProbePeaks {
  double p11 = 0, p21 = 0, p12 = 0;
};

/// How many double-stream and single-stream blocks are recomputed in backward.
struct CheckpointCounts {
  int64_t doubles = 0, singles = 0;
  int64_t total() const { return doubles + singles; }
  bool operator==(const CheckpointCounts&) const = default;
};

/// The counts `every_n` gives a model of `doubles` + `singles` blocks (blocks i with i % every_n ==
/// 0, doubles first, as the model places them; 0 = none).
CheckpointCounts checkpoint_counts(int64_t doubles, int64_t singles, int64_t every_n);

/// The share of the memory check's capacity that model.activation_checkpointing: auto plans for:
/// the estimate is meant to be within 10 % of the measured peak.
inline constexpr double kAutoCheckpointShare = 0.9;
/// The share of what the allocator can reach that the memory check and bench --max-frames plan a
/// step for: 2 % kept back for the estimate's error (within 0.9 % of the measured peak on the GPU)
/// and the allocator's rounding.
inline constexpr double kPlanningShare = 0.98;
/// Above this share of the planned capacity, a step with plain allocator segments is warned of
/// fragmentation.
inline constexpr double kCloseToCapacity = 0.8;
/// The bytes a step may plan for on a device: train.memory_cap's share of its memory, no more than
/// the allocator can hold (memory.available; total where that is unknown), times kPlanningShare.
double planning_capacity(const GpuMemory& memory, double memory_cap);

/// batch_size: dynamic: what a bucket's first (measured) step says of its memory.
struct MicroBatchFit {
  double per_sample = 0;  // bytes per sample at the step's peak, beyond what any micro-batch holds
  int64_t fits = 0;       // samples of that size that fit the room
};
/// From a measured step of `samples` samples: `allocated_before`, what was allocated as it began;
/// `grads_to_come`, the bytes of the gradients that did not exist then (the step makes them whatever
/// its micro-batch: all of them at a run's first step, none later, when they are kept (graphs) or
/// freed and made again); `peak`, the allocator's peak during the step; `room`, the bytes the step
/// may fill (the budget's share of the device, less what runs beside it). Gradients that existed
/// before the step are in `allocated_before` already. Nothing fits (fits 0) where the peak is not
/// above the fixed part.
MicroBatchFit fit_micro_batch(int64_t allocated_before, int64_t grads_to_come, int64_t peak, int64_t samples,
                              double room);

/// The counted parts of a step's memory (bytes), from the architecture alone.
struct CountedMemory {
  int64_t parameters = 0;          // the whole model's
  int64_t trainable = 0;           // what the optimizer updates (the adapters with LoRA)
  double weight_bytes = 0;         // the model as it sits on the device (+ adapters)
  double gradient_bytes = 0;       // one gradient per trainable parameter
  double optimizer_bytes = 0;      // AdamW's two moments (fp32)
  double ema_bytes = 0;            // train.ema_decay: an fp32 average per trainable parameter
};

struct MemoryEstimate {
  CountedMemory counted;
  StepShape shape;
  /// every_n of the run's model.activation_checkpointing (0 = none, kCheckpointingAuto = auto).
  int64_t checkpoint_every_n = 0;
  /// The blocks the peak below recomputes: every_n's, or auto's plan (none on the CPU), of `blocks`.
  CheckpointCounts checkpointed, blocks;
  /// auto: the budget its plan was made for (bytes).
  double auto_budget_bytes = 0;
  bool measured = false;            // false on the CPU: only `counted` is known
  double peak_bytes = 0;            // the run's peak as configured
  double peak_without_checkpointing = 0;
  double peak_with_checkpointing = 0;  // every block
  ProbePeaks probes_none, probes_all;
  /// peak - weights - gradients - optimizer: the activations kept for backward, the autocast
  /// copies of the weights, one block's backward scratch and the libraries' workspaces.
  double activation_bytes() const;
  double activation_bytes_per_sample() const { return activation_bytes() / static_cast<double>(shape.batch); }
};

/// Linear extrapolation of the three probes to `doubles` and `singles` blocks, `every_n`
/// checkpointing (blocks i with i % every_n == 0 recomputed, doubles first, as the model does).
double extrapolate_peak(const ProbePeaks& none, const ProbePeaks& all, int64_t doubles, int64_t singles,
                        int64_t every_n);
/// The same for `checkpointed` blocks of each kind (which ones does not change the peak: every
/// block's kept activations are alive when backward begins).
double extrapolate_peak(const ProbePeaks& none, const ProbePeaks& all, int64_t doubles, int64_t singles,
                        const CheckpointCounts& checkpointed);

/// model.activation_checkpointing: auto's plan: the fewest recomputed blocks whose extrapolated
/// peak is at most `budget_bytes`, taking first the kind whose checkpointing frees more per block
/// (a block of either kind costs about the same to recompute: the same GEMM and attention FLOPs per
/// token). Without a complete `none` (its probes ran out of memory) every block; when even every
/// block exceeds the budget, every block (check_estimate_fits then says so).
CheckpointCounts fewest_checkpointed(const ProbePeaks& none, const ProbePeaks& all, int64_t doubles,
                                     int64_t singles, double budget_bytes);

/// Hands the run's model.activation_checkpointing to `model`: every n-th block as configured, or,
/// for auto, `planned` (the estimate's `checkpointed`; none where no estimate ran, as on the CPU).
void apply_activation_checkpointing(HunyuanVideoTransformerImpl& model, int64_t configured_every_n,
                                    const CheckpointCounts& planned);

/// The counted parts for `config` (dtype policy as the trainer's: fp32 master weights, bf16 master
/// weights, or a frozen base in the autocast dtype with fp32 adapters).
CountedMemory count_memory(const Config& config, const HunyuanVideoConfig& model, bool cuda);

/// Runs the probes on `device` (CUDA; on the CPU returns the counted parts only). Throws
/// TT_ERR_MEMORY when a probe the configured checkpointing needs does not fit. `both_modes`: also
/// probe the other mode, for the with / without checkpointing figures (NaN when it does not fit).
/// With model.activation_checkpointing: auto both modes run and `checkpointed` is
/// fewest_checkpointed's plan for `auto_budget_bytes` (> 0 needed); on the CPU auto plans none.
MemoryEstimate estimate_step_memory(const Config& config, const HunyuanVideoConfig& model, const StepShape& shape,
                                    const torch::Device& device, bool both_modes = true,
                                    double auto_budget_bytes = 0);

/// The peak (bytes) of the second of two training steps of the whole `model` at `shape` with
/// `every_n` checkpointing, run as a probe runs them (CUDA; NaN when it runs out of memory).
double measure_step_peak(const Config& config, const HunyuanVideoConfig& model, const StepShape& shape,
                         const torch::Device& device, int64_t every_n);
/// The same with the first `checkpointed` blocks of each kind recomputed (auto's plans).
double measure_step_peak(const Config& config, const HunyuanVideoConfig& model, const StepShape& shape,
                         const torch::Device& device, const CheckpointCounts& checkpointed);

/// The longest clip (4n+1 frames) at height x width whose estimated step fits `capacity_bytes`,
/// with the config's checkpointing (auto: every block, its most frugal plan): the estimate at 33
/// and 65 frames, the linear crossing, then up to `neighbour_checks` more estimates around it until
/// the boundary is found (0: the crossing alone, unprobed; each probe at a long 720p clip costs
/// minutes: attention grows with the square of the tokens). `tried` gets every (frames, peak bytes).
int64_t longest_clip_frames(const Config& config, const HunyuanVideoConfig& model, int64_t height, int64_t width,
                            int64_t batch, int64_t text_tokens, const torch::Device& device, double capacity_bytes,
                            std::vector<std::pair<int64_t, double>>* tried = nullptr, int64_t neighbour_checks = 8);

/// A table of the estimate for the log: counted parts, activations per sample, the peak as
/// configured and with / without checkpointing.
std::string describe_estimate(const MemoryEstimate& estimate, double capacity_bytes);

/// Throws TT_ERR_MEMORY, with the numbers and the ways out (checkpointing, LoRA, a smaller bucket
/// or micro-batch, more GPUs), when the estimated peak exceeds `capacity_bytes`.
void check_estimate_fits(const MemoryEstimate& estimate, const Config& config, double capacity_bytes);

/// The step shape `teletron train` will run at its largest: the largest bucket (video) or the
/// cached latents' shape, at the micro-batch (dynamic: dynamic_batch.min).
StepShape largest_step_shape(const Config& config, const std::vector<int64_t>& latent_shape, int64_t text_tokens);

}  // namespace tt
