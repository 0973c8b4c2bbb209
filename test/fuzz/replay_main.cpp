// Replays fuzz inputs without libFuzzer: links with one fuzz_<name>.cpp into fuzz_replay_<name>, a
// ctest test (test/fuzz/CMakeLists.txt) that calls LLVMFuzzerTestOneInput once on every file of
// the folders (or files) on its command line: the seed corpus and the regressions, so each crash a
// fuzzer ever found stays a test in every build, gcc included. A folder that does not exist is
// skipped (a target without regressions yet); finding no input at all is a failure.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

std::vector<uint8_t> read_all(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  std::vector<fs::path> inputs;
  for (int i = 1; i < argc; ++i) {
    fs::path arg(argv[i]);
    if (fs::is_directory(arg)) {
      for (const auto& entry : fs::directory_iterator(arg)) {
        const std::string name = entry.path().filename().string();
        if (entry.is_regular_file() && !name.empty() && name[0] != '.' && name != "README.md")
          inputs.push_back(entry.path());
      }
    } else if (fs::is_regular_file(arg)) {
      inputs.push_back(arg);
    } else {
      std::printf("replay: %s does not exist, skipped\n", argv[i]);
    }
  }
  std::sort(inputs.begin(), inputs.end());
  if (inputs.empty()) {
    std::fprintf(stderr, "replay: no inputs found\n");
    return 1;
  }
  for (const fs::path& path : inputs) {
    std::printf("replay: %s\n", path.string().c_str());
    std::fflush(stdout);
    // Exactly `size` bytes on the heap, so that ASan sees reads past the end as under libFuzzer.
    std::vector<uint8_t> data = read_all(path);
    LLVMFuzzerTestOneInput(data.data(), data.size());
  }
  std::printf("replay: %zu inputs ran cleanly\n", inputs.size());
  return 0;
}
