// GraphPolicy (core/graph_policy): warm-up, capture, retry after a failed capture, giving up after
// `retry`, and dropping a graph that is not faster than eager (threshold never below 1).
#include "core/graph_policy.h"

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <memory>

using Catch::Matchers::ContainsSubstring;
using tt::GraphAction;

namespace {

tt::GraphPolicyOptions options(int64_t warmup, int64_t frequency, int64_t retry, double threshold) {
  tt::GraphPolicyOptions o;
  o.warmup_steps = warmup;
  o.capture_frequency = frequency;
  o.retry = retry;
  o.threshold = threshold;
  return o;
}

// Runs eager steps of `ms` while the policy asks for them; returns how many ran.
int64_t run_eager(tt::GraphPolicy& policy, const std::string& shape, double ms) {
  int64_t steps = 0;
  while (policy.next(shape) == GraphAction::kEager && steps < 1000) {
    policy.eager_step(shape, ms);
    ++steps;
  }
  return steps;
}

}  // namespace

TEST_CASE("graph policy: warm-up steps run eagerly, then the shape is captured and replayed", "[graph]") {
  tt::GraphPolicy policy(options(3, 2, 1, 0.8));
  CHECK(run_eager(policy, "a", 10.0) == 3);
  CHECK(policy.next("a") == GraphAction::kCapture);
  policy.capture_succeeded("a");
  CHECK(policy.next("a") == GraphAction::kReplay);
  // Another shape has its own warm-up.
  CHECK(policy.next("b") == GraphAction::kEager);
  // A warm-up of 0 still runs two eager steps: the first is not timed.
  tt::GraphPolicy quick(options(0, 2, 1, 0.8));
  CHECK(run_eager(quick, "a", 10.0) == 2);
}

TEST_CASE("graph policy: steps count as they run, their times may come later", "[graph]") {
  tt::GraphPolicy policy(options(3, 2, 0, 0.8));
  for (int i = 0; i < 3; ++i) {
    REQUIRE(policy.next("a") == GraphAction::kEager);
    policy.eager_step("a", -1.0);  // not timed yet
  }
  CHECK(policy.eager_steps("a") == 3);
  CHECK(policy.next("a") == GraphAction::kCapture);
  CHECK(policy.eager_ms("a") == 0.0);
  policy.eager_time("a", 10.0);
  policy.eager_time("a", 20.0);
  CHECK(policy.eager_ms("a") == 15.0);
  policy.capture_succeeded("a");
  policy.replay_step("a", 16.0);
  policy.replay_step("a", 16.0);  // slower than the late eager reference: dropped
  CHECK(policy.dropped("a"));
}

TEST_CASE("graph policy: a failed capture runs eager steps and retries, at most `retry` times", "[graph]") {
  tt::GraphPolicy policy(options(2, 3, 2, 0.8));
  CHECK(run_eager(policy, "a", 10.0) == 2);
  for (int failure = 1; failure <= 2; ++failure) {
    REQUIRE(policy.next("a") == GraphAction::kCapture);
    policy.capture_failed("a");
    CHECK(run_eager(policy, "a", 10.0) == 3);  // capture_frequency eager steps before the retry
  }
  REQUIRE(policy.next("a") == GraphAction::kCapture);
  policy.capture_failed("a");  // the third: out of retries
  CHECK(run_eager(policy, "a", 10.0) == 1000);
  CHECK_THAT(policy.describe("a"), ContainsSubstring("3 failed capture(s)"));
  CHECK_THAT(policy.describe("a"), ContainsSubstring("eager for good"));
  CHECK_FALSE(policy.dropped("a"));
}

TEST_CASE("graph policy: a graph not faster than eager is dropped, whatever the threshold", "[graph]") {
  auto captured = [](double threshold) {
    auto policy = std::make_unique<tt::GraphPolicy>(options(3, 4, 0, threshold));
    policy->eager_step("a", 999.0);  // the first step is not timed
    policy->eager_step("a", 10.0);
    policy->eager_step("a", 10.0);   // eager reference: 10 ms
    REQUIRE(policy->next("a") == GraphAction::kCapture);
    return policy;
  };
  SECTION("faster: kept") {
    auto policy = captured(0.8);
    policy->capture_succeeded("a");
    for (int i = 0; i < 8; ++i) policy->replay_step("a", 8.0);
    CHECK(policy->next("a") == GraphAction::kReplay);
    CHECK_THAT(policy->describe("a"), ContainsSubstring("kept"));
  }
  SECTION("slower than eager with threshold 0.8 (below 1): dropped") {
    auto policy = captured(0.8);
    policy->capture_succeeded("a");
    for (int i = 0; i < 3; ++i) policy->replay_step("a", 12.0);
    CHECK(policy->next("a") == GraphAction::kReplay);  // compared every 4 replays
    policy->replay_step("a", 12.0);
    CHECK(policy->dropped("a"));
    CHECK(policy->next("a") == GraphAction::kEager);
  }
  SECTION("a threshold above 1 asks for that speed-up") {
    auto policy = captured(1.5);
    policy->capture_succeeded("a");
    for (int i = 0; i < 4; ++i) policy->replay_step("a", 8.0);  // 1.25x < 1.5
    CHECK(policy->dropped("a"));
  }
}

