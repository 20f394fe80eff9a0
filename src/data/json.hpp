// A minimal JSON reader for the two places data preparation meets JSON: JSONL documents
// ({"text": ...} per line) and GPT-2's encoder.json. It reads objects member by member, strings
// (escapes and surrogate pairs decoded to UTF-8) and integers, and skips any other value.
// Errors are DataError with the byte offset; callers add the file and line.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "data/common.hpp"

namespace trainer::data {

class JsonReader {
 public:
  explicit JsonReader(std::string_view text) : text_(text) {}

  // Usage: begin_object(); while (next_member(key)) { read or skip the value }
  void begin_object();
  bool next_member(std::string& key);
  std::string string();
  std::int64_t integer();
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

  std::string_view text_;
  size_t pos_ = 0;
  bool first_member_ = true;
  size_t replaced_ = 0;
};

}  // namespace trainer::data
