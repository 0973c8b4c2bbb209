// What a resume may change (app/resume_check): one case per class of change — each blocked class
// stops with TT_ERR_CONFIG naming the key and both values, each safe class passes with a note,
// --allow-change lifts exactly the keys it names, the global batch may be split differently but not
// resized — plus the manifest content hash, the content fingerprint itself and the run folder's
// atomic files (core/metrics: the metrics.jsonl rewrite on resume, interrupted at each point).
// End-to-end resumes through the executable are in test_train.cpp.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <nlohmann/json.hpp>

#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "app/config.h"
#include "app/config_schema.h"
#include "core/content_hash.h"
#include "app/resume_check.h"
#include "core/errors.h"
#include "core/metrics.h"
#include "test/test_util.h"

using Catch::Matchers::ContainsSubstring;
using tt::test::TempDir;

namespace {

// A video run of the tiny preset, global batch 2 × 2, cosine schedule: every key class has a say.
tt::Config video_config(const std::vector<std::string>& sets = {}) {
  return tt::load_config_text(
      "tele_tron:\n"
      "  model: {preset: tiny}\n"
      "  data:\n    source: video\n    manifest: data/m.jsonl\n    buckets: [{frames: 5, height: 64, width: "
      "64}]\n"
      "  batch_size: 2\n"
      "  gradient_accumulation: 2\n"
      "  optimizer: {schedule: cosine, warmup_steps: 2}\n"
      "  train: {max_steps: 100, seed: 3, device: cpu}\n",
      "(test)", sets);
}

tt::Config latent_config(const std::vector<std::string>& sets = {}) {
  std::vector<std::string> all = {"data.source=latents"};
  all.insert(all.end(), sets.begin(), sets.end());
  return video_config(all);
}

tt::ResumeCheck compare(const tt::Config& before, const tt::Config& after,
                        const std::vector<std::string>& allowed = {}) {
  return tt::check_resume_config(tt::config_to_yaml(before), after, 50, "runs/x/checkpoints/step_0000050",
                                 allowed);
}

bool has(const std::vector<std::string>& list, const std::string& text) {
  for (const std::string& entry : list)
    if (entry.find(text) != std::string::npos) return true;
  return false;
}

// `set` applied to the video run must be refused, naming `key` with its old and new values.
void check_blocked(const std::string& set, const std::string& key) {
  INFO("--set " << set);
  const tt::Config before = video_config();
  const tt::Config after = video_config({set});
  const std::string old_value = tt::config_values(tt::config_to_yaml(before)).at(key);
  const std::string new_value = tt::config_values(tt::config_to_yaml(after)).at(key);
  REQUIRE(old_value != new_value);
  const tt::Error error = tt::test::expect_error([&] { compare(before, after); });
  CHECK(error.code() == tt::ErrorCode::kConfig);
  CHECK_THAT(std::string(error.what()), ContainsSubstring("tele_tron." + key + ": " + old_value +
                                                          " in the checkpoint, " + new_value + " now"));
  CHECK_THAT(std::string(error.what()), ContainsSubstring("step_0000050"));
  CHECK_THAT(error.hint(), ContainsSubstring("--allow-change " + key));
  // The same change, accepted by name: a warning, no error.
  const tt::ResumeCheck accepted = compare(before, after, {key});
  CHECK(has(accepted.warnings, "tele_tron." + key));
  CHECK(has(accepted.changed, key));
}

// `set` applied to `before`'s config must pass with an info note naming `key`.
void check_allowed(const tt::Config& before, const std::string& set, const std::string& key) {
  INFO("--set " << set);
  std::vector<std::string> sets = {set};
  if (before.data.source == "latents") sets.insert(sets.begin(), "data.source=latents");
  const tt::ResumeCheck check = compare(before, video_config(sets));
  CHECK(check.changed == std::vector<std::string>{key});
  CHECK(has(check.notes, key));
  CHECK(check.warnings.empty());
}

}  // namespace

TEST_CASE("resume check: the flattened config has every schema key, lists in flow style", "[resume]") {
  const auto values = tt::config_values(tt::config_to_yaml(video_config()));
  for (const tt::ConfigField& field : tt::config_fields()) {
    INFO(field.path);
    CHECK(values.count(field.path) == 1);
  }
  CHECK(values.size() == tt::config_fields().size());
  CHECK(values.at("data.buckets") == "[{frames: 5, height: 64, width: 64}]");
  CHECK(values.at("optimizer.betas") == "[0.9, 0.999]");
  CHECK(values.at("train.seed") == "3");
  CHECK(values.at("data_pipeline.frame_sampler.mode") == "fps");
  // The same config compares equal: nothing to say.
  const tt::ResumeCheck same = compare(video_config(), video_config());
  CHECK(same.changed.empty());
  CHECK(same.notes.empty());
}

