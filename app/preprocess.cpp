// `teletron preprocess` (see preprocess.h).
#include "app/preprocess.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <future>
#include <latch>
#include <mutex>
#include <optional>
#include <thread>

#include "app/config.h"
#include "app/options.h"
#include "app/resume_check.h"
#include "app/training_data.h"
#include "core/content_hash.h"
#include "core/device.h"
#include "core/errors.h"
#include "core/fault_injection.h"
#include "core/file_io.h"
#include "core/safetensors.h"
#include "core/stream_handoff.h"
#include "pipeline/failure_budget.h"

namespace tt {
namespace {

namespace fs = std::filesystem;

// Bumped when what a file holds changes for the same inputs, so older files are not reused.
const char kLatentFormat[] = "teletron preprocess latents v1";

// The config keys that change a row's latents (the bucket comes with the row's identity).
const char* const kLatentKeys[] = {"vae.preset", "vae.weights", "vae.tiling", "data_pipeline.frame_sampler",
                                   "data_pipeline.augment", "data_pipeline.video_decoding", "train.seed"};

// Every setting that shapes the latents, one "key: value" line each. The device type enters because
// the VAE runs in bf16 on a GPU and in fp32 on the CPU.
std::string latent_settings(const Config& config, const torch::Device& device) {
  std::string settings = str_cat(kLatentFormat, "\ndevice: ", device.is_cuda() ? "cuda" : "cpu", "\nepoch: 0\n");
  for (const auto& [key, value] : config_values(config_to_yaml(config))) {
    for (const char* prefix : kLatentKeys) {
      const std::string p = prefix;
      if (key == p || key.rfind(p + ".", 0) == 0) settings += key + ": " + value + "\n";
    }
  }
  return settings;
}

// "<32 hex digits>.safetensors": the content key of row `index` made from `identity`.
std::string latent_name(const std::string& settings, int64_t index, const std::string& identity) {
  ContentHash hash;
  hash.add(settings);
  hash.add_int(index);
  hash.add(identity);
  return hash.hex() + ".safetensors";
}

}  // namespace

int run_preprocess(const PreprocessOptions& options) {
  std::vector<std::string> overrides = options.sets;
  if (!options.device.empty()) overrides.push_back("train.device=" + options.device);
  const Config config = load_config(options.config, overrides);
  TT_CHECK_HINT(config.data.source == "video", ErrorCode::kConfig, "set tele_tron.data.source: video",
                "teletron preprocess encodes videos; ", options.config, " has data.source: ", config.data.source);
  warn_unused_keys(config, Command::kPreprocess);
  const torch::Device device = resolve_device(config.train.device, "tele_tron.train.device");
  const HunyuanVideoConfig model = model_config_from(config.model);
  // The flow stage's scores go to training's metrics; cached latents keep none.
  Config data_config = config;
  data_config.data_pipeline.optical_flow.algorithm = "none";
  std::unique_ptr<TrainingData> data = make_training_data(data_config, model, device);
  // Each job encodes on its own: --jobs passes at once must fit vae.memory_share together.
  const double pass = data->side_memory_bytes(), jobs = std::max(1, options.jobs);
  if (pass > 0) {
    const double total = static_cast<double>(gpu_memory(device).total);
    TT_CHECK_HINT(jobs * pass <= config.vae.memory_share * total, ErrorCode::kMemory,
                  str_cat("use --jobs ", std::max<int64_t>(1, static_cast<int64_t>(config.vae.memory_share * total / pass)),
                          " or fewer, or raise vae.memory_share"),
                  "preprocess: ", options.jobs, " jobs encoding at once need up to ", gib_text(jobs * pass),
                  " of GPU memory (", gib_text(pass), " each), more than vae.memory_share = ",
                  config.vae.memory_share, " of ", gib_text(total));
  }

  const fs::path out(options.output);
  fs::create_directories(out / "latents");
  for (const auto& entry : fs::directory_iterator(out / "latents"))  // an interrupted write's leftovers
    if (entry.path().extension() == ".tmp") fs::remove(entry.path());
  const int64_t rows = data->size();
  // Each row's output name, from what its latents are made of; "" when a file of the row cannot be
  // stat'ed (it went missing since the rows were checked): that row fails like an unreadable one.
  const std::string settings = latent_settings(config, device);
  std::vector<std::string> names(static_cast<size_t>(rows));
  std::vector<uint8_t> done(static_cast<size_t>(rows), 0);
  int64_t already = 0, unnamed = 0;
  for (int64_t i = 0; i < rows; ++i) {
    try {
      names[static_cast<size_t>(i)] = latent_name(settings, i, data->row_identity(i));
    } catch (const Error& error) {
      if (error.code() != ErrorCode::kIo) throw;
      spdlog::warn("preprocess: line {} left out: {}", data->row_origin(i).first, error.what());
      done[static_cast<size_t>(i)] = 1;  // nothing to encode
      ++unnamed;
      continue;
    }
    if (fs::exists(out / "latents" / names[static_cast<size_t>(i)])) {
      done[static_cast<size_t>(i)] = 1;
      ++already;
    }
  }
  // Files of other keys: earlier manifests or settings. Kept (they may be another config's), unlisted.
  int64_t other_files = 0;
  for (const auto& entry : fs::directory_iterator(out / "latents"))
    if (entry.path().extension() == ".safetensors") ++other_files;
  other_files -= already;
  if (other_files > 0)
    spdlog::info("preprocess: {} file(s) in {} belong to no current row (an earlier manifest or settings): not "
                 "listed, not reused", other_files, (out / "latents").string());
  const int64_t to_encode = rows - already - unnamed;
  spdlog::info("preprocess: {} rows of {} -> {} ({} already done, {} to encode) on {}, {} job(s) encoding, {} "
               "decode worker(s) ahead of them", rows, config.data.manifest, options.output, already, to_encode,
               device.str(), options.jobs, config.data_pipeline.workers);

  // The rows to encode, in order. data_pipeline.workers threads decode (NVDEC on a GPU), sample
  // and augment the clips `ahead` rows in front of the encoders: claiming row k hands row
  // k + ahead to them, so the VAE finds its next clips decoded.
  std::vector<int64_t> todo;
  for (int64_t i = 0; i < rows; ++i)
    if (!done[static_cast<size_t>(i)]) todo.push_back(i);
  const int64_t ahead =
      config.data_pipeline.workers > 0 ? 2 * config.data_pipeline.workers + std::max(1, options.jobs) : 0;
  std::mutex prepare_mutex;
  auto prepare = [&](size_t k) {
    if (ahead == 0 || k >= todo.size()) return;
    std::lock_guard<std::mutex> lock(prepare_mutex);
    data->prepare({todo[k]}, {0});
  };

  std::atomic<int64_t> next{0}, encoded{0}, failed{unnamed};
  std::mutex log_mutex;
  // Host time per encoded row, summed over the jobs: in load_one (waiting for the decoders' clip,
  // queueing the encode) and in writing (the copy to the host waits for the encode, then the file).
  double load_seconds = 0, write_seconds = 0;
  // Set once every job has prepared its encoder (below): clips/s and the ETA count from there.
  std::chrono::steady_clock::time_point start;
  // A row that cannot be loaded (kDecode, kData, kIo: its video or embeddings) is left out, counted and
  // logged; any other error is rethrown (called inside the catch) and stops the run.
  auto leave_out = [&](int64_t i, const Error& error) {
    if (error.code() != ErrorCode::kDecode && error.code() != ErrorCode::kData &&
        error.code() != ErrorCode::kIo)
      throw;
    ++failed;
    const auto [line, source] = data->row_origin(i);
    std::lock_guard<std::mutex> lock(log_mutex);
    spdlog::warn("preprocess: line {} ({}) left out: {}", line, source, error.what());
  };
  // Row i's file from `sample`, whose latents are on the host or being copied there behind `copied`;
  // counts the row and logs progress. Runs on a thread of its own (std::async below), so that its
  // job queues the next clip's encode while this one waits for the copy and writes. Its errors are
  // no row's fault (a full disk, an output folder that cannot be written, an overflowing VAE): they
  // stop the run, and the rows written so far stay listed for the next one.
  const FaultPlan faults = FaultPlan::from_environment();
  std::atomic<int64_t> writes{0};
  auto write_row = [&](int64_t i, const LatentSample& sample, const StreamHandoff& copied) {
    const auto [line, source] = data->row_origin(i);
    try {
      const auto write_start = std::chrono::steady_clock::now();
      copied.wait_on_host();
      // Pixels are finite by construction, so non-finite latents mean the VAE itself overflowed (its
      // weights or dtype): every row would follow, and training on the cache would stop at its first
      // batch. Stop here, before the file exists.
      TT_CHECK_HINT(
          torch::isfinite(sample.latents).all().item<bool>(), ErrorCode::kNan,
          "check tele_tron.vae.weights (a VAE whose weights overflow in this dtype gives inf/NaN for "
          "every clip)",
          "preprocess: line ", line, " (", source,
          "): the VAE's latents hold non-finite values (NaN or infinity); nothing written for this row");
      const fs::path final_path = out / "latents" / names[static_cast<size_t>(i)];
      const fs::path temporary = final_path.string() + ".tmp";
      if (faults.at(Fault::kDiskFull, ++writes))
        throw Error(ErrorCode::kIo, str_cat("cannot write ", temporary.string(), ": ", std::strerror(ENOSPC),
                                            " (disk full?) [TELETRON_FAULTS=disk_full]"));
      safetensors::save(temporary.string(),
                        {{"latents", sample.latents},
                         {"text_states", sample.text_states},
                         {"text_mask", sample.text_mask.to(torch::kUInt8)},
                         {"pooled", sample.pooled}},
                        {{"source", source},
                         {"manifest_line", std::to_string(line)},
                         {"row_identity", data->row_identity(i)}});
      fsync_path(temporary.string(), false);
      rename_or_throw(temporary.string(), final_path.string());
      done[static_cast<size_t>(i)] = 1;
      {
        const auto end = std::chrono::steady_clock::now();
        std::lock_guard<std::mutex> lock(log_mutex);
        write_seconds += std::chrono::duration<double>(end - write_start).count();
      }
      const int64_t count = ++encoded;
      if (count % 10 == 0 || count == to_encode) {
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        const double rate = static_cast<double>(count) / seconds;
        std::lock_guard<std::mutex> lock(log_mutex);
        spdlog::info("preprocess: {}/{} encoded ({:.3f} clips/s, ETA {:.0f} s)", count, to_encode, rate,
                     static_cast<double>(to_encode - count) / rate);
      }
    } catch (const Error& error) {
      if (error.code() != ErrorCode::kIo) throw;
      const std::string hint =
          str_cat("free space under ", options.output,
                  " (or make it writable) and run the same command again: ", "the rows this run wrote (",
                  encoded.load(), " by then) are kept and not encoded again");
      throw Error(ErrorCode::kIo, str_cat("preprocess: line ", line, " (", source, "): ", error.what()),
                  hint);
    }
  };
  auto worker = [&] {
    std::future<void> writing;  // this job's previous row, being written
    for (size_t k = static_cast<size_t>(next++); k < todo.size(); k = static_cast<size_t>(next++)) {
      prepare(k + static_cast<size_t>(ahead));
      const int64_t i = todo[k];
      LatentSample sample;
      StreamHandoff copied;
      try {
        const auto load_start = std::chrono::steady_clock::now();
        sample = data->load_one(i, 0);
        if (device.is_cuda()) {
          // On a GPU the VAE runs in bf16: its latents are bf16 values, stored without loss. They go
          // to pinned host memory behind the encode, on this job's stream.
          const torch::Tensor latents = sample.latents.to(torch::kBFloat16);
          sample.latents = torch::empty(latents.sizes(), latents.options().device(torch::kCPU).pinned_memory(true));
          sample.latents.copy_(latents, /*non_blocking=*/true);
        }
        copied = StreamHandoff::record(device);
        {
          std::lock_guard<std::mutex> lock(log_mutex);
          load_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count();
        }
      } catch (const Error& error) {
        leave_out(i, error);
        continue;
      }
      // One row in writing per job: host memory stays bounded. The previous row's write error
      // leaves the loop here and stops the run (write_row), whichever row this job holds now.
      if (writing.valid()) writing.get();
      writing =
          std::async(std::launch::async, [&write_row, i, sample = std::move(sample),
                                          copied = std::move(copied)] { write_row(i, sample, copied); });
    }
    if (writing.valid()) writing.get();
  };
  std::vector<std::thread> threads;
  std::exception_ptr first_error;
  std::mutex error_mutex;
  auto keep_error = [&] {
    std::lock_guard<std::mutex> lock(error_mutex);
    if (!first_error) first_error = std::current_exception();
    next = static_cast<int64_t>(todo.size());  // the other workers stop after their current row
  };
  // Each job first encodes blank clips of its rows' buckets on its own thread (cuDNN's timed
  // algorithm choices are kept per thread: without this, each job would time them inside its first
  // clips), while the decoders take the first rows (below). The clock runs from when every job is
  // ready: `prepared` counts the jobs down, `go` lets them on.
  const int job_count = std::max(1, options.jobs);
  std::latch prepared(job_count), go(1);
  for (int j = 0; j < job_count; ++j) {
    threads.emplace_back([&] {
      // Each job's encodes on a CUDA stream of its own, so that --jobs N runs N encodes on the GPU
      // at once (on the default stream they would queue behind each other); nothing on the CPU.
      std::optional<SideStream> stream;
      try {
        stream.emplace(device);
        if (!todo.empty()) {
          const auto begin = std::chrono::steady_clock::now();
          const int64_t shapes = data->prepare_encoder(todo);
          if (shapes > 0) {
            std::lock_guard<std::mutex> lock(log_mutex);
            spdlog::info(
                "vae: {} bucket shape(s) encoded once on blank pixels on this job's thread before its first "
                "clip ({:.1f} s; cuDNN keeps its timed algorithm choices per thread)",
                shapes, std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count());
          }
        }
      } catch (...) {
        keep_error();
      }
      prepared.count_down();
      go.wait();
      try {
        if (stream) worker();
      } catch (...) {
        keep_error();
      }
    });
  }
  // The decoders take their first rows while the jobs warm up: the first clips' decode (the NVDEC
  // session, the seek, the frames) is ready when the first encode starts rather than after it.
  try {
    for (size_t k = 0; k < std::min(todo.size(), static_cast<size_t>(ahead)); ++k) prepare(k);
  } catch (...) {
    keep_error();
  }
  prepared.wait();
  start = std::chrono::steady_clock::now();
  go.count_down();
  for (auto& thread : threads) thread.join();

  // The manifest lists every complete file, in manifest order, whatever run wrote it.
  std::string manifest;
  int64_t listed = 0;
  for (int64_t i = 0; i < rows; ++i) {
    const std::string& name = names[static_cast<size_t>(i)];
    if (name.empty() || !fs::exists(out / "latents" / name)) continue;
    manifest += "{\"latents\": \"latents/" + name + "\"}\n";
    ++listed;
  }
  const fs::path manifest_path = out / "manifest.jsonl";
  write_text_synced(manifest_path.string() + ".tmp", manifest);
  rename_or_throw(manifest_path.string() + ".tmp", manifest_path.string());
  spdlog::info("preprocess: {} encoded now, {} from earlier runs, {} failed; manifest {} lists {} rows", encoded.load(),
               already, failed.load(), manifest_path.string(), listed);
  if (encoded.load() > 0) {
    // Where a row's time goes, to tell a decode-bound run from an encode-bound one.
    const double rows_done = static_cast<double>(encoded.load());
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const PipelineGpuTime gpu = data->take_gpu_time();  // every encode has finished: its file was written
    std::string gpu_text;
    if (gpu.samples > 0)
      gpu_text = fmt::format("; on the GPU {:.1f} ms VAE, {:.1f} ms colour and augment",
                             gpu.vae_ms / gpu.samples, gpu.before_vae_ms / gpu.samples);
    spdlog::info(
        "preprocess: per row {:.1f} ms of wall time; per row and job on the host {:.1f} ms loading (waiting "
        "for the decoders' clip, queueing the encode) and {:.1f} ms writing (waiting for the encode, then "
        "the file){}",
        1000 * wall / rows_done, 1000 * load_seconds / rows_done, 1000 * write_seconds / rows_done, gpu_text);
  }
  if (first_error) std::rethrow_exception(first_error);
  FailureBudget(config.data.max_failed_share, rows)
      .add(failed.load(), "rows that could not be encoded", str_cat("; the manifest lists the ", listed, " that worked"));
  return 0;
}

}  // namespace tt
