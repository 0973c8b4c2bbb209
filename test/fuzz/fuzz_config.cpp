// Fuzz target: the YAML config loader (app/config.h, load_config_text). The input is the config
// text. A config that loads must also survive the round trip the header promises:
// load_config_text(config_to_yaml(c)) gives the same resolved config.
#include <string>

#include "app/config.h"
#include "test/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tt::fuzz::quiet_logs();
  const std::string text(reinterpret_cast<const char*>(data), size);
  tt::Config config;
  try {
    config = tt::load_config_text(text, "fuzz.yaml");
  } catch (const tt::Error& error) {
    tt::fuzz::rejected(error);
    return 0;
  }
  const std::string yaml = tt::config_to_yaml(config);
  try {
    const tt::Config again = tt::load_config_text(yaml, "resolved.yaml");
    if (tt::config_to_yaml(again) != yaml) tt::fuzz::property_failed("config_to_yaml does not round-trip:\n" + yaml);
  } catch (const tt::Error& error) {
    tt::fuzz::property_failed(std::string("the resolved config does not load again: ") + error.what() + "\n" + yaml);
  }
  return 0;
}
