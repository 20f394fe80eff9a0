// `trainer`: everything lives in the library; see src/cli/cli.cpp for the subcommands.
#include "cli/cli.hpp"

int main(int argc, char** argv) { return trainer::cli::main(argc, argv); }
