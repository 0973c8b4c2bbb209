// The resume whitelist (see resume_check.h).
#include "app/resume_check.h"

#include <algorithm>
#include <iterator>
#include <set>

#include "app/config_schema.h"
#include "app/options.h"
#include "core/errors.h"

namespace tt {
namespace {

// Keys whose value does not touch the model, the sample sequence or the global batch, with what
// their change does, for the log. train.max_steps has its own note (the schedule).
struct SafeKey {
  const char* key;
  const char* effect;
};
const SafeKey kSafeKeys[] = {
    {"train.max_steps", nullptr},
    {"train.log_every", "metrics cadence only"},
    {"train.checkpoint_every", "checkpoint cadence only"},
    {"train.keep_checkpoints", "how many checkpoints stay"},
    {"train.output_dir", "the run folder's path only"},
    {"train.device",
     "another device type resumes with a warning: the same samples and noise, other rounding"},
    {"data.manifest", "the path only; the contents are checked by the manifest hash"},
    {"data.max_failed_share",
     "how many failed samples stop the run; which rows replace a failure is unchanged"},
    {"data_pipeline.prefetch", "how far the pipeline runs ahead; the same batches"},
    {"data.prefetch", "how far the cached latents are read ahead; the same batches"},
    {"data_pipeline.workers", "how many threads decode; the same batches"},
    {"data_pipeline.video_decoding",
     "where clips are decoded; the same frames, pixels within the colour tolerance of the two paths"},
    {"model.activation_checkpointing", "recomputes activations in backward; the same math"},
    {"model.fused_kernels", "fused kernels or the plain composition; the same math up to rounding"},
    {"model.segment_attention", "segments or a key mask for padded text; the same math up to rounding"},
    {"model.per_sample_attention",
     "per-sample calls or a key mask for padded text; the same math up to rounding"},
    {"model.checkpoint_keeps_attention", "kept or recomputed attention in backward; the same math"},
    {"cuda_graph.enabled", "how the step is launched (captured graphs or eagerly); the same math"},
    {"cuda_graph.warmup_steps", "when a step shape is captured; the same math"},
    {"cuda_graph.capture_frequency", "how often replays are compared with eager; the same math"},
    {"cuda_graph.retry", "how often a failed capture is tried again; the same math"},
    {"cuda_graph.threshold", "which graphs are kept; the same math"},
    {"cuda_graph.scope", "what a capture takes (the whole step or the blocks); the same math"},
    {"data.text_padding", "text padding kept (masked) or trimmed; the same loss up to rounding"},
    {"data.text_trim_multiple", "how many masked text columns a trimmed batch keeps; the same loss up to rounding"},
    {"vae.tile_batch", "how many VAE tiles go through the encoder at once; the same latents"},
    {"vae.memory_share",
     "how much of the GPU the encoder may take; the same latents (or a stop at start-up)"},
    {"vae.fused_padding",
     "where the encoder's norm writes its output and adds the biases; the same latents up to bf16 rounding"},
    {"vae.gemm_kernels",
     "which kernels run the encoder's first convolution and attention; the same latents up to bf16 rounding"},
    {"vae.cuda_graphs", "how the encoder's passes are launched; the same latents"},
    // The flow stage measures each sample's motion for metrics.jsonl; the batches do not depend on it
    // (data.min_motion / max_motion and frame_sampler mode motion read the motion cache instead).
    {"data_pipeline.optical_flow.algorithm",
     "the flow stage's estimator: other motion values in metrics.jsonl; the same batches"},
    {"data_pipeline.optical_flow.fallback", "what the flow stage runs without NVOFA; the same batches"},
    {"data_pipeline.optical_flow.warp_mode", "where TV-L1 runs; the same batches"},
    {"data_pipeline.optical_flow.grid", "NVOFA's output grid: other motion values; the same batches"},
    {"data_pipeline.optical_flow.preset", "NVOFA's preset: other motion values; the same batches"},
    {"data_pipeline.optical_flow.weights", "RAFT's weights: other motion values; the same batches"},
    {"data_pipeline.optical_flow.pairs", "pairs per motion score: other motion values; the same batches"},
    {"text_encoder.pipeline", "read by encode-text only; training reads the embeddings files"},
    {"text_encoder.batch_size", "read by encode-text only; training reads the embeddings files"},
    {"text_encoder.dtype", "read by encode-text only; training reads the embeddings files"},
    {"train.memory_check", "whether the memory estimate runs before the first step; the same run"},
    {"train.tensorboard", "whether the run folder gets TensorBoard event files; the same run"},
    {"train.ema_decay",
     "the average kept beside the weights (started from them when the checkpoint has none); "
     "the same training"},
    {"validation.every", "what the validation videos show; training draws nothing from them"},
    {"validation.text_embeddings", "what the validation videos show; training draws nothing from them"},
    {"validation.prompt", "what the validation videos show; training draws nothing from them"},
    {"validation.steps", "what the validation videos show; training draws nothing from them"},
    {"validation.frames", "what the validation videos show; training draws nothing from them"},
    {"validation.height", "what the validation videos show; training draws nothing from them"},
    {"validation.width", "what the validation videos show; training draws nothing from them"},
    {"validation.guidance", "what the validation videos show; training draws nothing from them"},
    {"validation.flow_shift", "what the validation videos show; training draws nothing from them"},
    {"validation.seed", "what the validation videos show; training draws nothing from them"},
    {"train.expandable_segments", "how the CUDA allocator lays out its memory; the same math"},
    {"train.memory_cap",
     "how much GPU memory the allocator may take; the same math (a dynamic batch may cut its "
     "micro-batches differently)"},
};

// The keys that split the global batch. When distributed training lands, its world-size key joins
// this list and global_batch_of reads it into GlobalBatch::ranks.
const char* const kSplitKeys[] = {"batch_size",          "gradient_accumulation",  "dynamic_batch.initial",
                                  "dynamic_batch.memory_fraction", "dynamic_batch.min", "dynamic_batch.max",
                                  "dynamic_batch.global_batch"};

// With data.source: latents before and after, these keys are read by nothing that trains.
const char* const kVideoOnlyPrefixes[] = {"vae", "data_pipeline", "data.buckets"};

// What a blocked key belongs to, for the message; the longest matching prefix wins.
struct Part {
  const char* prefix;
  const char* what;
};
const Part kParts[] = {
    {"model", "the model"},
    {"model.lora", "the LoRA adapters (their modules, shapes and scale)"},
    {"vae", "the latents the VAE makes"},
    {"data", "the sample sequence"},
    {"data_pipeline", "the sample sequence"},
    {"train.seed", "the sample sequence and the noise"},
    {"batch_size", "the global batch"},
    {"gradient_accumulation", "the global batch"},
    {"dynamic_batch", "the global batch"},
    {"mixed_precision", "the precision"},
    {"mixed_precision.master_weights",
     "the weights' dtype: fp32 weights would be rounded to bf16 once, or bf16 ones continue without their "
     "stochastic rounding, so the run does not continue as it would have"},
    {"optimizer", "the optimizer"},
    {"flow_matching", "the flow-matching objective"},
    {"distributed", "the distributed setup (not built yet: not known to keep the run)"},
};

bool is_under(const std::string& key, const std::string& prefix) {
  return key == prefix || (key.size() > prefix.size() && key.compare(0, prefix.size(), prefix) == 0 &&
                           key[prefix.size()] == '.');
}

const char* part_of(const std::string& key) {
  const char* what = "not known to keep the run";
  size_t best = 0;
  for (const Part& part : kParts) {
    const size_t length = std::string(part.prefix).size();
    if (length > best && is_under(key, part.prefix)) {
      best = length;
      what = part.what;
    }
  }
  return what;
}

std::string trim(const std::string& text) {
  const size_t first = text.find_first_not_of(' ');
  if (first == std::string::npos) return "";
  return text.substr(first, text.find_last_not_of(' ') - first + 1);
}

int64_t int_value(const std::map<std::string, std::string>& values, const std::string& key,
                  int64_t fallback) {
  auto it = values.find(key);
  int64_t out = 0;
  if (it == values.end() || !config_text::parse_int(it->second, &out)) return fallback;
  return out;
}

bool contains(const std::vector<std::string>& list, const std::string& key) {
  return std::find(list.begin(), list.end(), key) != list.end();
}

std::string max_steps_note(const Config& now, int64_t before, int64_t after, int64_t step) {
  std::string note =
      str_cat("tele_tron.train.max_steps: ", before, " -> ", after, ": the run now ends at step ", after);
  const OptimizerSection& optimizer = now.optimizer;
  if (optimizer.schedule == "cosine") {
    note += str_cat("; the cosine decay is re-stretched to end at step ", after, " (lr at step ", step + 1,
                    ": ", learning_rate_at(optimizer, step, after), ", was ",
                    learning_rate_at(optimizer, step, before), " with ", before, ")");
  } else {
    note += "; the schedule is constant after warmup, so the learning rate does not change";
  }
  if (optimizer.warmup_steps > std::min(before, after))
    note += str_cat("; warmup (", optimizer.warmup_steps, " steps) is longer than the run");
  return note;
}

}  // namespace

std::map<std::string, std::string> config_values(const std::string& resolved_yaml) {
  std::map<std::string, std::string> values;
  std::set<std::string> lists;
  std::vector<std::string> sections;  // the open sections below the root
  std::string last_key;
  for (const std::string& raw : config_text::split(resolved_yaml, '\n')) {
    const std::string line = raw.substr(0, raw.find_last_not_of("\r") + 1);
    const size_t indent = line.find_first_not_of(' ');
    if (indent == std::string::npos || line[indent] == '#') continue;
    const std::string content = line.substr(indent);
    if (content.rfind("- ", 0) == 0) {  // an item of the block list opened by the last key
      std::string& value = values[last_key];
      value += (value.empty() ? "" : ", ") + trim(content.substr(2));
      lists.insert(last_key);
      continue;
    }
    const size_t colon = content.find(':');
    if (colon == std::string::npos) continue;
    const size_t depth = indent / 2;
    if (depth == 0) {  // the root, tele_tron:
      sections.clear();
      continue;
    }
    sections.resize(std::min(sections.size(), depth - 1));
    const std::string name = content.substr(0, colon);
    std::string path;
    for (const std::string& section : sections) path += section + ".";
    path += name;
    const std::string value = trim(content.substr(colon + 1));
    values[path] = value;
    last_key = path;
    if (value.empty()) sections.push_back(name);  // a section, or a block list (buckets)
  }
  for (const std::string& key : lists) values[key] = "[" + values[key] + "]";
  // Empty values that opened a section are not keys.
  for (auto it = values.begin(); it != values.end();) {
    auto next = std::next(it);
    if (it->second.empty() && next != values.end() && is_under(next->first, it->first))
      it = values.erase(it);
    else
      it = next;
  }
  return values;
}

std::string GlobalBatch::describe() const {
  if (dynamic && dynamic_global > 0) return str_cat(samples(), " samples (batch_size dynamic, dynamic_batch.global_batch)");
  std::string text =
      dynamic ? str_cat(samples(), " samples (batch_size dynamic: dynamic_batch.initial ", batch_size,
                        " × gradient_accumulation ", accumulation)
              : str_cat(samples(), " samples (batch_size ", batch_size, " × gradient_accumulation ", accumulation);
  if (ranks != 1) text += str_cat(" × ", ranks, " ranks");
  return text + ")";
}

GlobalBatch global_batch_of(const Config& config) {
  GlobalBatch batch;
  batch.dynamic = config.batch_size_dynamic;
  batch.batch_size = batch.dynamic ? config.dynamic_batch.initial : config.batch_size;
  batch.accumulation = config.gradient_accumulation;
  if (batch.dynamic) batch.dynamic_global = config.dynamic_batch.global_batch.value_or(0);
  return batch;
}

GlobalBatch global_batch_of(const std::map<std::string, std::string>& values) {
  GlobalBatch batch;
  auto size = values.find("batch_size");
  batch.dynamic = size != values.end() && size->second == "dynamic";
  batch.batch_size = batch.dynamic ? int_value(values, "dynamic_batch.initial", 32) : int_value(values, "batch_size", 1);
  batch.accumulation = int_value(values, "gradient_accumulation", 1);
  if (batch.dynamic) {
    auto global = values.find("dynamic_batch.global_batch");
    if (global != values.end() && global->second != "null") batch.dynamic_global = int_value(values, "dynamic_batch.global_batch", 0);
  }
  return batch;
}

std::vector<std::string> normalize_allowed_changes(const std::vector<std::string>& keys) {
  std::vector<std::string> names;
  for (const ConfigField& field : config_fields()) names.emplace_back(field.path);
  std::vector<std::string> out;
  for (std::string key : keys) {
    if (key.rfind("tele_tron.", 0) == 0) key.erase(0, std::string("tele_tron.").size());
    if (!contains(names, key)) {
      const std::string nearest = config_text::nearest_name(key, names);
      throw Error(ErrorCode::kConfig, str_cat("--allow-change ", key, ": not a config key"),
                  nearest.empty() ? "give a key path such as train.seed (`teletron config FILE` lists them)"
                                  : str_cat("did you mean --allow-change ", nearest, "?"));
    }
    out.push_back(key);
  }
  return out;
}

bool ResumeCheck::changed_under(const std::string& prefix) const {
  for (const std::string& key : changed)
    if (is_under(key, prefix)) return true;
  return false;
}

ResumeCheck check_resume_config(const std::string& checkpoint_yaml, const Config& now, int64_t step,
                                const std::string& where, const std::vector<std::string>& allowed) {
  std::map<std::string, std::string> before = config_values(checkpoint_yaml);
  const std::map<std::string, std::string> after = config_values(config_to_yaml(now));
  // A key the checkpoint's teletron did not have yet ran with what is now its default.
  const std::map<std::string, std::string> defaults = config_values(config_to_yaml(Config{}));
  for (const auto& [key, value] : defaults) before.emplace(key, value);

  ResumeCheck check;
  std::vector<std::string> blocked;
  std::vector<std::string> blocked_keys;
  auto block = [&](const std::string& key, const std::string& text) {
    if (contains(allowed, key)) {
      check.warnings.push_back(str_cat(text, "; accepted by --allow-change ", key));
    } else {
      blocked.push_back(text);
      blocked_keys.push_back(key);
    }
  };
  const bool latents_only = before.at("data.source") == "latents" && after.at("data.source") == "latents";
  const GlobalBatch batch_before = global_batch_of(before);
  const GlobalBatch batch_after = global_batch_of(now);
  bool split_reported = false;

  for (const auto& [key, value] : after) {
    const std::string& old_value = before.at(key);
    if (old_value == value) continue;
    check.changed.push_back(key);
    const std::string change =
        str_cat("tele_tron.", key, ": ", old_value, " in the checkpoint, ", value, " now");

    const SafeKey* safe = nullptr;
    for (const SafeKey& candidate : kSafeKeys)
      if (key == candidate.key) safe = &candidate;
    if (safe && key == "train.max_steps") {
      check.notes.push_back(max_steps_note(now, int_value(before, key, 0), now.train.max_steps, step));
      continue;
    }
    if (safe) {
      check.notes.push_back(str_cat(change, " (", safe->effect, ")"));
      continue;
    }

    bool video_only = false;
    for (const char* prefix : kVideoOnlyPrefixes) video_only = video_only || is_under(key, prefix);
    if (latents_only && video_only) {
      check.notes.push_back(str_cat(change, " (unused with data.source: latents)"));
      continue;
    }

    bool split_key = false;
    for (const char* split : kSplitKeys) split_key = split_key || key == split;
    if (split_key && batch_before.samples() == batch_after.samples()) {
      if (!split_reported)
        check.notes.push_back(
            str_cat("the global batch stays ", batch_after.samples(), " samples per step, split as ",
                    batch_after.describe(), " instead of ", batch_before.describe(),
                    "; the same samples with the same noise in the same steps (the sums are taken in "
                    "another order, so the numbers agree to fp32 rounding, not bit for bit)"));
      split_reported = true;
      continue;
    }
    if (split_key) {
      block(key, str_cat(change, " (the global batch: ", batch_before.describe(), " in the checkpoint, ",
                         batch_after.describe(), " now)"));
      continue;
    }
    block(key, str_cat(change, " (changes ", part_of(key), ")"));
  }
  for (const std::string& key : allowed)
    if (key != "data.manifest" && !contains(check.changed, key))  // data.manifest also covers the contents
      check.notes.push_back(str_cat("--allow-change ", key, ": that key did not change"));
  if (!blocked.empty()) {
    std::string allow;
    for (const std::string& key : blocked_keys) allow += " --allow-change " + key;
    throw Error(ErrorCode::kConfig,
                str_cat("resuming ", where, " would change the run: ", config_text::join(blocked, "; ")),
                str_cat("undo the change, start a new run with --output DIR, or accept it with", allow));
  }
  return check;
}

std::string check_manifest_hash(const std::string& stored, const std::string& now,
                                const std::string& manifest, const std::string& where,
                                const std::vector<std::string>& allowed) {
  if (stored == now) return "";
  const std::string change = str_cat("tele_tron.data.manifest: the contents of ", manifest,
                                     " (its bytes, or the size or modification time "
                                     "of a file it names) differ from the run's in ",
                                     where, " (content hash ", stored, " in the checkpoint, ", now, " now)");
  TT_CHECK_HINT(
      contains(allowed, "data.manifest"), ErrorCode::kConfig,
      "restore the manifest and its files, start a new run with --output DIR, or accept the new data "
      "with --allow-change data.manifest (the data order restarts at the next epoch)",
      change);
  return change + "; accepted by --allow-change data.manifest (the bucket assignment is derived again)";
}

}  // namespace tt
