// Test entry point. The same binary doubles as the worker process of multi-process tests:
// a test starts copies of it with TRAINER_TEST_WORKER=<name>, and they run that worker.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdlib>
#include <iostream>

#include "helpers.hpp"

int main(int argc, char** argv) {
  if (const char* worker = std::getenv("TRAINER_TEST_WORKER")) {
    try {
      return testing::run_worker(worker);
    } catch (const std::exception& e) {
      std::cerr << "worker " << worker << " failed: " << e.what() << std::endl;
      return 1;
    }
  }
  return Catch::Session().run(argc, argv);
}
