// UTF-8 as the tokenizers meet it: decoding one code point by the Unicode standard's rules,
// encoding one, and replacing ill-formed bytes as every reference implementation does.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace trainer::data {

struct CodePoint {
  char32_t value;  // U+FFFD when not valid
  size_t length;   // bytes
  bool valid;
};

// Decodes the code point at byte `i` of `s` (i < s.size()) by the well-formed sequences of the
// Unicode standard (Table 3-7). An ill-formed sequence yields U+FFFD over its maximal subpart:
// the longest prefix that could still have started a valid sequence, at least one byte.
CodePoint decode_at(std::string_view s, size_t i);

// Appends the UTF-8 encoding of code point `cp`.
void append_utf8(std::string& out, char32_t cp);

// Replaces every ill-formed UTF-8 sequence in `text` by U+FFFD, one per maximal subpart (the
// Unicode recommendation that Python's errors="replace", browsers and Node follow), and
// returns how many were replaced.
size_t sanitize_utf8(std::string& text);

}  // namespace trainer::data
