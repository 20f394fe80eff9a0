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

// Runs a shell command with a time limit (seconds); output is captured.
Result run(const std::string& command, int timeout_s = 300);
// `trainer` with arguments (each argument shell-quoted).
Result trainer(const std::vector<std::string>& args, int timeout_s = 300);
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

// Trains configs/tiny.yaml at a layout through the built-in launcher, dumping into `dir`.
Result train_layout(int dp, int pp, int tp, const std::string& dir, const std::vector<std::string>& sets,
                    const std::vector<std::string>& extra = {});
// The same with another config file.
Result train_config_layout(const std::string& config, int dp, int pp, int tp, const std::string& dir,
                           const std::vector<std::string>& sets, const std::vector<std::string>& extra = {});
struct LossLine {
  double loss, grad_norm;
};
std::vector<LossLine> read_losses(const std::string& dir);
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
