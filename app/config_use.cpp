// Which keys each command reads, and what happens to the others: the warnings for keys that are
// set but do nothing for the running command (warn_unused_keys, called once at start-up by every
// command that takes a config), and the reference of every key that `teletron config --explain`
// prints and docs/CONFIG.md holds. Who reads a key is the `read_by` column of the schema
// (app/config_schema.cpp); this file maps commands onto those bits and says why a key is idle.
#include <spdlog/spdlog.h>

#include <string>
#include <vector>

#include "app/config.h"
#include "app/config_schema.h"
#include "core/errors.h"

namespace tt {
namespace {

using config_text::join;
using config_text::range_text;
using config_text::split;

constexpr const char* kRoot = "tele_tron.";

// The kRead* bit a command answers for. train and config depend on data.source; the commands
// that take no config read nothing.
unsigned command_reads(Command command, const Config& config) {
  const unsigned train = config.data.source == "video" ? kReadTrainVideo : kReadTrainLatents;
  switch (command) {
    case Command::kTrain:
    case Command::kConfig:
      return train;
    case Command::kBench:
      return kReadBench;
    case Command::kPreprocess:
      return kReadPreprocess;
    case Command::kValidateData:
      return kReadValidateData;
    case Command::kSynthData:
      return kReadSynthData;
    case Command::kModelCheck:
      return kReadModelCheck;
    case Command::kEncodeText:
      return kReadEncodeText;
    case Command::kSample:
      return kReadSample;
    case Command::kProbe:
    case Command::kBenchVideo:
    case Command::kBenchVae:
      return 0;
  }
  return 0;
}

// Why a key is idle for a command, where there is more to say than "it does not read it". The
// first row whose bits meet the command's and whose prefix starts the key's path wins.
struct IdleReason {
  unsigned reads;
  const char* prefix;  // "vae." (a section) or a whole path
  const char* why;
};

const IdleReason kIdleReasons[] = {
    {kReadTrainLatents, "vae.", "data.source is latents: the VAE is not used"},
    {kReadTrainLatents, "data_pipeline.", "data.source is latents: the video pipeline is not used"},
    {kReadTrainLatents, "data.buckets",
     "data.source is latents: the cached latents keep the shapes they were written with"},
    {kReadTrainVideo, "data.prefetch",
     "data.source is video: data_pipeline.prefetch sets how far its pipeline runs ahead"},
    {kReadTrainLatents, "data.max_failed_share",
     "data.source is latents: every row is checked before step 0 and a bad one stops the run"},
    {kReadTrainLatents, "data.min_motion", "data.source is latents: motion filters apply to video rows"},
    {kReadTrainLatents, "data.max_motion", "data.source is latents: motion filters apply to video rows"},
    {kReadBench, "model.weights", "bench times randomly initialised weights"},
    {kReadBench, "batch_size", "bench takes the batch size from --batch"},
    {kReadBench, "data.buckets", "bench takes the clip shape from --frames, --height and --width"},
    {kReadBench, "gradient_accumulation", "bench times one micro-batch per step"},
    {kReadBench, "flow_matching.", "bench feeds one fixed timestep (sigma 0.5) and guidance 1.0"},
    {kReadBench, "optimizer.warmup_steps", "bench keeps the learning rate at optimizer.lr"},
    {kReadBench, "optimizer.schedule", "bench keeps the learning rate at optimizer.lr"},
    {kReadModelCheck, "model.weights", "model-check loads the weights --weights names"},
    {kReadModelCheck, "train.device", "model-check runs on --device"},
    {kReadModelCheck, "mixed_precision.", "model-check's precision is --dtype"},
    {kReadModelCheck, "model.activation_checkpointing", "model-check runs no backward pass"},
    {kReadModelCheck, "model.checkpoint_keeps_attention", "model-check runs no backward pass"},
    {kReadSynthData, "train.seed", "synth-data's seed is --seed"},
    {kReadSynthData | kReadPreprocess | kReadValidateData, "model.weights",
     "the model's sizes come from model.preset and the model.* overrides, not from the weights"},
    {kReadPreprocess, "data_pipeline.prefetch", "preprocess has no training step to feed"},
    {kReadValidateData, "vae.", "validate-data does not encode"},
    {kReadValidateData, "data_pipeline.augment.", "validate-data checks the clips, not their augmentation"},
    {kReadSample, "model.weights", "sample loads the weights --weights names"},
    {kReadSample, "model.lora.", "sample applies the LoRA file --lora names"},
    {kReadSample, "mixed_precision.", "sample's precision is --dtype"},
    {kReadSample, "model.activation_checkpointing", "sample runs no backward pass"},
    {kReadSample, "model.checkpoint_keeps_attention", "sample runs no backward pass"},
    {kReadSample, "vae.tile_batch", "the decoder decodes one tile at a time"},
    {kReadSample, "vae.memory_share", "sample decodes; the share bounds the encoder"},
    {kReadSample, "vae.fused_padding", "sample decodes; the setting is the encoder's"},
    {kReadSample, "vae.gemm_kernels", "sample decodes; the setting is the encoder's"},
    {kReadSample, "vae.cuda_graphs", "sample decodes; the setting is the encoder's"},
    {kReadSample, "validation.", "sample's settings are its flags (--steps, --frames, --guidance, ...)"},
};

// Keys a command reads that this config's own values leave idle (checked after the rows above).
struct IdleByValue {
  const char* prefix;
  bool (*idle)(const Config&);
  const char* why;
  unsigned reads = ~0u;  // the commands (kRead* bits) the row speaks for
};

bool scales_loss(const Config& c) { return c.mixed_precision.enabled && c.mixed_precision.dtype == "fp16"; }
bool graphs_off(const Config& c) { return c.cuda_graph.enabled == "false"; }

const IdleByValue kIdleByValue[] = {
    {"mixed_precision.dtype", [](const Config& c) { return !c.mixed_precision.enabled; },
     "mixed_precision.enabled is false: the step runs in fp32"},
    {"mixed_precision.loss_scale_window", [](const Config& c) { return !scales_loss(c); },
     "only mixed_precision.dtype: fp16 scales the loss"},
    {"mixed_precision.init_scale", [](const Config& c) { return !scales_loss(c); },
     "only mixed_precision.dtype: fp16 scales the loss"},
    {"mixed_precision.max_skipped_steps", [](const Config& c) { return !scales_loss(c); },
     "without fp16 loss scaling the first skipped step stops the run"},
    {"cuda_graph.warmup_steps", graphs_off, "cuda_graph.enabled is false: every step runs eagerly"},
    {"cuda_graph.capture_frequency", graphs_off, "cuda_graph.enabled is false: every step runs eagerly"},
    {"cuda_graph.retry", graphs_off, "cuda_graph.enabled is false: every step runs eagerly"},
    {"cuda_graph.threshold", graphs_off, "cuda_graph.enabled is false: every step runs eagerly"},
    {"cuda_graph.scope", graphs_off, "cuda_graph.enabled is false: every step runs eagerly"},
    {"data.text_trim_multiple", [](const Config& c) { return c.data.text_padding == "full"; },
     "data.text_padding is full: every batch keeps the dataset's text length"},
    {"model.checkpoint_keeps_attention", [](const Config& c) { return c.model.activation_checkpointing_every_n == 0; },
     "model.activation_checkpointing is false: no block is recomputed, every attention is kept anyway"},
    {"validation.", [](const Config& c) { return c.validation.every == 0; },
     "validation.every is 0: no validation videos are made"},
    {"vae.", [](const Config& c) { return c.data.source == "latents" && c.validation.every == 0; },
     "data.source is latents: the VAE is not used (it decodes validation videos only with validation.every > 0)",
     kReadTrainLatents},
};

const char* idle_by_value(const Config& config, unsigned reads, const std::string& path) {
  for (const IdleByValue& reason : kIdleByValue) {
    if ((reason.reads & reads) && path.rfind(reason.prefix, 0) == 0 && reason.idle(config)) return reason.why;
  }
  return nullptr;
}

const char* idle_reason(unsigned reads, const std::string& path) {
  for (const IdleReason& reason : kIdleReasons) {
    if ((reason.reads & reads) != 0 && path.rfind(reason.prefix, 0) == 0) return reason.why;
  }
  return nullptr;
}

// The commands a key does something for, as the reference lists them.
std::string readers_text(const ConfigField& field) {
  if (field.not_yet && !field.not_yet_value) return str_cat("nothing yet (arrives with ", field.not_yet, ")");
  std::vector<std::string> names;
  unsigned train = field.read_by & kReadTrain;
  if (train == kReadTrain) names.push_back("train");
  if (train == kReadTrainLatents) names.push_back("train (data.source: latents)");
  if (train == kReadTrainVideo) names.push_back("train (data.source: video)");
  const std::pair<unsigned, const char*> others[] = {{kReadBench, "bench"},
                                                     {kReadPreprocess, "preprocess"},
                                                     {kReadValidateData, "validate-data"},
                                                     {kReadSynthData, "synth-data"},
                                                     {kReadModelCheck, "model-check"},
                                                     {kReadEncodeText, "encode-text"},
                                                     {kReadSample, "sample"}};
  for (const auto& [bit, name] : others) {
    if (field.read_by & bit) names.push_back(name);
  }
  std::string text = names.empty() ? "nothing" : join(names, ", ");
  if (field.not_yet_value)
    text += str_cat("; ", field.not_yet_value, " has no effect yet (arrives with ", field.not_yet, ")");
  return text;
}

std::string type_text(const ConfigField& field) {
  switch (field.kind) {
    case ConfigKind::kInt:
      return "integer";
    case ConfigKind::kFloat:
      return "number";
    case ConfigKind::kBool:
      return "boolean";
    case ConfigKind::kString:
      return field.choices ? "choice" : "string";
    case ConfigKind::kOptInt:
      return "integer or null";
    case ConfigKind::kOptFloat:
      return "number or null";
    case ConfigKind::kOptBool:
      return "boolean or null";
    case ConfigKind::kOptString:
      return field.choices ? "choice or null" : "string or null";
    case ConfigKind::kOptIntList:
      return str_cat("list of ", field.list_size, " integers, or null");
    case ConfigKind::kStringList:
      return "list of strings";
    case ConfigKind::kBatchSize:
      return "integer or dynamic";
    case ConfigKind::kIntOrAuto:
      return "integer or auto";
    case ConfigKind::kCheckpointing:
      return "boolean, {every_n: k} or auto";
    case ConfigKind::kBetas:
      return "[beta1, beta2]";
    case ConfigKind::kBuckets:
      return "list of {frames, height, width}";
  }
  return "";
}

std::string allowed_text(const ConfigField& field) {
  std::string text;
  if (field.choices) text = join(split(field.choices, '|'), " | ");
  if (field.aliases) {
    std::vector<std::string> spellings;
    for (const std::string& pair : split(field.aliases, ',')) {
      size_t eq = pair.find('=');
      spellings.push_back(pair.substr(0, eq) + " = " + pair.substr(eq + 1));
    }
    text += " (also " + join(spellings, ", ") + ")";
  }
  switch (field.kind) {
    case ConfigKind::kBool:
    case ConfigKind::kOptBool:
      return "true | false";
    case ConfigKind::kOptIntList:
      return str_cat("even, ", range_text(field.range), ", summing to attention_head_dim");
    case ConfigKind::kBatchSize:
      return ">= 1, or dynamic";
    case ConfigKind::kIntOrAuto:
      return range_text(field.range) + ", or auto";
    case ConfigKind::kCheckpointing:
      return "k >= 1";
    case ConfigKind::kBetas:
      return "each " + range_text(field.range);
    case ConfigKind::kBuckets:
      return "at least one; frames 4n+1, height and width multiples of 16";
    case ConfigKind::kString:
    case ConfigKind::kOptString:
      return text.empty() ? "any text" : text;
    default:
      break;
  }
  std::string range = range_text(field.range);
  return range.empty() ? "any" : range;
}

// The keys a read bit covers: a whole section as `section.*` when every key in it is read, or as
// `section.* except a, b` when all but one or two of at least four are.
std::string read_keys_text(unsigned bit) {
  auto under = [](const ConfigField& field, const std::string& prefix) {
    return std::string(field.path).rfind(prefix + ".", 0) == 0;
  };
  auto all_read = [&](const std::string& prefix) {
    for (const ConfigField& field : config_fields()) {
      if (under(field, prefix) && !(field.read_by & bit)) return false;
    }
    return true;
  };
  std::vector<std::string> out, done_sections;
  for (const ConfigField& field : config_fields()) {
    if (!(field.read_by & bit)) continue;
    std::vector<std::string> parts = split(field.path, '.');
    if (parts.size() > 1 && !all_read(parts[0])) {
      std::vector<std::string> unread;
      int read = 0;
      for (const ConfigField& other : config_fields()) {
        if (!under(other, parts[0])) continue;
        if (other.read_by & bit) ++read;
        else unread.push_back(other.path);
      }
      if (read >= 4 && unread.size() <= 2) {
        bool seen = false;
        for (const std::string& done : done_sections) seen = seen || done == parts[0];
        if (!seen) out.push_back(parts[0] + ".* except " + join(unread, ", "));
        done_sections.push_back(parts[0]);
        continue;
      }
    }
    std::string name = field.path;
    for (size_t i = 1; i < parts.size(); ++i) {
      std::string prefix = join(std::vector<std::string>(parts.begin(), parts.begin() + i), ".");
      if (all_read(prefix)) {
        name = prefix + ".*";
        break;
      }
    }
    if (out.empty() || out.back() != name) out.push_back(name);
  }
  return out.empty() ? "no key" : join(out, "; ");
}

struct CommandRow {
  const char* name;
  unsigned bit;
  const char* note;
};

const CommandRow kCommandRows[] = {
    {"train (data.source: latents)", kReadTrainLatents, ""},
    {"train (data.source: video)", kReadTrainVideo, ""},
    {"bench", kReadBench, " (the clip shape and batch come from its flags)"},
    {"preprocess", kReadPreprocess, ""},
    {"validate-data", kReadValidateData, " (data.manifest only when given a config file)"},
    {"synth-data", kReadSynthData, " (the first bucket gives the shape)"},
    {"model-check", kReadModelCheck, " (weights, device and dtype come from its flags)"},
    {"encode-text", kReadEncodeText, " (the captions come from data.manifest)"},
    {"sample", kReadSample, " (weights, LoRA, prompt, shape, steps and dtype come from its flags)"},
};

std::string not_yet_keys_text() {
  std::vector<std::string> keys;
  for (const ConfigField& field : config_fields()) {
    if (field.not_yet)
      keys.push_back(field.not_yet_value ? str_cat(field.path, ": ", field.not_yet_value) : std::string(field.path));
  }
  return join(keys, ", ");
}

constexpr const char* kSetRule =
    "A key counts as set when the file, the environment or --set writes it, whatever its value (also "
    "the default): writing a key is asking for it. Each set key that does nothing for the running "
    "command, or with this data.source, gets one warning at start-up naming it, where it was set and "
    "why; keys of features not built yet say \"has no effect yet\". `teletron config FILE` answers "
    "as `teletron train` would.";

constexpr const char* kPrecedence =
    "Precedence: file < environment (TELETRON_GRAPH_RETRY, TELETRON_GRAPH_THRESHOLD) < --set "
    "key=value (paths without the tele_tron. root, values parsed as YAML) < the commands' own flags "
    "(--max-steps, --output, --device, bench's --preset).";

// What train and bench say about a small config, made by hand so that the environment cannot
// change it: the examples in the reference are the real messages.
std::string example_warnings() {
  Config config;
  config.vae.tiling = "on";
  config.distributed.zero_stage = 2;
  config.batch_size_dynamic = true;
  config.set_keys = {{"vae.tiling", "config.yaml:3:13"},
                     {"distributed.zero_stage", "config.yaml:5:17"},
                     {"batch_size", "--set batch_size=dynamic"}};
  std::string out;
  for (Command command : {Command::kTrain, Command::kBench}) {
    for (const std::string& line : unused_key_warnings(config, command))
      out += str_cat(command_name(command), ": ", line, "\n");
  }
  return out;
}

// A Markdown table cell: `|` would end it.
std::string cell(const std::string& text) {
  std::string out;
  for (char c : text) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out;
}

}  // namespace

const char* command_name(Command command) {
  switch (command) {
    case Command::kTrain:
      return "train";
    case Command::kConfig:
      return "config";
    case Command::kSynthData:
      return "synth-data";
    case Command::kModelCheck:
      return "model-check";
    case Command::kBench:
      return "bench";
    case Command::kProbe:
      return "probe";
    case Command::kValidateData:
      return "validate-data";
    case Command::kBenchVideo:
      return "bench-video";
    case Command::kPreprocess:
      return "preprocess";
    case Command::kBenchVae:
      return "bench-vae";
    case Command::kEncodeText:
      return "encode-text";
    case Command::kSample:
      return "sample";
  }
  return "?";
}

std::vector<std::string> unused_key_warnings(const Config& config, Command command) {
  const unsigned reads = command_reads(command, config);
  // config answers for train: its file is a training config.
  const std::string name = command == Command::kConfig ? "train" : command_name(command);
  std::vector<std::string> lines, not_read;
  for (const ConfigSetKey& key : config.set_keys) {
    const ConfigField* field = find_config_field(key.path);
    if (!field) continue;
    const std::string key_name = kRoot + key.path;
    const std::string at = " (" + key.where + ")";
    if (field->not_yet && !field->not_yet_value) {
      lines.push_back(str_cat(key_name, ": set", at, ", but has no effect yet (arrives with ", field->not_yet, ")"));
    } else if (!(field->read_by & reads)) {
      const char* why = idle_reason(reads, key.path);
      if (why) {
        lines.push_back(str_cat(key_name, ": set", at, ", but ", why));
      } else {
        not_read.push_back(key_name);
      }
    } else if (const char* why = idle_by_value(config, reads, key.path)) {
      lines.push_back(str_cat(key_name, ": set", at, ", but ", why));
    } else if (field->not_yet_value && config_value_text(*field, config) == field->not_yet_value) {
      lines.push_back(str_cat(key_name, ": set to ", field->not_yet_value, at, ", but ", field->not_yet_value,
                              " has no effect yet (arrives with ", field->not_yet, "); meanwhile ", field->instead));
    }
  }
  if (!not_read.empty())
    lines.push_back(str_cat(join(not_read, ", "), ": set, but `teletron ", name, "` does not read ",
                            not_read.size() == 1 ? "it" : "them",
                            " (`teletron config --explain` lists which commands read each key)"));
  return lines;
}

void warn_unused_keys(const Config& config, Command command) {
  for (const std::string& line : unused_key_warnings(config, command)) spdlog::warn("{}", line);
}

std::string config_reference_text() {
  const Config defaults;
  std::string out =
      "teletron configuration: every key, below the root `tele_tron:` (YAML).\n"
      "Each key: path, then type, default and allowed values, then the commands it does something "
      "for, then what it means.\n\n" +
      std::string(kPrecedence) + "\n" + kSetRule + "\n";
  std::string section;
  for (const ConfigField& field : config_fields()) {
    std::string top = split(field.path, '.').front();
    if (top != section) out += "\n";
    section = top;
    out += str_cat(kRoot, field.path, "\n    ", type_text(field), ", default ", config_value_text(field, defaults),
                   ", allowed ", allowed_text(field), "\n    read by: ", readers_text(field), "\n    ", field.doc,
                   "\n");
  }
  out += "\nWhat each command reads:\n";
  for (const CommandRow& row : kCommandRows) out += str_cat("  ", row.name, row.note, ": ", read_keys_text(row.bit), "\n");
  out += "  config: validates every key and prints them all; warns as train does\n";
  out += "  bench-vae, bench-video, probe: take no config\n";
  out += str_cat("Not built yet (any command warns when they are set): ", not_yet_keys_text(), "\n");
  return out;
}

std::string config_reference_markdown() {
  const Config defaults;
  std::string out =
      "# teletron configuration reference\n\n"
      "<!-- Generated from app/config_schema.cpp by `build/teletron config --explain --markdown > "
      "docs/CONFIG.md`; do not edit by hand (test/app/test_config.cpp checks that it matches). -->\n\n"
      "The YAML file is rooted at `tele_tron:`; every key has a default that runs, and `teletron config "
      "FILE` prints the resolved tree. Unknown keys, wrong types and out-of-range values are errors "
      "naming the key path, `file:line:col` and the expected form.\n\n" +
      std::string(kPrecedence) + "\n\n" + kSetRule +
      " For example, `teletron train` and `teletron bench` on a config with cached latents that sets "
      "`vae.tiling: on`, `distributed.zero_stage: 2` and `--set batch_size=dynamic` say:\n\n"
      "```\n" + example_warnings() + "```\n\n"
      "`teletron config --explain` prints this reference as text.\n";
  std::string section;
  for (const ConfigField& field : config_fields()) {
    std::string top = split(field.path, '.').front();
    if (top != section) {
      out += str_cat("\n## ", top, "\n\n| key | type | default | allowed | read by | meaning |\n"
                     "|---|---|---|---|---|---|\n");
    }
    section = top;
    out += str_cat("| `", field.path, "` | ", cell(type_text(field)), " | `", cell(config_value_text(field, defaults)),
                   "` | ", cell(allowed_text(field)), " | ", cell(readers_text(field)), " | ", cell(field.doc), " |\n");
  }
  out += "\n## What each command reads\n\n| command | keys |\n|---|---|\n";
  for (const CommandRow& row : kCommandRows)
    out += str_cat("| ", row.name, cell(row.note), " | ", cell(read_keys_text(row.bit)), " |\n");
  out += "| config | validates every key and prints them all; warns as train does |\n";
  out += "| bench-vae, bench-video, probe | take no config |\n";
  out += str_cat("\nNot built yet (any command warns when they are set): ", not_yet_keys_text(), ".\n");
  return out;
}

}  // namespace tt
