// Subcommand definitions and dispatch (see cli.h). Only subcommands that work are registered; a
// first argument that names none of them is a usage error (also with --help). Every command that
// takes a config warns once about the keys it was given and does not use (warn_unused_keys).
#include "app/cli.h"

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <iostream>

#include "app/bench.h"
#include "app/bench_flow.h"
#include "app/bench_pipeline.h"
#include "app/bench_train.h"
#include "app/bench_vae.h"
#include "app/bench_video.h"
#include "app/config.h"
#include "app/config_schema.h"
#include "app/encode_text.h"
#include "app/export.h"
#include "app/model_check.h"
#include "app/options.h"
#include "app/preprocess.h"
#include "app/probe.h"
#include "app/sample.h"
#include "app/synth_data.h"
#include "app/trainer.h"
#include "app/validate_data.h"
#include "core/errors.h"
#include "model/flops.h"

#ifndef TELETRON_VERSION
#define TELETRON_VERSION "0.0.0"
#endif

namespace tt {
namespace {

struct TrainArgs {
  std::string config;
  std::vector<std::string> sets;
  std::string resume;
  std::vector<std::string> allow_change;
  int64_t max_steps = 0;
  std::string output;
  std::string device;
  std::string profile;
};

struct SynthArgs {
  std::string config;
  std::vector<std::string> sets;
  std::string output;
  int64_t samples = 64;
  int64_t text_length = 32;
  int64_t seed = 1234;
};

// --device auto|cpu|cuda; `from_config` says the default comes from train.device.
void add_device_option(CLI::App* command, std::string* device, const std::string& help, bool from_config = true) {
  CLI::Option* option = command->add_option("--device", *device, help)->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  if (from_config) option->default_str("train.device (auto)");
}

void add_set_option(CLI::App* command, std::vector<std::string>* sets) {
  command->add_option("--set", *sets, "Override a config key, e.g. --set optimizer.lr=2e-5 (repeatable)")
      ->allow_extra_args(false)
      ->type_name("KEY=VALUE");
}

int run_train(const TrainArgs& args) {
  // CLI flags are the last word: fold them in as overrides so they are validated like the file.
  std::vector<std::string> overrides = args.sets;
  if (args.max_steps > 0) overrides.push_back("train.max_steps=" + std::to_string(args.max_steps));
  if (!args.output.empty()) overrides.push_back("train.output_dir=" + args.output);
  if (!args.device.empty()) overrides.push_back("train.device=" + args.device);
  TrainRequest request{load_config(args.config, overrides), args.resume, args.allow_change, args.profile};
  run_training(request);
  return 0;
}

struct ConfigArgs {
  std::string config;
  std::vector<std::string> sets;
  bool explain = false;
  bool markdown = false;
};

int run_config(const ConfigArgs& args) {
  if (args.explain) {
    TT_CHECK_HINT(args.config.empty() && args.sets.empty(), ErrorCode::kConfig,
                  "run `teletron config --explain` alone, or `teletron config FILE` for a resolved file",
                  "teletron config --explain describes every key; it takes no CONFIG or --set");
    std::cout << (args.markdown ? config_reference_markdown() : config_reference_text());
    return 0;
  }
  TT_CHECK_HINT(!args.markdown, ErrorCode::kConfig, "teletron config --explain --markdown",
                "teletron config: --markdown needs --explain");
  TT_CHECK_HINT(!args.config.empty(), ErrorCode::kConfig,
                "teletron config FILE [--set key=value]..., or teletron config --explain",
                "teletron config: give a CONFIG file, or --explain for the reference of every key");
  Config config = load_config(args.config, args.sets);
  // Cross-field model checks belong to "is this config valid"; the resolved architecture is
  // printed as a comment because the model keys above show only what the file overrides.
  HunyuanVideoConfig model = model_config_from(config.model);
  std::cout << config_to_yaml(config);
  std::cout << "# model (preset " << config.model.preset << " + overrides): " << describe_hunyuan_config(model)
            << ", " << transformer_parameter_count(model) << " parameters\n";
  // stdout is the YAML: the warnings go to stderr.
  for (const std::string& line : unused_key_warnings(config, Command::kConfig)) std::cerr << "warning: " << line << "\n";
  return 0;
}

int run_synth(const SynthArgs& args) {
  Config config = load_config(args.config, args.sets);
  warn_unused_keys(config, Command::kSynthData);
  HunyuanVideoConfig model = model_config_from(config.model);
  const Bucket& bucket = config.data.buckets.front();
  SynthDataOptions options;
  options.output = args.output;
  options.samples = args.samples;
  options.channels = model.out_channels;  // latents as the VAE writes them (16), also for image-to-video
  options.frames = (bucket.frames - 1) / 4 + 1;  // the VAE's 4x temporal compression (causal first frame)
  options.height = bucket.height / 8;
  options.width = bucket.width / 8;
  options.text_length = args.text_length;
  options.text_dim = model.text_embed_dim;
  options.pooled_dim = model.pooled_projection_dim;
  options.seed = static_cast<uint64_t>(args.seed);
  write_synthetic_latents(options);
  return 0;
}

struct BenchArgs {
  std::string config;
  std::vector<std::string> sets;
  std::string preset;
  std::string device;
  bool no_optimizer = false;
  std::string suite = "model";
  bool ablation = false;
  std::vector<int64_t> rows;
  std::vector<std::string> buckets;
  int64_t accumulation = 1;
  int64_t samples = 16;
  int64_t profile_steps = 10;
  std::string work_dir;
  std::vector<int64_t> cpu_workers = {16};
  std::string flow_weights;
  std::string flow_frames;
  bool no_training = false;
  BenchPipelineOptions pipeline;
  BenchOptions options;
};

int run_bench_command(BenchArgs& args) {
  std::vector<std::string> overrides = args.sets;
  if (!args.preset.empty()) overrides.push_back("model.preset=" + args.preset);
  if (!args.device.empty()) overrides.push_back("train.device=" + args.device);
  args.options.config = args.config.empty() ? load_config_text("tele_tron: {}\n", "(defaults)", overrides)
                                            : load_config(args.config, overrides);
  TT_CHECK_HINT(args.options.trace_path.empty() || args.suite == "model" || args.suite == "all", ErrorCode::kConfig,
                "--suite train traces its rows itself (--profile-steps)",
                "bench --trace times the Transformer's step: it needs --suite model (or all), not ", args.suite);
  if (args.suite == "pipeline" || args.suite == "all") {
    BenchPipelineOptions& pipeline = args.pipeline;
    pipeline.device = args.device.empty() ? "cuda" : args.device;
    pipeline.frames = args.options.frames;
    pipeline.height = args.options.height;
    pipeline.width = args.options.width;
    pipeline.json_path = args.options.json_path;
    pipeline.config = args.options.config;
    pipeline.train_warmup = args.options.warmup;
    pipeline.train_steps = args.no_training ? 0 : args.options.steps;
    pipeline.work_dir = args.work_dir;
    if (args.suite == "all") {
      // The Transformer's step, the flow algorithms, then the pipeline's stages; --json names the
      // pipeline's file (the model suite prints only).
      TT_CHECK_HINT(!pipeline.clips.empty(), ErrorCode::kConfig, "e.g. --clips a.mp4,b.mp4",
                    "bench --suite all needs video clips (--clips) for its pipeline part");
      warn_unused_keys(args.options.config, Command::kBench);
      BenchOptions model = args.options;
      model.json_path.clear();
      model.optimizer = !args.no_optimizer;
      run_bench(model);
      BenchFlowOptions flow;
      flow.device = pipeline.device;
      flow.height = pipeline.height;
      flow.width = pipeline.width;
      flow.cpu_workers = args.cpu_workers;
      if (!args.flow_frames.empty()) flow.flow_frames = args.flow_frames;
      run_bench_flow(flow);
    }
    int regressions = 0;
    run_bench_pipeline(pipeline, &regressions);
    return regressions > 0 ? 1 : 0;
  }
  if (args.suite == "flow") {
    BenchFlowOptions flow;
    flow.device = args.device.empty() ? "cuda" : args.device;
    flow.height = args.options.height;
    flow.width = args.options.width;
    flow.warmup = std::min<int64_t>(args.options.warmup, 3);
    flow.pairs = args.options.steps;
    flow.cpu_workers = args.cpu_workers;
    flow.frames = args.options.frames;
    if (!args.flow_weights.empty()) flow.raft_weights = args.flow_weights;
    if (!args.flow_frames.empty()) flow.flow_frames = args.flow_frames;
    flow.json_path = args.options.json_path;
    run_bench_flow(flow);
    return 0;
  }
  if (args.suite == "train") {
    // The training loop's own rows; its start-up banner warns about the config's idle keys.
    BenchTrainOptions train;
    train.config = args.options.config;
    train.batch = args.options.batch;
    train.accumulation = args.accumulation;
    train.frames = args.options.frames;
    train.height = args.options.height;
    train.width = args.options.width;
    train.text_tokens = args.options.text_tokens;
    train.samples = args.samples;
    train.warmup = args.options.warmup;
    train.steps = args.options.steps;
    train.profile_steps = args.profile_steps;
    train.ablation = args.ablation;
    train.rows = args.rows;
    for (const std::string& text : args.buckets) {
      long long frames = 0, height = 0, width = 0;
      char tail = 0;
      const bool parsed = std::sscanf(text.c_str(), "%lldx%lldx%lld%c", &frames, &height, &width, &tail) == 3;
      TT_CHECK_HINT(parsed && frames >= 1 && (frames - 1) % 4 == 0 && height >= 16 && height % 16 == 0 && width >= 16 &&
                        width % 16 == 0,
                    ErrorCode::kConfig, "write each as FRAMESxHEIGHTxWIDTH, frames 4n+1, sides multiples of 16, e.g. "
                    "--buckets 33x256x256,33x480x832", "bench --suite train --buckets: '", text, "' is not a clip shape");
      train.buckets.push_back({frames, height, width});
    }
    TT_CHECK_HINT(args.rows.empty() || args.ablation, ErrorCode::kConfig, "add --ablation", "--rows needs --ablation");
    train.work_dir = args.work_dir;
    train.json_path = args.options.json_path;
    // Every row runs; the first that stopped gives the exit status.
    for (const BenchTrainRow& row : run_bench_train(train))
      if (row.error_exit_code != 0) return row.error_exit_code;
    return 0;
  }
  TT_CHECK_HINT(!args.ablation, ErrorCode::kConfig, "use --suite train --ablation", "--ablation needs --suite train");
  warn_unused_keys(args.options.config, Command::kBench);
  args.options.optimizer = !args.no_optimizer;
  run_bench(args.options);
  return 0;
}

struct ModelCheckArgs {
  std::string config;
  std::vector<std::string> sets;
  ModelCheckOptions options;
};

int run_model_check_command(ModelCheckArgs& args) {
  args.options.config = args.config.empty() ? load_config_text("tele_tron: {}\n", "(defaults)", args.sets)
                                            : load_config(args.config, args.sets);
  warn_unused_keys(args.options.config, Command::kModelCheck);
  run_model_check(args.options);
  return 0;
}

// A first argument that is no subcommand: TT_ERR_CONFIG naming it, the valid ones and the nearest.
void check_command_name(const CLI::App& app, const std::string& name) {
  std::vector<std::string> names;
  for (const CLI::App* command : app.get_subcommands([](const CLI::App*) { return true; }))
    names.push_back(command->get_name());
  for (const std::string& known : names) {
    if (known == name) return;
  }
  const std::string nearest = config_text::nearest_name(name, names);
  throw Error(ErrorCode::kConfig,
              str_cat("unknown command `", name, "`", nearest.empty() ? "" : "; did you mean `" + nearest + "`?",
                      " (commands: ", config_text::join(names, ", "), ")"),
              "run `teletron --help` for the commands, `teletron <command> --help` for one command's usage");
}

}  // namespace

int run_cli(int argc, char** argv) {
  CLI::App app{"teletron: trains the HunyuanVideo diffusion Transformer on video, fast."};
  app.set_version_flag("--version", std::string("teletron ") + TELETRON_VERSION);
  app.require_subcommand(1);
  app.option_defaults()->always_capture_default();

  TrainArgs train;
  auto* train_cmd = app.add_subcommand("train", "Train on the dataset the config names");
  train_cmd->add_option("config", train.config, "YAML config file (rooted at tele_tron:)")->required();
  add_set_option(train_cmd, &train.sets);
  train_cmd->add_option("--resume", train.resume,
                        "auto (newest complete checkpoint of the run folder, or start fresh) or a checkpoint/run folder")
      ->default_str("none (fresh run)");
  train_cmd->add_option("--allow-change", train.allow_change,
                        "On resume, accept a change of this config key that changes the run, e.g. train.seed "
                        "(repeatable; logged as a warning)")
      ->allow_extra_args(false)
      ->type_name("KEY");
  train_cmd->add_option("--max-steps", train.max_steps, "Total optimizer steps, also after a resume")
      ->default_str("train.max_steps")
      ->check(CLI::PositiveNumber);
  train_cmd->add_option("--output", train.output, "Run folder")->default_str("train.output_dir");
  add_device_option(train_cmd, &train.device, "Device");
  train_cmd->add_option("--profile", train.profile,
                        "Trace optimizer steps FIRST..FIRST+COUNT-1 with LibTorch's profiler into <output>/profile "
                        "(Chrome/Perfetto JSON) and log the GPU busy share; FIRST:COUNT:memory adds the "
                        "allocator's events (bytes allocated over time, the peak logged), :shapes each operator's input "
                        "shapes and dtypes")
      ->type_name("FIRST:COUNT[:memory][:shapes]");

  ConfigArgs config_args;
  auto* config_cmd = app.add_subcommand(
      "config", "Validate a config and print it resolved, with every default; --explain describes every key");
  config_cmd->add_option("config", config_args.config, "YAML config file (leave out with --explain)");
  add_set_option(config_cmd, &config_args.sets);
  config_cmd->add_flag("--explain", config_args.explain,
                       "Print every key: type, default, allowed values, meaning, which commands read it");
  config_cmd->add_flag("--markdown", config_args.markdown, "With --explain: as Markdown (docs/CONFIG.md)");

  SynthArgs synth;
  auto* synth_cmd = app.add_subcommand(
      "synth-data", "Write a small synthetic cached-latent dataset (moving blobs) shaped for a config's model");
  synth_cmd->add_option("config", synth.config, "YAML config file (model and first bucket give the shapes)")
      ->required();
  add_set_option(synth_cmd, &synth.sets);
  synth_cmd->add_option("--output", synth.output, "Output folder (manifest.jsonl + samples)")->required();
  synth_cmd->add_option("--samples", synth.samples, "Number of samples")->check(CLI::PositiveNumber);
  synth_cmd->add_option("--text-length", synth.text_length, "Text tokens per sample")->check(CLI::PositiveNumber);
  synth_cmd->add_option("--seed", synth.seed, "Random seed")->check(CLI::NonNegativeNumber);

  BenchArgs bench;
  auto* bench_cmd = app.add_subcommand(
      "bench", "Time the Transformer training step on synthetic inputs: step time, tokens/s, exact-count MFU, memory");
  bench_cmd->add_option("config", bench.config, "YAML config (model, precision, device); defaults when left out");
  add_set_option(bench_cmd, &bench.sets);
  bench_cmd->add_option("--preset", bench.preset, "Model preset (tiny, 1b, 13b)")->default_str("model.preset (1b)");
  add_device_option(bench_cmd, &bench.device, "Device");
  bench_cmd->add_option("--batch", bench.options.batch, "Samples per step")->check(CLI::PositiveNumber);
  bench_cmd->add_option("--frames", bench.options.frames, "Clip frames (4n+1)")->check(CLI::PositiveNumber);
  bench_cmd->add_option("--height", bench.options.height, "Clip height (multiple of 16)")->check(CLI::PositiveNumber);
  bench_cmd->add_option("--width", bench.options.width, "Clip width (multiple of 16)")->check(CLI::PositiveNumber);
  bench_cmd->add_option("--text-tokens", bench.options.text_tokens, "Text tokens per sample (L)")
      ->check(CLI::PositiveNumber);
  bench_cmd->add_option("--text-valid", bench.options.text_valid, "Valid text tokens, the rest is padding (0 = all)")
      ->check(CLI::NonNegativeNumber);
  bench_cmd->add_option("--warmup", bench.options.warmup, "Untimed steps first")->check(CLI::NonNegativeNumber);
  bench_cmd->add_option("--steps", bench.options.steps, "Timed steps")->check(CLI::PositiveNumber);
  bench_cmd->add_flag("--no-optimizer", bench.no_optimizer, "Skip timing the full step with AdamW");
  bench_cmd->add_flag("--estimate-memory", bench.options.estimate_memory,
                      "Also estimate the full step's peak memory before the model is built (train.memory_check's "
                      "estimate) and report its error against the measured peak (CUDA)");
  bench_cmd->add_flag("--max-frames", bench.options.max_frames,
                      "Predict the longest clip (4n+1 frames) at --height x --width whose step fits the device by the "
                      "estimate, then time one step at it (CUDA; implies --estimate-memory)");
  bench_cmd->add_option("--max-frames-checks", bench.options.max_frames_checks,
                        "With --max-frames: estimates probed around the predicted crossing (0: take the "
                        "line's prediction; each probe of a long clip costs minutes)")
      ->check(CLI::NonNegativeNumber);
  bench_cmd->add_option("--json", bench.options.json_path, "Also write the results as JSON here");
  bench_cmd->add_option("--trace", bench.options.trace_path,
                        "--suite model: also trace forward+backward passes into this Chrome trace and print where "
                        "the GPU's time goes (kernel time by kind, attention's and GEMMs' achieved TFLOP/s, the "
                        "longest kernels)");
  bench_cmd->add_option("--trace-steps", bench.options.trace_steps, "--suite model: passes traced with --trace")
      ->check(CLI::PositiveNumber);
  bench_cmd->add_flag("--recompute-all", bench.options.recompute_all,
                      "--suite model with activation checkpointing: recompute every GEMM, also those whose results "
                      "nobody reads (under LoRA the blocks' last Linears), to time what skipping them buys");
  bench_cmd->add_option("--suite", bench.suite,
                        "model: the Transformer step on synthetic tensors; train: the training loop on synthetic "
                        "cached latents (--warmup and --steps count optimizer steps); flow: the optical-flow "
                        "algorithms at --height x --width (--steps timed pairs per GPU row) against the CPU "
                        "reference in --cpu-workers workers, with their end-point errors")
      ->check(CLI::IsMember({"model", "train", "flow", "pipeline", "all"}));
  bench_cmd->add_option("--clips", bench.pipeline.clips, "--suite pipeline|all: the video clips, comma-separated")
      ->delimiter(',');
  bench_cmd->add_option("--workers", bench.pipeline.workers,
                        "--suite pipeline: workers (threads, NVDEC sessions) of the stage rows, at most the cores here")
      ->check(CLI::PositiveNumber);
  bench_cmd->add_option("--cores", bench.pipeline.cores,
                        "--suite pipeline: the whole pipeline's rows, one per worker count (one CPU core each)")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  bench_cmd->add_option("--passes", bench.pipeline.passes,
                        "--suite pipeline: times each clip is processed per row (each worker's clips, with fewer "
                        "clips than workers: the list is cycled)")
      ->check(CLI::PositiveNumber);
  bench_cmd->add_option("--sampler", bench.pipeline.sampler, "--suite pipeline: the frame sampler (fps: at 24 fps)")
      ->check(CLI::IsMember({"uniform", "stratified", "random", "fps"}));
  bench_cmd->add_option("--vae-preset", bench.pipeline.vae_preset, "--suite pipeline: the VAE row's preset")
      ->check(CLI::IsMember({"hunyuan", "tiny"}));
  bench_cmd->add_flag("--no-training", bench.no_training,
                      "--suite pipeline: leave out the training rows (teletron train on the clips per core count; "
                      "their steps are --warmup and --steps)");
  bench_cmd->add_option("--plot", bench.pipeline.plot_path, "--suite pipeline: write an SVG bar chart of the rows here");
  bench_cmd->add_option("--compare", bench.pipeline.compare_path,
                        "--suite pipeline: compare with an earlier --json file; exit status 1 when a row is slower "
                        "than (1 - --compare-threshold) x before");
  bench_cmd->add_option("--compare-threshold", bench.pipeline.compare_threshold,
                        "--suite pipeline: the share a row may lose before it is flagged")
      ->check(CLI::Range(0.0, 1.0));
  bench_cmd->add_option("--cpu-workers", bench.cpu_workers,
                        "--suite flow: the CPU reference's rows, one per count of single-threaded workers")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  bench_cmd->add_option("--flow-weights", bench.flow_weights,
                        "--suite flow: also time RAFT with these torchvision weights (safetensors)");
  bench_cmd->add_option("--flow-frames", bench.flow_frames,
                        "--suite flow: also measure the end-point errors on this video's middle frame moved by known "
                        "maps (translation, rotation, zoom, two layers)");
  bench_cmd->add_flag("--ablation", bench.ablation, "--suite train: the engine's ablation rows, one after another");
  bench_cmd->add_option("--rows", bench.rows,
                        "--ablation: only these rows (1 = naive baseline), in this order, e.g. --rows 2,4,2")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  bench_cmd->add_option("--buckets", bench.buckets,
                        "--suite train: several clip shapes FRAMESxHEIGHTxWIDTH (one bucket each, the samples split "
                        "among them) instead of --frames/--height/--width, e.g. --buckets 33x256x256,33x480x832")
      ->delimiter(',');
  bench_cmd->add_option("--accumulation", bench.accumulation, "--suite train: micro-batches per step of the fixed rows")
      ->check(CLI::PositiveNumber);
  bench_cmd->add_option("--samples", bench.samples, "--suite train: synthetic samples written")
      ->check(CLI::PositiveNumber);
  bench_cmd->add_option("--profile-steps", bench.profile_steps,
                        "--suite train: steps traced after the timed ones (GPU busy share; 0 = none)")
      ->check(CLI::NonNegativeNumber);
  bench_cmd->add_option("--work-dir", bench.work_dir, "--suite train: keep the data and the rows' runs here")
      ->default_str("a temporary folder, removed");

  ModelCheckArgs check;
  auto* check_cmd = app.add_subcommand(
      "model-check", "One forward pass on named inputs (diffusers' forward convention), written as `sample`");
  check_cmd->add_option("config", check.config, "YAML config (architecture when the weights have no config.json)");
  add_set_option(check_cmd, &check.sets);
  check_cmd->add_option("--weights", check.options.weights,
                        "diffusers folder (config.json + safetensors), safetensors file/index, or official file")
      ->required();
  check_cmd->add_option("--inputs", check.options.inputs,
                        "safetensors with hidden_states, timestep, encoder_hidden_states, encoder_attention_mask, "
                        "pooled_projections, guidance")
      ->required();
  check_cmd->add_option("--output", check.options.output, "Where to write `sample`")->required();
  check_cmd->add_option("--device", check.options.device, "Device")->check(CLI::IsMember({"cpu", "cuda"}));
  check_cmd->add_option("--dtype", check.options.dtype, "fp32, or bf16 autocast (CUDA)")
      ->check(CLI::IsMember({"fp32", "bf16"}));

  std::string sample_config;
  std::vector<std::string> sample_sets;
  SampleOptions sample;
  auto* sample_cmd = app.add_subcommand(
      "sample", "A video from the Transformer: HunyuanVideoPipeline's flow-matching Euler sampler, the VAE of "
                "vae.weights, MP4; prints the time per step and per video");
  sample_cmd->add_option("config", sample_config, "YAML config (architecture when the weights have no "
                         "config.json; vae.*; train.device)");
  add_set_option(sample_cmd, &sample_sets);
  sample_cmd->add_option("--weights", sample.weights,
                         "diffusers folder, safetensors file/index, or official file; `random`: the config's "
                         "architecture freshly initialised (timing only)")
      ->required();
  sample_cmd->add_option("--lora", sample.lora, "LoRA file merged into the weights (diffusers, ComfyUI or musubi)");
  sample_cmd->add_option("--text-embeddings", sample.text_embeddings,
                         "The prompt: safetensors with text_states (L, D), text_mask (L), pooled (P)")
      ->required();
  sample_cmd->add_option("--frames", sample.frames, "Frames (4n+1)")->check(CLI::PositiveNumber);
  sample_cmd->add_option("--height", sample.height, "Height (multiple of 16)")->check(CLI::PositiveNumber);
  sample_cmd->add_option("--width", sample.width, "Width (multiple of 16)")->check(CLI::PositiveNumber);
  sample_cmd->add_option("--steps", sample.steps, "Sampler steps")->check(CLI::PositiveNumber);
  sample_cmd->add_option("--guidance", sample.guidance, "Embedded guidance scale (x1000 into the model)")
      ->check(CLI::NonNegativeNumber);
  sample_cmd->add_option("--flow-shift", sample.flow_shift, "Sigma shift k")->check(CLI::PositiveNumber);
  sample_cmd->add_option("--seed", sample.seed, "Seed of the initial noise (teletron's keyed generator, not "
                         "torch.randn's)")->check(CLI::NonNegativeNumber);
  sample_cmd->add_option("--fps", sample.fps, "Frame rate of the MP4")->check(CLI::PositiveNumber);
  sample_cmd->add_option("--output", sample.output, "The MP4 to write")->required();
  sample_cmd->add_option("--latents-out", sample.latents_out, "Also write the final latents (safetensors `latents`)");
  add_device_option(sample_cmd, &sample.device, "Device");
  sample_cmd->add_option("--dtype", sample.dtype, "auto (bf16 on CUDA, fp32 on the CPU), bf16 or fp32")
      ->check(CLI::IsMember({"auto", "bf16", "fp32"}));

  ExportOptions export_options;
  auto* export_cmd = app.add_subcommand(
      "export", "A checkpoint as a diffusers model folder, or a LoRA checkpoint as pytorch_lora_weights.safetensors");
  export_cmd->add_option("source", export_options.source, "Checkpoint folder, or a run folder (its newest checkpoint)")
      ->required();
  export_cmd->add_option("--output", export_options.output, "Folder to write")->required();
  export_cmd->add_option("--dtype", export_options.dtype, "dtype of the written tensors")
      ->check(CLI::IsMember({"bf16", "fp32"}));
  export_cmd->add_flag("--merge-lora", export_options.merge_lora,
                       "LoRA checkpoints: merge W + (alpha/r) B A into the run's model.weights and write a model folder");
  export_cmd->add_flag("--ema", export_options.ema,
                       "Write the EMA of the trained tensors the checkpoint holds (train.ema_decay) instead of them");
  export_cmd->add_option("--max-shard-size", export_options.max_shard_bytes, "Model folders: bytes per shard")
      ->check(CLI::PositiveNumber);

  ProbeOptions probe;
  auto* probe_cmd = app.add_subcommand(
      "probe", "What the data pipeline sees in one video: streams, codec, size, rotation, colour, frames, decode path");
  probe_cmd->add_option("video", probe.path, "Video file")->required();
  probe_cmd->add_option("--frames", probe.frames, "Frame indices to decode, e.g. 0,9,389")
      ->delimiter(',')
      ->check(CLI::NonNegativeNumber)
      ->default_str("all frames when --dump is given");
  probe_cmd->add_option("--dump", probe.dump, "Write `frames` (T, H, W, 3) uint8 after rotation and `indices` here");
  probe_cmd->add_option("--rgb", probe.rgb, "YUV to RGB converter: kernel (the pipeline's) or swscale (as ffmpeg)")
      ->check(CLI::IsMember({"kernel", "swscale"}));
  probe_cmd->add_option("--device", probe.device, "Decode path to ask for")->check(CLI::IsMember({"cpu", "cuda"}));
  probe_cmd->add_option("--flow", probe.flow,
                        "Write the optical flow (256-px short side) between --frames i,j (default 0,1) as a "
                        "colour-coded PNG here");
  probe_cmd->add_option("--flow-algorithm", probe.flow_algorithm,
                        "--flow's estimator: tvl1, nvofa (needs --device cuda and the GPU's engine) or raft "
                        "(needs --flow-weights)")
      ->check(CLI::IsMember({"tvl1", "nvofa", "raft"}));
  probe_cmd->add_option("--flow-weights", probe.flow_weights,
                        "raft: a torchvision RAFT state dict saved as safetensors");

  ValidateDataOptions validate;
  auto* validate_cmd = app.add_subcommand(
      "validate-data", "Check every sample of a video manifest: readable, decodable on the configured path, long and "
                       "large enough for the buckets, embeddings present; table by reason, JSON report");
  validate_cmd->add_option("input", validate.input, "YAML config (.yaml/.yml: uses data.manifest) or a manifest (JSONL)")
      ->required();
  add_set_option(validate_cmd, &validate.sets);
  validate_cmd->add_option("--jobs", validate.jobs, "Samples checked at once")
      ->default_str("min(CPU cores, 8)")
      ->check(CLI::NonNegativeNumber);
  validate_cmd->add_option("--report", validate.report, "Write a JSON report here");
  add_device_option(validate_cmd, &validate.device, "Decode for this device (cuda: NVDEC where possible)");
  validate_cmd->add_flag("--motion", validate.motion,
                         "Also score each clip's motion (mean optical-flow magnitude in pixels per frame at a 256-px "
                         "short side over data_pipeline.optical_flow.pairs frame pairs, with its algorithm: nvofa, "
                         "TV-L1 where NVOFA cannot run) into the report, the table and <manifest>.motion.json");

  PreprocessOptions preprocess;
  auto* preprocess_cmd = app.add_subcommand(
      "preprocess", "Encode a video dataset once (data.source: video) into the cached-latent dataset; resumable");
  preprocess_cmd->add_option("config", preprocess.config, "YAML config with data.source: video")->required();
  add_set_option(preprocess_cmd, &preprocess.sets);
  preprocess_cmd->add_option("--output", preprocess.output, "Output folder (manifest.jsonl + latents/)")->required();
  preprocess_cmd->add_option("--jobs", preprocess.jobs,
                             "Rows taken through the VAE at once (threads; data_pipeline.workers decode ahead of them)")
      ->check(CLI::PositiveNumber);
  add_device_option(preprocess_cmd, &preprocess.device, "Device");

  EncodeTextOptions encode_text;
  auto* encode_text_cmd = app.add_subcommand(
      "encode-text", "Encode the manifest's captions (\"caption\" keys, <video stem>.txt files) and the empty caption "
                     "into data.text_cache with the text encoders of a diffusers HunyuanVideo pipeline folder, as "
                     "its encode_prompt does (scripts/encode_text.py, Python with transformers); resumable");
  encode_text_cmd->add_option("config", encode_text.config, "YAML config (data.manifest, data.text_cache, text_encoder.*)")
      ->required();
  add_set_option(encode_text_cmd, &encode_text.sets);
  encode_text_cmd->add_option("--pipeline", encode_text.pipeline, "diffusers HunyuanVideo pipeline folder")
      ->default_str("text_encoder.pipeline");
  add_device_option(encode_text_cmd, &encode_text.device, "Device (auto: cuda when torch sees one)");
  encode_text_cmd->add_option("--batch-size", encode_text.batch_size, "Captions encoded at once")
      ->default_str("text_encoder.batch_size (8)")
      ->check(CLI::PositiveNumber);
  encode_text_cmd->add_option("--prompt", encode_text.prompts,
                              "Also encode this text (repeatable) and print its file (for sample --text-embeddings)")
      ->allow_extra_args(false);
  encode_text_cmd->add_option("--python", encode_text.python, "Python interpreter with torch and transformers")
      ->default_str("TELETRON_PYTHON, else the build's Python, else python3");

  BenchVaeOptions bench_vae;
  auto* bench_vae_cmd = app.add_subcommand(
      "bench-vae", "Time the VAE encoder on a random clip, whole and tiled; --dump for the diffusers comparison");
  bench_vae_cmd->add_option("--preset", bench_vae.preset, "VAE preset")->check(CLI::IsMember({"hunyuan", "tiny"}));
  bench_vae_cmd->add_option("--weights", bench_vae.weights, "diffusers VAE folder or file")->default_str("random");
  add_device_option(bench_vae_cmd, &bench_vae.device, "Device", /*from_config=*/false);
  bench_vae_cmd->add_option("--frames", bench_vae.frames, "Clip frames (4n+1)")->check(CLI::PositiveNumber);
  bench_vae_cmd->add_option("--height", bench_vae.height, "Clip height")->check(CLI::PositiveNumber);
  bench_vae_cmd->add_option("--width", bench_vae.width, "Clip width")->check(CLI::PositiveNumber);
  bench_vae_cmd->add_option("--tiling", bench_vae.tiling,
                            "Which encodes to time, comma-separated: whole, frames, tiled (or off, on, both)");
  bench_vae_cmd->add_option(
      "--runtimes", bench_vae.runtimes,
      "How the encoder runs, comma-separated: plain, channels-last, fused, fast, fast-auto, fast-padded, "
      "fast-folded, fast-gemm, fast-gemm-borders (the default and training's), fast-residual-pads, "
      "fast-graphs, fast-batched, fast-padded-batched");
  bench_vae_cmd->add_option("--cudnn-benchmark", bench_vae.cudnn_benchmark, "cuDNN picks convolution algorithms by timing");
  bench_vae_cmd->add_flag("--count-only", bench_vae.count_only,
                          "Print each --tiling mode's exact FLOP count (convolutions, attention, norms) and time "
                          "nothing (any machine)");
  bench_vae_cmd->add_option("--warmup", bench_vae.warmup, "Untimed encodes first")->check(CLI::NonNegativeNumber);
  bench_vae_cmd->add_option("--steps", bench_vae.steps, "Timed encodes")->check(CLI::PositiveNumber);
  bench_vae_cmd->add_option("--dump", bench_vae.dump, "Write weights, config.json and input/outputs here");
  bench_vae_cmd->add_option("--json", bench_vae.json, "Append results as JSON lines here");
  bench_vae_cmd->add_flag("--stages", bench_vae.stages,
                          "Also time each encoder stage (conv_in, down blocks, mid, out, quant) with its FLOPs and MFU");
  bench_vae_cmd->add_option("--trace", bench_vae.trace,
                            "After each timed row, trace 2 encodes into DIR/<tiling>_<runtime>.json and print where "
                            "the GPU's time goes (kernel time by kind, the convolutions' TFLOP/s, the longest kernels)")
      ->type_name("DIR");

  BenchVideoOptions bench_video;
  auto* bench_video_cmd = app.add_subcommand(
      "bench-video", "Time the video data pipeline on real clips: decode-only ceiling, GPU path (NVDEC + kernels), "
                     "CPU path; decoded frames/s and clips/s");
  bench_video_cmd->add_option("clips", bench_video.clips, "Video files")->required();
  bench_video_cmd->add_option("--mode", bench_video.mode,
                              "What runs: decode-only (every frame), sample (the sampled frames, decoded only), gpu, cpu")
      ->check(CLI::IsMember({"decode-only", "sample", "gpu", "cpu"}));
  bench_video_cmd->add_option("--workers", bench_video.workers, "Clips in flight at once")->check(CLI::PositiveNumber);
  bench_video_cmd->add_option("--passes", bench_video.passes,
                              "Times each clip is processed; with fewer clips than --workers, the list is cycled "
                              "so each worker takes this many")->check(CLI::PositiveNumber);
  bench_video_cmd->add_option("--frames", bench_video.frames, "Samples per clip")->check(CLI::PositiveNumber);
  bench_video_cmd->add_option("--sampler", bench_video.sampler, "Frame sampler mode (fps: at 24 fps)")
      ->check(CLI::IsMember({"uniform", "stratified", "random", "fps"}));
  bench_video_cmd->add_flag("--time-gpu-stages", bench_video.time_gpu_stages,
                            "gpu mode: time the kernels after decoding with CUDA events (adds a wait per clip)");
  bench_video_cmd->add_option("--height", bench_video.height, "Output height")->check(CLI::PositiveNumber);
  bench_video_cmd->add_option("--width", bench_video.width, "Output width")->check(CLI::PositiveNumber);
  bench_video_cmd->add_flag("!--no-skip", bench_video.skip_unneeded, "Decode non-reference frames nobody needs too");
  bench_video_cmd->add_option("--device", bench_video.device, "GPU for decode-only and gpu modes");
  bench_video_cmd->add_option("--reseek-gap", bench_video.reseek_gap,
                              "Seek to a later GOP only across this many frames (-1: 48 on NVDEC, 1 on the CPU)");
  bench_video_cmd->add_option("--flush-on-seek", bench_video.flush_on_seek,
                              "Flush the decoder at seeks: 1, 0, -1 (no for H.264 on NVDEC, else yes)")
      ->check(CLI::Range(-1, 1));
  bench_video_cmd->add_option("--label", bench_video.label, "Name printed with the result");
  bench_video_cmd->add_option("--json", bench_video.json, "Append the result as one JSON line here");

  // CLI11 handles --help before it looks at the other arguments, so `teletron sample --help` would
  // print the top-level help and succeed: the first argument is checked against the commands first.
  if (argc > 1 && argv[1][0] != '-') check_command_name(app, argv[1]);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& help) {
    return app.exit(help);
  } catch (const CLI::CallForAllHelp& help) {
    return app.exit(help);
  } catch (const CLI::CallForVersion& version) {
    return app.exit(version);
  } catch (const CLI::ParseError& error) {
    throw Error(ErrorCode::kConfig, str_cat("command line: ", error.what()), "run `teletron --help` or `teletron "
                "<command> --help` for the usage");
  }

