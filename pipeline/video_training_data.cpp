// The raw-video TrainingData source (see video_training_data.h).
#include "pipeline/video_training_data.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <utility>

#include "core/content_hash.h"
#include "core/device.h"
#include "core/errors.h"
#include "core/file_io.h"
#include "core/gpu_timer.h"
#include "core/safetensors.h"
#include "core/stream_handoff.h"
#include "model/vae.h"
#include "pipeline/clip_loader.h"
#include "pipeline/clip_workers.h"
#include "pipeline/failure_budget.h"
#include "pipeline/motion.h"
#include "pipeline/text_cache.h"
#include "pipeline/video_manifest.h"

namespace tt {
namespace {

class VideoTrainingData : public TrainingData {
 public:
  VideoTrainingData(const VideoTrainingOptions& options, torch::Device device, const StoredDataState* stored)
      : options_(options), device_(device) {
    buckets_ = options.buckets;
    samplers_ = options.samplers;
    TT_ASSERT(samplers_.size() == buckets_.size(), samplers_.size(), " samplers for ", buckets_.size(), " buckets");
    reader_options_ = options.reader;
    // One reader per sample: what one learns about a file (warnings given, seeks that do not land)
    // serves the next.
    if (!reader_options_.notes) reader_options_.notes = std::make_shared<VideoFileNotes>();
    vae_dtype_ = device.is_cuda() ? torch::kBFloat16 : torch::kFloat32;
    augment_ = options.augment;
    augment_.dtype = vae_dtype_;
    load_vae();
    if (options.motion.flow.algorithm != "none") {
      flow_ = std::make_unique<FlowEstimatorPool>(options.motion.flow, device_);
      if (!flow_->choice().reason.empty()) spdlog::warn("data_pipeline.optical_flow: {}", flow_->choice().reason);
      if (!flow_->enabled()) flow_.reset();
    }
    check_rows();
    measure_vae_memory();
    failures_ = FailureBudget(options.max_failed_share, static_cast<int64_t>(rows_.size()));
    content_hash_ = compute_content_hash();
    if (stored && stored->content_hash == content_hash_ && !stored->row_buckets.empty())
      use_stored_buckets(stored->row_buckets);
    else
      assign_buckets();
  }

  std::string content_hash() const override { return content_hash_; }
  std::string row_identity(int64_t index) const override {
    const VideoManifestRow& row = rows_[static_cast<size_t>(index)];
    const int64_t bucket = row_bucket_[static_cast<size_t>(index)];
    std::string identity = str_cat("video ", row.video, " (", file_stamp(row.video), "), text ", row.text_embeddings,
                                   " (", file_stamp(row.text_embeddings), "), bucket ");
    if (bucket < 0) return identity + "none";
    const Bucket& b = buckets_[static_cast<size_t>(bucket)];
    identity += str_cat(b.frames, "x", b.height, "x", b.width);
    // Motion sampling draws its windows by the profile: another profile, other frames.
    if (!profiles_.empty() && profiles_[static_cast<size_t>(index)]) {
      const MotionProfile& profile = *profiles_[static_cast<size_t>(index)];
      identity += ", motion";
      for (size_t k = 0; k < profile.score.size(); ++k) identity += str_cat(" ", profile.at[k], ":", profile.score[k]);
    }
    return identity;
  }

  std::vector<int64_t> row_buckets() const override { return row_bucket_; }
  std::vector<std::vector<int64_t>> bucket_latent_shapes() const override { return latent_shapes_; }

  int64_t size() const override { return static_cast<int64_t>(rows_.size()); }
  std::vector<int64_t> latent_shape() const override { return latent_shapes_.front(); }
  int64_t text_length() const override { return text_length_; }
  double side_memory_bytes() const override { return vae_activation_bytes_; }
  std::string describe() const override {
    std::string buckets;
    for (size_t b = 0; b < buckets_.size(); ++b) {
      const int64_t rows = std::count(row_bucket_.begin(), row_bucket_.end(), static_cast<int64_t>(b));
      buckets += str_cat(b == 0 ? "" : ", ", buckets_[b].frames, "x", buckets_[b].height, "x", buckets_[b].width, ": ",
                         rows, " clips");
    }
    const VideoVaeOptions& vae = options_.vae;
    return str_cat(options_.manifest, " (videos -> ", buckets, "; ", frame_sample_mode_name(samplers_[0].mode),
                   " sampling, flow stage ", flow_ ? flow_->choice().algorithm : std::string("off"), ", VAE ",
                   vae.preset,
                   vae.weights && *vae.weights != "random" ? " from " + *vae.weights : std::string(" (random weights)"),
                   ")");
  }

