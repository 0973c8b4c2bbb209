// Tests for pipeline/video_reader (the CPU decode path) on clips made with the ffmpeg CLI:
// H.264 / HEVC / VP9, yuv420p and yuvj420p, 10-bit, an odd size, a rotated file, variable frame
// rate, 4:4:4 (libswscale conversion). Frame counts against `ffprobe -count_frames`, RGB against the
// CLI's rgb24 output with matrix and range set explicitly, seeking against decoding from the
// start, VFR timestamps against ffprobe, and broken inputs (missing, folder, empty, text,
// truncated, byte-flipped) that must give tt::Error, never a crash. Every CLI call goes through
// tt::test::media_command, so the GPU machine (no ffmpeg CLI) replays the media recorded by
// scripts/make_test_media.sh; with neither the CLI nor a record the media tests SKIP, saying so.
#include "pipeline/video_reader.h"

#include <catch2/catch_test_macros.hpp>

#include <torch/torch.h>

#include <cmath>
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <random>
#include <sstream>
#include <set>
#include <string>
#include <vector>

#include "core/errors.h"
#include "cuda/ops.h"
#include "test/test_util.h"

extern "C" {
#include <libavformat/avformat.h>
}

namespace {

using tt::test::media_command;

// Every clip of the suite, in the media folder, made (or found recorded) once per test process.
struct Clips {
  std::string path(const std::string& name) const { return tt::test::media_dir() + "/" + name; }
};

const std::string kSource = "-f lavfi -i testsrc2=size=320x240:rate=25 ";
const std::string kTag709 = "-color_primaries bt709 -color_trc bt709 -colorspace bt709 ";

void make(const std::string& name, const std::string& args) {
  const std::string command = "ffmpeg -v error -y " + args + " '{media}/" + name + "'";
  const auto result = media_command(command);
  INFO(command << "\n" << result.output);
  REQUIRE(result.exit_code == 0);
}

const Clips& clips() {
  static const Clips made = [] {
    make("h264.mp4", kSource + "-frames:v 40 -c:v libx264 -g 12 -bf 2 -pix_fmt yuv420p " + kTag709);
    make("h264_full.mp4", kSource + "-frames:v 12 -c:v libx264 -pix_fmt yuvj420p");
    make("hevc.mkv", kSource + "-frames:v 20 -c:v libx265 -x265-params log-level=none:keyint=8 -pix_fmt yuv420p");
    make("vp9.webm", kSource + "-frames:v 16 -c:v libvpx-vp9 -deadline realtime -cpu-used 8 -g 8 -pix_fmt yuv420p");
    make("h264_10bit.mp4", kSource + "-frames:v 12 -c:v libx264 -profile:v high10 -pix_fmt yuv420p10le " + kTag709);
    make("odd.mp4", "-f lavfi -i testsrc2=size=642x362:rate=25 -frames:v 8 -c:v libx264 -pix_fmt yuv420p");
    make("yuv444.mp4", kSource + "-frames:v 6 -c:v libx264 -pix_fmt yuv444p");
    // 5.1's encoder drops `rotate` metadata; remuxing keeps it (newer ffmpeg: -display_rotation).
    make("plain.mp4", kSource + "-frames:v 6 -c:v libx264 -pix_fmt yuv420p");
    make("rotated.mp4", "-i '{media}/plain.mp4' -c copy -metadata:s:v:0 rotate=90");
    // 12 frames at 25 fps, then 12 at 12.5 fps.
    make("vfr.mkv", kSource + "-frames:v 24 -vf \"setpts='(N+if(gte(N,12),N-12,0))/(25*TB)'\" -fps_mode vfr "
                    "-c:v libx264 -pix_fmt yuv420p");
    // B-frames where timestamps are awkward: MPEG-TS seeks by dts (which lies before a keyframe's
    // pts), an MPEG program stream stamps only some pictures, AVI stores no presentation times;
    // MPEG-2 and MPEG-4 part 2 GOPs are open (their first B-frames show before the keyframe).
    make("h264_b.ts", kSource + "-frames:v 40 -c:v libx264 -g 12 -bf 3 -pix_fmt yuv420p");
    make("mpeg2_b.mpg", kSource + "-frames:v 30 -c:v mpeg2video -g 12 -bf 2 -q:v 3 -pix_fmt yuv420p");
    make("mpeg4_b.avi", kSource + "-frames:v 30 -c:v mpeg4 -g 12 -bf 2 -q:v 3 -pix_fmt yuv420p");
    make("h264_b.avi", kSource + "-frames:v 30 -c:v libx264 -g 12 -bf 3 -pix_fmt yuv420p");
    // Elementary streams without a container: no timestamps at all, and B-frames.
    make("h264_b.h264", kSource + "-frames:v 30 -c:v libx264 -g 12 -bf 3 -pix_fmt yuv420p");
    make("hevc_b.hevc", kSource + "-frames:v 24 -c:v libx265 -x265-params log-level=none:keyint=8:bframes=3 "
                                  "-pix_fmt yuv420p");
    // Seek-hostile: FFmpeg's generic index puts a raw MJPEG stream's frames at the positions of the
    // chunks they were read in; Theora at a variable rate is stamped otherwise after a seek than
    // when read from the start, and (here at 29.97 fps) gives some frames the time of the one before.
    // Small frames (~2-4 KB): a seek lands in the 4-KB read chunk where the frame began, here on a
    // truncated earlier frame for frame 7, which decodes to garbage without an error.
    make("mjpeg_raw.mjpeg", "-f lavfi -i testsrc2=size=128x64:rate=25 -frames:v 16 -c:v mjpeg -q:v 3 -pix_fmt yuvj420p");
    make("theora_vfr.ogv", kSource + "-frames:v 24 -vf \"setpts='(N+floor(N/3))/(25*TB)'\" -fps_mode passthrough "
                                     "-c:v libtheora -q:v 6 -pix_fmt yuv420p");
    make("theora_shared.ogv", "-f lavfi -i testsrc2=size=320x240:rate=30000/1001 -frames:v 28 "
                              "-vf \"setpts=(N+floor(N/3))/(30000/1001)/TB\" -fps_mode passthrough "
                              "-c:v libtheora -q:v 6 -pix_fmt yuv420p");
    // Anamorphic: 2:1 pixels, shown 640x240.
    make("anamorphic.mkv", kSource + "-frames:v 4 -vf setsar=2/1 -c:v libx264 -pix_fmt yuv420p");
    return Clips();
  }();
  return made;
}

// The clips of `names` that this FFmpeg build can demux and decode. The GPU machine's FFmpeg has a
// few demuxers and decoders only (no MPEG-PS, Ogg, MJPEG, MPEG-2: ../shared/device/bootstrap.sh) and
// replays the media recorded here; wherever the ffmpeg CLI made the clips, every one must be readable.
bool ffmpeg_reads(const std::string& path) {
  AVFormatContext* format = nullptr;
  bool ok = avformat_open_input(&format, path.c_str(), nullptr, nullptr) >= 0;
  const AVCodec* codec = nullptr;
  ok = ok && avformat_find_stream_info(format, nullptr) >= 0 &&
       av_find_best_stream(format, AVMEDIA_TYPE_VIDEO, -1, -1, &codec, 0) >= 0 && codec != nullptr;
  avformat_close_input(&format);
  if (!ok) {
    INFO(path << ": this FFmpeg build cannot demux or decode it, and the ffmpeg CLI is here");
    REQUIRE_FALSE(tt::test::has_ffmpeg_cli());
    WARN(path << ": left out, this FFmpeg build (no ffmpeg CLI: replayed media) cannot demux or decode it");
  }
  return ok;
}

std::vector<std::string> readable_clips(const std::vector<std::string>& names) {
  std::vector<std::string> readable;
  for (const std::string& name : names)
    if (ffmpeg_reads(clips().path(name))) readable.push_back(name);
  return readable;
}

std::vector<int64_t> all_frames(const tt::VideoReader& reader) {
  std::vector<int64_t> frames;
  for (int64_t i = 0; i < reader.info().frame_count; ++i) frames.push_back(i);
  return frames;
}

int64_t ffprobe_frame_count(const std::string& name) {
  const auto result = media_command("ffprobe -v error -count_frames -select_streams v:0 -show_entries "
                                    "stream=nb_read_frames -of csv=p=0 '{media}/" + name + "'");
  REQUIRE(result.exit_code == 0);
  return std::stoll(result.output);
}

// RGB is compared with the CLI on frames 0, 4, 8, ... of each clip (all of them are decoded): that still
// spans every GOP and I, P and B frames, and keeps the carried rgb24 files (make_test_media.sh) a quarter
// of the size.
constexpr int64_t kRgbStride = 4;

// Frames 0, kRgbStride, 2 * kRgbStride, ... of `frames` (T, H, W, 3): the ones ffmpeg_rgb gives.
torch::Tensor compared_frames(const torch::Tensor& frames) {
  return frames.slice(0, 0, frames.size(0), kRgbStride);
}

// The CLI's rgb24 frames 0, kRgbStride, 2 * kRgbStride, ... of clip `name` (after its autorotate), with
// matrix and range given explicitly: (count, height, width, 3) uint8.
torch::Tensor ffmpeg_rgb(const std::string& name, const std::string& matrix, const std::string& range,
                         int64_t height, int64_t width) {
  const std::string raw = name + "." + matrix + "_" + range + ".rgb";
  const std::string filters = "select='not(mod(n," + std::to_string(kRgbStride) +
                              "))',scale=in_color_matrix=" + matrix + ":in_range=" + range;
  const std::string command = "ffmpeg -v error -y -i '{media}/" + name + "' -map 0:v:0 -vf \"" + filters +
                              "\" -pix_fmt rgb24 -fps_mode passthrough -f rawvideo '{media}/" + raw + "'";
  const auto result = media_command(command);
  INFO(command << "\n" << result.output);
  REQUIRE(result.exit_code == 0);
  const std::string bytes = tt::test::read_file(tt::test::media_dir() + "/" + raw);
  const int64_t frame_bytes = height * width * 3;
  REQUIRE(static_cast<int64_t>(bytes.size()) % frame_bytes == 0);
  const int64_t count = static_cast<int64_t>(bytes.size()) / frame_bytes;
  return torch::from_blob(const_cast<char*>(bytes.data()), {count, height, width, 3}, torch::kUInt8).clone();
}

// A reader of clip `name` that seeks at every gap between wanted frames, after checking its frame count
// against ffprobe's and its RGB (through libswscale, as the CLI converts) bit-exact against the CLI's
// on frames 0, kRgbStride, ...: the CLI's frame n is the n-th frame out of its decoder.
std::unique_ptr<tt::VideoReader> reader_like_cli(const std::string& name, const std::string& range, int64_t height,
                                                 int64_t width) {
  tt::VideoReaderOptions always_seek;
  always_seek.reseek_gap = 1;
  auto reader = std::make_unique<tt::VideoReader>(clips().path(name), always_seek);
  CHECK(reader->info().frame_count == ffprobe_frame_count(name));
  const torch::Tensor rgb = compared_frames(reader->decode_rgb(all_frames(*reader), tt::RgbConverter::kSwscale));
  const torch::Tensor reference = ffmpeg_rgb(name, "bt601", range, height, width);
  REQUIRE(rgb.sizes() == reference.sizes());
  CHECK(torch::equal(rgb, reference));
  return reader;
}

struct RgbCase {
  std::string name;
  std::string matrix;  // the scale filter's name
  std::string range;   // tv / pc
};

}  // namespace

