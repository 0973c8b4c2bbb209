// `teletron validate-data` on generated clips plus broken files: with a permissive bucket exactly
// the broken rows are errors; with the default 33x480x832 bucket the short and small clips are
// reported with their frame counts and sizes; the JSON report agrees with the table; the exit code
// is TT_ERR_DATA's; a config whose samples_per_clip breaks 4n+1 for the VAE names both keys. The
// [gpu] variant runs the same manifest decoding for CUDA (NVDEC where the GPU takes the stream).
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>

#include "test/test_util.h"

using Catch::Matchers::ContainsSubstring;
using tt::test::media_command;
using tt::test::media_dir;
using tt::test::run_teletron;
using tt::test::TempDir;

namespace {

std::string clip(const std::string& name, const std::string& args) {
  const auto result = media_command("ffmpeg -v error -y " + args + " '{media}/" + name + "'");
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  return media_dir() + "/" + name;
}

// The 12-frame 320x240 H.264 clip (moov first, so flipped bytes from the middle on hit frame data).
std::string h264_clip() {
  return clip("vd_h264.mp4", "-f lavfi -i testsrc2=size=320x240:rate=25 -frames:v 12 -c:v libx264 -g 6 "
                             "-pix_fmt yuv420p -movflags +faststart");
}

// Good clips: a 12-frame 320x240 H.264 file, a 40-frame 176x144 HEVC file; then an empty file, a
// text file, a truncated and a byte-flipped copy of the H.264 clip and a folder.
struct Dataset {
  TempDir dir{"tt_validate"};
  std::string manifest;
};

void make_dataset(Dataset& d) {
  const std::string h264 = h264_clip();
  const std::string hevc = clip("vd_hevc.mkv", "-f lavfi -i testsrc2=size=176x144:rate=25 -frames:v 40 -c:v libx265 "
                                               "-x265-params log-level=none -pix_fmt yuv420p");
  const std::string bytes = tt::test::read_file(h264);
  tt::test::write_file(d.dir / "empty.mp4", "");
  tt::test::write_file(d.dir / "notes.mp4", "this is not a video\n");
  tt::test::write_file(d.dir / "truncated.mp4", bytes.substr(0, bytes.size() / 3));
  std::string flipped = bytes;
  // From the middle on: inside the frame data (faststart puts the moov box first).
  for (size_t i = flipped.size() / 2; i < flipped.size(); i += 97) flipped[i] = static_cast<char>(flipped[i] ^ 0x5A);
  tt::test::write_file(d.dir / "flipped.mp4", flipped);
  std::filesystem::create_directory(d.dir / "folder.mp4");
  d.manifest = d.dir / "manifest.jsonl";
  tt::test::write_file(d.manifest, "{\"video\": \"" + h264 + "\"}\n{\"video\": \"" + hevc +
                                       "\"}\n{\"video\": \"empty.mp4\"}\n{\"video\": \"notes.mp4\"}\n"
                                       "{\"video\": \"truncated.mp4\"}\n{\"video\": \"flipped.mp4\"}\n"
                                       "{\"video\": \"folder.mp4\"}\n\n{\"clip\": \"x.mp4\"}\n");
}

nlohmann::json read_report(const std::string& path) { return nlohmann::json::parse(tt::test::read_file(path)); }

void check_permissive(const Dataset& d, const std::string& device) {
  const std::string report = d.dir / ("permissive_" + device + ".json");
  const auto result = run_teletron("validate-data '" + d.manifest + "' --device " + device +
                                   " --set 'data.buckets=[{frames: 1, height: 64, width: 64}]' --report '" + report +
                                   "' 2>&1");
  INFO(result.output);
  CHECK(result.exit_code == 3);  // TT_ERR_DATA
  CHECK_THAT(result.output, ContainsSubstring("TT_ERR_DATA: 6 of 8 samples have errors"));
  const nlohmann::json r = read_report(report);
  REQUIRE(r["samples"].size() == 8);
  // Rows in manifest order (the blank line is skipped; line numbers stay the file's).
  const std::vector<std::string> expected = {"ok", "ok", "error", "error", "error", "error", "error", "error"};
  for (size_t i = 0; i < expected.size(); ++i) {
    INFO("row " << i << ": " << r.at("samples").at(i).dump());
    CHECK(r.at("samples").at(i).at("status") == expected[i]);
  }
  const nlohmann::json& rows = r.at("samples");
  auto first_reason = [&](size_t i) { return rows.at(i).at("reasons").empty() ? "" : rows.at(i).at("reasons").at(0).get<std::string>(); };
  CHECK(rows.at(0).at("frames") == 12);
  CHECK(rows.at(1).at("frames") == 40);
  CHECK(rows.at(2).at("messages").dump().find("is empty") != std::string::npos);
  CHECK(first_reason(5) == "damaged");
  CHECK(first_reason(6) == "unreadable");
  CHECK(rows.at(7).at("line") == 9);
  CHECK(first_reason(7) == "manifest_row");
  CHECK(r.at("summary").at("errors") == 6);
  CHECK(r.at("summary").at("ok") == 2);
}

}  // namespace