TEST_CASE("resume check: every change to the run is TT_ERR_CONFIG naming the key and both values",
          "[resume]") {
  check_blocked("train.seed=4", "train.seed");                                         // the sample sequence
  check_blocked("data.buckets=[{frames: 9, height: 64, width: 64}]", "data.buckets");  // the dealing
  check_blocked("data.source=latents", "data.source");
  check_blocked("data_pipeline.frame_sampler.mode=uniform", "data_pipeline.frame_sampler.mode");
  check_blocked("data_pipeline.augment.flip=0.0", "data_pipeline.augment.flip");
  check_blocked("model.num_layers=3", "model.num_layers");  // the model shape
  check_blocked("model.preset=1b", "model.preset");
  check_blocked("vae.tiling=on", "vae.tiling");                               // the latents
  check_blocked("mixed_precision.enabled=false", "mixed_precision.enabled");  // the precision
  check_blocked("mixed_precision.master_weights=bf16", "mixed_precision.master_weights");  // the weights' dtype
  check_blocked("flow_matching.shift=3.0", "flow_matching.shift");            // the objective
  check_blocked("flow_matching.timestep_sampling=uniform", "flow_matching.timestep_sampling");
  check_blocked("optimizer.lr=0.001", "optimizer.lr");  // the optimizer
  check_blocked("optimizer.betas=[0.9, 0.95]", "optimizer.betas");
  check_blocked("optimizer.weight_decay=0.1", "optimizer.weight_decay");
  check_blocked("optimizer.warmup_steps=5", "optimizer.warmup_steps");
  check_blocked("optimizer.schedule=constant", "optimizer.schedule");
  check_blocked("optimizer.max_grad_norm=0.5", "optimizer.max_grad_norm");
  check_blocked("gradient_accumulation=3", "gradient_accumulation");  // the global batch
  // Not on the whitelist, so a change to the run, whatever it would do.
  check_blocked("data.caption_dropout=0.1", "data.caption_dropout");
  check_blocked("distributed.zero_stage=1", "distributed.zero_stage");
}

TEST_CASE("resume check: several changes are reported together, each with its --allow-change", "[resume]") {
  const tt::Error error = tt::test::expect_error([&] {
    compare(video_config(), video_config({"train.seed=4", "optimizer.lr=0.5"}));
  });
  CHECK(error.code() == tt::ErrorCode::kConfig);
  CHECK_THAT(std::string(error.what()),
             ContainsSubstring("tele_tron.train.seed: 3 in the checkpoint, 4 now"));
  CHECK_THAT(std::string(error.what()),
             ContainsSubstring("tele_tron.optimizer.lr: 1.0e-05 in the checkpoint, 0.5 now"));
  CHECK_THAT(error.hint(), ContainsSubstring("--allow-change optimizer.lr"));
  CHECK_THAT(error.hint(), ContainsSubstring("--allow-change train.seed"));
}

TEST_CASE("resume check: --allow-change lifts exactly the key it names", "[resume]") {
  const tt::Config before = video_config();
  const tt::ResumeCheck lifted = compare(before, video_config({"train.seed=4"}), {"train.seed"});
  CHECK(lifted.warnings.size() == 1);
  CHECK_THAT(lifted.warnings[0], ContainsSubstring("tele_tron.train.seed: 3 in the checkpoint, 4 now"));
  CHECK_THAT(lifted.warnings[0], ContainsSubstring("--allow-change train.seed"));
  CHECK(has(compare(before, before, {"train.seed"}).notes,
            "--allow-change train.seed: that key did not change"));
  // Another blocked change next to it still stops the resume, naming only that one.
  const tt::Error error = tt::test::expect_error([&] {
    compare(before, video_config({"train.seed=4", "flow_matching.shift=2.0"}), {"train.seed"});
  });
  CHECK(error.code() == tt::ErrorCode::kConfig);
  CHECK_THAT(std::string(error.what()), ContainsSubstring("flow_matching.shift"));
  CHECK_THAT(std::string(error.what()), !ContainsSubstring("train.seed"));
  // Keys are checked against the schema; the tele_tron. root is optional.
  CHECK(tt::normalize_allowed_changes({"tele_tron.train.seed", "data.manifest"}) ==
        std::vector<std::string>{"train.seed", "data.manifest"});
  const tt::Error typo = tt::test::expect_error([] { tt::normalize_allowed_changes({"train.sed"}); });
  CHECK(typo.code() == tt::ErrorCode::kConfig);
  CHECK_THAT(std::string(typo.what()), ContainsSubstring("train.sed"));
  CHECK_THAT(typo.hint(), ContainsSubstring("train.seed"));
}

