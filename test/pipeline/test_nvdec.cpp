// The two decode paths against each other. [gpu] tests: NVDEC gives the CPU path's frames (luma
// bit-identical — H.264/HEVC/VP9 decoding is exact by specification — and RGB within the colour
// tolerance) and the same frame counts, on H.264 (yuv420p with B-frames, yuvj420p, 642x362), HEVC
// 8/10-bit and VP9; streams this GPU's NVDEC does not take (H.264 10-bit, HEVC below its minimum
// size) go to the CPU path up front, with the driver's reason, and lose no frame; NVDEC decoding
// under a side stream gives the same tensors, also while the caller's stream is held busy during
// the decode. CPU tests: skipping the non-reference frames no request needs changes no pixel and
// decodes fewer frames. Clips come from the ffmpeg CLI through the media cache (test_util.h), so
// the GPU machine, which has no CLI, replays recorded ones.
#include <catch2/catch_test_macros.hpp>

#include <torch/torch.h>

#ifdef TELETRON_WITH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include <string>
#include <vector>

#include "cuda/ops.h"
#include "pipeline/nvdec.h"
#include "pipeline/video_reader.h"
#include "test/test_util.h"

namespace {

using tt::test::media_command;
using tt::test::media_dir;

const std::string kSource = "-f lavfi -i testsrc2=size=320x240:rate=25 ";

// Makes {media}/<name> once (recorded), returns its path.
std::string clip(const std::string& name, const std::string& args) {
  const auto result = media_command("ffmpeg -v error -y " + args + " '{media}/" + name + "'");
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  return media_dir() + "/" + name;
}

std::string h264() {
  return clip("nv_h264.mp4", kSource + "-frames:v 30 -c:v libx264 -g 10 -bf 2 -pix_fmt yuv420p "
                             "-color_primaries bt709 -color_trc bt709 -colorspace bt709");
}
std::string h264_full() { return clip("nv_h264_full.mp4", kSource + "-frames:v 10 -c:v libx264 -pix_fmt yuvj420p"); }
std::string h264_odd() {
  return clip("nv_h264_odd.mp4", "-f lavfi -i testsrc2=size=642x362:rate=25 -frames:v 8 -c:v libx264 -pix_fmt yuv420p");
}
std::string hevc() {
  return clip("nv_hevc.mkv", kSource + "-frames:v 16 -c:v libx265 -x265-params log-level=none:keyint=8 -pix_fmt yuv420p");
}
std::string hevc10() {
  return clip("nv_hevc10.mkv", kSource + "-frames:v 12 -c:v libx265 -x265-params log-level=none:keyint=6 "
                                         "-pix_fmt yuv420p10le");
}
std::string vp9() {
  return clip("nv_vp9.webm", kSource + "-frames:v 12 -c:v libvpx-vp9 -deadline realtime -cpu-used 8 -g 6 -pix_fmt yuv420p");
}
std::string h264_10bit() {
  return clip("nv_h264_10bit.mp4", kSource + "-frames:v 8 -c:v libx264 -profile:v high10 -pix_fmt yuv420p10le");
}
std::string hevc_small() {
  return clip("nv_hevc_128.mkv", "-f lavfi -i testsrc2=size=128x128:rate=25 -frames:v 9 -c:v libx265 "
                                 "-x265-params log-level=none -pix_fmt yuv420p");
}

std::vector<int64_t> all_frames(const tt::VideoReader& reader) {
  std::vector<int64_t> frames;
  for (int64_t i = 0; i < reader.info().frame_count; ++i) frames.push_back(i);
  return frames;
}

tt::VideoReaderOptions on(torch::Device device) {
  tt::VideoReaderOptions options;
  options.device = device;
  return options;
}

}  // namespace

TEST_CASE("skipping unneeded non-reference frames changes no pixel and decodes less", "[video][skip]") {
  const std::string path = h264();  // B-frames: the non-reference ones can go
  tt::VideoReaderOptions keep;
  keep.skip_unneeded_frames = false;
  tt::VideoReader full(path, keep);
  tt::VideoReader skipping(path);
  const std::vector<int64_t> sparse = {1, 8, 13, 22, 29};
  const tt::DecodedFrames a = full.decode(sparse);
  const tt::DecodedFrames b = skipping.decode(sparse);
  CHECK(torch::equal(a.y, b.y));
  CHECK(torch::equal(a.uv, b.uv));
  INFO("decoded without skipping " << full.last_decoded_count() << ", with " << skipping.last_decoded_count());
  CHECK(skipping.last_decoded_count() < full.last_decoded_count());
  CHECK(skipping.last_decoded_count() >= static_cast<int64_t>(sparse.size()));
}