TEST_CASE("validate-data: a permissive bucket flags exactly the broken rows", "[validate]") {
  Dataset d;
  make_dataset(d);
  check_permissive(d, "cpu");
}

TEST_CASE("validate-data: the default bucket reports short and small clips with their numbers", "[validate]") {
  Dataset d;
  make_dataset(d);
  const auto result = run_teletron("validate-data '" + d.manifest + "' --device cpu --jobs 1 2>&1");
  INFO(result.output);
  CHECK(result.exit_code == 3);
  CHECK_THAT(result.output, ContainsSubstring("has 12 frames"));
  CHECK_THAT(result.output, ContainsSubstring("needs at least 33"));
  // The fps sampler's need is a time span: 32 gaps of 1/24 s.
  CHECK_THAT(result.output, ContainsSubstring("33 frames spanning 1.333 s at 24 fps, and this clip's frames span"));
  CHECK_THAT(result.output, ContainsSubstring("is 320x240 (width x height, after rotation)"));
  CHECK_THAT(result.output, ContainsSubstring("is 176x144"));
  CHECK_THAT(result.output, ContainsSubstring("too_short"));
  CHECK_THAT(result.output, ContainsSubstring("too_small"));
  CHECK_THAT(result.output, ContainsSubstring("TT_ERR_DATA: 8 of 8 samples have errors"));
}

TEST_CASE("validate-data: a config breaking 4n+1 for the VAE names both keys", "[validate]") {
  TempDir dir("tt_validate_cfg");
  tt::test::write_file(dir / "manifest.jsonl", "{\"video\": \"a.mp4\"}\n");
  tt::test::write_file(dir / "c.yaml", "tele_tron:\n  data:\n    source: video\n    manifest: " + (dir / "manifest.jsonl") +
                                           "\n  data_pipeline:\n    frame_sampler: {samples_per_clip: 16}\n");
  const auto result = run_teletron("validate-data '" + (dir / "c.yaml") + "' --device cpu 2>&1");
  INFO(result.output);
  CHECK(result.exit_code == 2);
  CHECK_THAT(result.output, ContainsSubstring("TT_ERR_CONFIG"));
  CHECK_THAT(result.output, ContainsSubstring("tele_tron.data_pipeline.frame_sampler.samples_per_clip"));
  CHECK_THAT(result.output, ContainsSubstring("tele_tron.data.buckets[0].frames"));
  CHECK_THAT(result.output, ContainsSubstring("13 or 17"));
}

TEST_CASE("validate-data: with data.source video every row needs its text embeddings, of the model's widths",
          "[validate]") {
  TempDir dir("tt_validate_text");
  const std::string video = h264_clip();
  tt::test::write_file(dir / "manifest.jsonl", "{\"video\": \"" + video + "\"}\n{\"video\": \"" + video +
                                                   "\", \"text_embeddings\": \"missing.safetensors\"}\n");
  tt::test::write_file(dir / "c.yaml", "tele_tron:\n  model: {preset: tiny}\n  data:\n    source: video\n    manifest: " +
                                           (dir / "manifest.jsonl") +
                                           "\n    buckets: [{frames: 9, height: 64, width: 64}]\n");
  const auto result = run_teletron("validate-data '" + (dir / "c.yaml") + "' --device cpu 2>&1");
  INFO(result.output);
  CHECK(result.exit_code == 3);
  CHECK_THAT(result.output, ContainsSubstring("line 1: no caption and no \"text_embeddings\""));
  CHECK_THAT(result.output, ContainsSubstring("missing.safetensors"));
  CHECK_THAT(result.output, ContainsSubstring("TT_ERR_DATA: 2 of 2 samples have errors"));
}

TEST_CASE("validate-data before encode-text: captions without embeddings are listed, not errors", "[validate]") {
  TempDir dir("tt_validate_caption");
  const std::string video = h264_clip();
  tt::test::write_file(dir / "manifest.jsonl", "{\"video\": \"" + video + "\", \"caption\": \"A clip.\"}\n");
  tt::test::write_file(dir / "c.yaml", "tele_tron:\n  model: {preset: tiny}\n  data:\n    source: video\n    manifest: " +
                                           (dir / "manifest.jsonl") +
                                           "\n    buckets: [{frames: 9, height: 64, width: 64}]\n");
  const auto result = run_teletron("validate-data '" + (dir / "c.yaml") + "' --device cpu --report '" +
                                   (dir / "r.json") + "' 2>&1");
  INFO(result.output);
  CHECK(result.exit_code == 0);
  CHECK_THAT(result.output, ContainsSubstring("1 sample(s) have a caption whose embedding is not in the text cache"));
  CHECK_THAT(result.output, ContainsSubstring("run `teletron encode-text CONFIG` before training"));
  const nlohmann::json report = nlohmann::json::parse(tt::test::read_file(dir / "r.json"));
  CHECK(report["summary"]["captions_to_encode"] == 1);
  CHECK(report["summary"]["errors"] == 0);
}

