// Fuzz target: the raw-video manifest reader (pipeline/video_manifest.h). The input is the JSONL
// text. Reading never stops at a bad row (each row carries its error), so the only rejections are
// an empty manifest (kData); every row must be either usable or say why not.
#include <string>
#include <vector>

#include "pipeline/video_manifest.h"
#include "test/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tt::fuzz::quiet_logs();
  const std::string path = tt::fuzz::write_input(data, size, "manifest.jsonl");
  try {
    const std::vector<tt::VideoManifestRow> rows = tt::read_video_manifest(path);
    int64_t last_line = 0;
    for (const tt::VideoManifestRow& row : rows) {
      if (row.line <= last_line) tt::fuzz::property_failed("row lines not increasing");
      last_line = row.line;
      if (row.error.empty() == row.video.empty()) tt::fuzz::property_failed("a row has neither a video nor an error");
      if (!row.error.empty() && !row.text_embeddings.empty()) tt::fuzz::property_failed("a bad row names embeddings");
    }
  } catch (const tt::Error& error) {
    tt::fuzz::rejected(error);
  }
  return 0;
}
