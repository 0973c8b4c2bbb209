// The cached-latent dataset (see latent_dataset.h). The constructor validates every manifest row
// from the safetensors headers alone, so that a bad row stops the run before step 0 with the line
// that needs fixing instead of hours later; get() then only reads and converts.
#include "pipeline/latent_dataset.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "core/errors.h"
#include "core/file_io.h"
#include "pipeline/sample_rng.h"
#include "core/safetensors.h"

namespace tt {
namespace {

namespace fs = std::filesystem;
namespace st = safetensors;

const char kRowHint[] =
    "each manifest row names a safetensors file holding latents (C, T', H', W'), text_states "
    "(L, text_dim), text_mask (L) and pooled (pooled_dim); see README.md";

// Where a problem was found: "data/train.jsonl:7: x.safetensors".
struct RowContext {
  std::string manifest;
  int64_t line = 0;
  std::string file;  // as written in the manifest
};

[[noreturn]] void bad_row(const RowContext& row, const std::string& problem, const std::string& hint = kRowHint) {
  std::string where = str_cat(row.manifest, ":", row.line, ": ");
  if (!row.file.empty()) where += row.file + ": ";
  throw Error(ErrorCode::kData, where + problem, hint);
}


std::string dtype_list(const std::vector<torch::Dtype>& dtypes) {
  std::string out;
  for (torch::Dtype dtype : dtypes) {
    if (!out.empty()) out += ", ";
    out += st::dtype_name(dtype);
  }
  return out;
}

const std::vector<torch::Dtype> kLatentDtypes = {torch::kFloat32, torch::kBFloat16, torch::kFloat16};
const std::vector<torch::Dtype> kFloatDtypes = {torch::kFloat32, torch::kBFloat16, torch::kFloat16,
                                                torch::kFloat64};
const std::vector<torch::Dtype> kMaskDtypes = {torch::kBool, torch::kUInt8, torch::kInt32, torch::kInt64};

// Finds `name` in the header and checks its dtype and rank; `expected` describes the shape for
// messages ("[L, 4096]").
const st::TensorInfo& check_tensor(const RowContext& row, const st::Header& header, const std::string& name,
                                   const std::vector<torch::Dtype>& dtypes, size_t rank,
                                   const std::string& expected) {
  auto it = header.tensors.find(name);
  if (it == header.tensors.end()) bad_row(row, str_cat("has no tensor \"", name, "\" (expected shape ", expected, ")"));
  const st::TensorInfo& info = it->second;
  if (std::find(dtypes.begin(), dtypes.end(), info.dtype) == dtypes.end())
    bad_row(row, str_cat(name, " has dtype ", st::dtype_name(info.dtype), ", expected one of ", dtype_list(dtypes)));
  if (info.shape.size() != rank)
    bad_row(row, str_cat(name, " has shape ", shape_string(info.shape), ", expected ", expected));
  return info;
}

void check_dim(const RowContext& row, const std::string& name, const st::TensorInfo& info, size_t dim,
               int64_t want, const std::string& expected, const std::string& hint = kRowHint) {
  if (info.shape[dim] != want)
    bad_row(row, str_cat(name, " has shape ", shape_string(info.shape), ", expected ", expected), hint);
}

// The per-row facts that must agree across rows.
struct RowShapes {
  std::vector<int64_t> latent_shape;
  int64_t text_length = 0;
};

RowShapes check_header(const RowContext& row, const st::Header& header, const LatentDatasetOptions& options) {
  std::string c = std::to_string(options.latent_channels);
  std::string d = std::to_string(options.text_dim);
  std::string p = std::to_string(options.pooled_dim);
  const st::TensorInfo latents = check_tensor(row, header, "latents", kLatentDtypes, 4, "[" + c + ", T', H', W']");
  check_dim(row, "latents", latents, 0, options.latent_channels, "[" + c + ", T', H', W']",
            "latent_channels must match the VAE that encoded the latents (16 for HunyuanVideo)");
  const st::TensorInfo states = check_tensor(row, header, "text_states", kFloatDtypes, 2, "[L, " + d + "]");
  check_dim(row, "text_states", states, 1, options.text_dim, "[L, " + d + "]",
            "model.text_embed_dim must match the text encoder that produced text_states");
  int64_t length = states.shape[0];
  std::string l = std::to_string(length);
  const st::TensorInfo mask = check_tensor(row, header, "text_mask", kMaskDtypes, 1, "[" + l + "] (L of text_states)");
  check_dim(row, "text_mask", mask, 0, length, "[" + l + "] (L of text_states)");
  const st::TensorInfo pooled = check_tensor(row, header, "pooled", kFloatDtypes, 1, "[" + p + "]");
  check_dim(row, "pooled", pooled, 0, options.pooled_dim, "[" + p + "]",
            "model.pooled_projection_dim must match the text encoder that produced pooled");
  return {latents.shape, length};
}

// Parses one JSONL line into the row's file as written; *resolved receives the usable path.
std::string parse_row(const RowContext& row, const std::string& text, const fs::path& base, std::string* resolved) {
  const char* hint = "each line must be one JSON object, e.g. {\"latents\": \"x.safetensors\"}";
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& error) {  // parse_error, and out_of_range for numbers like 1e400
    bad_row(row, str_cat("invalid JSON (", error.what(), ")"), hint);
  }
  if (!json.is_object()) bad_row(row, "expected a JSON object", hint);
  auto latents = json.find("latents");
  if (latents == json.end() || !latents->is_string() || latents->get<std::string>().empty())
    bad_row(row, "missing key \"latents\" (a path string)",
            "with data.source: latents every row needs {\"latents\": \"x.safetensors\"}");
  std::string file = latents->get<std::string>();
  fs::path path(file);
  *resolved = (path.is_absolute() ? path : base / path).lexically_normal().string();
  return file;
}

bool is_blank(const std::string& line) {
  return line.find_first_not_of(" \t\r\n") == std::string::npos;
}

// Everything that can be checked about one row on its own; *resolved receives the file's path.
RowShapes check_row(RowContext& row, const std::string& text, const fs::path& base,
                    const LatentDatasetOptions& options, std::string* resolved) {
  row.file = parse_row(row, text, base, resolved);
  std::error_code ignored;
  if (!fs::is_regular_file(*resolved, ignored))
    bad_row(row, str_cat("file not found (looked for ", *resolved, ")"),
            "paths in the manifest are relative to the manifest's folder");
  st::Header header;
  try {
    header = st::read_header(*resolved);
  } catch (const Error& error) {
    RowContext where{row.manifest, row.line, ""};  // the safetensors message names the file already
    bad_row(where, error.what());
  }
  return check_header(row, header, options);
}

}  // namespace