TEST_CASE("video reader: info, frame counts and RGB match the ffmpeg CLI", "[video]") {
  const std::vector<RgbCase> cases = {
      {"h264.mp4", "bt709", "tv"},     {"h264_full.mp4", "bt601", "pc"}, {"hevc.mkv", "bt601", "tv"},
      {"vp9.webm", "bt601", "tv"},     {"h264_10bit.mp4", "bt709", "tv"}, {"odd.mp4", "bt601", "tv"},
      {"vfr.mkv", "bt601", "tv"},
  };
  for (const RgbCase& c : cases) {
    SECTION(c.name) {
      const std::string path = clips().path(c.name);
      tt::VideoReader reader(path);
      const tt::VideoInfo& info = reader.info();
      CHECK(info.frame_count == ffprobe_frame_count(c.name));
      CHECK(info.rotation == 0);
      const torch::Tensor reference = ffmpeg_rgb(c.name, c.matrix, c.range, info.height, info.width);
      const torch::Tensor rgb =
          compared_frames(reader.decode_rgb(all_frames(reader), tt::RgbConverter::kSwscale));
      CHECK(torch::equal(rgb, reference));  // same libswscale path as the CLI: bit-exact
      // The colour kernel's reference upsamples chroma as the CLI does for each bit depth (cuda/colour.h).
      tt::test::check_pixels_close(compared_frames(reader.decode_rgb(all_frames(reader), tt::RgbConverter::kColourKernel)),
                  reference);
    }
  }
}

