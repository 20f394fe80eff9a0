#include "helpers.hpp"

#include <ATen/ATen.h>
#include <ATen/Version.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "distributed/launcher.hpp"

namespace testing {

std::string trainer_bin() { return TRAINER_BIN; }
std::string source_dir() { return TRAINER_SOURCE_DIR; }
std::string python() { return TRAINER_PYTHON; }

static std::string quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

Result run(const std::string& command, int timeout_s) {
  Result r;
  const std::string full = "timeout -k 5 " + std::to_string(timeout_s) + " " + command + " 2>&1";
  FILE* pipe = popen(full.c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) r.output.append(buf.data(), n);
  const int status = pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  return r;
}

Result trainer(const std::vector<std::string>& args, int timeout_s, const Env& env) {
  std::string cmd = env.empty() ? "" : "env";
  for (const auto& [key, value] : env) cmd += " " + quote(key + "=" + value);
  cmd += (cmd.empty() ? "" : " ") + quote(trainer_bin());
  for (const auto& a : args) cmd += " " + quote(a);
  return run(cmd, timeout_s);
}

TempDir::TempDir() {
  char tmpl[] = "/tmp/trainer-test-XXXXXX";
  path = mkdtemp(tmpl);
}
TempDir::~TempDir() { std::filesystem::remove_all(path); }

void write_file(const std::string& path, const std::string& text) { std::ofstream(path) << text; }
std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string json_quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += std::string("\\") + c;
    } else if (static_cast<unsigned char>(c) < 0x20) {  // control characters as \u00XX
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\u%04x", static_cast<unsigned>(c));
      out += hex;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

Result train_layout(int dp, int pp, int tp, const std::string& dir, const std::vector<std::string>& sets,
                    const std::vector<std::string>& extra, const Env& env) {
  return train_config_layout(source_dir() + "/configs/tiny.yaml", dp, pp, tp, dir, sets, extra, env);
}

Result train_config_layout(const std::string& config, int dp, int pp, int tp, const std::string& dir,
                           const std::vector<std::string>& sets, const std::vector<std::string>& extra,
                           const Env& env) {
  // Context parallelism comes as a set ("parallel.cp=2"): it multiplies the processes.
  int cp = 1;
  for (const auto& s : sets)
    if (s.rfind("parallel.cp=", 0) == 0) cp = std::stoi(s.substr(12));
  std::vector<std::string> args = {"launch", "--nproc", std::to_string(dp * pp * tp * cp), "--",
                                   "train", config, "--dump", dir,
                                   "--set", "parallel.dp=" + std::to_string(dp),
                                   "--set", "parallel.pp=" + std::to_string(pp),
                                   "--set", "parallel.tp=" + std::to_string(tp)};
  for (const auto& s : sets) args.insert(args.end(), {"--set", s});
  args.insert(args.end(), extra.begin(), extra.end());
  return trainer(args, 300, env);
}

Env reordered_env() {
  // at::get_cpu_capability() is what this process runs: the CPU's best, or what an inherited
  // ATEN_CPU_CAPABILITY caps it to (the AVX2 emulation of .ci/run).
  if (at::get_cpu_capability().rfind("AVX512", 0) == 0)
    return {{"ATEN_CPU_CAPABILITY", "avx2"}, {"ONEDNN_MAX_CPU_ISA", "AVX2"}, {"MKL_ENABLE_INSTRUCTIONS", "AVX2"}};
  return {{"ATEN_CPU_CAPABILITY", "default"}, {"ONEDNN_MAX_CPU_ISA", "SSE41"}, {"MKL_ENABLE_INSTRUCTIONS", "SSE4_2"}};
}

double noise_bound(double floor) { return kNoiseMultiple * std::max(floor, std::ldexp(1.0, -23)); }

std::vector<LossLine> read_losses(const std::string& dir) {
  std::vector<LossLine> out;
  std::ifstream in(dir + "/losses.txt");
  for (LossLine l; in >> l.loss >> l.grad_norm;) out.push_back(l);
  return out;
}

double rel_diff(double a, double b) { return std::abs(a - b) / std::abs(a); }

double loss_distance(const std::vector<LossLine>& a, const std::vector<LossLine>& b) {
  if (a.size() != b.size()) return INFINITY;
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, rel_diff(a[i].loss, b[i].loss));
  return worst;
}

std::vector<double> eval_losses(const std::string& jsonl) {
  std::vector<double> out;
  for (size_t at = jsonl.find("\"eval_loss\":"); at != std::string::npos; at = jsonl.find("\"eval_loss\":", at + 1))
    out.push_back(std::stod(jsonl.substr(at + 12)));
  return out;
}

double max_rel_diff(const at::Tensor& a, const at::Tensor& b) {
  const double scale = std::max(a.abs().max().item<double>(), 1e-12);
  return (a - b).abs().max().item<double>() / scale;
}

double norm_rel_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).norm().item<double>() / std::max(a.norm().item<double>(), 1e-12);
}

std::map<std::string, Worker>& workers() {
  static std::map<std::string, Worker> registry;
  return registry;
}

int run_worker(const std::string& name) {
  auto it = workers().find(name);
  if (it == workers().end()) throw std::runtime_error("no worker named " + name);
  return it->second();
}

int launch_workers(const std::string& name, int nproc, const std::map<std::string, std::string>& env) {
  trainer::distributed::LaunchOptions o;
  o.nproc = nproc;
  o.env = env;
  o.env["TRAINER_TEST_WORKER"] = name;
  return trainer::distributed::launch_local(o);
}

std::string env_or(const char* key, const std::string& fallback) {
  const char* v = std::getenv(key);
  return v ? v : fallback;
}

}  // namespace testing
