// Every citation of the project's documents resolves: each "docs/NAME.md" named in the code, the
// scripts, the tests and the top-level documents exists, and ARCHITECTURE.md / CONFIG.md are never
// cited without their docs/ folder (the design notes of those names live outside the repository).
#include <catch2/catch_test_macros.hpp>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

std::vector<fs::path> cited_files() {
  const fs::path root = TELETRON_SOURCE_DIR;
  std::vector<fs::path> files = {root / "README.md", root / "BENCHMARKS.md", root / "CMakeLists.txt"};
  for (const char* folder : {"app", "core", "cuda", "model", "pipeline", "test", "scripts", "cmake", "configs"}) {
    for (const auto& entry : fs::recursive_directory_iterator(root / folder)) {
      if (!entry.is_regular_file()) continue;
      const std::string ext = entry.path().extension().string();
      if (ext == ".cpp" || ext == ".h" || ext == ".cu" || ext == ".cuh" || ext == ".sh" || ext == ".py" ||
          ext == ".txt" || ext == ".cmake" || ext == ".md" || ext == ".yaml")
        files.push_back(entry.path());
    }
  }
  return files;
}

}  // namespace

TEST_CASE("every docs/ citation names a file that exists, and none omits docs/", "[docs]") {
  const fs::path root = TELETRON_SOURCE_DIR;
  const std::regex cited(R"((docs/)?\b(ARCHITECTURE|CONFIG)\.md\b)");
  const std::regex docs_path(R"(docs/([A-Za-z0-9_-]+\.md))");
  int citations = 0;
  for (const fs::path& file : cited_files()) {
    if (file.filename() == "test_docs.cpp") continue;
    std::ifstream in(file);
    std::stringstream text;
    text << in.rdbuf();
    const std::string body = text.str();
    for (auto it = std::sregex_iterator(body.begin(), body.end(), docs_path); it != std::sregex_iterator(); ++it) {
      ++citations;
      INFO(file.string() << " cites docs/" << (*it)[1]);
      CHECK(fs::is_regular_file(root / "docs" / (*it)[1].str()));
    }
    for (auto it = std::sregex_iterator(body.begin(), body.end(), cited); it != std::sregex_iterator(); ++it) {
      const std::string match = (*it)[0];
      // "../shared/X.md" is the design notes, named as such on purpose.
      const auto at = static_cast<size_t>(it->position(0));
      const bool shared = at >= 10 && body.compare(at - 10, 10, "../shared/") == 0;
      INFO(file.string() << ": \"" << match << "\" without docs/");
      CHECK((match.rfind("docs/", 0) == 0 || shared));
    }
  }
  CHECK(citations > 5);
}