LatentDataset::LatentDataset(const LatentDatasetOptions& options) : options_(options) {
  const std::string& manifest = options.manifest;
  std::error_code ignored;
  TT_CHECK_HINT(fs::is_regular_file(manifest, ignored), ErrorCode::kData,
                "set data.manifest to a JSONL file with one {\"latents\": ...} row per sample",
                "manifest not found: ", manifest);
  std::ifstream in(manifest);
  TT_CHECK(in, ErrorCode::kData, "cannot read manifest ", manifest);
  fs::path base = fs::path(manifest).parent_path();

  int64_t first_line = 0;
  std::string text;
  for (int64_t line = 1; std::getline(in, text); ++line) {
    if (is_blank(text)) continue;
    RowContext row{manifest, line, ""};
    std::string resolved;
    RowShapes shapes = check_row(row, text, base, options, &resolved);
    if (files_.empty()) {
      text_length_ = shapes.text_length;
      first_line = line;
    } else if (shapes.text_length != text_length_) {
      bad_row(row, str_cat("text_states has L = ", shapes.text_length, ", expected L = ", text_length_,
                           " like line ", first_line),
              "L is fixed per dataset: encode every caption with the same max length");
    }
    size_t bucket = 0;
    while (bucket < shapes_.size() && shapes_[bucket] != shapes.latent_shape) ++bucket;
    if (bucket == shapes_.size()) shapes_.push_back(shapes.latent_shape);
    row_bucket_.push_back(static_cast<int64_t>(bucket));
    files_.push_back(resolved);
    lines_.push_back(line);
  }
  TT_CHECK_HINT(!files_.empty(), ErrorCode::kData, "add one {\"latents\": \"x.safetensors\"} row per sample",
                manifest, ": manifest has no rows");
}

