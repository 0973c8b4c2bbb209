// StepProfiler and the trace's busy share (see profiler.h).
#include "core/profiler.h"

#include <spdlog/spdlog.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <unistd.h>
#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <optional>
#include <ostream>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "core/errors.h"

#ifdef TELETRON_WITH_CUDA
#include <torch/cuda.h>
#endif

namespace tt {

namespace fs = std::filesystem;
namespace kineto = torch::autograd::profiler;
using torch::profiler::impl::ActivityType;
using torch::profiler::impl::ProfilerConfig;
using torch::profiler::impl::ProfilerState;

ProfileWindow parse_profile_window(const std::string& text, const std::string& origin) {
  constexpr const char* kHint =
      "write it as FIRST:COUNT, e.g. --profile 20:20 (steps 20..39), optionally followed by :memory (the "
      "allocator's events) and/or :shapes (each operator's input shapes and dtypes)";
  const size_t colon = text.find(':');
  TT_CHECK_HINT(colon != std::string::npos, ErrorCode::kConfig, kHint, origin, ": '", text, "' has no ':'");
  const size_t second = text.find(':', colon + 1);
  const std::string count =
      second == std::string::npos ? text.substr(colon + 1) : text.substr(colon + 1, second - colon - 1);
  auto number = [&](const std::string& part) {
    char* end = nullptr;
    const long long value = std::strtoll(part.c_str(), &end, 10);
    TT_CHECK_HINT(!part.empty() && *end == '\0' && value >= 1, ErrorCode::kConfig, kHint, origin, ": '", part,
                  "' in '", text, "' is not a whole number >= 1");
    return static_cast<int64_t>(value);
  };
  ProfileWindow window{number(text.substr(0, colon)), number(count)};
  size_t start = second;
  while (start != std::string::npos) {
    const size_t next = text.find(':', start + 1);
    const std::string extra =
        text.substr(start + 1, next == std::string::npos ? std::string::npos : next - start - 1);
    bool* flag = extra == "memory" ? &window.memory : extra == "shapes" ? &window.shapes : nullptr;
    TT_CHECK_HINT(flag != nullptr && !*flag, ErrorCode::kConfig, kHint, origin, ": '", extra, "' in '", text,
                  "' is not `memory` or `shapes` (each at most once)");
    *flag = true;
    start = next;
  }
  return window;
}

std::string kernel_kind(const std::string& name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  auto has = [&](std::initializer_list<const char*> parts) {
    return std::any_of(parts.begin(), parts.end(),
                       [&](const char* part) { return lower.find(part) != std::string::npos; });
  };
  // Order matters: cuDNN's attention kernels also say cudnn, AdamW's multi-tensor kernels also say
  // elementwise-like things, our own kernels may mention norms.
  if (has({"sdpa", "fmha", "flash", "attention", "attn"})) return "attention";
  if (has({"multi_tensor", "adam", "_amp_", "amp_update", "non_finite"})) return "optimizer";
  if (has({"tt::", "teletron"})) return "teletron";
  if (has({"norm"})) return "norm";
  if (has({"gemm", "nvjet", "xmma", "cutlass", "cublas", "gemv", "matmul", "splitk"})) return "GEMM";
  if (has({"conv", "implicit_", "winograd", "cudnn"})) return "convolution";
  if (has({"elementwise", "vectorized", "unrolled", "copy", "cast", "reduce", "index", "cat", "fill",
           "softmax", "scatter", "gather", "where", "sum", "pow", "add", "mul"}))
    return "elementwise";
  return "other";
}

std::string TraceBusy::kinds_text() const {
  double total = 0;
  for (const auto& [kind, seconds] : kind_s) total += seconds;
  if (total <= 0) return "";
  std::vector<std::pair<double, std::string>> order;
  for (const auto& [kind, seconds] : kind_s) order.emplace_back(seconds, kind);
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::string text;
  for (const auto& [seconds, kind] : order) {
    if (!text.empty()) text += ", ";
    text += kind + " " + std::to_string(static_cast<int>(100.0 * seconds / total + 0.5)) + " %";
  }
  return text;
}

TraceBusy trace_busy(const nlohmann::json& trace) {
  TraceBusy busy;
  const auto events = trace.find("traceEvents");
  if (events == trace.end() || !events->is_array()) return busy;
  double start = 0, end = 0;
  bool any = false;
  std::vector<std::pair<double, double>> kernels;  // [begin, end) µs
  for (const nlohmann::json& event : *events) {
    if (!event.is_object() || event.value("ph", std::string()) != "X") continue;
    const auto ts = event.find("ts");
    const auto dur = event.find("dur");
    if (ts == event.end() || dur == event.end() || !ts->is_number() || !dur->is_number()) continue;
    const double begin = ts->get<double>();
    const double finish = begin + std::max(0.0, dur->get<double>());
    start = any ? std::min(start, begin) : begin;
    end = any ? std::max(end, finish) : finish;
    any = true;
    if (event.value("cat", std::string()) == "kernel") {
      kernels.emplace_back(begin, finish);
      busy.kind_s[kernel_kind(event.value("name", std::string()))] += (finish - begin) * 1e-6;
    }
  }
  if (!any) return busy;
  busy.wall_s = (end - start) * 1e-6;
  busy.kernels = static_cast<int64_t>(kernels.size());
  std::sort(kernels.begin(), kernels.end());
  double covered = 0, open_begin = 0, open_end = -1;
  for (const auto& [begin, finish] : kernels) {
    if (begin > open_end) {
      if (open_end > open_begin) covered += open_end - open_begin;
      open_begin = begin;
      open_end = finish;
    } else {
      open_end = std::max(open_end, finish);
    }
  }
  if (open_end > open_begin) covered += open_end - open_begin;
  busy.kernel_s = covered * 1e-6;
  return busy;
}

std::vector<KernelTotal> kernel_totals(const nlohmann::json& trace, size_t top) {
  std::map<std::string, KernelTotal> by_name;
  const auto events = trace.find("traceEvents");
  if (events != trace.end() && events->is_array()) {
    for (const nlohmann::json& event : *events) {
      if (!event.is_object() || event.value("ph", std::string()) != "X" ||
          event.value("cat", std::string()) != "kernel")
        continue;
      const auto dur = event.find("dur");
      if (dur == event.end() || !dur->is_number()) continue;
      const std::string name = event.value("name", std::string());
      KernelTotal& total = by_name[name];
      total.name = name;
      total.count += 1;
      total.seconds += std::max(0.0, dur->get<double>()) * 1e-6;
    }
  }
  std::vector<KernelTotal> out;
  for (auto& [name, total] : by_name) {
    total.kind = kernel_kind(name);
    out.push_back(std::move(total));
  }
  std::sort(out.begin(), out.end(),
            [](const KernelTotal& a, const KernelTotal& b) { return a.seconds > b.seconds; });
  if (out.size() > top) out.resize(top);
  return out;
}

nlohmann::json write_time_split(std::ostream& text, const nlohmann::json& trace, const std::string& path,
                                int64_t passes, const std::string& what, const std::vector<KindWork>& work) {
  const TraceBusy busy = trace_busy(trace);
  if (busy.kernels == 0) {
    text << "\nTraced " << passes << " " << what << " into " << path
         << " (the host's operators; no GPU kernels on this device)\n";
    return {{"trace", path}, {"passes", passes}, {"kernels_per_pass", 0}};
  }
  const double per = 1.0 / static_cast<double>(passes);
  double kernel_total = 0;
  for (const auto& [kind, seconds] : busy.kind_s) kernel_total += seconds;
  text << "\nWhere the GPU time goes (" << passes << " traced " << what << ", " << path << "): kernels busy "
       << 100.0 * busy.share() << " % of " << busy.wall_s * 1e3 * per
       << " ms per pass\n| kernel kind | ms per pass | share of kernel time |\n|---|---|---|\n";
  nlohmann::json kinds = nlohmann::json::object();
  std::vector<std::pair<double, std::string>> order;
  for (const auto& [kind, seconds] : busy.kind_s) order.emplace_back(seconds, kind);
  std::sort(order.rbegin(), order.rend());
  for (const auto& [seconds, kind] : order) {
    text << "| " << kind << " | " << seconds * per * 1e3 << " | " << 100.0 * seconds / kernel_total
         << " % |\n";
    kinds[kind] = seconds * per * 1e3;
  }
  nlohmann::json achieved = nlohmann::json::array();
  for (const KindWork& group : work) {
    double seconds = 0;
    std::string names;
    for (const std::string& kind : group.kinds) {
      const auto found = busy.kind_s.find(kind);
      if (found != busy.kind_s.end()) seconds += found->second;
      names += (names.empty() ? "" : " + ") + kind;
    }
    if (seconds <= 0 || group.flop <= 0) continue;
    const double rate = group.flop / (seconds * per);
    text << "achieved by " << names << " kernels: " << rate / 1e12 << " TFLOP/s (" << group.flop / 1e12
         << " TFLOP per pass: " << group.what << ")\n";
    achieved.push_back({{"kinds", group.kinds}, {"tflop", group.flop / 1e12}, {"tflops", rate / 1e12}});
  }
  text << "\n| longest kernels (summed per pass) | kind | launches per pass | ms per pass "
          "|\n|---|---|---|---|\n";
  nlohmann::json top = nlohmann::json::array();
  for (const KernelTotal& k : kernel_totals(trace, 15)) {
    const std::string name = k.name.size() > 110 ? k.name.substr(0, 107) + "..." : k.name;
    text << "| `" << name << "` | " << k.kind << " | " << k.count * per << " | " << k.seconds * per * 1e3
         << " |\n";
    top.push_back(
        {{"name", k.name}, {"kind", k.kind}, {"launches", k.count * per}, {"ms", k.seconds * per * 1e3}});
  }
  return {{"trace", path},
          {"passes", passes},
          {"busy_share", busy.share()},
          {"wall_ms_per_pass", busy.wall_s * per * 1e3},
          {"kernels_per_pass", static_cast<double>(busy.kernels) * per},
          {"kernel_ms_by_kind", kinds},
          {"achieved_tflops", achieved},
          {"top_kernels", top}};
}

namespace {

nlohmann::json read_trace(const std::string& path) {
  std::ifstream in(path);
  TT_CHECK(in.good(), ErrorCode::kIo, path, ": cannot open the trace");
  nlohmann::json trace = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  TT_CHECK(!trace.is_discarded(), ErrorCode::kIo, path, ": not a JSON trace");
  return trace;
}

// Starts LibTorch's profiler: the host's operators, and the GPU's kernels on CUDA.
void start_profiler(torch::Device device, bool shapes, bool memory) {
  std::set<ActivityType> activities = {ActivityType::CPU};
  if (device.is_cuda()) activities.insert(ActivityType::CUDA);
  const ProfilerConfig config(ProfilerState::KINETO, /*report_input_shapes=*/shapes,
                              /*profile_memory=*/memory);
  kineto::prepareProfiler(config, activities);
  kineto::enableProfiler(config, activities);
}

void synchronize(torch::Device device) {
#ifdef TELETRON_WITH_CUDA
  if (device.is_cuda()) torch::cuda::synchronize(device.index() < 0 ? 0 : device.index());
#endif
}

// Stops the profiler, writes its Chrome trace to `path` (making the folder) and returns it parsed.
nlohmann::json stop_profiler_into(const std::string& path) {
  std::unique_ptr<kineto::ProfilerResult> result = kineto::disableProfiler();
  const fs::path folder = fs::path(path).parent_path();
  if (!folder.empty()) fs::create_directories(folder);
  result->save(path);
  return read_trace(path);
}

}  // namespace

TraceBusy trace_busy_of_file(const std::string& path) {
  return trace_busy(read_trace(path));
}

std::map<std::string, TraceMemory> trace_memory(const nlohmann::json& trace) {
  std::map<std::string, TraceMemory> out;
  const auto events = trace.find("traceEvents");
  if (events == trace.end() || !events->is_array()) return out;
  for (const nlohmann::json& e : *events) {
    if (!e.is_object() || e.value("name", std::string()) != "[memory]") continue;
    const auto args = e.find("args");
    if (args == e.end() || !args->is_object()) continue;
    // Numbers only: a field of another type (a trace from elsewhere) leaves the event out.
    auto number = [&](const char* key, int64_t fallback) -> std::optional<int64_t> {
      const auto found = args->find(key);
      if (found == args->end()) return fallback;
      if (!found->is_number()) return std::nullopt;
      return found->get<int64_t>();
    };
    const std::optional<int64_t> total_field = number("Total Allocated", -1), type = number("Device Type", 0),
                                 id = number("Device Id", 0);
    if (!total_field || *total_field < 0 || !type || !id) continue;
    const std::string device = *type == 1 ? str_cat("cuda:", *id) : "cpu";
    const int64_t total = *total_field;
    TraceMemory& m = out[device];
    if (m.events++ == 0) m.first_bytes = m.peak_bytes = total;
    m.peak_bytes = std::max(m.peak_bytes, total);
  }
  return out;
}

int64_t cpu_peak_bytes_during(const std::function<void()>& work) {
  const fs::path path =
      fs::temp_directory_path() / str_cat("tt_memory_", ::getpid(), "_",
                                          std::hash<std::thread::id>{}(std::this_thread::get_id()), ".json");
  const nlohmann::json trace = trace_work(torch::kCPU, path.string(), /*shapes=*/false, work, /*memory=*/true);
  std::error_code ignored;
  fs::remove(path, ignored);
  const auto memory = trace_memory(trace);
  const auto cpu = memory.find("cpu");
  // The CPU's count starts at the first traced allocation: its value before that allocation is 0.
  return cpu == memory.end() ? 0 : cpu->second.peak_bytes;
}

nlohmann::json trace_work(torch::Device device, const std::string& path, bool shapes,
                          const std::function<void()>& work, bool memory) {
  start_profiler(device, shapes, memory);
  try {
    work();
    synchronize(device);
  } catch (...) {
    (void)kineto::disableProfiler();
    throw;
  }
  return stop_profiler_into(path);
}

StepProfiler::StepProfiler(ProfileWindow window, torch::Device device, std::string folder)
    : window_(window), device_(device), folder_(std::move(folder)) {}

StepProfiler::~StepProfiler() {
  if (!running_) return;
  try {
    (void)kineto::disableProfiler();  // the run ended early (an error): nothing is saved
  } catch (...) {
  }
}

void StepProfiler::before_step(int64_t step) {
  if (!window_.active() || step != window_.first || running_) return;
  start_profiler(device_, window_.shapes, window_.memory);
  running_ = true;
  spdlog::info("profile: tracing steps {}..{}", window_.first, window_.last());
}

void StepProfiler::after_step(int64_t step, bool run_ends) {
  if (!running_ || (step != window_.last() && !run_ends)) return;
  synchronize(device_);
  running_ = false;
  trace_path_ = (fs::path(folder_) / str_cat("trace_steps_", window_.first, "-", step, ".json")).string();
  const nlohmann::json trace = stop_profiler_into(trace_path_);
  const TraceBusy busy = trace_busy(trace);
  if (window_.memory) {
    for (const auto& [device, m] : trace_memory(trace))
      spdlog::info(
          "profile: {} memory over the traced steps: {} allocator events, {:.1f} MiB allocated at the first, "
          "peak {:.1f} MiB ({:.1f} MiB above the first)",
          device, m.events, m.first_bytes / 1048576.0, m.peak_bytes / 1048576.0,
          m.peak_above_first() / 1048576.0);
  }
  if (device_.is_cuda()) {
    spdlog::info("profile: {} ({} kernels; GPU busy {:.1f} % of {:.3f} s: union of kernel intervals)",
                 trace_path_, busy.kernels, 100.0 * busy.share(), busy.wall_s);
  } else {
    spdlog::info("profile: {} ({:.3f} s traced on the CPU)", trace_path_, busy.wall_s);
  }
}

}  // namespace tt
