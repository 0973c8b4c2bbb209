// Sample order per epoch, with and without buckets (see data_cursor.h).
#include "pipeline/data_cursor.h"

#include <algorithm>
#include <map>
#include <string>

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

int64_t DataCursor::samples_of(int64_t bucket) const {
  if (bucket >= 0 && bucket < static_cast<int64_t>(bucket_samples.size())) return bucket_samples[static_cast<size_t>(bucket)];
  return step_samples;
}

void DataCursor::ready_bucketed(int64_t size, uint64_t seed) {
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
        if (static_cast<int64_t>(group.size()) == samples_of(bucket)) {
          dealt.insert(dealt.end(), group.begin(), group.end());
          group.clear();
        }
      }
    }
    if (position.index < static_cast<int64_t>(dealt.size())) return;
    TT_CHECK_HINT(++empty_epochs < 2, ErrorCode::kData,
                  bucket_samples.empty() ? "lower batch_size or gradient_accumulation, or add clips to the buckets"
                                         : "lower dynamic_batch.global_batch, or add clips to the buckets",
                  "no bucket of tele_tron.data.buckets holds ",
                  bucket_samples.empty() ? str_cat("batch_size × gradient_accumulation (", step_samples, ")")
                                         : std::string("its global batch (dynamic_batch.mode: token_budget)"),
                  " clips");
    if (!dealt.empty()) empty_epochs = 0;
    position.epoch += 1;
    position.index = 0;
  }
}

std::vector<int64_t> DataCursor::next_bucketed(int64_t count, int64_t size, uint64_t seed,
                                              std::vector<int64_t>* epochs) {
  ready_bucketed(size, seed);
  const int64_t group = samples_of(row_bucket[static_cast<size_t>(dealt[static_cast<size_t>(position.index)])]);
  if (count == 0) count = group;  // next_group: the whole group
  TT_ASSERT(count > 0 && group % count == 0, "micro-batch ", count, " does not divide the global batch ", group);
  TT_ASSERT(position.index % count == 0 || !bucket_samples.empty(), "bucket cursor at sample ", position.index,
            ", not a multiple of ", count);
  const auto first = dealt.begin() + position.index;
  std::vector<int64_t> indices(first, first + count);
  epochs->insert(epochs->end(), indices.size(), position.epoch);
  position.index += count;
  return indices;
}

std::vector<int64_t> DataCursor::next_group(int64_t size, uint64_t seed, std::vector<int64_t>* epochs) {
  return row_bucket.empty() ? next(step_samples, size, seed, epochs) : next_bucketed(0, size, seed, epochs);
}

std::vector<int64_t> token_budget_samples(const std::vector<int64_t>& tokens, int64_t global_batch) {
  TT_ASSERT(global_batch > 0, "global batch ", global_batch);
  int64_t most = 0;
  for (int64_t t : tokens) {
    TT_ASSERT(t > 0, "a bucket of ", t, " tokens");
    most = std::max(most, t);
  }
  std::vector<int64_t> samples;
  for (int64_t t : tokens) samples.push_back(std::max<int64_t>(1, global_batch * most / t));
  return samples;
}

}  // namespace tt
