// `teletron preprocess CONFIG --output DIR`: runs the video pipeline of data.source: video once —
// sample, decode, augment, VAE-encode each manifest row (epoch 0) — and writes the cached-latent
// dataset that data.source: latents trains on: DIR/latents/<line>.safetensors (latents in the VAE's
// dtype, already scaled, plus the row's text embeddings) and DIR/manifest.jsonl (rows in manifest
// order). Each file is written to a temporary name, fsynced and renamed, so an interrupted run
// leaves only complete files; running again skips them (resume: nothing duplicated, nothing
// missing). The manifest is rewritten at the end of every run from the files present. Rows that
// fail are logged and left out; more than data.max_failed_share of them is TT_ERR_DATA.
#pragma once

#include <string>
#include <vector>

namespace tt {

struct PreprocessOptions {
  std::string config;
  std::vector<std::string> sets;
  std::string output;
  int jobs = 1;
  std::string device;  // overrides train.device when set
};

int run_preprocess(const PreprocessOptions& options);

}  // namespace tt
