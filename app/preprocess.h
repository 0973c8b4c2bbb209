// `teletron preprocess CONFIG --output DIR`: runs the video pipeline of data.source: video once —
// sample, decode, augment, VAE-encode each manifest row (epoch 0) — and writes the cached-latent
// dataset that data.source: latents trains on: DIR/latents/<key>.safetensors (latents in the VAE's
// dtype, already scaled, plus the row's text embeddings) and DIR/manifest.jsonl (rows in manifest
// order). <key> is a content hash of everything the file is made from: the row's position (it seeds
// frame sampling and augmentation), its video and text-embeddings paths with size and modification
// time, its bucket, and the settings that change the latents (frame sampler, augment, VAE preset,
// weights path and tiling, seed, video decoding path, device type). So an edited manifest or config
// never pairs an old latent with a new row: a changed row gets a new name and is encoded again.
// Each file is written to a temporary name, fsynced and renamed, so an interrupted run leaves only
// complete files; running again skips those whose key still matches (resume: nothing duplicated,
// nothing missing). The manifest is rewritten at the end of every run from the files present for
// the current rows; files of earlier keys stay on disk, unlisted. Rows that fail are logged and left
// out; more than data.max_failed_share of them is TT_ERR_DATA.
//
// Concurrency: `--jobs` threads each take the next row through the VAE (on a GPU they share it, one
// encode after another on its stream); data_pipeline.workers threads decode, sample and augment the
// clips of the rows ahead of them (NVDEC where the GPU takes the stream), 2 x workers + jobs rows in
// front, so the encoder finds its clips ready. Progress every 10 rows with clips/s and the ETA.
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