TEST_CASE("graph policy: a graph dropped for memory runs eagerly for good, its last comparison still kept",
          "[graph]") {
  tt::GraphPolicy policy(options(3, 4, 0, 0.8));
  CHECK(run_eager(policy, "a", 10.0) == 3);
  REQUIRE(policy.next("a") == GraphAction::kCapture);
  policy.capture_succeeded("a");
  for (int i = 0; i < 4; ++i) policy.replay_step("a", 5.0);  // 2x: kept
  REQUIRE(policy.next("a") == GraphAction::kReplay);
  policy.drop_for_memory("a");
  CHECK(policy.next("a") == GraphAction::kEager);
  CHECK(policy.dropped("a"));
  CHECK(policy.eager_for_good("a"));
  for (int i = 0; i < 8; ++i) policy.eager_step("a", 10.0);
  CHECK(policy.next("a") == GraphAction::kEager);  // never captured again
  const std::string text = policy.describe("a");
  CHECK_THAT(
      text, ContainsSubstring("2x, kept, dropped to give its memory back (an eager step ran out of memory)"));
  CHECK_THAT(text, !ContainsSubstring("not faster"));
}

TEST_CASE("graph policy: a shape with no room for its graph runs eagerly for good and is never captured",
          "[graph]") {
  tt::GraphPolicy policy(options(3, 4, 2, 0.8));
  CHECK(run_eager(policy, "a", 10.0) == 3);
  REQUIRE(policy.next("a") == GraphAction::kCapture);
  policy.no_room("a");
  CHECK(policy.next("a") == GraphAction::kEager);
  CHECK(policy.dropped("a"));  // not handed on to block graphs (cuda_graph.scope auto)
  CHECK(policy.eager_for_good("a"));
  for (int i = 0; i < 20; ++i) policy.eager_step("a", 10.0);
  CHECK(policy.next("a") == GraphAction::kEager);
  const std::string text = policy.describe("a");
  CHECK_THAT(text, ContainsSubstring("not captured (its graph would leave too little memory"));
  CHECK_THAT(text, !ContainsSubstring("out of retries"));
}

TEST_CASE(
    "graph policy: a shape's eager steps beat its reference's only where both are timed and its own are "
    "faster",
    "[graph]") {
  tt::GraphPolicy policy(options(3, 2, 0, 0.8));
  CHECK_FALSE(policy.eager_beats_reference("a"));  // no reference
  policy.set_reference("a", "trim a");
  for (double ms : {50.0, 7.0, 7.0}) policy.eager_step("a", ms);  // the first is not timed: 7 ms
  CHECK_FALSE(policy.eager_beats_reference("a"));                 // the reference not timed yet
  for (double ms : {50.0, 9.0, 9.0}) policy.eager_step("trim a", ms);
  CHECK(policy.eager_beats_reference("a"));  // 7 < 9
  for (int i = 0; i < 4; ++i) policy.eager_step("trim a", 3.0);
  CHECK_FALSE(policy.eager_beats_reference("a"));  // 7 > (9 + 9 + 4 x 3) / 6 = 5
}

TEST_CASE("graph policy: a reference's eager steps count as an eager alternative; the graph must beat the faster",
          "[graph]") {
  // "a" padded: eager 10 ms; its reference "trim a" (the same samples, text trimmed): eager 7 ms.
  auto policy = std::make_unique<tt::GraphPolicy>(options(3, 2, 0, 0.8));
  for (double ms : {50.0, 7.0, 7.0}) policy->eager_step("trim a", ms);
  CHECK(policy->eager_ms("trim a") == 7.0);
  run_eager(*policy, "a", 10.0);
  REQUIRE(policy->next("a") == GraphAction::kCapture);
  policy->set_reference("a", "trim a");
  policy->capture_succeeded("a");
  SECTION("replay faster than the padded eager step but not than the trimmed one: dropped") {
    policy->replay_step("a", 8.0);
    policy->replay_step("a", 8.0);
    CHECK(policy->dropped("a"));
    CHECK(policy->next("a") == GraphAction::kEager);
    CHECK_THAT(policy->describe("a"), ContainsSubstring("eager 7 ms ([trim a], faster than this shape's 10 ms)"));
  }
  SECTION("replay faster than both: kept") {
    policy->replay_step("a", 6.0);
    policy->replay_step("a", 6.0);
    CHECK_FALSE(policy->dropped("a"));
    CHECK(policy->next("a") == GraphAction::kReplay);
  }
  SECTION("a reference slower than the shape's own eager steps changes nothing") {
    policy->set_reference("a", "slow");
    for (double ms : {50.0, 20.0}) policy->eager_step("slow", ms);
    policy->replay_step("a", 9.0);
    policy->replay_step("a", 9.0);
    CHECK_FALSE(policy->dropped("a"));
    CHECK_THAT(policy->describe("a"), !ContainsSubstring("faster than this shape's"));
    CHECK_THAT(policy->describe("a"), ContainsSubstring("eager alternative [slow] 20 ms"));
  }
}