  LatentBatch get_batch(const std::vector<int64_t>& indices, const std::vector<int64_t>& epochs) override {
    std::vector<torch::Tensor> latents, states, masks, pooled;
    for (size_t i = 0; i < indices.size(); ++i) {
      Sample sample = load_with_replacement(indices[i], epochs[i]);
      latents.push_back(sample.latents);
      states.push_back(sample.text_states);
      masks.push_back(sample.text_mask);
      pooled.push_back(sample.pooled);
    }
    return {torch::stack(latents), torch::stack(states), torch::stack(masks), torch::stack(pooled)};
  }

 private:
  using Sample = LatentSample;

 public:
  LatentSample load_one(int64_t index, int64_t epoch) override { return load(index, epoch); }

  int64_t prepare_encoder(const std::vector<int64_t>& indices) override {
    if (!device_.is_cuda()) return 0;
    std::set<int64_t> buckets;
    for (int64_t index : indices) {
      const int64_t bucket = row_bucket_[static_cast<size_t>(index)];
      if (bucket >= 0) buckets.insert(bucket);
    }
    std::set<std::vector<int64_t>> shapes;  // buckets of one size share their passes
    for (int64_t bucket : buckets) {
      const Bucket& b = buckets_[static_cast<size_t>(bucket)];
      shapes.insert({1, 3, b.frames, b.height, b.width});
    }
    torch::NoGradGuard no_grad;
    for (const std::vector<int64_t>& shape : shapes) {
      const torch::Tensor pixels =
          torch::zeros(shape, torch::TensorOptions().device(device_).dtype(vae_dtype_));
      try {
        (void)vae_->encode_mean(pixels, tiling_);
      } catch (const c10::OutOfMemoryError& error) {
        throw Error(
            ErrorCode::kMemory,
            str_cat("the VAE encoder ran out of GPU memory encoding a blank ", shape[2], "x", shape[3], "x",
                    shape[4], " clip before the first one: ", first_line(error.what_without_backtrace())),
            "fewer --jobs, vae.tiling: on, vae.tile_batch: auto, or a smaller bucket");
      }
    }
    torch::cuda::synchronize(device_.index());
    return static_cast<int64_t>(shapes.size());
  }
  std::pair<int64_t, std::string> row_origin(int64_t index) const override {
    const VideoManifestRow& row = rows_[static_cast<size_t>(index)];
    return {row.line, row.video};
  }

 private:

  void load_vae() {
    const VideoVaeOptions& config = options_.vae;
    const HunyuanVaeConfig preset = hunyuan_vae_preset(config.preset);
    const bool random = config.weights && *config.weights == "random";
    if (config.weights && !random) {
      vae_ = load_hunyuan_vae(*config.weights, preset, device_, vae_dtype_);
    } else {
      TT_CHECK_HINT(config.preset == "tiny" || random, ErrorCode::kConfig,
                    "point tele_tron.vae.weights at the HunyuanVideo VAE (a diffusers folder's vae/); `random` "
                    "gives fixed random weights for benchmarks",
                    "tele_tron.vae.weights: the ", config.preset, " VAE needs its weights");
      if (random)
        spdlog::warn("tele_tron.vae.weights: random: the {} VAE has fixed random weights; its latents mean "
                     "nothing (benchmarks only)", config.preset);
      vae_ = HunyuanVae(preset);
      vae_->randomize_weights(20241203);
      vae_->to(device_, vae_dtype_);
      vae_->eval();
      for (auto& p : vae_->parameters()) p.set_requires_grad(false);
    }
    TT_CHECK_HINT(vae_->config().latent_channels == options_.latent_channels, ErrorCode::kConfig,
                  "use a VAE and a model that agree on latent channels", "the VAE gives ",
                  vae_->config().latent_channels, " latent channels, the model takes ", options_.latent_channels);
    for (const Bucket& b : buckets_) latent_shapes_.push_back(vae_latent_shape(vae_->config(), b.frames, b.height, b.width));
    // Buckets fix the VAE's input shapes, so cuDNN's per-shape algorithm search pays off after one batch.
    // TELETRON_CUDNN_BENCHMARK=0 keeps cuDNN's heuristic choice instead: the same algorithms in every
    // process, which tests that compare runs across processes need.
    const char* benchmark = std::getenv("TELETRON_CUDNN_BENCHMARK");
    if (device_.is_cuda()) at::globalContext().setBenchmarkCuDNN(!(benchmark && std::string(benchmark) == "0"));
    VaeRuntime runtime;
    runtime.tile_batch = config.tile_batch;
    runtime.norm_pads = runtime.fold_bias = runtime.border_kernel = config.fused_padding;
    runtime.gemm_first_and_attention = config.gemm_kernels;
    runtime.cuda_graphs = config.cuda_graphs;
    vae_->set_runtime(runtime);
    if (config.tiling == "on") {
      tiling_.temporal = true;
      tiling_.spatial = true;
    } else if (config.tiling == "off") {
      tiling_.temporal = false;
      tiling_.spatial = false;
    }  // auto: diffusers' default (windows of 16 + 1 frames, no spatial tiles)
  }

