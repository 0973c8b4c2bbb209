// Fuzz target: the cached-latent manifest reader (pipeline/latent_dataset.h, LatentDataset). The
// input is the JSONL manifest; it lies in a scratch folder next to a few small safetensors files
// the rows can name (a.safetensors and b.safetensors valid with different latent shapes,
// c.safetensors valid with another text length L, rank.safetensors with 3-D latents, junk.safetensors
// not a safetensors file). The dataset must either load, and then read its rows, or throw tt::Error.
#include <torch/torch.h>

#include <fstream>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "pipeline/latent_dataset.h"
#include "test/fuzz/fuzz_util.h"

namespace {

// latent_channels 4, text_dim 8, pooled_dim 4 (small, so that reading rows stays cheap).
tt::safetensors::TensorMap sample(std::vector<int64_t> latents, int64_t length) {
  return {{"latents", torch::randn(latents)},
          {"text_states", torch::randn({length, 8}).to(torch::kBFloat16)},
          {"text_mask", torch::ones({length}, torch::kBool)},
          {"pooled", torch::randn({4})}};
}

void write_fixtures() {
  static const bool done = [] {
    const std::string& dir = tt::fuzz::scratch_dir();
    tt::safetensors::save(dir + "/a.safetensors", sample({4, 2, 2, 2}, 3));
    tt::safetensors::save(dir + "/b.safetensors", sample({4, 1, 2, 2}, 3));
    tt::safetensors::save(dir + "/c.safetensors", sample({4, 2, 2, 2}, 5));
    tt::safetensors::save(dir + "/rank.safetensors", sample({4, 2, 2}, 3));
    std::ofstream(dir + "/junk.safetensors") << "not a safetensors file";
    return true;
  }();
  (void)done;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tt::fuzz::quiet_logs();
  write_fixtures();
  tt::LatentDatasetOptions options;
  options.manifest = tt::fuzz::write_input(data, size, "manifest.jsonl");
  options.latent_channels = 4;
  options.text_dim = 8;
  options.pooled_dim = 4;
  try {
    tt::LatentDataset dataset(options);
    // A batch holds rows of one bucket (one latent shape): the first row's, up to four of them.
    const std::vector<int64_t> buckets = dataset.row_buckets();
    if (!buckets.empty() && static_cast<int64_t>(buckets.size()) != dataset.size())
      tt::fuzz::property_failed("row_buckets does not give every row a bucket");
    std::vector<int64_t> indices;
    for (int64_t i = 0; i < dataset.size() && indices.size() < 4; ++i)
      if (buckets.empty() || buckets[i] == buckets[0]) indices.push_back(i);
    if (!indices.empty()) {
      tt::LatentBatch batch = dataset.get_batch(indices);
      if (batch.latents.size(0) != static_cast<int64_t>(indices.size()))
        tt::fuzz::property_failed("batch size differs from the rows asked for");
    }
    (void)tt::epoch_order(dataset.size(), 0, 0);
  } catch (const tt::Error& error) {
    tt::fuzz::rejected(error);
  }
  return 0;
}
