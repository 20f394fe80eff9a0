// Tokenizers for `trainer prepare-data` and `generate`, in plain C++17 (no LibTorch, so data
// tools build fast): byte-level, and GPT-2's byte-level BPE read from encoder.json + vocab.bpe
// or from a Hugging Face tokenizer.json. GPT-2 encoding matches the JavaScript reference
// encoder (npm gpt-3-encoder, a port of OpenAI's encoder.py): tests/unit/test_data.cpp checks
// ids generated with it. The parts: utf8.hpp, pretokenizer.hpp (with regex.hpp), bpe_files.hpp
// (reading the files) and bpe.hpp (the encoding).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/common.hpp"

namespace trainer::data {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Token ids of any bytes (prepare-data passes valid UTF-8: utf8.hpp's sanitize_utf8). Safe to call
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

// Where a tokenizer comes from, as `prepare-data` and `generate` take it on the command line.
enum class TokenizerKind { Byte, Gpt2 };  // --tokenizer byte | gpt2

struct TokenizerFiles {
  TokenizerKind kind = TokenizerKind::Byte;
  std::string vocab_file, merges_file;  // gpt2: encoder.json and vocab.bpe, or
  std::string tokenizer_json;           // gpt2: a Hugging Face tokenizer.json of that BPE
};

// `kind` "gpt2" is GPT-2's byte-level BPE from either source. encoder.json maps token strings
// to ids and vocab.bpe lists merges, highest priority first (in any order: a merge may use a
// token a later merge creates, as in Llama 3's file); the end-of-document token is
// "<|endoftext|>" (50256). A tokenizer.json must have model.type BPE (no dropout, subword
// prefix/suffix or byte fallback; ignore_merges as Llama 3 sets it), no normalizer, and a
// pre_tokenizer that is GPT-2's (ByteLevel with its regex) or Llama 3's (a Sequence of Split by
// a regex, behavior Isolated, and ByteLevel without regex), without prefix space. Either
// pre-tokenizer regex runs in PCRE2, so "gpt2" needs libpcre2-8.so.0 at run time (regex.hpp).
// Its added_tokens join the vocabulary, and the end-of-document token is <|endoftext|>,
// <|end_of_text|> or else the first special one. Special tokens inside a document are ordinary
// text, as in the reference encoder. Throws DataError naming the file (and line or merge) for a
// missing or malformed file, and naming the flags for a bad mix.
std::unique_ptr<Tokenizer> make_tokenizer(const TokenizerFiles& files);

}  // namespace trainer::data