TEST_CASE("the NVDEC comparison clips decode on the CPU path as made", "[video]") {
  // Also records every clip of this file into the media cache on machines with the ffmpeg CLI.
  struct Expect {
    std::string path;
    std::string codec;
    int bit_depth;
    int64_t frames;
  };
  for (const Expect& e : {Expect{h264(), "h264", 8, 30}, Expect{h264_full(), "h264", 8, 10},
                          Expect{h264_odd(), "h264", 8, 8}, Expect{hevc(), "hevc", 8, 16},
                          Expect{hevc10(), "hevc", 10, 12}, Expect{vp9(), "vp9", 8, 12},
                          Expect{h264_10bit(), "h264", 10, 8}, Expect{hevc_small(), "hevc", 8, 9}}) {
    INFO(e.path);
    tt::VideoReader reader(e.path);
    CHECK(reader.info().codec == e.codec);
    CHECK(reader.info().bit_depth == e.bit_depth);
    CHECK(reader.info().frame_count == e.frames);
    CHECK(reader.scan().clean());
  }
}

TEST_CASE("a CUDA-device reader is refused cleanly without a GPU, and the CPU reader says why it decodes", "[video]") {
  const std::string path = h264();
  tt::VideoReader cpu(path);
  CHECK(cpu.info().decode_path == "cpu");
  CHECK(!cpu.info().decode_reason.empty());
  if (tt::test::has_cuda()) return;
  const tt::Error error = tt::test::expect_error([&] { tt::VideoReader gpu(path, on(torch::Device(torch::kCUDA, 0))); });
  CHECK(error.code() == tt::ErrorCode::kConfig);
}

TEST_CASE("NVDEC gives the CPU path's frames and frame counts", "[gpu][nvdec]") {
  TT_REQUIRE_GPU();
  REQUIRE(tt::nvdec::built());
  const torch::Device cuda(torch::kCUDA, 0);
  for (const std::string& path : {h264(), h264_full(), h264_odd(), hevc(), hevc10(), vp9()}) {
    INFO(path);
    tt::VideoReader cpu(path);
    tt::VideoReader gpu(path, on(cuda));
    INFO("path " << gpu.info().decode_path << ": " << gpu.info().decode_reason);
    REQUIRE(gpu.info().decode_path == "nvdec");
    REQUIRE(gpu.info().frame_count == cpu.info().frame_count);
    const std::vector<int64_t> frames = all_frames(cpu);
    const tt::DecodedFrames a = cpu.decode(frames);
    const tt::DecodedFrames b = gpu.decode(frames);
    CHECK(gpu.info().decode_path == "nvdec");  // no fallback happened
    REQUIRE(b.y.is_cuda());
    REQUIRE(b.y.sizes() == a.y.sizes());
    REQUIRE(b.uv.sizes() == a.uv.sizes());
    CHECK(b.bit_depth == a.bit_depth);
    const torch::Tensor y_gpu = b.y.cpu();
    INFO("luma max |diff| " << (y_gpu.to(torch::kInt32) - a.y.to(torch::kInt32)).abs().max().item<int>());
    CHECK(torch::equal(y_gpu, a.y));
    const torch::Tensor rgb_cpu = tt::yuv420_to_rgb(a.y, a.uv, tt::yuv_format(a));
    const torch::Tensor rgb_gpu = tt::yuv420_to_rgb(b.y, b.uv, tt::yuv_format(b)).cpu();  // the CUDA kernel
    tt::test::check_pixels_close(rgb_gpu, rgb_cpu);
    // A sparse request (seeks, skipped frames) gives the same frames as the full decode.
    const std::vector<int64_t> sparse = {1, static_cast<int64_t>(frames.size()) / 2,
                                         static_cast<int64_t>(frames.size()) - 1};
    const tt::DecodedFrames c = gpu.decode(sparse);
    CHECK(torch::equal(c.y.cpu(), y_gpu.index_select(0, torch::tensor(sparse))));
  }
}

TEST_CASE("streams NVDEC cannot take go to the CPU path up front and lose no frame", "[gpu][nvdec]") {
  TT_REQUIRE_GPU();
  const torch::Device cuda(torch::kCUDA, 0);
  for (const std::string& path : {h264_10bit(), hevc_small()}) {
    INFO(path);
    tt::VideoReader cpu(path);
    tt::VideoReader gpu(path, on(cuda));
    INFO("reason: " << gpu.info().decode_reason);
    CHECK(gpu.info().decode_path == "cpu");
    CHECK(gpu.info().decode_reason.find("cuvidGetDecoderCaps") != std::string::npos);
    const tt::DecodedFrames a = cpu.decode(all_frames(cpu));
    const tt::DecodedFrames b = gpu.decode(all_frames(gpu));
    REQUIRE(b.y.is_cuda());
    CHECK(b.y.size(0) == cpu.info().frame_count);
    CHECK(torch::equal(b.y.cpu(), a.y));
    CHECK(torch::equal(b.uv.cpu(), a.uv));
  }
}

