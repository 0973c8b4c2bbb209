// Counter-based random numbers keyed by (seed, key, element): Philox4x32-10 (Salmon et al., SC'11)
// and a Box-Muller transform, written once for the host and the device, so that the CPU path and the
// CUDA kernel (cuda/keyed_random.cu) compute the same arithmetic. Training keys each sample by
// (step, index in the global batch): its noise and sigma do not depend on how the batch is split into
// micro-batches, on CUDA Graph replays or, later, on the rank that draws it. No torch here.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define TT_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define TT_HOST_DEVICE inline
#endif

namespace tt::keyed {

/// Independent sequences for one (seed, key): what a draw is for.
/// kSampleNoise: the sampler's initial latents (model/flow_sampler.h), keyed by (seed, sample).
enum Draw : uint32_t { kNoise = 0, kSigmaNormal = 1, kSigmaUniform = 2, kStochasticRounding = 3, kSampleNoise = 4 };

struct Block {
  uint32_t v[4];
};

TT_HOST_DEVICE void mul_hi_lo(uint32_t a, uint32_t b, uint32_t* hi, uint32_t* lo) {
  const uint64_t product = static_cast<uint64_t>(a) * b;
  *hi = static_cast<uint32_t>(product >> 32);
  *lo = static_cast<uint32_t>(product);
}

/// Philox4x32 with 10 rounds: four 32-bit words from a 128-bit counter and a 64-bit key.
TT_HOST_DEVICE Block philox(Block counter, uint32_t key0, uint32_t key1) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key0 += 0x9E3779B9u;
      key1 += 0xBB67AE85u;
    }
    uint32_t hi0, lo0, hi1, lo1;
    mul_hi_lo(0xD2511F53u, counter.v[0], &hi0, &lo0);
    mul_hi_lo(0xCD9E8D57u, counter.v[2], &hi1, &lo1);
    counter = Block{{hi1 ^ counter.v[1] ^ key0, lo1, hi0 ^ counter.v[3] ^ key1, lo0}};
  }
  return counter;
}

/// The block of four words holding elements 4 * group .. 4 * group + 3 of (seed, key, draw).
TT_HOST_DEVICE Block block_of(uint64_t seed, uint64_t key, uint32_t draw, uint32_t group) {
  const Block counter{{group, draw, static_cast<uint32_t>(key), static_cast<uint32_t>(key >> 32)}};
  return philox(counter, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

/// A word as a float strictly inside (0, 1]: its top 24 bits plus half a step.
TT_HOST_DEVICE float open_unit(uint32_t word) {
  return (static_cast<float>(word >> 8) + 0.5f) * (1.0f / 16777216.0f);
}

/// Box-Muller: the two standard normals from a pair of words.
TT_HOST_DEVICE void normal_pair(uint32_t a, uint32_t b, float* first, float* second) {
  const float radius = sqrtf(-2.0f * logf(open_unit(a)));
  const float angle = 6.28318530717958647692f * open_unit(b);
  *first = radius * cosf(angle);
  *second = radius * sinf(angle);
}

/// The four standard normals of one block.
TT_HOST_DEVICE void normals_of(Block block, float out[4]) {
  normal_pair(block.v[0], block.v[1], &out[0], &out[1]);
  normal_pair(block.v[2], block.v[3], &out[2], &out[3]);
}

}  // namespace tt::keyed

#undef TT_HOST_DEVICE
