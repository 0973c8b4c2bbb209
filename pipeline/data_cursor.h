// The order in which training samples are drawn: one deterministic permutation per epoch
// (pipeline/latent_dataset.h epoch_order), with or without buckets. The trainer keeps one cursor (the
// consumed position, what checkpoints store) and the prefetch producer a copy that runs ahead.
//
// Without buckets a batch is the next `count` samples of the epoch order (running into the next
// epoch). With buckets (row_bucket non-empty) each epoch's order is dealt into per-bucket groups of
// one optimizer step's samples (`step_samples`, the global batch) — a row joins its bucket's open
// group, a full group is emitted, partial groups at the epoch's end are dropped — and a micro-batch
// is the next `count` rows of those groups (count divides step_samples, so it never mixes buckets).
// position.index counts samples either way, and the sequence follows from (seed, epoch, global
// batch) alone: a resume continues it exactly, also when the global batch is split differently
// (batch_size × gradient_accumulation, later × ranks).
// dynamic_batch.mode: token_budget gives each bucket a group size of its own (bucket_samples,
// token_budget_samples below); batch_size: dynamic then takes whole groups (next_group).
#pragma once

#include <cstdint>
#include <vector>

namespace tt {

/// Where the next sample comes from.
struct DataPosition {
  int64_t epoch = 0;
  int64_t index = 0;  // next position inside the epoch's order
};

struct DataCursor {
  DataPosition position;
  std::vector<int64_t> order;
  int64_t order_epoch = -1;
  int64_t step_samples = 1;         // samples per optimizer step (the global batch)
  std::vector<int64_t> row_bucket;  // empty: no buckets
  std::vector<int64_t> bucket_samples;  // bucket mode: each bucket's group size; empty: step_samples for all
  std::vector<int64_t> dealt;       // the epoch's groups back to back (bucket mode)

  /// Samples per optimizer step of `bucket` (bucket_samples, else step_samples).
  int64_t samples_of(int64_t bucket) const;
  /// The next `count` rows of a dataset of `size` rows; the epoch of each is appended to `epochs`.
  /// Bucket mode: TT_ERR_DATA when no bucket holds a group; `count` must divide every group size.
  std::vector<int64_t> next(int64_t count, int64_t size, uint64_t seed, std::vector<int64_t>* epochs);
  /// One optimizer step's rows: the next group in bucket mode (its bucket's size), else the next
  /// step_samples rows.
  std::vector<int64_t> next_group(int64_t size, uint64_t seed, std::vector<int64_t>* epochs);

 private:
  /// Bucket mode: deals the epoch's groups when the epoch changed and moves to the next epoch while
  /// the current one has nothing left (TT_ERR_DATA after two empty epochs).
  void ready_bucketed(int64_t size, uint64_t seed);
  /// Bucket mode: the next `count` rows of the current group (0: the whole group).
  std::vector<int64_t> next_bucketed(int64_t count, int64_t size, uint64_t seed, std::vector<int64_t>* epochs);
};

/// dynamic_batch.mode: token_budget: each bucket's samples per step from its video tokens per
/// sample: the bucket with the most tokens gets `global_batch`, every other one
/// floor(global_batch × most / its tokens) samples (at least 1), so every step holds about
/// global_batch × most tokens.
std::vector<int64_t> token_budget_samples(const std::vector<int64_t>& tokens, int64_t global_batch);

}  // namespace tt
