#!/usr/bin/env bash
# Installs every build and test dependency from Debian packages, then configures and builds tandem
# into build/. CUDA parts build when nvcc is found (PATH or /usr/local/cuda); nothing fails without it.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake ninja-build ccache pkg-config git
  libboost-dev libboost-filesystem-dev   # Boost.DLL (header-only with std::filesystem), Asio, Beast
  libyaml-cpp-dev rapidjson-dev libspdlog-dev libfmt-dev libgtest-dev libpcre2-dev
  python3
)
# Node.js runs the llama.cpp oracle of the GGUF tests (tests/oracle); a newer node already on PATH is kept.
command -v node >/dev/null || packages+=(nodejs npm)
# TANDEM_FUZZ=1: also clang with libFuzzer and the sanitizer runtimes (Debian ships them in
# libclang-rt-<version>-dev, which clang only recommends), and the fuzz build in build-fuzz/.
if [[ ${TANDEM_FUZZ:-0} == 1 ]]; then packages+=(clang); fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [[ $(id -u) -ne 0 ]] && sudo="sudo"
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if [[ ${TANDEM_FUZZ:-0} == 1 ]]; then
  clang_major=$(clang++ -dumpversion | cut -d. -f1)
  if ! dpkg-query -W -f='${Status}' "libclang-rt-$clang_major-dev" 2>/dev/null | grep -q "install ok installed"; then
    sudo=""
    [[ $(id -u) -ne 0 ]] && sudo="sudo"
    echo "setup: installing libclang-rt-$clang_major-dev"
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "libclang-rt-$clang_major-dev"
  fi
fi

if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi

# The llama.cpp oracle (tests/formats/gguf/oracle): node-llama-cpp's prebuilt x64 CPU build, pinned by
# tests/oracle/package-lock.json; --omit=optional skips its CUDA/Vulkan/arm variants (~85 MB, ~20 s).
if command -v npm >/dev/null && [[ ! tests/oracle/node_modules/.package-lock.json -nt tests/oracle/package-lock.json ]]; then
  (cd tests/oracle && npm ci --omit=optional --ignore-scripts --no-audit --no-fund --loglevel=error) ||
    echo "setup: warning: could not install the llama.cpp oracle; the GGUF oracle tests will fail (TANDEM_SKIP_ORACLE=1 skips them)"
fi
# The end-to-end test's client (tests/e2e): the official openai npm package (one package, ~12 MB, ~5 s).
if command -v npm >/dev/null && [[ ! tests/e2e/node_modules/.package-lock.json -nt tests/e2e/package-lock.json ]]; then
  (cd tests/e2e && npm ci --no-audit --no-fund --loglevel=error) ||
    echo "setup: warning: could not install the openai client; the e2e.openai_client test will fail"
fi

build_type=${TANDEM_BUILD_TYPE:-Release}
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE="$build_type" ${TANDEM_CMAKE_ARGS:-}
cmake --build build -j "$(nproc)"
echo "setup: built build/bin/tandem"
if [[ ${TANDEM_FUZZ:-0} == 1 ]]; then
  scripts/fuzz.sh --build-only
  echo "setup: built the fuzz targets in build-fuzz/bin"
fi
