#include "data/bpe_files.hpp"

#include <nlohmann/json.hpp>

#include <sstream>

#include "data/common.hpp"
#include "data/json.hpp"
#include "data/utf8.hpp"

namespace trainer::data {
namespace {

using nlohmann::json;

// `object`'s member `key`; null when absent (or when `object` is no object).
const json& member(const json& object, const char* key) {
  static const json absent;
  const auto it = object.find(key);
  return it != object.end() ? *it : absent;
}

// A value of the expected type, or a DataError saying which member (`what`) is not.
const std::string& string_of(const json& value, const std::string& what) {
  if (!value.is_string()) throw DataError(what + " is not a string");
  return value.get_ref<const std::string&>();
}

std::int64_t integer_of(const json& value, const std::string& what) {
  if (!value.is_number_integer()) throw DataError(what + " is not an integer");
  return value.get<std::int64_t>();
}

// A string member that may be null or absent (read as "").
std::string optional_string(const json& object, const char* key, const std::string& what) {
  const json& value = member(object, key);
  return value.is_null() ? "" : string_of(value, what + "." + key);
}

// A true/false member; null or absent is `fallback`.
bool flag(const json& object, const char* key, bool fallback, const std::string& what) {
  const json& value = member(object, key);
  if (value.is_null()) return fallback;
  if (!value.is_boolean()) throw DataError(what + "." + key + " is not true or false");
  return value.get<bool>();
}

// Adds `token` -> `id` to the vocabulary, refusing ids that cannot be ours and duplicates.
void add_token(BpeVocabulary& v, const std::string& token, std::int64_t id) {
  if (id < 0 || id >= INT32_MAX) throw DataError("token '" + token + "' has id " + std::to_string(id));
  if (!v.encoder.emplace(token, static_cast<std::int32_t>(id)).second)
    throw DataError("token '" + token + "' appears twice");
}

// {"token": id, ...}: encoder.json, or tokenizer.json's model.vocab.
void add_vocab(BpeVocabulary& v, const json& vocab, const std::string& what) {
  if (!vocab.is_object()) throw DataError(what + " is not an object of token ids");
  for (const auto& item : vocab.items())
    add_token(v, item.key(), integer_of(item.value(), "the id of token '" + item.key() + "'"));
}

// tokenizer.json's "merges": ["left right", ...] (older files) or [["left", "right"], ...].
void read_hf_merges(const json& merges, const std::string& path, BpeVocabulary& v) {
  if (!merges.is_null() && !merges.is_array()) throw DataError("model.merges is not an array");
  for (size_t i = 0; i < merges.size(); ++i) {
    const std::string where = "model.merges[" + std::to_string(i) + "]";
    const json& merge = merges[i];
    std::string left, right;
    if (merge.is_array()) {
      if (merge.size() != 2) throw DataError(where + ": expected a pair of tokens");
      left = string_of(merge[0], where + "[0]");
      right = string_of(merge[1], where + "[1]");
    } else {
      const std::string& pair = string_of(merge, where);
      const size_t space = pair.find(' ');
      if (space != std::string::npos) left = pair.substr(0, space), right = pair.substr(space + 1);
    }
    if (left.empty() || right.empty() || right.find(' ') != std::string::npos)
      throw DataError(where + ": expected two tokens");
    v.merges.push_back({left, right, path + ": " + where});
  }
}

// tokenizer.json's "model": must be BPE without the options GPT-2's algorithm lacks.
void read_hf_model(const json& model, const std::string& path, BpeVocabulary& v) {
  if (!model.is_object()) throw DataError("\"model\" is not an object");
  const std::string type = optional_string(model, "type", "model");
  if (type != "BPE") throw DataError("model.type is '" + type + "'; only BPE is supported");
  if (!member(model, "vocab").is_null()) add_vocab(v, model.at("vocab"), "model.vocab");
  read_hf_merges(member(model, "merges"), path, v);
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (!optional_string(model, key, "model").empty())
      throw DataError("model." + std::string(key) + " is set; GPT-2's BPE has none");
  v.ignore_merges = flag(model, "ignore_merges", false, "model");
  if (flag(model, "byte_fallback", false, "model")) throw DataError("model.byte_fallback is true; byte-level BPE needs none");
  if (!member(model, "dropout").is_null()) throw DataError("model.dropout is set; only deterministic BPE is supported");
}

// One pre-tokenizer object of tokenizer.json: its type and the members that matter here.
struct PreTokenizer {
  std::string type, pattern, behavior;
  bool prefix_space = false, use_regex = true, invert = false;
};

PreTokenizer read_pre_tokenizer(const json& object, const std::string& what) {
  if (!object.is_object()) throw DataError(what + " is not an object");
  PreTokenizer t;
  t.type = optional_string(object, "type", what);
  t.behavior = optional_string(object, "behavior", what);
  t.prefix_space = flag(object, "add_prefix_space", false, what);
  t.use_regex = flag(object, "use_regex", true, what);
  t.invert = flag(object, "invert", false, what);
  const json& pattern = member(object, "pattern");  // {"Regex": "..."} or {"String": "..."}
  if (!pattern.is_null() && !pattern.is_object()) throw DataError(what + ".pattern is not an object");
  for (const auto& item : pattern.items()) {
    if (item.key() != "Regex") throw DataError("pre_tokenizer Split with a " + item.key() + " pattern; only Regex is supported");
    t.pattern = string_of(item.value(), what + ".pattern.Regex");
  }
  return t;
}

// tokenizer.json's "pre_tokenizer": GPT-2's (ByteLevel with its regex) or Llama 3's (a Sequence
// of Split by a regex, Isolated, and ByteLevel without regex); no prefix space either way.
void read_hf_pre_tokenizer(const json& object, BpeVocabulary& v) {
  const std::string why = "; supported: ByteLevel with use_regex (GPT-2's), or a Sequence of Split (Regex, "
                          "Isolated) and ByteLevel without use_regex (Llama 3's), without add_prefix_space";
  if (!object.is_object()) throw DataError("pre_tokenizer is not set" + why);
  std::vector<PreTokenizer> steps;
  if (member(object, "type") == "Sequence") {
    const json& list = member(object, "pretokenizers");
    if (!list.is_array()) throw DataError("pre_tokenizer.pretokenizers is not an array");
    for (size_t i = 0; i < list.size(); ++i)
      steps.push_back(read_pre_tokenizer(list[i], "pre_tokenizer.pretokenizers[" + std::to_string(i) + "]"));
  } else {
    steps.push_back(read_pre_tokenizer(object, "pre_tokenizer"));
  }
  const bool gpt2 = steps.size() == 1 && steps[0].type == "ByteLevel" && steps[0].use_regex && !steps[0].prefix_space;
  const bool split_then_bytes = steps.size() == 2 && steps[0].type == "Split" && steps[0].behavior == "Isolated" &&
                                !steps[0].invert && !steps[0].pattern.empty() && steps[1].type == "ByteLevel" &&
                                !steps[1].use_regex && !steps[1].prefix_space;
  if (!gpt2 && !split_then_bytes) {
    std::string got;
    for (const auto& t : steps)
      got += (got.empty() ? "" : ", ") + t.type + (t.behavior.empty() ? "" : " " + t.behavior) +
             (t.prefix_space ? " with add_prefix_space" : "") + (t.type == "ByteLevel" && !t.use_regex ? " without use_regex" : "");
    throw DataError("pre_tokenizer is " + (steps.size() == 1 ? got : "a Sequence of " + got) + why);
  }
  if (split_then_bytes) v.split_pattern = steps[0].pattern;
}

// tokenizer.json's "added_tokens": [{"id": 50256, "content": "<|endoftext|>", "special": true, ...}].
// Each joins the vocabulary unless model.vocab already has it at that id. The end-of-document
// token is "<|endoftext|>" (GPT-2) or "<|end_of_text|>" (Llama 3) if there is one, else the
// first special added token.
void add_hf_added_tokens(const json& added, BpeVocabulary& v) {
  if (!added.is_null() && !added.is_array()) throw DataError("added_tokens is not an array");
  const std::array<char32_t, 256> symbols = byte_symbols();
  std::string first_special;
  for (size_t i = 0; i < added.size(); ++i) {
    const std::string what = "added_tokens[" + std::to_string(i) + "]";
    const json& t = added[i];
    if (!t.is_object()) throw DataError(what + " is not an object");
    const std::string token = symbol_string(string_of(member(t, "content"), what + ".content"), symbols);
    const std::int64_t id = integer_of(member(t, "id"), what + ".id");
    const auto it = v.encoder.find(token);  // decoding the token gives `content` back
    if (it == v.encoder.end() || it->second != id) add_token(v, token, id);
    if (flag(t, "special", false, what) && first_special.empty()) first_special = token;
  }
  v.eod = v.encoder.count("<|endoftext|>")     ? "<|endoftext|>"     // GPT-2
          : v.encoder.count("<|end_of_text|>") ? "<|end_of_text|>"  // Llama 3
                                               : first_special;
  if (v.eod.empty()) throw DataError("no end-of-document token: no <|endoftext|> and no special added token");
}

}  // namespace

std::array<char32_t, 256> byte_symbols() {
  std::array<char32_t, 256> out{};
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    out[b] = printable ? static_cast<char32_t>(b) : next++;
  }
  return out;
}

