// Finding, indexing, streaming and writing HunyuanVideo Transformer weights (see weight_io.h).
// open_weights reads headers only (safetensors JSON headers, torch.save's data.pkl); load_weights
// maps one file at a time, copies tensor by tensor in file order, and drops each tensor's pages
// with MADV_DONTNEED once copied, so resident memory grows by about one tensor, not one file.
#include "model/weight_io.h"

#include <torch/torch.h>

#include <sys/mman.h>
#include <unistd.h>
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <set>

#include "core/checked_math.h"
#include "core/errors.h"
#include "core/file_io.h"
#include "core/mapped_file.h"
#include "core/safetensors.h"
#include "core/torch_save.h"
#include "model/key_map.h"
#include "model/weights.h"

namespace tt {
namespace {

namespace fs = std::filesystem;

const char kWeightsName[] = "diffusion_pytorch_model";
const char kSingleFile[] = "diffusion_pytorch_model.safetensors";
const char kIndexFile[] = "diffusion_pytorch_model.safetensors.index.json";
const char kConfigFile[] = "config.json";
const char kOfficialTorchFile[] = "mp_rank_00_model_states.pt";


// Wrapper prefixes some tools put in front of every key; stripped when all keys carry one.
const char* const kWrapperPrefixes[] = {"model.diffusion_model.", "diffusion_model.", "module.", "model."};
const char* const kOfficialMarkers[] = {"double_blocks.", "single_blocks.", "img_in.",      "txt_in.",
                                        "time_in.",       "vector_in.",     "guidance_in.", "final_layer."};
const char* const kDiffusersMarkers[] = {"transformer_blocks.",
                                         "single_transformer_blocks.",
                                         "x_embedder.",
                                         "context_embedder.",
                                         "time_text_embed.",
                                         "norm_out.",
                                         "proj_out."};

// ---- small file helpers --------------------------------------------------------------------

nlohmann::json read_json(const std::string& path) {
  nlohmann::json json = nlohmann::json::parse(read_text_file(path), nullptr, /*allow_exceptions=*/false);
  TT_CHECK_HINT(!json.is_discarded(), ErrorCode::kCheckpoint,
                "the file is damaged; re-create or re-download it", path, ": not valid JSON");
  return json;
}

std::string temp_name(const std::string& path) {
  fs::path p(path);
  return (p.parent_path() / str_cat(".", p.filename().string(), ".tmp-", ::getpid())).string();
}

void rename_into_place(const std::string& temp, const std::string& path) {
  try {
    rename_or_throw(temp, path);
  } catch (const Error&) {
    std::error_code ignored;
    fs::remove(temp, ignored);
    throw;
  }
}

void write_text_atomic(const std::string& path, const std::string& text) {
  std::string temp = temp_name(path);
  try {
    write_text_synced(temp, text);
  } catch (const Error&) {
    std::error_code ignored;
    fs::remove(temp, ignored);
    throw;
  }
  rename_into_place(temp, path);
}

void write_safetensors_atomic(const std::string& path, const safetensors::TensorMap& tensors) {
  std::string temp = temp_name(path);
  safetensors::save(temp, tensors, {{"format", "pt"}});  // fsyncs; removes the partial file on failure
  rename_into_place(temp, path);
}


// ---- indexing files ------------------------------------------------------------------------

// As torch computes them (a size-0 dimension counts as 1), checked: the shape comes from a file.
std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape, const std::string& what) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;)
    strides[d - 1] = checked_mul(strides[d], std::max<int64_t>(shape[d], 1), ErrorCode::kCheckpoint, what);
  return strides;
}