  // CUDA: the activations of the encoder's largest pass in each bucket (window, tile or batch of them,
  // as vae.tiling and vae.tile_batch make them), measured by encoding blank pixels of that shape
  // once (cuDNN's algorithm search for it happens here too). The largest must fit vae.memory_share
  // of the device; side_memory_bytes() hands it to the trainer's budget.
  void measure_vae_memory() {
    if (!device_.is_cuda()) return;
    const double total = static_cast<double>(gpu_memory(device_).total);
    const double allowed = options_.vae.memory_share * total;
    std::string largest;
    std::map<std::vector<int64_t>, double> measured;  // buckets whose largest passes are alike: once
    for (const Bucket& b : buckets_) {
      const std::vector<int64_t> shape = largest_pass(b, tiling_);
      auto found = measured.find(shape);
      if (found == measured.end()) found = measured.emplace(shape, pass_bytes(b, shape)).first;
      const double bytes = found->second;
      if (bytes > allowed) {
        std::string ways;
        if (!tiling_.spatial) {
          // Offered only where tiles split the bucket's pass: the same shape measured twice can differ
          // (the first run includes cuDNN's algorithm search), which must not pass for a saving.
          VaeTiling tiles = tiling_;
          tiles.temporal = tiles.spatial = true;
          const std::vector<int64_t> tiled_shape = largest_pass(b, tiles);
          if (tiled_shape != shape) {
            auto tiled = measured.find(tiled_shape);
            if (tiled == measured.end()) tiled = measured.emplace(tiled_shape, pass_bytes(b, tiled_shape)).first;
            if (tiled->second < bytes)
              ways = str_cat("vae.tiling: on (256-px tiles: ", gib_text(tiled->second), " for this bucket); ");
          }
        }
        if (options_.vae.tile_batch != kTileBatchAuto) ways += "vae.tile_batch: auto; ";
        throw Error(ErrorCode::kMemory,
                    str_cat("the VAE encoder needs ", gib_text(bytes), " of GPU memory for the largest pass of bucket ",
                            b.frames, "x", b.height, "x", b.width, " (vae.tiling: ", options_.vae.tiling,
                            "), more than vae.memory_share = ", options_.vae.memory_share, " of the GPU's ",
                            gib_text(total), " (", gib_text(allowed), ")"),
                    str_cat("ways out: ", ways, "a smaller bucket; or raise vae.memory_share (the training step "
                            "gets the rest)"));
      }
      if (bytes > vae_activation_bytes_) {
        vae_activation_bytes_ = bytes;
        largest = str_cat(b.frames, "x", b.height, "x", b.width);
      }
    }
    if (!largest.empty())
      spdlog::info("vae: the encoder's largest pass (bucket {}, vae.tiling: {}) takes {} of GPU memory, {:.1f} % "
                   "of the device (vae.memory_share allows {:.0f} %)",
                   largest, options_.vae.tiling, gib_text(vae_activation_bytes_),
                   100.0 * vae_activation_bytes_ / total, 100.0 * options_.vae.memory_share);
  }

