// `teletron probe` (see probe.h): a VideoReader report plus an optional RGB dump.
#include "app/probe.h"

#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>

#include "core/device.h"
#include "core/errors.h"
#include "core/safetensors.h"
#include "pipeline/flow_picture.h"
#include "pipeline/motion.h"
#include "pipeline/optical_flow.h"
#include "pipeline/video_reader.h"

namespace tt {
namespace {

std::string seconds_text(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.3f", value);
  return buffer;
}

}  // namespace

namespace {

// --flow: TV-L1 between the two frames at the motion scores' working resolution, colour coded.
void write_flow_picture(VideoReader& reader, const ProbeOptions& options, std::ostream& out) {
  std::vector<int64_t> pair = options.frames.empty() ? std::vector<int64_t>{0, 1} : options.frames;
  TT_CHECK_HINT(pair.size() == 2 && pair[0] != pair[1], ErrorCode::kConfig, "e.g. --flow out.png --frames 10,11",
                "probe --flow: two different frames are needed, got --frames with ", pair.size(), " value(s)");
  // Decoded in frame order (as the reader prefers), then back in the asked order.
  const bool swapped = pair[0] > pair[1];
  torch::Tensor rgb = reader.decode_rgb({std::min(pair[0], pair[1]), std::max(pair[0], pair[1])});  // (2, H, W, 3)
  if (swapped) rgb = rgb.flip(0);
  const MotionOptions motion;
  FlowOptions flow_options;
  flow_options.algorithm = options.flow_algorithm;
  flow_options.fallback = "error";  // probe shows the algorithm asked for, or says why it cannot
  if (!options.flow_weights.empty()) flow_options.raft_weights = options.flow_weights;
  std::unique_ptr<FlowEstimator> made;
  try {
    made = std::make_unique<FlowEstimator>(flow_options, resolve_device(options.device, "--device"));
  } catch (const Error& error) {  // said in probe's own flags
    throw Error(error.code(), str_cat("probe --flow-algorithm ", options.flow_algorithm, ": ", first_line(error.what())),
                "use --flow-algorithm tvl1, or nvofa with --device cuda on a GPU with the optical flow engine, or "
                "raft with --flow-weights (a torchvision RAFT state dict saved as safetensors)");
  }
  FlowEstimator& estimator = *made;
  const torch::Tensor frames = motion_frames(rgb.permute({0, 3, 1, 2}), motion.short_side);
  const torch::Tensor flow = estimator.flow(frames[0], frames[1]).cpu();  // (2, h, w)
  const torch::Tensor length = torch::sqrt((flow * flow).sum(0));
  write_png(options.flow, flow_to_rgb(flow));
  out << "flow:        " << options.flow << " (frames " << pair[0] << " -> " << pair[1] << ", "
      << estimator.algorithm() << " at "
      << flow.size(2) << "x" << flow.size(1) << ": mean " << length.mean().item<double>() << " px, max "
      << length.max().item<double>() << " px; hue = direction, saturation = length up to the max)\n";
}

}  // namespace

void run_probe(const ProbeOptions& options) {
  VideoReaderOptions reader_options;
  reader_options.device = resolve_device(options.device, "--device");
  VideoReader reader(options.path, reader_options);
  const VideoInfo& info = reader.info();
  const FrameIndex& index = reader.index();
  std::ostream& out = std::cout;
  out << "file:        " << info.path << "\n";
  out << "container:   " << info.container << "\n";
  out << "streams:\n";
  for (const StreamSummary& stream : info.streams) {
    out << "  #" << stream.index << " " << stream.type << " " << stream.codec;
    if (stream.type == "video") out << " " << stream.width << "x" << stream.height;
    if (stream.index == info.stream_index) out << "  <- decoded (best video stream)";
    out << "\n";
  }
  out << "codec:       " << info.codec << (info.profile.empty() ? "" : " (" + info.profile + ")")
      << ", decoder " << info.decoder << "\n";
  out << "size:        " << info.width << "x" << info.height << " coded";
  if (info.displayed_width() != info.width)
    out << ", " << info.displayed_width() << "x" << info.displayed_height() << " displayed";
  out << "\n";
  out << "rotation:    " << info.rotation << " degrees clockwise (display matrix)\n";
  out << "pixel ratio: " << info.sar_num << ":" << info.sar_den << " (sample aspect)";
  if (info.sar_num != info.sar_den)
    out << " (anamorphic: shown as " << info.shown_width() << "x" << info.displayed_height() << ", resized as shown)";
  out << "\n";
  out << "pixels:      " << info.pixel_format << ", " << info.bit_depth << "-bit\n";
  out << "colour:      matrix " << video_matrix_name(info.matrix) << " (tag " << info.color_space_tag << "), range "
      << (info.full_range ? "full" : "limited") << " (tag " << info.color_range_tag << "), primaries "
      << info.color_primaries_tag << ", transfer " << info.color_transfer_tag << "\n";
  out << "frame rate:  " << info.frame_rate << " fps (average)\n";
  out << "duration:    " << seconds_text(info.duration_seconds) << " s\n";
  out << "frames:      " << info.frame_count << " (frame index)";
  if (info.header_frame_count > 0) out << ", header says " << info.header_frame_count;
  else out << ", none in the header";
  out << "\n";
  int64_t keyframes = 0;
  for (uint8_t key : index.keyframe) keyframes += key;
  out << "keyframes:   " << keyframes << "\n";
  out << "first/last:  t=" << seconds_text(index.seconds(0)) << " s / t=" << seconds_text(index.seconds(index.size() - 1))
      << " s\n";
  (void)reader.try_seeks();  // raw MJPEG, Ogg: only a seek shows whether seeks land where indexed
  out << "decode path: " << info.decode_path << " (" << info.decode_reason << ")\n";
  if (info.decodes_from_start.empty())
    out << "seeking:     to keyframes, frames found by timestamp\n";
  else
    out << "seeking:     none: frame i is the i-th frame decoded from the start (" << info.decodes_from_start
        << "); every read decodes from the start of the file, so " << kDecodesFromStartHint << "\n";

  if (!options.flow.empty()) {
    write_flow_picture(reader, options, out);
    if (options.dump.empty()) return;
  }
  if (options.dump.empty() && options.frames.empty()) return;
  std::vector<int64_t> wanted = options.frames;
  if (wanted.empty())
    for (int64_t i = 0; i < index.size(); ++i) wanted.push_back(i);
  std::vector<int64_t> unique = wanted;
  std::sort(unique.begin(), unique.end());
  unique.erase(std::unique(unique.begin(), unique.end()), unique.end());
  const RgbConverter converter = options.rgb == "swscale" ? RgbConverter::kSwscale : RgbConverter::kColourKernel;
  torch::Tensor rgb = reader.decode_rgb(unique, converter);  // (U, H', W', 3) uint8, rotated
  // Back to the order (and repeats) the user asked for.
  std::vector<int64_t> positions;
  for (int64_t frame : wanted)
    positions.push_back(std::lower_bound(unique.begin(), unique.end(), frame) - unique.begin());
  torch::Tensor frames =
      rgb.index_select(0, torch::tensor(positions, torch::kInt64).to(rgb.device())).contiguous().cpu();
  out << "decoded:     " << frames.size(0) << " frames -> " << frames.size(2) << "x" << frames.size(1)
      << " RGB after rotation (" << reader.last_seek_count() << " seeks, "
      << (converter == RgbConverter::kSwscale ? "libswscale"
          : rgb.is_cuda()                     ? "CUDA colour kernel"
                                              : "colour kernel reference")
      << ", decoded on the " << info.decode_path << " path)\n";
  if (!options.dump.empty()) {
    std::vector<double> seconds;
    for (int64_t frame : wanted) seconds.push_back(index.seconds(frame));
    safetensors::save(options.dump,
                      {{"frames", frames},
                       {"indices", torch::tensor(wanted, torch::kInt64)},
                       {"seconds", torch::tensor(seconds, torch::kFloat64)}},
                      {{"source", info.path}, {"rotation", std::to_string(info.rotation)}});
    out << "dumped:      " << options.dump << " (frames (T, H, W, 3) uint8, indices (T) int64, seconds (T) float64)\n";
  }
}

}  // namespace tt