TEST_CASE("video reader: colour metadata, bit depth, layout", "[video]") {
  {
    tt::VideoReader reader(clips().path("h264.mp4"));
    CHECK(reader.info().codec == "h264");
    CHECK(reader.info().matrix == tt::VideoMatrix::kBt709);
    CHECK_FALSE(reader.info().full_range);
    CHECK(reader.info().container.find("mp4") != std::string::npos);
    const tt::DecodedFrames frames = reader.decode({0, 1});
    CHECK(frames.y.sizes() == torch::IntArrayRef({2, 240, 320}));
    CHECK(frames.uv.sizes() == torch::IntArrayRef({2, 120, 160, 2}));
    CHECK(frames.y.dtype() == torch::kUInt8);
  }
  {
    tt::VideoReader reader(clips().path("h264_full.mp4"));
    CHECK(reader.info().full_range);
    CHECK(reader.info().matrix == tt::VideoMatrix::kBt601);
  }
  {
    tt::VideoReader reader(clips().path("hevc.mkv"));
    CHECK(reader.info().codec == "hevc");
    CHECK(reader.info().header_frame_count == 0);  // Matroska stores none: the index counts
    CHECK(reader.info().frame_count == 20);
    CHECK(reader.info().matrix == tt::VideoMatrix::kBt601);  // untagged
    CHECK_FALSE(reader.info().full_range);
  }
  {
    tt::VideoReader reader(clips().path("h264_10bit.mp4"));
    CHECK(reader.info().bit_depth == 10);
    const tt::DecodedFrames frames = reader.decode({3});
    CHECK(frames.bit_depth == 10);
    CHECK(frames.y.dtype() == torch::kUInt16);
    // P010: the 10-bit value sits in the high bits, the low 6 bits are zero.
    const torch::Tensor low = frames.y.to(torch::kInt32).remainder(64);
    CHECK(low.max().item<int>() == 0);
    CHECK(frames.y.to(torch::kInt32).max().item<int>() > 255 * 64);
  }
  {
    tt::VideoReader reader(clips().path("odd.mp4"));
    CHECK(reader.info().width == 642);
    CHECK(reader.info().height == 362);
    const tt::DecodedFrames frames = reader.decode({0});
    CHECK(frames.uv.sizes() == torch::IntArrayRef({1, 181, 321, 2}));
  }
  {
    // 4:4:4 goes through libswscale to 4:2:0 first; the result is still close to the CLI's RGB.
    tt::VideoReader reader(clips().path("yuv444.mp4"));
    CHECK(reader.info().pixel_format == "yuv444p");
    const torch::Tensor rgb =
        compared_frames(reader.decode_rgb(all_frames(reader), tt::RgbConverter::kSwscale));
    const torch::Tensor reference = ffmpeg_rgb("yuv444.mp4", "bt601", "tv", 240, 320);
    REQUIRE(rgb.sizes() == reference.sizes());
    const double mean = (rgb.to(torch::kFloat32) - reference.to(torch::kFloat32)).abs().mean().item<double>();
    CHECK(mean < 3.0);  // chroma subsampling loses detail on the sharp test pattern
  }
}

