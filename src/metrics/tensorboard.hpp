// A minimal TensorBoard event-file writer: scalars only, no protobuf or TensorFlow dependency.
//
// The file is a sequence of TFRecords, each one serialized tensorflow.Event:
//   record: uint64 length | uint32 masked_crc32c(length) | data | uint32 masked_crc32c(data)
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//   Summary { repeated Value value = 1; }   Value { string tag = 1; float simple_value = 2; }
// (tensorflow/core/util/event.proto, tensorflow/core/framework/summary.proto.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>

namespace trainer::metrics {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as TFRecord uses.
std::uint32_t crc32c(const char* data, std::size_t size);
// TFRecord stores CRCs rotated and offset, so a CRC of data that itself holds CRCs stays robust.
std::uint32_t masked_crc32c(const char* data, std::size_t size);

class TensorBoardWriter {
 public:
  // Creates <dir>/events.out.tfevents.<unix time>.<hostname> (the name TensorBoard looks for).
  explicit TensorBoardWriter(const std::string& dir);
  // One Event per call, flushed, so a live TensorBoard (or a crash) sees every value written.
  void add_scalar(const std::string& tag, double value, std::int64_t step);
  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& data);

  std::string path_;
  std::ofstream out_;
};

}  // namespace trainer::metrics
