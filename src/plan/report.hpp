// How `trainer plan` shows its predictions: a table of the best layouts that fit, the reasons
// the fastest ones that do not fit fail, and the same as one JSON object.
#pragma once

#include <string>
#include <vector>

#include "plan/plan.hpp"

namespace trainer::plan {

struct Report {
  std::string model;        // "8.03B parameters, 128256 vocab, seq 8192"
  const Hardware* hardware = nullptr;
  int gpus = 0;
  int global_batch_size = 0;
  std::vector<Prediction> predictions;  // fastest first (search order)
  int top = 5;
};

std::string as_table(const Report& r);
std::string as_json(const Report& r);
// One layout's full breakdown, as text (for --layout).
std::string breakdown(const Prediction& p);

}  // namespace trainer::plan
