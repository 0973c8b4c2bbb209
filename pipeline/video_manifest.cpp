// Raw-video manifest rows and the embeddings header check (see video_manifest.h).
#include "pipeline/video_manifest.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdio>
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

// The offset of the first byte that does not belong to valid UTF-8 (overlong forms, surrogates and
// code points past U+10FFFF are invalid), or npos.
size_t invalid_utf8_at(const std::string& text) {
  size_t i = 0;
  while (i < text.size()) {
    const auto byte = static_cast<unsigned char>(text[i]);
    int extra = 0;
    uint32_t point = 0;
    if (byte < 0x80) {
      ++i;
      continue;
    } else if (byte >= 0xC2 && byte <= 0xDF) {
      extra = 1, point = byte & 0x1F;
    } else if (byte >= 0xE0 && byte <= 0xEF) {
      extra = 2, point = byte & 0x0F;
    } else if (byte >= 0xF0 && byte <= 0xF4) {
      extra = 3, point = byte & 0x07;
    } else {
      return i;
    }
    if (i + static_cast<size_t>(extra) >= text.size()) return i;  // cut short
    for (int k = 1; k <= extra; ++k) {
      const auto next = static_cast<unsigned char>(text[i + static_cast<size_t>(k)]);
      if ((next & 0xC0) != 0x80) return i;
      point = (point << 6) | (next & 0x3F);
    }
    const uint32_t smallest = extra == 1 ? 0x80 : extra == 2 ? 0x800 : 0x10000;
    if (point < smallest || point > 0x10FFFF || (point >= 0xD800 && point <= 0xDFFF)) return i;
    i += static_cast<size_t>(extra) + 1;
  }
  return std::string::npos;
}

void append_utf8(uint32_t point, std::string* out) {
  if (point < 0x80) {
    out->push_back(static_cast<char>(point));
  } else if (point < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (point >> 6)));
    out->push_back(static_cast<char>(0x80 | (point & 0x3F)));
  } else if (point < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (point >> 12)));
    out->push_back(static_cast<char>(0x80 | ((point >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (point & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (point >> 18)));
    out->push_back(static_cast<char>(0x80 | ((point >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((point >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (point & 0x3F)));
  }
}

// UTF-16 text after its byte-order mark (little or big endian) as UTF-8; false on an odd length or
// an unpaired surrogate.
bool utf16_to_utf8(const std::string& bytes, bool little_endian, std::string* out) {
  if (bytes.size() % 2 != 0) return false;
  auto unit = [&](size_t i) {
    const auto a = static_cast<unsigned char>(bytes[i]), b = static_cast<unsigned char>(bytes[i + 1]);
    return static_cast<uint32_t>(little_endian ? a | (b << 8) : (a << 8) | b);
  };
  for (size_t i = 0; i < bytes.size(); i += 2) {
    uint32_t point = unit(i);
    if (point >= 0xDC00 && point <= 0xDFFF) return false;
    if (point >= 0xD800 && point <= 0xDBFF) {
      if (i + 3 >= bytes.size()) return false;
      const uint32_t low = unit(i + 2);
      if (low < 0xDC00 || low > 0xDFFF) return false;
      point = 0x10000 + ((point - 0xD800) << 10) + (low - 0xDC00);
      i += 2;
    }
    append_utf8(point, out);
  }
  return true;
}

// A row with neither text key: the caption in `<video stem>.txt` beside the video, when there is
// one, without the whitespace around it (editors add a final newline). UTF-8, with or without a
// byte-order mark, or UTF-16 with one (Windows editors write both); other encodings (Latin-1,
// cp1252) are a row error naming the byte, since the text encoders take UTF-8.
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
  const std::string bom8 = "\xEF\xBB\xBF", bom16le = "\xFF\xFE", bom16be = "\xFE\xFF";
  if (caption.compare(0, bom8.size(), bom8) == 0) {
    caption.erase(0, bom8.size());
  } else if (caption.compare(0, 2, bom16le) == 0 || caption.compare(0, 2, bom16be) == 0) {
    std::string utf8;
    if (!utf16_to_utf8(caption.substr(2), caption[0] == '\xFF', &utf8)) {
      row.error = str_cat("the caption file ", text.string(), " starts as UTF-16 but is not valid UTF-16; save it as UTF-8");
      return;
    }
    caption = utf8;
  }
  const size_t bad = invalid_utf8_at(caption);
  if (bad != std::string::npos) {
    char hex[8];
    std::snprintf(hex, sizeof(hex), "0x%02X", static_cast<unsigned>(static_cast<unsigned char>(caption[bad])));
    row.error = str_cat("the caption file ", text.string(), " is not UTF-8 (byte ", hex, " at offset ", bad,
                        "; Latin-1 or Windows-1252?): save it as UTF-8, e.g. `iconv -f cp1252 -t utf-8`");
    return;
  }
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
