#include "data/json.hpp"

#include "data/tokenizer.hpp"

namespace trainer::data {

void JsonReader::fail(const std::string& what) const {
  throw DataError("invalid JSON at byte " + std::to_string(pos_) + ": " + what);
}

void JsonReader::skip_space() {
  while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' || text_[pos_] == '\r'))
    ++pos_;
}

char JsonReader::peek() {
  skip_space();
  if (pos_ >= text_.size()) fail("unexpected end");
  return text_[pos_];
}

void JsonReader::expect(char c) {
  if (peek() != c) fail(std::string("expected '") + c + "'");
  ++pos_;
}

void JsonReader::open(char bracket) {
  expect(bracket);
  // skip_value recurses once per level: bound it so hostile input cannot exhaust the stack.
  if (first_item_.size() >= kMaxDepth) fail("nested deeper than " + std::to_string(kMaxDepth) + " levels");
  first_item_.push_back(true);
}

void JsonReader::begin_object() { open('{'); }
void JsonReader::begin_array() { open('['); }

// Consumes the closing bracket (and forgets the container) or the comma before the next item.
bool JsonReader::next_item(char close) {
  if (first_item_.empty()) fail("no object or array is open");
  if (peek() == close) {
    ++pos_;
    first_item_.pop_back();
    return false;
  }
  if (!first_item_.back()) expect(',');
  first_item_.back() = false;
  return true;
}

bool JsonReader::next_member(std::string& key) {
  if (!next_item('}')) return false;
  key = string();
  expect(':');
  return true;
}

bool JsonReader::next_element() { return next_item(']'); }

unsigned JsonReader::hex4() {
  if (pos_ + 4 > text_.size()) fail("short \\u escape");
  unsigned v = 0;
  for (int i = 0; i < 4; ++i) {
    const char c = text_[pos_++];
    v <<= 4;
    if (c >= '0' && c <= '9') v |= c - '0';
    else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
    else fail("bad hex digit in \\u escape");
  }
  return v;
}

std::string JsonReader::string() {
  expect('"');
  std::string out;
  while (true) {
    // Copy the run up to the next quote or backslash in one go: most text has no escapes.
    const size_t stop = text_.find_first_of("\"\\", pos_);
    if (stop == std::string_view::npos) fail("unterminated string");
    out.append(text_.substr(pos_, stop - pos_));
    pos_ = stop + 1;
    if (text_[stop] == '"') return out;
    if (pos_ >= text_.size()) fail("unterminated string");
    const char c = text_[pos_++];
    switch (c) {
      case '"': case '\\': case '/': out += c; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'u': {
        char32_t cp = hex4();
        const bool high = cp >= 0xD800 && cp <= 0xDBFF;
        if (high && text_.substr(pos_, 2) == "\\u") {
          const size_t save = pos_;
          pos_ += 2;
          const unsigned low = hex4();
          if (low >= 0xDC00 && low <= 0xDFFF) cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          else pos_ = save;  // not a pair: the second escape is read on its own
        }
        if (cp >= 0xD800 && cp <= 0xDFFF) {  // a lone surrogate has no UTF-8 form
          cp = 0xFFFD;
          ++replaced_;
        }
        append_utf8(out, cp);
        break;
      }
      default: fail(std::string("bad escape \\") + c);
    }
  }
}

std::int64_t JsonReader::integer() {
  skip_space();
  const size_t start = pos_;
  if (pos_ < text_.size() && text_[pos_] == '-') ++pos_;
  std::int64_t v = 0;
  while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
    v = v * 10 + (text_[pos_++] - '0');
    if (v > (std::int64_t{1} << 53)) fail("integer too large");
  }
  if (pos_ == start || (pos_ == start + 1 && text_[start] == '-')) fail("expected an integer");
  return text_[start] == '-' ? -v : v;
}

bool JsonReader::boolean() {
  skip_space();
  for (const bool value : {true, false}) {
    const std::string_view word = value ? "true" : "false";
    if (text_.substr(pos_, word.size()) == word) {
      pos_ += word.size();
      return value;
    }
  }
  fail("expected true or false");
}

// Numbers, true, false, null: a run of the characters they are made of.
void JsonReader::skip_literal() {
  const size_t start = pos_;
  while (pos_ < text_.size() && std::string_view("+-.0123456789eEtruefalsn").find(text_[pos_]) != std::string_view::npos)
    ++pos_;
  if (pos_ == start) fail("unexpected character");
}

void JsonReader::skip_value() {
  const char c = peek();
  if (c == '"') {
    string();
  } else if (c == '{') {
    begin_object();
    for (std::string key; next_member(key);) skip_value();
  } else if (c == '[') {
    begin_array();
    while (next_element()) skip_value();
  } else {
    skip_literal();
  }
}

void JsonReader::end() {
  skip_space();
  if (pos_ != text_.size()) fail("unexpected text after the value");
}

}  // namespace trainer::data
