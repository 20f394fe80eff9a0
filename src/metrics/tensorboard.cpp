#include "metrics/tensorboard.hpp"

#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace trainer::metrics {

namespace {

std::array<std::uint32_t, 256> make_crc_table() {
  std::array<std::uint32_t, 256> table{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int bit = 0; bit < 8; ++bit) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    table[i] = c;
  }
  return table;
}

// Protobuf encoding, by hand: a field is a key (field number << 3 | wire type) then its value.
// Wire types: 0 varint, 1 fixed 64-bit, 2 length-delimited, 5 fixed 32-bit; all little endian.
void put_fixed(std::string& out, std::uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out += static_cast<char>((value >> (8 * i)) & 0xFF);
}

void put_varint(std::string& out, std::uint64_t value) {
  for (; value >= 0x80; value >>= 7) out += static_cast<char>((value & 0x7F) | 0x80);
  out += static_cast<char>(value);
}

void put_key(std::string& out, int field, int wire_type) {
  put_varint(out, static_cast<std::uint64_t>(field) << 3 | wire_type);
}

void put_double(std::string& out, int field, double value) {
  std::uint64_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  put_key(out, field, 1);
  put_fixed(out, bits, 8);
}

void put_float(std::string& out, int field, float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  put_key(out, field, 5);
  put_fixed(out, bits, 4);
}

void put_int64(std::string& out, int field, std::int64_t value) {
  put_key(out, field, 0);
  put_varint(out, static_cast<std::uint64_t>(value));  // negative int64 takes ten bytes, as protobuf's does
}

void put_bytes(std::string& out, int field, const std::string& value) {
  put_key(out, field, 2);
  put_varint(out, value.size());
  out += value;
}

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string hostname() {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  return name;
}

}  // namespace

std::uint32_t crc32c(const char* data, std::size_t size) {
  static const auto table = make_crc_table();
  std::uint32_t crc = 0xFFFFFFFFu;
  for (std::size_t i = 0; i < size; ++i)
    crc = table[(crc ^ static_cast<unsigned char>(data[i])) & 0xFF] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

std::uint32_t masked_crc32c(const char* data, std::size_t size) {
  const std::uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  std::filesystem::create_directories(dir);
  const double now = unix_seconds();
  path_ = dir + "/events.out.tfevents." + std::to_string(static_cast<long long>(now)) + "." + hostname();
  // Append: a second writer started within the same second adds to the file instead of erasing it.
  out_.open(path_, std::ios::binary | std::ios::app);
  if (!out_) throw std::runtime_error("cannot open TensorBoard event file " + path_);
  // TensorBoard identifies the file's format by this first event.
  std::string event;
  put_double(event, 1, now);
  put_bytes(event, 3, "brain.Event:2");
  write_record(event);
  out_.flush();
}

void TensorBoardWriter::add_scalar(const std::string& tag, double value, std::int64_t step) {
  std::string summary_value;
  put_bytes(summary_value, 1, tag);
  put_float(summary_value, 2, static_cast<float>(value));
  std::string summary;
  put_bytes(summary, 1, summary_value);
  std::string event;
  put_double(event, 1, unix_seconds());
  put_int64(event, 2, step);
  put_bytes(event, 5, summary);
  write_record(event);
  out_.flush();
}

void TensorBoardWriter::write_record(const std::string& data) {
  std::string header;
  put_fixed(header, data.size(), 8);
  put_fixed(header, masked_crc32c(header.data(), header.size()), 4);
  std::string footer;
  put_fixed(footer, masked_crc32c(data.data(), data.size()), 4);
  out_ << header << data << footer;
}

}  // namespace trainer::metrics
