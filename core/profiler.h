// `teletron train --profile FIRST:COUNT`: a Chrome/Perfetto trace (LibTorch's Kineto profiler) of
// optimizer steps FIRST .. FIRST+COUNT-1, and the GPU busy share read from it: the union of the
// kernel intervals over the traced wall time (what the benchmarks report, rather than NVML's
// "a kernel ran during this sample" utilisation).
#pragma once

#include <torch/types.h>
#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace tt {

struct ProfileWindow {
  int64_t first = 0;  // 1-based step; 0 = no profiling
  int64_t count = 0;
  bool memory = false;  // ":memory": the allocator's events too (a memory timeline, CPU and CUDA)
  // ":shapes": each operator's input shapes and dtypes (its args "Input Dims", "Input type").
  bool shapes = false;
  bool active() const { return first > 0 && count > 0; }
  int64_t last() const { return first + count - 1; }
};

/// "FIRST:COUNT" (both >= 1), then optionally ":memory" and/or ":shapes"; anything else is TT_ERR_CONFIG
/// naming `origin`.
ProfileWindow parse_profile_window(const std::string& text, const std::string& origin);

struct TraceBusy {
  double wall_s = 0;    // first event start .. last event end, every event of the trace
  double kernel_s = 0;  // union of the GPU kernel intervals
  int64_t kernels = 0;  // kernel events counted
  /// Summed kernel durations (not their union) by kind (kernel_kind), in seconds: where the
  /// GPU's time goes.
  std::map<std::string, double> kind_s;
  double share() const { return wall_s > 0 ? kernel_s / wall_s : 0.0; }
  /// The kinds by falling time with their share of the summed kernel time, e.g.
  /// "attention 52 %, GEMM 30 %, …" ("" without kernels).
  std::string kinds_text() const;
};

/// The kind of a GPU kernel by its name: "attention" (SDPA: flash, cuDNN, memory-efficient),
/// "GEMM", "convolution", "norm", "optimizer" (multi-tensor / AdamW / AMP), "teletron" (our own
/// kernels, namespace tt), "elementwise" (elementwise, copies, casts, reductions, indexing) or
/// "other".
std::string kernel_kind(const std::string& name);

/// One GPU kernel's launches in a trace, summed by name.
struct KernelTotal {
  std::string name;
  std::string kind;  // kernel_kind(name)
  int64_t count = 0;
  double seconds = 0;  // summed durations
};
/// The GPU kernels of a trace summed by name, the longest total first, at most `top` of them.
std::vector<KernelTotal> kernel_totals(const nlohmann::json& trace, size_t top);

/// Busy time of a Chrome trace (Kineto's JSON: traceEvents with ph "X", ts and dur in µs, GPU
/// kernels under cat "kernel"): overlapping kernels (several streams) count once.
TraceBusy trace_busy(const nlohmann::json& trace);
/// trace_busy of the file `path` (TT_ERR_IO when it cannot be read or parsed).
TraceBusy trace_busy_of_file(const std::string& path);

/// The allocator's "[memory]" events of a trace (--profile FIRST:COUNT:memory) on one device: its
/// "Total Allocated" at the first event and at its highest. On CUDA that is the caching allocator's
/// count; on the CPU LibTorch counts from the start of the trace, so the first is about 0.
struct TraceMemory {
  int64_t events = 0;
  int64_t first_bytes = 0;
  int64_t peak_bytes = 0;
  int64_t peak_above_first() const { return peak_bytes - first_bytes; }
};
/// Per device, keyed "cpu" or "cuda:N" (device type 1 = CUDA); empty without memory events.
std::map<std::string, TraceMemory> trace_memory(const nlohmann::json& trace);

/// The most bytes the CPU allocator held above what it held when `work` began, while `work` ran
/// (LibTorch's allocator events, traced into a temporary file that is removed). The CPU keeps no
/// allocation counters of its own; this is its peak-memory measure for benchmarks. Not while
/// another profiler runs in the process.
int64_t cpu_peak_bytes_during(const std::function<void()>& work);

/// FLOPs a group of kernel kinds did per pass, for the "achieved" column of write_time_split.
struct KindWork {
  std::vector<std::string> kinds;  // e.g. {"GEMM", "convolution"}
  double flop = 0;
  std::string what;  // e.g. "the convolutions and attention projections"
};

/// Where the GPU's time went in a trace of `passes` equal passes (`what`, e.g. "forward+backward
/// passes"), written as markdown to `text`: the kernels' busy share, kernel time per pass by kind
/// with its share, the rate each `work` group achieved, and the 15 longest kernels. Returns the same
/// as JSON (trace, passes, busy_share, wall_ms_per_pass, kernels_per_pass, kernel_ms_by_kind,
/// achieved_tflops, top_kernels). A trace without GPU kernels (the CPU) gives one line saying so.
nlohmann::json write_time_split(std::ostream& text, const nlohmann::json& trace, const std::string& path,
                                int64_t passes, const std::string& what, const std::vector<KindWork>& work);

/// Runs `work` under LibTorch's profiler (the host's operators and, on CUDA, the GPU's kernels; with
/// `shapes` each operator's input shapes, with `memory` the allocator's events), waits for the
/// device, writes the Chrome trace to `path` and returns it parsed. Not while another profiler runs
/// in the process.
nlohmann::json trace_work(torch::Device device, const std::string& path, bool shapes,
                          const std::function<void()>& work, bool memory = false);

/// Starts the profiler before step `window.first` and stops it after `window.last()`, then writes
/// the trace into `folder` and logs where it is and the busy share. One per training run (the
/// profiler itself is per process: a second rank in one process must not profile at once).
class StepProfiler {
 public:
  StepProfiler(ProfileWindow window, torch::Device device, std::string folder);
  ~StepProfiler();
  StepProfiler(const StepProfiler&) = delete;
  StepProfiler& operator=(const StepProfiler&) = delete;

  /// Before optimizer step `step` (1-based) runs.
  void before_step(int64_t step);
  /// After step `step` ran (its work queued): after the window's last step, or the run's
  /// (`run_ends`), waits for the device, stops and saves the trace.
  void after_step(int64_t step, bool run_ends);
  /// The trace written, "" before.
  const std::string& trace_path() const { return trace_path_; }

 private:
  ProfileWindow window_;
  torch::Device device_;
  std::string folder_;
  bool running_ = false;
  std::string trace_path_;
};

}  // namespace tt