// The tensors of one weight file (safetensors or torch.save zip), located but not read.
std::map<std::string, StoredTensor> index_file(const std::string& path, int file,
                                               std::string* container_key) {
  TT_CHECK(is_file(path), ErrorCode::kCheckpoint, path, ": no such file");
  std::map<std::string, StoredTensor> tensors;
  std::string extension = fs::path(path).extension().string();
  bool torch_file = extension == ".pt" || extension == ".pth" || extension == ".bin" || extension == ".ckpt";
  if (torch_file || torch_save::is_zip_file(path)) {  // read_state_dict explains legacy files
    torch_save::StateDict state = torch_save::read_state_dict(path);
    if (container_key != nullptr) *container_key = state.container_key;
    for (auto& [name, record] : state.tensors)
      tensors[name] = {file, record.dtype, record.shape, record.strides, record.file_offset};
    return tensors;
  }
  safetensors::Header header;
  try {
    header = safetensors::read_header(path);
  } catch (const Error& error) {
    if (error.code() != ErrorCode::kData) throw;
    throw Error(ErrorCode::kCheckpoint,
                str_cat(error.what(), " (neither a safetensors file nor a torch.save zip archive)"),
                error.hint());
  }
  for (auto& [name, info] : header.tensors) {
    std::string what = str_cat(path, ": tensor \"", name, "\"");
    int64_t offset =
        checked_add(header.data_start, info.offset_begin, ErrorCode::kCheckpoint, what + ": offset");
    tensors[name] = {file, info.dtype, info.shape, contiguous_strides(info.shape, what + ": strides"),
                     offset};
  }
  return tensors;
}

// Strips a wrapper prefix shared by every key and decides the layout from the key names.
void classify(WeightSource* source, const std::string& where) {
  for (const char* prefix : kWrapperPrefixes) {
    bool all = !source->tensors.empty();
    for (const auto& [name, tensor] : source->tensors) all = all && name.starts_with(prefix);
    if (!all) continue;
    std::map<std::string, StoredTensor> stripped;
    for (auto& [name, tensor] : source->tensors) stripped[name.substr(std::strlen(prefix))] = tensor;
    source->tensors = std::move(stripped);
    source->description += str_cat(" (key prefix \"", prefix, "\" stripped)");
    break;
  }
  std::string official_example, diffusers_example;
  for (const auto& [name, tensor] : source->tensors) {
    bool diffusers = false, official = false;
    for (const char* marker : kDiffusersMarkers) diffusers = diffusers || name.starts_with(marker);
    for (const char* marker : kOfficialMarkers) official = official || name.starts_with(marker);
    if (diffusers && diffusers_example.empty()) diffusers_example = name;
    if (official && official_example.empty()) official_example = name;
  }
  TT_CHECK_HINT(official_example.empty() || diffusers_example.empty(), ErrorCode::kCheckpoint,
                "the file mixes two conventions; convert it with one tool", where,
                ": mixes official and diffusers key names (e.g. ", official_example, " and ",
                diffusers_example, ")");
  if (official_example.empty() && diffusers_example.empty()) {
    std::string first;
    int shown = 0;
    for (const auto& [name, tensor] : source->tensors) {
      if (shown++ == 5) break;
      first += (first.empty() ? "" : ", ") + name;
    }
    throw Error(ErrorCode::kCheckpoint,
                str_cat(where, ": holds no HunyuanVideo Transformer weights (first keys: ", first, ")"),
                "point at a HunyuanVideo Transformer checkpoint (diffusers or official layout)");
  }
  source->layout = official_example.empty() ? WeightLayout::kDiffusers : WeightLayout::kOfficial;
  if (source->layout == WeightLayout::kOfficial) {
    std::map<std::string, std::vector<int64_t>> shapes;
    for (const auto& [name, tensor] : source->tensors) shapes[name] = tensor.shape;
    source->hidden_size = infer_official_hidden_size(shapes);
  }
  source->description = str_cat(source->layout == WeightLayout::kOfficial ? "official-layout " : "diffusers ",
                                source->description);
}

WeightSource open_single_file(const std::string& path) {
  WeightSource source;
  source.files = {path};
  std::string container_key;
  source.tensors = index_file(path, 0, &container_key);
  bool zip = torch_save::is_zip_file(path);
  source.description = str_cat(zip ? "torch.save file " : "safetensors file ", path);
  if (!container_key.empty()) source.description += str_cat(" (state dict under \"", container_key, "\")");
  classify(&source, path);
  return source;
}

