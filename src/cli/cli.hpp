// The `trainer` command line: train, check-config, launch, verify, config-keys.
#pragma once

namespace trainer::cli {

int main(int argc, char** argv);

}  // namespace trainer::cli
