// The caption -> text-embedding cache that `teletron encode-text` fills (scripts/encode_text.py):
// a folder (data.text_cache, by default `text_cache/` beside the manifest) holding
//   encoder.json               {"identity": 32 hex digits of the encoders and settings, "empty": file, ...}
//   <key>.safetensors          text_states (L, D), text_mask (L) uint8, pooled (P); bf16 or fp32
// where <key> = text_cache_key(identity, caption): core/content_hash over the identity and the
// caption's UTF-8 bytes, the same 128-bit FNV-1a the script computes. A manifest row that carries
// a caption (its "caption" key, or a `<video stem>.txt` beside the video) is trained on that file;
// data.caption_dropout uses the empty caption's.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "pipeline/latent_dataset.h"
#include "pipeline/video_manifest.h"

namespace tt {

/// The cache file stem of `caption` under the encoder `identity` (32 lowercase hex digits).
std::string text_cache_key(std::string_view identity, std::string_view caption);

/// data.text_cache when set, else `text_cache` in the manifest's folder.
std::string text_cache_folder(const std::string& configured, const std::string& manifest);

struct TextCache {
  std::string folder;
  std::string identity;  // encoder.json's; "" when the folder has none (encode-text never ran there)

  /// The file of `caption` (whether or not it exists); needs an identity.
  std::string file_of(std::string_view caption) const;
};

/// Reads `folder`/encoder.json; a missing file gives an empty identity, a damaged one kData.
TextCache open_text_cache(const std::string& folder);

/// Points every caption row's text_embeddings at its file in `cache`; a row whose file is not
/// there (or when the cache has no encoder.json) gets text_error saying to run encode-text.
void resolve_captions(std::vector<VideoManifestRow>& rows, const TextCache& cache);

/// The distinct captions of `rows`, in manifest order.
std::vector<std::string> manifest_captions(const std::vector<VideoManifestRow>& rows);

/// The empty caption's embedding from `folder` (for data.caption_dropout), checked against the
/// model's widths and the dataset's text length: text_states (L, text_dim) fp32, text_mask (L)
/// bool, pooled (pooled_dim) fp32. Throws kData naming the file and the fix.
LatentSample load_empty_caption(const std::string& folder, int64_t text_dim, int64_t pooled_dim,
                                int64_t text_length);

}  // namespace tt
