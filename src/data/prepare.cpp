#include "data/prepare.hpp"

#include <nlohmann/json.hpp>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "data/indexed_dataset.hpp"
#include "data/json.hpp"
#include "data/tokenizer.hpp"
#include "data/utf8.hpp"
#include "runtime/clock.hpp"
#include "runtime/files.hpp"

namespace trainer::data {
namespace {

namespace fs = std::filesystem;
using runtime::Clock;
using runtime::seconds_since;

// A batch is read, tokenized by all threads at once, then written; batches bound the memory.
constexpr size_t kBatchBytes = 16 << 20;
constexpr size_t kBatchDocuments = 4096;

struct Stats {
  size_t files = 0, documents = 0, empty = 0, replaced = 0;
  std::int64_t bytes = 0, tokens = 0;
  double seconds = 0;  // reading, tokenizing and writing the .bin
};

bool is_jsonl(const fs::path& path) { return path.extension() == ".jsonl" || path.extension() == ".json"; }

// Every input file in order: files as given, directories expanded to their files in path order.
std::vector<std::string> list_files(const std::vector<std::string>& inputs) {
  std::vector<std::string> files;
  for (const std::string& input : inputs) {
    std::error_code ec;
    const fs::file_status status = fs::status(input, ec);
    if (!fs::exists(status)) throw DataError("input " + input + ": no such file or directory");
    if (!fs::is_directory(status)) {
      files.push_back(input);
      continue;
    }
    std::vector<std::string> found;
    try {
      for (const auto& entry : fs::recursive_directory_iterator(input))
        if (entry.is_regular_file()) found.push_back(entry.path().string());
    } catch (const fs::filesystem_error& e) {
      throw DataError("cannot list input directory " + input + ": " + e.code().message());
    }
    if (found.empty()) throw DataError("input directory " + input + " holds no files");
    std::sort(found.begin(), found.end());
    files.insert(files.end(), found.begin(), found.end());
  }
  return files;
}

// The "text" of one JSONL line; `where` is file:line for errors. Invalid UTF-8, which
// nlohmann::json refuses, becomes U+FFFD first, counted as the text's own would be later.
std::string jsonl_text(std::string line, const std::string& where, Stats& stats) {
  try {
    stats.replaced += sanitize_utf8(line);
    nlohmann::json object = parse_json(std::move(line), &stats.replaced);
    if (!object.is_object()) throw DataError("the line is not a JSON object");
    const auto text = object.find("text");
    if (text == object.end()) throw DataError("the object has no \"text\" field");
    if (!text->is_string()) throw DataError("\"text\" is not a string");
    return std::move(text->get_ref<std::string&>());
  } catch (const DataError& e) {
    throw DataError(where + ": " + e.what());
  }
}

// Reads documents in input order, a batch at a time.
class DocumentReader {
 public:
  explicit DocumentReader(std::vector<std::string> files) : files_(std::move(files)) {}

  // The next batch (empty at the end of the input).
  std::vector<std::string> next_batch(Stats& stats) {
    std::vector<std::string> docs;
    size_t bytes = 0;
    while (docs.size() < kBatchDocuments && bytes < kBatchBytes) {
      std::optional<std::string> doc = next_document(stats);
      if (!doc) break;
      stats.bytes += static_cast<std::int64_t>(doc->size());
      if (doc->empty()) {
        ++stats.empty;
        continue;
      }
      bytes += doc->size();
      docs.push_back(std::move(*doc));
    }
    return docs;
  }

 private:
  std::optional<std::string> next_document(Stats& stats) {
    while (true) {
      if (jsonl_.is_open()) {
        std::string line;
        if (std::getline(jsonl_, line)) {
          ++line_;
          if (line.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank line
          return jsonl_text(std::move(line), jsonl_path_ + ":" + std::to_string(line_), stats);
        }
        if (jsonl_.bad()) throw DataError("cannot read " + jsonl_path_ + ": " + std::strerror(errno));
        jsonl_.close();
      }
      if (next_file_ == files_.size()) return std::nullopt;
      const std::string& path = files_[next_file_++];
      ++stats.files;
      if (!is_jsonl(path)) return read_file(path);
      jsonl_.open(path, std::ios::binary);
      if (!jsonl_) throw DataError("cannot read " + path + ": " + std::strerror(errno));
      jsonl_path_ = path;
      line_ = 0;
    }
  }

  std::vector<std::string> files_;
  size_t next_file_ = 0;
  std::ifstream jsonl_;
  std::string jsonl_path_;
  size_t line_ = 0;
};

// Threads that live for the whole run (so each keeps its tokenizer cache from batch to batch).
// run() hands out indices [0, n) one at a time to them and to the calling thread.
class WorkerPool {
 public:
  explicit WorkerPool(int workers) {
    for (int w = 1; w < workers; ++w) threads_.emplace_back([this] { loop(); });
  }
  ~WorkerPool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (auto& t : threads_) t.join();
  }

