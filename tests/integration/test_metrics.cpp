// Metrics files: the TensorBoard event writer checked by a reader written here from the
// published formats (TFRecord framing with masked CRC32C, tensorflow.Event and Summary
// protobufs), a real run's metrics.jsonl and event file agreeing step by step, StepLogger's
// eval records, and MFU against a hand computation.
#include "catch_torch.hpp"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "config/config.hpp"
#include "distributed/comm.hpp"
#include "helpers.hpp"
#include "metrics/metrics.hpp"
#include "metrics/tensorboard.hpp"

using namespace trainer;

namespace {

// --- A TFRecord / Event reader, independent of the writer (bitwise CRC, no shared code). ---

std::uint32_t reference_crc32c(const std::string& data) {
  std::uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char byte : data) {
    crc ^= byte;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1)));
  }
  return ~crc;
}

std::uint32_t mask(std::uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

std::uint64_t read_le(const std::string& s, size_t pos, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<std::uint64_t>(static_cast<unsigned char>(s[pos + i])) << (8 * i);
  return v;
}

// Record: uint64 length | uint32 masked crc of the length bytes | data | uint32 masked crc of data.
std::vector<std::string> read_records(const std::string& file) {
  std::vector<std::string> records;
  for (size_t pos = 0; pos < file.size();) {
    if (file.size() - pos < 12) throw std::runtime_error("truncated record header");
    const std::uint64_t length = read_le(file, pos, 8);
    if (read_le(file, pos + 8, 4) != mask(reference_crc32c(file.substr(pos, 8))))
      throw std::runtime_error("length CRC mismatch");
    if (file.size() - pos - 12 < length + 4) throw std::runtime_error("truncated record data");
    std::string data = file.substr(pos + 12, length);
    if (read_le(file, pos + 12 + length, 4) != mask(reference_crc32c(data)))
      throw std::runtime_error("data CRC mismatch");
    records.push_back(std::move(data));
    pos += 12 + length + 4;
  }
  return records;
}

// One protobuf field: varint and fixed values in `scalar`, length-delimited ones in `bytes`.
struct Field {
  int number, wire;
  std::uint64_t scalar = 0;
  std::string bytes;
};

std::vector<Field> decode_fields(const std::string& msg) {
  size_t pos = 0;
  auto varint = [&] {
    std::uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
      if (pos >= msg.size() || shift > 63) throw std::runtime_error("bad varint");
      const auto byte = static_cast<unsigned char>(msg[pos++]);
      v |= static_cast<std::uint64_t>(byte & 0x7F) << shift;
      if (!(byte & 0x80)) return v;
    }
  };
  auto fixed = [&](int bytes) {
    if (msg.size() - pos < static_cast<size_t>(bytes)) throw std::runtime_error("truncated fixed field");
    pos += bytes;
    return read_le(msg, pos - bytes, bytes);
  };
  std::vector<Field> fields;
  while (pos < msg.size()) {
    const std::uint64_t key = varint();
    Field f{static_cast<int>(key >> 3), static_cast<int>(key & 7)};
    if (f.wire == 0) f.scalar = varint();
    else if (f.wire == 1) f.scalar = fixed(8);
    else if (f.wire == 5) f.scalar = fixed(4);
    else if (f.wire == 2) {
      const std::uint64_t n = varint();
      if (msg.size() - pos < n) throw std::runtime_error("truncated bytes field");
      f.bytes = msg.substr(pos, n);
      pos += n;
    } else throw std::runtime_error("unexpected wire type " + std::to_string(f.wire));
    fields.push_back(std::move(f));
  }
  return fields;
}

const Field& expect_wire(const Field& f, int wire) {
  if (f.wire != wire) throw std::runtime_error("field " + std::to_string(f.number) + " has wire type " + std::to_string(f.wire));
  return f;
}

struct Event {
  double wall_time = 0;
  std::int64_t step = 0;
  std::string file_version;
  std::vector<std::pair<std::string, float>> values;  // Summary.Value tag, simple_value
};

std::pair<std::string, float> decode_summary_value(const std::string& msg) {
  std::pair<std::string, float> v;
  for (const Field& f : decode_fields(msg)) {
    if (f.number == 1) v.first = expect_wire(f, 2).bytes;
    if (f.number == 2) {
      const auto bits = static_cast<std::uint32_t>(expect_wire(f, 5).scalar);
      std::memcpy(&v.second, &bits, 4);
    }
  }
  return v;
}

