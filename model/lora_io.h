// LoRA files: the PEFT layout that diffusers' HunyuanVideo pipeline reads and writes
// (`transformer.<diffusers module>.lora_A.weight` (r, in) and `.lora_B.weight` (out, r), the scale in
// the safetensors metadata `lora_adapter_metadata`, as diffusers' save_lora_weights writes it), and
// reading the layouts other trainers save: ComfyUI / diffusion-pipe (`diffusion_model.<official
// module>.lora_A/B.weight`) and musubi-tuner / kohya (`lora_unet_<official module, dots as
// underscores>.lora_down/lora_up.weight` with a scalar `.alpha`). An official fused module
// (img_attn_qkv, txt_attn_qkv, a single block's linear1) becomes diffusers' parts as diffusers'
// converter does: the down projection copied to each part, the up projection's rows split.
#pragma once

#include <map>
#include <string>

#include "core/safetensors.h"
#include "model/lora.h"

namespace tt {

/// The prefix of every key of a diffusers LoRA file: the pipeline component the adapters belong to.
inline constexpr char kLoraKeyPrefix[] = "transformer.";

/// `set`'s trainable tensors under their keys in a diffusers LoRA file
/// ("transformer.transformer_blocks.0.attn.to_q.lora_A.weight"): the tensors themselves, not copies.
std::map<std::string, torch::Tensor> lora_file_tensors(const LoraSet& set);

/// The safetensors metadata of a LoRA file of `set`: lora_adapter_metadata (JSON: transformer.r,
/// transformer.lora_alpha, transformer.lora_dropout, transformer.target_modules: the adapted
/// modules), and teletron's own record of the options.
std::map<std::string, std::string> lora_metadata(const LoraSet& set);

/// One adapter pair read from a file.
struct LoraFilePair {
  torch::Tensor a;     // (r, in) fp32
  torch::Tensor b;     // (rows, r) fp32
  double scale = 1.0;  // the file's alpha / r for it
};

/// A LoRA file's adapters by diffusers module name, in any of the layouts above (`format` says which:
/// "diffusers", "comfyui" or "musubi"). `hidden_size` splits single blocks' linear1 (0: inferred from
/// an attention projection's A). Throws kCheckpoint naming the file and the keys it cannot place.
struct LoraFile {
  std::string format;
  std::map<std::string, LoraFilePair> modules;
};
LoraFile read_lora_file(const std::string& path, int64_t hidden_size = 0);
/// The same from tensors and metadata already read (`path` names their source in errors): an EMA
/// copy of the adapters in a checkpoint's state, say.
LoraFile read_lora_tensors(const safetensors::TensorMap& tensors, const std::map<std::string, std::string>& metadata,
                           const std::string& path, int64_t hidden_size = 0);

/// Copies `file` into `set` (each B times file scale / the set's scale, untouched when they are
/// equal): every module of the file must
/// be adapted in `set` with the same shapes (kCheckpoint listing the others); modules of `set` the
/// file lacks keep their initialisation and are returned.
std::vector<std::string> load_lora_into(const LoraSet& set, const LoraFile& file, const std::string& source);

}  // namespace tt