TEST_CASE("validate-data and probe name the clips that cannot seek (a raw H.264 stream) and the way out; not errors",
          "[validate]") {
  TempDir dir("tt_validate_seek");
  const std::string seeks = h264_clip();
  const std::string raw = clip("vd_raw.h264", "-f lavfi -i testsrc2=size=320x240:rate=25 -frames:v 12 -c:v libx264 "
                                              "-g 6 -pix_fmt yuv420p -f h264");
  std::string rows = "{\"video\": \"" + seeks + "\"}\n{\"video\": \"" + raw + "\"}\n";
  // A raw MJPEG stream shows only on a seek that it cannot (the GPU machine's FFmpeg reads no MJPEG:
  // there, where no ffmpeg CLI made the clips, the row is left out).
  const bool mjpeg = tt::test::has_ffmpeg_cli();
  std::string raw_mjpeg;
  if (mjpeg) {
    raw_mjpeg = clip("vd_raw.mjpeg", "-f lavfi -i testsrc2=size=128x64:rate=25 -frames:v 16 -c:v mjpeg -q:v 3 "
                                     "-pix_fmt yuvj420p -f mjpeg");
    rows += "{\"video\": \"" + raw_mjpeg + "\"}\n";
  }
  tt::test::write_file(dir / "manifest.jsonl", rows);
  const std::string report_path = dir / "r.json";
  const auto result = run_teletron("validate-data '" + (dir / "manifest.jsonl") +
                                   "' --device cpu --set 'data.buckets=[{frames: 1, height: 64, width: 64}]' --report '" +
                                   report_path + "' 2>&1");
  INFO(result.output);
  CHECK(result.exit_code == 0);
  CHECK_THAT(result.output, ContainsSubstring((mjpeg ? "2" : "1") + std::string(" sample(s) cannot seek: each read "
                                                                                 "decodes from the start of the file")));
  CHECK_THAT(result.output, ContainsSubstring("line 2 " + raw + ": a raw elementary stream without timestamps, 12 frames"));
  CHECK_THAT(result.output, ContainsSubstring("ffmpeg -framerate FPS -i IN -c copy OUT.mkv"));
  const nlohmann::json report = read_report(report_path);
  CHECK(report["summary"]["decodes_from_start"] == (mjpeg ? 2 : 1));
  if (mjpeg) {
    CHECK_THAT(result.output, ContainsSubstring("line 3 " + raw_mjpeg +
                                                ": seeks land on other packets than the index names, 16 frames"));
    CHECK(report["samples"][2]["seeks"] == false);
  }
  CHECK(report["summary"]["errors"] == 0);
  CHECK(report["samples"][0]["seeks"] == true);
  CHECK(report["samples"][1]["seeks"] == false);
  CHECK(report["samples"][0]["notes"].empty());
  CHECK_THAT(report["samples"][1]["notes"].dump(), ContainsSubstring("decodes_from_start: a raw elementary stream"));

  const auto probe_raw = run_teletron("probe '" + raw + "' 2>&1");
  INFO(probe_raw.output);
  CHECK_THAT(probe_raw.output, ContainsSubstring("seeking:     none: frame i is the i-th frame decoded from the start "
                                                 "(a raw elementary stream without timestamps)"));
  if (mjpeg) {
    const auto probe_mjpeg = run_teletron("probe '" + raw_mjpeg + "' 2>&1");
    INFO(probe_mjpeg.output);
    CHECK_THAT(probe_mjpeg.output, ContainsSubstring("(seeks land on other packets than the index names); every read"));
  }
  const auto probe_mp4 = run_teletron("probe '" + seeks + "' 2>&1");
  INFO(probe_mp4.output);
  CHECK_THAT(probe_mp4.output, ContainsSubstring("seeking:     to keyframes, frames found by timestamp"));
}

TEST_CASE("validate-data on CUDA flags the same rows", "[gpu][validate]") {
  Dataset d;
  make_dataset(d);  // made (recorded) before the GPU check so machines with the CLI record it
  TT_REQUIRE_GPU();
  check_permissive(d, "cuda");
}

