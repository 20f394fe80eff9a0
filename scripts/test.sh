#!/usr/bin/env bash
# Sets up if needed, then runs every test (unit and multi-process) through CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
WITH_TEST_DEPS=1 scripts/setup.sh
cd build
# Multi-process tests start up to 8 processes each: run tests one at a time on small machines.
ctest --output-on-failure --timeout 600 -j "${TEST_JOBS:-1}" "$@"
