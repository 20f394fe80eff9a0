#include "data/indexed_dataset.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <limits>
#include <stdexcept>
#include <utility>

namespace trainer::data {
namespace {

constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr std::uint64_t kVersion = 1;
constexpr size_t kHeaderSize = 9 + 8 + 1 + 8 + 8;

template <typename T>
T load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <typename T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

bool known_type(std::uint8_t code) { return (code >= 1 && code <= 5) || code == 8; }

// Range of ids each dtype holds.
bool fits(TokenType type, std::int32_t id) {
  switch (type) {
    case TokenType::kUInt8: return id >= 0 && id <= 0xFF;
    case TokenType::kInt8: return id >= -128 && id <= 127;
    case TokenType::kInt16: return id >= -32768 && id <= 32767;
    case TokenType::kUInt16: return id >= 0 && id <= 0xFFFF;
    case TokenType::kInt32:
    case TokenType::kInt64: return true;
  }
  return false;
}

template <typename T>
void append_as(std::vector<char>& out, const std::vector<std::int32_t>& ids) {
  const size_t at = out.size();
  out.resize(at + ids.size() * sizeof(T));
  for (size_t i = 0; i < ids.size(); ++i) {
    const T v = static_cast<T>(ids[i]);
    std::memcpy(out.data() + at + i * sizeof(T), &v, sizeof(T));
  }
}

}  // namespace

size_t token_size(TokenType type) {
  switch (type) {
    case TokenType::kUInt8: case TokenType::kInt8: return 1;
    case TokenType::kInt16: case TokenType::kUInt16: return 2;
    case TokenType::kInt32: return 4;
    case TokenType::kInt64: return 8;
  }
  return 0;
}

const char* token_type_name(TokenType type) {
  switch (type) {
    case TokenType::kUInt8: return "uint8";
    case TokenType::kInt8: return "int8";
    case TokenType::kInt16: return "int16";
    case TokenType::kInt32: return "int32";
    case TokenType::kInt64: return "int64";
    case TokenType::kUInt16: return "uint16";
  }
  return "?";
}

TokenType token_type_for_vocab(std::int64_t vocab_size) {
  return vocab_size < 65500 ? TokenType::kUInt16 : TokenType::kInt32;
}

std::int64_t TokenSpan::operator[](size_t i) const {
  const char* p = static_cast<const char*>(data);
  switch (type) {
    case TokenType::kUInt8: return load<std::uint8_t>(p + i);
    case TokenType::kInt8: return load<std::int8_t>(p + i);
    case TokenType::kInt16: return load<std::int16_t>(p + 2 * i);
    case TokenType::kUInt16: return load<std::uint16_t>(p + 2 * i);
    case TokenType::kInt32: return load<std::int32_t>(p + 4 * i);
    case TokenType::kInt64: return load<std::int64_t>(p + 8 * i);
  }
  return 0;
}

std::vector<std::int64_t> TokenSpan::to_vector() const {
  std::vector<std::int64_t> out(length);
  for (size_t i = 0; i < length; ++i) out[i] = (*this)[i];
  return out;
}

MappedFile::MappedFile(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY);
  struct stat st {};
  if (fd < 0 || fstat(fd, &st) != 0) {
    const int err = errno;
    if (fd >= 0) close(fd);
    throw DataError("cannot open " + path + ": " + std::strerror(err));
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* map = mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
    const int err = errno;
    if (map == MAP_FAILED) {
      close(fd);
      throw DataError("cannot map " + path + ": " + std::strerror(err));
    }
    data_ = static_cast<const char*>(map);
  }
  close(fd);  // the mapping stays valid
}

MappedFile::~MappedFile() {
  if (data_) munmap(const_cast<char*>(data_), size_);
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  std::swap(data_, other.data_);
  std::swap(size_, other.size_);
  return *this;
}