TEST_CASE("video reader: B-frames in MPEG-TS, MPEG-PS, AVI and raw streams give every frame the CLI gives",
          "[video]") {
  // Before: a TS seek by pts landed past its keyframe (frames of the first GOP and the last ones
  // were TT_ERR_DECODE), program streams and AVI numbered frames by misplaced or trailing stamps,
  // and raw .h264 / .hevc streams (no timestamps) never found frame 0 (TT_ERR_DECODE).
  const std::vector<std::string> names =
      readable_clips({"h264_b.ts", "mpeg2_b.mpg", "mpeg4_b.avi", "h264_b.avi", "h264_b.h264", "hevc_b.hevc"});
  REQUIRE_FALSE(names.empty());
  for (const std::string& name : names) {
    SECTION(name) {
      const std::unique_ptr<tt::VideoReader> opened = reader_like_cli(name, "tv", 240, 320);
      tt::VideoReader& reader = *opened;
      const int64_t count = reader.info().frame_count;
      // Any frame alone, and sparse requests across GOPs, give the pixels of decoding from the start.
      const tt::DecodedFrames all = reader.decode(all_frames(reader));
      const int64_t middle = count / 2 + 1;
      const std::vector<std::vector<int64_t>> requests = {{0}, {count - 1}, {middle}, {1, middle, count - 1}, {2, 3}};
      for (const auto& request : requests) {
        const tt::DecodedFrames got = reader.decode(request);
        for (size_t i = 0; i < request.size(); ++i) {
          INFO("frame " << request[i]);
          CHECK(torch::equal(got.y[i], all.y[request[i]]));
          CHECK(torch::equal(got.uv[i], all.uv[request[i]]));
        }
      }
      // Frame times ascend, and validate-data's scan sees every frame.
      const std::vector<double> times = reader.index().times();
      CHECK(std::is_sorted(times.begin(), times.end()));
      CHECK(std::adjacent_find(times.begin(), times.end()) == times.end());
      CHECK(reader.scan().frames_decoded == count);
      // A duration also where the file states none (raw streams): the frames at 25 fps.
      CHECK(std::abs(reader.info().duration_seconds - static_cast<double>(count) / 25.0) < 0.05);
      // Only MPEG-TS seeks here; the others say why each read decodes from the start.
      const std::string& why = reader.info().decodes_from_start;
      const std::string extension = name.substr(name.rfind('.'));
      const std::string expected = extension == ".ts"    ? ""
                                   : extension == ".avi" ? "AVI with reordered frames"
                                   : extension == ".mpg" ? "an MPEG program stream with reordered frames"
                                                         : "a raw elementary stream without timestamps";
      CHECK(why.substr(0, expected.size()) == expected);
      CHECK(why.empty() == expected.empty());
    }
  }
}