WeightSource open_index(const std::string& index_path) {
  nlohmann::json index = read_json(index_path);
  const char* hint = "the index and its shards do not match; re-download or re-save the checkpoint";
  TT_CHECK_HINT(index.is_object() && index.contains("weight_map") && index["weight_map"].is_object(),
                ErrorCode::kCheckpoint, hint, index_path, ": has no \"weight_map\" object");
  std::string folder = fs::path(index_path).parent_path().string();
  std::map<std::string, std::vector<std::string>> keys_by_shard;  // shard file name -> keys
  for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
    TT_CHECK_HINT(it->is_string(), ErrorCode::kCheckpoint, hint, index_path, ": weight_map[\"", it.key(),
                  "\"] is not a file name");
    keys_by_shard[it->get<std::string>()].push_back(it.key());
  }
  TT_CHECK_HINT(!keys_by_shard.empty(), ErrorCode::kCheckpoint, hint, index_path, ": weight_map is empty");

  WeightSource source;
  std::vector<std::string> problems;
  for (const auto& [shard, keys] : keys_by_shard) {
    std::string shard_path = join_path(folder, shard);
    if (!is_file(shard_path)) {
      problems.push_back(str_cat("shard ", shard, " (", keys.size(), " tensors) does not exist"));
      continue;
    }
    int file = static_cast<int>(source.files.size());
    source.files.push_back(shard_path);
    std::map<std::string, StoredTensor> tensors = index_file(shard_path, file, nullptr);
    for (const std::string& key : keys) {
      auto found = tensors.find(key);
      if (found == tensors.end()) {
        problems.push_back(str_cat("index puts ", key, " in ", shard, ", which has no such tensor"));
        continue;
      }
      source.tensors[key] = found->second;
      tensors.erase(found);
    }
    for (const auto& [key, tensor] : tensors)
      problems.push_back(str_cat(shard, " holds ", key, ", which the index does not list"));
  }
  if (!problems.empty())
    throw Error(ErrorCode::kCheckpoint,
                str_cat(index_path, ": corrupt sharded checkpoint (", problems.size(), " problems)",
                        list_lines("problem", problems)),
                hint);
  source.description = str_cat("sharded checkpoint ", index_path, " (", source.files.size(), " shards)");
  classify(&source, index_path);
  return source;
}

std::string describe_folder(const std::string& folder) {
  std::vector<std::string> names;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(folder, error))
    names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  std::string out;
  for (size_t i = 0; i < names.size() && i < 10; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > 10) out += str_cat(", ... (", names.size(), " entries)");
  return out.empty() ? "nothing" : out;
}

WeightSource open_folder(const std::string& path) {
  std::string folder = path;
  if (is_file(join_path(path, "transformer/config.json")))
    folder = join_path(path, "transformer");  // pipeline folder
  std::string config = join_path(folder, kConfigFile);
  const std::string candidates[] = {kIndexFile, kSingleFile, "diffusion_pytorch_model.bin.index.json",
                                    "diffusion_pytorch_model.bin", kOfficialTorchFile};
  std::string chosen;
  for (const std::string& name : candidates) {
    if (is_file(join_path(folder, name))) {
      chosen = join_path(folder, name);
      break;
    }
  }
  if (chosen.empty()) {  // a folder holding one safetensors file of any name
    std::vector<std::string> found;
    std::error_code error;
    for (const auto& entry : fs::directory_iterator(folder, error))
      if (entry.path().extension() == ".safetensors" && is_file(entry.path().string()))
        found.push_back(entry.path().string());
    if (found.size() == 1) chosen = found[0];
  }
  TT_CHECK_HINT(!chosen.empty(), ErrorCode::kCheckpoint,
                str_cat("expected ", kSingleFile, ", ", kIndexFile, " with its shards, ", kOfficialTorchFile,
                        " or a single .safetensors file, or a pipeline folder with transformer/"),
                folder, ": no Transformer weights found (it holds: ", describe_folder(folder), ")");
  WeightSource source = chosen.ends_with(".index.json") ? open_index(chosen) : open_single_file(chosen);
  if (source.layout == WeightLayout::kDiffusers && is_file(config)) source.config_path = config;
  return source;
}

