// Raw-video manifest rows and the embeddings header check (see video_manifest.h).
#include "pipeline/video_manifest.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/errors.h"
#include "core/file_io.h"
#include "core/safetensors.h"

namespace tt {
namespace fs = std::filesystem;
namespace {

std::string resolve(const fs::path& base, const std::string& file) {
  const fs::path path(file);
  return (path.is_absolute() ? path : base / path).lexically_normal().string();
}

// A string field of the row: "" when absent; sets *error when present but not a non-empty string.
std::string string_field(const nlohmann::json& row, const char* key, std::string* error) {
  auto it = row.find(key);
  if (it == row.end()) return "";
  if (!it->is_string() || it->get<std::string>().empty()) {
    *error = str_cat("\"", key, "\" must be a non-empty path string");
    return "";
  }
  return it->get<std::string>();
}

// A row with neither text key: the caption in `<video stem>.txt` beside the video, when there is
// one, without the whitespace around it (editors add a final newline).
void read_caption_file(VideoManifestRow& row) {
  const fs::path text = fs::path(row.video).replace_extension(".txt");
  std::error_code ignored;
  if (!fs::is_regular_file(text, ignored)) return;
  std::ifstream in(text, std::ios::binary);
  if (!in) {
    row.error = str_cat("cannot read the caption file ", text.string());
    return;
  }
  std::string caption((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const char* space = " \t\r\n";
  const size_t first = caption.find_first_not_of(space);
  caption = first == std::string::npos ? std::string() : caption.substr(first, caption.find_last_not_of(space) + 1 - first);
  row.has_caption = true;
  row.caption = caption;
}

}  // namespace

std::vector<VideoManifestRow> read_video_manifest(const std::string& path) {
  std::ifstream in(path);
  TT_CHECK_HINT(in.good(), ErrorCode::kIo, "check the path (data.manifest)", path, ": cannot read the manifest");
  const fs::path base = fs::absolute(fs::path(path)).parent_path();
  std::vector<VideoManifestRow> rows;
  std::string text;
  for (int64_t line = 1; std::getline(in, text); ++line) {
    if (text.find_first_not_of(" \t\r\n") == std::string::npos) continue;
    VideoManifestRow row;
    row.line = line;
    nlohmann::json json;
    try {
      json = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception&) {  // parse_error, and out_of_range for numbers like 1e400
      row.error = "not valid JSON (each line is one object, e.g. {\"video\": \"a.mp4\"})";
      rows.push_back(row);
      continue;
    }
    if (!json.is_object()) {
      row.error = "expected a JSON object, e.g. {\"video\": \"a.mp4\"}";
    } else {
      const std::string video = string_field(json, "video", &row.error);
      const std::string embeddings = string_field(json, "text_embeddings", &row.error);
      auto caption = json.find("caption");
      if (caption != json.end() && !caption->is_string()) row.error = "\"caption\" must be a string";
      if (caption != json.end() && !embeddings.empty())
        row.error = "give \"caption\" or \"text_embeddings\", not both";
      if (row.error.empty() && video.empty()) row.error = "missing key \"video\" (the clip's path)";
      if (row.error.empty()) {
        row.video = resolve(base, video);
        if (!embeddings.empty()) row.text_embeddings = resolve(base, embeddings);
        if (caption != json.end()) {
          row.has_caption = true;
          row.caption = caption->get<std::string>();
        } else if (embeddings.empty()) {
          read_caption_file(row);
        }
      }
    }
    rows.push_back(row);
  }
  TT_CHECK_HINT(!rows.empty(), ErrorCode::kData, "one JSON object per line, e.g. {\"video\": \"a.mp4\"}", path,
                ": the manifest has no rows");
  return rows;
}

std::string check_text_embeddings(const std::string& path, int64_t text_dim, int64_t pooled_dim) {
  safetensors::Header header;
  try {
    header = safetensors::read_header(path);
  } catch (const Error& error) {
    return error.what();
  }
  auto find = [&](const char* name) -> const safetensors::TensorInfo* {
    auto it = header.tensors.find(name);
    return it == header.tensors.end() ? nullptr : &it->second;
  };
  const auto* states = find("text_states");
  const auto* mask = find("text_mask");
  const auto* pooled = find("pooled");
  if (states == nullptr || mask == nullptr || pooled == nullptr)
    return str_cat(path, ": needs tensors text_states (L, ", text_dim, "), text_mask (L) and pooled (", pooled_dim, ")");
  if (states->shape.size() != 2 || states->shape[1] != text_dim)
    return str_cat(path, ": text_states has shape ", shape_string(states->shape), ", expected (L, ", text_dim, ")");
  if (mask->shape.size() != 1 || mask->shape[0] != states->shape[0])
    return str_cat(path, ": text_mask has shape ", shape_string(mask->shape), ", expected (", states->shape[0], ")");
  if (pooled->shape.size() != 1 || pooled->shape[0] != pooled_dim)
    return str_cat(path, ": pooled has shape ", shape_string(pooled->shape), ", expected (", pooled_dim, ")");
  return "";
}

}  // namespace tt
