// `teletron encode-text CONFIG`: the captions of the config's manifest (rows' "caption" keys and
// `<video stem>.txt` files) into text embeddings in data.text_cache, by scripts/encode_text.py,
// which loads the text encoders of a diffusers HunyuanVideo pipeline folder (text_encoder.pipeline
// or --pipeline) with transformers and reproduces HunyuanVideoPipeline.encode_prompt (see the
// script and pipeline/text_cache.h for the files). The empty caption is always encoded
// (data.caption_dropout); with data.source: latents it is the only one. Resumable: captions whose
// file exists are skipped. The script is found at TELETRON_ENCODE_TEXT_SCRIPT, else in the source
// tree the binary was built from; Python is --python, else TELETRON_PYTHON, else the Python the
// build was configured with, else python3.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tt {

struct EncodeTextOptions {
  std::string config;
  std::vector<std::string> sets;
  std::string pipeline;    // overrides text_encoder.pipeline when set
  std::string device;      // overrides train.device when set
  int64_t batch_size = 0;  // overrides text_encoder.batch_size when > 0
  std::string python;      // the interpreter; "" = TELETRON_PYTHON, the build's, python3
  std::vector<std::string> prompts;  // --prompt: more texts to encode (their files are printed)
};

int run_encode_text(const EncodeTextOptions& options);

/// The argument quoted for /bin/sh (single quotes; ' as '\'').
std::string shell_quote(const std::string& argument);

}  // namespace tt
