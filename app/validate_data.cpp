// `teletron validate-data` (see validate_data.h).
#include "app/validate_data.h"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <thread>

#include "app/config.h"
#include "app/options.h"
#include "app/video_data.h"
#include "core/errors.h"
#include "core/file_io.h"
#include "pipeline/motion.h"
#include "pipeline/text_cache.h"
#include "pipeline/video_manifest.h"
#include "pipeline/video_reader.h"

namespace tt {
namespace {

namespace fs = std::filesystem;

// One sample's verdict. `reasons` are short codes for the summary table; `messages` the details.
struct SampleResult {
  int64_t line = 0;
  std::string video;
  bool error = false;
  std::vector<std::string> reasons;
  std::vector<std::string> messages;
  std::vector<std::string> message_reasons;  // the reason of each message
  std::vector<std::string> notes;  // not problems: e.g. decoded on the CPU instead of NVDEC
  bool caption_to_encode = false;   // a caption whose embedding encode-text has not written yet (not an error)
  // What the file is (filled as far as it could be read).
  std::string container, codec, pixel_format, decode_path, decode_reason;
  std::string decodes_from_start;  // why this file cannot seek (VideoInfo::decodes_from_start); empty when it can
  bool cpu_fallback = false;       // on CUDA, decoded on the CPU path instead of NVDEC
  int width = 0, height = 0, rotation = 0;  // displayed size (after rotation; the width as shown, by the pixel aspect)
  int64_t frames = 0;
  double fps = 0.0, duration = 0.0;
  std::optional<double> motion;  // --motion: pixels per frame at the working resolution
  MotionProfile motion_profile;  // --motion: per frame pair