Event decode_event(const std::string& msg) {
  Event e;
  for (const Field& f : decode_fields(msg)) {
    if (f.number == 1) std::memcpy(&e.wall_time, &expect_wire(f, 1).scalar, 8);
    if (f.number == 2) e.step = static_cast<std::int64_t>(expect_wire(f, 0).scalar);
    if (f.number == 3) e.file_version = expect_wire(f, 2).bytes;
    if (f.number == 5)
      for (const Field& value : decode_fields(expect_wire(f, 2).bytes))
        if (value.number == 1) e.values.push_back(decode_summary_value(expect_wire(value, 2).bytes));
  }
  return e;
}

std::vector<Event> read_events(const std::string& path) {
  std::vector<Event> events;
  for (const auto& record : read_records(testing::read_file(path))) events.push_back(decode_event(record));
  return events;
}

std::vector<std::string> event_files(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    if (entry.path().filename().string().rfind("events.out.tfevents.", 0) == 0) files.push_back(entry.path().string());
  return files;
}

// tag -> step -> value over every Summary of a file.
std::map<std::string, std::map<std::int64_t, float>> scalars(const std::vector<Event>& events) {
  std::map<std::string, std::map<std::int64_t, float>> out;
  for (const Event& e : events)
    for (const auto& [tag, value] : e.values) out[tag][e.step] = value;
  return out;
}

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// --- metrics.jsonl: flat objects of numbers (and null), as the logger writes them. ---

using JsonRecord = std::map<std::string, std::string>;  // key -> the value's raw text

JsonRecord parse_flat_json(const std::string& line) {
  const std::regex object(R"(\{(.*)\})"), member(R"re("([a-z_]+)":(.+))re");
  std::smatch m;
  if (!std::regex_match(line, m, object)) throw std::runtime_error("not an object: " + line);
  JsonRecord record;
  std::stringstream members(m[1].str());  // no value holds a comma: there are no strings
  for (std::string item; std::getline(members, item, ',');) {
    std::smatch kv;
    if (!std::regex_match(item, kv, member)) throw std::runtime_error("bad member '" + item + "' in " + line);
    record[kv[1]] = kv[2];
  }
  return record;
}

std::vector<JsonRecord> read_jsonl(const std::string& path) {
  std::vector<JsonRecord> records;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) records.push_back(parse_flat_json(line));
  return records;
}

bool is_json_integer(const std::string& s) { return std::regex_match(s, std::regex(R"(-?(0|[1-9][0-9]*))")); }
bool is_json_number(const std::string& s) {
  return std::regex_match(s, std::regex(R"(-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?)"));
}

const char* const kTrainFigures[] = {"loss", "lr", "grad_norm", "tokens_per_s", "tflops_per_rank", "mfu",
                                     "step_s", "compute_s", "optimizer_s", "comm_s", "bubble_s", "peak_rss_mb", "skipped",
                                     "tp_bytes", "pp_bytes", "dp_bytes"};

// StepLogger on its own, one process: a step with a NaN loss, then an eval result.
int step_logger_worker() {
  const std::string out = testing::env_or("TEST_OUT", "/tmp");
  auto job = distributed::detect_job_env(distributed::current_environment());
  Config cfg = load_config(testing::source_dir() + "/configs/tiny.yaml", {"train.steps=5", "logging.dir=" + out});
  distributed::Comm comm(job, distributed::Grid(1, 1, 1), std::chrono::seconds(30));
  metrics::StepLogger logger(cfg, comm, true);
  metrics::StepRecord r;
  r.step = 5, r.loss = std::nan(""), r.lr = 1e-3, r.grad_norm = 2.0;
  r.times.total = 0.5, r.times.compute = 0.3, r.times.comm = 0.15, r.times.bubble = 0.05;
  r.skipped = 1, r.max_in_flight = 2, r.buckets_overlapped = 3, r.buckets = 4;
  logger.step(r);
  logger.eval(5, 2.0);
  return 0;
}
testing::RegisterWorker reg_step_logger("step_logger", step_logger_worker);

}  // namespace

TEST_CASE("CRC32C gives the published check value", "[metrics]") {
  CHECK(reference_crc32c("123456789") == 0xE3069283u);
  CHECK(metrics::crc32c("123456789", 9) == 0xE3069283u);
  std::string bytes;
  for (int i = 0; i < 1000; ++i) bytes += static_cast<char>(i * 37 + 11);
  CHECK(metrics::crc32c(bytes.data(), bytes.size()) == reference_crc32c(bytes));
  CHECK(metrics::masked_crc32c(bytes.data(), bytes.size()) == mask(reference_crc32c(bytes)));
}

