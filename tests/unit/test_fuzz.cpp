// Bounded random-input tests of the parsers: mutated configs, dataset indexes and tokenizer.json
// files must be accepted or refused with the parser's own error, never crash or throw anything
// else.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "config/config.hpp"
#include "data/common.hpp"
#include "data/indexed_dataset.hpp"
#include "data/json.hpp"
#include "data/tokenizer.hpp"
#include "helpers.hpp"
#include "catch_torch.hpp"

namespace {

std::string mutate(std::string text, std::mt19937& rng) {
  std::uniform_int_distribution<int> byte(0, 255), kind(0, 3);
  const int edits = 1 + static_cast<int>(rng() % 4);
  for (int e = 0; e < edits && !text.empty(); ++e) {
    const size_t at = rng() % text.size();
    switch (kind(rng)) {
      case 0: text[at] = static_cast<char>(byte(rng)); break;                    // flip a byte
      case 1: text.erase(at, 1 + rng() % 8); break;                              // delete a run
      case 2: text.insert(at, std::string(1 + rng() % 4, "\n :-[{,'\"#0a"[rng() % 13])); break;
      case 3: text = text.substr(0, at); break;                                  // truncate
    }
  }
  return text;
}

// A small GPT-2-style tokenizer.json: the 256 byte tokens and the first 44 merges of GPT-2
// (whose results are ids 256..299, in merge order), and <|endoftext|> as an added token.
std::string small_tokenizer_json() {
  const std::string dir = testing::source_dir() + "/tests/data/gpt2/";
  const nlohmann::json encoder = trainer::data::parse_json(testing::read_file(dir + "encoder.json"));
  std::string vocab;
  for (const auto& item : encoder.items()) {
    const auto id = item.value().get<std::int64_t>();
    if (id >= 300) continue;
    vocab += (vocab.empty() ? "" : ",") + testing::json_quoted(item.key()) + ":" + std::to_string(id);
  }
  std::string merges;
  std::ifstream in(dir + "vocab.bpe");
  std::string line;
  std::getline(in, line);  // #version
  for (int i = 0; i < 44 && std::getline(in, line); ++i) merges += (i ? ",\"" : "\"") + line + "\"";
  return R"({"added_tokens":[{"id":300,"content":"<|endoftext|>","special":true}],"normalizer":null,)"
         R"("pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"use_regex":true},)"
         R"("model":{"type":"BPE","dropout":null,"vocab":{)" + vocab + R"(},"merges":[)" + merges + "]}}";
}

}  // namespace

TEST_CASE("fuzz: mutated configs load or fail with ConfigError", "[fuzz]") {
  const std::string base = testing::read_file(testing::source_dir() + "/configs/tiny.yaml");
  testing::TempDir dir;
  std::mt19937 rng(12345);
  int refused = 0;
  for (int i = 0; i < 3000; ++i) {
    const std::string text = mutate(base, rng);
    testing::write_file(dir.file("c.yaml"), text);
    try {
      trainer::Config cfg = trainer::load_config(dir.file("c.yaml"));
      trainer::validate(cfg, 0);
    } catch (const trainer::ConfigError&) {
      ++refused;
    } catch (const std::exception& e) {
      INFO(text);
      FAIL("unexpected exception: " << e.what());
    }
  }
  CHECK(refused > 100);  // the mutations do reach the error paths
}

TEST_CASE("fuzz: mutated dataset indexes open or fail with DataError", "[fuzz]") {
  testing::TempDir dir;
  {
    trainer::data::IndexedDatasetWriter w(dir.file("ok.bin"), trainer::data::TokenType::kUInt16);
    for (int d = 0; d < 20; ++d) w.add_document(std::vector<std::int32_t>(5 + d, d));
    w.finish(dir.file("ok.idx"));
  }
  const std::string idx = testing::read_file(dir.file("ok.idx"));
  std::filesystem::copy_file(dir.file("ok.bin"), dir.file("m.bin"));
  std::mt19937 rng(777);
  int refused = 0;
  for (int i = 0; i < 3000; ++i) {
    testing::write_file(dir.file("m.idx"), mutate(idx, rng));
    try {
      trainer::data::IndexedDataset ds(dir.file("m"));
      for (size_t d = 0; d < ds.num_documents(); ++d) (void)ds.document(d).to_vector();
    } catch (const trainer::data::DataError&) {
      ++refused;
    } catch (const std::exception& e) {
      FAIL("unexpected exception: " << e.what());
    }
  }
  CHECK(refused > 100);
}

TEST_CASE("fuzz: mutated tokenizer.json files load or fail with DataError", "[fuzz]") {
  testing::TempDir dir;
  const std::string base = small_tokenizer_json();
  testing::write_file(dir.file("t.json"), base);
  REQUIRE(trainer::data::make_tokenizer({trainer::data::TokenizerKind::Gpt2, "", "", dir.file("t.json")})->vocab_size() == 301);
  std::mt19937 rng(4242);
  int refused = 0;
  for (int i = 0; i < 1500; ++i) {
    testing::write_file(dir.file("t.json"), mutate(base, rng));
    try {
      const auto t = trainer::data::make_tokenizer({trainer::data::TokenizerKind::Gpt2, "", "", dir.file("t.json")});
      const auto ids = t->encode("the cat in the hat, 42 times\n");
      CHECK(t->decode(ids) == "the cat in the hat, 42 times\n");
    } catch (const trainer::data::DataError&) {
      ++refused;
    } catch (const std::exception& e) {
      FAIL("unexpected exception: " << e.what());
    }
  }
  CHECK(refused > 100);
}