  // The encoder's input for the largest pass of `bucket` under `tiling` (model/vae.h).
  std::vector<int64_t> largest_pass(const Bucket& bucket, const VaeTiling& tiling) const {
    return vae_largest_pass(vae_->config(), 1, bucket.frames, bucket.height, bucket.width, tiling,
                            options_.vae.tile_batch);
  }

  // The allocator's peak above what was allocated before, encoding blank pixels of `shape` (the
  // largest pass of `bucket`, named in errors).
  double pass_bytes(const Bucket& bucket, const std::vector<int64_t>& shape) {
    torch::NoGradGuard no_grad;
    const torch::Tensor pixels = torch::zeros(shape, torch::TensorOptions().device(device_).dtype(vae_dtype_));
    torch::cuda::synchronize(device_.index());
    const int64_t before = gpu_memory(device_).allocated;
    reset_peak_memory(device_);
    try {
      (void)vae_->moments(pixels);
      torch::cuda::synchronize(device_.index());
    } catch (const c10::OutOfMemoryError& error) {
      release_cached_memory(device_);
      throw Error(ErrorCode::kMemory,
                  str_cat("the VAE encoder ran out of GPU memory on its largest pass of bucket ", bucket.frames, "x",
                          bucket.height, "x", bucket.width, " (input ", c10::IntArrayRef(shape), "): ",
                          first_line(error.what_without_backtrace())),
                  "vae.tiling: on (256-px tiles), vae.tile_batch: auto, a smaller bucket, or a larger "
                  "train.memory_cap where it is below 1");
    }
    const GpuMemory after = gpu_memory(device_);
    return after.known ? static_cast<double>(std::max<int64_t>(0, after.peak - before)) : 0.0;
  }

  // Every row up front: a usable line, a video file that exists, embeddings of the right shapes and
  // one text length. Decoding problems are found while training (or before, by validate-data).
  void check_rows() {
    rows_ = read_video_manifest(options_.manifest);
    resolve_captions(rows_, open_text_cache(text_cache_folder(options_.text_cache, options_.manifest)));
    if (options_.min_motion || options_.max_motion) filter_by_motion();
    if (std::any_of(samplers_.begin(), samplers_.end(),
                    [](const FrameSamplerOptions& s) { return s.mode == FrameSampleMode::kMotion; }))
      read_motion_profiles();
    for (const VideoManifestRow& row : rows_) {
      const std::string where = str_cat(options_.manifest, ":", row.line);
      TT_CHECK_HINT(row.error.empty(), ErrorCode::kData, "fix the row (teletron validate-data checks them all)", where,
                    ": ", row.error);
      std::error_code ignored;
      TT_CHECK_HINT(std::filesystem::is_regular_file(row.video, ignored), ErrorCode::kData,
                    "paths in the manifest are relative to the manifest's folder", where, ": video not found (",
                    row.video, ")");
      TT_CHECK(row.text_error.empty(), ErrorCode::kData, where, " (", row.video, "): ", row.text_error);
      TT_CHECK_HINT(!row.text_embeddings.empty(), ErrorCode::kData,
                    "each row needs {\"video\": ..., \"caption\": \"...\"} (then `teletron encode-text CONFIG`), a "
                    "<video stem>.txt beside the clip, or {\"text_embeddings\": \"x.safetensors\"}", where,
                    ": no caption and no \"text_embeddings\"");
      const std::string problem = check_text_embeddings(row.text_embeddings, options_.text_dim, options_.pooled_dim);
      TT_CHECK_HINT(problem.empty(), ErrorCode::kData, "re-create the embeddings file", where, ": ", problem);
      const int64_t length = safetensors::read_header(row.text_embeddings).tensors.at("text_states").shape[0];
      TT_CHECK_HINT(text_length_ == 0 || length == text_length_, ErrorCode::kData,
                    "pad every row's text to one length", where, ": text length ", length, " differs from ",
                    text_length_, " in earlier rows");
      text_length_ = length;
    }
  }