TEST_CASE("TensorBoard event file: TFRecord framing - CRCs - Event and Summary fields", "[metrics]") {
  testing::TempDir dir;
  const std::string logs = dir.file("tb");  // not there yet: the writer creates it
  const double before = unix_seconds();
  std::string path;
  {
    metrics::TensorBoardWriter writer(logs);
    path = writer.path();
    writer.add_scalar("train/loss", 5.413243, 1);
    writer.add_scalar("train/lr", 2.991e-3, 1);
    writer.add_scalar("eval/perplexity", -0.25, 300);
    writer.add_scalar("train/loss", 1e30, std::int64_t(1) << 40);  // a step of six varint bytes
  }
  const double after = unix_seconds();

  REQUIRE(event_files(logs) == std::vector<std::string>{path});
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  const std::string name = std::filesystem::path(path).filename().string();
  CHECK(std::regex_match(name, std::regex(R"(events\.out\.tfevents\.[0-9]+\..+)")));
  CHECK(name.substr(name.size() - std::strlen(host)) == host);

  const auto events = read_events(path);
  REQUIRE(events.size() == 5);
  CHECK(events[0].file_version == "brain.Event:2");
  CHECK(events[0].values.empty());
  for (const Event& e : events) {
    CHECK(e.wall_time >= std::floor(before));
    CHECK(e.wall_time <= after + 1);
  }
  const std::vector<std::tuple<std::string, float, std::int64_t>> expected = {
      {"train/loss", 5.413243f, 1}, {"train/lr", 2.991e-3f, 1}, {"eval/perplexity", -0.25f, 300},
      {"train/loss", 1e30f, std::int64_t(1) << 40}};
  for (size_t i = 0; i < expected.size(); ++i) {
    const Event& e = events[i + 1];
    INFO("scalar " << i);
    CHECK(e.file_version.empty());
    REQUIRE(e.values.size() == 1);
    CHECK(e.values[0].first == std::get<0>(expected[i]));
    CHECK(e.values[0].second == std::get<1>(expected[i]));
    CHECK(e.step == std::get<2>(expected[i]));
  }

  // The reader rejects any damaged record: the CRCs are really checked.
  const std::string good = testing::read_file(path);
  const size_t first_data = 12, second_length = 12 + read_le(good, 0, 8) + 4;
  for (size_t pos : {size_t(0), size_t(9), first_data + 3, second_length, second_length + 20, good.size() - 1}) {
    INFO("corrupted byte " << pos);
    std::string bad = good;
    bad[pos] ^= 0x10;
    CHECK_THROWS(read_records(bad));
  }
  CHECK_THROWS(read_records(good.substr(0, good.size() - 2)));
}

