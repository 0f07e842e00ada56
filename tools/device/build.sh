#!/usr/bin/env bash
# On the device machine: configure and build tandem's CUDA tree into build-dev (16 cores, ~2–3.5 min
# cold). Arguments go to cmake --build (e.g. --target X -- -k 0). Prepared by tools/device/prepare.sh.
# The machine has Boost, fmt, spdlog, yaml-cpp, gtest; rapidjson and pcre2.h travel in .dev/sysroot.
set -e
R=$PWD/.dev/sysroot
mkdir -p $R/lib/pkgconfig
ln -sf /usr/lib/x86_64-linux-gnu/libpcre2-8.so.0 $R/lib/libpcre2-8.so
cat > $R/lib/pkgconfig/libpcre2-8.pc <<PC
prefix=$R
libdir=\${prefix}/lib
includedir=\${prefix}/include
Name: libpcre2-8
Version: 10.42
Description: PCRE2
Libs: -L\${libdir} -lpcre2-8
Cflags: -I\${includedir}
PC
export PKG_CONFIG_PATH=$R/lib/pkgconfig
if ! command -v pkg-config >/dev/null; then
  mkdir -p $R/bin
  cat > $R/bin/pkg-config <<'PK'
#!/bin/sh
# minimal pkg-config for libpcre2-8 only
for a in "$@"; do case $a in --version) echo 0.29.2; exit 0;; esac; done
case "$*" in
  *--exists*|*--print-errors*) case "$*" in *libpcre2-8*) exit 0;; *) exit 1;; esac;;
  *--modversion*) echo 10.42;;
  *--cflags*) echo "-I$R/include";;
  *--libs*) echo "-L$R/lib -lpcre2-8";;
  *--variable*) echo "";;
esac
PK
  sed -i "s|\$R|$R|g" $R/bin/pkg-config; chmod +x $R/bin/pkg-config; export PATH=$R/bin:$PATH
fi
cmake -S . -B build-dev -G Ninja -DCMAKE_BUILD_TYPE=Release -DRAPIDJSON_INCLUDE_DIR=$R/include \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DTANDEM_CUDA=ON "-DCMAKE_CXX_FLAGS=-isystem $R/include" > build-dev.configure.log 2>&1 || { tail -30 build-dev.configure.log; exit 1; }
cmake --build build-dev -j16 "$@" > build-dev.log 2>&1 || { grep -m5 -B2 -A12 "error" build-dev.log | head -80; tail -5 build-dev.log; exit 1; }
tail -1 build-dev.log
