// Parsing the JSON that data preparation meets (JSONL documents, GPT-2's encoder.json, Hugging
// Face's tokenizer.json) with nlohmann::json, after the one repair it refuses to make itself.
//
// A \u escape of a lone UTF-16 surrogate (text cut mid-pair, which real JSONL dumps contain)
// has no UTF-8 form, and nlohmann::json 3.11 refuses the whole document for it ("surrogate
// U+D800..U+DBFF must be followed by U+DC00..U+DFFF"); none of its parse options accepts one.
// replace_lone_surrogates first turns each such escape into \uFFFD, so the text holds U+FFFD
// there (the tests require it; trainer's own reader did the same before nlohmann::json).
#pragma once

#include <cstddef>
#include <nlohmann/json_fwd.hpp>
#include <string>

namespace trainer::data {

// Rewrites, in place, every \u escape of a surrogate that is not half of a high-low pair to
// \uFFFD (same length, so byte offsets in later errors stay right) and returns how many.
// A backslash always starts an escape in valid JSON, so `\\ud800` (an escaped backslash, then
// text) is left alone. Anything else, valid or not, is left to the parser.
size_t replace_lone_surrogates(std::string& json);

// `text` parsed after replace_lone_surrogates, whose count is added to `*replaced` if given.
// Throws DataError "invalid JSON: ..." with nlohmann's position and reason (callers add the file).
nlohmann::json parse_json(std::string text, size_t* replaced = nullptr);

}  // namespace trainer::data