TEST_CASE("resume check: cadence, paths, pipeline depth and execution knobs keep the run", "[resume]") {
  const tt::Config before = video_config();
  check_allowed(before, "train.log_every=1", "train.log_every");
  check_allowed(before, "train.checkpoint_every=7", "train.checkpoint_every");
  check_allowed(before, "train.keep_checkpoints=1", "train.keep_checkpoints");
  check_allowed(before, "train.output_dir=elsewhere", "train.output_dir");
  check_allowed(before, "train.device=auto", "train.device");
  check_allowed(before, "data.manifest=moved/m.jsonl", "data.manifest");
  check_allowed(before, "data.max_failed_share=0.5", "data.max_failed_share");
  check_allowed(before, "data_pipeline.prefetch=0", "data_pipeline.prefetch");
  check_allowed(before, "data_pipeline.workers=6", "data_pipeline.workers");
  check_allowed(before, "data_pipeline.video_decoding=cpu", "data_pipeline.video_decoding");
  check_allowed(before, "model.activation_checkpointing=true", "model.activation_checkpointing");
  check_allowed(before, "vae.tile_batch=1", "vae.tile_batch");
  check_allowed(before, "cuda_graph.enabled=false", "cuda_graph.enabled");
  check_allowed(before, "cuda_graph.warmup_steps=7", "cuda_graph.warmup_steps");
  check_allowed(before, "cuda_graph.threshold=1.5", "cuda_graph.threshold");
  check_allowed(before, "data.text_padding=full", "data.text_padding");
  check_allowed(before, "data.text_trim_multiple=16", "data.text_trim_multiple");
  check_allowed(before, "train.expandable_segments=true", "train.expandable_segments");
  check_allowed(before, "train.memory_cap=0.5", "train.memory_cap");
  // The flow stage only measures: a checkpoint of a run before it (algorithm none then) resumes.
  check_allowed(before, "data_pipeline.optical_flow.algorithm=none", "data_pipeline.optical_flow.algorithm");
  check_allowed(before, "data_pipeline.optical_flow.pairs=2", "data_pipeline.optical_flow.pairs");
}

TEST_CASE("resume check: max_steps may change; the note says what it does to the schedule", "[resume]") {
  const tt::ResumeCheck cosine = compare(video_config(), video_config({"train.max_steps=200"}));
  REQUIRE(cosine.notes.size() == 1);
  CHECK_THAT(cosine.notes[0], ContainsSubstring("tele_tron.train.max_steps: 100 -> 200"));
  CHECK_THAT(cosine.notes[0], ContainsSubstring("cosine decay is re-stretched to end at step 200"));
  const tt::ResumeCheck constant =
      compare(video_config({"optimizer.schedule=constant"}),
              video_config({"optimizer.schedule=constant", "train.max_steps=200"}));
  REQUIRE(constant.notes.size() == 1);
  CHECK_THAT(constant.notes[0], ContainsSubstring("constant after warmup"));
}