std::string symbol_string(std::string_view bytes, const std::array<char32_t, 256>& symbols) {
  std::string out;
  for (unsigned char b : bytes) append_utf8(out, symbols[b]);
  return out;
}

BpeVocabulary read_gpt2_files(const std::string& encoder_json, const std::string& merges_file) {
  BpeVocabulary v;
  v.encoder_where = encoder_json;
  v.eod = "<|endoftext|>";
  try {
    add_vocab(v, parse_json(read_file(encoder_json)), "the file");
  } catch (const DataError& e) {
    throw DataError(encoder_json + ": " + e.what());
  }
  std::istringstream lines(read_file(merges_file));
  std::string line;
  for (int number = 1; std::getline(lines, line); ++number) {
    if (line.empty() || (number == 1 && line.rfind("#version", 0) == 0)) continue;
    std::istringstream fields(line);
    std::string left, right, extra;
    const std::string where = merges_file + ":" + std::to_string(number);
    if (!(fields >> left >> right) || fields >> extra) throw DataError(where + ": expected two tokens, got '" + line + "'");
    v.merges.push_back({left, right, where});
  }
  return v;
}

BpeVocabulary read_hf_tokenizer(const std::string& path) {
  BpeVocabulary v;
  v.encoder_where = path;
  try {
    const json root = parse_json(read_file(path));
    if (member(root, "model").is_null()) throw DataError("no \"model\"; is this a tokenizer.json?");
    read_hf_model(root.at("model"), path, v);
    if (!member(root, "normalizer").is_null()) throw DataError("a normalizer is set; GPT-2's BPE has none");
    if (!root.contains("pre_tokenizer")) throw DataError("no \"pre_tokenizer\"; byte-level BPE needs one");
    read_hf_pre_tokenizer(root.at("pre_tokenizer"), v);
    add_hf_added_tokens(member(root, "added_tokens"), v);
  } catch (const DataError& e) {
    throw DataError(path + ": " + e.what());
  } catch (const json::exception& e) {  // a check above missed a type: still the file's fault
    throw DataError(path + ": " + e.what());
  }
  return v;
}

}  // namespace trainer::data