TEST_CASE("video reader: a raw MJPEG stream (seeks land inside frames) and Theora at a variable rate (stamps "
          "move after a seek; frames share a time) give every frame the CLI gives", "[video]") {
  // Before: frame 7 of the MJPEG stream alone decoded to a mix of two frames (no error); Theora's
  // seeks did not converge (TT_ERR_DECODE), and the second frame of a shared time never came.
  struct File {
    std::string name, range;
    int64_t height, width;
  };
  std::vector<File> files;
  const std::vector<File> candidates = {
      {"mjpeg_raw.mjpeg", "pc", 64, 128}, {"theora_vfr.ogv", "tv", 240, 320}, {"theora_shared.ogv", "tv", 240, 320}};
  const std::vector<std::string> readable =
      readable_clips({candidates[0].name, candidates[1].name, candidates[2].name});
  for (const File& file : candidates)
    if (std::find(readable.begin(), readable.end(), file.name) != readable.end()) files.push_back(file);
  if (files.empty()) SKIP("this FFmpeg build reads none of these formats (replayed media)");
  for (const auto& [name, range, height, width] : files) {
    SECTION(name) {
      const std::unique_ptr<tt::VideoReader> opened = reader_like_cli(name, range, height, width);
      tt::VideoReader& reader = *opened;
      const int64_t count = reader.info().frame_count;
      const tt::DecodedFrames all = reader.decode(all_frames(reader));
      const std::vector<std::vector<int64_t>> requests = {{7}, {count - 1}, {1, count / 2, count - 2}, {3, 4}};
      tt::VideoReaderOptions always_seek;
      always_seek.reseek_gap = 1;
      std::set<std::string> reasons;  // why readers decoded from the start
      for (const auto& request : requests) {
        // A fresh reader each time: the first seek that lands wrong switches a reader to counting.
        tt::VideoReader fresh(clips().path(name), always_seek);
        const tt::DecodedFrames got = fresh.decode(request);
        for (size_t i = 0; i < request.size(); ++i) {
          INFO("frame " << request[i]);
          CHECK(torch::equal(got.y[i], all.y[request[i]]));
          CHECK(torch::equal(got.uv[i], all.uv[request[i]]));
        }
        reasons.insert(fresh.info().decodes_from_start);
      }
      // Which one says so: two frames of one time are known from the index, a seek landing on
      // other bytes from the first seek.
      const std::string expected = name == "theora_shared.ogv" ? "two frames share one timestamp"
                                                               : "seeks land on other packets than the index names";
      CHECK(reasons.count(expected) == 1);
      // try_seeks finds it out before any read (validate-data), and leaves a seeking file alone.
      tt::VideoReader probed(clips().path(name));
      CHECK(probed.try_seeks() == expected);
      tt::VideoReader mp4(clips().path("h264.mp4"));
      CHECK(mp4.try_seeks().empty());
      CHECK(mp4.last_seek_count() == 0);
    }
  }
}

TEST_CASE("video readers sharing VideoFileNotes: a file's warning once, and a file that cannot seek counted from "
          "its next open", "[video]") {
  // Training opens a reader per sample: before, every sample of a raw MJPEG stream logged the same
  // warning and paid for a seek that lands wrong before decoding from the start.
  const std::vector<std::string> readable = readable_clips({"mjpeg_raw.mjpeg"});
  if (readable.empty()) SKIP("this FFmpeg build reads no MJPEG (replayed media)");
  const std::string path = clips().path("mjpeg_raw.mjpeg");
  tt::VideoReader reference(path);
  const tt::DecodedFrames all = reference.decode(all_frames(reference));
  const auto warnings_in = [](const std::string& text) {
    int64_t count = 0;
    for (size_t at = text.find("seeks land on other packets"); at != std::string::npos;
         at = text.find("seeks land on other packets", at + 1))
      ++count;
    return count;
  };
  for (const bool shared : {false, true}) {
    INFO("notes shared: " << shared);
    tt::VideoReaderOptions options;
    if (shared) options.notes = std::make_shared<tt::VideoFileNotes>();
    const tt::test::CapturedLog log;
    std::vector<std::string> reasons_at_open;
    for (int sample = 0; sample < 3; ++sample) {
      tt::VideoReader reader(path, options);
      reasons_at_open.push_back(reader.info().decodes_from_start);
      const tt::DecodedFrames got = reader.decode({7 + sample});
      CHECK(torch::equal(got.y[0], all.y[7 + sample]));
      CHECK(reader.info().decodes_from_start == "seeks land on other packets than the index names");
    }
    CHECK(reasons_at_open[0].empty());
    CHECK(reasons_at_open[1].empty() == !shared);
    CHECK(reasons_at_open[2].empty() == !shared);
    CHECK(warnings_in(log.text()) == (shared ? 1 : 3));
  }
  // Damage every reader of a file meets (bytes flipped in the second half: a rejected packet, a
  // concealed frame): each message once per file among readers sharing notes.
  const tt::test::TempDir dir("tt_notes");
  std::string bytes = tt::test::read_file(clips().path("vfr.mkv"));
  for (size_t i = bytes.size() / 2; i < bytes.size(); i += 97) bytes[i] = static_cast<char>(bytes[i] ^ 0x5A);
  const std::string damaged = dir / "damaged.mkv";
  tt::test::write_file(damaged, bytes);
  int64_t lines[2] = {0, 0};  // warnings logged: readers on their own, readers sharing notes
  for (const bool shared : {false, true}) {
    tt::VideoReaderOptions options;
    if (shared) options.notes = std::make_shared<tt::VideoFileNotes>();
    const tt::test::CapturedLog log;
    for (int sample = 0; sample < 3; ++sample) {
      tt::VideoReader reader(damaged, options);
      try {
        (void)reader.decode(all_frames(reader));
      } catch (const tt::Error&) {  // a frame lost to the damage: the warnings before it count
      }
    }
    const std::string text = log.text();
    for (size_t at = text.find("(reported once per file)"); at != std::string::npos;
         at = text.find("(reported once per file)", at + 1))
      ++lines[shared];
  }
  CHECK(lines[1] >= 1);
  CHECK(lines[0] == 3 * lines[1]);
}

