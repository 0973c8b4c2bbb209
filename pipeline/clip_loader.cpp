// load_clip (see clip_loader.h).
#include "pipeline/clip_loader.h"

#include <torch/torch.h>

#include <algorithm>

#include "cuda/ops.h"

namespace tt {

LoadedClip load_clip(VideoReader& reader, const ClipRequest& request) {
  LoadedClip clip;
  clip.frames = sample_frames(request.sampler, reader.index().times(), request.seed, request.epoch,
                             request.sample_index, request.motion.get());
  std::vector<int64_t> distinct = clip.frames;  // sorted already; fps mode may repeat a frame
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  const DecodedFrames decoded = reader.decode(distinct);
  // Started after decode() ordered the current stream behind the frame copies: the interval holds
  // this function's kernels only.
  if (request.time_gpu_stages && decoded.y.is_cuda()) clip.gpu_stages = GpuInterval::start(decoded.y.device());
  torch::Tensor rgb = rotate_frames(yuv420_to_rgb(decoded.y, decoded.uv, yuv_format(decoded)),
                                    reader.info().rotation);  // (U, H', W', 3) uint8
  if (distinct.size() != clip.frames.size()) {
    std::vector<int64_t> positions;
    positions.reserve(clip.frames.size());
    for (int64_t frame : clip.frames)
      positions.push_back(std::lower_bound(distinct.begin(), distinct.end(), frame) - distinct.begin());
    rgb = rgb.index_select(0, torch::tensor(positions, torch::kInt64).to(rgb.device()));
  }
  clip.params = draw_augment_params(request.augment, request.seed, request.epoch, request.sample_index);
  clip.params.pixel_aspect = reader.info().pixel_aspect();  // anamorphic video resized as shown
  clip.pixels = augment_clip(rgb, clip.params, request.height, request.width, request.augment.dtype);
  if (clip.gpu_stages) clip.gpu_stages->stop();
  return clip;
}

}  // namespace tt
