#include "data/pretokenizer.hpp"

#include "data/regex.hpp"

namespace trainer::data {

const std::string& gpt2_pattern() {
  // ECMAScript's WhiteSpace and LineTerminator: what \s matches in the reference encoder.
  static const std::string space =
      R"(\t\n\x0B\f\r \x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000}\x{FEFF})";
  static const std::string pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^)" + space +
                                     R"(\p{L}\p{N}]+|[)" + space + "]+(?![^" + space + "])|[" + space + "]+";
  return pattern;
}

std::vector<std::string_view> gpt2_pretokenize(std::string_view text) {
  static const Regex gpt2(gpt2_pattern());
  return gpt2.split(text);
}

}  // namespace trainer::data
