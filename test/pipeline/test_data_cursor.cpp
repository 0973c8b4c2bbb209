// DataCursor: the sample order of training, with and without buckets.
#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <set>
#include <string>
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

TEST_CASE("token budget: the bucket with the most tokens keeps the global batch, the others about its tokens",
          "[data_cursor][dynamic]") {
  CHECK(tt::token_budget_samples({32, 24, 8}, 3) == std::vector<int64_t>{3, 4, 12});
  CHECK(tt::token_budget_samples({100, 7}, 1) == std::vector<int64_t>{1, 14});
  CHECK(tt::token_budget_samples({5, 50}, 2) == std::vector<int64_t>{20, 2});
  CHECK(tt::token_budget_samples({10}, 4) == std::vector<int64_t>{4});
}

TEST_CASE("groups of each bucket's own size: next_group takes one whole group, never mixing buckets; a copy at any "
          "position continues the same sequence",
          "[data_cursor][dynamic]") {
  // 12 rows: bucket 0 has 7, bucket 1 has 5. Bucket 0 steps of 2, bucket 1 steps of 3: per epoch
  // three groups of bucket 0 (one row left) and one of bucket 1 (two rows left).
  const std::vector<int64_t> row_bucket = {0, 1, 0, 0, 1, 0, 1, 0, 1, 0, 1, 0};
  tt::DataCursor cursor;
  cursor.row_bucket = row_bucket;
  cursor.step_samples = 2;
  cursor.bucket_samples = {2, 3};
  CHECK(cursor.samples_of(0) == 2);
  CHECK(cursor.samples_of(1) == 3);
  std::vector<std::vector<int64_t>> groups;
  std::vector<int64_t> epochs;
  tt::DataCursor copy;
  for (int k = 0; k < 12; ++k) {
    if (k == 5) copy = cursor;  // inside epoch 1, after its first group
    groups.push_back(cursor.next_group(12, 9, &epochs));
  }
  int per_epoch[2][2] = {{0, 0}, {0, 0}};
  size_t at = 0;
  for (const auto& group : groups) {
    const int64_t bucket = row_bucket[static_cast<size_t>(group.front())];
    INFO("group of " << group.size() << " rows, bucket " << bucket);
    CHECK(static_cast<int64_t>(group.size()) == (bucket == 0 ? 2 : 3));
    for (int64_t row : group) CHECK(row_bucket[static_cast<size_t>(row)] == bucket);
    const int64_t epoch = epochs[at];
    for (size_t j = at; j < at + group.size(); ++j) CHECK(epochs[j] == epoch);
    if (epoch < 2) per_epoch[epoch][bucket] += 1;
    at += group.size();
  }
  CHECK(per_epoch[0][0] == 3);
  CHECK(per_epoch[0][1] == 1);
  CHECK(per_epoch[1][0] == 3);
  CHECK(per_epoch[1][1] == 1);
  // The copy made after five groups draws groups 6-12 again.
  std::vector<int64_t> copy_epochs;
  for (int k = 5; k < 12; ++k) CHECK(copy.next_group(12, 9, &copy_epochs) == groups[static_cast<size_t>(k)]);
  // Without per-bucket sizes next_group is next(step_samples).
  tt::DataCursor plain, by_next;
  plain.row_bucket = by_next.row_bucket = row_bucket;
  plain.step_samples = by_next.step_samples = 2;
  std::vector<int64_t> e1, e2;
  for (int k = 0; k < 6; ++k) CHECK(plain.next_group(12, 9, &e1) == by_next.next(2, 12, 9, &e2));
  SECTION("a bucket that never fills its group is left out; none filling any is TT_ERR_DATA") {
    tt::DataCursor big;
    big.row_bucket = row_bucket;
    big.step_samples = 2;
    big.bucket_samples = {8, 6};
    std::vector<int64_t> none;
    try {
      (void)big.next_group(12, 9, &none);
      FAIL("no error");
    } catch (const tt::Error& error) {
      CHECK(error.code() == tt::ErrorCode::kData);
      CHECK(std::string(error.what()).find("token_budget") != std::string::npos);
    }
    big.bucket_samples = {8, 5};  // bucket 1's five rows make one group per epoch
    for (int k = 0; k < 3; ++k) {
      const std::vector<int64_t> group = big.next_group(12, 9, &none);
      CHECK(group.size() == 5);
      for (int64_t row : group) CHECK(row_bucket[static_cast<size_t>(row)] == 1);
    }
  }
}
