// Caption rows and the text cache (pipeline/text_cache), and caption dropout's choice and
// replacement (pipeline/caption_dropout).
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>

#include "core/errors.h"
#include "core/safetensors.h"
#include "pipeline/caption_dropout.h"
#include "pipeline/text_cache.h"
#include "pipeline/video_manifest.h"
#include "test/test_util.h"

using Catch::Matchers::ContainsSubstring;
using tt::test::TempDir;

namespace {

void write(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

// An embeddings file as encode_text.py writes it: text_states (L, D) bf16, text_mask (L) uint8, pooled (P) bf16.
void write_embedding(const std::string& path, float value, int64_t valid, int64_t length = 6) {
  torch::Tensor mask = torch::zeros({length}, torch::kUInt8);
  mask.slice(0, 0, valid).fill_(1);
  tt::safetensors::save(path, {{"text_states", torch::full({length, 4}, value).to(torch::kBFloat16)},
                               {"text_mask", mask},
                               {"pooled", torch::full({3}, value).to(torch::kBFloat16)}});
}

}  // namespace

TEST_CASE("text_cache_key is the FNV-1a content key scripts/encode_text.py computes", "[text_cache]") {
  // test/python/test_encode_text.py asserts the same value for content_key("identity-0", "A cat.").
  CHECK(tt::text_cache_key("identity-0", "A cat.") == "3a5e35dbbc111c8b51eb337777430c91");
  CHECK(tt::text_cache_key("identity-0", "") != tt::text_cache_key("identity-1", ""));
  CHECK(tt::text_cache_folder("", "data/train.jsonl") == "data/text_cache");
  CHECK(tt::text_cache_folder("/cache", "data/train.jsonl") == "/cache");
}

TEST_CASE("manifest rows carry captions (key or <stem>.txt) that resolve to the cache's files, or say to run "
          "encode-text",
          "[text_cache]") {
  TempDir dir("tt_text_cache");
  for (const char* clip : {"a.mp4", "b.mp4", "c.mp4", "d.mp4"}) write(dir / clip, "not a video");
  write(dir / "c.txt", "  A dog in the snow.\n");
  write_embedding(dir / "d.safetensors", 1.0f, 2);
  write(dir / "train.jsonl",
        "{\"video\": \"a.mp4\", \"caption\": \"A cat.\"}\n"
        "{\"video\": \"b.mp4\", \"caption\": \"Not encoded yet.\"}\n"
        "{\"video\": \"c.mp4\"}\n"
        "{\"video\": \"d.mp4\", \"text_embeddings\": \"d.safetensors\"}\n"
        "{\"video\": \"a.mp4\", \"caption\": \"A cat.\", \"text_embeddings\": \"d.safetensors\"}\n"
        "{\"video\": \"a.mp4\", \"caption\": 3}\n"
        "{\"video\": \"a.mp4\", \"caption\": \"A cat.\"}\n");
  std::vector<tt::VideoManifestRow> rows = tt::read_video_manifest(dir / "train.jsonl");
  REQUIRE(rows.size() == 7);
  CHECK((rows[0].has_caption && rows[0].caption == "A cat."));
  CHECK((rows[2].has_caption && rows[2].caption == "A dog in the snow."));  // from c.txt, trimmed
  CHECK((!rows[3].has_caption && rows[3].text_embeddings == dir / "d.safetensors"));
  CHECK_THAT(rows[4].error, ContainsSubstring("not both"));
  CHECK_THAT(rows[5].error, ContainsSubstring("\"caption\" must be a string"));
  const std::vector<std::string> expected = {"A cat.", "Not encoded yet.", "A dog in the snow."};
  CHECK(tt::manifest_captions(rows) == expected);

  // No encoder.json yet: every caption row says to run encode-text.
  const std::string cache = tt::text_cache_folder("", dir / "train.jsonl");
  std::vector<tt::VideoManifestRow> before = rows;
  tt::resolve_captions(before, tt::open_text_cache(cache));
  CHECK_THAT(before[0].text_error, ContainsSubstring("teletron encode-text CONFIG"));
  CHECK(before[3].text_error.empty());

  std::filesystem::create_directories(cache);
  const std::string identity = "0123456789abcdef0123456789abcdef";
  write(cache + "/encoder.json", "{\"identity\": \"" + identity + "\"}");
  const tt::TextCache opened = tt::open_text_cache(cache);
  REQUIRE(opened.identity == identity);
  write_embedding(opened.file_of("A cat."), 2.0f, 3);
  write_embedding(opened.file_of("A dog in the snow."), 3.0f, 4);
  tt::resolve_captions(rows, opened);
  CHECK(rows[0].text_embeddings == cache + "/" + tt::text_cache_key(identity, "A cat.") + ".safetensors");
  CHECK(rows[0].text_error.empty());
  CHECK(rows[6].text_embeddings == rows[0].text_embeddings);  // one file per distinct caption
  CHECK(rows[1].text_embeddings.empty());
  CHECK_THAT(rows[1].text_error, ContainsSubstring("not in the text cache"));
  CHECK_THAT(rows[1].text_error, ContainsSubstring("teletron encode-text CONFIG"));
  CHECK(rows[2].text_embeddings == opened.file_of("A dog in the snow."));
  CHECK(rows[3].text_embeddings == dir / "d.safetensors");  // an embeddings row is left as it was
  CHECK(tt::check_text_embeddings(rows[0].text_embeddings, 4, 3).empty());  // bf16 + uint8 as the reader takes

  write(cache + "/encoder.json", "{\"identity\": 7}");
  CHECK_THROWS_AS(tt::open_text_cache(cache), tt::Error);
}

TEST_CASE("<stem>.txt captions: UTF-8 with or without a byte-order mark, UTF-16 with one; other encodings are "
          "the row's error",
          "[text_cache]") {
  TempDir dir("tt_caption_files");
  std::string manifest;
  const std::vector<std::pair<std::string, std::string>> files = {
      {"plain", "caf\xC3\xA9 au lait\n"},                                  // UTF-8
      {"bom8", "\xEF\xBB\xBF" "caf\xC3\xA9 au lait\r\n"},                // UTF-8 with BOM, CRLF
      {"utf16le", std::string("\xFF\xFE" "c\0a\0f\0\xE9\0 \0\x3D\xD8\x31\xDE\n\0", 18)},  // café 😱
      {"utf16be", std::string("\xFE\xFF\0c\0a\0f\0\xE9", 10)},
      {"latin1", "caf\xE9 au lait\n"},                                      // cp1252 / Latin-1
      {"overlong", "a\xC0\xAF"},                                             // "/" in two bytes
      {"surrogate", "a\xED\xA0\x80"},                                        // U+D800 in UTF-8
      {"cut", "caf\xC3"},                                                    // a sequence cut short
      {"odd16", std::string("\xFF\xFE" "c\0a", 5)},                         // half a UTF-16 unit
      {"lone16", std::string("\xFF\xFE" "\x3D\xD8" "a\0", 6)},              // an unpaired high surrogate
  };
  for (const auto& [stem, bytes] : files) {
    write(dir / (stem + ".mp4"), "not a video");
    write(dir / (stem + ".txt"), bytes);
    manifest += "{\"video\": \"" + stem + ".mp4\"}\n";
  }
  write(dir / "train.jsonl", manifest);
  const std::vector<tt::VideoManifestRow> rows = tt::read_video_manifest(dir / "train.jsonl");
  REQUIRE(rows.size() == files.size());
  CHECK((rows[0].error.empty() && rows[0].caption == "caf\xC3\xA9 au lait"));
  CHECK((rows[1].error.empty() && rows[1].caption == "caf\xC3\xA9 au lait"));  // the same text, so the same cache key
  CHECK((rows[2].error.empty() && rows[2].caption == "caf\xC3\xA9 \xF0\x9F\x98\xB1"));
  CHECK((rows[3].error.empty() && rows[3].caption == "caf\xC3\xA9"));
  CHECK_THAT(rows[4].error, ContainsSubstring("latin1.txt is not UTF-8 (byte 0xE9 at offset 3"));
  CHECK_THAT(rows[4].error, ContainsSubstring("iconv"));
  for (size_t i = 5; i < 8; ++i) CHECK_THAT(rows[i].error, ContainsSubstring("is not UTF-8"));
  for (size_t i = 8; i < 10; ++i) CHECK_THAT(rows[i].error, ContainsSubstring("not valid UTF-16"));
}

TEST_CASE("load_empty_caption reads the empty caption's file and checks it against the model and the dataset",
          "[text_cache][caption_dropout]") {
  TempDir dir("tt_empty_caption");
  CHECK_THROWS_WITH(tt::load_empty_caption(dir.path(), 4, 3, 6), ContainsSubstring("encode-text"));
  const std::string identity = "fedcba9876543210fedcba9876543210";
  write(dir / "encoder.json", "{\"identity\": \"" + identity + "\"}");
  CHECK_THROWS_WITH(tt::load_empty_caption(dir.path(), 4, 3, 6), ContainsSubstring("missing"));
  tt::TextCache cache{dir.path(), identity};
  write_embedding(cache.file_of(""), 0.5f, 1);
  const tt::LatentSample empty = tt::load_empty_caption(dir.path(), 4, 3, 6);
  CHECK(empty.text_states.scalar_type() == torch::kFloat32);
  CHECK(empty.text_mask.sum().item<int64_t>() == 1);
  CHECK_THROWS_WITH(tt::load_empty_caption(dir.path(), 4, 3, 8), ContainsSubstring("tokens"));  // another L
  CHECK_THROWS_AS(tt::load_empty_caption(dir.path(), 5, 3, 6), tt::Error);                     // another D
}

TEST_CASE("caption dropout: p = 1 replaces every sample's text, p = 0 none; the choice is keyed by (seed, step, "
          "place in the global batch)",
          "[caption_dropout]") {
  const int64_t batch = 6, length = 5, dim = 4, pooled = 3;
  tt::LatentBatch given{torch::zeros({batch, 1}), torch::randn({batch, length, dim}),
                        torch::ones({batch, length}, torch::kBool), torch::randn({batch, pooled})};
  tt::CaptionDropout dropout;
  dropout.seed = 7;
  dropout.empty.text_states = torch::full({length, dim}, -3.0f);
  dropout.empty.text_mask = torch::tensor({1, 0, 0, 0, 0}).to(torch::kBool);
  dropout.empty.pooled = torch::full({pooled}, 5.0f);

  dropout.p = 1.0;
  const tt::LatentBatch all = dropout.apply(given, 3, 0);
  for (int64_t i = 0; i < batch; ++i) {
    CHECK(torch::equal(all.text_states[i], dropout.empty.text_states));
    CHECK(torch::equal(all.text_mask[i], dropout.empty.text_mask));
    CHECK(torch::equal(all.pooled[i], dropout.empty.pooled));
  }
  CHECK(given.text_mask.all().item<bool>());  // the given batch is not written

  dropout.p = 0.0;
  const tt::LatentBatch none = dropout.apply(given, 3, 0);
  CHECK(torch::equal(none.text_states, given.text_states));
  CHECK(torch::equal(none.pooled, given.pooled));

  // p = 0.5: about half over many draws; the same samples whether the global batch comes whole or
  // in micro-batches (a resume, or a dynamic batch, cuts it differently); another step, other ones.
  dropout.p = 0.5;
  int64_t dropped = 0;
  for (int64_t step = 0; step < 200; ++step)
    for (int64_t i = 0; i < 10; ++i) dropped += tt::caption_dropped(0.5, 7, step, i) ? 1 : 0;
  CHECK(dropped > 900);
  CHECK(dropped < 1100);
  const tt::LatentBatch whole = dropout.apply(given, 11, 0);
  auto part = [&](int64_t first, int64_t count) {
    tt::LatentBatch slice{given.latents.slice(0, first, first + count), given.text_states.slice(0, first, first + count),
                          given.text_mask.slice(0, first, first + count), given.pooled.slice(0, first, first + count)};
    return dropout.apply(slice, 11, first);
  };
  const tt::LatentBatch front = part(0, 2), back = part(2, 4);
  CHECK(torch::equal(torch::cat({front.text_states, back.text_states}), whole.text_states));
  CHECK(torch::equal(torch::cat({front.pooled, back.pooled}), whole.pooled));
  bool differs = false;
  for (int64_t step = 12; step < 20 && !differs; ++step)
    differs = !torch::equal(dropout.apply(given, step, 0).text_mask, whole.text_mask);
  CHECK(differs);
}
