// FaultPlan (see fault_injection.h): parsing TELETRON_FAULTS.
#include "core/fault_injection.h"

#include <cstdlib>
#include <sstream>

#include "core/errors.h"

namespace tt {
namespace {

constexpr const char* kHint = "write TELETRON_FAULTS as KIND@STEP[,STEP...][;KIND@...], KIND one of: nonfinite_grad, oom";

std::string join_steps(const std::set<int64_t>& steps) {
  std::string out;
  for (const int64_t step : steps) out += (out.empty() ? "" : ",") + std::to_string(step);
  return out;
}

}  // namespace

FaultPlan FaultPlan::parse(const std::string& text, const std::string& origin) {
  FaultPlan plan;
  std::stringstream entries(text);
  std::string entry;
  while (std::getline(entries, entry, ';')) {
    if (entry.empty()) continue;
    const size_t at = entry.find('@');
    TT_CHECK_HINT(at != std::string::npos, ErrorCode::kConfig, kHint, origin, ": '", entry, "' has no @STEP");
    const std::string kind = entry.substr(0, at);
    TT_CHECK_HINT(kind == "nonfinite_grad" || kind == "oom", ErrorCode::kConfig, kHint, origin, ": unknown fault '",
                  kind, "'");
    std::set<int64_t>& into = kind == "oom" ? plan.oom_ : plan.nonfinite_grad_;
    const std::string list = entry.substr(at + 1);
    TT_CHECK_HINT(!list.empty() && list.back() != ',', ErrorCode::kConfig, kHint, origin, ": '", entry,
                  "' lists no step after @ (or ends in a comma)");
    std::stringstream steps(list);
    std::string step;
    while (std::getline(steps, step, ',')) {
      char* end = nullptr;
      const long long value = std::strtoll(step.c_str(), &end, 10);
      TT_CHECK_HINT(!step.empty() && *end == '\0' && value >= 1, ErrorCode::kConfig, kHint, origin, ": '", step,
                    "' in '", entry, "' is not a step number >= 1");
      into.insert(value);
    }
  }
  return plan;
}

FaultPlan FaultPlan::from_environment() {
  const char* text = std::getenv("TELETRON_FAULTS");
  return text == nullptr ? FaultPlan() : parse(text, "TELETRON_FAULTS");
}

bool FaultPlan::at(Fault fault, int64_t step) const {
  switch (fault) {
    case Fault::kNonfiniteGrad:
      return nonfinite_grad_.count(step) != 0;
    case Fault::kOom:
      return oom_.count(step) != 0;
  }
  return false;
}

std::string FaultPlan::describe() const {
  std::string out;
  if (!nonfinite_grad_.empty()) out = "nonfinite_grad@" + join_steps(nonfinite_grad_);
  if (!oom_.empty()) out += (out.empty() ? "oom@" : ";oom@") + join_steps(oom_);
  return out;
}

}  // namespace tt