  void fail(const std::string& reason, const std::string& message) {
    error = true;
    if (std::find(reasons.begin(), reasons.end(), reason) == reasons.end()) reasons.push_back(reason);
    messages.push_back(message);
    message_reasons.push_back(reason);
  }
};

struct Plan {
  Config config;
  std::string manifest;
  std::vector<FrameSamplerOptions> samplers;  // one per bucket
  VideoReaderOptions reader;
  int64_t text_dim = 0, pooled_dim = 0;
  bool motion = false;
  MotionOptions motion_options;
  std::shared_ptr<FlowEstimatorPool> flow;  // --motion: the estimators of the jobs' threads
};

bool is_config_file(const std::string& path) {
  const std::string ext = fs::path(path).extension().string();
  return ext == ".yaml" || ext == ".yml";
}

std::string bucket_text(const Bucket& b) { return str_cat(b.frames, "x", b.height, "x", b.width); }

// Frames and size against the buckets: fine when one bucket fits both. Otherwise the reason names
// the nearest miss with the clip's own numbers.
void check_against_buckets(const Plan& plan, const VideoReader& reader, SampleResult& result) {
  const auto& buckets = plan.config.data.buckets;
  const std::vector<double> times = reader.index().times();
  bool any_frames = false, any_size = false;
  size_t least = 0;  // the bucket whose sampler needs the fewest frames
  for (size_t b = 0; b < buckets.size(); ++b) {
    if (frames_needed(plan.samplers[b]) < frames_needed(plan.samplers[least])) least = b;
    const BucketFit fit = fit_bucket(buckets[b], plan.samplers[b], times, result.width, result.height);
    if (fit.both()) return;
    any_frames |= fit.frames;
    any_size |= fit.size;
  }
  std::string bucket_list, size_list;
  for (const Bucket& b : buckets) {
    bucket_list += (bucket_list.empty() ? "" : ", ") + bucket_text(b);
    size_list += (size_list.empty() ? "" : ", ") + str_cat(b.width, "x", b.height);
  }
  if (!any_frames) {
    // The fps and motion samplers take frames 1 / target_fps apart: what they need is a time span,
    // which a clip with enough frames at a higher rate can still miss (33 frames at 25 fps span
    // 1.28 s; 33 at 24 fps need 1.333 s).
    const FrameSamplerOptions& sampler = plan.samplers[least];
    std::string span;
    if ((sampler.mode == FrameSampleMode::kFps || sampler.mode == FrameSampleMode::kMotion) && !times.empty()) {
      char text[256];
      std::snprintf(text, sizeof(text),
                    " frames spanning %.3f s at %g fps, and this clip's frames span %.3f s; "
                    "data_pipeline.frame_sampler.target_fps at the clips' own rate (or mode: uniform) takes them whole",
                    fps_window_seconds(sampler), sampler.target_fps, times.back() - times.front());
      span = text;
    }
    result.fail("too_short", str_cat("has ", result.frames, " frames (", result.duration, " s); the ",
                                     frame_sample_mode_name(sampler.mode), " sampler needs at least ",
                                     frames_needed(sampler), span, " (buckets ", bucket_list, ")"));
  }
  if (!any_size)
    result.fail("too_small", str_cat("is ", result.width, "x", result.height, " (width x height, after rotation); "
                                     "no bucket fits inside it (", size_list, ")"));
  if (any_frames && any_size)
    result.fail("no_bucket", str_cat(result.frames, " frames at ", result.width, "x", result.height,
                                     ": one bucket fits the frames and another the size, none both (", bucket_list,
                                     ")"));
}

SampleResult check_sample(const Plan& plan, const VideoManifestRow& row) {
  SampleResult result;
  result.line = row.line;
  result.video = row.video;
  if (!row.error.empty()) {
    result.fail("manifest_row", str_cat("line ", row.line, ": ", row.error));
    return result;
  }
  try {
    VideoReader reader(row.video, plan.reader);
    const VideoInfo& info = reader.info();
    result.container = info.container;
    result.codec = info.codec;
    result.pixel_format = info.pixel_format;
    result.rotation = info.rotation;
    result.width = static_cast<int>(info.shown_width());  // as shown: what the buckets are fitted to
    result.height = info.displayed_height();
    result.frames = info.frame_count;
    result.fps = info.frame_rate;
    result.duration = info.duration_seconds;
    // Raw MJPEG, Ogg: only a seek shows whether they can, and only before the scan (after reading
    // the whole file FFmpeg's generic index is exact; training's fresh readers are not).
    try {
      (void)reader.try_seeks();
    } catch (const Error&) {  // damage: the scan describes it
    }
    const ScanReport scan = reader.scan();  // may switch the reader to the CPU path
    result.decode_path = reader.info().decode_path;
    result.decode_reason = reader.info().decode_reason;
    result.cpu_fallback = plan.reader.device.is_cuda() && result.decode_path == "cpu";
    if (result.cpu_fallback) result.notes.push_back("cpu_fallback: " + result.decode_reason);
    result.decodes_from_start = reader.info().decodes_from_start;
    if (!result.decodes_from_start.empty())
      result.notes.push_back(str_cat("decodes_from_start: ", result.decodes_from_start, "; every sample decodes up to ",
                                     result.frames, " frames"));
    for (const std::string& problem : scan.problems) result.fail("damaged", problem);
    if (scan.clean() && result.decode_path == "nvdec") {
      // NVDEC decodes slice data without FFmpeg's error detection: flipped bits come out as
      // silently wrong pixels. The CPU decoder, which flags damage, checks the file once more.
      VideoReaderOptions cpu = plan.reader;
      cpu.device = torch::kCPU;
      VideoReader software(row.video, cpu);
      for (const std::string& problem : software.scan().problems) result.fail("damaged", problem + " (CPU decoder)");
    }
    check_against_buckets(plan, reader, result);
    if (plan.motion && !result.error) {
      try {
        const ClipMotion motion = clip_motion(reader, plan.motion_options, &plan.flow->for_this_thread());
        result.motion = motion.score;
        result.motion_profile = motion.profile;
      } catch (const std::exception& error) {
        result.fail("motion", str_cat("motion score: ", first_line(error.what())));
      }
    }
  } catch (const Error& error) {
    const std::string reason = error.code() == ErrorCode::kIo       ? "unreadable"
                               : error.code() == ErrorCode::kDecode ? "not_decodable"
                                                                    : "failed";
    result.fail(reason, error.what());
  } catch (const std::exception& error) {  // c10::Error, bad_alloc, ...: reported, never fatal
    result.fail("failed", str_cat(row.video, ": ", error.what()));
  }
  if (!row.text_error.empty() && row.has_caption) {
    // The caption is there, its embedding is made by the next step of the workflow (encode-text):
    // listed, not an error, so that validate-data can run first.
    result.caption_to_encode = true;
  } else if (!row.text_error.empty()) {
    result.fail("text_embeddings", str_cat("line ", row.line, ": ", row.text_error));
  } else if (!row.text_embeddings.empty()) {
    const std::string problem = check_text_embeddings(row.text_embeddings, plan.text_dim, plan.pooled_dim);
    if (!problem.empty()) result.fail("text_embeddings", problem);
  } else if (plan.config.data.source == "video") {
    result.fail("text_embeddings", str_cat("line ", row.line, ": no caption and no \"text_embeddings\" (training "
                                           "with data.source: video needs each clip's text: a \"caption\", a "
                                           "<video stem>.txt, or an embeddings file)"));
  }
  return result;
}

// "\r[#####.....] 12/40 (3 errors)" on a terminal, a line per 10 % otherwise.
class Progress {
 public:
  explicit Progress(int64_t total) : total_(total), tty_(isatty(STDERR_FILENO) != 0) {}
  void show(int64_t done, int64_t errors) {
    if (tty_) {
      const int width = 30;
      const int filled = total_ > 0 ? static_cast<int>(width * done / total_) : width;
      std::fprintf(stderr, "\r[%s%s] %lld/%lld samples (%lld with errors)", std::string(filled, '#').c_str(),
                   std::string(width - filled, '.').c_str(), static_cast<long long>(done),
                   static_cast<long long>(total_), static_cast<long long>(errors));
      if (done == total_) std::fprintf(stderr, "\n");
    } else {
      const int64_t decile = total_ > 0 ? done * 10 / total_ : 10;
      if (decile == last_decile_ && done != total_) return;
      if (done == total_ && printed_total_) return;
      last_decile_ = decile;
      printed_total_ = done == total_;
      std::fprintf(stderr, "validate-data: %lld/%lld samples checked (%lld with errors)\n",
                   static_cast<long long>(done), static_cast<long long>(total_), static_cast<long long>(errors));
    }
    std::fflush(stderr);
  }

