// `teletron preprocess` (see preprocess.h).
#include "app/preprocess.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <thread>

#include "app/config.h"
#include "app/options.h"
#include "app/training_data.h"
#include "core/device.h"
#include "core/errors.h"
#include "core/file_io.h"
#include "core/safetensors.h"

namespace tt {
namespace {

namespace fs = std::filesystem;

std::string latent_name(int64_t line) {
  char name[32];
  std::snprintf(name, sizeof(name), "%06lld.safetensors", static_cast<long long>(line));
  return name;
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
  std::unique_ptr<TrainingData> data = make_training_data(config, model, device);

  const fs::path out(options.output);
  fs::create_directories(out / "latents");
  for (const auto& entry : fs::directory_iterator(out / "latents"))  // an interrupted write's leftovers
    if (entry.path().extension() == ".tmp") fs::remove(entry.path());
  const int64_t rows = data->size();
  std::vector<uint8_t> done(static_cast<size_t>(rows), 0);
  int64_t already = 0;
  for (int64_t i = 0; i < rows; ++i) {
    if (fs::exists(out / "latents" / latent_name(data->row_origin(i).first))) {
      done[static_cast<size_t>(i)] = 1;
      ++already;
    }
  }
  spdlog::info("preprocess: {} rows of {} -> {} ({} already done, {} to encode) on {}, {} job(s)", rows,
               config.data.manifest, options.output, already, rows - already, device.str(), options.jobs);

  std::atomic<int64_t> next{0}, encoded{0}, failed{0};
  std::mutex log_mutex;
  const auto start = std::chrono::steady_clock::now();
  auto worker = [&] {
    for (int64_t i = next++; i < rows; i = next++) {
      if (done[static_cast<size_t>(i)]) continue;
      const auto [line, source] = data->row_origin(i);
      try {
        LatentSample sample = data->load_one(i, 0);
        const fs::path final_path = out / "latents" / latent_name(line);
        const fs::path temporary = final_path.string() + ".tmp";
        safetensors::save(temporary.string(),
                          // On a GPU the VAE runs in bf16: its latents are bf16 values, stored without loss.
                          {{"latents", device.is_cuda() ? sample.latents.to(torch::kBFloat16) : sample.latents},
                           {"text_states", sample.text_states},
                           {"text_mask", sample.text_mask.to(torch::kUInt8)},
                           {"pooled", sample.pooled}},
                          {{"source", source}, {"manifest_line", std::to_string(line)}});
        fsync_path(temporary.string(), false);
        rename_or_throw(temporary.string(), final_path.string());
        done[static_cast<size_t>(i)] = 1;
        const int64_t count = ++encoded;
        if (count % 10 == 0 || count == rows - already) {
          const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          std::lock_guard<std::mutex> lock(log_mutex);
          spdlog::info("preprocess: {}/{} encoded ({:.2f} clips/s)", count, rows - already, count / seconds);
        }
      } catch (const Error& error) {
        if (error.code() != ErrorCode::kDecode && error.code() != ErrorCode::kData && error.code() != ErrorCode::kIo)
          throw;
        ++failed;
        std::lock_guard<std::mutex> lock(log_mutex);
        spdlog::warn("preprocess: line {} ({}) left out: {}", line, source, error.what());
      }
    }
  };
  std::vector<std::thread> threads;
  std::exception_ptr first_error;
  std::mutex error_mutex;
  for (int j = 0; j < std::max(1, options.jobs); ++j) {
    threads.emplace_back([&] {
      try {
        worker();
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!first_error) first_error = std::current_exception();
        next = rows;  // the other workers stop after their current row
      }
    });
  }
  for (auto& thread : threads) thread.join();

  // The manifest lists every complete file, in manifest order, whatever run wrote it.
  std::string manifest;
  int64_t listed = 0;
  for (int64_t i = 0; i < rows; ++i) {
    const std::string name = latent_name(data->row_origin(i).first);
    if (!fs::exists(out / "latents" / name)) continue;
    manifest += "{\"latents\": \"latents/" + name + "\"}\n";
    ++listed;
  }
  const fs::path manifest_path = out / "manifest.jsonl";
  write_text_synced(manifest_path.string() + ".tmp", manifest);
  rename_or_throw(manifest_path.string() + ".tmp", manifest_path.string());
  spdlog::info("preprocess: {} encoded now, {} from earlier runs, {} failed; manifest {} lists {} rows", encoded.load(),
               already, failed.load(), manifest_path.string(), listed);
  if (first_error) std::rethrow_exception(first_error);
  const int64_t allowed = static_cast<int64_t>(config.data.max_failed_share * static_cast<double>(rows));
  TT_CHECK_HINT(failed.load() <= allowed, ErrorCode::kData,
                "run `teletron validate-data` on the config and fix or drop the files it lists",
                failed.load(), " of ", rows, " rows failed, more than data.max_failed_share (",
                config.data.max_failed_share, "); the manifest lists the ", listed, " that worked");
  return 0;
}

}  // namespace tt
