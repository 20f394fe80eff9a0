#include "data/tokenizer.hpp"

#include "data/bpe.hpp"
#include "data/bpe_files.hpp"

namespace trainer::data {
namespace {

class ByteTokenizer : public Tokenizer {
 public:
  std::vector<std::int32_t> encode(std::string_view text) const override {
    return std::vector<std::int32_t>(reinterpret_cast<const unsigned char*>(text.data()),
                                     reinterpret_cast<const unsigned char*>(text.data()) + text.size());
  }
  std::string decode(const std::vector<std::int32_t>& ids) const override {
    std::string out;
    for (std::int32_t id : ids) {
      if (id < 0 || id > kEod) throw std::out_of_range("byte tokenizer: no token " + std::to_string(id));
      if (id != kEod) out += static_cast<char>(id);
    }
    return out;
  }
  std::int32_t vocab_size() const override { return kEod + 1; }
  std::int32_t eod_id() const override { return kEod; }

 private:
  static constexpr std::int32_t kEod = 256;
};

}  // namespace

std::unique_ptr<Tokenizer> make_byte_tokenizer() { return std::make_unique<ByteTokenizer>(); }

std::unique_ptr<Tokenizer> make_tokenizer(const TokenizerFiles& f) {
  const bool gpt2_files = !f.vocab_file.empty() || !f.merges_file.empty();
  if (f.kind == TokenizerKind::Byte) {
    if (gpt2_files || !f.tokenizer_json.empty())
      throw DataError("--vocab-file, --merges-file and --tokenizer-json are for --tokenizer gpt2, not byte");
    return std::make_unique<ByteTokenizer>();
  }
  if (!f.tokenizer_json.empty()) {
    if (gpt2_files) throw DataError("give either --tokenizer-json or --vocab-file with --merges-file, not both");
    return make_bpe_tokenizer(read_hf_tokenizer(f.tokenizer_json));
  }
  if (f.vocab_file.empty() || f.merges_file.empty())
    throw DataError("--tokenizer gpt2 needs --vocab-file (encoder.json) and --merges-file (vocab.bpe), or --tokenizer-json");
  return make_bpe_tokenizer(read_gpt2_files(f.vocab_file, f.merges_file));
}

}  // namespace trainer::data