TEST_CASE("a run's metrics.jsonl and TensorBoard scalars agree step by step", "[metrics][mp]") {
  testing::TempDir dir;
  const std::string logs = dir.file("logs");
  auto r = testing::train_layout(1, 2, 1, dir.path, {"train.steps=4", "logging.interval=1", "logging.dir=" + logs});
  INFO(r.output);
  REQUIRE(r.code == 0);

  const auto records = read_jsonl(logs + "/metrics.jsonl");
  REQUIRE(records.size() == 4);
  for (size_t i = 0; i < records.size(); ++i) {
    const JsonRecord& rec = records[i];
    INFO("record " << i);
    CHECK(rec.at("step") == std::to_string(i + 1));
    for (const char* key : {"step", "skipped", "max_in_flight", "buckets_overlapped", "buckets"}) {
      INFO(key);
      REQUIRE(rec.count(key));
      CHECK(is_json_integer(rec.at(key)));
    }
    for (const char* key : kTrainFigures) {
      INFO(key << " = " << (rec.count(key) ? rec.at(key) : "(missing)"));
      REQUIRE(rec.count(key));
      CHECK(is_json_number(rec.at(key)));  // so neither null nor inf/nan
      CHECK(std::isfinite(std::stod(rec.at(key))));
    }
    CHECK(rec.size() == std::size(kTrainFigures) + 4);  // + step, max_in_flight, buckets_overlapped, buckets
    // The last of 2 stages (it prints) holds one microbatch's activations at a time in 1F1B,
    // receives posted ahead notwithstanding.
    CHECK(rec.at("max_in_flight") == "1");
  }

  const auto files = event_files(logs);
  REQUIRE(files.size() == 1);
  const auto events = read_events(files[0]);
  REQUIRE(!events.empty());
  CHECK(events[0].file_version == "brain.Event:2");
  const auto tb = scalars(events);
  for (const char* key : kTrainFigures) {
    INFO(key);
    REQUIRE(tb.count(std::string("train/") + key));
    const auto& by_step = tb.at(std::string("train/") + key);
    CHECK(by_step.size() == 4);
    for (int step = 1; step <= 4; ++step) {
      INFO("step " << step);
      REQUIRE(by_step.count(step));
      CHECK(by_step.at(step) == Approx(std::stod(records[step - 1].at(key))).epsilon(1e-6));
    }
  }

  // TensorBoard's own reader (PyPI tensorboard: EventAccumulator, which checks the record CRCs)
  // finds the same scalars at the same steps as metrics.jsonl.
  const std::string check = R"py(
import json, math, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
logs, keys = sys.argv[1], sys.argv[2].split(",")
events = EventAccumulator(logs, size_guidance={"scalars": 0})
events.Reload()
records = [json.loads(line) for line in open(logs + "/metrics.jsonl")]
for key in keys:
    got = [(e.step, e.value) for e in events.Scalars("train/" + key)]
    want = [(r["step"], r[key]) for r in records]
    assert [s for s, _ in got] == [s for s, _ in want], (key, got, want)
    assert all(math.isclose(g, w, rel_tol=1e-6, abs_tol=1e-12) for (_, g), (_, w) in zip(got, want)), (key, got, want)
print("tensorboard read", len(keys), "scalars at", len(records), "steps")
)py";
  testing::write_file(dir.file("check_tb.py"), check);
  std::string keys;
  for (const char* key : kTrainFigures) keys += (keys.empty() ? "" : ",") + std::string(key);
  auto real = testing::run(testing::python() + " " + dir.file("check_tb.py") + " " + logs + " " + keys, 120);
  INFO(real.output);
  CHECK(real.code == 0);
  CHECK(real.output.find("tensorboard read " + std::to_string(std::size(kTrainFigures)) + " scalars at 4 steps") !=
        std::string::npos);
}

TEST_CASE("StepLogger writes non-finite figures as null (NaN in TensorBoard) and eval records", "[metrics][mp]") {
  testing::TempDir dir;
  REQUIRE(testing::launch_workers("step_logger", 1, {{"TEST_OUT", dir.path}}) == 0);

  const auto records = read_jsonl(dir.file("metrics.jsonl"));
  REQUIRE(records.size() == 2);
  CHECK(records[0].at("step") == "5");
  CHECK(records[0].at("loss") == "null");
  CHECK(records[0].at("grad_norm") == "2.0");  // a double, at full precision
  CHECK(records[0].at("skipped") == "1");
  CHECK(records[0].at("buckets") == "4");
  CHECK(records[1] == JsonRecord{{"step", "5"}, {"eval_loss", "2.0"}, {"eval_ppl", "7.38905609893065"}});

  const auto files = event_files(dir.path);
  REQUIRE(files.size() == 1);
  const auto tb = scalars(read_events(files[0]));
  CHECK(std::isnan(tb.at("train/loss").at(5)));
  CHECK(tb.at("train/comm_s").at(5) == 0.15f);
  CHECK(tb.at("train/skipped").at(5) == 1.0f);
  CHECK(tb.at("eval/loss").at(5) == 2.0f);
  CHECK(tb.at("eval/perplexity").at(5) == static_cast<float>(std::exp(2.0)));
}

TEST_CASE("throughput and MFU match a hand computation", "[metrics]") {
  ModelConfig m;  // the model of test_flops.cpp: 9984 + 768 = 10752 FLOPs per token
  m.layers = 2, m.hidden = 8, m.heads = 2, m.ffn = 32, m.vocab_size = 16, m.seq_len = 4;
  // 1024 tokens in 0.5 s = 2048 tokens/s; 10752 * 2048 / 4 ranks = 5.505024e6 FLOP/s per rank.
  const auto t = metrics::throughput(m, 1024, 0.5, 4, 1e-5);
  CHECK(t.tokens_per_s == Approx(2048));
  CHECK(t.tflops_per_rank == Approx(5.505024e-6));
  CHECK(t.mfu == Approx(0.5505024));
  CHECK(metrics::throughput(m, 1024, 0.5, 4, 0).mfu == 0);  // peak unknown: not reported
  CHECK(metrics::throughput(m, 1024, 0, 4, 1e-5).tokens_per_s == 0);  // no time measured
}
