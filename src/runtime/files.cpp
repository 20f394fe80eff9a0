#include "runtime/files.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace trainer::runtime {

void fsync_path(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 || fsync(fd) != 0) {
    const int err = errno;
    if (fd >= 0) close(fd);
    throw std::runtime_error("cannot fsync " + path + ": " + std::strerror(err));
  }
  close(fd);
}

void publish(const std::string& tmp, const std::string& final_path) {
  fsync_path(tmp);
  if (std::rename(tmp.c_str(), final_path.c_str()) != 0)
    throw std::runtime_error("cannot rename " + tmp + " to " + final_path + ": " + std::strerror(errno));
  const std::filesystem::path parent = std::filesystem::path(final_path).parent_path();
  fsync_path(parent.empty() ? "." : parent.string());
}

void write_file_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  const bool written = f && std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const bool closed = f && std::fclose(f) == 0;
  if (!written || !closed)
    throw std::runtime_error("cannot write " + tmp + " (disk full or not writable?): " + std::strerror(errno));
  publish(tmp, path);
}

}  // namespace trainer::runtime