  // frame_sampler mode motion: every row's motion profile from the manifest's motion cache.
  void read_motion_profiles() {
    const std::string path = MotionCache::path_for(options_.manifest);
    const MotionCache cache = MotionCache::read(path);
    int64_t missing = 0;
    std::string first_missing;
    profiles_.clear();
    for (const VideoManifestRow& row : rows_) {
      std::optional<MotionProfile> profile;
      if (row.error.empty()) profile = cache.profile_of(row.video);
      if (row.error.empty() && !profile && missing++ == 0)
        first_missing = str_cat(options_.manifest, ":", row.line, " (", row.video, ")");
      profiles_.push_back(profile ? std::make_shared<const MotionProfile>(std::move(*profile)) : nullptr);
    }
    TT_CHECK_HINT(missing == 0, ErrorCode::kConfig,
                  str_cat("run `teletron validate-data CONFIG --motion` (it records each clip's profile in ", path,
                          "), or use data_pipeline.frame_sampler.mode: fps"),
                  "data_pipeline.frame_sampler.mode: motion: ", missing, " of ", rows_.size(),
                  " clips have no current motion profile in ", path, ", the first ", first_missing);
  }

  // data.min_motion / max_motion: the rows whose score in the manifest's motion cache is in range.
  void filter_by_motion() {
    const std::string path = MotionCache::path_for(options_.manifest);
    const MotionCache cache = MotionCache::read(path);
    const double low = options_.min_motion.value_or(0.0);
    const double high = options_.max_motion.value_or(std::numeric_limits<double>::infinity());
    std::vector<VideoManifestRow> kept;
    int64_t unscored = 0, below = 0, above = 0;
    std::string first_unscored;
    for (const VideoManifestRow& row : rows_) {
      if (!row.error.empty()) {
        kept.push_back(row);  // reported by check_rows
        continue;
      }
      const std::optional<double> score = cache.score_of(row.video);
      if (!score) {
        if (unscored++ == 0) first_unscored = str_cat(options_.manifest, ":", row.line, " (", row.video, ")");
        continue;
      }
      if (*score < low) {
        ++below;
      } else if (*score > high) {
        ++above;
      } else {
        kept.push_back(row);
      }
    }
    TT_CHECK_HINT(unscored == 0, ErrorCode::kConfig,
                  str_cat("run `teletron validate-data CONFIG --motion` to score them (it writes ", path,
                          "), or drop data.min_motion / data.max_motion"),
                  "data.min_motion / data.max_motion: ", unscored, " of ", rows_.size(),
                  " clips have no current motion score in ", path, ", the first ", first_unscored);
    TT_CHECK_HINT(!kept.empty(), ErrorCode::kData, "widen data.min_motion / data.max_motion",
                  "data.min_motion / data.max_motion leave no clip: ", below, " below ", low, ", ", above, " above ",
                  high, " pixels per frame");
    spdlog::info("data: motion scores {}..{} px/frame kept {} of {} clips ({} stiller, {} moving more)", low, high,
                 kept.size(), rows_.size(), below, above);
    rows_ = std::move(kept);
  }

  void prepare(const std::vector<int64_t>& indices, const std::vector<int64_t>& epochs) override {
    if (options_.workers <= 0) return;
    if (!workers_) {
      if (reader_options_.device.is_cpu() && device_.is_cuda()) {
        // The CPU path of a GPU run works in parallel across clips: each worker gets an equal share
        // of the cores for its decoder and its augmentation, rather than every worker's threads on
        // every core. (CPU training keeps the defaults: its step needs the cores too.)
        const int share = std::max<int>(1, allowed_cpu_count() / static_cast<int>(options_.workers));
        reader_options_.thread_count = share;
        at::set_num_threads(share);
      }
      workers_ = std::make_unique<ClipWorkers>(options_.workers, device_,
                                               [this](int64_t row, int64_t epoch) { return load_pixels(row, epoch); });
    }
    for (size_t i = 0; i < indices.size(); ++i) workers_->submit(indices[i], epochs[i]);
  }

