// --profile's parts (core/profiler): the FIRST:COUNT window and the busy share of a Chrome trace
// (union of kernel intervals: overlapping kernels count once, the wall is every event's span).
#include "core/profiler.h"

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_floating_point.hpp>
#include <nlohmann/json.hpp>

#include "core/errors.h"
#include "test/test_util.h"

using Catch::Matchers::WithinAbs;

TEST_CASE("the profile window is FIRST:COUNT; anything else is TT_ERR_CONFIG", "[profile]") {
  const tt::ProfileWindow window = tt::parse_profile_window("20:5", "--profile");
  CHECK(window.first == 20);
  CHECK(window.count == 5);
  CHECK(window.last() == 24);
  CHECK(window.active());
  CHECK_FALSE(tt::ProfileWindow{}.active());
  for (const char* bad : {"20", "20:", ":5", "0:5", "20:0", "a:5", "20:5x", "-1:3"}) {
    INFO(bad);
    CHECK(tt::test::expect_error([&] { tt::parse_profile_window(bad, "--profile"); }).code() ==
          tt::ErrorCode::kConfig);
  }
}

TEST_CASE("a trace's GPU busy share is the union of its kernel intervals over its span", "[profile]") {
  // CPU ops span 0..1000 µs; kernels at 100-300 and 200-400 (two streams, overlapping: 300 µs
  // together) and 600-700; a zero-length kernel and a non-X event count for nothing.
  const nlohmann::json trace = {
      {"traceEvents",
       {{{"ph", "X"}, {"cat", "cpu_op"}, {"name", "aten::mm"}, {"ts", 0}, {"dur", 1000}},
        {{"ph", "X"}, {"cat", "kernel"}, {"name", "a"}, {"ts", 100}, {"dur", 200}},
        {{"ph", "X"}, {"cat", "kernel"}, {"name", "b"}, {"ts", 200}, {"dur", 200}},
        {{"ph", "X"}, {"cat", "kernel"}, {"name", "c"}, {"ts", 600.5}, {"dur", 100}},
        {{"ph", "X"}, {"cat", "kernel"}, {"name", "d"}, {"ts", 650}, {"dur", 0}},
        {{"ph", "i"}, {"cat", "kernel"}, {"name", "marker"}, {"ts", 5000}},
        {{"ph", "X"}, {"cat", "gpu_memcpy"}, {"name", "copy"}, {"ts", 450}, {"dur", 100}}}}};
  const tt::TraceBusy busy = tt::trace_busy(trace);
  CHECK_THAT(busy.wall_s, WithinAbs(1000e-6, 1e-12));
  CHECK_THAT(busy.kernel_s, WithinAbs(400e-6, 1e-12));
  CHECK(busy.kernels == 4);
  CHECK_THAT(busy.share(), WithinAbs(0.4, 1e-9));
  CHECK(tt::trace_busy(nlohmann::json::object()).share() == 0.0);
}
