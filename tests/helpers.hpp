// Shared test utilities: running the trainer binary, temporary directories, and the registry
// of worker functions that multi-process tests run in child processes.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace testing {

struct Result {
  int code = -1;
  std::string output;  // stdout and stderr together
};

// Environment variables added to a command's.
using Env = std::map<std::string, std::string>;

// Runs a shell command with a time limit (seconds); output is captured.
Result run(const std::string& command, int timeout_s = 300);
// `trainer` with arguments (each argument shell-quoted), with `env` added to the environment.
Result trainer(const std::vector<std::string>& args, int timeout_s = 300, const Env& env = {});
std::string trainer_bin();
std::string source_dir();
// The project's Python (.venv, from scripts/setup.sh) with torch and the tests' reference
// packages: torchrun, TensorBoard's event reader, safetensors.
std::string python();

// A fresh directory under /tmp removed when the object goes away.
struct TempDir {
  TempDir();
  ~TempDir();
  std::string path;
  std::string file(const std::string& name) const { return path + "/" + name; }
};
void write_file(const std::string& path, const std::string& text);
std::string read_file(const std::string& path);
// `s` as a JSON string literal (quotes, backslashes and control characters escaped).
std::string json_quoted(const std::string& s);

// Trains configs/tiny.yaml at a layout through the built-in launcher, dumping into `dir` (a
// "parallel.cp=N" among `sets` runs N times the processes).
Result train_layout(int dp, int pp, int tp, const std::string& dir, const std::vector<std::string>& sets,
                    const std::vector<std::string>& extra = {}, const Env& env = {});
// The same with another config file.
Result train_config_layout(const std::string& config, int dp, int pp, int tp, const std::string& dir,
                           const std::vector<std::string>& sets, const std::vector<std::string>& extra = {},
                           const Env& env = {});

// ---- Tolerances from a measured noise floor ----
// An equivalence test (a layout against 1x1x1, a checkpoint moved to another layout) compares
// two computations of the same run that sum in different orders, so they differ by rounding
// noise that grows over the steps. The noise is measured, not assumed: the reference run again
// in another reduction order sets the floor, and the bound is a stated multiple of it.
//
// The environment for that other order: the CPU kernels one level below those this process
// runs (AVX-512 -> AVX2, AVX2 -> SSE4.1) in ATen, oneDNN and MKL. Other vector widths split
// every GEMM and reduction differently, which is exactly what another machine's kernels do.
Env reordered_env();
// The bound for a measured floor: kNoiseMultiple times it. A floor is never taken below the
// resolution of an fp32 result (2^-23 relative), the least two orders can differ by. The
// multiple comes from measurement (2026-12-07, tiny.yaml, on AVX-512 and under the AVX2
// emulation): layouts sit at 0.3-16x the floor in fp32 (the most with tp = 2 after 4 steps,
// whose row-parallel sums reorder more than an ISA change does) and at 1-3x in bf16; 50 leaves
// 3x over the worst. A layout bug moves losses by percents, 10^3-10^5 times the floors.
constexpr double kNoiseMultiple = 50;
double noise_bound(double floor);
struct LossLine {
  double loss, grad_norm;
};
std::vector<LossLine> read_losses(const std::string& dir);
// |a - b| / |a|: the relative difference of two figures (a loss, a gradient norm).
double rel_diff(double a, double b);
// The largest relative loss difference of any step: max |a - b| / |a| (the runs must be as long).
double loss_distance(const std::vector<LossLine>& a, const std::vector<LossLine>& b);
// The eval_loss values of a metrics.jsonl, in order.
std::vector<double> eval_losses(const std::string& jsonl);
// max |a - b| / max |a|: elementwise error relative to the tensor's scale.
double max_rel_diff(const at::Tensor& a, const at::Tensor& b);
// ||a - b|| / ||a||: the error of the tensor as a whole.
double norm_rel_diff(const at::Tensor& a, const at::Tensor& b);

// Worker registry: name -> function run in a child process (returns its exit code).
using Worker = std::function<int()>;
std::map<std::string, Worker>& workers();
struct RegisterWorker {
  RegisterWorker(const std::string& name, Worker fn) { workers()[name] = std::move(fn); }
};
int run_worker(const std::string& name);

// Starts `nproc` copies of this test binary as worker `name` with the built-in launcher;
// `env` adds variables. Returns the launcher's exit code.
int launch_workers(const std::string& name, int nproc, const std::map<std::string, std::string>& env);
std::string env_or(const char* key, const std::string& fallback);

}  // namespace testing