  // Sample -> decode -> colour -> augment, on the reader's device. Thread-safe.
  LoadedClip load_pixels(int64_t index, int64_t epoch) const {
    const VideoManifestRow& row = rows_[static_cast<size_t>(index)];
    VideoReader reader(row.video, reader_options_);
    const int64_t bucket = row_bucket_[static_cast<size_t>(index)];
    TT_CHECK(bucket >= 0, ErrorCode::kData, row.video, ": fits none of tele_tron.data.buckets");
    ClipRequest request;
    request.sampler = samplers_[static_cast<size_t>(bucket)];
    request.augment = augment_;
    request.height = buckets_[static_cast<size_t>(bucket)].height;
    request.width = buckets_[static_cast<size_t>(bucket)].width;
    request.seed = options_.seed;
    request.epoch = epoch;
    request.sample_index = index;
    request.time_gpu_stages = device_.is_cuda();
    if (!profiles_.empty()) request.motion = profiles_[static_cast<size_t>(index)];
    return load_clip(reader, request);
  }

  PipelineGpuTime take_gpu_time() override {
    std::lock_guard<std::mutex> lock(timing_mutex_);
    while (!timing_.empty()) {
      const Timing& t = timing_.front();
      auto pending = [](const std::shared_ptr<GpuInterval>& interval) { return interval && !interval->done(); };
      if (pending(t.before_vae) || pending(t.vae) || pending(t.flow)) break;
      if (t.vae) {
        timed_.before_vae_ms += t.before_vae ? t.before_vae->elapsed_ms() : 0.0;
        timed_.vae_ms += t.vae->elapsed_ms();
        timed_.flow_ms += t.flow ? t.flow->elapsed_ms() : 0.0;
        ++timed_.samples;
      }
      if (t.motion.defined()) {
        timed_.motion_sum += t.motion.item<double>();  // arrived: the flow interval, which holds its copy, is done
        ++timed_.motion_samples;
      }
      timing_.pop_front();
    }
    return std::exchange(timed_, PipelineGpuTime{});
  }

  Sample load(int64_t index, int64_t epoch) {
    const VideoManifestRow& row = rows_[static_cast<size_t>(index)];
    LoadedClip clip;
    std::optional<ClipWorkers::Result> ahead = workers_ ? workers_->take(index, epoch) : std::nullopt;
    if (ahead) {
      if (ahead->error) std::rethrow_exception(ahead->error);
      clip = std::move(ahead->clip);
      ahead->ready.accept({clip.pixels});  // made on the worker's stream, read on this one
    } else {
      clip = load_pixels(index, epoch);
    }
    Sample sample;
    {
      torch::NoGradGuard no_grad;
      const torch::Tensor pixels =
          clip.pixels.unsqueeze(0).to(device_, vae_dtype_, /*non_blocking=*/clip.pixels.is_pinned());  // (1, 3, T, H, W)
      Timing timing;
      timing.before_vae = clip.gpu_stages;
      if (flow_ && pixels.size(2) >= 2) {  // a one-frame sample (an image bucket) has no frame pair
        // The flow stage: the score is copied to the host behind the flow's kernels and read once
        // the interval around both has passed (never waited for here). It only measures: a
        // failure is logged (the first few) and the sample goes on without a score.
        FlowEstimator& estimator = flow_->for_this_thread();  // made outside the timed interval
        try {
          timing.flow = GpuInterval::start(device_);
          const torch::Tensor score = sample_motion(pixels.squeeze(0), options_.motion, estimator).to(torch::kFloat32);
          timing.motion =
              torch::empty({}, torch::TensorOptions().dtype(torch::kFloat32).pinned_memory(device_.is_cuda()));
          timing.motion.copy_(score, /*non_blocking=*/device_.is_cuda());
          if (timing.flow) timing.flow->stop();
        } catch (const std::exception& error) {
          timing.flow.reset();
          timing.motion = torch::Tensor();
          if (flow_failures_++ < 3)
            spdlog::warn("data_pipeline.optical_flow: no motion score for {} (line {}): {}", row.video, row.line,
                         first_line(error.what()));
        }
      }
      timing.vae = GpuInterval::start(device_);
      sample.latents = vae_->encode_mean(pixels, tiling_).squeeze(0).to(torch::kFloat32);
      if (timing.vae) timing.vae->stop();
      if (timing.vae || timing.motion.defined()) {
        std::lock_guard<std::mutex> lock(timing_mutex_);
        timing_.push_back(std::move(timing));
        // Nobody reads them in preprocess: keep a bounded number (training reads them every log row).
        if (timing_.size() > 4096) timing_.pop_front();
      }
    }
    auto text = safetensors::load(row.text_embeddings, {"text_states", "text_mask", "pooled"});
    sample.text_states = text.at("text_states").to(torch::kFloat32);
    sample.text_mask = text.at("text_mask").to(torch::kBool);
    sample.pooled = text.at("pooled").to(torch::kFloat32);
    // The text tensors (small, on the host) are checked here; the VAE's latents are not, which would
    // wait for the encode on this thread.
    LatentSample text_only{torch::Tensor(), sample.text_states, sample.text_mask, sample.pooled};
    const std::string problem = check_sample_values(text_only);
    TT_CHECK_HINT(problem.empty(), ErrorCode::kData, "re-create the row's text embeddings file, or drop the row",
                  options_.manifest, ":", row.line, ": ", row.text_embeddings, ": ", problem);
    return sample;
  }