// ---- the load plan -------------------------------------------------------------------------

// One destination tensor filled from one stored tensor (rows empty: the whole tensor).
struct CopyStep {
  std::string stored_key;
  std::string key;  // diffusers
  std::vector<RowRange> rows;
  std::vector<int64_t> shape;
};

struct Plan {
  std::vector<CopyStep> steps;
  std::vector<std::string> unmappable;  // official keys without a diffusers counterpart
  std::vector<std::string> bad_split;   // fused tensors whose rows do not split
};

Plan make_plan(const WeightSource& source) {
  Plan plan;
  for (const auto& [name, tensor] : source.tensors) {
    if (source.layout == WeightLayout::kDiffusers) {
      plan.steps.push_back({name, name, {}, tensor.shape});
      continue;
    }
    int64_t rows = tensor.shape.empty() ? 0 : tensor.shape[0];
    std::vector<DiffusersPart> parts;
    try {
      parts = official_to_diffusers_key(name, rows, source.hidden_size);
    } catch (const Error& error) {
      plan.bad_split.push_back(error.what());
      continue;
    }
    if (parts.empty()) plan.unmappable.push_back(name + " (official key with no diffusers counterpart)");
    for (DiffusersPart& part : parts) {
      std::vector<int64_t> shape = tensor.shape;
      if (!part.rows.empty()) {
        shape[0] = 0;
        for (const RowRange& range : part.rows) shape[0] += range.end - range.begin;
      }
      plan.steps.push_back({name, part.key, std::move(part.rows), std::move(shape)});
    }
  }
  return plan;
}

void check_plan(const WeightSource& source, const Plan& plan,
                const std::map<std::string, torch::Tensor>& destinations) {
  std::vector<std::string> missing, unexpected = plan.unmappable, misshaped = plan.bad_split;
  std::set<std::string> produced;
  for (const CopyStep& step : plan.steps) {
    produced.insert(step.key);
    auto found = destinations.find(step.key);
    if (found == destinations.end()) {
      unexpected.push_back(step.key);
    } else {
      TT_CHECK(found->second.defined(), ErrorCode::kInternal, "load_weights: destination ", step.key,
               " is undefined");
      if (found->second.sizes().vec() != step.shape)
        misshaped.push_back(str_cat(step.key, " is ", shape_string(step.shape), " in the checkpoint, ",
                                    shape_string(found->second.sizes().vec()), " in the model"));
    }
  }
  for (const auto& [key, tensor] : destinations)
    if (!produced.count(key)) missing.push_back(key);
  throw_if_weights_mismatch(source.description, missing, unexpected, misshaped);
}

// Bytes [begin, begin + size) of its file that a stored tensor's view reads, checked against the
// file's size with checked arithmetic: the shape, strides and offset come from the file, and a
// crafted stride must not make from_blob read outside the mapping. Checked again here (the readers
// check too) because the file is mapped anew at load time and may have changed since it was indexed.
struct ByteSpan {
  uint64_t begin = 0;
  uint64_t size = 0;
};

ByteSpan checked_span(const StoredTensor& tensor, const MappedFile& file, const std::string& name) {
  const ErrorCode code = ErrorCode::kCheckpoint;
  std::string what = str_cat(file.path(), ": tensor ", name);
  TT_CHECK(tensor.offset >= 0, code, what, ": negative file offset ", tensor.offset);
  int64_t extent = checked_strided_extent(tensor.shape, tensor.strides, 0, code, what);
  checked_numel(tensor.shape, code, what);
  int64_t bytes = checked_mul(extent, static_cast<int64_t>(c10::elementSize(tensor.dtype)), code, what);
  int64_t end = checked_add(tensor.offset, bytes, code, what);
  TT_CHECK(static_cast<uint64_t>(end) <= file.size(), code, what, ": bytes [", tensor.offset, ", ", end,
           ") lie beyond the end of the ", file.size(), "-byte file (truncated?)");
  return {static_cast<uint64_t>(tensor.offset), static_cast<uint64_t>(bytes)};
}

