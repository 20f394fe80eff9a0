// Config loading and validation: strict YAML, overrides, and the bad-config table. Every bad
// config must exit 2 from `trainer check-config` (no process group is ever built) with a
// message naming the key.
#include "catch_torch.hpp"

#include "config/config.hpp"
#include "helpers.hpp"

using namespace trainer;

TEST_CASE("tiny config loads with the documented defaults and layout", "[config]") {
  Config cfg = load_config(testing::source_dir() + "/configs/tiny.yaml");
  CHECK(cfg.parallel.dp == 2);
  CHECK(cfg.parallel.pp == 2);
  CHECK(cfg.parallel.tp == 2);
  CHECK(cfg.model.layers == 4);
  CHECK(cfg.optim.beta2 == Approx(0.95));  // default, not in the file
  CHECK(num_microbatches(cfg) == 4);       // 16 / (2 * 2)
  CHECK_NOTHROW(validate(cfg, 8));
}

TEST_CASE("overrides replace values and are type-checked", "[config]") {
  const std::string path = testing::source_dir() + "/configs/tiny.yaml";
  Config cfg = load_config(path, {"parallel.dp=1", "model.norm=rmsnorm", "optim.lr=0.5", "parallel.stage_layers=[1,3]"});
  CHECK(cfg.parallel.dp == 1);
  CHECK(cfg.model.norm == Norm::RmsNorm);
  CHECK(name_of(cfg.model.norm) == "rmsnorm");
  CHECK(cfg.optim.lr == Approx(0.5));
  CHECK((cfg.parallel.stage_layers == std::vector<int>{1, 3}));
  CHECK_THROWS_WITH(load_config(path, {"parallel.dp=two"}), Catch::Contains("parallel.dp") && Catch::Contains("integer"));
  CHECK_THROWS_WITH(load_config(path, {"parallel.depth=2"}), Catch::Contains("unknown key 'parallel.depth'"));
  CHECK_THROWS_WITH(load_config(path, {"nonsense"}), Catch::Contains("section.key=value"));
}

TEST_CASE("padded vocab is a multiple of divisible_by x tp", "[config]") {
  ModelConfig m;
  m.vocab_size = 50257;
  m.vocab_divisible_by = 128;
  CHECK(padded_vocab_size(m, 1) == 50304);
  CHECK(padded_vocab_size(m, 8) == 51200);
  CHECK(padded_vocab_size(m, 8) % (128 * 8) == 0);
}

TEST_CASE("every config key is documented with type and default", "[config]") {
  auto keys = config_keys();
  CHECK(keys.size() >= 50);
  for (const auto& k : keys) {
    CHECK(!k.help.empty());
    CHECK(!k.type.empty());
  }
  // The key table in docs/config.md is `trainer config-keys`' output: every row as the schema
  // prints it (name, type, default and meaning), so a changed default or a new key fails here.
  const std::string table = testing::read_file(testing::source_dir() + "/docs/config.md");
  for (const auto& k : keys) {
    const std::string row = "| `" + k.key + "` | " + k.type + " | `" + k.default_value + "` | " + k.help + " |\n";
    INFO(row);
    CHECK(table.find(row) != std::string::npos);
  }
}

namespace {

struct BadCase {
  const char* name;
  std::string yaml;                 // appended to a valid base config
  std::vector<std::string> sets;    // --set overrides
  int world;                        // --world-size for check-config (0 = not checked)
  std::vector<std::string> expect;  // substrings of the message
};

const char* kBase = R"(model:
  layers: 4
  hidden: 64
  heads: 4
  ffn: 256
parallel:
  dp: 1
  pp: 1
  tp: 1
  micro_batch_size: 2
train:
  steps: 2
  global_batch_size: 8
)";

}  // namespace