  if (train_cmd->parsed()) return run_train(train);
  if (config_cmd->parsed()) return run_config(config_args);
  if (synth_cmd->parsed()) return run_synth(synth);
  if (bench_cmd->parsed()) return run_bench_command(bench);
  if (check_cmd->parsed()) return run_model_check_command(check);
  if (sample_cmd->parsed()) {
    sample.config = sample_config.empty() ? load_config_text("tele_tron: {}\n", "(defaults)", sample_sets)
                                          : load_config(sample_config, sample_sets);
    warn_unused_keys(sample.config, Command::kSample);
    run_sample(sample);
    return 0;
  }
  if (export_cmd->parsed()) {
    run_export(export_options);
    return 0;
  }
  if (validate_cmd->parsed()) return run_validate_data(validate);
  if (bench_vae_cmd->parsed()) {
    run_bench_vae(bench_vae);
    return 0;
  }
  if (preprocess_cmd->parsed()) return run_preprocess(preprocess);
  if (encode_text_cmd->parsed()) return run_encode_text(encode_text);
  if (bench_video_cmd->parsed()) {
    run_bench_video(bench_video);
    return 0;
  }
  if (probe_cmd->parsed()) {
    run_probe(probe);
    return 0;
  }
  return 0;
}

}  // namespace tt