 private:
  int64_t total_;
  bool tty_;
  int64_t last_decile_ = -1;
  bool printed_total_ = false;
};

nlohmann::json to_json(const SampleResult& r) {
  nlohmann::json j;
  j["line"] = r.line;
  j["video"] = r.video;
  j["status"] = r.error ? "error" : "ok";
  j["reasons"] = r.reasons;
  j["messages"] = r.messages;
  j["notes"] = r.notes;
  j["caption_to_encode"] = r.caption_to_encode;
  j["container"] = r.container;
  j["codec"] = r.codec;
  j["pixel_format"] = r.pixel_format;
  j["width"] = r.width;
  j["height"] = r.height;
  j["rotation"] = r.rotation;
  j["frames"] = r.frames;
  j["fps"] = r.fps;
  j["duration_s"] = r.duration;
  j["decode_path"] = r.decode_path;
  j["decode_reason"] = r.decode_reason;
  j["seeks"] = r.decodes_from_start.empty();
  if (r.motion) j["motion"] = *r.motion;
  return j;
}

Plan make_plan(const ValidateDataOptions& options) {
  Plan plan;
  if (is_config_file(options.input)) {
    plan.config = load_config(options.input, options.sets);
    plan.manifest = plan.config.data.manifest;
  } else {
    plan.config = load_config_text("tele_tron: {}\n", "(defaults)", options.sets);
    plan.manifest = options.input;
    TT_CHECK_HINT(!config_key_set(plan.config, "data.manifest"), ErrorCode::kConfig,
                  "pass the config file instead of the manifest, or drop --set data.manifest",
                  "validate-data was given the manifest ", options.input,
                  " itself, so --set data.manifest would be ignored");
  }
  warn_unused_keys(plan.config, Command::kValidateData);
  for (size_t b = 0; b < plan.config.data.buckets.size(); ++b) plan.samplers.push_back(frame_sampler_options(plan.config, b));
  plan.reader = video_reader_options(plan.config, options.device);
  plan.reader.quiet = true;
  plan.motion = options.motion;
  if (plan.motion) {
    plan.motion_options = motion_options(plan.config);
    plan.flow = std::make_shared<FlowEstimatorPool>(plan.motion_options.flow, plan.reader.device);
    TT_CHECK_HINT(plan.flow->enabled(), ErrorCode::kConfig,
                  "set data_pipeline.optical_flow.algorithm to nvofa, raft or tvl1 (or fallback: tvl1)",
                  "validate-data --motion needs optical flow, and data_pipeline.optical_flow gives none",
                  plan.flow->choice().reason.empty() ? "" : ": ", plan.flow->choice().reason);
    if (!plan.flow->choice().reason.empty()) spdlog::warn("optical flow: {}", plan.flow->choice().reason);
  }
  const HunyuanVideoConfig model = model_config_from(plan.config.model);
  plan.text_dim = model.text_embed_dim;
  plan.pooled_dim = model.pooled_projection_dim;
  return plan;
}

// --motion: the spread of the scores, the stillest and the most moving clips, and the cache.
void report_motion(const Plan& plan, const std::vector<SampleResult>& results) {
  std::vector<const SampleResult*> scored;
  for (const SampleResult& r : results)
    if (r.motion) scored.push_back(&r);
  std::sort(scored.begin(), scored.end(), [](const auto* a, const auto* b) { return *a->motion < *b->motion; });
  std::cout << "\nmotion (mean optical-flow magnitude, pixels per frame at a " << plan.motion_options.short_side
            << "-px short side; " << plan.flow->algorithms() << " over " << plan.motion_options.pairs << " frame pairs): " << scored.size()
            << " clip(s) scored\n";
  if (!scored.empty()) {
    auto quantile = [&](double q) {
      return *scored[static_cast<size_t>(std::lround(q * static_cast<double>(scored.size() - 1)))]->motion;
    };
    std::printf("  min %.3f  p10 %.3f  median %.3f  p90 %.3f  max %.3f\n", quantile(0), quantile(0.1), quantile(0.5),
                quantile(0.9), quantile(1));
    const size_t shown = std::min<size_t>(5, scored.size());
    std::printf("  %-10s %8s  %s\n", "", "motion", "clip");
    for (size_t i = 0; i < shown; ++i)
      std::printf("  %-10s %8.3f  line %lld %s\n", i == 0 ? "stillest" : "", *scored[i]->motion,
                  static_cast<long long>(scored[i]->line), scored[i]->video.c_str());
    for (size_t i = 0; i < shown && scored.size() > shown; ++i) {
      const SampleResult* r = scored[scored.size() - 1 - i];
      std::printf("  %-10s %8.3f  line %lld %s\n", i == 0 ? "most moving" : "", *r->motion,
                  static_cast<long long>(r->line), r->video.c_str());
    }
  }
  // The cache keeps the scores of clips scored before (of this manifest, with the same settings).
  const std::string path = MotionCache::path_for(plan.manifest);
  MotionCache cache;
  try {
    cache = MotionCache::read(path);
  } catch (const Error& error) {
    spdlog::warn("{}; it is written anew", first_line(error.what()));
  }
  if (cache.pairs != plan.motion_options.pairs || cache.short_side != plan.motion_options.short_side ||
      cache.algorithm != plan.flow->algorithms())
    cache = MotionCache{};
  // The algorithms that gave this run's scores (an estimator that NVOFA refused turned to TV-L1).
  cache.algorithm = plan.flow->algorithms();
  if (cache.algorithm != plan.flow->choice().algorithm)
    spdlog::warn("motion scores of this run come from {} (NVOFA refused some clips)", cache.algorithm);
  cache.pairs = plan.motion_options.pairs;
  cache.short_side = plan.motion_options.short_side;
  for (const SampleResult* r : scored) cache.set(r->video, *r->motion, r->motion_profile);
  try {
    cache.write(path);
    std::cout << "  motion cache: " << path << " (" << cache.clips.size() << " clip(s))" << std::endl;
  } catch (const Error& error) {
    spdlog::warn("TT_ERR_IO: the motion cache {} could not be written: {}; data.min_motion / max_motion and frame_sampler mode motion need it",
                 path, first_line(error.what()));
  }
}

}  // namespace

int run_validate_data(const ValidateDataOptions& options) {
  const Plan plan = make_plan(options);
  std::vector<VideoManifestRow> rows = read_video_manifest(plan.manifest);
  resolve_captions(rows, open_text_cache(text_cache_folder(plan.config.data.text_cache.value_or(""), plan.manifest)));
  const int hardware = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int jobs = std::max(1, std::min<int>(options.jobs > 0 ? options.jobs : std::min(hardware, 8),
                                             static_cast<int>(rows.size())));
  VideoReaderOptions reader = plan.reader;
  if (jobs > 1) reader.thread_count = 1;  // parallel across files, not inside one
  Plan run = plan;
  run.reader = reader;

  std::string buckets;
  for (const Bucket& b : plan.config.data.buckets) buckets += (buckets.empty() ? "" : ", ") + bucket_text(b);
  const FrameSamplerOptions& sampler = plan.samplers.front();
  std::cout << "validate-data: " << rows.size() << " samples from " << plan.manifest << "\n"
            << "  buckets (frames x height x width): " << buckets << "; sampler " << frame_sample_mode_name(sampler.mode)
            << ", " << frames_needed(sampler) << " frames\n"
            << "  decode: " << plan.reader.device.str()
            << (plan.reader.device.is_cuda() ? (plan.reader.allow_nvdec ? " (NVDEC where the GPU takes the stream)"
                                                                        : " (CPU decode: video_decoding cpu)")
                                             : " (CPU decode)")
            << ", " << jobs << " job(s)" << std::endl;

  std::vector<SampleResult> results(rows.size());
  std::atomic<int64_t> next{0}, done{0}, failed{0};
  std::vector<std::thread> workers;
  for (int j = 0; j < jobs; ++j) {
    workers.emplace_back([&] {
      for (int64_t i = next++; i < static_cast<int64_t>(rows.size()); i = next++) {
        results[i] = check_sample(run, rows[i]);
        if (results[i].error) ++failed;
        ++done;
      }
    });
  }
  Progress progress(static_cast<int64_t>(rows.size()));
  while (done.load() < static_cast<int64_t>(rows.size())) {
    progress.show(done.load(), failed.load());
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  for (auto& worker : workers) worker.join();
  progress.show(done.load(), failed.load());

  // Summary by reason, with the first example of each.
  std::map<std::string, std::pair<int64_t, std::string>> by_reason;
  int64_t errors = 0, fallbacks = 0, to_encode = 0, unseekable = 0;
  for (const SampleResult& r : results) {
    errors += r.error ? 1 : 0;
    to_encode += r.caption_to_encode ? 1 : 0;
    fallbacks += r.cpu_fallback ? 1 : 0;
    unseekable += r.decodes_from_start.empty() ? 0 : 1;
    for (const std::string& reason : r.reasons) {
      auto& entry = by_reason[reason];
      if (entry.first++ > 0) continue;
      for (size_t k = 0; k < r.messages.size(); ++k)
        if (r.message_reasons[k] == reason) {
          entry.second = r.messages[k];
          break;
        }
    }
  }
  std::cout << "\n";
  if (!by_reason.empty()) {
    std::printf("%-16s %8s  %s\n", "reason", "samples", "first example");
    for (const auto& [reason, entry] : by_reason)
      std::printf("%-16s %8lld  %s\n", reason.c_str(), static_cast<long long>(entry.first), entry.second.c_str());
    std::cout << "\nsamples with errors:\n";
    for (const SampleResult& r : results) {
      if (!r.error) continue;
      std::cout << "  line " << r.line << " " << (r.video.empty() ? "(no video)" : r.video) << "\n";
      for (const std::string& message : r.messages) std::cout << "      " << message << "\n";
    }
  }
  if (fallbacks > 0) {
    std::cout << "\n" << fallbacks << " sample(s) decode on the CPU path instead of NVDEC:\n";
    for (const SampleResult& r : results)
      if (r.cpu_fallback) std::cout << "  line " << r.line << " " << r.video << ": " << r.decode_reason << "\n";
  }
  if (unseekable > 0) {
    // Not errors: such files train, but each sample decodes from the file's start.
    std::cout << "\n" << unseekable << " sample(s) cannot seek: each read decodes from the start of the file ("
              << kDecodesFromStartHint << "):\n";
    for (const SampleResult& r : results)
      if (!r.decodes_from_start.empty())
        std::cout << "  line " << r.line << " " << r.video << ": " << r.decodes_from_start << ", " << r.frames
                  << " frames\n";
  }
  if (to_encode > 0)
    std::cout << "\n" << to_encode << " sample(s) have a caption whose embedding is not in the text cache "
              << text_cache_folder(plan.config.data.text_cache.value_or(""), plan.manifest)
              << " yet: run `teletron encode-text CONFIG` before training\n";
  std::cout << "\nchecked " << results.size() << ": " << results.size() - errors << " ok, " << errors
            << " with errors" << std::endl;
  if (plan.motion) report_motion(plan, results);

  if (!options.report.empty()) {
    nlohmann::json report;
    report["manifest"] = plan.manifest;
    report["device"] = plan.reader.device.str();
    report["buckets"] = nlohmann::json::array();
    for (const Bucket& b : plan.config.data.buckets)
      report["buckets"].push_back({{"frames", b.frames}, {"height", b.height}, {"width", b.width}});
    report["sampler"] = {{"mode", frame_sample_mode_name(sampler.mode)}, {"frames_needed", frames_needed(sampler)}};
    if (plan.motion)
      report["motion"] = {{"algorithm", plan.flow->algorithms()},
                          {"pairs", plan.motion_options.pairs},
                          {"short_side", plan.motion_options.short_side},
                          {"unit", "mean optical-flow magnitude, pixels per frame at the working resolution"},
                          {"cache", MotionCache::path_for(plan.manifest)}};
    nlohmann::json summary = {{"samples", results.size()}, {"ok", results.size() - errors}, {"errors", errors},
                              {"cpu_fallback", fallbacks}, {"decodes_from_start", unseekable},
                              {"captions_to_encode", to_encode}};
    for (const auto& [reason, entry] : by_reason) summary["by_reason"][reason] = entry.first;
    report["summary"] = summary;
    report["samples"] = nlohmann::json::array();
    for (const SampleResult& r : results) report["samples"].push_back(to_json(r));
    write_text_synced(options.report, report.dump(2) + "\n");
    std::cout << "report: " << options.report << std::endl;
  }
  TT_CHECK_HINT(errors == 0, ErrorCode::kData, "fix or remove the files listed above (the report has the details)",
                errors, " of ", results.size(), " samples have errors");
  return 0;
}

}  // namespace tt
