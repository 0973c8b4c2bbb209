// The caption -> text-embedding cache (see text_cache.h).
#include "pipeline/text_cache.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "core/content_hash.h"
#include "core/errors.h"
#include "core/file_io.h"
#include "core/safetensors.h"

namespace tt {
namespace fs = std::filesystem;
namespace {

const char kEncodeHint[] = "run `teletron encode-text CONFIG` (it encodes the manifest's captions into data.text_cache)";

}  // namespace

std::string text_cache_key(std::string_view identity, std::string_view caption) {
  // scripts/encode_text.py content_key computes the same: a test on each side holds one value.
  ContentHash hash;
  hash.add(identity);
  hash.add(caption);
  return hash.hex();
}

std::string text_cache_folder(const std::string& configured, const std::string& manifest) {
  if (!configured.empty()) return configured;
  return (fs::path(manifest).parent_path() / "text_cache").string();
}

std::string TextCache::file_of(std::string_view caption) const {
  TT_ASSERT(!identity.empty(), "TextCache::file_of without an encoder identity (", folder, ")");
  return (fs::path(folder) / (text_cache_key(identity, caption) + ".safetensors")).string();
}

TextCache open_text_cache(const std::string& folder) {
  TextCache cache;
  cache.folder = folder;
  const std::string path = (fs::path(folder) / "encoder.json").string();
  std::error_code ignored;
  if (!fs::is_regular_file(path, ignored)) return cache;
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(read_text_file(path));
  } catch (const nlohmann::json::exception& error) {
    throw Error(ErrorCode::kData, str_cat(path, ": not valid JSON (", error.what(), ")"), kEncodeHint);
  }
  auto identity = json.find("identity");
  TT_CHECK_HINT(json.is_object() && identity != json.end() && identity->is_string() &&
                    identity->get<std::string>().size() == 32,
                ErrorCode::kData, kEncodeHint, path, ": expected {\"identity\": \"<32 hex digits>\", ...}");
  cache.identity = identity->get<std::string>();
  return cache;
}

void resolve_captions(std::vector<VideoManifestRow>& rows, const TextCache& cache) {
  for (VideoManifestRow& row : rows) {
    if (!row.error.empty() || !row.has_caption) continue;
    if (cache.identity.empty()) {
      row.text_error = str_cat("the row has a caption, but the text cache ", cache.folder,
                               " holds no encoder.json (no embeddings yet): ", kEncodeHint);
      continue;
    }
    const std::string file = cache.file_of(row.caption);
    std::error_code ignored;
    if (fs::is_regular_file(file, ignored)) {
      row.text_embeddings = file;
    } else {
      row.text_error = str_cat("the caption's embedding is not in the text cache (looked for ", file, "): ",
                               kEncodeHint);
    }
  }
}

std::vector<std::string> manifest_captions(const std::vector<VideoManifestRow>& rows) {
  std::vector<std::string> captions;
  std::vector<std::string> seen;  // sorted, for the membership test
  for (const VideoManifestRow& row : rows) {
    if (!row.error.empty() || !row.has_caption) continue;
    auto at = std::lower_bound(seen.begin(), seen.end(), row.caption);
    if (at != seen.end() && *at == row.caption) continue;
    seen.insert(at, row.caption);
    captions.push_back(row.caption);
  }
  return captions;
}

LatentSample load_empty_caption(const std::string& folder, int64_t text_dim, int64_t pooled_dim,
                                int64_t text_length) {
  const TextCache cache = open_text_cache(folder);
  TT_CHECK_HINT(!cache.identity.empty(), ErrorCode::kData,
                str_cat(kEncodeHint, "; with data.source: latents set data.text_cache to the folder it wrote"),
                "data.caption_dropout needs the empty caption's embedding, but ", folder,
                " holds no encoder.json (teletron encode-text writes it)");
  const std::string file = cache.file_of("");
  std::error_code ignored;
  TT_CHECK_HINT(fs::is_regular_file(file, ignored), ErrorCode::kData, kEncodeHint,
                "data.caption_dropout: the empty caption's embedding is missing (looked for ", file, ")");
  const std::string problem = check_text_embeddings(file, text_dim, pooled_dim);
  TT_CHECK_HINT(problem.empty(), ErrorCode::kData, "encode with the text encoders the model was built for",
                "data.caption_dropout: ", problem);
  auto tensors = safetensors::load(file, {"text_states", "text_mask", "pooled"});
  LatentSample empty;
  empty.text_states = tensors.at("text_states").to(torch::kFloat32);  // (L, text_dim)
  empty.text_mask = tensors.at("text_mask").to(torch::kBool);         // (L)
  empty.pooled = tensors.at("pooled").to(torch::kFloat32);            // (pooled_dim)
  TT_CHECK_HINT(empty.text_states.size(0) == text_length, ErrorCode::kData,
                "encode the captions and the empty prompt with the same encoder settings",
                "data.caption_dropout: the empty caption's embedding (", file, ") has ", empty.text_states.size(0),
                " tokens, the dataset's text ", text_length);
  const std::string values = check_sample_values(empty);
  TT_CHECK_HINT(values.empty(), ErrorCode::kData, kEncodeHint, "data.caption_dropout: ", file, ": ", values);
  return empty;
}

}  // namespace tt
