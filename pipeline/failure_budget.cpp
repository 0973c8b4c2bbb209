// FailureBudget (see failure_budget.h).
#include "pipeline/failure_budget.h"

#include "core/errors.h"

namespace tt {

FailureBudget::FailureBudget(double share, int64_t rows)
    : share_(share), rows_(rows), allowed_(static_cast<int64_t>(share * static_cast<double>(rows))) {}

void FailureBudget::add(int64_t count, const std::string& what, const std::string& detail) {
  failed_ += count;
  TT_CHECK_HINT(failed_ <= allowed_, ErrorCode::kData,
                "run `teletron validate-data` on the config and fix or drop the files it lists, or raise "
                "tele_tron.data.max_failed_share",
                failed_, " of ", rows_, " rows failed (", what, "), more than data.max_failed_share (", share_,
                ") allows", detail);
}

}  // namespace tt
