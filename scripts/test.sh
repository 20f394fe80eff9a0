#!/usr/bin/env bash
# Sets up if needed, then runs every test (unit and multi-process) through CTest.
#
#   scripts/test.sh [CTEST ARGS...]     every test; no test may run past 3 minutes
#   scripts/test.sh --emulate-avx2      the numerically sensitive tests ([numerics]: equivalence,
#                                       bench, plan memory) with ATen, oneDNN and MKL capped at
#                                       AVX2, as on a CPU without AVX-512 or bf16 units
# To run the whole suite emulated, set the three variables below yourself around scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
WITH_TEST_DEPS=1 scripts/setup.sh
cd build
if [ "${1:-}" = --emulate-avx2 ]; then
  shift
  export ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2
  # One CTest entry per [numerics] test case, as in the full suite.
  ctest --output-on-failure --timeout 180 -j "${TEST_JOBS:-1}" -R "$(./trainer_tests "[numerics]" --list-test-names-only |
    sed -e '/^$/d' -e 's/[][\\.*+?^$(){}|]/\\&/g' | paste -sd'|' | sed 's/^/^(/; s/$/)$/')" "$@"
  exit
fi
# Multi-process tests start up to 8 processes each: run tests one at a time on small machines.
ctest --output-on-failure --timeout 180 -j "${TEST_JOBS:-1}" "$@"