TEST_CASE("resume check: the global batch may be split differently, never resized", "[resume]") {
  const tt::Config before = video_config();  // 2 × 2 = 4 samples per step
  CHECK(tt::global_batch_of(before).samples() == 4);
  for (const auto& split : std::vector<std::vector<std::string>>{
           {"batch_size=4", "gradient_accumulation=1"}, {"batch_size=1", "gradient_accumulation=4"}}) {
    const tt::ResumeCheck check = compare(before, video_config(split));
    CHECK(check.warnings.empty());
    REQUIRE(check.notes.size() == 1);
    CHECK_THAT(check.notes[0], ContainsSubstring("the global batch stays 4 samples per step"));
  }
  for (const auto& resize :
       std::vector<std::vector<std::string>>{{"batch_size=4"}, {"gradient_accumulation=1"}}) {
    const tt::Error error = tt::test::expect_error([&] { compare(before, video_config(resize)); });
    CHECK(error.code() == tt::ErrorCode::kConfig);
    CHECK_THAT(std::string(error.what()),
               ContainsSubstring("the global batch: 4 samples (batch_size 2 × gradient_accumulation 2) "
                                 "in the checkpoint"));
  }
  // batch_size: dynamic has no fixed global batch: any change to it is a change to the run.
  const tt::Error dynamic =
      tt::test::expect_error([&] { compare(before, video_config({"batch_size=dynamic"})); });
  CHECK_THAT(std::string(dynamic.what()),
             ContainsSubstring("tele_tron.batch_size: 2 in the checkpoint, dynamic now"));
}

TEST_CASE("resume check: with cached latents the video-only keys do not take part", "[resume]") {
  const tt::Config before = latent_config();
  check_allowed(before, "vae.tiling=on", "vae.tiling");
  check_allowed(before, "data.buckets=[{frames: 9, height: 64, width: 64}]", "data.buckets");
  check_allowed(before, "data_pipeline.augment.flip=0.0", "data_pipeline.augment.flip");
  // The seed and the model still do.
  CHECK_THROWS_AS(compare(before, latent_config({"train.seed=9"})), tt::Error);
  CHECK_THROWS_AS(compare(before, latent_config({"model.num_layers=3"})), tt::Error);
}

TEST_CASE("resume check: keys the checkpoint's teletron did not have count with their default", "[resume]") {
  std::string yaml = tt::config_to_yaml(video_config());
  const std::string line = "    shift: 7.0\n";
  REQUIRE(yaml.find(line) != std::string::npos);
  yaml.erase(yaml.find(line), line.size());
  CHECK(tt::check_resume_config(yaml, video_config(), 50, "old", {}).changed.empty());
  CHECK_THROWS_AS(tt::check_resume_config(yaml, video_config({"flow_matching.shift=2.0"}), 50, "old", {}),
                  tt::Error);
}

TEST_CASE("resume check: a different manifest content hash is TT_ERR_CONFIG naming the manifest",
          "[resume]") {
  CHECK(tt::check_manifest_hash("abc", "abc", "data/m.jsonl", "ckpt", {}).empty());
  const tt::Error error =
      tt::test::expect_error([] { tt::check_manifest_hash("abc", "def", "data/m.jsonl", "ckpt", {}); });
  CHECK(error.code() == tt::ErrorCode::kConfig);
  CHECK_THAT(std::string(error.what()), ContainsSubstring("data/m.jsonl"));
  CHECK_THAT(std::string(error.what()), ContainsSubstring("abc in the checkpoint, def now"));
  CHECK_THAT(error.hint(), ContainsSubstring("--allow-change data.manifest"));
  CHECK_THAT(tt::check_manifest_hash("abc", "def", "data/m.jsonl", "ckpt", {"data.manifest"}),
             ContainsSubstring("accepted by --allow-change data.manifest"));
}

TEST_CASE("content hash: length-prefixed bytes, file size and modification time", "[resume]") {
  auto hex = [](std::vector<std::string> parts) {
    tt::ContentHash hash;
    for (const std::string& part : parts) hash.add(part);
    return hash.hex();
  };
  CHECK(hex({"ab", "c"}).size() == 32);
  CHECK(hex({"ab", "c"}) == hex({"ab", "c"}));
  CHECK(hex({"ab", "c"}) != hex({"a", "bc"}));
  TempDir dir("tt_hash");
  tt::test::write_file(dir / "f", "1234");
  auto stamp = [&] {
    tt::ContentHash hash;
    hash.add_file_stamp(dir / "f");
    return hash.hex();
  };
  const std::string first = stamp();
  const auto time = std::filesystem::last_write_time(dir / "f");
  std::filesystem::last_write_time(dir / "f", time - std::chrono::hours(1));
  CHECK(stamp() != first);
  std::filesystem::last_write_time(dir / "f", time);
  CHECK(stamp() == first);
  tt::test::write_file(dir / "f", "12345");
  std::filesystem::last_write_time(dir / "f", time);
  CHECK(stamp() != first);  // the size changed
  CHECK_THROWS_AS(tt::file_stamp(dir / "missing"), tt::Error);
}

