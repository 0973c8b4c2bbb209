// Faults on demand, for tests of the recovery paths: TELETRON_FAULTS="KIND@STEP[,STEP...][;KIND@...]"
// names the optimizer steps (1-based, the step being computed) where each fault happens, e.g.
// "nonfinite_grad@3,4;oom@2"; for disk_full the numbers count the row files preprocess writes. Read once by
// the object that acts on it (a Trainer, a preprocess run), never a global: two ranks in one process each
// hold their own plan.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>

namespace tt {

enum class Fault {
  kNonfiniteGrad,  // after backward, one gradient is set to inf (loss scaling must absorb it)
  kOom,            // the step's last micro-batch raises CUDA's out-of-memory error (once per listed step)
  kGraphCapture,   // a CUDA-graph capture attempted at that step fails inside the capture
  kDiskFull,       // preprocess: the Nth row file this run writes fails as a full disk would (ENOSPC)
};

class FaultPlan {
 public:
  /// Parses the TELETRON_FAULTS syntax; a malformed text is TT_ERR_CONFIG naming `origin`.
  static FaultPlan parse(const std::string& text, const std::string& origin);
  /// The plan TELETRON_FAULTS describes (empty when unset).
  static FaultPlan from_environment();

  bool empty() const { return steps_.empty(); }
  bool at(Fault fault, int64_t step) const;
  /// "nonfinite_grad@3,4;oom@2", for the start-up log.
  std::string describe() const;

 private:
  std::map<Fault, std::set<int64_t>> steps_;
};

}  // namespace tt
