// diffusers config.json <-> HunyuanVideoConfig (see diffusers_config.h).
#include "model/diffusers_config.h"

#include <cmath>

#include "core/errors.h"

namespace tt {
namespace {

const char kClassName[] = "HunyuanVideoTransformer3DModel";
// The first diffusers release with HunyuanVideo; any later one reads the file.
const char kDiffusersVersion[] = "0.32.0";

class FieldReader {
 public:
  FieldReader(const nlohmann::json& config, const std::string& source) : config_(config), source_(source) {}

  [[noreturn]] void fail(const std::string& field, const std::string& problem) const {
    throw Error(ErrorCode::kConfig, str_cat(source_, ": ", field, ": ", problem),
                "fix the model's config.json (diffusers HunyuanVideoTransformer3DModel fields)");
  }

  void read_int(const char* field, int64_t* out) const {
    auto it = config_.find(field);
    if (it == config_.end()) return;
    if (!it->is_number_integer()) {
      // 16.0 is what some writers produce for an integer; accept it only when exact.
      if (it->is_number_float() && std::floor(it->get<double>()) == it->get<double>()) {
        *out = static_cast<int64_t>(it->get<double>());
        return;
      }
      fail(field, str_cat("expected an integer, got ", it->dump()));
    }
    *out = it->get<int64_t>();
  }

  void read_double(const char* field, double* out) const {
    auto it = config_.find(field);
    if (it == config_.end()) return;
    if (!it->is_number()) fail(field, str_cat("expected a number, got ", it->dump()));
    *out = it->get<double>();
  }

  void read_bool(const char* field, bool* out) const {
    auto it = config_.find(field);
    if (it == config_.end()) return;
    if (!it->is_boolean()) fail(field, str_cat("expected true or false, got ", it->dump()));
    *out = it->get<bool>();
  }

  void read_string(const char* field, std::string* out) const {
    auto it = config_.find(field);
    if (it == config_.end()) return;
    if (!it->is_string()) fail(field, str_cat("expected a string, got ", it->dump()));
    *out = it->get<std::string>();
  }

  void read_int_list(const char* field, std::vector<int64_t>* out) const {
    auto it = config_.find(field);
    if (it == config_.end()) return;
    if (!it->is_array()) fail(field, str_cat("expected a list of integers, got ", it->dump()));
    std::vector<int64_t> values;
    for (const nlohmann::json& item : *it) {
      if (!item.is_number_integer()) fail(field, str_cat("expected a list of integers, got ", it->dump()));
      values.push_back(item.get<int64_t>());
    }
    *out = values;
  }

