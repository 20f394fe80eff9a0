// Training on prepared data: the same global batches at every layout, epochs that visit every
// window once, evaluation on the validation split, and exact resume mid-epoch.
#include <ATen/ATen.h>

#include <set>

#include "config/config.hpp"
#include "data/batches.hpp"
#include "helpers.hpp"
#include "catch_torch.hpp"

namespace {

// README.md and LICENSE as two documents, byte-level: the first for training, the second for
// validation.
std::vector<std::string> prepared(const testing::TempDir& dir) {
  auto r = testing::trainer({"prepare-data", "--input", testing::source_dir() + "/README.md",
                             testing::source_dir() + "/LICENSE", "--tokenizer", "byte", "--append-eod",
                             "--val-fraction", "0.5", "--output", dir.file("text")});
  INFO(r.output);
  REQUIRE(r.code == 0);
  return {"data.source=indexed", "data.path=" + dir.file("text_train"), "data.valid_path=" + dir.file("text_val"),
          "model.vocab_size=257"};
}

}  // namespace

TEST_CASE("windows of an indexed dataset: a permutation per epoch, and slices agree", "[loader]") {
  testing::TempDir dir;
  auto sets = prepared(dir);
  sets.push_back("model.seq_len=256");
  trainer::Config cfg = trainer::load_config(testing::source_dir() + "/configs/tiny.yaml", sets);
  auto src = trainer::data::make_source(cfg);
  at::Tensor whole = src->samples(0, 16);
  CHECK(at::equal(whole, at::cat({src->samples(0, 5), src->samples(5, 11)})));
  // One epoch visits every window exactly once: windows start at multiples of seq_len and the
  // first token of window w is the last token of window w - 1.
  const std::int64_t tokens = at::numel(src->samples(0, 1));
  (void)tokens;
  std::set<std::vector<int64_t>> seen;
  int64_t n = 0;
  for (;; ++n) {
    at::Tensor s = src->samples(n, 1)[0];
    std::vector<int64_t> v(s.data_ptr<int64_t>(), s.data_ptr<int64_t>() + s.numel());
    if (!seen.insert(v).second) break;  // the first repeat starts the next epoch
  }
  CHECK(n > 10);
  CHECK(!at::equal(src->samples(0, 4), src->samples(n, 4)));  // the next epoch is reshuffled
}

TEST_CASE("training on an indexed dataset is layout-independent - eval included", "[numerics][loader][mp]") {
  testing::TempDir dir;
  auto sets = prepared(dir);
  sets.insert(sets.end(), {"train.steps=6", "train.eval_interval=3", "train.eval_iters=2"});
  // 1x1x1, the same again in another reduction order (the noise floor, tests/helpers.hpp), 2x2x2.
  struct Run {
    std::vector<testing::LossLine> losses;
    std::vector<double> evals;
  };
  auto run = [&](int n, const std::string& name, const testing::Env& env = {}) {
    testing::TempDir logs;
    auto s = sets;
    s.push_back("logging.dir=" + logs.path);
    auto r = testing::train_layout(n, n, n, dir.file(name), s, {}, env);
    INFO(r.output);
    REQUIRE(r.code == 0);
    return Run{testing::read_losses(dir.file(name)), testing::eval_losses(testing::read_file(logs.file("metrics.jsonl")))};
  };
  const Run one = run(1, "d1"), reordered = run(1, "d1r", testing::reordered_env()), eight = run(2, "d8");
  REQUIRE(one.losses.size() == 6);
  REQUIRE(one.evals.size() == 2);  // steps 3 and 6
  REQUIRE(reordered.evals.size() == 2);
  REQUIRE(eight.evals.size() == 2);
  const double floor = testing::loss_distance(one.losses, reordered.losses);
  INFO("loss floor " << floor);
  CHECK(testing::loss_distance(one.losses, eight.losses) <= testing::noise_bound(floor));
  for (size_t i = 0; i < 2; ++i) {
    const double eval_floor = testing::rel_diff(one.evals[i], reordered.evals[i]);
    INFO("eval " << i << " floor " << eval_floor);
    CHECK(testing::rel_diff(one.evals[i], eight.evals[i]) <= testing::noise_bound(eval_floor));
  }
}

