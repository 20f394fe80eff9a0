// Bad input, everywhere, in one table: config files, command lines, launcher environments
// (torchrun and Slurm variables missing or inconsistent, a taken MASTER_PORT, an unreachable
// MASTER_ADDR), data files and checkpoints. Each row runs the real binary and asserts the exit
// code, that the message names what is wrong, and that it came within a time limit: nothing
// hangs and nothing crashes. (The parsers' fuzzing is in test_fuzz.cpp.)
#include "catch_torch.hpp"

#include <chrono>
#include <filesystem>

#include "data/indexed_dataset.hpp"
#include "distributed/launcher.hpp"
#include "helpers.hpp"

namespace fs = std::filesystem;

namespace {

struct Case {
  std::string what;
  std::string command;  // shell; {T} is the trainer binary, {D} the scratch directory, {C} tiny.yaml
  int code;             // expected exit code; -1: any non-zero
  std::vector<std::string> says;
  int seconds = 30;     // it must be over by then
};

std::string expand(std::string s, const std::string& dir) {
  const std::vector<std::pair<std::string, std::string>> vars = {
      {"{T}", testing::trainer_bin()}, {"{D}", dir}, {"{C}", testing::source_dir() + "/configs/tiny.yaml"}};
  for (const auto& [key, value] : vars)
    for (size_t at; (at = s.find(key)) != std::string::npos;) s.replace(at, key.size(), value);
  return s;
}

void write_dataset(const std::string& prefix, int documents, int length, int max_id) {
  trainer::data::IndexedDatasetWriter w(prefix + ".bin", trainer::data::TokenType::kUInt16);
  for (int d = 0; d < documents; ++d) {
    std::vector<std::int32_t> doc(length);
    for (int i = 0; i < length; ++i) doc[i] = (d * 31 + i * 7) % (max_id + 1);
    w.add_document(doc);
  }
  w.finish(prefix + ".idx");
}

}  // namespace