TEST_CASE("bad configs exit 2 naming key - value and fix", "[config][cli]") {
  const std::vector<BadCase> cases = {
      {"world size mismatch", "", {"parallel.dp=2"}, 4, {"dp*cp*pp*tp = 2", "4 processes", "fix:"}},
      {"heads not divisible by tp", "", {"parallel.tp=3", "model.ffn=255", "model.heads=4"}, 0, {"model.heads", "parallel.tp = 3"}},
      {"ffn not divisible by tp", "", {"parallel.tp=2", "model.ffn=255"}, 0, {"model.ffn", "255", "tp"}},
      {"fewer layers than stages", "", {"parallel.pp=8"}, 0, {"model.layers", "fewer layers than pipeline stages"}},
      {"global batch not divisible", "", {"train.global_batch_size=7"}, 0, {"train.global_batch_size", "7", "micro_batch_size x dp"}},
      {"interleaved with m % pp != 0", "", {"parallel.pp=2", "parallel.schedule=interleaved-1f1b", "parallel.virtual_stages=2", "train.global_batch_size=6"}, 0, {"interleaved-1f1b", "multiple of pp"}},
      {"non-positive size", "", {"model.hidden=0"}, 0, {"model.hidden", "must be positive"}},
      {"negative micro batch", "", {"parallel.micro_batch_size=-2"}, 0, {"parallel.micro_batch_size", "must be positive"}},
      {"missing data file", "", {"data.source=tokens", "data.path=/nonexistent/tokens.bin"}, 0, {"data.path", "/nonexistent/tokens.bin", "does not exist"}},
      {"unknown backend", "", {"runtime.backend=mpi"}, 0, {"runtime.backend", "mpi", "gloo"}},
      {"unknown device", "", {"runtime.device=tpu"}, 0, {"runtime.device", "tpu", "cpu"}},
      {"unknown key in file", "optim:\n  learning_rate: 0.1\n", {}, 0, {"unknown key 'optim.learning_rate'", ":15", "lr"}},
      {"unknown section", "trainer:\n  x: 1\n", {}, 0, {"unknown section 'trainer'", ":14"}},
      {"wrong type in file", "runtime:\n  seed: abc\n", {}, 0, {"runtime.seed", "integer", "'abc'", ":15"}},
      {"bool expected", "runtime:\n  tf32: maybe\n", {}, 0, {"runtime.tf32", "true or false"}},
      {"key given twice", "checkpoint:\n  interval: 1\n  interval: 2\n", {}, 0, {"key 'checkpoint.interval' is given twice", ":16", "first at", ":15"}},
      {"section given twice", "model:\n  layers: 2\n", {}, 0, {"key 'model' is given twice", ":14", "first at", ":1)"}},
      {"hidden not divisible by heads", "", {"model.hidden=66"}, 0, {"model.hidden", "model.heads"}},
      {"stage_layers not summing", "", {"parallel.pp=2", "parallel.stage_layers=[1,2]"}, 0, {"parallel.stage_layers", "adds up to 3"}},
      {"virtual stages without interleaving", "", {"parallel.virtual_stages=2"}, 0, {"parallel.virtual_stages", "interleaved-1f1b"}},
      {"fp16 precision", "", {"runtime.precision=fp16"}, 0, {"runtime.precision", "'fp16'", "fp32, bf16"}},
      {"fp8 precision", "", {"runtime.precision=fp8"}, 0, {"runtime.precision", "'fp8'", "fp32, bf16"}},
      {"bf16 main grads of an fp32 model", "", {"optim.main_grad_dtype=bf16"}, 0, {"optim.main_grad_dtype", "runtime.precision=bf16"}},
      {"fp32 residual of an fp32 model", "", {"runtime.fp32_residual=true"}, 0, {"runtime.fp32_residual", "runtime.precision=bf16"}},
      {"zero stage 4", "", {"optim.zero_stage=4"}, 0, {"optim.zero_stage", "use one of: 0, 1, 2, 3"}},
      {"zero stage 3 without data parallelism", "", {"optim.zero_stage=3"}, 0, {"optim.zero_stage", "parallel.dp = 1", "raise parallel.dp"}},
      {"sequence parallel with indivisible seq", "", {"parallel.tp=2", "parallel.sequence_parallel=true", "model.seq_len=33"}, 0, {"model.seq_len", "sequence parallelism"}},
      {"cp with seq_len not divisible by 2 cp", "", {"parallel.cp=4", "model.seq_len=36"}, 0, {"model.seq_len", "36", "2 x parallel.cp = 8", "multiple of 8"}},
      {"cp that does not divide the world", "", {"parallel.cp=2", "parallel.dp=2"}, 6, {"dp*cp*pp*tp = 4", "6 processes", "cp=2"}},
      {"cp with non-positive size", "", {"parallel.cp=0"}, 0, {"parallel.cp", "must be positive"}},
      {"cp with dropout", "", {"parallel.cp=2", "model.dropout=0.1"}, 0, {"model.dropout", "context parallelism", "model.dropout=0"}},
      {"cp with sequence parallel and seq/cp not divisible by tp", "", {"parallel.cp=2", "parallel.tp=4", "parallel.sequence_parallel=true", "model.seq_len=36"}, 0, {"model.seq_len", "seq_len / parallel.cp", "cp x tp = 8"}},
  };
  testing::TempDir dir;
  for (const auto& c : cases) {
    SECTION(c.name) {
      // The extra text follows the base config in the same file (its first line is line 14).
      std::string yaml = kBase;
      yaml += c.yaml;
      const std::string path = dir.file("bad.yaml");
      testing::write_file(path, yaml);
      std::vector<std::string> args = {"check-config", path};
      for (const auto& s : c.sets) args.insert(args.end(), {"--set", s});
      if (c.world) args.insert(args.end(), {"--world-size", std::to_string(c.world)});
      auto r = testing::trainer(args, 30);
      INFO(r.output);
      CHECK(r.code == 2);
      for (const auto& e : c.expect) CHECK(r.output.find(e) != std::string::npos);
    }
  }
}

TEST_CASE("train refuses a bad layout before building any process group", "[config][cli]") {
  // WORLD_SIZE=3 with rank 0 would wait forever for peers if a group were built first.
  auto r = testing::run("env RANK=0 WORLD_SIZE=3 MASTER_PORT=1 " + testing::trainer_bin() + " train " +
                        testing::source_dir() + "/configs/tiny.yaml", 20);
  INFO(r.output);
  CHECK(r.code == 2);
  CHECK(r.output.find("3 processes") != std::string::npos);
}

TEST_CASE("shipped example configs pass check-config", "[config][cli]") {
  for (const auto& [file, world] : std::vector<std::pair<std::string, int>>{
           {"tiny.yaml", 8}, {"gpt2-124m.yaml", 8}, {"llama-7b.yaml", 64}, {"llama3-8b.yaml", 8}, {"llama3-70b.yaml", 512}, {"tiny-llama.yaml", 1}}) {
    auto r = testing::trainer({"check-config", testing::source_dir() + "/configs/" + file,
                               "--world-size", std::to_string(world)}, 30);
    INFO(file << "\n" << r.output);
    CHECK(r.code == 0);
    CHECK(r.output.find("parameters:") != std::string::npos);
  }
  // Meta's published Llama 3 sizes.
  CHECK(testing::trainer({"check-config", testing::source_dir() + "/configs/llama3-8b.yaml"}, 30).output.find("parameters: 8030261248") != std::string::npos);
  CHECK(testing::trainer({"check-config", testing::source_dir() + "/configs/llama3-70b.yaml"}, 30).output.find("parameters: 70553706496") != std::string::npos);
}
