// `teletron bench --suite pipeline` (issue 13): every stage of the video data pipeline on the same
// clips, the CPU way against the GPU way, in one run — then the whole pipeline per CPU core count:
//   decode          every frame: FFmpeg on the CPU (W threads, one per clip) | NVDEC (W sessions)
//   sampling        the sampler's frames of each clip, decoded (no colour): CPU | NVDEC
//   colour+augment  the sampled frames' planes -> RGB -> rotation -> crop/resize/flip/normalise:
//                   the CPU reference (W threads of one LibTorch thread) | the CUDA kernels
//   flow            the flow stage per training sample (K pairs at 256 px): TV-L1 on the CPU
//                   (LibTorch's threads) | NVOFA | TV-L1 CUDA
//   vae             the frozen VAE's encode per sample (random weights, bf16 on the GPU): GPU only
//   pipeline        sample -> decode -> colour -> augment per clip with W workers for each W of
//                   --cores (capped at the cores this process may use): CPU path | GPU path
//   training        `teletron train` itself on those clips (data.source: video, one bucket of the
//                   benchmark's shape, batch 1, the VAE with random weights, the config's model and
//                   flow stage), its threads pinned to W cores and data_pipeline.workers = W, for
//                   each W of --cores: samples/s and the share of the wall time the steps waited
//                   for data, over --steps steps after --warmup; CPU path | GPU path (on a CPU
//                   device only the CPU path); then the first path at the largest W with the flow
//                   stage off, and the stage's cost as the difference of the two steps' wall times
// Each stage's rows carry their throughput and its ratio to the stage's CPU row. Rows that cannot
// run here (no GPU) say why. `--json` writes the rows, `--plot` an SVG bar chart of them,
// `--compare OLD.json` the ratio of each row to the same row of an earlier run, flagging those
// slower by more than the threshold (exit status 1 when one is).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "app/config.h"

namespace tt {

struct BenchPipelineOptions {
  std::vector<std::string> clips;
  std::string device = "cuda";
  int64_t frames = 33, height = 480, width = 832;
  std::string sampler = "fps";
  int workers = 16;                        // the stage rows' workers (capped at the allowed cores)
  std::vector<int> cores = {2, 4, 8, 16};  // the pipeline rows' worker counts
  int passes = 2;
  std::string vae_preset = "hunyuan";  // hunyuan | tiny (tests)
  /// The training rows: the model, precision and flow stage come from here; data, batch and
  /// train.* are set per row. train_steps 0: no training rows.
  Config config;
  int64_t train_warmup = 3, train_steps = 10;
  int64_t text_tokens = 64;  // the synthetic text embeddings' length
  std::string work_dir;      // "" = a temporary folder
  std::string json_path, plot_path, compare_path;
  double compare_threshold = 0.10;  // a row slower than (1 - threshold) x its old value is flagged
};

struct BenchStageRow {
  std::string stage;  // decode | sampling | colour+augment | flow | vae | pipeline | training
  std::string name;
  std::string where;            // "cpu", "cuda"
  int workers = 0;              // workers or threads used (0: LibTorch's default)
  double value = 0;             // throughput in `unit`
  std::string unit;             // frames/s, samples/s, clips/s
  double vs_cpu = 0;            // value / the stage's CPU row (0: none)
  double data_wait_share = -1;  // training rows: the steps' wait for data over wall time (-1: none)
  double step_ms = -1;          // training rows: wall time per optimizer step
  double flow_gpu_ms = -1;      // training rows on a GPU: the flow stage's GPU time per sample
  std::string skipped;          // why it did not run
};

/// Runs the rows, prints the table, writes what was asked; returns the rows and sets `regressions`
/// to the number of rows --compare flagged.
std::vector<BenchStageRow> run_bench_pipeline(const BenchPipelineOptions& options,
                                              int* regressions = nullptr);

/// The --compare part on its own: rows of `old_json` (a --json file) against `rows`; prints the
/// comparison and returns how many rows are slower than (1 - threshold) x their old value.
int compare_pipeline_rows(const std::vector<BenchStageRow>& rows, const std::string& old_json,
                          double threshold);

/// The --plot part: an SVG with one horizontal bar per row that ran (log scale, grouped by stage,
/// CPU and GPU rows in two colours), written atomically to `path`.
void write_pipeline_plot(const std::vector<BenchStageRow>& rows, const std::string& path);

}  // namespace tt
