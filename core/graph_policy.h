// When the training loop captures a CUDA Graph of a step, replays it, or runs the step eagerly:
// the decisions behind cuda_graph.{warmup_steps, capture_frequency, retry, threshold}, kept apart
// from the capture itself so that they are tested without a GPU. One policy per training run (no
// global state); a "shape" is whatever makes a step need its own graph (bucket, micro-batch, text
// length), as a string key.
//
// Per shape: the first `warmup_steps` steps run eagerly and all but the first (allocator warm-up,
// kernel choice) are timed: the eager reference. Then the step is captured. A failed capture
// (TT_ERR_GRAPH, logged as a warning by the caller) sends the shape back to eager steps for
// `capture_frequency` steps and is retried, at most `retry` times; after that the shape stays eager.
// A captured shape replays; every `capture_frequency` replays their mean time is compared with the
// eager reference (no eager steps are re-run for it), and the graph is dropped for good unless
// eager / replay >= max(threshold, 1): a graph slower than eager is never kept, and a threshold
// above 1 asks for that much speed-up (1.1 = 10 % faster). A shape may name a reference shape
// (set_reference): the eager steps of another way to run the same samples that is never captured
// (the bucket with its text padding trimmed per batch); the eager side of a comparison is then the
// faster of the two means, so a graph is kept only while it beats every eager alternative timed.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace tt {

struct GraphPolicyOptions {
  /// Eager steps of a shape before its capture (at least 2 are run: the first is not timed).
  int64_t warmup_steps = 100;
  /// Replays between two comparisons with eager; eager steps between a failed capture and its retry.
  int64_t capture_frequency = 5;
  /// Failed captures of a shape tolerated; one more and it runs eagerly for good.
  int64_t retry = 3;
  /// The speed-up over eager (eager time / replay time) a graph must keep, never below 1.
  double threshold = 0.8;
};

enum class GraphAction { kEager, kCapture, kReplay };

class GraphPolicy {
 public:
  explicit GraphPolicy(const GraphPolicyOptions& options);

  /// What the next step of `shape` does.
  GraphAction next(const std::string& shape);
  /// An eager step of `shape` ran and took `ms` (the caller's measurement of the step's GPU time);
  /// ms < 0: its time is not known yet (eager_time gives it later). The warm-up and the wait before a
  /// retry count steps as they run, so a late timing never delays a capture.
  void eager_step(const std::string& shape, double ms);
  /// The time of an eager step counted earlier with ms < 0 (one that was not the shape's first).
  void eager_time(const std::string& shape, double ms);
  /// Eager steps of `shape` run so far.
  int64_t eager_steps(const std::string& shape) const;
  void capture_succeeded(const std::string& shape);
  void capture_failed(const std::string& shape);
  /// A replay of `shape` took `ms`; every capture_frequency replays the graph may be dropped
  /// (dropped() says so, and next() answers kEager from then on).
  void replay_step(const std::string& shape, double ms);
  /// The shape's graph was dropped to give its memory back (an eager step ran out of memory while
  /// it held pool memory): eager from now on, whatever its speed-up.
  void drop_for_memory(const std::string& shape);
  /// The shape is not captured: its graph's pool would leave the device too little memory for the
  /// other shapes' eager steps (StepGraphs' check before a capture). Eager from now on, counted as
  /// dropped (not handed on to block graphs, whose pool would take the same room).
  void no_room(const std::string& shape);
  /// `reference`'s timed eager steps count as an eager alternative of `shape` at its comparisons.
  void set_reference(const std::string& shape, const std::string& reference);

  bool dropped(const std::string& shape) const;
  /// set_reference's shape for `shape`, or "" when it has none.
  std::string reference(const std::string& shape) const;
  /// True when the shape's own timed eager steps are faster on average than its reference's (both
  /// timed): once its graphs are given up, the caller may keep the shape's way of running the samples
  /// rather than turn to the reference's.
  bool eager_beats_reference(const std::string& shape) const;
  /// The mean time of the shape's timed eager steps (0 before any).
  double eager_ms(const std::string& shape) const;
  /// Out of retries or dropped: the shape runs eagerly from now on.
  bool eager_for_good(const std::string& shape) const;
  /// "eager 10.2 ms (98 timed); at the last comparison eager 10.2 ms, replay 8.1 ms: 1.26x, kept"
  /// and the like, for the log.
  std::string describe(const std::string& shape) const;
  /// describe() of every shape seen, one "[shape]: ..." line each.
  std::string describe_all() const;

 private:
  enum class Phase { kWarmup, kCaptureDue, kReplaying, kEagerForGood };
  struct Shape {
    Phase phase = Phase::kWarmup;
    int64_t eager_steps = 0;      // eager steps run (warm-up and after failed captures)
    int64_t timed = 0;            // of those, timed into eager_ms_sum
    double eager_ms_sum = 0;
    int64_t failures = 0;
    int64_t wait = 0;             // eager steps left before the next capture attempt
    int64_t window_replays = 0;   // replays since the last comparison
    double window_ms_sum = 0;
    double last_speedup = 0;      // eager / replay at the last comparison
    double last_eager_ms = 0;     // the two means compared then
    double last_replay_ms = 0;
    bool last_by_reference = false;  // the reference's eager mean was the one compared
    bool dropped = false;
    bool for_memory = false;      // dropped by drop_for_memory
    bool no_room = false;         // never captured: no_room
    std::string reference;        // set_reference's shape, or ""
  };
  Shape& at(const std::string& shape);

  GraphPolicyOptions options_;
  std::map<std::string, Shape> shapes_;
};

}  // namespace tt
