// Pre-tokenizers: how text is cut into the pieces that BPE encodes one at a time. Every one
// is a regex run in PCRE2 (regex.hpp) with Regex::split, matches and the text between them
// in order: GPT-2's below, or the Split regex of a tokenizer.json (Llama 3's).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace trainer::data {

// GPT-2's pre-tokenizer regex
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// in PCRE2's syntax, with \s spelled out as JavaScript's (the reference encoder's): PCRE2's
// own \s adds U+0085 and U+180E and lacks U+FEFF. \p{L} and \p{N} are PCRE2's Unicode tables.
const std::string& gpt2_pattern();

// The pieces GPT-2's pre-tokenizer cuts `text` into. Bytes that are not UTF-8 never match and
// come out as the pieces between matches.
std::vector<std::string_view> gpt2_pretokenize(std::string_view text);

}  // namespace trainer::data
