#include "data/utf8.hpp"

#include <utility>

namespace trainer::data {

CodePoint decode_at(std::string_view s, size_t i) {
  const unsigned char b0 = s[i];
  if (b0 < 0x80) return {b0, 1, true};
  size_t need;
  char32_t cp;
  unsigned char lo = 0x80, hi = 0xBF;  // range of the first continuation byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1, cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2, cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;  // no overlong forms
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3, cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;  // no overlong forms
    if (b0 == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return {0xFFFD, 1, false};
  }
  for (size_t k = 1; k <= need; ++k) {
    if (i + k >= s.size()) return {0xFFFD, k, false};
    const unsigned char b = s[i + k];
    if (b < lo || b > hi) return {0xFFFD, k, false};
    cp = (cp << 6) | (b & 0x3F);
    lo = 0x80, hi = 0xBF;
  }
  return {cp, need + 1, true};
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

size_t sanitize_utf8(std::string& text) {
  size_t i = 0;
  while (i < text.size()) {  // most text is valid: only copy once something is not
    const CodePoint c = decode_at(text, i);
    if (!c.valid) break;
    i += c.length;
  }
  if (i == text.size()) return 0;
  std::string out = text.substr(0, i);
  size_t replaced = 0;
  while (i < text.size()) {
    const CodePoint c = decode_at(text, i);
    if (c.valid) {
      out.append(text, i, c.length);
    } else {
      append_utf8(out, 0xFFFD);
      ++replaced;
    }
    i += c.length;
  }
  text = std::move(out);
  return replaced;
}

}  // namespace trainer::data
