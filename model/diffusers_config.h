// The diffusers `config.json` of HunyuanVideoTransformer3DModel <-> teletron's HunyuanVideoConfig.
// Field names are shared (hunyuan_config.h uses diffusers' names), so this file is mostly checking:
// every field that changes the math is honoured or rejected, never silently dropped.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "model/hunyuan_config.h"

namespace tt {

/// The architecture a diffusers config.json describes. Absent fields take diffusers' defaults
/// (those of the released model); `out_channels: null` means in_channels, as in diffusers; fields
/// starting with "_" (_class_name, _diffusers_version, _name_or_path) do not change the math and
/// are ignored, except that a _class_name other than HunyuanVideoTransformer3DModel is refused.
/// Unknown fields, wrong types and unsupported values (image_condition_type other than null,
/// qk_norm other than rms_norm) throw kConfig naming `source` and the field. The result passes
/// validate_hunyuan_config.
HunyuanVideoConfig hunyuan_config_from_diffusers_json(const nlohmann::json& config,
                                                      const std::string& source = "config.json");

/// What diffusers' save_pretrained writes for this architecture (with _class_name and
/// _diffusers_version, image_condition_type null).
nlohmann::json hunyuan_config_to_diffusers_json(const HunyuanVideoConfig& config);

}  // namespace tt
