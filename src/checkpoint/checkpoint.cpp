#include "checkpoint/checkpoint.hpp"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <yaml-cpp/yaml.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <set>
#include <sstream>

#include "checkpoint/export.hpp"
#include "checkpoint/hf.hpp"
#include "checkpoint/shards.hpp"
#include "runtime/files.hpp"

namespace trainer::checkpoint {

namespace fs = std::filesystem;

namespace {

std::string step_name(int step) {
  std::ostringstream s;
  s << "step_" << std::setw(8) << std::setfill('0') << step;
  return s.str();
}

std::string rank_base(const std::string& dir, int rank) { return dir + "/rank" + std::to_string(rank); }

// Where this rank's optimizer shard meets one parameter: bucket `bucket`, elements [at, at + n)
// of the shard, [first, first + n) of the parameter (flattened).
struct ShardRange {
  size_t bucket;
  const model::Param& param;
  int64_t at, first, n;
};

// Calls fn(ShardRange) for every parameter range inside this rank's optimizer shard.
template <typename Fn> void for_each_shard_range(data_parallel::DataParallel& dp, Fn&& fn) {
  const auto& buckets = dp.buckets();
  for (size_t i = 0; i < buckets.size(); ++i) {
    const auto& b = buckets[i];
    data_parallel::for_each_in_shard(b, [&](const data_parallel::Segment& s, int64_t begin, int64_t n) {
      fn(ShardRange{i, *s.param, begin - b.shard_begin, begin - s.offset, n});
    });
  }
}

// For each parameter, the part inside this rank's optimizer shard of its fp32 master weights
// (saved under the parameter's name, whatever dtype the model computes in) and, given the
// optimizer, of its AdamW moments.
std::vector<Piece> shard_pieces(data_parallel::DataParallel& dp, optim::AdamW* optimizer) {
  std::vector<Piece> pieces;
  for_each_shard_range(dp, [&](const ShardRange& r) {
    const std::string& name = r.param.info.name;
    auto piece = [&](const std::string& key, const at::Tensor& flat) {
      pieces.push_back(range_piece(r.param, key, r.first, r.first + r.n, flat.narrow(0, r.at, r.n)));
    };
    piece(name, dp.buckets()[r.bucket].main_params);
    if (!optimizer) return;
    piece(name + ".exp_avg", optimizer->exp_avg()[r.bucket]);
    piece(name + ".exp_avg_sq", optimizer->exp_avg_sq()[r.bucket]);
  });
  return pieces;
}

// The saved full tensor in this run's full shape: the vocab padding depends on tp, and rows
// beyond the saved ones are padding (zero).
at::Tensor in_full_shape(const at::Tensor& saved, const model::ParamInfo& info) {
  if (saved.sizes().vec() == info.full_shape) return saved;
  at::Tensor full = at::zeros(info.full_shape, saved.options());
  const int64_t rows = std::min(full.size(0), saved.size(0));
  full.narrow(0, 0, rows).copy_(saved.narrow(0, 0, rows));
  return full;
}

// The saved model must be the run's in every model key (vocab padding aside). Loading weights
// only (checkpoint.init_from), dropout, init_std and, with RoPE (no position table), seq_len
// may differ too.
void check_same_model(const ModelConfig& saved, const Config& cfg, const std::string& where, bool weights_only) {
  Config saved_cfg, run_cfg = cfg;
  saved_cfg.model = saved;
  saved_cfg.model.kv_heads = kv_heads_of(saved);  // 0 means heads: compare what is in effect
  run_cfg.model.kv_heads = kv_heads_of(cfg.model);
  std::istringstream a(to_yaml(saved_cfg)), b(to_yaml(run_cfg));
  std::string la, lb, section;
  std::set<std::string> free = {"vocab_divisible_by"};
  if (weights_only) free.insert({"dropout", "init_std"});
  if (weights_only && cfg.model.positions == Positions::Rope) free.insert("seq_len");
  while (std::getline(a, la) && std::getline(b, lb)) {
    if (la.rfind("  ", 0) != 0) section = la;
    if (section != "model:" || la == lb) continue;
    const std::string key = la.substr(2, la.find(':') - 2);
    if (free.count(key)) continue;
    throw ConfigError(where + " holds a different model: model." + key + " is" + la.substr(la.find(':') + 1) +
                      " there but" + lb.substr(lb.find(':') + 1) + " in this run; use the same model config "
                      "(--set model." + key + "=...) or another checkpoint");
  }
}

void check_same_model(const std::string& dir, const Config& cfg, bool weights_only = false) {
  if (!fs::is_directory(dir)) throw std::runtime_error("checkpoint directory " + dir + " does not exist");
  check_same_model(load_config(dir + "/config.yaml").model, cfg, "checkpoint " + dir + "/config.yaml", weights_only);
}

}  // namespace

std::optional<std::string> latest(const std::string& root) {
  std::ifstream in(root + "/latest");
  std::string name;
  if (!(in >> name)) return std::nullopt;
  return root + "/" + name;
}

void remove_partial_saves(const std::string& root) {
  if (!fs::is_directory(root)) return;
  for (const auto& entry : fs::directory_iterator(root))
    if (entry.is_directory() && entry.path().extension() == ".tmp") fs::remove_all(entry.path());
}

std::string save(const Config& cfg, distributed::Comm& comm, optim::AdamW& optimizer, data_parallel::DataParallel& dp,
                 const TrainState& state) {
  const std::string root = cfg.checkpoint.dir;
  const std::string final_dir = root + "/" + step_name(state.step);
  const std::string tmp_dir = final_dir + ".tmp";
  if (comm.rank() == 0) {
    fs::create_directories(root);
    fs::remove_all(tmp_dir);
    fs::create_directories(tmp_dir);
  }
  distributed::barrier(comm.world());
  write_pieces(rank_base(tmp_dir, comm.rank()), shard_pieces(dp, &optimizer));
  distributed::barrier(comm.world());  // every shard is on disk
  if (comm.rank() == 0) {
    std::ostringstream meta;
    meta << "step: " << state.step << "\nskipped: " << state.skipped << "\nconsumed_samples: "
         << state.consumed_samples << "\nadam_steps: " << optimizer.steps_taken() << "\nworld_size: "
         << comm.grid().world() << "\ndp: " << cfg.parallel.dp << "\npp: " << cfg.parallel.pp
         << "\ntp: " << cfg.parallel.tp << "\ncp: " << cfg.parallel.cp << "\nzero_stage: " << name_of(cfg.optim.zero_stage) << "\n";
    runtime::write_file_atomic(tmp_dir + "/meta.yaml", meta.str());
    runtime::write_file_atomic(tmp_dir + "/config.yaml", to_yaml(cfg));
    fs::remove_all(final_dir);
    runtime::publish(tmp_dir, final_dir);
    runtime::write_file_atomic(root + "/latest", step_name(state.step) + "\n");
    // Keep the newest checkpoint.keep_last step directories.
    std::vector<fs::path> steps;
    for (const auto& e : fs::directory_iterator(root))
      if (e.is_directory() && e.path().filename().string().rfind("step_", 0) == 0 && e.path().extension() != ".tmp")
        steps.push_back(e.path());
    std::sort(steps.begin(), steps.end());
    for (size_t i = 0; i + cfg.checkpoint.keep_last < steps.size(); ++i) fs::remove_all(steps[i]);
  }
  distributed::barrier(comm.world());
  return final_dir;
}

// Full tensors of `names` from the checkpoint, after checking the model matches.
std::map<std::string, at::Tensor> load_full(const std::string& dir, const Config& cfg,
                                            const std::set<std::string>& names) {
  check_same_model(dir, cfg);
  return assemble(read_all_pieces(dir), &names);
}

namespace {

// This rank's part of the full tensor `name` (flattened), for parameter `p` at this layout.
at::Tensor local_flat(const std::map<std::string, at::Tensor>& full, const std::string& dir,
                      const std::string& name, const model::Param& p) {
  auto it = full.find(name);
  if (it == full.end()) throw std::runtime_error("checkpoint " + dir + " has no tensor '" + name + "'");
  at::Tensor t = in_full_shape(it->second, p.info);
  if (p.info.shard_dim >= 0) t = t.narrow(p.info.shard_dim, p.info.shard_offset, p.tensor.size(p.info.shard_dim));
  return t.reshape({-1});
}

// Every parameter takes its part of the full tensors (rounded to the model's dtype). With `dp`
// the fp32 master weights of this rank's shard take theirs, and the parameters follow from them
// as after an optimizer step (under ZeRO-3 only the shard a rank keeps).
void copy_params(const std::map<std::string, at::Tensor>& full, const std::string& dir,
                 std::vector<model::Param>& params, data_parallel::DataParallel* dp = nullptr) {
  at::NoGradGuard no_grad;
  if (!dp) {
    for (auto& p : params) p.tensor.copy_(local_flat(full, dir, p.info.name, p).view(p.tensor.sizes()));
    return;
  }
  for (auto& b : dp->buckets())
    data_parallel::for_each_in_shard(b, [&](const data_parallel::Segment& s, int64_t begin, int64_t n) {
      b.main_params.narrow(0, begin - b.shard_begin, n)
          .copy_(local_flat(full, dir, s.param->info.name, *s.param).narrow(0, begin - s.offset, n));
    });
  dp->publish_params();
}

// Every parameter (and master weight, with `dp`) takes its part of its full tensor in the
// checkpoint `dir`.
void copy_params_from(const std::string& dir, std::vector<model::Param>& params, data_parallel::DataParallel* dp) {
  std::set<std::string> names;
  for (const auto& p : params) names.insert(p.info.name);
  copy_params(assemble(read_all_pieces(dir), &names), dir, params, dp);
}

}  // namespace

void load_weights(const std::string& source, const Config& cfg, std::vector<model::Param>& params,
                  data_parallel::DataParallel* dp) {
  if (is_hf_dir(source)) {
    const HfModel hf = read_hf(source);
    check_same_model(hf.model, cfg, "Hugging Face model " + source, true);
    copy_params(hf.tensors, source, params, dp);
    return;
  }
  const std::string dir = resolve_checkpoint(source);
  check_same_model(dir, cfg, true);
  copy_params_from(dir, params, dp);
}

void load_params(const std::string& dir, const Config& cfg, std::vector<model::Param>& params) {
  check_same_model(dir, cfg);
  copy_params_from(dir, params, nullptr);
}

std::vector<Piece> dump_pieces(data_parallel::DataParallel& dp) {
  std::vector<Piece> pieces = shard_pieces(dp, nullptr);
  for_each_shard_range(dp, [&](const ShardRange& r) {
    pieces.push_back(range_piece(r.param, r.param.info.name + ".grad", r.first, r.first + r.n,
                                 dp.buckets()[r.bucket].shard_grads().narrow(0, r.at, r.n)));
  });
  return pieces;
}

TrainState load(const std::string& dir, const Config& cfg, std::vector<model::Param>& params,
                optim::AdamW& optimizer, data_parallel::DataParallel& dp) {
  YAML::Node meta;
  try {
    meta = YAML::LoadFile(dir + "/meta.yaml");
  } catch (const std::exception& e) {
    throw std::runtime_error("cannot read " + dir + "/meta.yaml: " + e.what());
  }
  std::set<std::string> names;
  for (const auto& p : params)
    for (const char* suffix : {"", ".exp_avg", ".exp_avg_sq"}) names.insert(p.info.name + suffix);
  const auto full = load_full(dir, cfg, names);
  copy_params(full, dir, params, &dp);
  // The moments: the part of each parameter inside this rank's optimizer shard.
  for_each_shard_range(dp, [&](const ShardRange& r) {
    for (auto [moment, key] : {std::pair{&optimizer.exp_avg(), ".exp_avg"}, {&optimizer.exp_avg_sq(), ".exp_avg_sq"}})
      (*moment)[r.bucket].narrow(0, r.at, r.n).copy_(
          local_flat(full, dir, r.param.info.name + key, r.param).narrow(0, r.first, r.n));
  });
  optimizer.set_steps_taken(meta["adam_steps"].as<int>());
  TrainState state;
  state.step = meta["step"].as<int>();
  state.skipped = meta["skipped"].as<int>();
  state.consumed_samples = meta["consumed_samples"].as<std::int64_t>();
  return state;
}

}  // namespace trainer::checkpoint
