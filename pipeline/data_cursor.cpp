// Sample order per epoch, with and without buckets (see data_cursor.h).
#include "pipeline/data_cursor.h"

#include <map>

#include "core/errors.h"
#include "pipeline/latent_dataset.h"

namespace tt {

std::vector<int64_t> DataCursor::next(int64_t count, int64_t size, uint64_t seed, std::vector<int64_t>* epochs) {
  if (!row_bucket.empty()) return next_bucketed(count, size, seed, epochs);
  std::vector<int64_t> indices;
  while (static_cast<int64_t>(indices.size()) < count) {
    if (order_epoch != position.epoch) {
      order = epoch_order(size, seed, position.epoch);
      order_epoch = position.epoch;
    }
    if (position.index >= size) {
      position.epoch += 1;
      position.index = 0;
      continue;
    }
    indices.push_back(order[position.index]);
    epochs->push_back(position.epoch);
    position.index += 1;
  }
  return indices;
}

std::vector<int64_t> DataCursor::next_bucketed(int64_t count, int64_t size, uint64_t seed,
                                              std::vector<int64_t>* epochs) {
  TT_ASSERT(count > 0 && step_samples % count == 0, "micro-batch ", count, " does not divide the global batch ",
            step_samples);
  for (int empty_epochs = 0;;) {
    if (order_epoch != position.epoch) {
      order = epoch_order(size, seed, position.epoch);
      order_epoch = position.epoch;
      dealt.clear();
      std::map<int64_t, std::vector<int64_t>> open;
      for (int64_t row : order) {
        const int64_t bucket = row_bucket[static_cast<size_t>(row)];
        if (bucket < 0) continue;
        std::vector<int64_t>& group = open[bucket];
        group.push_back(row);
        if (static_cast<int64_t>(group.size()) == step_samples) {
          dealt.insert(dealt.end(), group.begin(), group.end());
          group.clear();
        }
      }
    }
    if (position.index < static_cast<int64_t>(dealt.size())) break;
    TT_CHECK_HINT(++empty_epochs < 2, ErrorCode::kData,
                  "lower batch_size or gradient_accumulation, or add clips to the buckets",
                  "no bucket of tele_tron.data.buckets holds batch_size × gradient_accumulation (", step_samples,
                  ") clips");
    if (!dealt.empty()) empty_epochs = 0;
    position.epoch += 1;
    position.index = 0;
  }
  TT_ASSERT(position.index % count == 0, "bucket cursor at sample ", position.index, ", not a multiple of ", count);
  const auto first = dealt.begin() + position.index;
  std::vector<int64_t> indices(first, first + count);
  epochs->insert(epochs->end(), indices.size(), position.epoch);
  position.index += count;
  return indices;
}

}  // namespace tt
