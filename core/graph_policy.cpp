// GraphPolicy (see graph_policy.h): the per-shape state machine.
#include "core/graph_policy.h"

#include <algorithm>

#include "core/errors.h"

namespace tt {

GraphPolicy::GraphPolicy(const GraphPolicyOptions& options) : options_(options) {
  TT_ASSERT(options.warmup_steps >= 0 && options.capture_frequency >= 1 && options.retry >= 0 &&
                options.threshold > 0,
            "GraphPolicy: bad options");
}

GraphPolicy::Shape& GraphPolicy::at(const std::string& shape) { return shapes_[shape]; }

GraphAction GraphPolicy::next(const std::string& shape) {
  Shape& s = at(shape);
  switch (s.phase) {
    case Phase::kWarmup:
      return GraphAction::kEager;
    case Phase::kCaptureDue:
      return GraphAction::kCapture;
    case Phase::kReplaying:
      return GraphAction::kReplay;
    case Phase::kEagerForGood:
      return GraphAction::kEager;
  }
  return GraphAction::kEager;
}

void GraphPolicy::eager_step(const std::string& shape, double ms) {
  Shape& s = at(shape);
  s.eager_steps += 1;
  if (s.eager_steps > 1 && ms >= 0) {  // the first pays for allocation and kernel choice
    s.eager_ms_sum += ms;
    s.timed += 1;
  }
  if (s.phase != Phase::kWarmup) return;
  if (s.failures == 0) {
    if (s.eager_steps >= std::max<int64_t>(options_.warmup_steps, 2)) s.phase = Phase::kCaptureDue;
  } else if (--s.wait <= 0) {
    s.phase = Phase::kCaptureDue;
  }
}

void GraphPolicy::eager_time(const std::string& shape, double ms) {
  Shape& s = at(shape);
  s.eager_ms_sum += ms;
  s.timed += 1;
}

int64_t GraphPolicy::eager_steps(const std::string& shape) const {
  const auto found = shapes_.find(shape);
  return found == shapes_.end() ? 0 : found->second.eager_steps;
}

void GraphPolicy::capture_succeeded(const std::string& shape) {
  Shape& s = at(shape);
  s.phase = Phase::kReplaying;
  s.window_replays = 0;
  s.window_ms_sum = 0;
}

void GraphPolicy::capture_failed(const std::string& shape) {
  Shape& s = at(shape);
  s.failures += 1;
  if (s.failures > options_.retry) {
    s.phase = Phase::kEagerForGood;
    return;
  }
  s.phase = Phase::kWarmup;
  s.wait = options_.capture_frequency;
}

void GraphPolicy::replay_step(const std::string& shape, double ms) {
  Shape& s = at(shape);
  if (s.phase != Phase::kReplaying) return;
  s.window_replays += 1;
  s.window_ms_sum += ms;
  if (s.window_replays < options_.capture_frequency) return;
  const double replay = s.window_ms_sum / static_cast<double>(s.window_replays);
  double eager = s.timed > 0 ? s.eager_ms_sum / static_cast<double>(s.timed) : 0.0;
  const double reference = s.reference.empty() ? 0.0 : eager_ms(s.reference);
  s.last_by_reference = reference > 0 && (eager <= 0 || reference < eager);
  if (s.last_by_reference) eager = reference;
  s.last_speedup = replay > 0 ? eager / replay : 0.0;
  s.last_eager_ms = eager;
  s.last_replay_ms = replay;
  s.window_replays = 0;
  s.window_ms_sum = 0;
  if (s.last_speedup < std::max(options_.threshold, 1.0)) {
    s.phase = Phase::kEagerForGood;
    s.dropped = true;
  }
}

void GraphPolicy::drop_for_memory(const std::string& shape) {
  Shape& s = at(shape);
  s.phase = Phase::kEagerForGood;
  s.dropped = true;
  s.for_memory = true;
}

void GraphPolicy::no_room(const std::string& shape) {
  Shape& s = at(shape);
  s.phase = Phase::kEagerForGood;
  s.dropped = true;
  s.no_room = true;
}

void GraphPolicy::set_reference(const std::string& shape, const std::string& reference) {
  TT_ASSERT(shape != reference, "GraphPolicy: a shape cannot be its own reference");
  at(shape).reference = reference;
}

bool GraphPolicy::dropped(const std::string& shape) const {
  const auto found = shapes_.find(shape);
  return found != shapes_.end() && found->second.dropped;
}

std::string GraphPolicy::reference(const std::string& shape) const {
  const auto found = shapes_.find(shape);
  return found == shapes_.end() ? std::string() : found->second.reference;
}

bool GraphPolicy::eager_beats_reference(const std::string& shape) const {
  const auto found = shapes_.find(shape);
  if (found == shapes_.end() || found->second.reference.empty()) return false;
  const double own = eager_ms(shape);
  const double reference = eager_ms(found->second.reference);
  return own > 0 && reference > 0 && own < reference;
}

double GraphPolicy::eager_ms(const std::string& shape) const {
  const auto found = shapes_.find(shape);
  if (found == shapes_.end() || found->second.timed == 0) return 0.0;
  return found->second.eager_ms_sum / static_cast<double>(found->second.timed);
}

bool GraphPolicy::eager_for_good(const std::string& shape) const {
  const auto found = shapes_.find(shape);
  return found != shapes_.end() && found->second.phase == Phase::kEagerForGood;
}

std::string GraphPolicy::describe_all() const {
  std::string text;
  for (const auto& [shape, state] : shapes_) {
    // A shape only named (a reference set ahead of any step) has nothing to say.
    if (state.eager_steps == 0 && state.failures == 0 && state.phase == Phase::kWarmup) continue;
    text += str_cat("[", shape, "]: ", describe(shape), "\n");
  }
  return text;
}

std::string GraphPolicy::describe(const std::string& shape) const {
  const auto found = shapes_.find(shape);
  if (found == shapes_.end()) return "no steps yet";
  const Shape& s = found->second;
  const double eager = s.timed > 0 ? s.eager_ms_sum / static_cast<double>(s.timed) : 0.0;
  std::string text = str_cat("eager ", eager, " ms (", s.timed, " timed)");
  if (!s.reference.empty()) text += str_cat(", eager alternative [", s.reference, "] ", eager_ms(s.reference), " ms");
  if (s.failures > 0) text += str_cat(", ", s.failures, " failed capture(s)");
  if (s.last_speedup > 0)
    text += str_cat(
        "; at the last comparison eager ", s.last_eager_ms, " ms",
        s.last_by_reference ? str_cat(" ([", s.reference, "], faster than this shape's ", eager, " ms)") : "",
        ", replay ", s.last_replay_ms, " ms: ", s.last_speedup, "x, ",
        s.dropped && !s.for_memory && !s.no_room ? "dropped (not faster than the threshold allows)" : "kept");
  if (s.phase == Phase::kEagerForGood && !s.dropped) text += ", eager for good (out of retries)";
  if (s.for_memory) text += ", dropped to give its memory back (an eager step ran out of memory)";
  if (s.no_room)
    text += ", not captured (its graph would leave too little memory for the other shapes' eager steps)";
  return text;
}

}  // namespace tt
