// Fuzz target: the video reader's own code on container bytes (pipeline/video_reader.h): open and
// describe, the packet-only frame index, frame choice on its times, decode of the chosen frames
// and both RGB conversions (with display rotation), and scan(). FFmpeg does the parsing; our code
// must turn whatever it reports into tt::Error (kDecode / kData) and never crash.
// FFmpeg is a distro library built without sanitizers; what is found inside it is third-party
// (test/sanitizers/README.md says how such findings are told apart and why they are not ours).
// Resource bounds of the target, not of the reader: frames over 1024x1024 px are not decoded, and
// scan() only runs while frames x pixels stay below 2^24, so that each input takes milliseconds.
#include <torch/torch.h>

#include <algorithm>
#include <string>
#include <vector>

#include "pipeline/frame_sampler.h"
#include "pipeline/video_reader.h"
#include "test/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tt::fuzz::quiet_logs();
  // No extension: FFmpeg probes the container from its bytes alone.
  const std::string path = tt::fuzz::write_input(data, size, "input_video");
  try {
    tt::VideoReaderOptions options;
    options.thread_count = 1;
    options.quiet = true;
    tt::VideoReader reader(path, options);
    const tt::VideoInfo& info = reader.info();
    const tt::FrameIndex& index = reader.index();
    if (info.frame_count != index.size()) tt::fuzz::property_failed("frame_count differs from the index");
    if (index.keyframe.size() != index.pts.size()) tt::fuzz::property_failed("keyframe flags differ from the index");
    for (int64_t i = 1; i < index.size(); ++i)
      if (index.pts[i] < index.pts[i - 1]) tt::fuzz::property_failed("index pts not ascending");
    const int64_t pixels = int64_t{info.width} * info.height;
    if (index.size() == 0 || pixels > (1 << 20)) return 0;

    tt::FrameSamplerOptions sampler;
    sampler.samples = std::min<int64_t>(3, index.size());
    std::vector<int64_t> frames = tt::sample_frames(sampler, index.times(), 0, 0, 0);
    if (frames.back() != index.size() - 1) frames.push_back(index.size() - 1);
    tt::DecodedFrames planes = reader.decode(frames);
    if (planes.y.size(0) != static_cast<int64_t>(frames.size())) tt::fuzz::property_failed("decode lost frames");
    (void)tt::yuv420_to_rgb_swscale(planes);
    for (tt::RgbConverter converter : {tt::RgbConverter::kColourKernel, tt::RgbConverter::kSwscale}) {
      torch::Tensor rgb = reader.decode_rgb({frames.front()}, converter);
      if (rgb.size(1) != info.displayed_height() || rgb.size(2) != info.displayed_width())
        tt::fuzz::property_failed("decode_rgb size differs from the displayed size");
    }
    if (pixels * index.size() < (1 << 24)) (void)reader.scan();
  } catch (const tt::Error& error) {
    tt::fuzz::rejected(error);
  }
  return 0;
}
