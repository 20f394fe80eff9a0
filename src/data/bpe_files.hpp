// The files a byte-level BPE vocabulary comes in, read into one form: GPT-2's encoder.json and
// vocab.bpe, or a Hugging Face tokenizer.json (what tokenizer.hpp's make_tokenizer accepts;
// its comment lists what a tokenizer.json may hold). Every error is a DataError naming the
// file (and the merge or member).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace trainer::data {

// GPT-2 spells each byte as a printable code point so that tokens are readable strings:
// printable Latin-1 bytes stand for themselves, the other 68 bytes for U+0100 onwards. Both
// file formats write tokens in this alphabet.
std::array<char32_t, 256> byte_symbols();
// `bytes` spelled in that alphabet, as UTF-8.
std::string symbol_string(std::string_view bytes, const std::array<char32_t, 256>& symbols);

// A vocabulary as the files give it: token strings in the byte alphabet with their ids, and
// the merges, best first. `where` fields name the file (and line or index) for errors.
struct BpeVocabulary {
  struct Merge {
    std::string left, right, where;
  };
  std::unordered_map<std::string, std::int32_t> encoder;
  std::string encoder_where;
  std::vector<Merge> merges;
  std::string eod;             // the end-of-document token's string
  std::string split_pattern;   // tokenizer.json's Split regex; empty: GPT-2's (pretokenizer.hpp)
  bool ignore_merges = false;  // a piece that is itself a token is that token (Llama 3)
};

// GPT-2's files: encoder.json maps tokens to ids; vocab.bpe has an optional "#version" line,
// then "left right" per line. The end-of-document token is <|endoftext|>.
BpeVocabulary read_gpt2_files(const std::string& encoder_json, const std::string& merges_file);

// A Hugging Face tokenizer.json of a GPT-2-style byte-level BPE.
BpeVocabulary read_hf_tokenizer(const std::string& path);

}  // namespace trainer::data