  void run(size_t n, const std::function<void(size_t)>& job) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      job_ = &job;
      n_ = n;
      next_ = 0;
      busy_ = threads_.size();
      ++generation_;
    }
    wake_.notify_all();
    work();
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [this] { return busy_ == 0; });
  }

 private:
  void work() {
    for (size_t i; (i = next_++) < n_;) (*job_)(i);
  }
  void loop() {
    for (size_t seen = 0;;) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
      }
      work();
      std::lock_guard<std::mutex> lock(mutex_);
      if (--busy_ == 0) done_.notify_one();
    }
  }

  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::function<void(size_t)>* job_ = nullptr;
  size_t n_ = 0, busy_ = 0, generation_ = 0;
  std::atomic<size_t> next_{0};
  bool stop_ = false;
};

// Tokenizes a batch on the pool; results land at their document's index, so the order is the
// input's whichever thread finishes first.
std::vector<std::vector<std::int32_t>> encode_batch(const Tokenizer& tokenizer, std::vector<std::string>& docs,
                                                    bool append_eod, WorkerPool& pool, Stats& stats) {
  std::vector<std::vector<std::int32_t>> ids(docs.size());
  std::vector<size_t> replaced(docs.size(), 0);
  pool.run(docs.size(), [&](size_t i) {
    replaced[i] = sanitize_utf8(docs[i]);
    ids[i] = tokenizer.encode(docs[i]);
    if (append_eod) ids[i].push_back(tokenizer.eod_id());
  });
  for (size_t r : replaced) stats.replaced += r;
  return ids;
}


// One status line on stderr: rewritten in place on a terminal, a new line now and then in logs.
class Progress {
 public:
  Progress() : tty_(isatty(STDERR_FILENO)), start_(Clock::now()), last_(start_) {}

  void update(const Stats& s) {
    if (seconds_since(last_) < (tty_ ? 1.0 : 30.0)) return;
    last_ = Clock::now();
    std::fprintf(stderr, "%sprepare-data: %zu documents, %.1f MB, %lld tokens, %.1f MB/s%s", tty_ ? "\r" : "",
                 s.documents, s.bytes / 1e6, static_cast<long long>(s.tokens), s.bytes / 1e6 / seconds_since(start_),
                 tty_ ? "" : "\n");
    printed_ = true;
  }
  // Ends the rewritten line so that what follows (the summary or an error) starts on its own.
  ~Progress() {
    if (tty_ && printed_) std::fputc('\n', stderr);
  }
  double elapsed() const { return seconds_since(start_); }

 private:
  bool tty_, printed_ = false;
  Clock::time_point start_, last_;
};

// Output files are written under temporary names and published together at the end
// (runtime/files.hpp), so a failed run leaves nothing behind that looks like a dataset.
class OutputFiles {
 public:
  ~OutputFiles() {
    if (committed_) return;
    std::error_code ec;
    for (const auto& [temp, final_path] : files_) fs::remove(temp, ec);
  }
  std::string temp_for(const std::string& final_path) {
    files_.emplace_back(final_path + ".tmp" + std::to_string(getpid()), final_path);
    return files_.back().first;
  }
  // Every .bin before any .idx: a reader finding the .idx finds its data.
  void commit() {
    std::stable_partition(files_.begin(), files_.end(), [](const auto& f) { return fs::path(f.second).extension() == ".bin"; });
    for (const auto& [temp, final_path] : files_) runtime::publish(temp, final_path);
    committed_ = true;
  }

 private:
  std::vector<std::pair<std::string, std::string>> files_;  // temporary, final
  bool committed_ = false;
};

void check_options(const PrepareOptions& o) {
  if (!(o.val_fraction >= 0 && o.val_fraction < 1))
    throw DataError("--val-fraction " + std::to_string(o.val_fraction) + ": must be at least 0 and below 1");
  if (o.workers < 0) throw DataError("--workers " + std::to_string(o.workers) + ": must be 0 (all cores) or more");
  if (o.output.empty() || o.output.back() == '/') throw DataError("--output must be a file prefix, e.g. data/corpus");
}

