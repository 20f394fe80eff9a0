// A minimal JSON reader for the places data preparation meets JSON: JSONL documents
// ({"text": ...} per line), GPT-2's encoder.json and Hugging Face's tokenizer.json. It reads
// objects member by member and arrays element by element (nested as deep as the caller goes),
// strings (escapes and surrogate pairs decoded to UTF-8), integers and booleans, and skips any
// other value.
// Errors are DataError with the byte offset; callers add the file and line.
//
// Why not a library: a lone surrogate in a \u escape (text cut mid-pair, which real JSONL
// dumps contain) becomes U+FFFD here, as the tests require; nlohmann::json 3.11 (Debian 12)
// refuses the whole document ("surrogate U+D800..U+DBFF must be followed by U+DC00..U+DFFF").
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "data/common.hpp"

namespace trainer::data {

class JsonReader {
 public:
  explicit JsonReader(std::string_view text) : text_(text) {}

  // Usage: begin_object(); while (next_member(key)) { read or skip the value }
  void begin_object();
  bool next_member(std::string& key);
  // Usage: begin_array(); while (next_element()) { read or skip the value }
  void begin_array();
  bool next_element();
  // What the next value is: '{', '[', '"', 'n' (null), 't'/'f' (true/false) or a digit/'-'.
  char peek_value() { return peek(); }
  std::string string();
  std::int64_t integer();
  bool boolean();
  void skip_value();
  // Only whitespace may follow.
  void end();
  // \u escapes that were lone surrogates, replaced by U+FFFD.
  size_t replaced() const { return replaced_; }

 private:
  [[noreturn]] void fail(const std::string& what) const;
  void skip_space();
  char peek();
  void expect(char c);
  unsigned hex4();
  void skip_literal();
  void open(char bracket);
  bool next_item(char close);

  static constexpr size_t kMaxDepth = 256;

  std::string_view text_;
  size_t pos_ = 0;
  std::vector<bool> first_item_;  // one per open object or array: no item read yet
  size_t replaced_ = 0;
};

}  // namespace trainer::data
