// Flow colour coding and PNG writing (see flow_picture.h).
#include "pipeline/flow_picture.h"

#include <torch/torch.h>

#include <cmath>
#include <cstring>
#include <memory>

#include "core/errors.h"
#include "core/file_io.h"

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavutil/frame.h>
#include <libavutil/imgutils.h>
}

namespace tt {

torch::Tensor flow_to_rgb(const torch::Tensor& flow, double max_magnitude) {
  TT_CHECK(flow.dim() == 3 && flow.size(0) == 2, ErrorCode::kData, "flow_to_rgb: flow (2, H, W) is needed, got ",
           flow.sizes());
  const torch::Tensor f = flow.to(torch::kFloat32).cpu();
  const torch::Tensor x = f[0], y = f[1];
  const torch::Tensor length = torch::sqrt(x * x + y * y);
  double scale = max_magnitude > 0 ? max_magnitude : length.max().item<double>();
  if (!(scale > 0)) scale = 1.0;
  // HSV with value 1: hue in [0, 6) sextants, saturation from the length.
  const torch::Tensor hue = (torch::atan2(y, x) / (2 * M_PI) + 1.0).remainder(1.0) * 6.0;
  const torch::Tensor saturation = (length / scale).clamp(0, 1);
  auto channel = [&](double offset) {
    // The standard HSV->RGB: value - value*saturation*clamp(min(k, 4 - k), 0, 1), k = (offset + hue) mod 6.
    const torch::Tensor k = (hue + offset).remainder(6.0);
    return 1.0 - saturation * torch::clamp(torch::minimum(k, 4.0 - k), 0.0, 1.0);
  };
  const torch::Tensor rgb = torch::stack({channel(5.0), channel(3.0), channel(1.0)}, -1);
  return (rgb * 255.0).round().clamp(0, 255).to(torch::kUInt8).contiguous();
}

void write_png(const std::string& path, const torch::Tensor& rgb) {
  TT_CHECK(rgb.dim() == 3 && rgb.size(2) == 3 && rgb.scalar_type() == torch::kUInt8, ErrorCode::kData,
           "write_png: (H, W, 3) uint8 is needed, got ", rgb.sizes(), " ", rgb.scalar_type());
  const torch::Tensor pixels = rgb.cpu().contiguous();
  const int height = static_cast<int>(pixels.size(0)), width = static_cast<int>(pixels.size(1));
  const AVCodec* codec = avcodec_find_encoder(AV_CODEC_ID_PNG);
  TT_CHECK_HINT(codec != nullptr, ErrorCode::kIo, "use an FFmpeg built with its png encoder", path,
                ": this FFmpeg has no png encoder");
  std::unique_ptr<AVCodecContext, void (*)(AVCodecContext*)> context(avcodec_alloc_context3(codec),
                                                                     [](AVCodecContext* c) { avcodec_free_context(&c); });
  std::unique_ptr<AVFrame, void (*)(AVFrame*)> frame(av_frame_alloc(), [](AVFrame* f) { av_frame_free(&f); });
  std::unique_ptr<AVPacket, void (*)(AVPacket*)> packet(av_packet_alloc(), [](AVPacket* p) { av_packet_free(&p); });
  TT_CHECK(context && frame && packet, ErrorCode::kIo, path, ": out of memory for the PNG encoder");
  context->width = width;
  context->height = height;
  context->pix_fmt = AV_PIX_FMT_RGB24;
  context->time_base = AVRational{1, 1};
  TT_CHECK(avcodec_open2(context.get(), codec, nullptr) >= 0, ErrorCode::kIo, path, ": the png encoder did not open");
  frame->format = AV_PIX_FMT_RGB24;
  frame->width = width;
  frame->height = height;
  TT_CHECK(av_frame_get_buffer(frame.get(), 0) >= 0, ErrorCode::kIo, path, ": no frame buffer for the PNG");
  const uint8_t* source = pixels.data_ptr<uint8_t>();
  for (int row = 0; row < height; ++row)
    std::memcpy(frame->data[0] + static_cast<ptrdiff_t>(row) * frame->linesize[0],
                source + static_cast<ptrdiff_t>(row) * width * 3, static_cast<size_t>(width) * 3);
  TT_CHECK(avcodec_send_frame(context.get(), frame.get()) >= 0 && avcodec_send_frame(context.get(), nullptr) >= 0 &&
               avcodec_receive_packet(context.get(), packet.get()) >= 0,
           ErrorCode::kIo, path, ": the png encoder failed");
  write_text_synced(path, std::string(reinterpret_cast<const char*>(packet->data), static_cast<size_t>(packet->size)));
}

}  // namespace tt