IndexedDataset::IndexedDataset(const std::string& prefix)
    : prefix_(prefix), idx_(prefix + ".idx"), bin_(prefix + ".bin") {
  const std::string idx = prefix + ".idx";
  if (idx_.size() < kHeaderSize)
    throw DataError(idx + ": " + std::to_string(idx_.size()) + " bytes, shorter than the " +
                    std::to_string(kHeaderSize) + "-byte header (truncated, or not an index)");
  const char* p = idx_.data();
  if (std::memcmp(p, kMagic, sizeof kMagic) != 0)
    throw DataError(idx + ": not a Megatron mmap index (the file does not start with MMIDIDX\\0\\0)");
  if (const auto version = load<std::uint64_t>(p + 9); version != kVersion)
    throw DataError(idx + ": index version " + std::to_string(version) + ", only version 1 is supported");
  const std::uint8_t code = load<std::uint8_t>(p + 17);
  if (!known_type(code))
    throw DataError(idx + ": dtype code " + std::to_string(code) + " is not an integer token type");
  type_ = static_cast<TokenType>(code);
  const auto sequences = load<std::uint64_t>(p + 18);
  const auto document_indices = load<std::uint64_t>(p + 26);
  // Sizes are checked before they are multiplied, so a corrupt count cannot overflow.
  const std::uint64_t room = (idx_.size() - kHeaderSize) / 8;
  if (sequences > room || document_indices > room || document_indices == 0 ||
      kHeaderSize + 12 * sequences + 8 * document_indices != idx_.size())
    throw DataError(idx + ": " + std::to_string(idx_.size()) + " bytes, but its header promises " +
                    std::to_string(sequences) + " sequences and " + std::to_string(document_indices) +
                    " document indices (truncated, or not an index)");
  num_sequences_ = sequences;
  num_documents_ = document_indices - 1;
  lengths_at_ = kHeaderSize;
  pointers_at_ = lengths_at_ + 4 * sequences;
  documents_at_ = pointers_at_ + 8 * sequences;
  check_index();
}

// One pass over the index: sequences lie back to back from byte 0 (Megatron writes them so,
// and a document is returned as one span), the document indices partition the sequences, and
// the .bin ends exactly where the last sequence does.
void IndexedDataset::check_index() {
  const std::string idx = prefix_ + ".idx";
  const std::int64_t item = static_cast<std::int64_t>(token_size(type_));
  std::int64_t offset = 0;
  std::int64_t tokens = 0;
  for (size_t s = 0; s < num_sequences_; ++s) {
    const std::int32_t length = sequence_length(s);
    if (length < 0 || sequence_pointer(s) != offset)
      throw DataError(idx + ": sequence " + std::to_string(s) + " has length " + std::to_string(length) +
                      " at byte " + std::to_string(sequence_pointer(s)) + ", expected to start at byte " +
                      std::to_string(offset));
    tokens += length;
    offset += length * item;
  }
  num_tokens_ = tokens;
  if (document_index(0) != 0 || document_index(num_documents_) != static_cast<std::int64_t>(num_sequences_))
    throw DataError(idx + ": document indices must run from 0 to the sequence count " +
                    std::to_string(num_sequences_));
  for (size_t d = 0; d < num_documents_; ++d)
    if (document_index(d + 1) < document_index(d))
      throw DataError(idx + ": document indices decrease at document " + std::to_string(d));
  if (static_cast<std::int64_t>(bin_.size()) != offset)
    throw DataError(prefix_ + ".bin: " + std::to_string(bin_.size()) + " bytes, but " + idx + " describes " +
                    std::to_string(offset) + " (" + std::to_string(tokens) + " " + token_type_name(type_) +
                    " tokens): " + (static_cast<std::int64_t>(bin_.size()) < offset ? "truncated" : "not its data file"));
}

std::int32_t IndexedDataset::sequence_length(size_t i) const { return load<std::int32_t>(idx_.data() + lengths_at_ + 4 * i); }
std::int64_t IndexedDataset::sequence_pointer(size_t i) const { return load<std::int64_t>(idx_.data() + pointers_at_ + 8 * i); }
std::int64_t IndexedDataset::document_index(size_t i) const { return load<std::int64_t>(idx_.data() + documents_at_ + 8 * i); }

TokenSpan IndexedDataset::sequence(size_t i) const {
  if (i >= num_sequences_)
    throw std::out_of_range(prefix_ + ": sequence " + std::to_string(i) + " of " + std::to_string(num_sequences_));
  return {bin_.data() + sequence_pointer(i), static_cast<size_t>(sequence_length(i)), type_};
}

TokenSpan IndexedDataset::document(size_t i) const {
  if (i >= num_documents_)
    throw std::out_of_range(prefix_ + ": document " + std::to_string(i) + " of " + std::to_string(num_documents_));
  const auto first = static_cast<size_t>(document_index(i)), last = static_cast<size_t>(document_index(i + 1));
  if (first == last) return {bin_.data(), 0, type_};
  // Sequences are contiguous (check_index), so the document runs from its first sequence's
  // start to its last one's end.
  const std::int64_t end = sequence_pointer(last - 1) + sequence_length(last - 1) * static_cast<std::int64_t>(token_size(type_));
  return {bin_.data() + sequence_pointer(first), static_cast<size_t>(end - sequence_pointer(first)) / token_size(type_), type_};
}

IndexedDatasetWriter::IndexedDatasetWriter(std::string bin_path, TokenType type)
    : bin_path_(std::move(bin_path)), type_(type) {
  // w+: split_off reads back what was written.
  bin_ = std::fopen(bin_path_.c_str(), "w+b");
  if (!bin_) throw DataError("cannot create " + bin_path_ + ": " + std::strerror(errno));
}

