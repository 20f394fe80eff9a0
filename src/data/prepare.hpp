// `trainer prepare-data`: tokenizes text into a Megatron indexed dataset (indexed_dataset.hpp).
//
// Documents: each plain file is one document; each non-blank line of a .jsonl or .json file is
// one document, the string field "text" of its JSON object. Directories are searched
// recursively, files taken in path order. Documents with empty text are skipped (and counted).
// Invalid UTF-8 is replaced by U+FFFD (one per maximal ill-formed subpart), counted and
// reported. Several threads tokenize; documents are written in input order.
#pragma once

#include <string>
#include <vector>

#include "data/tokenizer.hpp"

namespace trainer::data {

struct PrepareOptions {
  std::vector<std::string> inputs;      // files and directories
  TokenizerFiles tokenizer;
  std::string output;                   // writes OUTPUT.bin and OUTPUT.idx
  double val_fraction = 0;              // > 0: OUTPUT_train and OUTPUT_val, the last documents to val
  bool append_eod = false;              // end-of-document token after each document
  int workers = 0;                      // tokenizing threads; 0 = one per hardware thread
};

// Returns the exit code: 0, or 2 after printing "error: ..." for bad input (options, missing
// or unreadable files, malformed JSONL or tokenizer files, empty input). Failures to write the
// output throw (exit 1). Output goes to temporary names renamed only once everything is
// written, so a failed run leaves no partial dataset behind.
int prepare_data(const PrepareOptions& opts);

}  // namespace trainer::data
