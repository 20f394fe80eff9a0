// Megatron-LM's memory-mapped indexed dataset (PREFIX.bin + PREFIX.idx), read and written in
// plain C++17, so datasets made by Megatron's tools/preprocess_data.py load here and ours load
// there. Layout, little-endian like the machines both run on, from
// megatron/core/datasets/indexed_dataset.py:
//
//   .idx  "MMIDIDX\0\0"            9 bytes
//         version                  uint64, 1
//         dtype code               uint8: 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 8 uint16
//                                  (6 float64 and 7 float32 are not token ids and are refused)
//         sequence count S         uint64
//         document index count D   uint64, documents + 1
//         sequence lengths         int32[S], in tokens
//         sequence pointers        int64[S], byte offsets into .bin
//         document indices         int64[D]: document d is sequences [idx[d], idx[d+1]);
//                                  idx[0] = 0 and idx[D-1] = S
//   .bin  the tokens of every sequence back to back, in the dtype.
//
// A document has several sequences only when Megatron split it into sentences; ours have one.
//
// Reading: IndexedDataset ds("data/train");  ds.num_documents();  ds.num_tokens();
//          TokenSpan d = ds.document(i);  d[k] (any dtype, as int64) or d.data / d.length / d.type.
// Both files are memory-mapped; opening reads the .idx (checking it against the .bin) but
// never the .bin, so a dataset of any size opens at once and costs only the pages touched.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "data/common.hpp"

namespace trainer::data {

// Megatron's dtype codes.
enum class TokenType : std::uint8_t { kUInt8 = 1, kInt8 = 2, kInt16 = 3, kInt32 = 4, kInt64 = 5, kUInt16 = 8 };

size_t token_size(TokenType type);
const char* token_type_name(TokenType type);
// Megatron's choice for a vocabulary: uint16 below 65500 tokens, else int32.
TokenType token_type_for_vocab(std::int64_t vocab_size);

// Tokens of one document or sequence, pointing into the mapped .bin (valid while the dataset is).
struct TokenSpan {
  const void* data = nullptr;  // `length` values of `type`, aligned for it
  size_t length = 0;
  TokenType type = TokenType::kUInt16;

  std::int64_t operator[](size_t i) const;
  std::vector<std::int64_t> to_vector() const;
};

// A file mapped read-only; empty files map to nothing.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const char* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  const char* data_ = nullptr;
  size_t size_ = 0;
};

class IndexedDataset {
 public:
  // Opens PREFIX.idx and PREFIX.bin. Throws DataError naming the file when one is missing, has
  // the wrong magic, version or dtype, is not the size its header implies, has inconsistent
  // indices, or when the .bin is not exactly as long as the .idx says (truncated, or another
  // dataset's).
  explicit IndexedDataset(const std::string& prefix);

  size_t num_documents() const { return num_documents_; }
  size_t num_sequences() const { return num_sequences_; }
  std::int64_t num_tokens() const { return num_tokens_; }
  TokenType token_type() const { return type_; }
  const std::string& prefix() const { return prefix_; }

  // All sequences of document i, back to back. Throws std::out_of_range past the end.
  TokenSpan document(size_t i) const;
  TokenSpan sequence(size_t i) const;

 private:
  // The .idx arrays may sit at any alignment (the header is 34 bytes): read them by copying.
  std::int32_t sequence_length(size_t i) const;
  std::int64_t sequence_pointer(size_t i) const;
  std::int64_t document_index(size_t i) const;
  void check_index();

  std::string prefix_;
  MappedFile idx_, bin_;
  TokenType type_ = TokenType::kUInt16;
  size_t num_sequences_ = 0, num_documents_ = 0;
  std::int64_t num_tokens_ = 0;
  size_t lengths_at_ = 0, pointers_at_ = 0, documents_at_ = 0;  // byte offsets in .idx
};

// Writes a dataset with one sequence per document (what preprocess_data.py writes without
// --split-sentences). Tokens go to the .bin as they come; finish() writes the .idx.
class IndexedDatasetWriter {
 public:
  // Creates (truncates) bin_path. Throws DataError if it cannot.
  IndexedDatasetWriter(std::string bin_path, TokenType type);
  ~IndexedDatasetWriter();
  IndexedDatasetWriter(IndexedDatasetWriter&& other) noexcept;
  IndexedDatasetWriter(const IndexedDatasetWriter&) = delete;
  IndexedDatasetWriter& operator=(const IndexedDatasetWriter&) = delete;

  // Throws DataError if an id does not fit the dtype or the document has 2^31 tokens or more.
  void add_document(const std::vector<std::int32_t>& ids);
  size_t num_documents() const { return lengths_.size(); }
  std::int64_t num_tokens() const { return tokens_; }

  // Moves documents [first, num_documents()) to a new writer whose .bin is `bin_path`,
  // shortening this one's .bin: how a validation split takes the last documents.
  IndexedDatasetWriter split_off(size_t first, const std::string& bin_path);
  // Flushes the .bin and writes the .idx. Nothing may be added afterwards.
  void finish(const std::string& idx_path);

 private:
  [[noreturn]] void fail(const std::string& what) const;

  std::string bin_path_;
  TokenType type_;
  std::FILE* bin_ = nullptr;
  std::vector<std::int32_t> lengths_;
  std::int64_t tokens_ = 0;
  std::vector<char> buffer_;  // one document converted to the dtype
};

}  // namespace trainer::data
