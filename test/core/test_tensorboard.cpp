// Tests for core/tensorboard (event files) and the TensorBoard side of core/metrics: CRC32C against
// RFC 3720's vectors and TensorBoard's own masked_crc32c values, the TFRecord framing read back
// record by record, file naming, a full disk (/dev/full) as TT_ERR_IO, and
// MetricsLog rows mirrored as scalars (a failing event file costing no metrics.jsonl row). The
// tensorboard package's reader is run on these files by scripts/check_tensorboard_events.py.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/errors.h"
#include "core/metrics.h"
#include "core/tensorboard.h"
#include "test/test_util.h"

using Catch::Matchers::ContainsSubstring;
using Catch::Matchers::StartsWith;

TEST_CASE("CRC32C matches RFC 3720's vectors; the mask matches TensorBoard's masked_crc32c", "[tensorboard]") {
  const std::string zeros(32, '\0'), ones(32, '\xff');
  std::string ascending, descending;
  for (int i = 0; i < 32; ++i) {
    ascending.push_back(static_cast<char>(i));
    descending.push_back(static_cast<char>(31 - i));
  }
  CHECK(tt::crc32c("123456789", 9) == 0xE3069283u);
  CHECK(tt::crc32c(zeros.data(), zeros.size()) == 0x8A9136AAu);
  CHECK(tt::crc32c(ones.data(), ones.size()) == 0x62A8AB43u);
  CHECK(tt::crc32c(ascending.data(), ascending.size()) == 0x46DD794Eu);
  CHECK(tt::crc32c(descending.data(), descending.size()) == 0x113FDB5Cu);
  // Continuing a CRC over a split buffer equals the CRC of the whole.
  CHECK(tt::crc32c(ascending.data() + 10, 22, tt::crc32c(ascending.data(), 10)) == 0x46DD794Eu);
  // tensorboard.compat.tensorflow_stub.pywrap_tensorflow.masked_crc32c (tensorboard 2.21.0).
  CHECK(tt::masked_crc32c("", 0) == 0xA282EAD8u);
  CHECK(tt::masked_crc32c("123456789", 9) == 0xC78AB0E5u);
  CHECK(tt::masked_crc32c(zeros.data(), zeros.size()) == 0x0FD7FFFAu);
  CHECK(tt::masked_crc32c(ones.data(), ones.size()) == 0xF909B029u);
}

TEST_CASE("an event file starts with brain.Event:2 and reads back record by record", "[tensorboard]") {
  tt::test::TempDir dir("tt_tb");
  std::string path;
  {
    tt::TensorBoardWriter writer(dir / "run");
    path = writer.path();
    writer.add_scalar("loss", 1, 0.5, 1000.0);
    writer.add_scalars(2, {{"loss", 0.25f}, {"lr", 1.0e-4f}}, 1001.5);
    writer.add_session_start(3, 1002.0);
    writer.add_image("video", 4, "GIF89a-not-really", 5, 7, 3, 1003.0);
  }  // the destructor writes what is buffered
  const std::string name = std::filesystem::path(path).filename().string();
  CHECK_THAT(name, StartsWith("events.out.tfevents."));
  CHECK(tt::tensorboard_event_files(dir / "run") == std::vector<std::string>{path});

  const auto events = tt::read_tensorboard_events(path);
  REQUIRE(events.size() == 5);
  CHECK(events[0].file_version == "brain.Event:2");
  CHECK(events[0].wall_time > 1.5e9);
  CHECK(events[1].step == 1);
  CHECK(events[1].wall_time == 1000.0);
  REQUIRE(events[1].scalars.size() == 1);
  CHECK(events[1].scalars[0].tag == "loss");
  CHECK(events[1].scalars[0].value == 0.5f);
  REQUIRE(events[2].scalars.size() == 2);
  CHECK(events[2].scalars[1].tag == "lr");
  CHECK(events[2].scalars[1].value == 1.0e-4f);
  CHECK(events[3].session_start);
  CHECK(events[3].step == 3);
  REQUIRE(events[4].images.size() == 1);
  CHECK(events[4].images[0].encoded == "GIF89a-not-really");
  CHECK(events[4].images[0].height == 5);
  CHECK(events[4].images[0].width == 7);

  // A second writer in the same second gets a file of its own.
  tt::TensorBoardWriter second(dir / "run");
  second.close();
  CHECK(tt::tensorboard_event_files(dir / "run").size() == 2);

  // A flipped byte in the data fails its CRC, naming the file.
  std::string bytes = tt::test::read_file(path);
  bytes[bytes.size() - 10] ^= 0x01;
  tt::test::write_file(dir / "damaged", bytes);
  const tt::Error damaged = tt::test::expect_error([&] { tt::read_tensorboard_events(dir / "damaged"); });
  CHECK(damaged.code() == tt::ErrorCode::kData);
  CHECK_THAT(damaged.what(), ContainsSubstring("data CRC"));
}

