#!/usr/bin/env bash
# Set-up on a fresh Debian 12 machine, safe to run again: installs what is missing from Debian's
# archive, puts a pinned pip `torch` (the CUDA build of LibTorch 2.x) into the project's virtual
# environment .venv/, then configures and builds trainer (Release) against that LibTorch into
# $BUILD_DIR (default: build/).
#
#   PYTHON=python3 scripts/setup.sh   build against the torch of that Python instead of .venv
#                                     (a GPU machine's own pip torch; nothing is installed)
#   WITH_TEST_DEPS=1                  also the Python packages the tests use as references
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
# Pinned to what the GPU machines this project is checked on run (torch 2.11.0 + CUDA 13.0);
# PyPI's Linux x86-64 wheel of it is built for CUDA 13.0 and brings NCCL 2.28 and cuBLAS 13.
TORCH_PIN=torch==2.11.0
TEST_PINS=(tensorboard==2.20.0 safetensors==0.7.0 numpy==2.3.5 transformers==4.57.6 tokenizers==0.22.2)
MEGATRON_WHEEL=megatron_core-0.19.2

# Debian packages, where a command or library is missing (the GPU machines have no registry but
# already have everything this needs).
need=()
command -v cmake >/dev/null || need+=(cmake)
command -v ninja >/dev/null || need+=(ninja-build)
command -v g++ >/dev/null || need+=(g++)
if [ -z "${PYTHON:-}" ]; then
  python3 -c 'import ensurepip, venv' 2>/dev/null || need+=(python3-venv)
  # oneDNN's sgemm for the CPU fp32 matmuls (see CMakeLists.txt); optional elsewhere.
  [ -e /usr/lib/x86_64-linux-gnu/libdnnl.so ] || need+=(libdnnl-dev)
fi
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${need[@]}"
fi

if [ -z "${PYTHON:-}" ]; then
  PYTHON=$PWD/.venv/bin/python
  [ -x "$PYTHON" ] || python3 -m venv .venv
  pins=("$TORCH_PIN")
  if [ "${WITH_TEST_DEPS:-0}" = 1 ]; then pins+=("${TEST_PINS[@]}"); fi
  # pip answers quickly when everything is already installed at these versions.
  "$PYTHON" -m pip install -q --disable-pip-version-check "${pins[@]}"
  # Megatron-LM's theoretical memory report, which the planner's tests run as the reference; the
  # wheel is only read (its file needs no torch), so it is fetched for any Python.
  if [ "${WITH_TEST_DEPS:-0}" = 1 ] && ! ls .venv/wheels/"$MEGATRON_WHEEL"-*.whl >/dev/null 2>&1; then
    "$PYTHON" -m pip download -q --disable-pip-version-check --no-deps --python-version 3.12 \
      --only-binary=:all: -d .venv/wheels "${MEGATRON_WHEEL/-/==}"
  fi
fi
PYTHON=$(command -v "$PYTHON")
TORCH_PREFIX=$("$PYTHON" -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null) \
  || { echo "setup: $PYTHON has no importable torch" >&2; exit 1; }

# Configuring again is cheap and picks up a changed torch or Python.
mkdir -p "$BUILD_DIR"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" \
  -DTRAINER_PYTHON="$PYTHON" ${CMAKE_ARGS:-} >"$BUILD_DIR/configure.log" 2>&1 \
  || { cat "$BUILD_DIR/configure.log" >&2; exit 1; }
grep "^-- trainer:" "$BUILD_DIR/configure.log"
# Two jobs: each LibTorch translation unit needs ~1 GB and ~25 s.
cmake --build "$BUILD_DIR" -j "${JOBS:-2}"