namespace {

std::string metrics_rows(int64_t first, int64_t last) {
  std::string text;
  for (int64_t step = first; step <= last; ++step)
    text += nlohmann::json{{"step", step}, {"loss", 1.0}}.dump() + "\n";
  return text;
}

std::vector<int64_t> steps_in(const std::string& path) {
  std::vector<int64_t> steps;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);)
    steps.push_back(nlohmann::json::parse(line)["step"].get<int64_t>());
  return steps;
}

std::vector<int64_t> range(int64_t first, int64_t last) {
  std::vector<int64_t> out;
  for (int64_t step = first; step <= last; ++step) out.push_back(step);
  return out;
}

ino_t inode_of(const std::string& path) {
  struct stat info {};
  REQUIRE(::stat(path.c_str(), &info) == 0);
  return info.st_ino;
}

}  // namespace

TEST_CASE("metrics.jsonl on resume: later rows dropped through a new file and a rename",
          "[resume][metrics]") {
  TempDir dir("tt_metrics");
  const std::string path = dir / "metrics.jsonl";
  // A run killed after step 7, mid-append, resumed from its step-4 checkpoint: rows 5..7 go, the
  // partial line goes, a garbage line goes, rows 1..4 stay.
  tt::test::write_file(path, metrics_rows(1, 3) + "not json\n" + metrics_rows(4, 7) + "{\"step\": 8, \"lo");
  const ino_t before = inode_of(path);
  {
    tt::MetricsLog log(path, 4);
    CHECK(inode_of(path) != before);  // a new file renamed into place, not the old one truncated
    log.write({{"step", 5}, {"loss", 0.5}});
    log.sync();
  }
  CHECK(steps_in(path) == range(1, 5));
  CHECK_FALSE(std::filesystem::exists(path + ".tmp"));
  // A fresh run (step 0) starts the file empty; no file at all is fine too.
  { tt::MetricsLog log(path, 0); }
  CHECK(tt::test::read_file(path).empty());
  { tt::MetricsLog log(dir / "new.jsonl", 0); }
  CHECK(std::filesystem::exists(dir / "new.jsonl"));
}

TEST_CASE("metrics.jsonl on resume: a kill at any point of the rewrite loses no row up to the checkpoint",
          "[resume][metrics]") {
  TempDir dir("tt_metrics_kill");
  const std::string path = dir / "metrics.jsonl";
  const std::string original = metrics_rows(1, 6);
  SECTION("killed while writing the new file: a partial temporary file is left, the old file is whole") {
    tt::test::write_file(path, original);
    tt::test::write_file(path + ".tmp", metrics_rows(1, 2) + "{\"st");
    tt::MetricsLog log(path, 4);
    CHECK(steps_in(path) == range(1, 4));
    CHECK_FALSE(std::filesystem::exists(path + ".tmp"));
  }
  SECTION("the rewrite fails before the rename: the old file keeps every row") {
    tt::test::write_file(path, original);
    std::filesystem::create_directory(path + ".tmp");  // the temporary file cannot be created
    const tt::Error error = tt::test::expect_error([&] { tt::MetricsLog log(path, 4); });
    CHECK(error.code() == tt::ErrorCode::kIo);
    CHECK(tt::test::read_file(path) == original);
    std::filesystem::remove(path + ".tmp");
    tt::MetricsLog log(path, 4);  // the next resume succeeds
    CHECK(steps_in(path) == range(1, 4));
  }
  SECTION("killed after the rename: the next resume finds the rewritten file and keeps it") {
    tt::test::write_file(path, metrics_rows(1, 4));
    tt::MetricsLog log(path, 4);
    CHECK(steps_in(path) == range(1, 4));
  }
}

TEST_CASE("run files are replaced atomically: a failed write leaves the old content", "[resume][metrics]") {
  TempDir dir("tt_atomic");
  const std::string path = dir / "config.resolved.yaml";
  tt::write_file_atomically(path, "old\n");
  tt::test::write_file(path + ".tmp", "leftover of a killed write");
  tt::write_file_atomically(path, "new\n");
  CHECK(tt::test::read_file(path) == "new\n");
  CHECK_FALSE(std::filesystem::exists(path + ".tmp"));
  std::filesystem::create_directory(path + ".tmp");
  CHECK_THROWS_AS(tt::write_file_atomically(path, "newer\n"), tt::Error);
  CHECK(tt::test::read_file(path) == "new\n");
}