TEST_CASE("buffered events reach the file on flush(), not before", "[tensorboard]") {
  tt::test::TempDir dir("tt_tb_flush");
  tt::TensorBoardOptions options;
  options.flush_seconds = 3600.0;
  tt::TensorBoardWriter writer(dir.path(), options);
  writer.add_scalar("a", 1, 1.0, 1.0);
  const auto size_of = [&] { return std::filesystem::file_size(writer.path()); };
  const auto before = size_of();
  writer.add_scalar("a", 2, 2.0, 2.0);
  CHECK(size_of() == before);
  writer.flush();
  CHECK(size_of() > before);
  CHECK(tt::read_tensorboard_events(writer.path()).size() == 3);
}

TEST_CASE("a full disk is TT_ERR_IO naming the file", "[tensorboard]") {
  if (!std::filesystem::exists("/dev/full")) SKIP("no /dev/full on this system");
  tt::TensorBoardOptions options;
  options.file_name = "full";
  const tt::Error error = tt::test::expect_error([&] { tt::TensorBoardWriter writer("/dev", options); });
  CHECK(error.code() == tt::ErrorCode::kIo);
  CHECK_THAT(error.what(), ContainsSubstring("/dev/full"));
  CHECK_THAT(error.what(), ContainsSubstring("No space left on device"));
}

TEST_CASE("MetricsLog mirrors every numeric field of a row into the event file", "[tensorboard][metrics]") {
  tt::test::TempDir dir("tt_tb_metrics");
  {
    tt::MetricsLog log(dir / "metrics.jsonl", 0, dir.path());
    REQUIRE(log.tensorboard() != nullptr);
    log.write({{"step", 10}, {"loss", 0.75}, {"lr", 2.0e-5}, {"epoch", 1}, {"note", "text"}});
    // Written out at each row: readable while the run goes on.
    const auto events = tt::read_tensorboard_events(tt::tensorboard_event_files(dir.path()).at(0));
    REQUIRE(events.size() == 2);
    CHECK(events[1].step == 10);
    REQUIRE(events[1].scalars.size() == 3);  // epoch, loss, lr; not the string, not the step
    CHECK(events[1].scalars[0].tag == "epoch");
    CHECK(events[1].scalars[0].value == 1.0f);
    CHECK(events[1].scalars[1].tag == "loss");
    CHECK(events[1].scalars[1].value == 0.75f);
    CHECK(events[1].scalars[2].value == 2.0e-5f);
  }
  // A resume (rows up to step 10 kept) opens a new file that starts with SessionLog START at 11.
  { tt::MetricsLog resumed(dir / "metrics.jsonl", 10, dir.path()); }
  const auto files = tt::tensorboard_event_files(dir.path());
  REQUIRE(files.size() == 2);
  const auto resumed = tt::read_tensorboard_events(files[1]);
  REQUIRE(resumed.size() == 2);
  CHECK(resumed[1].session_start);
  CHECK(resumed[1].step == 11);

  // Without a folder there is no event file.
  tt::test::TempDir plain("tt_tb_off");
  { tt::MetricsLog log(plain / "metrics.jsonl", 0); log.write({{"step", 1}, {"loss", 1.0}}); }
  CHECK(tt::tensorboard_event_files(plain.path()).empty());
}

TEST_CASE("an event file that cannot be made costs no metrics.jsonl row and does not stop the log",
          "[tensorboard][metrics]") {
  tt::test::TempDir dir("tt_tb_broken");
  // A file where the TensorBoard folder should be: the event file cannot be created.
  tt::test::write_file(dir / "not_a_folder", "x");
  tt::MetricsLog log(dir / "metrics.jsonl", 0, dir / "not_a_folder");
  CHECK(log.tensorboard() == nullptr);
  log.write({{"step", 1}, {"loss", 1.0}});
  log.write({{"step", 2}, {"loss", 0.5}});
  CHECK(tt::test::read_file(dir / "metrics.jsonl") == "{\"loss\":1.0,\"step\":1}\n{\"loss\":0.5,\"step\":2}\n");
}