  Sample load_with_replacement(int64_t index, int64_t epoch) {
    const int64_t rows = size();
    const int64_t bucket = row_bucket_[static_cast<size_t>(index)];
    for (int64_t attempt = 0; attempt < rows; ++attempt) {
      const int64_t candidate = (index + attempt) % rows;
      if (row_bucket_[static_cast<size_t>(candidate)] != bucket) continue;  // a replacement keeps the batch's shape
      try {
        return load(candidate, epoch);
      } catch (const Error& error) {
        if (error.code() != ErrorCode::kDecode && error.code() != ErrorCode::kData && error.code() != ErrorCode::kIo)
          throw;
        const VideoManifestRow& row = rows_[static_cast<size_t>(candidate)];
        spdlog::warn("skipping sample (line {} of {}, {}): {}; {} failed so far", row.line, options_.manifest,
                     row.video, error.what(), failures_.failed() + 1);
        failures_.add(1, "samples that failed to load", str_cat("; the last: ", row.video));
      }
    }
    throw Error(ErrorCode::kData, "no sample of the manifest could be loaded");
  }

  // The manifest's bytes, then each row's video and embeddings stamps (see TrainingData::content_hash).
  std::string compute_content_hash() const {
    ContentHash hash;
    hash.add(read_text_file(options_.manifest));
    for (const VideoManifestRow& row : rows_) {
      hash.add_file_stamp(row.video);
      hash.add_file_stamp(row.text_embeddings);
    }
    return hash.hex();
  }

  // A resume's assignment, as the checkpoint kept it: no file is opened, so the epochs are dealt as
  // before even when a file has become unreadable since (it fails, and is replaced, when loaded).
  void use_stored_buckets(const std::vector<int64_t>& stored) {
    TT_CHECK_HINT(stored.size() == rows_.size(), ErrorCode::kCheckpoint,
                  "resume from a checkpoint of this manifest, or start a new run",
                  "the checkpoint's bucket assignment has ", stored.size(), " rows, ", options_.manifest, " ",
                  rows_.size());
    int64_t unfit = 0;
    for (int64_t bucket : stored) {
      TT_CHECK_HINT(bucket >= -1 && bucket < static_cast<int64_t>(buckets_.size()), ErrorCode::kCheckpoint,
                    "resume from a checkpoint of this config, or start a new run",
                    "the checkpoint's bucket assignment names bucket ", bucket, " but tele_tron.data.buckets has ",
                    buckets_.size());
      if (bucket < 0) ++unfit;
    }
    row_bucket_ = stored;
    spdlog::info("data: bucket assignment from the checkpoint ({} rows, {} left out), not probed again", rows_.size(),
                 unfit);
    TT_CHECK_HINT(unfit < static_cast<int64_t>(rows_.size()), ErrorCode::kData,
                  "check the buckets against the clips with `teletron validate-data`", options_.manifest,
                  ": no row fits any of data.buckets");
  }

