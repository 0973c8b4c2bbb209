// Exact FLOP count of the HunyuanVideo Transformer (see flops.h).
#include "model/flops.h"

namespace tt {
namespace {

// One linear layer applied to `rows` rows: 2 · rows · in · out.
double linear(double rows, double in, double out) { return 2.0 * rows * in * out; }

// QK^T and (softmax)·V over n tokens of total width d.
double attention(double n, double d) { return 4.0 * n * n * d; }

}  // namespace

int64_t transformer_parameter_count(const HunyuanVideoConfig& c) {
  const int64_t h = c.hidden_size(), m = c.mlp_hidden(), d = c.attention_head_dim;
  const int64_t patch = c.patch_size_t * c.patch_size * c.patch_size;
  auto linear = [](int64_t in, int64_t out) { return in * out + out; };
  auto embedder = [&](int64_t in) { return linear(in, h) + linear(h, h); };  // linear_1, linear_2
  int64_t n = linear(c.in_channels * patch, h);                              // x_embedder
  n += embedder(256) + embedder(c.pooled_projection_dim);                    // time_text_embed
  if (c.guidance_embeds) n += embedder(256);
  n += embedder(256) + embedder(c.text_embed_dim) + linear(c.text_embed_dim, h);  // context_embedder
  const int64_t refiner_block = 2 * h + linear(h, 3 * h) + linear(h, h) + 2 * h + linear(h, 4 * h) +
                                linear(4 * h, h) + linear(h, 2 * h);
  n += c.num_refiner_layers * refiner_block;
  const int64_t double_block = 2 * linear(h, 6 * h) + 2 * linear(h, 3 * h) + 4 * d + 2 * linear(h, h) +
                               2 * (linear(h, m) + linear(m, h));
  n += c.num_layers * double_block;
  const int64_t single_block = linear(h, 3 * h + m) + 2 * d + linear(h, 3 * h) + linear(h + m, h);
  n += c.num_single_layers * single_block;
  n += linear(h, 2 * h) + linear(h, patch * c.out_channels);  // norm_out, proj_out
  return n;
}

FlopBreakdown transformer_flops(const HunyuanVideoConfig& c, int64_t batch, int64_t video_tokens,
                                int64_t text_tokens) {
  const double h = static_cast<double>(c.hidden_size());
  const double mlp = static_cast<double>(c.mlp_hidden());
  const double n = static_cast<double>(video_tokens);
  const double l = static_cast<double>(text_tokens);
  const double patch_in = static_cast<double>(c.in_channels * c.patch_size_t * c.patch_size * c.patch_size);
  const double patch_out = static_cast<double>(c.out_channels * c.patch_size_t * c.patch_size * c.patch_size);
  const double refiner_mlp = 4.0 * h;  // the token refiner's MLP is 4x wide whatever mlp_ratio is
  FlopBreakdown f;

  // Embeddings: patch conv as a matmul over video tokens; timestep / guidance / pooled-text MLPs
  // once per sample; the token refiner over text tokens.
  f.embed += linear(n, patch_in, h);
  f.embed += linear(1, 256, h) + linear(1, h, h);                                    // timestep
  f.embed += linear(1, static_cast<double>(c.pooled_projection_dim), h) + linear(1, h, h);  // pooled text
  if (c.guidance_embeds) f.embed += linear(1, 256, h) + linear(1, h, h);
  f.embed += linear(l, static_cast<double>(c.text_embed_dim), h);                     // proj_in
  f.embed += linear(1, 256, h) + linear(1, h, h);                                     // refiner timestep
  f.embed += linear(1, static_cast<double>(c.text_embed_dim), h) + linear(1, h, h);   // refiner pooled
  for (int64_t i = 0; i < c.num_refiner_layers; ++i) {
    f.embed += linear(l, h, 3 * h) + linear(l, h, h);                  // qkv, out
    f.embed += linear(l, h, refiner_mlp) + linear(l, refiner_mlp, h);  // SiLU MLP
    f.embed += linear(1, h, 2 * h);                                    // gates
    f.embed += attention(l, h);
    f.attention += attention(l, h);
  }

  // Double-stream blocks: separate weights per stream, one joint attention.
  const double joint = n + l;
  for (int64_t i = 0; i < c.num_layers; ++i) {
    for (double rows : {n, l}) {
      f.double_blocks += linear(rows, h, 3 * h) + linear(rows, h, h);     // qkv, out
      f.double_blocks += linear(rows, h, mlp) + linear(rows, mlp, h);     // MLP
      f.double_blocks += linear(1, h, 6 * h);                             // modulation
    }
    f.double_blocks += attention(joint, h);
    f.attention += attention(joint, h);
  }

  // Single-stream blocks over the joint sequence.
  for (int64_t i = 0; i < c.num_single_layers; ++i) {
    f.single_blocks += linear(joint, h, 3 * h + mlp);  // linear1: q, k, v, mlp_in
    f.single_blocks += linear(joint, h + mlp, h);      // linear2
    f.single_blocks += linear(1, h, 3 * h);            // modulation
    f.single_blocks += attention(joint, h);
    f.attention += attention(joint, h);
  }

  f.final_layer = linear(1, h, 2 * h) + linear(n, h, patch_out);

  const double b = static_cast<double>(batch);
  f.embed *= b;
  f.double_blocks *= b;
  f.single_blocks *= b;
  f.final_layer *= b;
  f.attention *= b;
  f.forward = f.embed + f.double_blocks + f.single_blocks + f.final_layer;
  f.training = 3.0 * f.forward;
  return f;
}

}  // namespace tt
