#!/usr/bin/env bash
# Builds llama.cpp's `llama-bench` and `llama-server` (or the targets in $TARGETS) on this machine (Release, CPU only, -march=native) from the
# llama.cpp that PyPI's llama-cpp-python sdist vendors, into $DIR (default /tmp/llamacpp).
# Needs gcc/g++ and network access to PyPI; installs cmake, ninja and scikit-build-core with pip
# (scikit-build-core only so that `pip download` can read the sdist's metadata without building
# its build dependencies from source). Prints the path of each binary.
set -euo pipefail
DIR=${1:-/tmp/llamacpp}
JOBS=${JOBS:-$(nproc)}
mkdir -p "$DIR" && cd "$DIR"
python3 -m pip install --quiet cmake ninja scikit-build-core
if ! ls llama_cpp_python-*.tar.gz >/dev/null 2>&1; then
    python3 -m pip download llama-cpp-python==0.3.36 --no-deps --no-binary :all: --no-build-isolation -d .
fi
SDIST=$(ls llama_cpp_python-*.tar.gz | head -1)
SRC=${SDIST%.tar.gz}
[ -d "$SRC" ] || tar xzf "$SDIST"
cd "$SRC/vendor/llama.cpp"
cmake -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DGGML_OPENMP=ON \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=ON >&2
TARGETS=${TARGETS:-llama-bench llama-server}
# shellcheck disable=SC2086
cmake --build build --target $TARGETS -j "$JOBS" >&2
for t in $TARGETS; do echo "$PWD/build/bin/$t"; done
