// Regular expressions with Unicode properties (\p{L}, \p{N}, Unicode \s, case folding,
// lookahead) for the pre-tokenizers (pretokenizer.hpp): PCRE2, the maintained engine every
// Linux distribution ships (libpcre2-8.so.0), JIT-compiled. The library is opened at run time
// and its declarations come from the vendored third_party/pcre2/include/pcre2.h (10.42), so
// building needs no PCRE2 package (the GPU machines have no package registry). Unicode
// properties are those of the library found: PCRE2 10.42 (Debian 12) knows Unicode 14.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace trainer::data {

class Regex {
 public:
  // Compiles `pattern` (UTF-8, Unicode properties on). Throws DataError when PCRE2 is missing
  // or the pattern is invalid.
  explicit Regex(const std::string& pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // `text` cut into the matches and the text between them, in order (tokenizers' Split with
  // behavior "Isolated"). Bytes that are not UTF-8 never match. Safe from several threads.
  std::vector<std::string_view> split(std::string_view text) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainer::data