TEST_CASE("bad input everywhere: a table of cases, each a clear error in time", "[faults][cli][mp]") {
  testing::TempDir dir;
  const std::string one = " --set parallel.dp=1 --set parallel.pp=1 --set parallel.tp=1";
  const std::string run1 = "{T} train {C}" + one + " --set checkpoint.dir={D}/none";
  // Files the cases point at.
  testing::write_file(dir.file("unknown.yaml"), "model:\n  layerz: 2\n");
  testing::write_file(dir.file("type.yaml"), "model:\n  layers: many\n");
  testing::write_file(dir.file("syntax.yaml"), "model:\n  layers: [2\n");
  testing::write_file(dir.file("tokenizer.json"), "{\"model\": {\"type\": \"Unigram\"}}");
  testing::write_file(dir.file("empty.txt"), "");
  write_dataset(dir.file("oov"), 40, 200, 299);     // ids up to 299 against a vocabulary of 256
  write_dataset(dir.file("short"), 1, 10, 255);     // 10 tokens: not one sample of 65
  write_dataset(dir.file("cut"), 40, 200, 255);
  fs::resize_file(dir.file("cut.bin"), fs::file_size(dir.file("cut.bin")) - 2);
  const std::string data = one + " --set data.source=indexed --set model.vocab_size=256 --set data.path=";
  // A real checkpoint, then a corrupted copy of it.
  auto made = testing::run(expand(run1 + " --set train.steps=2 --set checkpoint.dir={D}/ckpt", dir.path), 120);
  REQUIRE(made.code == 0);
  fs::copy(dir.file("ckpt"), dir.file("bad_ckpt"), fs::copy_options::recursive);
  for (const auto& step : fs::directory_iterator(dir.file("bad_ckpt")))
    if (fs::is_directory(step)) fs::resize_file(step.path() / "rank0.pt", fs::file_size(step.path() / "rank0.pt") / 2);
  testing::write_file(dir.file("a_file"), "x");
  const std::string port = std::to_string(trainer::distributed::free_port());

  const std::vector<Case> cases = {
      // config files and overrides
      {"unknown key", "{T} check-config {D}/unknown.yaml", 2, {"model.layerz", "unknown.yaml"}},
      {"wrong type", "{T} check-config {D}/type.yaml", 2, {"model.layers", "many"}},
      {"YAML syntax", "{T} check-config {D}/syntax.yaml", 2, {"syntax.yaml"}},
      {"missing config", "{T} check-config {D}/nope.yaml", 2, {"nope.yaml"}},
      {"unknown --set key", "{T} check-config {C} --set model.nope=1", 2, {"model.nope"}},
      {"zero stage 3 at dp 1", "{T} train {C} --set parallel.dp=1 --set parallel.pp=1 --set parallel.tp=1 --set optim.zero_stage=3", 2,
       {"optim.zero_stage", "parallel.dp = 1"}},
      {"--set without =", "{T} check-config {C} --set model.layers", 2, {"model.layers"}},
      {"heads not divisible by tp", "{T} check-config {C} --set parallel.tp=3 --set parallel.dp=1", 2, {"model.heads", "parallel.tp"}},
      {"fewer layers than stages", "{T} check-config {C} --set parallel.pp=8 --set parallel.dp=1", 2, {"model.layers", "pipeline stages"}},
      {"world size != dp*cp*pp*tp", "env RANK=0 WORLD_SIZE=3 {T} train {C}", 2, {"dp*cp*pp*tp = 8", "3 processes"}},
      {"negative learning rate", "{T} check-config {C} --set optim.lr=-1", 2, {"optim.lr"}},
      // command lines
      {"unknown subcommand", "{T} frobnicate", 2, {"frobnicate"}},
      {"unknown option", "{T} train {C} --frobnicate", 2, {"--frobnicate"}},
      {"launch without --nproc", "{T} launch -- train {C}", 2, {"--nproc"}},
      {"launch --nproc 0", "{T} launch --nproc 0 -- train {C}", 2, {"--nproc"}},
      // more workers than the machine can hold: refused before one starts (the case that once
      // forked ~1,600 workers); which limit binds depends on the machine, so each row sets one
      {"launch --nproc beyond the open-file limit", "sh -c 'ulimit -n 64; exec {T} launch --nproc 100 -- check-config {C}'", 2,
       {"--nproc 100:", "RLIMIT_NOFILE", "at most"}, 10},
      {"launch --nproc beyond memory", "{T} launch --nproc 1000 -- check-config {C}", 2,
       {"--nproc 1000:", "MemAvailable", "plan.cpu_process_mb", "at most"}, 10},
      {"verify with a bad layout", "{T} verify {C} --layouts 2x2", 2, {"--layouts", "2x2"}},
      {"check-config without a config", "{T} check-config", 2, {"config"}},
      // launcher environments
      {"torchrun without LOCAL_RANK", "env TORCHELASTIC_RUN_ID=x RANK=0 WORLD_SIZE=1 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=1 " + run1, 2, {"LOCAL_RANK", "torchrun"}},
      {"RANK outside WORLD_SIZE", "env RANK=5 WORLD_SIZE=2 " + run1, 2, {"manual launch: rank 5", "world size 2"}},
      {"RANK without WORLD_SIZE", "env RANK=0 " + run1, 2, {"WORLD_SIZE"}},
      {"MASTER_PORT out of range", "env RANK=0 WORLD_SIZE=1 MASTER_PORT=70000 " + run1, 2, {"MASTER_PORT", "70000"}},
      {"Slurm node without tasks", "env SLURM_STEP_ID=0 SLURM_PROCID=0 SLURM_NTASKS=2 SLURM_NODEID=3 SLURM_STEP_TASKS_PER_NODE=2 " + run1, 2, {"tasks-per-node", "node 3"}},
      {"MASTER_PORT taken", testing::python() + " -c \"import socket,subprocess,sys; s=socket.socket(); s.bind(('127.0.0.1'," + port +
           ")); s.listen(); sys.exit(subprocess.call(sys.argv[1], shell=True))\" 'env RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" +
           port + " {T} train {C} --set parallel.dp=2 --set parallel.pp=1 --set parallel.tp=1 --set runtime.collective_timeout_s=5'",
       1, {"cannot join the job store at 127.0.0.1:" + port}, 20},
      {"unreachable MASTER_ADDR", "env RANK=1 WORLD_SIZE=2 MASTER_ADDR=192.0.2.1 MASTER_PORT=29999 {T} train {C} --set parallel.dp=2"
           " --set parallel.pp=1 --set parallel.tp=1 --set runtime.collective_timeout_s=5", 1, {"cannot join the job store at 192.0.2.1:29999"}, 20},
      // data files
      {"missing dataset", run1 + data + "{D}/absent", 2, {"data.path", "absent"}},
      {"token id >= vocab", run1 + data + "{D}/oov", 2, {"oov", "outside model.vocab_size 256"}},
      {"truncated .bin", run1 + data + "{D}/cut", 2, {"cut.bin"}},
      {"dataset shorter than one sample", run1 + data + "{D}/short", 2, {"short", "sample"}},
      {"prepare-data of empty input", "{T} prepare-data --input {D}/empty.txt --tokenizer byte --output {D}/out/x", 2, {"empty input"}},
      {"prepare-data into a directory that cannot exist", "{T} prepare-data --input {D}/unknown.yaml --tokenizer byte --output /proc/nope/x",
       2, {"--output /proc/nope/x", "cannot create the directory /proc/nope"}},
      {"unsupported tokenizer.json", "{T} prepare-data --input {D}/unknown.yaml --tokenizer gpt2 --tokenizer-json {D}/tokenizer.json --output {D}/out/y",
       2, {"tokenizer.json", "Unigram"}},
      // checkpoints
      {"corrupted checkpoint shard", run1 + " --set train.steps=3 --set checkpoint.dir={D}/bad_ckpt", 1, {"rank0.pt: checksum mismatch"}},
      {"checkpoint of another model", run1 + " --set train.steps=3 --set checkpoint.dir={D}/ckpt --set model.hidden=128", 2, {"different model", "hidden"}},
      {"checkpoint directory is a file", run1 + " --set train.steps=2 --set checkpoint.dir={D}/a_file/sub", 1, {"a_file"}},
      {"export of a missing checkpoint", "{T} export --checkpoint {D}/nothing --output {D}/m.safetensors", 2, {"nothing"}},
      {"import-hf of a directory that is no model", "{T} import-hf --model {D} --output {D}/out/hf", 2, {"config.json"}},
      {"eval with more windows than the data", "{T} eval --checkpoint {D}/ckpt --data {D}/short --windows 5", 2, {"--windows 5", "short"}},
      // resources: the memory pre-flight; without it, LibTorch's allocator error (no C++ backtrace)
      {"a model larger than memory", run1 + " --set model.vocab_size=2000000000", 2, {"biggest term is", "no layout of 1"}},
      {"a model larger than memory, pre-flight off", run1 + " --set model.vocab_size=2000000000 --set plan.preflight=off",
       1, {"can't allocate memory"}},
  };
  CHECK(cases.size() >= 25);
  for (const auto& c : cases) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto r = testing::run(expand(c.command, dir.path), c.seconds + 30);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    INFO(c.what << "\n$ " << expand(c.command, dir.path) << "\n" << r.output);
    if (c.code < 0) CHECK(r.code != 0);
    else CHECK(r.code == c.code);
    CHECK(seconds < c.seconds);
    CHECK(r.output.find("error") != std::string::npos);
    for (const auto& text : c.says) CHECK(r.output.find(text) != std::string::npos);
    CHECK(r.output.find("wrote ") == std::string::npos);            // no result printed for a failure
    CHECK(r.output.find("terminate called") == std::string::npos);  // no crash
    CHECK(r.output.find("frame #") == std::string::npos);           // no C++ backtrace
  }
  CHECK((!fs::exists(dir.file("out")) || fs::is_empty(dir.file("out"))));  // nothing half-written
}