TEST_CASE("video readers sharing VideoFileNotes build a file's frame index once, and again when the file changes",
          "[video]") {
  const tt::test::TempDir dir("tt_notes_index");
  const std::string path = dir / "clip.mkv";
  tt::test::write_file(path, tt::test::read_file(clips().path("vfr.mkv")));
  tt::VideoReaderOptions options;
  options.notes = std::make_shared<tt::VideoFileNotes>();
  tt::VideoReader first(path, options);
  CHECK_FALSE(first.index_reused());
  const tt::DecodedFrames expected = first.decode({3, first.info().frame_count - 1});
  tt::VideoReader second(path, options);
  CHECK(second.index_reused());
  CHECK(second.index().pts == first.index().pts);
  CHECK(second.index().keyframe == first.index().keyframe);
  CHECK(second.info().frame_count == first.info().frame_count);
  CHECK(second.info().duration_seconds == first.info().duration_seconds);
  const tt::DecodedFrames again = second.decode({3, second.info().frame_count - 1});
  CHECK(torch::equal(again.y, expected.y));
  CHECK(torch::equal(again.uv, expected.uv));
  // Another file in its place (another size): indexed anew, its own frame count.
  tt::test::write_file(path, tt::test::read_file(clips().path("h264.mp4")));
  tt::VideoReader changed(path, options);
  CHECK_FALSE(changed.index_reused());
  CHECK(changed.info().frame_count == tt::VideoReader(clips().path("h264.mp4")).info().frame_count);
  CHECK(tt::VideoReader(path, options).index_reused());
  // Readers without notes build their own.
  CHECK_FALSE(tt::VideoReader(path).index_reused());
}

TEST_CASE("video reader: the sample aspect of anamorphic video, and of square-pixel video", "[video]") {
  tt::VideoReader anamorphic(clips().path("anamorphic.mkv"));
  CHECK(anamorphic.info().sar_num == 2);
  CHECK(anamorphic.info().sar_den == 1);
  CHECK(anamorphic.info().pixel_aspect() == 2.0);
  CHECK(anamorphic.info().shown_width() == 640);
  CHECK(anamorphic.info().displayed_height() == 240);
  tt::VideoReader square(clips().path("h264.mp4"));
  CHECK(square.info().pixel_aspect() == 1.0);
  CHECK(square.info().shown_width() == 320);
  // A 90-degree turn makes the pixels' width their height.
  tt::VideoInfo turned = anamorphic.info();
  turned.rotation = 90;
  CHECK(turned.pixel_aspect() == 0.5);
  CHECK(turned.shown_width() == 120);
  // An AVI whose video properties header gives a ratio of terms near INT_MAX (2139225729:857761409,
  // a fuzzer's find: the plausibility bound once multiplied them by 16 in int) keeps that ratio.
  const std::string crafted_path =
      std::string(TELETRON_SOURCE_DIR) + "/test/fuzz/regressions/video_reader/sar_near_int_max.avi";
  if (ffmpeg_reads(crafted_path)) {  // MJPEG: not in the GPU machine's FFmpeg
    tt::VideoReader crafted(crafted_path);
    CHECK(crafted.info().sar_num == 2139225729);
    CHECK(crafted.info().sar_den == 857761409);
    CHECK(std::abs(crafted.info().pixel_aspect() - 2139225729.0 / 857761409.0) < 1e-12);
  }
}

