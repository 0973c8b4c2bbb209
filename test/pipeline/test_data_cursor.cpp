// DataCursor: the sample order of training, with and without buckets.
#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <set>
#include <vector>

#include "core/errors.h"
#include "pipeline/data_cursor.h"
#include "pipeline/latent_dataset.h"

namespace {

std::vector<int64_t> draw(tt::DataCursor& cursor, int64_t count, int64_t batches, int64_t size, uint64_t seed,
                          std::vector<int64_t>* epochs) {
  std::vector<int64_t> rows;
  for (int64_t k = 0; k < batches; ++k) {
    const std::vector<int64_t> batch = cursor.next(count, size, seed, epochs);
    rows.insert(rows.end(), batch.begin(), batch.end());
  }
  return rows;
}

}  // namespace

TEST_CASE("without buckets the cursor walks each epoch's permutation and runs into the next", "[data_cursor]") {
  tt::DataCursor cursor;
  std::vector<int64_t> epochs;
  const std::vector<int64_t> rows = draw(cursor, 3, 4, 5, 11, &epochs);  // 12 samples of 5 rows
  std::vector<int64_t> expected = tt::epoch_order(5, 11, 0);
  const std::vector<int64_t> second = tt::epoch_order(5, 11, 1), third = tt::epoch_order(5, 11, 2);
  expected.insert(expected.end(), second.begin(), second.end());
  expected.insert(expected.end(), third.begin(), third.begin() + 2);
  CHECK(rows == expected);
  CHECK(epochs == std::vector<int64_t>{0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 2, 2});
  CHECK(cursor.position.epoch == 2);
  CHECK(cursor.position.index == 2);
}

TEST_CASE("with buckets a micro-batch never mixes buckets, partial groups are dropped, and the split of the "
          "global batch does not change the order",
          "[data_cursor]") {
  // 10 rows: bucket 0 has 6, bucket 1 has 3, row 9 fits none. Global batch 4: per epoch one group
  // of bucket 0 (its other 2 rows and bucket 1's 3 are partial groups, dropped).
  const std::vector<int64_t> row_bucket = {0, 1, 0, 0, 1, 0, 1, 0, 0, -1};
  auto make = [&] {
    tt::DataCursor cursor;
    cursor.row_bucket = row_bucket;
    cursor.step_samples = 4;
    return cursor;
  };
  tt::DataCursor by_two = make(), by_four = make();
  std::vector<int64_t> epochs_two, epochs_four;
  const std::vector<int64_t> two = draw(by_two, 2, 6, 10, 5, &epochs_two);
  const std::vector<int64_t> four = draw(by_four, 4, 3, 10, 5, &epochs_four);
  CHECK(two == four);
  CHECK(epochs_two == epochs_four);
  for (size_t k = 0; k < four.size(); k += 4) {
    std::set<int64_t> buckets;
    for (size_t j = k; j < k + 4; ++j) buckets.insert(row_bucket[static_cast<size_t>(four[j])]);
    CHECK(buckets == std::set<int64_t>{0});  // bucket 1 never fills a group of 4
    CHECK(epochs_four[k] == static_cast<int64_t>(k / 4));  // one group per epoch
  }
  CHECK(std::find(four.begin(), four.end(), 9) == four.end());

  SECTION("a micro-batch that does not divide the global batch is a bug") {
    tt::DataCursor cursor = make();
    std::vector<int64_t> epochs;
    CHECK_THROWS_AS(cursor.next(3, 10, 5, &epochs), tt::Error);
  }
  SECTION("no bucket holding a global batch is TT_ERR_DATA") {
    tt::DataCursor cursor = make();
    cursor.step_samples = 8;
    std::vector<int64_t> epochs;
    try {
      (void)cursor.next(4, 10, 5, &epochs);
      FAIL("no error");
    } catch (const tt::Error& error) {
      CHECK(error.code() == tt::ErrorCode::kData);
    }
  }
}
