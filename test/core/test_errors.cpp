// TT_ERR_* codes: distinct exit statuses in [2, 30], names, message layout.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <torch/torch.h>

#include <optional>
#include <set>

#include "core/errors.h"

// GCC says __SANITIZE_ADDRESS__, clang __has_feature (which GCC's preprocessor may not parse).
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAddressSanitizer = true;
#else
constexpr bool kAddressSanitizer = false;
#endif
#else
constexpr bool kAddressSanitizer = false;
#endif

using Catch::Matchers::StartsWith;
using Catch::Matchers::ContainsSubstring;

TEST_CASE("every error code has a distinct exit status between 2 and 30", "[errors]") {
  std::set<int> statuses;
  std::set<std::string> names;
  for (int i = 0; i < tt::kErrorCodeCount; ++i) {
    auto code = static_cast<tt::ErrorCode>(i);
    int status = tt::error_exit_code(code);
    CHECK(status >= 2);
    CHECK(status <= 30);
    statuses.insert(status);
    std::string name = tt::error_name(code);
    CHECK_THAT(name, StartsWith("TT_ERR_"));
    names.insert(name);
    CHECK(std::string(tt::error_default_hint(code)).size() > 10);
  }
  CHECK(statuses.size() == tt::kErrorCodeCount);
  CHECK(names.size() == tt::kErrorCodeCount);
  CHECK(std::string(tt::error_name(tt::ErrorCode::kSync)) == "TT_ERR_SYNC");
  // Hints name the keys that get the user out.
  const std::string memory = tt::error_default_hint(tt::ErrorCode::kMemory);
  CHECK_THAT(memory, ContainsSubstring("gradient_accumulation"));
  CHECK_THAT(memory, ContainsSubstring("model.activation_checkpointing"));
  // Graphs are built: their hint turns them off or narrows them, and no longer says they do not exist.
  const std::string graph = tt::error_default_hint(tt::ErrorCode::kGraph);
  CHECK_THAT(graph, ContainsSubstring("cuda_graph.enabled: false"));
  CHECK_THAT(graph, ContainsSubstring("cuda_graph.scope: blocks"));
  CHECK_FALSE(graph.find("not capture") != std::string::npos);
}

TEST_CASE("formatted errors start with the code name and end with a hint", "[errors]") {
  tt::Error error(tt::ErrorCode::kData, "rows.jsonl:3: x.safetensors missing", "fix the row");
  std::string text = tt::format_error(error);
  CHECK_THAT(text, StartsWith("TT_ERR_DATA: rows.jsonl:3: x.safetensors missing"));
  CHECK_THAT(text, ContainsSubstring("hint: fix the row"));
  tt::Error defaulted(tt::ErrorCode::kNan, "loss is NaN");
  CHECK(defaulted.hint() == tt::error_default_hint(tt::ErrorCode::kNan));
  try {
    TT_CHECK(1 + 1 == 3, tt::ErrorCode::kIo, "value ", 42, " bad");
    FAIL("TT_CHECK did not throw");
  } catch (const tt::Error& caught) {
    CHECK(caught.code() == tt::ErrorCode::kIo);
    CHECK(std::string(caught.what()) == "value 42 bad");
  }
  CHECK_THROWS_AS([] { TT_ASSERT(false, "invariant"); }(), tt::Error);
}

TEST_CASE("a host allocation LibTorch cannot make is TT_ERR_MEMORY, not an internal error", "[errors]") {
  // ASan's allocator stops the process on a request this size instead of failing it.
  if (kAddressSanitizer) SKIP("under AddressSanitizer a 4 PiB request aborts rather than failing");
  std::optional<tt::Error> error;
  try {
    const torch::Tensor huge = torch::empty({int64_t{1} << 52}, torch::kByte);  // 4 PiB
    FAIL("allocated " << huge.numel() << " bytes");
  } catch (...) {
    error = tt::error_of_current_exception();
  }
  REQUIRE(error.has_value());
  CHECK(error->code() == tt::ErrorCode::kMemory);
  CHECK_THAT(std::string(error->what()), ContainsSubstring("out of host memory"));
}
