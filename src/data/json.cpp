#include "data/json.hpp"

#include <nlohmann/json.hpp>

#include "data/common.hpp"

namespace trainer::data {
namespace {

// The UTF-16 code unit spelled by the four hex digits at byte `at`, or -1.
long hex4(const std::string& s, size_t at) {
  if (at + 4 > s.size()) return -1;
  long unit = 0;
  for (size_t k = at; k < at + 4; ++k) {
    const char c = s[k], lower = static_cast<char>(c | 0x20);
    const int digit = c >= '0' && c <= '9' ? c - '0' : lower >= 'a' && lower <= 'f' ? lower - 'a' + 10 : -1;
    if (digit < 0) return -1;
    unit = unit * 16 + digit;
  }
  return unit;
}

bool is_surrogate(long unit) { return unit >= 0xD800 && unit <= 0xDFFF; }
bool is_high_surrogate(long unit) { return unit >= 0xD800 && unit <= 0xDBFF; }
bool is_low_surrogate(long unit) { return unit >= 0xDC00 && unit <= 0xDFFF; }

}  // namespace

size_t replace_lone_surrogates(std::string& json) {
  size_t replaced = 0;
  for (size_t i = json.find('\\'); i != std::string::npos; i = json.find('\\', i)) {
    const long unit = i + 1 < json.size() && json[i + 1] == 'u' ? hex4(json, i + 2) : -1;
    if (!is_surrogate(unit)) {  // step over the backslash and the character it escapes
      i += 2;
      continue;
    }
    // A high surrogate right before a low one: the pair is one code point above U+FFFF.
    if (is_high_surrogate(unit) && json.compare(i + 6, 2, "\\u") == 0 && is_low_surrogate(hex4(json, i + 8))) {
      i += 12;
      continue;
    }
    json.replace(i + 2, 4, "FFFD");
    ++replaced;
    i += 6;
  }
  return replaced;
}

nlohmann::json parse_json(std::string text, size_t* replaced) {
  const size_t n = replace_lone_surrogates(text);
  if (replaced) *replaced += n;
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    // what() is "[json.exception.parse_error.101] parse error at line L, column C: <reason>;
    // last read: '<token>'": keep it from "parse error", and bound it (the token of an
    // unterminated string is the rest of the document).
    std::string what = e.what();
    what.erase(0, what.find("] ") == std::string::npos ? 0 : what.find("] ") + 2);
    constexpr size_t kMaxMessage = 300;
    if (what.size() > kMaxMessage) what = what.substr(0, kMaxMessage) + "...";
    throw DataError("invalid JSON: " + what);
  }
}

}  // namespace trainer::data