TEST_CASE("NVDEC under a side stream gives the same tensors", "[gpu][nvdec]") {
  TT_REQUIRE_GPU();
#ifdef TELETRON_WITH_CUDA
  const torch::Device cuda(torch::kCUDA, 0);
  const std::string path = h264();
  tt::VideoReader reference(path, on(cuda));
  const tt::DecodedFrames expected = reference.decode(all_frames(reference));
  torch::Tensor y_side;
  torch::Tensor rgb_side;
  {
    c10::cuda::CUDAStreamGuard guard(c10::cuda::getStreamFromPool(false, 0));
    tt::VideoReader reader(path, on(cuda));
    for (int round = 0; round < 3; ++round) {  // reuse of allocator blocks between rounds
      const tt::DecodedFrames got = reader.decode(all_frames(reader));
      rgb_side = tt::yuv420_to_rgb(got.y, got.uv, tt::yuv_format(got));  // queued right behind the decode
      y_side = got.y.clone();
    }
    c10::cuda::getCurrentCUDAStream(0).synchronize();
  }
  CHECK(torch::equal(y_side.cpu(), expected.y.cpu()));
  CHECK(torch::equal(rgb_side.cpu(), tt::yuv420_to_rgb(expected.y, expected.uv, tt::yuv_format(expected)).cpu()));
#endif
}

// FFmpeg 5.1 hands out the mapped NVDEC surface itself and unmaps it when the frame is
// unreferenced, right after the reader queues its copy; the decoder may then map another picture
// there. Here the caller's stream is held for 0.3 s (a kernel that waits for nothing, so nothing can
// deadlock) while the whole clip decodes, as a producer's VAE encode holds it in training: the
// frames must still be the CPU path's.
TEST_CASE("NVDEC frames stay right while the caller's stream is busy during the decode", "[gpu][nvdec]") {
  TT_REQUIRE_GPU();
#ifdef TELETRON_WITH_CUDA
  const torch::Device cuda(torch::kCUDA, 0);
  const std::string path = h264();  // 30 frames with B-frames
  tt::VideoReader reference(path);  // CPU
  const tt::DecodedFrames expected = reference.decode(all_frames(reference));
  torch::Tensor y, uv;
  {
    c10::cuda::CUDAStreamGuard guard(c10::cuda::getStreamFromPool(false, 0));
    tt::VideoReader reader(path, on(cuda));
    (void)reader.decode({0});  // the decoder set up and its kernels loaded before the stream is held
    c10::cuda::getCurrentCUDAStream(0).synchronize();
    tt::busy_for(cuda, 0.3);
    const tt::DecodedFrames got = reader.decode(all_frames(reader));
    y = got.y.clone();  // queued behind the busy kernel, as the colour kernel would be
    uv = got.uv.clone();
    c10::cuda::getCurrentCUDAStream(0).synchronize();
  }
  CHECK(torch::equal(y.cpu(), expected.y));
  CHECK(torch::equal(uv.cpu(), expected.uv));
#endif
}

TEST_CASE("NVDEC sets its decoder up once per file: H.264 seeks without a flush", "[gpu][nvdec]") {
  TT_REQUIRE_GPU();
  const torch::Device cuda(torch::kCUDA, 0);
  const std::string path = h264();  // 30 frames, GOP 10
  const std::vector<int64_t> sparse = {1, 13, 22, 29};
  tt::VideoReader reference(path);  // CPU
  const tt::DecodedFrames expected = reference.decode(sparse);
  // Seeking into every GOP (gap 1): by default without a flush, so NVDEC is set up once.
  tt::VideoReaderOptions seeking = on(cuda);
  seeking.reseek_gap = 1;
  tt::VideoReader unflushed(path, seeking);
  const tt::DecodedFrames a = unflushed.decode(sparse);
  INFO("default: seeks " << unflushed.last_seek_count() << ", decoder inits " << unflushed.nvdec_decoder_inits());
  CHECK(unflushed.last_seek_count() >= 3);
  CHECK(unflushed.nvdec_decoder_inits() == 1);
  CHECK(torch::equal(a.y.cpu(), expected.y));
  CHECK(torch::equal(a.uv.cpu(), expected.uv));
  // With a flush at every seek FFmpeg's H.264 decoder resets, and NVDEC is set up again each time.
  seeking.flush_on_seek = 1;
  tt::VideoReader flushed(path, seeking);
  const tt::DecodedFrames b = flushed.decode(sparse);
  INFO("flushing: seeks " << flushed.last_seek_count() << ", decoder inits " << flushed.nvdec_decoder_inits());
  CHECK(flushed.nvdec_decoder_inits() == flushed.last_seek_count());
  CHECK(torch::equal(b.y.cpu(), expected.y));
  // The default gap on NVDEC decodes through this clip's short gaps: one seek.
  tt::VideoReader through(path, on(cuda));
  const tt::DecodedFrames c = through.decode(sparse);
  CHECK(through.last_seek_count() == 1);
  CHECK(torch::equal(c.y.cpu(), expected.y));
}
