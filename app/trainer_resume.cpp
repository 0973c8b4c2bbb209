// Checkpoints and resume for the Trainer (see trainer_impl.h): saving a checkpoint, finding the
// one a resume continues, checking its config and data against this run's, and restoring it.
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <cstdlib>

#include "app/model_setup.h"
#include "app/options.h"
#include "app/trainer_impl.h"
#include "core/autocast.h"
#include "core/checkpoint.h"
#include "core/device.h"
#include "core/errors.h"
#include "core/safetensors.h"
#include "model/lora_io.h"
#include "model/text_padding.h"

namespace tt {

namespace fs = std::filesystem;

namespace {
// The checkpoint format this teletron writes (state.json "format"); it reads 1 up to this.
constexpr int64_t kCheckpointFormat = 3;
}  // namespace

void Trainer::save_checkpoint() {
  if (metrics_) metrics_->sync();  // every row up to this step is durable before the checkpoint is
  checkpoint::Checkpoint ckpt;
  ckpt.step = step_;
  // A LoRA run's adapters alone, in the PEFT layout diffusers' load_lora_weights reads (model/lora_io.h).
  ckpt.model = snapshot_weights(lora_ ? lora_file_tensors(*lora_) : model_->diffusers_parameters());
  if (lora_) {
    ckpt.model_file = checkpoint::kLoraWeightsFile;
    ckpt.model_metadata = lora_metadata(*lora_);
  }
  // A finite loss and gradient can still give a non-finite update (an absurd learning rate
  // overflows the weights): such weights are never written over a good checkpoint.
  for (const auto& [name, tensor] : ckpt.model)
    TT_CHECK_HINT(torch::isfinite(tensor).all().item<bool>(), ErrorCode::kNan,
                  "lower tele_tron.optimizer.lr; resume from the last checkpoint with --resume auto",
                  "weight ", name, " is not finite after step ", step_, " (the update overflowed); checkpoint not written");
  for (auto& [key, value] : optimizer_->state_dict()) ckpt.state[key] = value;
  for (auto& [key, value] : scaler_->state_dict()) ckpt.state[key] = value;
  // train.ema_decay: the averages under "ema." + their weights' keys (host copies, as the weights).
  if (!ema_.empty())
    for (auto& [key, value] : snapshot_weights(ema_state())) ckpt.state[key] = std::move(value);
  // batch_size: dynamic: each bucket's micro-batch (int64 (buckets, 2): bucket, micro-batch).
  if (!micro_batch_.empty()) {
    std::vector<int64_t> pairs;
    for (const auto& [bucket, micro] : micro_batch_) pairs.insert(pairs.end(), {bucket, micro});
    ckpt.state["dynamic.micro_batches"] =
        torch::tensor(pairs, torch::kInt64).view({static_cast<int64_t>(micro_batch_.size()), 2});
  }
  // The bucket assignment the epochs are dealt from, reused on resume (int64 (rows), -1: no bucket).
  if (!cursor_.row_bucket.empty()) ckpt.state["data.row_buckets"] = torch::tensor(cursor_.row_bucket, torch::kInt64);
  ckpt.info["step"] = step_;
  ckpt.info["data"] = {{"epoch", position_.epoch},
                       {"index", position_.index},
                       {"rows", dataset_->size()},
                       {"unit", "sample"},
                       {"step_samples", cursor_.step_samples},
                       {"bucket_samples", cursor_.bucket_samples},
                       {"manifest_hash", dataset_->content_hash()}};
  ckpt.info["seed"] = config_.train.seed;
  ckpt.info["device"] = device_.str();
  ckpt.info["config"] = config_to_yaml(config_);
  // 2: data.index counts samples in bucket mode too (format 1 counted batches), manifest_hash and
  // data.row_buckets added. 3: the noise is keyed by (seed, step, sample), no generator state.
  ckpt.info["format"] = kCheckpointFormat;
  // The snapshot above is host memory nothing else touches: the write happens behind the next
  // steps (a failed write stops the run at the next checkpoint or at its end).
  writer_->submit(std::move(ckpt));
}

std::optional<std::string> Trainer::find_resume_folder() const {
  const fs::path checkpoints = run_dir_ / "checkpoints";
  if (resume_ == "auto") {
    std::optional<std::string> folder = checkpoint::find_latest(checkpoints.string());
    // A damaged step folder newer than the one to resume from would be passed over silently and,
    // once the run reaches its step again, replaced: stop instead, naming it.
    for (const auto& [damaged, why] : checkpoint::list_damaged(checkpoints.string())) {
      if (folder && checkpoint::parse_folder_step(fs::path(damaged).filename().string()) <
                        checkpoint::parse_folder_step(fs::path(*folder).filename().string()))
        continue;
      throw Error(ErrorCode::kCheckpoint,
                  str_cat("--resume auto: ", damaged, " is not a complete checkpoint: ", why,
                          folder ? str_cat("; the newest complete one is ", *folder) : std::string("; no complete one is older")),
                  "move the damaged folder out of checkpoints/ (teletron would write over it), then run again; or "
                  "pass --resume with the checkpoint folder to start from");
    }
    if (!folder) spdlog::info("--resume auto: no checkpoint in {}, starting from step 0", checkpoints.string());
    return folder;
  }
  if (checkpoint::is_complete(resume_)) return resume_;
  std::optional<std::string> folder = checkpoint::find_latest((fs::path(resume_) / "checkpoints").string());
  TT_CHECK_HINT(folder.has_value(), ErrorCode::kCheckpoint,
                "pass a folder like runs/train/checkpoints/step_0000500, a run folder, or --resume auto",
                "--resume ", resume_, ": not a complete checkpoint folder (", checkpoint::damage_of(resume_),
                ") and no checkpoints inside it");
  return folder;
}

namespace {

// What resume reads from state.json, checked before anything is built from it: a crafted or
// damaged file is TT_ERR_CHECKPOINT naming the field, not a negative epoch fed to the sampler.
void check_stored_state(const nlohmann::json& info, const std::string& folder) {
  auto fail = [&](const std::string& problem) {
    throw Error(ErrorCode::kCheckpoint, str_cat("checkpoint ", folder, ": state.json ", problem));
  };
  auto integer_at_least = [&](const nlohmann::json& object, const char* key, int64_t least, bool required) {
    auto found = object.find(key);
    if (found == object.end()) {
      if (required) fail(str_cat("has no \"", key, "\""));
      return least;
    }
    if (!found->is_number_integer() || found->get<int64_t>() < least)
      fail(str_cat("\"", key, "\" must be an integer >= ", least, ", got ", found->dump()));
    return found->get<int64_t>();
  };
  const int64_t step = integer_at_least(info, "step", 0, true);
  const std::optional<int64_t> named = checkpoint::parse_folder_step(fs::path(folder).filename().string());
  if (named && *named != step) fail(str_cat("says step ", step, " but the folder is ", fs::path(folder).filename().string()));
  const int64_t format = integer_at_least(info, "format", 1, false);
  if (format > kCheckpointFormat)
    throw Error(ErrorCode::kCheckpoint,
                str_cat("checkpoint ", folder, " has format ", format, "; this teletron reads formats 1 to ",
                        kCheckpointFormat),
                "resume it with the teletron that wrote it (a newer one)");
  auto data = info.find("data");
  if (data == info.end() || !data->is_object()) fail("has no \"data\" object (the data position)");
  integer_at_least(*data, "epoch", 0, true);
  const int64_t index = integer_at_least(*data, "index", 0, true);
  const int64_t rows = integer_at_least(*data, "rows", 1, true);
  if (index > rows) fail(str_cat("\"data\": index ", index, " is past the ", rows, " rows it counts"));
  integer_at_least(*data, "step_samples", 1, false);
  if (auto buckets = data->find("bucket_samples"); buckets != data->end()) {
    if (!buckets->is_array()) fail("\"data\": \"bucket_samples\" must be a list of integers >= 1");
    for (const auto& samples : *buckets)
      if (!samples.is_number_integer() || samples.get<int64_t>() < 1)
        fail(str_cat("\"data\": \"bucket_samples\" must be a list of integers >= 1, got ", buckets->dump()));
  }
}

}  // namespace

std::optional<StoredDataState> Trainer::check_resume(const std::string& folder) {
  const nlohmann::json info = checkpoint::load_state_json(folder);
  check_stored_state(info, folder);
  auto stored_config = info.find("config");
  TT_CHECK_HINT(stored_config != info.end() && stored_config->is_string(), ErrorCode::kCheckpoint,
                "resume from a checkpoint that `teletron train` wrote", "checkpoint ", folder,
                ": state.json has no \"config\" to compare the new config with");
  resume_check_ = check_resume_config(stored_config->get<std::string>(), config_, info.at("step").get<int64_t>(),
                                      folder, allow_change_);
  for (const std::string& note : resume_check_.notes) spdlog::info("resume: {}", note);
  for (const std::string& warning : resume_check_.warnings) spdlog::warn("resume: {}", warning);
  if (resume_check_.changed.empty()) spdlog::info("resume: the config is the checkpoint's");

  StoredDataState stored;
  const nlohmann::json data = info.value("data", nlohmann::json::object());
  stored.content_hash = data.value("manifest_hash", std::string());
  // The stored assignment holds while what decides it is unchanged: the buckets, and the sampler
  // that must find each bucket's frames in the clip (the files themselves: the content hash).
  const bool assignment_holds = !resume_check_.changed_under("data.source") &&
                                !resume_check_.changed_under("data.buckets") &&
                                !resume_check_.changed_under("data_pipeline.frame_sampler");
  const std::string state_file = (fs::path(folder) / "state.safetensors").string();
  if (assignment_holds && safetensors::read_header(state_file).tensors.count("data.row_buckets")) {
    const torch::Tensor buckets =
        safetensors::load(state_file, {"data.row_buckets"}).at("data.row_buckets").to(torch::kInt64).contiguous();
    stored.row_buckets.assign(buckets.data_ptr<int64_t>(), buckets.data_ptr<int64_t>() + buckets.numel());
  }
  return stored;
}

void Trainer::check_resumed_data(const std::string& folder, const StoredDataState& stored) {
  if (stored.content_hash.empty()) {
    spdlog::warn("resume: {} holds no manifest content hash (an older teletron wrote it): the contents of {} are "
                 "not checked", folder, config_.data.manifest);
    return;
  }
  const std::string accepted =
      check_manifest_hash(stored.content_hash, dataset_->content_hash(), config_.data.manifest, folder, allow_change_);
  if (accepted.empty()) return;
  spdlog::warn("resume: {}", accepted);
  restart_epoch_ = true;
}

void Trainer::resume_from(const std::string& folder) {
  checkpoint::Checkpoint ckpt = checkpoint::load(folder);
  if (lora_) {
    TT_CHECK_HINT(ckpt.model_file == checkpoint::kLoraWeightsFile, ErrorCode::kCheckpoint,
                  "resume it without model.lora, or start the LoRA run from those weights with model.weights",
                  "checkpoint ", folder, " holds a full model (", ckpt.model_file, "), not LoRA adapters");
  } else {
    TT_CHECK_HINT(ckpt.model_file == checkpoint::kModelWeightsFile, ErrorCode::kCheckpoint,
                  "resume a LoRA run with its model.lora settings",
                  "checkpoint ", folder, " holds LoRA adapters (", ckpt.model_file, "), not a full model");
  }
  load_weights_into(lora_ ? lora_file_tensors(*lora_) : model_->diffusers_parameters(), ckpt.model,
                    folder + "/" + ckpt.model_file);
  optimizer_->load_state_dict(ckpt.state);
  if (auto micro = ckpt.state.find("dynamic.micro_batches"); dynamic_ && micro != ckpt.state.end()) {
    const torch::Tensor pairs = micro->second.to(torch::kInt64).contiguous();
    TT_CHECK(pairs.dim() == 2 && pairs.size(1) == 2, ErrorCode::kCheckpoint, folder,
             ": dynamic.micro_batches must be (buckets, 2), got ", pairs.sizes());
    const DynamicBatchSection& limits = config_.dynamic_batch;
    for (int64_t i = 0; i < pairs.size(0); ++i) {
      const int64_t bucket = pairs[i][0].item<int64_t>();
      // Within this run's limits, which a resume may have changed; measured already: not again.
      micro_batch_[bucket] = std::clamp(pairs[i][1].item<int64_t>(), limits.min, limits.max);
      measured_.insert(bucket);
    }
    spdlog::info("resume: the micro-batches of {} bucket(s) come from the checkpoint", pairs.size(0));
  }
  if (!ema_.empty()) {
    safetensors::TensorMap stored;
    for (const auto& [key, value] : ckpt.state)
      if (key.rfind("ema.", 0) == 0) stored[key] = value;
    if (stored.empty()) {
      spdlog::warn("resume: {} holds no EMA (train.ema_decay was 0 when it was written): the average starts from "
                   "the resumed weights", folder);
    } else {
      // Every average must be there with its shape (another model.lora.targets: kCheckpoint naming them).
      load_weights_into(ema_state(), stored, folder + "/state.safetensors (EMA)");
      ema_from_checkpoint_ = true;
    }
  }
  if (!scaler_->load_state_dict(ckpt.state))
    spdlog::info("resume: {} holds no loss scale (a bf16 or fp32 run): fp16 scaling starts from {:g}", folder,
                 config_.mixed_precision.init_scale);
  if (ckpt.info.value("format", 1) < 3)
    spdlog::warn("resume: {} was written by an older teletron that drew the noise from one generator: from step {} "
                 "on each sample's noise is keyed by (seed, step, sample), so the run does not continue as it "
                 "would have", folder, ckpt.step);
  const std::string written_on = ckpt.info.value("device", device_.str());
  if (written_on != device_.str())
    spdlog::warn("resume: {} was written on {}, resuming on {}: the same samples and noise, but the kernels round "
                 "differently, so the run is not continued bit for bit", folder, written_on, device_.str());
  step_ = ckpt.step;
  step_counter_.fill_(step_);
  const auto& data = ckpt.info.at("data");
  position_.epoch = data.at("epoch").get<int64_t>();
  position_.index = data.at("index").get<int64_t>();
  const int64_t rows = data.at("rows").get<int64_t>();
  const GlobalBatch stored_batch = global_batch_of(config_values(ckpt.info.value("config", std::string())));
  if (data.value("unit", std::string("sample")) == "batch") {
    // Format 1 in bucket mode: the index counted batches of batch_size, dealt batch_size at a time,
    // which is the dealing by global batch when there was no accumulation.
    if (stored_batch.accumulation == 1) {
      position_.index *= stored_batch.batch_size;
    } else {
      spdlog::warn("resume: {} was written by an older teletron that dealt the buckets by micro-batch: the data "
                   "order restarts at the next epoch", folder);
      restart_epoch_ = true;
    }
  }
  const int64_t step_samples = data.value("step_samples", stored_batch.samples());
  if (!cursor_.row_bucket.empty() && step_samples != cursor_.step_samples) {
    spdlog::warn("resume: the global batch changed from {} to {} samples: the buckets are dealt into groups of the "
                 "new size, so the data order restarts at the next epoch", step_samples, cursor_.step_samples);
    restart_epoch_ = true;
  } else if (!cursor_.row_bucket.empty() &&
             data.value("bucket_samples", std::vector<int64_t>{}) != cursor_.bucket_samples) {
    // token_budget's groups follow the buckets' shapes (another VAE or bucket list changes them).
    spdlog::warn("resume: the buckets' global batches (dynamic_batch.mode: token_budget) changed: the buckets are "
                 "dealt into groups of the new sizes, so the data order restarts at the next epoch");
    restart_epoch_ = true;
  }
  if (rows != dataset_->size()) {
    spdlog::warn("the manifest has {} rows but the checkpoint was written with {}: the data order restarts "
                 "at the next epoch", dataset_->size(), rows);
    restart_epoch_ = true;
  }
  if (restart_epoch_) {
    position_.epoch += 1;
    position_.index = 0;
  }
  spdlog::info("resumed from {} at step {} (epoch {}, sample {})", folder, step_, position_.epoch, position_.index);
}

}  // namespace tt