// The directory of the --output prefix, created if missing: a path that cannot hold files is
// bad input, named, before any tokenizing (the .bin's creation checks writability next).
void make_output_directory(const std::string& prefix) {
  const fs::path parent = fs::path(prefix).parent_path();
  if (parent.empty()) return;
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec) throw DataError("--output " + prefix + ": cannot create the directory " + parent.string() + ": " + ec.message());
}

// Validation documents: the last `fraction` of them, rounded, at least one and leaving one.
size_t validation_count(size_t documents, double fraction) {
  if (documents < 2)
    throw DataError("--val-fraction needs at least 2 documents; the input has " + std::to_string(documents));
  const auto n = static_cast<size_t>(std::llround(fraction * static_cast<double>(documents)));
  return std::clamp<size_t>(n, 1, documents - 1);
}

void print_summary(const PrepareOptions& o, const Tokenizer& tokenizer, TokenType type, const Stats& s, int workers) {
  const double seconds = std::max(s.seconds, 1e-9);
  std::printf("prepare-data: %zu documents (%zu empty skipped) from %zu files, %.2f MB of text -> %lld tokens in %.2f s "
              "(%.2f MB/s, %.0f tokens/s, threads: %d)\n",
              s.documents, s.empty, s.files, s.bytes / 1e6, static_cast<long long>(s.tokens), seconds,
              s.bytes / 1e6 / seconds, s.tokens / seconds, workers);
  std::printf("prepare-data: invalid UTF-8 sequences replaced by U+FFFD: %zu\n", s.replaced);
  std::printf("prepare-data: tokenizer %s, vocab %d, end-of-document id %d %s; dtype %s\n", o.tokenizer.kind == TokenizerKind::Byte ? "byte" : "gpt2",
              tokenizer.vocab_size(), tokenizer.eod_id(), o.append_eod ? "appended" : "not appended",
              token_type_name(type));
}

// `first` is the 0-based input position of the writer's first document.
void print_written(const std::string& prefix, const IndexedDatasetWriter& w, size_t first) {
  std::printf("prepare-data: wrote %s.bin and %s.idx: documents %zu-%zu of the input (%zu), %lld tokens\n",
              prefix.c_str(), prefix.c_str(), first + 1, first + w.num_documents(), w.num_documents(),
              static_cast<long long>(w.num_tokens()));
}

void run(const PrepareOptions& o) {
  check_options(o);
  const std::unique_ptr<Tokenizer> tokenizer = make_tokenizer(o.tokenizer);
  DocumentReader reader(list_files(o.inputs));
  const int workers = o.workers > 0 ? o.workers : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const TokenType type = token_type_for_vocab(tokenizer->vocab_size());
  make_output_directory(o.output);

  const bool split = o.val_fraction > 0;
  const std::string train_prefix = split ? o.output + "_train" : o.output;
  OutputFiles out;
  IndexedDatasetWriter train(out.temp_for(train_prefix + ".bin"), type);
  Stats stats;
  {
    WorkerPool pool(workers);
    Progress progress;
    for (auto docs = reader.next_batch(stats); !docs.empty(); docs = reader.next_batch(stats)) {
      for (const auto& ids : encode_batch(*tokenizer, docs, o.append_eod, pool, stats)) {
        train.add_document(ids);
        stats.tokens += static_cast<std::int64_t>(ids.size());
      }
      stats.documents += docs.size();
      progress.update(stats);
    }
    stats.seconds = progress.elapsed();
  }
  if (stats.documents == 0)
    throw DataError("empty input: the " + std::to_string(stats.files) + " input files hold no text");
  const size_t val_docs = split ? validation_count(stats.documents, o.val_fraction) : 0;

  print_summary(o, *tokenizer, type, stats, workers);
  if (!split) {
    train.finish(out.temp_for(train_prefix + ".idx"));
    out.commit();
    print_written(train_prefix, train, 0);
    return;
  }
  const std::string val_prefix = o.output + "_val";
  IndexedDatasetWriter val = train.split_off(stats.documents - val_docs, out.temp_for(val_prefix + ".bin"));
  train.finish(out.temp_for(train_prefix + ".idx"));
  val.finish(out.temp_for(val_prefix + ".idx"));
  out.commit();
  print_written(train_prefix, train, 0);
  print_written(val_prefix, val, train.num_documents());
}

}  // namespace

int prepare_data(const PrepareOptions& opts) {
  try {
    run(opts);
    return 0;
  } catch (const DataError& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}

}  // namespace trainer::data