// A read-only view of the mapping; it must not outlive `file` and must never be written.
torch::Tensor mapped_view(const MappedFile& file, const StoredTensor& tensor, const ByteSpan& span) {
  auto options = torch::TensorOptions().dtype(tensor.dtype).device(torch::kCPU);
  // An empty tensor reads nothing: any in-file address will do (an empty file has no address).
  static uint8_t nothing = 0;
  uint8_t* base = file.data() != nullptr ? const_cast<uint8_t*>(file.data()) + span.begin : &nothing;
  return torch::from_blob(base, tensor.shape, tensor.strides, options);
}

// Copies one step's rows; what it copied must be finite (a NaN in the weights would otherwise show
// up later as a non-finite loss, blamed on the data or the learning rate).
void copy_step(const CopyStep& step, const torch::Tensor& source_view, torch::Tensor destination,
               const std::string& file) {
  auto check_finite = [&](const torch::Tensor& copied) {
    TT_CHECK_HINT(torch::isfinite(copied).all().item<bool>(), ErrorCode::kCheckpoint,
                  "the weights file is damaged or was saved from a diverged run: use another checkpoint", file,
                  ": tensor ", step.stored_key, " holds non-finite values (NaN or infinity)");
  };
  if (step.rows.empty()) {
    destination.copy_(source_view);
    check_finite(destination);
    return;
  }
  int64_t row = 0;
  for (const RowRange& range : step.rows) {
    int64_t n = range.end - range.begin;
    destination.narrow(0, row, n).copy_(source_view.narrow(0, range.begin, n));
    check_finite(destination.narrow(0, row, n));
    row += n;
  }
}

void execute_plan(const WeightSource& source, const Plan& plan,
                  const std::map<std::string, torch::Tensor>& destinations) {
  // Steps grouped by stored tensor; stored tensors visited file by file, in file order.
  std::map<std::string, std::vector<const CopyStep*>> steps_by_stored;
  for (const CopyStep& step : plan.steps) steps_by_stored[step.stored_key].push_back(&step);
  torch::NoGradGuard no_grad;
  for (int file = 0; file < static_cast<int>(source.files.size()); ++file) {
    std::vector<std::pair<int64_t, const std::string*>> order;
    for (const auto& [name, tensor] : source.tensors)
      if (tensor.file == file && steps_by_stored.count(name)) order.push_back({tensor.offset, &name});
    if (order.empty()) continue;
    std::sort(order.begin(), order.end());
    MappedFile mapping(source.files[file]);
    TT_CHECK(mapping.size() > 0, ErrorCode::kCheckpoint, source.files[file], ": empty file");
    mapping.advise(0, mapping.size(), MADV_SEQUENTIAL);
    for (const auto& [offset, name] : order) {
      const StoredTensor& stored = source.tensors.at(*name);
      TT_CHECK_HINT(c10::isFloatingType(stored.dtype), ErrorCode::kCheckpoint,
                    "the Transformer's weights are floating point (fp32, bf16 or fp16): use the model's own file",
                    source.files[file], ": tensor ", *name, " is ", stored.dtype, ", not floating point");
      ByteSpan span = checked_span(stored, mapping, *name);
      mapping.advise(span.begin, span.size, MADV_WILLNEED);
      torch::Tensor view = mapped_view(mapping, stored, span);
      for (const CopyStep* step : steps_by_stored.at(*name))
        copy_step(*step, view, destinations.at(step->key), source.files[file]);
      // Drops the tensor's pages from this process (they stay in the page cache).
      mapping.advise(span.begin, span.size, MADV_DONTNEED);
    }
  }
}

}  // namespace

WeightSource open_weights(const std::string& path) {
  if (is_dir(path)) return open_folder(path);
  TT_CHECK_HINT(is_file(path), ErrorCode::kCheckpoint,
                "give a diffusers folder, a .safetensors file, an index .json or an official .pt file", path,
                ": no such file or folder");
  if (path.ends_with(".index.json")) {
    WeightSource source = open_index(path);
    std::string config = join_path(fs::path(path).parent_path().string(), kConfigFile);
    if (source.layout == WeightLayout::kDiffusers && is_file(config)) source.config_path = config;
    return source;
  }
  WeightSource source = open_single_file(path);
  std::string name = fs::path(path).filename().string();
  std::string config = join_path(fs::path(path).parent_path().string(), kConfigFile);
  if (source.layout == WeightLayout::kDiffusers && name.starts_with(kWeightsName) && is_file(config))
    source.config_path = config;
  return source;
}