 private:
  const nlohmann::json& config_;
  const std::string& source_;
};

// Fields diffusers' HunyuanVideoTransformer3DModel takes; every one is read below.
const char* const kKnownFields[] = {
    "in_channels",
    "out_channels",
    "num_attention_heads",
    "attention_head_dim",
    "num_layers",
    "num_single_layers",
    "num_refiner_layers",
    "mlp_ratio",
    "patch_size",
    "patch_size_t",
    "qk_norm",
    "guidance_embeds",
    "text_embed_dim",
    "pooled_projection_dim",
    "rope_theta",
    "rope_axes_dim",
    "image_condition_type",
};

}  // namespace

HunyuanVideoConfig hunyuan_config_from_diffusers_json(const nlohmann::json& config,
                                                      const std::string& source) {
  FieldReader reader(config, source);
  if (!config.is_object()) reader.fail("config", str_cat("expected a JSON object, got ", config.dump()));
  for (auto it = config.begin(); it != config.end(); ++it) {
    const std::string& key = it.key();
    if (key.starts_with("_")) continue;
    bool known = false;
    for (const char* field : kKnownFields) known = known || key == field;
    if (!known)
      reader.fail(key, "unknown field (not a HunyuanVideoTransformer3DModel argument teletron knows)");
  }
  auto class_name = config.find("_class_name");
  if (class_name != config.end() &&
      !(class_name->is_string() && class_name->get<std::string>() == kClassName))
    reader.fail("_class_name", str_cat("expected \"", kClassName, "\", got ", class_name->dump()));

  HunyuanVideoConfig c;  // diffusers' defaults
  reader.read_int("in_channels", &c.in_channels);
  c.out_channels = c.in_channels;
  auto out_channels = config.find("out_channels");
  if (out_channels != config.end() && !out_channels->is_null())
    reader.read_int("out_channels", &c.out_channels);
  reader.read_int("num_attention_heads", &c.num_attention_heads);
  reader.read_int("attention_head_dim", &c.attention_head_dim);
  reader.read_int("num_layers", &c.num_layers);
  reader.read_int("num_single_layers", &c.num_single_layers);
  reader.read_int("num_refiner_layers", &c.num_refiner_layers);
  reader.read_double("mlp_ratio", &c.mlp_ratio);
  reader.read_int("patch_size", &c.patch_size);
  reader.read_int("patch_size_t", &c.patch_size_t);
  reader.read_string("qk_norm", &c.qk_norm);
  reader.read_bool("guidance_embeds", &c.guidance_embeds);
  reader.read_int("text_embed_dim", &c.text_embed_dim);
  reader.read_int("pooled_projection_dim", &c.pooled_projection_dim);
  reader.read_double("rope_theta", &c.rope_theta);
  reader.read_int_list("rope_axes_dim", &c.rope_axes_dim);

  auto image_condition = config.find("image_condition_type");
  if (image_condition != config.end() && !image_condition->is_null()) {
    if (!image_condition->is_string() || image_condition->get<std::string>() != "latent_concat")
      reader.fail("image_condition_type",
                  str_cat("expected null (text-to-video) or \"latent_concat\" (image-to-video); got ",
                          image_condition->dump()));
    c.image_condition_type = "latent_concat";
  }
  const char* positive[] = {"in_channels", "out_channels", "num_attention_heads", "attention_head_dim",
                            "patch_size",  "patch_size_t", "text_embed_dim",      "pooled_projection_dim"};
  const int64_t values[] = {c.in_channels, c.out_channels, c.num_attention_heads, c.attention_head_dim,
                            c.patch_size,  c.patch_size_t, c.text_embed_dim,      c.pooled_projection_dim};
  for (size_t i = 0; i < std::size(positive); ++i)
    if (values[i] <= 0) reader.fail(positive[i], str_cat("must be > 0, got ", values[i]));
  const char* counts[] = {"num_layers", "num_single_layers", "num_refiner_layers"};
  const int64_t count_values[] = {c.num_layers, c.num_single_layers, c.num_refiner_layers};
  for (size_t i = 0; i < std::size(counts); ++i)
    if (count_values[i] < 0) reader.fail(counts[i], str_cat("must be >= 0, got ", count_values[i]));
  if (!(c.mlp_ratio > 0)) reader.fail("mlp_ratio", str_cat("must be > 0, got ", c.mlp_ratio));
  if (!(c.rope_theta > 0)) reader.fail("rope_theta", str_cat("must be > 0, got ", c.rope_theta));
  validate_hunyuan_config(c, source + ": ");
  return c;
}

nlohmann::json hunyuan_config_to_diffusers_json(const HunyuanVideoConfig& c) {
  nlohmann::json json = nlohmann::json::object();
  json["_class_name"] = kClassName;
  json["_diffusers_version"] = kDiffusersVersion;
  json["in_channels"] = c.in_channels;
  json["out_channels"] = c.out_channels;
  json["num_attention_heads"] = c.num_attention_heads;
  json["attention_head_dim"] = c.attention_head_dim;
  json["num_layers"] = c.num_layers;
  json["num_single_layers"] = c.num_single_layers;
  json["num_refiner_layers"] = c.num_refiner_layers;
  json["mlp_ratio"] = c.mlp_ratio;
  json["patch_size"] = c.patch_size;
  json["patch_size_t"] = c.patch_size_t;
  json["qk_norm"] = c.qk_norm;
  json["guidance_embeds"] = c.guidance_embeds;
  json["text_embed_dim"] = c.text_embed_dim;
  json["pooled_projection_dim"] = c.pooled_projection_dim;
  json["rope_theta"] = c.rope_theta;
  json["rope_axes_dim"] = c.rope_axes_dim;
  if (c.image_condition_type.empty()) {
    json["image_condition_type"] = nullptr;
  } else {
    json["image_condition_type"] = c.image_condition_type;
  }
  return json;
}

}  // namespace tt
