#include "data/tokenizer.hpp"

#include <array>
#include <atomic>
#include <functional>
#include <queue>
#include <sstream>
#include <unordered_map>

#include "data/json.hpp"
#include "data/regex.hpp"

namespace trainer::data {
namespace {

struct CodePoint {
  char32_t value;
  size_t length;  // bytes
  bool valid;
};

// Decodes the code point at byte `i` by the well-formed sequences of the Unicode standard
// (Table 3-7). An ill-formed sequence yields U+FFFD over its maximal subpart: the longest
// prefix that could still have started a valid sequence, at least one byte.
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

enum class CharClass { kSpace, kLetter, kNumber, kOther };

CharClass class_of(const CodePoint& c) {
  if (!c.valid) return CharClass::kOther;
  const char32_t v = c.value;
  if (v < 0x80) {  // ASCII without the tables: most text is ASCII
    if ((v | 0x20) >= 'a' && (v | 0x20) <= 'z') return CharClass::kLetter;
    if (v >= '0' && v <= '9') return CharClass::kNumber;
    if (v == ' ' || (v >= '\t' && v <= '\r')) return CharClass::kSpace;
    return CharClass::kOther;
  }
  if (is_space(v)) return CharClass::kSpace;
  if (is_letter(v)) return CharClass::kLetter;
  if (is_number(v)) return CharClass::kNumber;
  return CharClass::kOther;
}

// End of the run of code points of class `cls` that starts at byte `i`.
size_t run_end(std::string_view s, size_t i, CharClass cls) {
  while (i < s.size()) {
    const CodePoint c = decode_at(s, i);
    if (class_of(c) != cls) break;
    i += c.length;
  }
  return i;
}

// 's 't 're 've 'm 'll 'd (lower case only, as in the regex): their length, or 0.
size_t contraction_length(std::string_view s, size_t i) {
  const std::string_view rest = s.substr(i + 1, 2);
  if (rest.empty()) return 0;
  if (rest[0] == 's' || rest[0] == 't' || rest[0] == 'm' || rest[0] == 'd') return 2;
  if (rest == "re" || rest == "ve" || rest == "ll") return 3;
  return 0;
}

// End of the regex match that starts at byte `i`; alternatives in the regex's order.
size_t match_end(std::string_view s, size_t i) {
  if (s[i] == '\'') {
    if (size_t k = contraction_length(s, i)) return i + k;
  }
  // " ?\p{L}+", " ?\p{N}+", " ?[^\s\p{L}\p{N}]+": one optional ASCII space, then a run.
  if (s[i] == ' ' && i + 1 < s.size()) {
    const CharClass next = class_of(decode_at(s, i + 1));
    if (next != CharClass::kSpace) return run_end(s, i + 1, next);
  }
  const CharClass cls = class_of(decode_at(s, i));
  if (cls != CharClass::kSpace) return run_end(s, i, cls);
  // "\s+(?!\S)": a whitespace run that reaches the end of the text, or else the run without
  // its last code point (which then prefixes the next word); "\s+": a single one before
  // non-space.
  size_t last = i, end = i;
  while (end < s.size()) {
    const CodePoint c = decode_at(s, end);
    if (class_of(c) != CharClass::kSpace) break;
    last = end;
    end += c.length;
  }
  return end == s.size() || last == i ? end : last;
}

class ByteTokenizer : public Tokenizer {
 public:
  std::vector<std::int32_t> encode(std::string_view text) const override {
    return std::vector<std::int32_t>(reinterpret_cast<const unsigned char*>(text.data()),
                                     reinterpret_cast<const unsigned char*>(text.data()) + text.size());
  }
  std::string decode(const std::vector<std::int32_t>& ids) const override {
    std::string out;
    for (std::int32_t id : ids) {
      if (id < 0 || id > kEod) throw std::out_of_range("byte tokenizer: no token " + std::to_string(id));
      if (id != kEod) out += static_cast<char>(id);
    }
    return out;
  }
  std::int32_t vocab_size() const override { return kEod + 1; }
  std::int32_t eod_id() const override { return kEod; }

