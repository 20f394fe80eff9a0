// Byte-level BPE, the encoding of GPT-2 and Llama 3: text cut by a pre-tokenizer, each piece's
// bytes merged pairwise by rank. The Tokenizer behind make_tokenizer's "gpt2" (tokenizer.hpp).
#pragma once

#include <memory>

#include "data/bpe_files.hpp"
#include "data/tokenizer.hpp"

namespace trainer::data {

// A tokenizer of `v`: its Split regex as pre-tokenizer, or GPT-2's when it has none. Throws
// DataError naming v's file for ids that are not 0..N-1 each once, a token outside the byte
// alphabet, a merge of tokens it lacks, or a regex PCRE2 refuses.
std::unique_ptr<Tokenizer> make_bpe_tokenizer(BpeVocabulary v);

}  // namespace trainer::data