namespace {

// 25 frames of 160x120 H.264 of a sinusoidal texture moving right by `speed` pixels per frame
// (FFmpeg's geq: N is the frame number), 0 = a still picture.
std::string panning_clip(const std::string& name, const std::string& speed) {
  return clip(name, "-f lavfi -i \"nullsrc=size=160x120:rate=25,format=gray,geq=lum='128+50*sin((X-" + speed +
                        "*N)/5)*cos(Y/7)+40*sin((X-" + speed + "*N+2*Y)/11)'\" -frames:v 25 -c:v libx264 -crf 12 "
                        "-pix_fmt yuv420p");
}

}  // namespace

TEST_CASE("validate-data --motion scores each clip: a still clip far below a slow pan, below a fast pan; the report, "
          "the table and the manifest's motion cache have the scores", "[validate][motion]") {
  TempDir dir("tt_validate_motion");
  const std::string still = panning_clip("vd_still.mp4", "0");
  const std::string slow = panning_clip("vd_slow.mp4", "0.5");
  const std::string fast = panning_clip("vd_fast.mp4", "2");
  const std::string manifest = dir / "manifest.jsonl";
  tt::test::write_file(manifest, "{\"video\": \"" + fast + "\"}\n{\"video\": \"" + still + "\"}\n{\"video\": \"" + slow +
                                     "\"}\n");
  const std::string report = dir / "report.json";
  const auto result = run_teletron("validate-data '" + manifest + "' --device cpu --motion --report '" + report +
                                   "' --set 'data.buckets=[{frames: 9, height: 64, width: 64}]' 2>&1");
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  // The default algorithm, nvofa, needs a GPU: on the CPU its fallback, TV-L1, runs, and says so.
  CHECK_THAT(result.output, ContainsSubstring("pixels per frame at a 256-px short side; tvl1 over 4 frame pairs): 3 "
                                              "clip(s) scored"));
  CHECK_THAT(result.output, ContainsSubstring("nvofa cannot run (NVOFA needs a CUDA device"));
  CHECK_THAT(result.output, ContainsSubstring("stillest"));
  const nlohmann::json r = read_report(report);
  const double fast_score = r["samples"][0]["motion"].get<double>();
  const double still_score = r["samples"][1]["motion"].get<double>();
  const double slow_score = r["samples"][2]["motion"].get<double>();
  INFO("still " << still_score << ", slow " << slow_score << ", fast " << fast_score);
  // At 256 px on the short side the clips (120 px) are scaled by 2.13: 0.5 and 2 px per frame
  // become 1.07 and 4.27.
  CHECK(still_score < 0.1);
  CHECK(std::abs(slow_score - 1.07) < 0.1);
  CHECK(std::abs(fast_score - 4.27) < 0.3);
  CHECK(r["motion"]["pairs"] == 4);
  CHECK(r["motion"]["algorithm"] == "tvl1");
  // The cache beside the manifest, keyed by the clips' paths.
  const nlohmann::json cache = read_report(manifest + ".motion.json");
  CHECK(cache["version"] == 1);
  CHECK(std::abs(cache["clips"][slow]["score"].get<double>() - slow_score) < 1e-9);
  CHECK(cache["clips"].size() == 3);
  // With the flow off there is nothing to score with: a config error naming the key.
  const auto off = run_teletron("validate-data '" + manifest + "' --device cpu --motion --set "
                                "data_pipeline.optical_flow.algorithm=none --set 'data.buckets=[{frames: 9, height: 64, "
                                "width: 64}]' 2>&1");
  INFO(off.output);
  CHECK(off.exit_code == 2);
  CHECK_THAT(off.output, ContainsSubstring("validate-data --motion needs optical flow"));
}

TEST_CASE("probe --flow writes the colour-coded flow between two frames as a PNG and says how far they moved",
          "[validate][motion][probe]") {
  TempDir dir("tt_probe_flow");
  const std::string fast = panning_clip("vd_fast.mp4", "2");
  const std::string png = dir / "flow.png";
  const auto result = run_teletron("probe '" + fast + "' --flow '" + png + "' --frames 5,6 2>&1");
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  // 160x120 at a 256-px short side: 341x256, 2 px per frame becomes 4.27.
  CHECK_THAT(result.output, ContainsSubstring("(frames 5 -> 6, tvl1 at 341x256: mean 4.2"));
  const std::string bytes = tt::test::read_file(png);
  REQUIRE(bytes.size() > 24);
  CHECK(bytes.substr(1, 3) == "PNG");
  CHECK(static_cast<unsigned char>(bytes[18]) * 256 + static_cast<unsigned char>(bytes[19]) == 341);  // width
  auto wrong = run_teletron("probe '" + fast + "' --flow '" + png + "' --frames 5 2>&1");
  CHECK(wrong.exit_code == 2);  // TT_ERR_CONFIG
  CHECK_THAT(wrong.output, ContainsSubstring("two different frames are needed"));
}
