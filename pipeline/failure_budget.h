// How many rows of a dataset may fail to load (data.max_failed_share of them) before a run stops:
// the one place that counts failures against the share, for training on video (clips that cannot
// be opened at start-up, samples that fail while training) and for `teletron preprocess`.
#pragma once

#include <cstdint>
#include <string>

namespace tt {

class FailureBudget {
 public:
  /// `share` in [0, 1] of `rows` rows may fail (rounded down).
  FailureBudget(double share, int64_t rows);
  /// Counts `count` more failures; once more than the budget have failed, throws TT_ERR_DATA:
  /// "<failed> of <rows> rows failed (<what>), more than data.max_failed_share (<share>) allows<detail>"
  /// with a hint naming validate-data and the key.
  void add(int64_t count, const std::string& what, const std::string& detail = "");
  int64_t failed() const { return failed_; }
  int64_t allowed() const { return allowed_; }

 private:
  double share_ = 0.0;
  int64_t rows_ = 0;
  int64_t allowed_ = 0;
  int64_t failed_ = 0;
};

}  // namespace tt