IndexedDatasetWriter::~IndexedDatasetWriter() {
  if (bin_) std::fclose(bin_);
}

IndexedDatasetWriter::IndexedDatasetWriter(IndexedDatasetWriter&& other) noexcept
    : bin_path_(std::move(other.bin_path_)),
      type_(other.type_),
      bin_(std::exchange(other.bin_, nullptr)),
      lengths_(std::move(other.lengths_)),
      tokens_(other.tokens_) {}

void IndexedDatasetWriter::fail(const std::string& what) const {
  throw std::runtime_error("writing " + bin_path_ + ": " + what + ": " + std::strerror(errno));
}

void IndexedDatasetWriter::add_document(const std::vector<std::int32_t>& ids) {
  if (ids.size() > static_cast<size_t>(std::numeric_limits<std::int32_t>::max()))
    throw DataError("a document of " + std::to_string(ids.size()) + " tokens does not fit the index's int32 length");
  for (std::int32_t id : ids)
    if (!fits(type_, id))
      throw DataError("token id " + std::to_string(id) + " does not fit dtype " + token_type_name(type_));
  buffer_.clear();
  switch (token_size(type_)) {
    case 1: append_as<std::uint8_t>(buffer_, ids); break;
    case 2: append_as<std::uint16_t>(buffer_, ids); break;
    case 4: append_as<std::int32_t>(buffer_, ids); break;
    default: append_as<std::int64_t>(buffer_, ids); break;
  }
  if (std::fwrite(buffer_.data(), 1, buffer_.size(), bin_) != buffer_.size()) fail("write failed");
  lengths_.push_back(static_cast<std::int32_t>(ids.size()));
  tokens_ += static_cast<std::int64_t>(ids.size());
}

IndexedDatasetWriter IndexedDatasetWriter::split_off(size_t first, const std::string& bin_path) {
  IndexedDatasetWriter tail(bin_path, type_);
  std::int64_t offset = 0;
  for (size_t d = 0; d < first; ++d) offset += lengths_[d];
  offset *= static_cast<std::int64_t>(token_size(type_));
  if (std::fflush(bin_) != 0) fail("flush failed");
  const int fd = fileno(bin_);
  std::vector<char> chunk(1 << 20);
  for (off_t at = offset;;) {
    const ssize_t n = pread(fd, chunk.data(), chunk.size(), at);
    if (n < 0) fail("read back failed");
    if (n == 0) break;
    if (std::fwrite(chunk.data(), 1, static_cast<size_t>(n), tail.bin_) != static_cast<size_t>(n))
      tail.fail("write failed");
    at += n;
  }
  if (ftruncate(fd, offset) != 0 || std::fseek(bin_, 0, SEEK_END) != 0) fail("truncate failed");
  tail.lengths_.assign(lengths_.begin() + static_cast<std::ptrdiff_t>(first), lengths_.end());
  lengths_.resize(first);
  for (std::int32_t n : tail.lengths_) tail.tokens_ += n;
  tokens_ -= tail.tokens_;
  return tail;
}

void IndexedDatasetWriter::finish(const std::string& idx_path) {
  if (std::fclose(std::exchange(bin_, nullptr)) != 0) fail("close failed");
  std::string header(kMagic, sizeof kMagic);
  put<std::uint64_t>(header, kVersion);
  put<std::uint8_t>(header, static_cast<std::uint8_t>(type_));
  put<std::uint64_t>(header, lengths_.size());
  put<std::uint64_t>(header, lengths_.size() + 1);
  std::vector<std::int64_t> pointers(lengths_.size()), documents(lengths_.size() + 1);
  for (size_t d = 0; d < lengths_.size(); ++d) {
    if (d > 0) pointers[d] = pointers[d - 1] + lengths_[d - 1] * static_cast<std::int64_t>(token_size(type_));
    documents[d + 1] = static_cast<std::int64_t>(d + 1);
  }
  std::FILE* f = std::fopen(idx_path.c_str(), "wb");
  const bool ok = f && std::fwrite(header.data(), 1, header.size(), f) == header.size() &&
                  std::fwrite(lengths_.data(), sizeof(std::int32_t), lengths_.size(), f) == lengths_.size() &&
                  std::fwrite(pointers.data(), sizeof(std::int64_t), pointers.size(), f) == pointers.size() &&
                  std::fwrite(documents.data(), sizeof(std::int64_t), documents.size(), f) == documents.size();
  if (!f || std::fclose(f) != 0 || !ok) throw std::runtime_error("writing " + idx_path + ": " + std::strerror(errno));
}

}  // namespace trainer::data
