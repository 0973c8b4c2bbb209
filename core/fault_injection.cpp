// FaultPlan (see fault_injection.h): parsing TELETRON_FAULTS.
#include "core/fault_injection.h"

#include <cstdlib>
#include <sstream>

#include "core/errors.h"

namespace tt {
namespace {

constexpr const char* kHint =
    "write TELETRON_FAULTS as KIND@STEP[,STEP...][;KIND@...], KIND one of: nonfinite_grad, oom, "
    "graph_capture, disk_full";

struct FaultName {
  Fault fault;
  const char* name;
};
constexpr FaultName kNames[] = {{Fault::kNonfiniteGrad, "nonfinite_grad"},
                                {Fault::kOom, "oom"},
                                {Fault::kGraphCapture, "graph_capture"},
                                {Fault::kDiskFull, "disk_full"}};

std::string join_steps(const std::set<int64_t>& steps) {
  std::string out;
  for (const int64_t step : steps) {
    if (!out.empty()) out += ',';
    out += std::to_string(step);
  }
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
    const FaultName* named = nullptr;
    for (const FaultName& candidate : kNames)
      if (kind == candidate.name) named = &candidate;
    TT_CHECK_HINT(named != nullptr, ErrorCode::kConfig, kHint, origin, ": unknown fault '", kind, "'");
    std::set<int64_t>& into = plan.steps_[named->fault];
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
  const auto found = steps_.find(fault);
  return found != steps_.end() && found->second.count(step) != 0;
}

std::string FaultPlan::describe() const {
  std::string out;
  for (const FaultName& named : kNames) {
    const auto found = steps_.find(named.fault);
    if (found == steps_.end()) continue;
    out += str_cat(out.empty() ? "" : ";", named.name, "@", join_steps(found->second));
  }
  return out;
}

}  // namespace tt