TEST_CASE("resume mid-epoch continues the same sample sequence", "[loader][checkpoint][mp]") {
  testing::TempDir dir;
  auto sets = prepared(dir);
  // A small epoch (README.md / 257 tokens per window ~ tens of windows) that the run crosses.
  sets.insert(sets.end(), {"train.steps=12", "model.seq_len=256", "train.global_batch_size=8",
                           "parallel.micro_batch_size=2"});
  REQUIRE(testing::train_layout(1, 2, 1, dir.file("straight"), sets).code == 0);
  auto with_ckpt = sets;
  with_ckpt.push_back("checkpoint.dir=" + dir.file("ckpt"));
  REQUIRE(testing::train_layout(1, 2, 1, dir.file("first"), with_ckpt, {"--exit-after", "5"}).code == 0);
  REQUIRE(testing::train_layout(1, 2, 1, dir.file("rest"), with_ckpt).code == 0);
  const auto straight = testing::read_losses(dir.file("straight"));
  const auto rest = testing::read_losses(dir.file("rest"));
  REQUIRE(straight.size() == 12);
  REQUIRE(rest.size() == 7);
  for (int i = 0; i < 7; ++i) CHECK(rest[i].loss == straight[5 + i].loss);
}

TEST_CASE("a token id outside the vocabulary is a clear error naming the file", "[loader][mp]") {
  testing::TempDir dir;
  auto sets = prepared(dir);
  sets.back() = "model.vocab_size=100";  // most lowercase letters (97..122) do not fit
  sets.push_back("train.steps=1");
  auto r = testing::train_layout(1, 1, 1, dir.file("d"), sets);
  CHECK(r.code != 0);
  CHECK(r.output.find(dir.file("text_train") + ".bin") != std::string::npos);
  CHECK(r.output.find("outside model.vocab_size 100") != std::string::npos);
}

TEST_CASE("a weighted blend of datasets gives each its share", "[loader]") {
  testing::TempDir dir;
  testing::write_file(dir.file("a.txt"), std::string(5000, 'a'));
  testing::write_file(dir.file("b.txt"), std::string(5000, 'b'));
  for (const char* name : {"a", "b"})
    REQUIRE(testing::trainer({"prepare-data", "--input", dir.file(std::string(name) + ".txt"), "--tokenizer", "byte",
                              "--output", dir.file(name)}).code == 0);
  trainer::Config cfg = trainer::load_config(
      testing::source_dir() + "/configs/tiny.yaml",
      {"data.source=indexed", "model.vocab_size=257",
       "data.paths=[{path: " + dir.file("a") + ", weight: 3}, {path: " + dir.file("b") + ", weight: 1}]"});
  REQUIRE_NOTHROW(trainer::validate(cfg, 8));
  auto src = trainer::data::make_source(cfg);
  at::Tensor s = src->samples(0, 400);
  const int64_t from_a = s.select(1, 0).eq('a').sum().item<int64_t>();
  CHECK(from_a == 300);  // exactly 3:1
  CHECK(at::equal(s.narrow(0, 100, 50), src->samples(100, 50)));  // any slice, same samples
  // Entries are checked like data.path.
  CHECK_THROWS_WITH(trainer::validate(trainer::load_config(testing::source_dir() + "/configs/tiny.yaml",
                        {"data.source=indexed", "data.paths=[{path: /nonexistent, weight: 1}]"}), 8),
                    Catch::Contains("/nonexistent.idx does not exist"));
  CHECK_THROWS_WITH(trainer::load_config(testing::source_dir() + "/configs/tiny.yaml", {"data.paths=[{file: x}]"}),
                    Catch::Contains("data.paths"));
}
