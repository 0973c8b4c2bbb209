// Transient memory of a streamed weight load: the resident-set growth while load_weights copies a
// synthetic checkpoint into destinations allocated beforehand must stay a small fraction of the
// file. [weights][memory] runs a ~235 MB fp32 model by default; [.][memory1b] is the on-demand
// run of the 1b preset (~2.2 GB bf16 files, ~4.4 GB fp32 destinations, ~10 GB of RAM in all):
//   build/test/teletron_tests_model "[memory1b]"
#include <torch/torch.h>
#include <catch2/catch_test_macros.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "model/key_map.h"
#include "model/transformer.h"
#include "model/weight_io.h"
#include "test/test_util.h"

namespace {

using TensorMap = std::map<std::string, torch::Tensor>;

// A field of /proc/self/status in kB ("VmRSS", "VmHWM"), -1 when unavailable.
int64_t status_kb(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, field.size() + 1, field + ":") == 0) return std::stoll(line.substr(field.size() + 1));
  }
  return -1;
}

// Linux: writing 5 to clear_refs resets VmHWM to the current RSS.
bool reset_peak_rss() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  return out.good() && status_kb("VmHWM") <= status_kb("VmRSS") + 1024;
}

struct LoadMemory {
  double file_mb = 0;
  double before_mb = 0;    // RSS before the load (destinations already resident)
  double peak_mb = 0;      // peak RSS during the load
  double overhead_mb = 0;  // peak - before
  double seconds = 0;
  std::string how;  // "VmHWM" or "sampled"
};

