#!/usr/bin/env bash
# One-time setup on Debian 12: installs what is missing from Debian's archive, then configures
# and builds trainer (Release) into $BUILD_DIR (default: build/). Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}

packages=(cmake g++ ninja-build libtorch-dev libgloo-dev libdnnl-dev libyaml-cpp-dev libspdlog-dev libcli11-dev
          catch2 libopenblas0-openmp)
# The test suite also runs trainer under Debian's real torchrun; trainer itself never needs Python.
if [ "${WITH_TEST_DEPS:-0}" = 1 ]; then packages+=(python3-torch); fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release ${CMAKE_ARGS:-}
fi
# Two jobs: each LibTorch translation unit needs ~1 GB and ~20 s.
cmake --build "$BUILD_DIR" -j "${JOBS:-2}"
