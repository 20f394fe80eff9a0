#include "data/regex.hpp"

#include <dlfcn.h>

// Only the declarations: the library is opened at run time (pcre2() below). The 8-bit API,
// whose names the header maps to the _8 symbols (pcre2_compile -> pcre2_compile_8).
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "data/common.hpp"

namespace trainer::data {
namespace {

// The functions used here, with the header's signatures.
struct Pcre2 {
  decltype(&pcre2_compile_8) compile;
  decltype(&pcre2_jit_compile_8) jit_compile;
  decltype(&pcre2_match_data_create_from_pattern_8) match_data_create;
  decltype(&pcre2_match_8) match;
  decltype(&pcre2_get_ovector_pointer_8) ovector;
  decltype(&pcre2_match_data_free_8) match_data_free;
  decltype(&pcre2_code_free_8) code_free;
  decltype(&pcre2_get_error_message_8) error_message;
};

template <typename Fn> void bind(void* lib, Fn& fn, const char* name) {
  fn = reinterpret_cast<Fn>(dlsym(lib, name));
  if (!fn) throw DataError(std::string("libpcre2-8.so.0 lacks ") + name);
}

const Pcre2& pcre2() {
  static const Pcre2 api = [] {
    void* lib = dlopen("libpcre2-8.so.0", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
      throw DataError("this tokenizer needs PCRE2 (libpcre2-8.so.0; Debian/Ubuntu package libpcre2-8-0): " +
                      std::string(dlerror()));
    Pcre2 a{};
    bind(lib, a.compile, "pcre2_compile_8");
    bind(lib, a.jit_compile, "pcre2_jit_compile_8");
    bind(lib, a.match_data_create, "pcre2_match_data_create_from_pattern_8");
    bind(lib, a.match, "pcre2_match_8");
    bind(lib, a.ovector, "pcre2_get_ovector_pointer_8");
    bind(lib, a.match_data_free, "pcre2_match_data_free_8");
    bind(lib, a.code_free, "pcre2_code_free_8");
    bind(lib, a.error_message, "pcre2_get_error_message_8");
    return a;
  }();
  return api;
}

}  // namespace

struct Regex::Impl {
  pcre2_code_8* code = nullptr;
  ~Impl() {
    if (code) pcre2().code_free(code);
  }
};

Regex::Regex(const std::string& pattern) : impl_(std::make_unique<Impl>()) {
  const Pcre2& p = pcre2();
  int error = 0;
  PCRE2_SIZE offset = 0;
  // UCP: \s, \d, \w and case folding by Unicode properties, as Oniguruma (Hugging Face
  // tokenizers' engine) does. MATCH_INVALID_UTF: bytes that are not UTF-8 never match (and
  // end up between matches) instead of being undefined behaviour.
  impl_->code = p.compile(reinterpret_cast<PCRE2_SPTR8>(pattern.data()), pattern.size(),
                          PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &offset, nullptr);
  if (!impl_->code) {
    PCRE2_UCHAR8 message[256];
    p.error_message(error, message, sizeof(message));
    throw DataError("regex '" + pattern + "' does not compile at offset " + std::to_string(offset) + ": " +
                    reinterpret_cast<char*>(message));
  }
  p.jit_compile(impl_->code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if JIT is unavailable
}

Regex::~Regex() = default;

std::vector<std::string_view> Regex::split(std::string_view text) const {
  const Pcre2& p = pcre2();
  std::vector<std::string_view> out;
  pcre2_match_data_8* data = p.match_data_create(impl_->code, nullptr);
  const auto subject = reinterpret_cast<PCRE2_SPTR8>(text.data());
  size_t at = 0;  // end of the last piece
  for (size_t start = 0; start <= text.size();) {
    const int rc = p.match(impl_->code, subject, text.size(), start, 0, data, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      p.match_data_free(data);
      throw DataError("regex match failed (PCRE2 error " + std::to_string(rc) + ")");
    }
    const PCRE2_SIZE* ov = p.ovector(data);
    if (ov[0] > at) out.push_back(text.substr(at, ov[0] - at));  // the text between matches
    at = ov[0];
    if (ov[1] > ov[0]) {
      out.push_back(text.substr(ov[0], ov[1] - ov[0]));
      at = start = ov[1];
    } else {  // an empty match: step over one code point
      start = ov[1] + 1;
      while (start < text.size() && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) ++start;
    }
  }
  if (at < text.size()) out.push_back(text.substr(at));
  p.match_data_free(data);
  return out;
}

}  // namespace trainer::data