LatentSample LatentDataset::get(int64_t index) const {
  TT_ASSERT(index >= 0 && index < size(), "index ", index, " of ", size());
  RowContext row{options_.manifest, lines_[index], files_[index]};
  st::TensorMap tensors;
  try {
    tensors = st::load(files_[index], {"latents", "text_states", "text_mask", "pooled"});
  } catch (const Error& error) {
    row.file.clear();  // the safetensors message names the file already
    bad_row(row, error.what());
  }
  LatentSample sample;
  sample.latents = tensors["latents"].to(torch::kFloat32);
  sample.text_states = tensors["text_states"].to(torch::kFloat32);
  sample.text_mask = tensors["text_mask"].to(torch::kBool);  // nonzero = attend
  sample.pooled = tensors["pooled"].to(torch::kFloat32);
  const std::string problem = check_sample_values(sample);
  if (!problem.empty())
    bad_row(row, problem, "re-create this row's file (teletron preprocess, or your text encoder), or drop the row");
  // The file may have been replaced since the constructor checked it; stacking would then fail
  // with a far less helpful message.
  if (sample.latents.sizes().vec() != shapes_[row_bucket_[index]] || sample.text_states.size(0) != text_length_ ||
      sample.text_states.size(1) != options_.text_dim || sample.text_mask.size(0) != text_length_ ||
      sample.pooled.size(0) != options_.pooled_dim)
    bad_row(row, "tensor shapes changed since the manifest was checked", "do not rewrite data files during a run");
  return sample;
}

std::string check_sample_values(const LatentSample& sample) {
  if (sample.text_mask.defined() && sample.text_mask.numel() == 0)
    return "text_mask has no tokens (length 0): the sample has no text to condition on";
  if (sample.text_mask.defined() && !sample.text_mask.any().item<bool>())
    return "text_mask marks no token (all zero): the sample has no text to condition on";
  const std::pair<const char*, const torch::Tensor*> values[] = {
      {"latents", &sample.latents}, {"text_states", &sample.text_states}, {"pooled", &sample.pooled}};
  for (const auto& [name, tensor] : values) {
    if (!tensor->defined() || tensor->numel() == 0) continue;
    const torch::Tensor finite = torch::isfinite(*tensor);
    if (finite.all().item<bool>()) continue;
    const int64_t bad = finite.numel() - finite.sum().item<int64_t>();
    const int64_t first = torch::logical_not(finite).flatten().nonzero().index({0, 0}).item<int64_t>();
    return str_cat(name, " holds ", bad, " non-finite value", bad == 1 ? "" : "s", " (NaN or inf; the first at flat "
                   "index ", first, ")");
  }
  return "";
}

LatentBatch LatentDataset::get_batch(const std::vector<int64_t>& indices) const {
  TT_ASSERT(!indices.empty(), "get_batch needs at least one index");
  for (int64_t index : indices)
    TT_ASSERT(row_bucket_[index] == row_bucket_[indices.front()], "get_batch: rows ", indices.front(), " and ", index,
              " are of different buckets");
  std::vector<torch::Tensor> latents, states, masks, pooled;
  for (int64_t index : indices) {
    LatentSample sample = get(index);
    latents.push_back(sample.latents);
    states.push_back(sample.text_states);
    masks.push_back(sample.text_mask);
    pooled.push_back(sample.pooled);
  }
  return {torch::stack(latents), torch::stack(states), torch::stack(masks), torch::stack(pooled)};
}

std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order(static_cast<size_t>(std::max<int64_t>(n, 0)));
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  // Mix seed and epoch through one SplitMix step each so that nearby seeds/epochs diverge.
  SampleRng mixer{seed};
  SampleRng rng{mixer.next() ^ (static_cast<uint64_t>(epoch) * 0xD1B54A32D192ED03ULL)};
  for (size_t i = order.size(); i > 1; --i) {
    size_t j = static_cast<size_t>(rng.below(i));  // Fisher–Yates: swap slot i-1 with [0, i)
    std::swap(order[i - 1], order[j]);
  }
  return order;
}

}  // namespace tt
