// The base of every error a user causes with their input: a config (ConfigError), launcher
// variables (distributed::JobEnvError), data, tokenizer or checkpoint files (data::DataError). The CLI
// catches this one type and turns it into a message and exit code 2.
#pragma once

#include <stdexcept>

namespace trainer {

struct BadInput : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace trainer
