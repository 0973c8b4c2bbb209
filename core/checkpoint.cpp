// Crash-safe checkpoint folders (see checkpoint.h). The write protocol: fill a temporary sibling
// folder `.tmp_step_NNNNNNN_<pid>` (model, state, then state.json with "complete": true LAST),
// fsync every file and the folder, rename it to `step_NNNNNNN`, fsync the parent. A reader only
// trusts folders named step_* whose state.json says complete, so a writer killed at any point
// leaves either nothing new or a finished checkpoint.
#include "core/checkpoint.h"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

#include "core/errors.h"
#include "core/file_io.h"

namespace tt::checkpoint {
namespace {

namespace fs = std::filesystem;

const char kStateFile[] = "state.safetensors";
const char kInfoFile[] = "state.json";
const char kTempPrefix[] = ".tmp_";

// Deletes a folder tree, ignoring errors. Deliberately not fs::remove_all: the LibTorch wheel
// exports its own statically linked copy of it (pytorch/pytorch#133437), which crashes unless
// libstdc++ precedes libtorch in the link order; plain iteration and fs::remove are unaffected.
void remove_tree(const fs::path& path, std::error_code& error) {
  fs::file_status status = fs::symlink_status(path, error);
  if (error) return;
  if (fs::is_directory(status)) {
    std::vector<fs::path> children;  // listed first: deleting while iterating is unspecified
    for (fs::directory_iterator it(path, error), end; !error && it != end; it.increment(error))
      children.push_back(it->path());
    for (const fs::path& child : children) {
      std::error_code ignored;
      remove_tree(child, ignored);
    }
  }
  fs::remove(path, error);
}

void remove_quietly(const std::string& path) {
  std::error_code ignored;
  remove_tree(path, ignored);
}


// The pid at the end of a temporary folder's name, 0 when there is none.
pid_t temp_folder_pid(const std::string& name) {
  size_t underscore = name.rfind('_');
  if (underscore == std::string::npos) return 0;
  pid_t pid = 0;
  for (size_t i = underscore + 1; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9' || pid > 4'000'000) return 0;
    pid = pid * 10 + (name[i] - '0');
  }
  return pid;
}

// A temporary folder belongs to a live writer when its pid names another running process; those
// are left alone so that a concurrent save is not sabotaged.
bool is_stale_temp(const std::string& name) {
  pid_t pid = temp_folder_pid(name);
  if (pid <= 0 || pid == ::getpid()) return true;
  return ::kill(pid, 0) != 0 && errno == ESRCH;
}

std::optional<nlohmann::json> read_info(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  nlohmann::json info = nlohmann::json::parse(in, nullptr, false);
  if (info.is_discarded() || !info.is_object()) return std::nullopt;
  return info;
}

// The weights file state.json names: only the two names a checkpoint writes (a crafted state.json
// cannot point the loader elsewhere).
std::optional<std::string> model_file_of(const nlohmann::json& info) {
  auto file = info.find("model_file");
  if (file == info.end()) return std::string(kModelWeightsFile);
  if (file->is_string() && (*file == kModelWeightsFile || *file == kLoraWeightsFile)) return file->get<std::string>();
  return std::nullopt;
}

[[noreturn]] void bad_checkpoint(const std::string& folder, const std::string& problem) {
  throw Error(ErrorCode::kCheckpoint, str_cat("checkpoint ", folder, ": ", problem));
}

safetensors::TensorMap load_tensors(const std::string& folder, const char* file) {
  std::string path = join_path(folder, file);
  if (!is_file(path)) bad_checkpoint(folder, str_cat(file, " is missing"));
  try {
    return safetensors::load(path);
  } catch (const Error& error) {
    bad_checkpoint(folder, str_cat(file, " is unreadable: ", error.what()));
  }
}

nlohmann::json load_info(const std::string& folder) {
  std::string path = join_path(folder, kInfoFile);
  if (!is_file(path))
    bad_checkpoint(folder, str_cat(kInfoFile, " is missing (the write was interrupted)"));
  std::optional<nlohmann::json> info = read_info(path);
  if (!info) bad_checkpoint(folder, str_cat(kInfoFile, " is not a valid JSON object"));
  auto complete = info->find("complete");
  if (complete == info->end() || *complete != true)
    bad_checkpoint(folder, str_cat(kInfoFile, " lacks \"complete\": true (the write was interrupted)"));
  auto step = info->find("step");
  if (step == info->end() || !step->is_number_integer())
    bad_checkpoint(folder, str_cat(kInfoFile, " has no integer \"step\""));
  return *info;
}

// Writes the three files into `temp` in the order that makes state.json the commit marker.
void write_folder(const std::string& temp, const Checkpoint& ckpt) {
  TT_ASSERT(ckpt.model_file == kModelWeightsFile || ckpt.model_file == kLoraWeightsFile,
            "checkpoint weights file must be model.safetensors or lora.safetensors, got ", ckpt.model_file);
  std::map<std::string, std::string> metadata = ckpt.model_metadata;
  metadata["format"] = "pt";
  safetensors::save(join_path(temp, ckpt.model_file), ckpt.model, metadata);
  safetensors::save(join_path(temp, kStateFile), ckpt.state);
  nlohmann::json info = ckpt.info.is_object() ? ckpt.info : nlohmann::json::object();
  info["step"] = ckpt.step;
  if (ckpt.model_file != kModelWeightsFile) info["model_file"] = ckpt.model_file;
  info["complete"] = true;
  write_text_synced(join_path(temp, kInfoFile), info.dump(2) + "\n");
  fsync_path(temp, true);
}

// Moves the finished temp folder to `final_path`; an existing folder of the same step is first
// renamed aside (under a .tmp_ name, so that prune clears it if we die) and removed afterwards.
void install_folder(const std::string& dir, const std::string& temp, const std::string& final_path,
                    int64_t step) {
  std::string aside;
  std::error_code ignored;
  if (fs::exists(fs::symlink_status(final_path, ignored))) {
    aside = join_path(dir, str_cat(kTempPrefix, "old_", folder_name(step), "_", ::getpid()));
    remove_quietly(aside);
    rename_or_throw(final_path, aside);
  }
  rename_or_throw(temp, final_path);
  fsync_path(dir, true);
  if (!aside.empty()) remove_quietly(aside);
}

}  // namespace

std::optional<int64_t> parse_folder_step(const std::string& name) {
  const std::string prefix = "step_";
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  int64_t step = 0;
  for (size_t i = prefix.size(); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9' || step > (INT64_MAX - 9) / 10) return std::nullopt;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

std::string folder_name(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step_%07lld", static_cast<long long>(step));
  return name;
}

std::string save(const std::string& checkpoints_dir, const Checkpoint& ckpt) {
  TT_CHECK(ckpt.step >= 0, ErrorCode::kInternal, "checkpoint::save: negative step ", ckpt.step);
  std::error_code error;
  fs::create_directories(checkpoints_dir, error);
  TT_CHECK(!error, ErrorCode::kIo, "cannot create checkpoint folder ", checkpoints_dir, ": ", error.message());

  std::string final_path = join_path(checkpoints_dir, folder_name(ckpt.step));
  std::string temp =
      join_path(checkpoints_dir, str_cat(kTempPrefix, folder_name(ckpt.step), "_", ::getpid()));
  remove_quietly(temp);  // a leftover of our own pid from an earlier failed attempt
  fs::create_directory(temp, error);
  TT_CHECK(!error, ErrorCode::kIo, "cannot create ", temp, ": ", error.message());
  try {
    write_folder(temp, ckpt);
    install_folder(checkpoints_dir, temp, final_path, ckpt.step);
  } catch (...) {
    remove_quietly(temp);
    throw;
  }
  return final_path;
}

Checkpoint load(const std::string& folder) {
  TT_CHECK(is_dir(folder), ErrorCode::kCheckpoint, "checkpoint folder ", folder, " does not exist");
  Checkpoint ckpt;
  ckpt.info = load_info(folder);
  ckpt.step = ckpt.info["step"].get<int64_t>();
  // info round-trips exactly what the caller saved; step and complete are the loader's fields.
  ckpt.info.erase("step");
  ckpt.info.erase("complete");
  std::optional<std::string> model_file = model_file_of(ckpt.info);
  if (!model_file)
    bad_checkpoint(folder, str_cat(kInfoFile, ": \"model_file\" must be \"model.safetensors\" or \"lora.safetensors\", got ",
                                   ckpt.info["model_file"].dump()));
  ckpt.model_file = *model_file;
  ckpt.info.erase("model_file");
  ckpt.model = load_tensors(folder, ckpt.model_file.c_str());
  ckpt.model_metadata = safetensors::read_header(join_path(folder, ckpt.model_file)).metadata;
  ckpt.state = load_tensors(folder, kStateFile);
  return ckpt;
}

nlohmann::json load_state_json(const std::string& folder) {
  TT_CHECK(is_dir(folder), ErrorCode::kCheckpoint, "checkpoint folder ", folder, " does not exist");
  return load_info(folder);
}

std::string damage_of(const std::string& folder) {
  const std::string path = join_path(folder, kInfoFile);
  if (!is_file(path)) return str_cat(kInfoFile, " is missing");
  std::optional<nlohmann::json> info = read_info(path);
  if (!info) return str_cat(kInfoFile, " is not a valid JSON object");
  auto complete = info->find("complete");
  if (complete == info->end() || *complete != true) return str_cat(kInfoFile, " lacks \"complete\": true");
  // Headers are cheap to check and catch files damaged after the fact (e.g. truncated by a copy).
  std::optional<std::string> model_file = model_file_of(*info);
  if (!model_file) return str_cat(kInfoFile, ": \"model_file\" is neither ", kModelWeightsFile, " nor ", kLoraWeightsFile);
  for (const std::string& file : {*model_file, std::string(kStateFile)}) {
    try {
      safetensors::read_header(join_path(folder, file));
    } catch (const Error& error) {
      return str_cat(file, " is unreadable (", error.what(), ")");
    }
  }
  return "";
}

bool is_complete(const std::string& folder) { return damage_of(folder).empty(); }

std::vector<std::pair<std::string, std::string>> list_damaged(const std::string& checkpoints_dir) {
  std::vector<std::pair<int64_t, std::pair<std::string, std::string>>> found;
  std::error_code error;
  for (fs::directory_iterator it(checkpoints_dir, error), end; !error && it != end; it.increment(error)) {
    std::optional<int64_t> step = parse_folder_step(it->path().filename().string());
    if (!step || !is_dir(it->path().string())) continue;
    std::string damage = damage_of(it->path().string());
    if (!damage.empty()) found.push_back({*step, {it->path().string(), std::move(damage)}});
  }
  std::sort(found.begin(), found.end());
  std::vector<std::pair<std::string, std::string>> folders;
  for (auto& entry : found) folders.push_back(std::move(entry.second));
  return folders;
}

std::vector<std::string> list_complete(const std::string& checkpoints_dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code error;
  for (fs::directory_iterator it(checkpoints_dir, error), end; !error && it != end; it.increment(error)) {
    std::optional<int64_t> step = parse_folder_step(it->path().filename().string());
    if (step && is_dir(it->path().string()) && is_complete(it->path().string()))
      found.emplace_back(*step, it->path().string());
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> folders;
  for (const auto& entry : found) folders.push_back(entry.second);
  return folders;
}

std::optional<std::string> find_latest(const std::string& checkpoints_dir) {
  std::vector<std::string> folders = list_complete(checkpoints_dir);
  if (folders.empty()) return std::nullopt;
  return folders.back();
}

void prune(const std::string& checkpoints_dir, int64_t keep) {
  std::error_code error;
  std::vector<std::string> stale;
  for (fs::directory_iterator it(checkpoints_dir, error), end; !error && it != end; it.increment(error)) {
    std::string name = it->path().filename().string();
    if (name.rfind(kTempPrefix, 0) == 0 && is_stale_temp(name)) stale.push_back(it->path().string());
  }
  for (const std::string& path : stale) remove_quietly(path);

  if (keep <= 0) return;
  std::vector<std::string> complete = list_complete(checkpoints_dir);
  for (size_t i = 0; i + static_cast<size_t>(keep) < complete.size(); ++i) {
    // Renamed first so that a kill during the recursive delete leaves a .tmp_ folder, not a
    // half-deleted step_ folder.
    std::string name = fs::path(complete[i]).filename().string();
    std::string doomed = join_path(checkpoints_dir, str_cat(kTempPrefix, "pruned_", name, "_", ::getpid()));
    std::error_code rename_error;
    fs::rename(complete[i], doomed, rename_error);
    remove_quietly(rename_error ? complete[i] : doomed);
  }
}

}  // namespace tt::checkpoint