// Loads `path` into `destinations`, measuring the peak RSS with VmHWM (reset first) and, where
// the reset is not allowed, with a 1 ms sampler.
LoadMemory measure_load(const std::string& path, const TensorMap& destinations) {
  LoadMemory m;
  tt::WeightSource source = tt::open_weights(path);
  for (const std::string& file : source.files) m.file_mb += std::filesystem::file_size(file) / 1e6;
  bool reset = reset_peak_rss();
  int64_t before = status_kb("VmRSS");
  std::atomic<bool> done{false};
  std::atomic<int64_t> sampled{before};
  std::thread sampler([&] {
    while (!done) {
      int64_t now = status_kb("VmRSS");
      if (now > sampled) sampled = now;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  auto start = std::chrono::steady_clock::now();
  tt::load_weights(source, destinations);
  m.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  done = true;
  sampler.join();
  int64_t peak = reset ? std::max<int64_t>(status_kb("VmHWM"), sampled) : sampled.load();
  m.before_mb = before / 1024.0;
  m.peak_mb = peak / 1024.0;
  m.overhead_mb = (peak - before) / 1024.0;
  m.how = reset ? "VmHWM" : "sampled";
  return m;
}

std::string describe(const std::string& what, const LoadMemory& m) {
  char line[400];
  std::snprintf(line, sizeof(line),
                "%s: file %.0f MB, RSS before %.0f MB, peak %.0f MB, transient %.1f MB (%.3f x file, %s), "
                "%.2f s (%.2f GB/s)",
                what.c_str(), m.file_mb, m.before_mb, m.peak_mb, m.overhead_mb, m.overhead_mb / m.file_mb,
                m.how.c_str(), m.seconds, m.file_mb / 1e3 / m.seconds);
  return line;
}

// Writes `model`'s weights as a diffusers folder (sharded) and an official safetensors file in
// `dtype`, zeroes the model, and returns a few reference tensors to check the loads against.
TensorMap write_checkpoints(tt::HunyuanVideoTransformer& model, torch::Dtype dtype,
                            const tt::test::TempDir& dir, int64_t max_shard_bytes) {
  TensorMap reference;
  {
    TensorMap stored;
    for (const auto& [key, tensor] : model->diffusers_parameters())
      stored[key] = tensor.detach().to(dtype).contiguous();
    tt::save_diffusers_weights(dir / "diffusers", stored, nullptr, max_shard_bytes);
    tt::save_official_weights(dir / "official.safetensors", stored);
    for (const char* key :
         {"single_transformer_blocks.0.proj_mlp.weight", "transformer_blocks.0.attn.add_v_proj.bias",
          "norm_out.linear.weight", "context_embedder.proj_in.weight"})
      reference[key] = stored.at(key).to(torch::kFloat32);
  }
  torch::NoGradGuard no_grad;
  for (auto& p : model->parameters()) p.zero_();  // resident, and proves the load writes
  return reference;
}

void check_loaded(tt::HunyuanVideoTransformer& model, const TensorMap& reference) {
  TensorMap params = model->diffusers_parameters();
  for (const auto& [key, tensor] : reference) {
    INFO(key);
    CHECK(torch::equal(params.at(key).to(torch::kCPU, torch::kFloat32), tensor));
  }
}

}  // namespace

TEST_CASE("streamed loading keeps transient memory small", "[weights][memory]") {
  // ~59 M parameters: 235 MB of fp32.
  tt::HunyuanVideoConfig c = tt::hunyuan_preset("13b");
  c.num_attention_heads = 6;
  c.num_layers = 1;
  c.num_single_layers = 2;
  c.num_refiner_layers = 1;
  tt::HunyuanVideoTransformer model(c);
  tt::test::TempDir dir("tt_weights_memory");
  TensorMap reference = write_checkpoints(model, torch::kFloat32, dir, 100'000'000);

  for (const std::string& path : {dir / "diffusers", dir / "official.safetensors"}) {
    LoadMemory m = measure_load(path, model->diffusers_parameters());
    INFO(describe(path, m));
    CHECK(m.file_mb > 200);
    CHECK(m.overhead_mb < 0.25 * m.file_mb);
    check_loaded(model, reference);
    torch::NoGradGuard no_grad;
    for (auto& p : model->parameters()) p.zero_();
  }
}

TEST_CASE("streamed loading of a 1b checkpoint (on demand)", "[.][memory1b]") {
  tt::HunyuanVideoTransformer model(tt::hunyuan_preset("1b"));
  tt::test::TempDir dir("tt_weights_memory1b");
  TensorMap reference = write_checkpoints(model, torch::kBFloat16, dir, 1'000'000'000);
  WARN("1b preset: " << model->parameter_count() << " parameters, fp32 destinations "
                     << model->parameter_count() * 4 / 1e6 << " MB");
  for (const std::string& path : {dir / "diffusers", dir / "official.safetensors"}) {
    LoadMemory m = measure_load(path, model->diffusers_parameters());
    WARN(describe(path, m));
    CHECK(m.overhead_mb < 0.25 * m.file_mb);
    check_loaded(model, reference);
    torch::NoGradGuard no_grad;
    for (auto& p : model->parameters()) p.zero_();
  }
  if (tt::test::has_cuda()) {  // the real case: destinations on the GPU, host memory only streams
    model->to(torch::kCUDA);
    for (const std::string& path : {dir / "diffusers", dir / "official.safetensors"}) {
      LoadMemory m = measure_load(path, model->diffusers_parameters());
      WARN("CUDA destinations, " << describe(path, m));
      CHECK(m.overhead_mb < 0.25 * m.file_mb);
      check_loaded(model, reference);
    }
  }
}

// The acceptance measurement of issue 3: an fp32 1b checkpoint loaded into fp32 CPU parameters.
// The whole process's peak resident memory during the load (parameters included) must stay under
// 1.25x the file: the file is never materialised next to the parameters.
TEST_CASE("1b fp32 checkpoint: process peak RSS while loading < 1.25x the file (on demand)", "[.][memory1b]") {
  tt::HunyuanVideoTransformer model(tt::hunyuan_preset("1b"));
  tt::test::TempDir dir("tt_weights_memory1b_fp32");
  TensorMap reference = write_checkpoints(model, torch::kFloat32, dir, 2'000'000'000);
  for (const std::string& path : {dir / "diffusers", dir / "official.safetensors"}) {
    LoadMemory m = measure_load(path, model->diffusers_parameters());
    WARN("fp32 " << describe(path, m) << "; peak / file = " << m.peak_mb / m.file_mb);
    CHECK(m.peak_mb < 1.25 * m.file_mb);
    check_loaded(model, reference);
    torch::NoGradGuard no_grad;
    for (auto& p : model->parameters()) p.zero_();
  }
}
