// The per-sample random stream of the data pipeline: SplitMix64 seeded from (seed, epoch,
// sample_index, purpose). Pure uint64 arithmetic, so every platform and every run draws the same
// values, and nothing here touches torch's global RNG (training code may reseed that freely).
// `purpose` separates independent streams of one sample (frame choice vs augmentation).
#pragma once

#include <cstdint>

namespace tt {

/// Stream ids: each consumer of per-sample randomness takes its own so that adding draws to one
/// never shifts another.
inline constexpr uint64_t kRngFrameSampler = 0x6672616D65ULL;  // "frame"
inline constexpr uint64_t kRngAugment = 0x6175676DULL;         // "augm"

// SplitMix64 (Steele, Lea, Flood 2014); LatentDataset's epoch_order shuffles with it too.
struct SampleRng {
  uint64_t state = 0;

  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  /// Uniform in [0, bound) without modulo bias (bound > 0).
  uint64_t below(uint64_t bound) {
    uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
    uint64_t value = next();
    while (value >= limit) value = next();
    return value % bound;
  }
  /// Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  /// Uniform in [lo, hi).
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
};

/// The stream of one sample: each key passes through a full SplitMix step before the next is mixed
/// in, so neighbouring seeds, epochs and samples give unrelated streams.
inline SampleRng sample_rng(uint64_t seed, int64_t epoch, int64_t sample_index, uint64_t purpose) {
  SampleRng mix{seed};
  mix.state = mix.next() ^ (static_cast<uint64_t>(epoch) * 0xD1B54A32D192ED03ULL);
  mix.state = mix.next() ^ (static_cast<uint64_t>(sample_index) * 0x8CB92BA72F3D8DD7ULL);
  mix.state = mix.next() ^ purpose;
  return SampleRng{mix.next()};
}

}  // namespace tt