std::optional<nlohmann::json> diffusers_config_json(const WeightSource& source) {
  if (source.config_path.empty()) return std::nullopt;
  return read_json(source.config_path);
}

void load_weights(const WeightSource& source, const std::map<std::string, torch::Tensor>& destinations) {
  Plan plan = make_plan(source);
  check_plan(source, plan, destinations);
  execute_plan(source, plan, destinations);
}

std::map<std::string, torch::Tensor> read_weights(const WeightSource& source) {
  Plan plan = make_plan(source);
  std::map<std::string, torch::Tensor> out;
  for (const CopyStep& step : plan.steps)
    out[step.key] =
        torch::empty(step.shape, torch::TensorOptions().dtype(source.tensors.at(step.stored_key).dtype));
  check_plan(source, plan, out);  // reports unmappable keys and bad splits
  execute_plan(source, plan, out);
  return out;
}

void save_diffusers_weights(const std::string& folder, const std::map<std::string, torch::Tensor>& tensors,
                            const nlohmann::json* config, int64_t max_shard_bytes) {
  TT_CHECK(max_shard_bytes > 0, ErrorCode::kInternal, "save_diffusers_weights: max_shard_bytes must be > 0");
  std::error_code error;
  fs::create_directories(folder, error);
  TT_CHECK(!error, ErrorCode::kIo, "cannot create ", folder, ": ", error.message());

  // Greedy shards in key order; a tensor larger than the limit gets a shard of its own.
  std::vector<safetensors::TensorMap> shards(1);
  int64_t shard_bytes = 0, total_bytes = 0;
  for (const auto& [key, tensor] : tensors) {
    int64_t bytes = static_cast<int64_t>(tensor.nbytes());
    if (!shards.back().empty() && shard_bytes + bytes > max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back()[key] = tensor;
    shard_bytes += bytes;
    total_bytes += bytes;
  }

  std::set<std::string> written;
  if (shards.size() == 1) {
    write_safetensors_atomic(join_path(folder, kSingleFile), shards[0]);
    written.insert(kSingleFile);
  } else {
    nlohmann::json weight_map = nlohmann::json::object();
    for (size_t i = 0; i < shards.size(); ++i) {
      char name[96];
      std::snprintf(name, sizeof(name), "%s-%05zu-of-%05zu.safetensors", kWeightsName, i + 1, shards.size());
      write_safetensors_atomic(join_path(folder, name), shards[i]);
      written.insert(name);
      for (const auto& [key, tensor] : shards[i]) weight_map[key] = name;
    }
    nlohmann::json index = {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", weight_map}};
    write_text_atomic(join_path(folder, kIndexFile), index.dump(2) + "\n");
    written.insert(kIndexFile);
  }
  if (config != nullptr) write_text_atomic(join_path(folder, kConfigFile), config->dump(2) + "\n");

  // Weight files of an earlier save (other shard count, single vs sharded) would shadow or
  // contradict this one.
  std::vector<fs::path> stale;
  for (const auto& entry : fs::directory_iterator(folder, error)) {
    std::string name = entry.path().filename().string();
    bool ours = name.starts_with(kWeightsName) &&
                (name.ends_with(".safetensors") || name.ends_with(".safetensors.index.json"));
    if (ours && !written.count(name)) stale.push_back(entry.path());
  }
  for (const fs::path& path : stale) fs::remove(path, error);
  fsync_path(folder, true);
}

void save_official_weights(const std::string& path, const std::map<std::string, torch::Tensor>& tensors) {
  write_safetensors_atomic(path, diffusers_to_official(tensors));
  fsync_path(fs::path(path).parent_path().empty() ? "." : fs::path(path).parent_path().string(), true);
}

}  // namespace tt
