// Element loads and stores of the kernels (the Transformer's gated_residual.cu, rms_norm_rope.cu,
// gelu_tanh.cu; the VAE's group_norm.cu, residual_bias.cu, causal_im2col.cu): fp32 or bf16 in
// memory, fp32 in registers. Device code only; no torch here.
#pragma once

#include <cuda_bf16.h>

namespace tt::kernels {

inline __device__ float load_float(const float* p) {
  return *p;
}
inline __device__ float load_float(const __nv_bfloat16* p) {
  return __bfloat162float(*p);
}
inline __device__ void store_float(float* p, float v) {
  *p = v;
}
inline __device__ void store_float(__nv_bfloat16* p, float v) {
  *p = __float2bfloat16_rn(v);
}

/// kVec consecutive elements, aligned to their whole size: one vector load or store.
template <typename T, int kVec>
struct alignas(sizeof(T) * kVec) Pack {
  T v[kVec];
};

/// The kVec elements at p (aligned to sizeof(T) * kVec) as fp32.
template <typename T, int kVec>
inline __device__ void load_vec(const T* p, float (&v)[kVec]) {
  const Pack<T, kVec> pack = *reinterpret_cast<const Pack<T, kVec>*>(p);
  for (int k = 0; k < kVec; ++k) v[k] = load_float(&pack.v[k]);
}

/// v rounded to T, stored at p (aligned to sizeof(T) * kVec) in one store.
template <typename T, int kVec>
inline __device__ void store_vec(T* p, const float (&v)[kVec]) {
  Pack<T, kVec> pack;
  for (int k = 0; k < kVec; ++k) store_float(&pack.v[k], v[k]);
  *reinterpret_cast<Pack<T, kVec>*>(p) = pack;
}

/// v rounded to the element type T (the value a store then a load would give), as fp32.
inline __device__ float round_to(const float*, float v) {
  return v;
}
inline __device__ float round_to(const __nv_bfloat16*, float v) {
  return __bfloat162float(__float2bfloat16_rn(v));
}

/// Sum over the 32 lanes of a warp, in every lane.
inline __device__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

}  // namespace tt::kernels