 private:
  static constexpr std::int32_t kEod = 256;
};

// GPT-2 spells each byte as a printable code point so that tokens are readable strings:
// printable Latin-1 bytes stand for themselves, the other 68 bytes for U+0100 onwards.
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

// A byte-level BPE vocabulary as either file format spells it: token strings in GPT-2's byte
// alphabet with their ids, and the merges, best first. `where` fields name the file (and line
// or index) for error messages.
struct BpeVocabulary {
  struct Merge {
    std::string left, right, where;
  };
  std::unordered_map<std::string, std::int32_t> encoder;
  std::string encoder_where;
  std::vector<Merge> merges;
  std::string eod;  // the end-of-document token's string
  std::string split_pattern;   // tokenizer.json's Split regex; empty: GPT-2's (gpt2_pretokenize)
  bool ignore_merges = false;  // a piece that is itself a token is that token (Llama 3)
};

// Adds `token` -> `id` to the vocabulary, refusing ids that cannot be ours and duplicates.
void add_token(BpeVocabulary& v, const std::string& token, std::int64_t id) {
  if (id < 0 || id >= INT32_MAX) throw DataError("token '" + token + "' has id " + std::to_string(id));
  if (!v.encoder.emplace(token, static_cast<std::int32_t>(id)).second)
    throw DataError("token '" + token + "' appears twice");
}

// GPT-2's files: encoder.json maps tokens to ids; vocab.bpe has an optional "#version" line,
// then "left right" per line.
BpeVocabulary read_gpt2_files(const std::string& encoder_json, const std::string& merges_file) {
  BpeVocabulary v;
  v.encoder_where = encoder_json;
  v.eod = "<|endoftext|>";
  try {
    const std::string text = read_file(encoder_json);
    JsonReader json(text);
    json.begin_object();
    for (std::string token; json.next_member(token);) add_token(v, token, json.integer());
    json.end();
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

// A string member that may be null (read as "").
std::string optional_string(JsonReader& json) {
  if (json.peek_value() != 'n') return json.string();
  json.skip_value();
  return {};
}

// tokenizer.json's "model": must be BPE without the options GPT-2's algorithm lacks.
void read_hf_model(JsonReader& json, const std::string& path, BpeVocabulary& v) {
  std::string type;
  json.begin_object();
  for (std::string key; json.next_member(key);) {
    if (key == "type") {
      type = json.string();
    } else if (key == "vocab") {
      json.begin_object();
      for (std::string token; json.next_member(token);) add_token(v, token, json.integer());
    } else if (key == "merges") {
      json.begin_array();
      for (size_t i = 0; json.next_element(); ++i) {
        const std::string where = path + ": model.merges[" + std::to_string(i) + "]";
        std::string left, right;
        if (json.peek_value() == '[') {  // newer files: ["left", "right"]
          json.begin_array();
          if (json.next_element()) left = json.string();
          if (json.next_element()) right = json.string();
          if (json.next_element()) throw DataError(where + ": expected a pair of tokens");
        } else {  // older files: "left right"
          const std::string pair = json.string();
          const size_t space = pair.find(' ');
          if (space != std::string::npos) left = pair.substr(0, space), right = pair.substr(space + 1);
        }
        if (left.empty() || right.empty() || right.find(' ') != std::string::npos)
          throw DataError(where + ": expected two tokens");
        v.merges.push_back({left, right, where});
      }
    } else if (key == "continuing_subword_prefix" || key == "end_of_word_suffix") {
      if (!optional_string(json).empty()) throw DataError("model." + key + " is set; GPT-2's BPE has none");
    } else if (key == "ignore_merges") {
      v.ignore_merges = json.peek_value() != 'n' && json.boolean();
      if (json.peek_value() == 'n') json.skip_value();
    } else if (key == "byte_fallback") {
      if (json.peek_value() != 'n' && json.boolean()) throw DataError("model.byte_fallback is true; byte-level BPE needs none");
    } else if (key == "dropout") {
      if (json.peek_value() != 'n') throw DataError("model.dropout is set; only deterministic BPE is supported");
      json.skip_value();
    } else {
      json.skip_value();
    }
  }
  if (type != "BPE") throw DataError("model.type is '" + type + "'; only BPE is supported");
}

// One pre-tokenizer object of tokenizer.json: its type and the members that matter here.
struct PreTokenizer {
  std::string type, pattern, behavior;
  bool prefix_space = false, use_regex = true, invert = false;
};

PreTokenizer read_pre_tokenizer(JsonReader& json) {
  PreTokenizer t;
  json.begin_object();
  for (std::string key; json.next_member(key);) {
    if (key == "type") t.type = json.string();
    else if (key == "add_prefix_space") t.prefix_space = json.boolean();
    else if (key == "use_regex") t.use_regex = json.boolean();
    else if (key == "invert") t.invert = json.boolean();
    else if (key == "behavior") t.behavior = json.string();
    else if (key == "pattern") {  // {"Regex": "..."} or {"String": "..."}
      json.begin_object();
      for (std::string kind; json.next_member(kind);) {
        if (kind != "Regex") throw DataError("pre_tokenizer Split with a " + kind + " pattern; only Regex is supported");
        t.pattern = json.string();
      }
    } else json.skip_value();
  }
  return t;
}

// tokenizer.json's "pre_tokenizer": GPT-2's (ByteLevel with its regex) or Llama 3's (a Sequence
// of Split by a regex, Isolated, and ByteLevel without regex); no prefix space either way.
void read_hf_pre_tokenizer(JsonReader& json, BpeVocabulary& v) {
  const std::string why = "; supported: ByteLevel with use_regex (GPT-2's), or a Sequence of Split (Regex, "
                          "Isolated) and ByteLevel without use_regex (Llama 3's), without add_prefix_space";
  if (json.peek_value() != '{') throw DataError("pre_tokenizer is not set" + why);
  std::vector<PreTokenizer> steps;
  json.begin_object();
  for (std::string key; json.next_member(key);) {
    if (key == "type") {
      const std::string type = json.string();
      if (type != "Sequence") steps.push_back({type});
    } else if (key == "pretokenizers") {
      json.begin_array();
      while (json.next_element()) steps.push_back(read_pre_tokenizer(json));
    } else if (key == "add_prefix_space" || key == "use_regex") {
      if (steps.empty()) steps.emplace_back();
      (key == "add_prefix_space" ? steps.back().prefix_space : steps.back().use_regex) = json.boolean();
    } else {
      json.skip_value();
    }
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

struct AddedToken {
  std::string content;
  std::int64_t id = -1;
  bool special = false;
};

// tokenizer.json's "added_tokens": [{"id": 50256, "content": "<|endoftext|>", "special": true, ...}].
std::vector<AddedToken> read_hf_added_tokens(JsonReader& json) {
  std::vector<AddedToken> out;
  json.begin_array();
  while (json.next_element()) {
    AddedToken t;
    json.begin_object();
    for (std::string key; json.next_member(key);) {
      if (key == "content") t.content = json.string();
      else if (key == "id") t.id = json.integer();
      else if (key == "special") t.special = json.boolean();
      else json.skip_value();
    }
    out.push_back(t);
  }
  return out;
}

// Each added token joins the vocabulary unless model.vocab already has it at that id. The
// end-of-document token is "<|endoftext|>" (GPT-2) or "<|end_of_text|>" (Llama 3) if there is
// one, else the first special added token.
void add_hf_added_tokens(const std::vector<AddedToken>& added, BpeVocabulary& v) {
  const std::array<char32_t, 256> symbols = byte_symbols();
  std::string first_special;
  for (const AddedToken& t : added) {
    const std::string token = symbol_string(t.content, symbols);  // decoding gives `content` back
    const auto it = v.encoder.find(token);
    if (it == v.encoder.end() || it->second != t.id) add_token(v, token, t.id);
    if (t.special && first_special.empty()) first_special = token;
  }
  v.eod = v.encoder.count("<|endoftext|>")     ? "<|endoftext|>"     // GPT-2
          : v.encoder.count("<|end_of_text|>") ? "<|end_of_text|>"  // Llama 3
                                               : first_special;
  if (v.eod.empty()) throw DataError("no end-of-document token: no <|endoftext|> and no special added token");
}

// A Hugging Face tokenizer.json of a GPT-2-style byte-level BPE.
BpeVocabulary read_hf_tokenizer(const std::string& path) {
  BpeVocabulary v;
  v.encoder_where = path;
  try {
    const std::string text = read_file(path);
    JsonReader json(text);
    bool have_model = false, have_pre_tokenizer = false;
    std::vector<AddedToken> added;
    json.begin_object();
    for (std::string key; json.next_member(key);) {
      if (key == "model") {
        read_hf_model(json, path, v);
        have_model = true;
      } else if (key == "pre_tokenizer") {
        read_hf_pre_tokenizer(json, v);
        have_pre_tokenizer = true;
      } else if (key == "normalizer") {
        if (json.peek_value() != 'n') throw DataError("a normalizer is set; GPT-2's BPE has none");
        json.skip_value();
      } else if (key == "added_tokens") {
        added = read_hf_added_tokens(json);
      } else {
        json.skip_value();
      }
    }
    json.end();
    if (!have_model) throw DataError("no \"model\"; is this a tokenizer.json?");
    if (!have_pre_tokenizer) throw DataError("no \"pre_tokenizer\"; byte-level BPE needs one");
    add_hf_added_tokens(added, v);
  } catch (const DataError& e) {
    throw DataError(path + ": " + e.what());
  }
  return v;
}

class Gpt2Tokenizer : public Tokenizer {
 public:
  explicit Gpt2Tokenizer(BpeVocabulary v) : serial_(++next_serial_) {
    if (!v.split_pattern.empty()) {
      try {
        split_ = std::make_unique<Regex>(v.split_pattern);
      } catch (const DataError& e) {
        throw DataError(v.encoder_where + ": pre_tokenizer Split: " + e.what());
      }
    }
    ignore_merges_ = v.ignore_merges;
    encoder_ = std::move(v.encoder);
    build_decoder(v.encoder_where);
    build_merges(v.merges);
    eod_ = token_id(v.encoder_where, v.eod);
  }

  std::vector<std::int32_t> encode(std::string_view text) const override {
    std::vector<std::int32_t> ids;
    for (std::string_view piece : split_ ? split_->split(text) : gpt2_pretokenize(text)) {
      if (ignore_merges_) {  // a piece that is a token as a whole needs no merges
        const auto whole = encoder_.find(symbol_string(piece, symbols_));
        if (whole != encoder_.end()) {
          ids.push_back(whole->second);
          continue;
        }
      }
      const std::vector<std::int32_t>& piece_ids = cached_bpe(piece);
      ids.insert(ids.end(), piece_ids.begin(), piece_ids.end());
    }
    return ids;
  }

  std::string decode(const std::vector<std::int32_t>& ids) const override {
    std::string out;
    for (std::int32_t id : ids) out += token_bytes_.at(static_cast<size_t>(id));
    return out;
  }

  std::int32_t vocab_size() const override { return static_cast<std::int32_t>(token_bytes_.size()); }
  std::int32_t eod_id() const override { return eod_; }

 private:
  struct Merge {
    std::int32_t rank, merged;
  };
  static std::uint64_t pair_key(std::int32_t a, std::int32_t b) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
  }

  // Each token's bytes, for decoding: every character must be one of the 256 byte symbols.
  // Ids must be 0..N-1, each once (so the vocabulary size is N).
  void build_decoder(const std::string& where) {
    const std::array<char32_t, 256> symbols = byte_symbols();
    std::unordered_map<char32_t, char> byte_of_symbol;
    for (int b = 0; b < 256; ++b) byte_of_symbol[symbols[b]] = static_cast<char>(b);
    token_bytes_.assign(encoder_.size(), {});
    std::vector<bool> seen(encoder_.size(), false);
    for (const auto& [token, id] : encoder_) {
      if (static_cast<size_t>(id) >= encoder_.size() || seen[id])
        throw DataError(where + ": token '" + token + "' has id " + std::to_string(id) + "; ids must be 0.." +
                        std::to_string(encoder_.size() - 1) + ", each used once");
      seen[id] = true;
      for (size_t i = 0; i < token.size();) {
        const CodePoint c = decode_at(token, i);
        const auto byte = byte_of_symbol.find(c.value);
        if (!c.valid || byte == byte_of_symbol.end())
          throw DataError(where + ": token '" + token + "' has a character outside GPT-2's byte alphabet");
        token_bytes_[id] += byte->second;
        i += c.length;
      }
    }
    for (int b = 0; b < 256; ++b) byte_id_[b] = token_id(where, symbol_string(std::string(1, static_cast<char>(b)), symbols));
  }

  std::int32_t token_id(const std::string& where, const std::string& token) const {
    const auto it = encoder_.find(token);
    if (it == encoder_.end()) throw DataError(where + ": no token '" + token + "'");
    return it->second;
  }

  // A pair listed twice keeps its last rank, as in Hugging Face tokenizers.
  void build_merges(const std::vector<BpeVocabulary::Merge>& lines) {
    for (size_t rank = 0; rank < lines.size(); ++rank) {
      const auto& m = lines[rank];
      merges_[pair_key(token_id(m.where, m.left), token_id(m.where, m.right))] = {static_cast<std::int32_t>(rank),
                                                                                  token_id(m.where, m.left + m.right)};
    }
  }

  // Byte-pair encoding of one pre-token: starting from its bytes, repeatedly merge the adjacent
  // pair of best rank present now (leftmost first), including pairs that earlier merges just
  // made. That is Hugging Face tokenizers' rule (its Word::merge_all) and tiktoken's, and it
  // assumes no order of the merges: files converted from tiktoken ranks (Llama 3's) list merges
  // that use a token only a later merge creates. For merges in the order they were learned
  // (GPT-2's vocab.bpe) it equals encoder.py's "merge every occurrence of the best pair, then
  // look again", since no merge can then create a pair that outranks it. A heap over a linked
  // list keeps this O(n log n): a piece can be a megabyte of spaces.
  std::vector<std::int32_t> bpe(std::string_view piece) const {
    struct Symbol {
      std::int32_t id;  // -1 once merged into its left neighbour
      int prev, next;   // -1 at the ends
    };
    struct Candidate {
      std::int32_t rank;
      int left, right;
      std::int32_t left_id, right_id, merged;
      bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
    };
    const int n = static_cast<int>(piece.size());
    std::vector<Symbol> symbols(n);
    for (int i = 0; i < n; ++i) symbols[i] = {byte_id_[static_cast<unsigned char>(piece[i])], i - 1, i + 1 < n ? i + 1 : -1};
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
    auto consider = [&](int left) {
      const int right = symbols[left].next;
      if (right < 0) return;
      const auto it = merges_.find(pair_key(symbols[left].id, symbols[right].id));
      if (it != merges_.end())
        queue.push({it->second.rank, left, right, symbols[left].id, symbols[right].id, it->second.merged});
    };
    for (int i = 0; i + 1 < n; ++i) consider(i);
    while (!queue.empty()) {
      const Candidate c = queue.top();
      queue.pop();
      Symbol& left = symbols[c.left];
      // Stale: one side was merged into something else since this pair was seen.
      if (left.id != c.left_id || left.next != c.right || symbols[c.right].id != c.right_id) continue;
      left.id = c.merged;
      symbols[c.right].id = -1;
      left.next = symbols[c.right].next;
      if (left.next >= 0) symbols[left.next].prev = c.left;
      if (left.prev >= 0) consider(left.prev);
      consider(c.left);
    }
    std::vector<std::int32_t> ids;
    for (int i = 0; i >= 0 && i < n; i = symbols[i].next) ids.push_back(symbols[i].id);
    return ids;
  }

  // Words repeat, so each thread keeps the pieces it has encoded. The cache belongs to one
  // tokenizer (serial_, not its address, which a later tokenizer could reuse).
  const std::vector<std::int32_t>& cached_bpe(std::string_view piece) const {
    struct Cache {
      std::uint64_t owner = 0;
      std::unordered_map<std::string, std::vector<std::int32_t>> pieces;
    };
    thread_local Cache cache;
    constexpr size_t kMaxPieces = 1 << 17;
    if (cache.owner != serial_ || cache.pieces.size() >= kMaxPieces) {
      cache.pieces.clear();
      cache.owner = serial_;
    }
    std::string key(piece);
    auto it = cache.pieces.find(key);
    if (it == cache.pieces.end()) it = cache.pieces.emplace(std::move(key), bpe(piece)).first;
    return it->second;
  }

  static inline std::atomic<std::uint64_t> next_serial_{0};
  const std::uint64_t serial_;
  std::unique_ptr<Regex> split_;  // the Split pre-tokenizer's regex; none: GPT-2's
  bool ignore_merges_ = false;
  const std::array<char32_t, 256> symbols_ = byte_symbols();
  std::unordered_map<std::string, std::int32_t> encoder_;
  std::vector<std::string> token_bytes_;  // id -> the bytes it stands for
  std::array<std::int32_t, 256> byte_id_{};
  std::unordered_map<std::uint64_t, Merge> merges_;
  std::int32_t eod_ = 0;
};

}  // namespace

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

bool is_space(char32_t c) {
  // ECMAScript's WhiteSpace and LineTerminator: what \s matches in the reference encoder.
  switch (c) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x20: case 0xA0: case 0x1680:
    case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000: case 0xFEFF:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200A;
  }
}

std::vector<std::string_view> gpt2_pretokenize(std::string_view text) {
  std::vector<std::string_view> pieces;
  for (size_t i = 0; i < text.size();) {
    const size_t end = match_end(text, i);
    pieces.push_back(text.substr(i, end - i));
    i = end;
  }
  return pieces;
}

std::unique_ptr<Tokenizer> make_byte_tokenizer() { return std::make_unique<ByteTokenizer>(); }

std::unique_ptr<Tokenizer> make_tokenizer(const TokenizerFiles& f) {
  const bool gpt2_files = !f.vocab_file.empty() || !f.merges_file.empty();
  if (f.kind == TokenizerKind::Byte) {
    if (gpt2_files || !f.tokenizer_json.empty())
      throw DataError("--vocab-file, --merges-file and --tokenizer-json are for --tokenizer gpt2, not byte");
    return std::make_unique<ByteTokenizer>();
  }
  if (!f.tokenizer_json.empty()) {
    if (gpt2_files) throw DataError("give either --tokenizer-json or --vocab-file with --merges-file, not both");
    return std::make_unique<Gpt2Tokenizer>(read_hf_tokenizer(f.tokenizer_json));
  }
  if (f.vocab_file.empty() || f.merges_file.empty())
    throw DataError("--tokenizer gpt2 needs --vocab-file (encoder.json) and --merges-file (vocab.bpe), or --tokenizer-json");
  return std::make_unique<Gpt2Tokenizer>(read_gpt2_files(f.vocab_file, f.merges_file));
}

}  // namespace trainer::data