TEST_CASE("libswscale's RGB of 4:2:0 planes at awkward sizes stays inside its buffers", "[video]") {
  // libswscale's SIMD code reads and writes past the last row of a plane: on tightly packed planes
  // it overran the heap ("free(): invalid next size") and read garbage at sizes such as 170x136 and
  // 18x118 (found by scripts/video_sweep.py; ASan reports the overrun). Smooth random planes, so
  // that the pipeline's colour reference, which models libswscale's chroma, agrees but for the
  // fixed-point bias.
  torch::manual_seed(5);
  // Even heights: at an odd one libswscale's chroma ratio is not 2 and neither converter follows
  // the other (cuda/colour.cu).
  const std::vector<std::pair<int64_t, int64_t>> sizes = {{136, 170}, {118, 18}, {146, 82}, {114, 148},
                                                          {196, 98}, {16, 34}, {62, 257}};
  for (const int bits : {8, 10}) {
    for (const auto& [height, width] : sizes) {
      INFO(bits << "-bit " << width << "x" << height);
      const auto smooth = [](int64_t h, int64_t w, int64_t channels) {
        const torch::Tensor coarse = torch::rand({1, channels, 4, 4});
        return torch::nn::functional::interpolate(
                   coarse, torch::nn::functional::InterpolateFuncOptions()
                               .size(std::vector<int64_t>{h, w})
                               .mode(torch::kBilinear)
                               .align_corners(true))[0]
            .permute({1, 2, 0});
      };
      tt::DecodedFrames frames;
      frames.bit_depth = bits;
      frames.matrix = tt::VideoMatrix::kBt709;
      const double top = bits == 8 ? 255.0 : 1023.0;
      const torch::Tensor y = (smooth(height, width, 1).squeeze(-1) * (top * 0.8) + top * 0.1).round();
      const torch::Tensor uv = (smooth((height + 1) / 2, (width + 1) / 2, 2) * (top * 0.6) + top * 0.2).round();
      if (bits == 8) {
        frames.y = y.to(torch::kUInt8).unsqueeze(0);
        frames.uv = uv.to(torch::kUInt8).unsqueeze(0);
      } else {  // P010: the value in the high 10 bits
        frames.y = (y.to(torch::kInt32) * 64).to(torch::kUInt16).unsqueeze(0);
        frames.uv = (uv.to(torch::kInt32) * 64).to(torch::kUInt16).unsqueeze(0);
      }
      const torch::Tensor swscale = tt::yuv420_to_rgb_swscale(frames);
      const torch::Tensor reference = tt::yuv420_to_rgb(frames.y, frames.uv, tt::yuv_format(frames));
      REQUIRE(swscale.sizes() == reference.sizes());
      const torch::Tensor diff = (swscale.to(torch::kFloat32) - reference.to(torch::kFloat32)).abs();
      CHECK(diff.mean().item<double>() <= 2.0);
      CHECK(diff.max().item<double>() <= 6.0);
    }
  }
}

TEST_CASE("video reader: seeking gives the pixels of decoding from the start", "[video]") {
  for (const std::string name : {"h264.mp4", "hevc.mkv", "vp9.webm", "h264_10bit.mp4"}) {
    SECTION(name) {
      tt::VideoReaderOptions always_seek;
      always_seek.reseek_gap = 1;  // re-seek into every later GOP: exercises the re-seek path
      tt::VideoReader reader(clips().path(name), always_seek);
      const int64_t count = reader.info().frame_count;
      const tt::DecodedFrames all = reader.decode(all_frames(reader));
      const int64_t middle = count / 2 + 1;
      const tt::DecodedFrames one = reader.decode({middle});
      CHECK(torch::equal(one.y[0], all.y[middle]));
      CHECK(torch::equal(one.uv[0], all.uv[middle]));
      // Sparse frames across GOPs (re-seeks between them), then back to the start.
      const std::vector<int64_t> sparse = {1, middle, count - 1};
      const tt::DecodedFrames some = reader.decode(sparse);
      if (name == "h264.mp4") CHECK(reader.last_seek_count() >= 2);  // GOP 12: a re-seek between 1 and 21
      for (size_t i = 0; i < sparse.size(); ++i) {
        CHECK(torch::equal(some.y[i], all.y[sparse[i]]));
        CHECK(torch::equal(some.uv[i], all.uv[sparse[i]]));
      }
      CHECK(torch::equal(reader.decode({0}).y[0], all.y[0]));
      // A larger gap (NVDEC's default) decodes through short gaps instead: one seek, same pixels.
      tt::VideoReaderOptions decode_through;
      decode_through.reseek_gap = 48;
      tt::VideoReader through(clips().path(name), decode_through);
      const tt::DecodedFrames same = through.decode(sparse);
      if (name == "h264.mp4") CHECK(through.last_seek_count() == 1);
      CHECK(torch::equal(same.y, some.y));
      CHECK(torch::equal(same.uv, some.uv));
      // Seeks without a decoder flush (NVDEC's default for H.264): pictures queued from before a seek
      // are dropped by generation, and every request — forward, backward, repeated — gives the same
      // pixels.
      if (name.rfind("h264", 0) == 0) {
        tt::VideoReaderOptions no_flush;
        no_flush.reseek_gap = 1;
        no_flush.flush_on_seek = 0;
        tt::VideoReader unflushed(clips().path(name), no_flush);
        const std::vector<std::vector<int64_t>> requests = {sparse, {middle}, {0, 1, 2}, {count - 1}, {1, middle}};
        for (const auto& request : requests) {
          const tt::DecodedFrames got = unflushed.decode(request);
          for (size_t i = 0; i < request.size(); ++i) {
            INFO("frame " << request[i]);
            CHECK(torch::equal(got.y[i], all.y[request[i]]));
            CHECK(torch::equal(got.uv[i], all.uv[request[i]]));
          }
        }
        CHECK(unflushed.scan().frames_decoded == count);  // a scan after all that still sees every frame once
      }
    }
  }
}