  // Each row goes to the bucket it can fill (enough frames for that bucket's sampler, a displayed
  // size at least the bucket's) whose aspect ratio is closest to the clip's; ties go to the larger
  // bucket. Rows that fit none are left out, and said so.
  void assign_buckets() {
    VideoReaderOptions probe = reader_options_;
    probe.device = torch::kCPU;  // opening and indexing only: no decoder session needed
    probe.allow_nvdec = false;
    probe.quiet = true;
    int64_t unfit = 0, unreadable = 0;
    std::string examples;
    for (const VideoManifestRow& row : rows_) {
      int64_t chosen = -1;
      std::string why = "fits no bucket";
      try {
        VideoReader reader(row.video, probe);
        const VideoInfo& info = reader.info();
        // As shown: an anamorphic frame's width counts with its pixel aspect.
        const int64_t shown_width = info.shown_width();
        const double width = static_cast<double>(shown_width);
        const double height = info.displayed_height();
        const std::vector<double> times = reader.index().times();
        double best = 0.0;
        for (size_t b = 0; b < buckets_.size(); ++b) {
          const Bucket& bucket = buckets_[b];
          if (!fit_bucket(bucket, samplers_[b], times, shown_width, info.displayed_height()).both()) continue;
          const double mismatch = std::fabs(std::log((width / height) /
                                                     (static_cast<double>(bucket.width) / static_cast<double>(bucket.height))));
          const double area = static_cast<double>(bucket.width * bucket.height);
          const double score = mismatch - 1e-9 * area;
          if (chosen < 0 || score < best) {
            chosen = static_cast<int64_t>(b);
            best = score;
          }
        }
        if (chosen < 0)
          why = str_cat(info.frame_count, " frames at ", static_cast<int64_t>(width), "x", static_cast<int64_t>(height),
                        " fit no bucket");
      } catch (const Error& error) {
        why = error.what();
        ++unreadable;  // a failure, unlike a clip that is merely too short or too small
      }
      row_bucket_.push_back(chosen);
      if (chosen < 0) {
        ++unfit;
        if (unfit <= 3) examples += str_cat("\n  line ", row.line, " ", row.video, ": ", why);
      }
    }
    if (unfit > 0)
      spdlog::warn("{} of {} rows fit none of data.buckets and are left out (teletron validate-data lists them):{}",
                   unfit, rows_.size(), examples);
    failures_.add(unreadable, "videos that cannot be opened", examples);
    TT_CHECK_HINT(unfit < static_cast<int64_t>(rows_.size()), ErrorCode::kData,
                  "check the buckets against the clips with `teletron validate-data`", options_.manifest,
                  ": no row fits any of data.buckets");
  }

  VideoTrainingOptions options_;
  torch::Device device_;
  std::vector<Bucket> buckets_;
  std::vector<FrameSamplerOptions> samplers_;
  std::vector<int64_t> row_bucket_;
  AugmentOptions augment_;
  VideoReaderOptions reader_options_;
  torch::Dtype vae_dtype_ = torch::kFloat32;
  double vae_activation_bytes_ = 0;  // measure_vae_memory(): the encoder's largest pass (CUDA)
  HunyuanVae vae_{nullptr};
  VaeTiling tiling_;
  std::vector<VideoManifestRow> rows_;
  std::vector<std::shared_ptr<const MotionProfile>> profiles_;  // per row, with frame_sampler mode motion
  std::vector<std::vector<int64_t>> latent_shapes_;
  int64_t text_length_ = 0;
  FailureBudget failures_{0.0, 0};
  std::string content_hash_;
  std::mutex timing_mutex_;  // load() runs on the producer (and preprocess's jobs), take_gpu_time() on the trainer
  struct Timing {
    std::shared_ptr<GpuInterval> before_vae, vae, flow;  // null on the CPU (and before_vae for CPU-side clips)
    torch::Tensor motion;                                 // the flow stage's score on the host (0-dim float)
  };
  std::deque<Timing> timing_;
  std::unique_ptr<FlowEstimatorPool> flow_;  // the flow stage, when data_pipeline.optical_flow gives one
  std::atomic<int64_t> flow_failures_{0};     // flow-stage failures, for the first warnings
  PipelineGpuTime timed_;
  std::unique_ptr<ClipWorkers> workers_;  // made by the first prepare(); joined before the members above go
};

}  // namespace

std::unique_ptr<TrainingData> make_video_training_data(const VideoTrainingOptions& options, torch::Device device,
                                                       const StoredDataState* stored) {
  return std::make_unique<VideoTrainingData>(options, device, stored);
}

}  // namespace tt
