#include "data/regex.hpp"

#include <dlfcn.h>

#include <cstdint>

#include "data/common.hpp"

namespace trainer::data {
namespace {

// The part of PCRE2's 8-bit API used here, as pcre2.h (10.42) declares it.
using Code = struct pcre2_code_8;
using MatchData = struct pcre2_match_data_8;
constexpr std::uint32_t kUcp = 0x00020000u, kUtf = 0x00080000u, kMatchInvalidUtf = 0x04000000u;
constexpr std::uint32_t kJitComplete = 0x00000001u;
constexpr int kNoMatch = -1;

struct Pcre2 {
  Code* (*compile)(const unsigned char*, size_t, std::uint32_t, int*, size_t*, void*);
  int (*jit_compile)(Code*, std::uint32_t);
  MatchData* (*match_data_create)(const Code*, void*);
  int (*match)(const Code*, const unsigned char*, size_t, size_t, std::uint32_t, MatchData*, void*);
  size_t* (*ovector)(MatchData*);
  void (*match_data_free)(MatchData*);
  void (*code_free)(Code*);
  int (*error_message)(int, unsigned char*, size_t);
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
  Code* code = nullptr;
  ~Impl() {
    if (code) pcre2().code_free(code);
  }
};

Regex::Regex(const std::string& pattern) : impl_(std::make_unique<Impl>()) {
  const Pcre2& p = pcre2();
  int error = 0;
  size_t offset = 0;
  // UCP: \s, \d, \w and case folding by Unicode properties, as Oniguruma (Hugging Face
  // tokenizers' engine) does. MATCH_INVALID_UTF: bytes that are not UTF-8 never match (and
  // end up between matches) instead of being undefined behaviour.
  impl_->code = p.compile(reinterpret_cast<const unsigned char*>(pattern.data()), pattern.size(),
                          kUtf | kUcp | kMatchInvalidUtf, &error, &offset, nullptr);
  if (!impl_->code) {
    unsigned char message[256];
    p.error_message(error, message, sizeof(message));
    throw DataError("regex '" + pattern + "' does not compile at offset " + std::to_string(offset) + ": " +
                    reinterpret_cast<char*>(message));
  }
  p.jit_compile(impl_->code, kJitComplete);  // falls back to the interpreter if JIT is unavailable
}

Regex::~Regex() = default;

std::vector<std::string_view> Regex::split(std::string_view text) const {
  const Pcre2& p = pcre2();
  std::vector<std::string_view> out;
  MatchData* data = p.match_data_create(impl_->code, nullptr);
  const auto* subject = reinterpret_cast<const unsigned char*>(text.data());
  size_t at = 0;  // end of the last piece
  for (size_t start = 0; start <= text.size();) {
    const int rc = p.match(impl_->code, subject, text.size(), start, 0, data, nullptr);
    if (rc == kNoMatch) break;
    if (rc < 0) {
      p.match_data_free(data);
      throw DataError("regex match failed (PCRE2 error " + std::to_string(rc) + ")");
    }
    const size_t* ov = p.ovector(data);
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
