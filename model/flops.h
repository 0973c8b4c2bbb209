// Exact matmul FLOP count of a HunyuanVideo Transformer training step, as docs/ARCHITECTURE.md defines
// it for MFU: every matmul counted with the rows it really sees (video weights see video tokens,
// text weights text tokens, modulation and embedding linears run once per sample), plus 4·N²·d per
// attention layer, ×3 for forward + backward. (6·params·tokens overcounts this model about 2×.)
#pragma once

#include <cstdint>

#include "model/hunyuan_config.h"

namespace tt {

struct FlopBreakdown {
  double embed = 0;      // patch embedding, conditioning MLPs, token refiner (forward)
  double double_blocks = 0;
  double single_blocks = 0;
  double final_layer = 0;
  double attention = 0;  // the 4·N²·d part of all attention layers (already inside the blocks' totals)
  double forward = 0;    // sum of the forward parts
  double training = 0;   // 3 × forward
};

/// Exact parameter count of the Transformer for `config`, without building it (the 13b preset
/// gives about 12.8 B).
int64_t transformer_parameter_count(const HunyuanVideoConfig& config);

/// FLOPs for `batch` samples of `video_tokens` patched latent tokens and `text_tokens` text tokens.
FlopBreakdown transformer_flops(const HunyuanVideoConfig& config, int64_t batch, int64_t video_tokens,
                                int64_t text_tokens);

}  // namespace tt
