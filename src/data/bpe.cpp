#include "data/bpe.hpp"

#include <array>
#include <atomic>
#include <functional>
#include <queue>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "data/common.hpp"
#include "data/pretokenizer.hpp"
#include "data/regex.hpp"
#include "data/utf8.hpp"

namespace trainer::data {
namespace {

// The vocabulary's Split regex (tokenizer.json), or GPT-2's pattern.
std::unique_ptr<Regex> pre_tokenizer(const BpeVocabulary& v) {
  if (v.split_pattern.empty()) return std::make_unique<Regex>(gpt2_pattern());
  try {
    return std::make_unique<Regex>(v.split_pattern);
  } catch (const DataError& e) {
    throw DataError(v.encoder_where + ": pre_tokenizer Split: " + e.what());
  }
}

// Encodes piece by piece, each piece by its merges (bpe below), and decodes through each id's bytes.
class BpeTokenizer : public Tokenizer {
 public:
  explicit BpeTokenizer(BpeVocabulary v) : serial_(++next_serial_), split_(pre_tokenizer(v)) {
    ignore_merges_ = v.ignore_merges;
    encoder_ = std::move(v.encoder);
    build_decoder(v.encoder_where);
    build_merges(v.merges);
    eod_ = token_id(v.encoder_where, v.eod);
  }

  std::vector<std::int32_t> encode(std::string_view text) const override {
    std::vector<std::int32_t> ids;
    for (std::string_view piece : split_->split(text)) {
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
  const std::unique_ptr<Regex> split_;  // the pre-tokenizer
  bool ignore_merges_ = false;
  const std::array<char32_t, 256> symbols_ = byte_symbols();
  std::unordered_map<std::string, std::int32_t> encoder_;
  std::vector<std::string> token_bytes_;  // id -> the bytes it stands for
  std::array<std::int32_t, 256> byte_id_{};
  std::unordered_map<std::uint64_t, Merge> merges_;
  std::int32_t eod_ = 0;
};

}  // namespace

std::unique_ptr<Tokenizer> make_bpe_tokenizer(BpeVocabulary v) { return std::make_unique<BpeTokenizer>(std::move(v)); }

}  // namespace trainer::data
