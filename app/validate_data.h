// `teletron validate-data CONFIG|MANIFEST`: checks every sample of a raw-video manifest before a
// run does — the file is there and readable, the container opens and has a video stream with a
// decoder, every frame decodes on the configured path (noting the files NVDEC does not take, which
// the CPU path decodes instead), the clip has the frames the sampler needs and a size that covers a
// bucket, and the named embeddings files have the right shapes. Prints progress and a table of
// problems by reason, optionally writes a JSON report, and fails (TT_ERR_DATA) when any sample has
// an error. Nothing in a file can crash it: each sample's failure is caught and reported. With
// --motion it also scores each good clip's motion (optical flow, pipeline/motion.h), lists the
// stillest and the most moving clips and the scores' spread, and writes the manifest's motion cache.
//
// Damage policy: a file whose decode shows damage (the decoder rejects packets, produces fewer
// frames than the container holds, flags frames as concealed, or the container is cut short) is an
// error here even though FFmpeg's concealment would let training read most frames: a training run
// would hit TT_ERR_DECODE on the frames that are gone (corrupted.mp4: 49 of 50 frames, frame 30
// missing), so such files should be re-encoded or dropped before the run.
// Files decoded on NVDEC are scanned a second time by the CPU decoder: NVDEC has no bitstream
// error detection (a byte-flipped H.264 file decoded "cleanly" there and with 35 concealed frames
// on the CPU). What no decoder can notice is not found either: a few flipped bytes in a small HEVC
// file (no checksums unless the encoder wrote picture hashes) decode to wrong pixels without any
// error, on the CPU as with the ffmpeg CLI.
#pragma once

#include <string>
#include <vector>

namespace tt {

struct ValidateDataOptions {
  /// A YAML config (.yaml / .yml: data.manifest, data.buckets, data_pipeline.*, train.device) or a
  /// manifest (anything else; the default config supplies buckets and sampler).
  std::string input;
  /// --set overrides of config keys (for a manifest they apply to the defaults).
  std::vector<std::string> sets;
  /// Samples checked at once; 0 = automatic.
  int jobs = 0;
  /// JSON report path ("" = none).
  std::string report;
  /// Overrides train.device ("" = the config's).
  std::string device;
  /// Also score each clip's motion (pipeline/motion.h) into the report, the table and the
  /// manifest's motion cache (<manifest>.motion.json), which data.min_motion / max_motion read.
  bool motion = false;
};

/// Returns 0 when every sample is fine (warnings allowed); throws kData after printing the summary
/// when some sample has an error.
int run_validate_data(const ValidateDataOptions& options);

}  // namespace tt
