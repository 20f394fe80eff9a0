// The benchmark runs end to end on a tiny size and emits well-formed output (no timing
// assertions: the numbers are for people, see README "Benchmark").
#include "helpers.hpp"
#include "catch_torch.hpp"

TEST_CASE("bench.py --quick runs and writes a well-formed table and JSON", "[numerics][bench][mp]") {
  testing::TempDir dir;
  auto r = testing::run(testing::python() + " " + testing::source_dir() + "/bench/bench.py --quick --trainer " +
                        testing::trainer_bin() + " --out " + dir.path, 600);
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(r.output.find("+malloc") != std::string::npos);
  CHECK(r.output.find("compile") != std::string::npos);
  const std::string check =
      "import json,math,sys; d=json.load(open(sys.argv[1]));"
      "assert d['peak_tflops']['fp32'] > 0 and d['peak_tflops']['bf16'] > 0;"
      "assert all(d['peak_tflops'][t] == max(d['peak_tflops_by_engine'][t].values()) for t in ('fp32', 'bf16'));"
      "assert all(r['optimizer_s'] > 0 for c in d['cases'] for r in c['trainer']['runs']);"
      "assert [c['name'] for c in d['cases']] == ['tiny.yaml 1x1x1 fp32', 'tiny.yaml 1x1x1 bf16', 'tiny.yaml dp=2 fp32'];"
      "assert all(c[k]['median'] > 0 for c in d['cases'] for k in ('trainer', 'pytorch', 'pytorch_tuned_malloc'));"
      "assert ('pytorch_compile_skipped' in d or d['cases'][0]['pytorch_compile']['median'] > 0) and all('pytorch_compile' not in c for c in d['cases'][1:]);"
      "assert 0 < d['cases'][0]['trainer_mfu'] < 1 and 0 < d['cases'][1]['trainer_mfu'] < 1;"
      "assert d['cases'][1]['trainer_vs_fp32'] > 0 and d['cpu_bf16'];"
      "assert all(0 <= b['receive_wait'] <= b['measured'] <= 1 and abs(b['theory'] - (b['pp']-1)/(b['microbatches']+b['pp']-1)) < 1e-12 for b in d['bubble'])";
  auto valid = testing::run(testing::python() + " -c \"" + check + "\" " + dir.file("results.json"), 30);
  INFO(valid.output);
  CHECK(valid.code == 0);
  const std::string table = testing::read_file(dir.file("results.txt"));
  CHECK(table.find("schedule") != std::string::npos);
  CHECK(table.find("its fp32 tokens/s") != std::string::npos);
}
