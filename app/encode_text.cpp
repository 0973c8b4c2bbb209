// `teletron encode-text` (see encode_text.h): gathers the captions, checks the pieces the script
// needs (the pipeline folder, Python with torch + transformers + safetensors, the script), runs it
// and checks afterwards that every caption has its file.
#include "app/encode_text.h"

#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include <nlohmann/json.hpp>

#include "app/config.h"
#include "core/errors.h"
#include "core/file_io.h"
#include "pipeline/text_cache.h"
#include "pipeline/video_manifest.h"

#ifndef TELETRON_SOURCE_DIR
#define TELETRON_SOURCE_DIR ""
#endif
#ifndef TELETRON_PYTHON_DEFAULT
#define TELETRON_PYTHON_DEFAULT ""
#endif

namespace tt {
namespace fs = std::filesystem;
namespace {

// The exit status of `command` run by /bin/sh (-1 when it did not exit normally).
int run_shell(const std::string& command) {
  const int status = std::system(command.c_str());
  if (status == -1 || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

std::string find_python(const std::string& flag) {
  if (!flag.empty()) return flag;
  if (const char* env = std::getenv("TELETRON_PYTHON"); env && *env) return env;
  if (*TELETRON_PYTHON_DEFAULT && fs::exists(TELETRON_PYTHON_DEFAULT)) return TELETRON_PYTHON_DEFAULT;
  return "python3";
}

std::string find_script() {
  if (const char* env = std::getenv("TELETRON_ENCODE_TEXT_SCRIPT"); env && *env) {
    TT_CHECK_HINT(fs::is_regular_file(env), ErrorCode::kConfig, "point it at scripts/encode_text.py of teletron's sources",
                  "TELETRON_ENCODE_TEXT_SCRIPT=", env, ": no such file");
    return env;
  }
  const std::string script = std::string(TELETRON_SOURCE_DIR) + "/scripts/encode_text.py";
  TT_CHECK_HINT(fs::is_regular_file(script), ErrorCode::kConfig,
                "set TELETRON_ENCODE_TEXT_SCRIPT to scripts/encode_text.py of teletron's sources",
                "encode-text: the script is not where the build left it (", script, ")");
  return script;
}

// The pipeline folder with its four text components, or TT_ERR_CONFIG naming what is missing.
std::string check_pipeline(const EncodeTextOptions& options, const Config& config) {
  const std::string folder = !options.pipeline.empty() ? options.pipeline : config.text_encoder.pipeline.value_or("");
  TT_CHECK_HINT(!folder.empty(), ErrorCode::kConfig,
                "set tele_tron.text_encoder.pipeline (or pass --pipeline) to a diffusers HunyuanVideo pipeline folder, "
                "e.g. hunyuanvideo-community/HunyuanVideo downloaded with huggingface-cli",
                "encode-text needs the text encoders: text_encoder.pipeline is not set");
  for (const char* part : {"text_encoder", "tokenizer", "text_encoder_2", "tokenizer_2"}) {
    TT_CHECK_HINT(fs::is_directory(fs::path(folder) / part), ErrorCode::kConfig,
                  "a diffusers HunyuanVideo pipeline folder holds text_encoder/, tokenizer/, text_encoder_2/ and "
                  "tokenizer_2/ (with model_index.json)",
                  "text_encoder.pipeline: ", folder, " has no ", part, "/ folder");
  }
  return folder;
}

}  // namespace

std::string shell_quote(const std::string& argument) {
  std::string out = "'";
  for (char c : argument) {
    if (c == '\'')
      out += "'\\''";
    else
      out += c;
  }
  return out + "'";
}

int run_encode_text(const EncodeTextOptions& options) {
  std::vector<std::string> overrides = options.sets;
  if (!options.device.empty()) overrides.push_back("train.device=" + options.device);
  const Config config = load_config(options.config, overrides);
  warn_unused_keys(config, Command::kEncodeText);
  const std::string pipeline = check_pipeline(options, config);
  const std::string manifest = config.data.manifest;
  const std::string cache = text_cache_folder(config.data.text_cache.value_or(""), manifest);

  std::vector<VideoManifestRow> rows;
  std::vector<std::string> captions;
  if (config.data.source == "video") {
    rows = read_video_manifest(manifest);
    int64_t bad = 0, without = 0;
    for (const VideoManifestRow& row : rows) {
      if (!row.error.empty()) {
        if (bad++ < 3) spdlog::warn("encode-text: {}:{}: {} (row skipped)", manifest, row.line, row.error);
      } else if (!row.has_caption) {
        ++without;
      }
    }
    captions = manifest_captions(rows);
    std::cout << "encode-text: " << rows.size() << " rows in " << manifest << ", " << captions.size()
              << " distinct captions" << (without ? str_cat(", ", without, " rows with an embeddings file or no text")
                                                  : std::string())
              << (bad ? str_cat(", ", bad, " bad rows skipped (teletron validate-data lists them)") : std::string())
              << "\n";
  } else {
    std::cout << "encode-text: data.source is latents (the text is inside the latent files): only the empty "
                 "caption, for data.caption_dropout\n";
  }

  // Prompts besides the captions (validation.prompt, --prompt): encoded alike, their files printed.
  std::vector<std::string> prompts = options.prompts;
  if (config.validation.prompt && std::find(prompts.begin(), prompts.end(), *config.validation.prompt) == prompts.end())
    prompts.push_back(*config.validation.prompt);
  const size_t manifest_captions_count = captions.size();
  for (const std::string& prompt : prompts)
    if (std::find(captions.begin(), captions.end(), prompt) == captions.end()) captions.push_back(prompt);
  const std::string python = find_python(options.python);
  TT_CHECK_HINT(run_shell(shell_quote(python) + " -c 'import torch, transformers, safetensors' >/dev/null 2>&1") == 0,
                ErrorCode::kConfig,
                str_cat("install them (", python, " -m pip install torch transformers safetensors), or name another "
                        "interpreter with --python or TELETRON_PYTHON"),
                "encode-text: ", python, " cannot import torch, transformers and safetensors");
  const std::string script = find_script();

  std::error_code error;
  fs::create_directories(cache, error);
  TT_CHECK_HINT(!error, ErrorCode::kIo, "set data.text_cache to a writable folder", "cannot create the text cache ",
                cache, ": ", error.message());
  const std::string list = (fs::path(cache) / str_cat(".captions.", ::getpid(), ".json")).string();
  write_text_synced(list, nlohmann::json(captions).dump());
  const int64_t batch = options.batch_size > 0 ? options.batch_size : config.text_encoder.batch_size;
  const std::string device = config.train.device;  // auto | cpu | cuda: the script resolves auto the same way
  const std::string command = str_cat(shell_quote(python), " ", shell_quote(script), " --pipeline ",
                                      shell_quote(pipeline), " --out ", shell_quote(cache), " --captions ",
                                      shell_quote(list), " --device ", shell_quote(device), " --dtype ",
                                      shell_quote(config.text_encoder.dtype), " --batch-size ", batch);
  spdlog::info("encode-text: {}", command);
  std::cout << std::flush;
  const int status = run_shell(command);
  fs::remove(list, error);
  TT_CHECK_HINT(status == 0, ErrorCode::kData, "its message is above; the captions encoded so far are kept",
                "encode-text: scripts/encode_text.py failed (exit status ", status, ")");

  // Every caption must now resolve, as training will resolve it.
  const TextCache opened = open_text_cache(cache);
  TT_CHECK(!opened.identity.empty(), ErrorCode::kInternal, "encode-text: the script wrote no ", cache,
           "/encoder.json");
  resolve_captions(rows, opened);
  for (const VideoManifestRow& row : rows)
    TT_CHECK(row.text_error.empty(), ErrorCode::kInternal, manifest, ":", row.line, ": ", row.text_error);
  std::cout << "encode-text: " << manifest_captions_count << " captions"
            << (captions.size() > manifest_captions_count
                    ? str_cat(", ", captions.size() - manifest_captions_count, " prompt(s)")
                    : std::string())
            << " and the empty one in " << cache << " (encoder " << opened.identity << ")\n";
  for (const std::string& prompt : prompts) {
    const std::string file = opened.file_of(prompt);
    TT_CHECK(fs::is_regular_file(file), ErrorCode::kInternal, "encode-text: no file for the prompt \"", prompt, "\"");
    std::cout << "encode-text: prompt \"" << prompt << "\" -> " << file << "\n";
  }
  return 0;
}

}  // namespace tt