TEST_CASE("video reader: display rotation turns the frames like ffmpeg's autorotate", "[video]") {
  const std::string path = clips().path("rotated.mp4");
  tt::VideoReader reader(path);
  CHECK((reader.info().rotation == 90 || reader.info().rotation == 270));
  CHECK(reader.info().width == 320);
  const torch::Tensor rgb = reader.decode_rgb(all_frames(reader));
  CHECK(rgb.sizes() == torch::IntArrayRef({6, 320, 240, 3}));
  const torch::Tensor reference = ffmpeg_rgb("rotated.mp4", "bt601", "tv", 320, 240);
  tt::test::check_pixels_close(compared_frames(rgb), reference);
  const torch::Tensor swscale = reader.decode_rgb(all_frames(reader), tt::RgbConverter::kSwscale);
  CHECK(torch::equal(compared_frames(swscale), reference));
  // The same frames unrotated differ: the direction matters, not only the shape.
  const torch::Tensor other = tt::rotate_frames(rgb, 180);
  CHECK_FALSE(torch::equal(other, rgb));
}

TEST_CASE("video reader: variable frame rate timestamps match ffprobe", "[video]") {
  const std::string path = clips().path("vfr.mkv");
  const auto result = media_command(
      "ffprobe -v error -select_streams v:0 -show_entries frame=pts_time -of csv=p=0 '{media}/vfr.mkv'");
  REQUIRE(result.exit_code == 0);
  std::vector<double> expected;
  std::istringstream lines(result.output);
  std::string line;
  while (std::getline(lines, line)) {
    const auto comma = line.find(',');
    if (comma != std::string::npos) line = line.substr(0, comma);
    if (!line.empty()) expected.push_back(std::stod(line));
  }
  tt::VideoReader reader(path);
  REQUIRE(reader.index().size() == static_cast<int64_t>(expected.size()));
  for (size_t i = 0; i < expected.size(); ++i) CHECK(std::abs(reader.index().seconds(i) - expected[i]) < 1e-3);
  const tt::DecodedFrames frames = reader.decode({11, 12, 13});
  CHECK(std::abs(frames.seconds[0].item<double>() - expected[11]) < 1e-3);
  CHECK(std::abs((frames.seconds[2] - frames.seconds[1]).item<double>() - 0.08) < 1e-3);  // 12.5 fps part
}

TEST_CASE("video reader: broken inputs give tt::Error, never a crash", "[video]") {
  tt::test::TempDir dir("tt_video_broken");
  auto code_of = [](const std::string& path) {
    return tt::test::expect_error([&] {
             tt::VideoReader reader(path);
             reader.decode_rgb(all_frames(reader));
           })
        .code();
  };
  CHECK(code_of(dir / "missing.mp4") == tt::ErrorCode::kIo);
  CHECK(code_of(dir.path()) == tt::ErrorCode::kIo);
  tt::test::write_file(dir / "empty.mp4", "");
  CHECK(code_of(dir / "empty.mp4") == tt::ErrorCode::kDecode);
  tt::test::write_file(dir / "notes.mp4", "this is not a video\n");
  const tt::Error text_error = tt::test::expect_error([&] { tt::VideoReader reader(dir / "notes.mp4"); });
  CHECK(text_error.code() == tt::ErrorCode::kDecode);
  CHECK(std::string(text_error.what()).find("notes.mp4") != std::string::npos);
  // An audio-only file has no video stream.
  make("audio.m4a", "-f lavfi -i sine=duration=0.2 -c:a aac");
  CHECK(code_of(clips().path("audio.m4a")) == tt::ErrorCode::kDecode);
  {
    tt::VideoReader reader(clips().path("h264.mp4"));
    CHECK(tt::test::expect_error([&] { reader.decode({0, 1000}); }).code() == tt::ErrorCode::kData);
  }

  // Truncated and byte-flipped copies: either they decode (concealment) or they throw tt::Error.
  const std::string good = tt::test::read_file(clips().path("h264.mp4"));
  const std::string good_mkv = tt::test::read_file(clips().path("hevc.mkv"));
  std::vector<std::pair<std::string, std::string>> broken;
  broken.push_back({"truncated.mp4", good.substr(0, good.size() / 2)});
  broken.push_back({"truncated.mkv", good_mkv.substr(0, good_mkv.size() / 2)});
  std::mt19937 random(1234);
  for (int copy = 0; copy < 12; ++copy) {
    std::string bytes = copy % 2 == 0 ? good : good_mkv;
    std::uniform_int_distribution<size_t> where(0, bytes.size() - 1);
    const int flips = copy < 6 ? 8 : 200;
    for (int i = 0; i < flips; ++i) bytes[where(random)] = static_cast<char>(random() & 0xff);
    broken.push_back({"flipped" + std::to_string(copy) + (copy % 2 == 0 ? ".mp4" : ".mkv"), bytes});
  }
  for (const auto& [name, bytes] : broken) {
    INFO(name);
    tt::test::write_file(dir / name, bytes);
    try {
      tt::VideoReader reader(dir / name);
      const torch::Tensor rgb = reader.decode_rgb(all_frames(reader));
      CHECK(rgb.size(0) == reader.info().frame_count);
    } catch (const tt::Error& error) {
      CHECK((error.code() == tt::ErrorCode::kDecode || error.code() == tt::ErrorCode::kData));
    }
  }
}
