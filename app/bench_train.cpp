// `teletron bench --suite train` (see bench_train.h): rows of the real training loop on synthetic
// cached latents.
#include "app/bench_train.h"

#include <ATen/Context.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <numeric>
#include <optional>

#include "app/bench_folder.h"
#include "app/options.h"
#include "app/synth_data.h"
#include "app/trainer.h"
#include "core/device.h"
#include "core/errors.h"
#include "core/metrics.h"
#include "core/profiler.h"

namespace tt {
namespace {

namespace fs = std::filesystem;

struct RowPlan {
  std::string name, setup;
  bool built = true;
  bool tf32 = true;        // cuDNN's TF32 (LibTorch's default); the naive row turns it off
  bool mixed = true;       // mixed_precision.enabled
  bool dynamic = false;    // batch_size: dynamic
  // data.prefetch; > 0 marks the host-fix rows: the rows before them trim text exactly, as main did
  // before data.text_trim_multiple, unless the config or --set names that key, and attend with the
  // key mask (model.per_sample_attention off, as main had no other way).
  int64_t prefetch = 0;
  bool graphs = false;     // cuda_graph.enabled (text padding full with them, trimmed without)
  bool fused = false;      // model.fused_kernels
  bool segments = false;   // model.segment_attention
  std::string scope = "auto";  // cuda_graph.scope
  bool padded = false;     // with graphs: text always padded (data.text_padding full), else auto
};

std::vector<RowPlan> plan_rows(const BenchTrainOptions& o) {
  if (!o.ablation)
    return {{"this config", "the config's precision, data.prefetch and cuda_graph, fixed batch", true, true,
             o.config.mixed_precision.enabled, false, o.config.data.prefetch, o.config.cuda_graph.enabled != "false",
             o.config.model.fused_kernels, o.config.model.segment_attention, o.config.cuda_graph.scope}};
  return {
      {"naive baseline", "fp32, TF32 off, eager, fixed batch, latents read inside the step", true, false, false, false, 0,
       false},
      {"main today", "bf16 autocast, eager, fixed batch, latents read inside the step", true, true, true, false, 0,
       false},
      {"+ CUDA Graphs", "as main today, the whole step captured; text padding auto (padded to full length and "
       "captured, unless the bucket's trimmed eager steps are faster)", true, true, true, false, 0, true},
      {"+ dynamic batch", "as + CUDA Graphs, micro-batches sized to memory", true, true, true, true, 0, true},
      {"+ fused kernels and host fixes", "as + dynamic batch, model.fused_kernels, latents read ahead (data.prefetch 2)",
       true, true, true, true, 2, true, true},
      {"full stack", "everything built so far (+ segment attention)", true, true, true, true, 2, true, true, true},
      // After the design's rows, so that their numbers stay: row 3 with segments for the padded text.
      {"+ CUDA Graphs, segments", "as + CUDA Graphs with the text always padded (full), attended as segments "
       "(model.segment_attention)", true, true, true, false, 0, true, false, true, "auto", true},
      {"+ CUDA Graphs of blocks", "as + CUDA Graphs with the text always padded (full), each Transformer block "
       "captured, the rest eager (cuda_graph.scope blocks)", true, true, true, false, 0, true, false, false, "blocks",
       true},
      {"+ CUDA Graphs, padded", "as + CUDA Graphs with the text always padded to full length and masked (data."
       "text_padding full): the graphs alone", true, true, true, false, 0, true, false, false, "auto", true},
  };
}

// The base config with the row's settings, set on the struct (the user's set keys stay the ones
// the warnings speak of).
Config row_config(const Config& base, const RowPlan& plan, const BenchTrainOptions& o, const std::string& manifest,
                  const std::string& run, int64_t total, int64_t every) {
  Config c = base;
  c.mixed_precision.enabled = plan.mixed;
  c.batch_size_dynamic = plan.dynamic;
  c.batch_size = o.batch;
  c.gradient_accumulation = o.accumulation;
  c.dynamic_batch.initial = std::clamp(o.batch, c.dynamic_batch.min, c.dynamic_batch.max);
  c.dynamic_batch.global_batch = o.batch * o.accumulation;
  c.data.source = "latents";
  c.data.manifest = manifest;
  c.data.prefetch = plan.prefetch;
  if (o.ablation && plan.prefetch == 0 && !config_key_set(base, "data.text_trim_multiple"))
    c.data.text_trim_multiple = 1;
  if (o.ablation && plan.prefetch == 0) c.model.per_sample_attention = false;
  c.model.fused_kernels = plan.fused;
  c.model.segment_attention = plan.segments;
  // Graphs capture in the warm-up, so the timed steps replay; without them the text padding is
  // trimmed per batch as before graphs existed. Padded rows: graph warm-up up to the warm-up's last
  // step. Auto rows: the trimmed reference steps, as many padded eager ones, the capture and two
  // replays for the first comparison (every 2 replays) fit in the warm-up when it has 12 steps or more
  // per bucket (the replays' times reach the policy a step or two after they are queued).
  c.cuda_graph.enabled = plan.graphs ? "auto" : "false";
  c.cuda_graph.scope = plan.scope;
  c.data.text_padding = !plan.graphs ? "trim" : plan.padded ? "full" : "auto";
  if (!plan.graphs || plan.padded) {
    c.cuda_graph.warmup_steps = std::max<int64_t>(2, o.warmup - 1);
  } else {
    // Each bucket warms up on its own, on about its share of the warm-up steps.
    const int64_t buckets = std::max<int64_t>(1, static_cast<int64_t>(o.buckets.size()));
    c.cuda_graph.warmup_steps = std::max<int64_t>(3, (o.warmup / buckets - 6) / 2);
    c.cuda_graph.capture_frequency = 2;
  }
  c.train.max_steps = total;
  c.train.log_every = every;
  c.train.checkpoint_every = total;
  c.train.keep_checkpoints = 1;
  c.train.output_dir = run;
  return c;
}

BenchTrainRow row_of(const RowPlan& plan) {
  BenchTrainRow row;
  row.name = plan.name;
  row.setup = plan.setup;
  row.built = plan.built;
  return row;
}

}  // namespace

std::vector<BenchTrainRow> run_bench_train(const BenchTrainOptions& o) {
  TT_CHECK_HINT(o.warmup >= 1 && o.steps >= 1 && o.profile_steps >= 0, ErrorCode::kConfig,
                "give --warmup >= 1 and --steps >= 1", "bench --suite train: warm-up ", o.warmup, ", steps ", o.steps);
  BenchFolder work(o.work_dir);
  const HunyuanVideoConfig model = model_config_from(o.config.model);
  std::vector<std::array<int64_t, 3>> shapes = o.buckets;
  if (shapes.empty()) shapes.push_back({o.frames, o.height, o.width});
  const std::string data_dir = (fs::path(work.path()) / "data").string();
  const std::string manifest = (fs::path(data_dir) / "manifest.jsonl").string();
  std::string rows_text, shapes_text;
  for (size_t k = 0; k < shapes.size(); ++k) {
    SynthDataOptions data;
    data.output = (fs::path(data_dir) / str_cat("bucket_", k)).string();
    data.samples = std::max(o.samples / static_cast<int64_t>(shapes.size()), o.batch * o.accumulation);
    data.channels = model.in_channels;
    data.frames = (shapes[k][0] - 1) / 4 + 1;
    data.height = shapes[k][1] / 8;
    data.width = shapes[k][2] / 8;
    data.text_length = o.text_tokens;
    data.text_dim = model.text_embed_dim;
    data.pooled_dim = model.pooled_projection_dim;
    data.seed = 1234 + k;
    std::ifstream part(write_synthetic_latents(data));
    std::string line;
    while (std::getline(part, line)) {
      if (line.empty()) continue;
      const nlohmann::json row = nlohmann::json::parse(line);
      rows_text += nlohmann::json{{"latents", str_cat("bucket_", k, "/", row.at("latents").get<std::string>())}}.dump() +
                   "\n";
    }
    shapes_text += str_cat(k == 0 ? "" : ", ", "(", data.channels, ", ", data.frames, ", ", data.height, ", ",
                           data.width, ") x ", data.samples);
  }
  write_file_atomically(manifest, rows_text);

  // Throughput over steps warmup+1 .. warmup+steps (metrics rows on exact boundaries), then the trace.
  const int64_t every = std::gcd(std::gcd(o.warmup, o.steps), o.profile_steps > 0 ? o.profile_steps : o.steps);
  const int64_t total = o.warmup + o.steps + o.profile_steps;
  const std::vector<RowPlan> plans = plan_rows(o);
  // --rows: those rows (1-based) in the order given, a row named twice run twice (drift between
  // rows shows); the table lists them in that order, then the rows left out.
  std::vector<size_t> order;
  for (const int64_t number : o.rows) {
    TT_CHECK_HINT(number >= 1 && number <= static_cast<int64_t>(plans.size()), ErrorCode::kConfig,
                  str_cat("give row numbers from 1 to ", plans.size()), "bench --suite train --rows: no row ", number);
    order.push_back(static_cast<size_t>(number - 1));
  }
  if (order.empty())
    for (size_t i = 0; i < plans.size(); ++i) order.push_back(i);
  std::vector<BenchTrainRow> rows;
  std::vector<bool> listed(plans.size(), false);
  const torch::Device device = resolve_device(o.config.train.device, "tele_tron.train.device");
  const bool tf32_before = at::globalContext().allowTF32CuDNN();
  for (const size_t index : order) {
    const RowPlan& plan = plans[index];
    listed[index] = true;
    rows.push_back(row_of(plan));
    BenchTrainRow& row = rows.back();
    if (!plan.built) continue;
    const std::string run = (fs::path(work.path()) / str_cat("row_", index + 1, "_run_", rows.size())).string();
    TrainRequest request{row_config(o.config, plan, o, manifest, run, total, every), "", {}, ""};
    request.checkpoints = false;
    if (o.profile_steps > 0) request.profile = str_cat(o.warmup + o.steps + 1, ":", o.profile_steps);
    spdlog::info("bench --suite train: row {}, {} ({})", index + 1, plan.name, plan.setup);
    // Each row starts from an empty allocator cache: what an earlier row cached (the fp32 row's
    // blocks) would otherwise shape this one's allocations.
    release_cached_memory(device);
    at::globalContext().setAllowTF32CuDNN(plan.tf32);
    try {
      run_training(request);
    } catch (...) {
      // The row stops; the table keeps the rows before it and the rows after it still run.
      at::globalContext().setAllowTF32CuDNN(tf32_before);
      const Error error = error_of_current_exception();
      row.error = first_line(format_error(error));
      row.error_exit_code = error_exit_code(error.code());
      spdlog::error("bench --suite train: row {} ({}) stopped: {}", index + 1, plan.name, format_error(error));
      release_cached_memory(device);
      if (o.work_dir.empty()) {
        std::error_code ignored;
        fs::remove_all(run, ignored);
      }
      continue;
    }
    at::globalContext().setAllowTF32CuDNN(tf32_before);

    double samples = 0, seconds = 0;
    int64_t measured_steps = 0;
    int64_t previous = 0;
    for (const nlohmann::json& metrics : read_jsonl(run + "/metrics.jsonl")) {
      const int64_t step = metrics.at("step").get<int64_t>();
      const int64_t covered = step - previous;
      if (step > o.warmup && step <= o.warmup + o.steps) {
        const double step_s = metrics.at("step_ms").get<double>() / 1000.0;
        seconds += step_s * static_cast<double>(covered);
        samples += metrics.at("samples_per_s").get<double>() * step_s * static_cast<double>(covered);
        measured_steps += covered;
        row.peak_gb = std::max(row.peak_gb, metrics.value("peak_mem_gb", 0.0));
      }
      previous = step;
    }
    TT_ASSERT(measured_steps == o.steps, "bench --suite train: ", measured_steps, " of ", o.steps, " steps measured");
    row.samples_per_s = seconds > 0 ? samples / seconds : 0.0;
    row.step_ms = 1000.0 * seconds / static_cast<double>(measured_steps);
    if (o.profile_steps > 0) {
      const std::string trace = str_cat(run, "/profile/trace_steps_", o.warmup + o.steps + 1, "-", total, ".json");
      const TraceBusy busy = trace_busy_of_file(trace);
      row.busy_share = busy.share();
      row.kernels = busy.kernels;
      row.kernel_kind_s = busy.kind_s;
      row.kernel_kinds = busy.kinds_text();
    }
    if (o.work_dir.empty()) {  // the run folder (its trace is tens of MB) goes once read
      std::error_code ignored;
      fs::remove_all(run, ignored);
    }
  }
  for (size_t index = 0; index < plans.size(); ++index) {
    if (listed[index]) continue;
    rows.push_back(row_of(plans[index]));
    rows.back().run = false;
  }

  const bool cuda = device.is_cuda();
  std::cout << "\n| row | setup | samples/s | ms/step | GPU busy (trace) | peak GiB | vs first |\n"
            << "|---|---|---|---|---|---|---|\n";
  // Ratios against the first row that ran.
  double first = 0.0;
  for (const BenchTrainRow& row : rows)
    if (row.built && row.run && row.error.empty() && first == 0.0) first = row.samples_per_s;
  for (const BenchTrainRow& row : rows) {
    if (!row.built || !row.run) {
      std::cout << "| " << row.name << " | " << row.setup << (row.built ? " (not run in this call)" : "")
                << " | — | — | — | — | — |\n";
      continue;
    }
    if (!row.error.empty()) {
      std::cout << "| " << row.name << " | " << row.setup << " | STOPPED: " << row.error << " | — | — | — | — |\n";
      continue;
    }
    char line[256];
    std::snprintf(line, sizeof(line), "| %.3f | %.1f | %s | %.2f | %.2fx |", row.samples_per_s, row.step_ms,
                  cuda ? str_cat(static_cast<int>(100.0 * row.busy_share + 0.5), " %").c_str() : "n/a (CPU)",
                  row.peak_gb, first > 0 ? row.samples_per_s / first : 0.0);
    std::cout << "| " << row.name << " | " << row.setup << " " << line << "\n";
  }
  bool any_kinds = false;
  for (const BenchTrainRow& row : rows) any_kinds = any_kinds || !row.kernel_kinds.empty();
  if (any_kinds) {
    std::cout << "\nKernel time of the traced steps by kind (summed durations):\n";
    for (const BenchTrainRow& row : rows)
      if (!row.kernel_kinds.empty()) std::cout << "- " << row.name << ": " << row.kernel_kinds << "\n";
  }
  std::cout << "\n" << o.steps << " timed steps after " << o.warmup << " warm-up steps, then " << o.profile_steps
            << " traced; global batch " << o.batch * o.accumulation << "; latents " << shapes_text << ", "
            << o.text_tokens << " text tokens\n";
  if (!o.json_path.empty()) {
    nlohmann::json out = nlohmann::json::array();
    for (const BenchTrainRow& row : rows)
      out.push_back({{"row", row.name},
                     {"setup", row.setup},
                     {"built", row.built},
                     {"run", row.run},
                     {"samples_per_s", row.samples_per_s},
                     {"step_ms", row.step_ms},
                     {"gpu_busy_share", row.busy_share},
                     {"kernels", row.kernels},
                     {"kernel_seconds_by_kind", row.kernel_kind_s},
                     {"peak_gb", row.peak_gb},
                     {"error", row.error.empty() ? nlohmann::json() : nlohmann::json(row.error)}});
    std::ofstream file(o.json_path);
    file << out.dump(2) << "\n";
    TT_CHECK(file.good(), ErrorCode::kIo, "cannot write ", o.json_path);
  }
  return rows;
}

}  // namespace tt
