// What the data-preparation files share: the error for bad input, on which `trainer
// prepare-data` exits 2 (like a bad config), and reading a whole file.
#pragma once

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>

#include "config/bad_input.hpp"

namespace trainer::data {

struct DataError : BadInput {
  using BadInput::BadInput;
};

// The file's bytes; DataError naming the file and the system's reason if it cannot be read
// (a directory fails here too: its read fails).
inline std::string read_file(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw DataError("cannot read " + path + ": " + std::strerror(errno));
  std::string text;
  char buf[1 << 16];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) text.append(buf, n);
  const bool failed = std::ferror(f);
  const int err = errno;
  std::fclose(f);
  if (failed) throw DataError("cannot read " + path + ": " + std::strerror(err));
  return text;
}

}  // namespace trainer::data
