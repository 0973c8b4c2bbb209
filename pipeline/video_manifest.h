// The raw-video manifest (data.source: video): JSONL, one sample per line,
//   {"video": "clips/a.mp4", "text_embeddings": "emb/a.safetensors"}
//   {"video": "clips/b.mp4", "caption": "A cat walks across a kitchen."}
//   {"video": "clips/c.mp4"}                       (the caption in clips/c.txt, if there is one)
// where the optional embeddings file holds `text_states` (L, text_dim), `text_mask` (L) and
// `pooled` (pooled_dim), as in a cached-latent row; a caption's file is found in the text cache
// (pipeline/text_cache.h, made by `teletron encode-text`). Relative paths are relative to the
// manifest's folder; blank lines are skipped. Reading never stops at a bad row: the row carries
// its error, so `teletron validate-data` can report every row.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tt {

struct VideoManifestRow {
  int64_t line = 0;              // 1-based line in the manifest
  std::string video;             // resolved path ("" when the row is bad)
  std::string text_embeddings;   // resolved path, "" when the row names none (or its caption's file)
  bool has_caption = false;      // the row's text is a caption (its key or `<video stem>.txt`)
  std::string caption;           // the caption (may be empty: an unconditional sample)
  std::string text_error;        // a caption without its cached embedding (resolve_captions)
  std::string error;             // why the row itself is unusable ("" = fine)
};

/// Throws kIo when the manifest cannot be read and kData when it holds no rows.
std::vector<VideoManifestRow> read_video_manifest(const std::string& path);

/// Checks an embeddings file's header: the three tensors, their ranks, text_mask's length equal to
/// text_states' rows, and the widths. Returns "" when fine, else the problem in words.
std::string check_text_embeddings(const std::string& path, int64_t text_dim, int64_t pooled_dim);

}  // namespace tt
