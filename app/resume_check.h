// What a resume may change. The invariant is the run itself: the model, the sequence of samples
// and the global batch (samples per optimizer step). Before step 0 the checkpoint's resolved
// config is compared key by key with the new one. The comparison is a whitelist: a key counts as
// safe only when it is listed here as not touching the invariant (cadence, paths, execution
// knobs); every other difference, including keys added to the schema later, is a change to the
// run and stops with TT_ERR_CONFIG naming the key and both values, unless `--allow-change KEY`
// accepts it (logged as a warning).
//
//   safe (info): train.max_steps (the log says what it does to the lr schedule), train.log_every,
//     train.checkpoint_every, train.keep_checkpoints, train.output_dir, train.device (the resolved
//     device type is checked against the checkpoint separately), data.manifest (the path; the
//     contents are checked by the manifest hash), data.max_failed_share, data_pipeline.prefetch,
//     data_pipeline.workers, data_pipeline.video_decoding, model.activation_checkpointing
//     (recomputes, same math), vae.tile_batch (how many tiles go through the encoder at once),
//     train.expandable_segments and train.memory_cap (the CUDA allocator's layout and cap),
//     data_pipeline.optical_flow.* (the flow stage only measures motion for metrics.jsonl).
//   the global batch: batch_size × gradient_accumulation (× ranks, once there are several) may be
//     split differently as long as the product stays the same.
//   unused: with data.source: latents before and after, vae.*, data_pipeline.* and data.buckets
//     do not take part in training.
//   everything else blocks: train.seed, model.*, vae.* (video), data.source, data.buckets,
//     data.caption_dropout, data.min_motion, data.max_motion, data_pipeline.frame_sampler/augment.*,
//     the global batch, dynamic_batch.*, mixed_precision.* (master_weights too: the weights' dtype),
//     cuda_graph.*, optimizer.* (every hyper-parameter: lr, betas, weight_decay, eps, max_grad_norm,
//     warmup_steps, schedule), flow_matching.*, distributed.*.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "app/config.h"

namespace tt {

/// Key path below `tele_tron:` -> the value's text as config_to_yaml prints it (lists in flow
/// style: "[{frames: 9, height: 64, width: 64}]"). Parses config_to_yaml's fixed layout (two spaces
/// per level, one key per line, block-list items "- ..."), which is also what checkpoints store.
std::map<std::string, std::string> config_values(const std::string& resolved_yaml);

/// How the global batch is made: micro-batch × accumulation steps × ranks. Ranks stay 1 until
/// distributed training reads its world size from the config; global_batch_of then multiplies it in.
struct GlobalBatch {
  int64_t batch_size = 1;  // batch_size: dynamic: dynamic_batch.initial
  int64_t accumulation = 1;
  int64_t ranks = 1;
  bool dynamic = false;          // batch_size: dynamic: the micro-batches follow memory, the global batch is fixed
  int64_t dynamic_global = 0;    // dynamic_batch.global_batch; 0 = batch_size × accumulation × ranks
  int64_t samples() const { return dynamic_global > 0 ? dynamic_global : batch_size * accumulation * ranks; }
  std::string describe() const;
};
GlobalBatch global_batch_of(const Config& config);
GlobalBatch global_batch_of(const std::map<std::string, std::string>& values);

/// --allow-change keys checked against the schema (an optional `tele_tron.` root is dropped); an
/// unknown key is TT_ERR_CONFIG with the nearest valid one.
std::vector<std::string> normalize_allowed_changes(const std::vector<std::string>& keys);

struct ResumeCheck {
  std::vector<std::string> notes;     // changes that keep the run (log as info)
  std::vector<std::string> warnings;  // changes to the run accepted by --allow-change (log as warnings)
  std::vector<std::string> changed;   // every key that differs, whatever its class
  /// True when a key equal to `prefix` or below it ("data_pipeline.frame_sampler") changed.
  bool changed_under(const std::string& prefix) const;
};

/// Compares the config stored in a checkpoint (its resolved YAML) with `now`. `step` is the
/// checkpoint's step (for what a new max_steps does to the schedule), `where` names the checkpoint
/// in messages, `allowed` holds normalized --allow-change keys. Keys the checkpoint's teletron did
/// not know yet count with their default. Throws TT_ERR_CONFIG listing every blocked change.
ResumeCheck check_resume_config(const std::string& checkpoint_yaml, const Config& now, int64_t step,
                                const std::string& where, const std::vector<std::string>& allowed);

/// The manifest's content hash against the checkpoint's: equal -> "", different -> TT_ERR_CONFIG
/// naming the manifest, or the warning to log when data.manifest is in `allowed`.
std::string check_manifest_hash(const std::string& stored, const std::string& now,
                                const std::string& manifest, const std::string& where,
                                const std::vector<std::string>& allowed);

}  // namespace tt
