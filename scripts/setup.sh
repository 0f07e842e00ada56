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

if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi

build_type=${TANDEM_BUILD_TYPE:-Release}
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE="$build_type" ${TANDEM_CMAKE_ARGS:-}
cmake --build build -j "$(nproc)"
echo "setup: built build/bin/tandem"
