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
  std::vector<int64_t> dealt;       // the epoch's groups back to back (bucket mode)

  /// The next `count` rows of a dataset of `size` rows; the epoch of each is appended to `epochs`.
  /// Bucket mode: TT_ERR_DATA when no bucket holds step_samples rows.
  std::vector<int64_t> next(int64_t count, int64_t size, uint64_t seed, std::vector<int64_t>* epochs);

 private:
  std::vector<int64_t> next_bucketed(int64_t count, int64_t size, uint64_t seed, std::vector<int64_t>* epochs);
};

}  // namespace tt
