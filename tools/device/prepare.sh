#!/usr/bin/env bash
# On this (2-core) machine, before the first device run of a session: fills the ignored folder .dev/
# with what the GPU machine lacks to build tandem itself (RapidJSON and pcre2.h from this machine's
# Debian packages) and with the llama.cpp anchors (../shared/anchors). Then carry .dev/sysroot,
# .dev/anchors and the tools/device scripts travel with the checkout:
#   run(command="bash tools/device/build.sh && bash tools/device/gpu_tests.sh test_cuda_backend ...",
#       carry=[".dev/sysroot", ".dev/anchors"])
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .dev/sysroot/include
cp -r /usr/include/rapidjson .dev/sysroot/include/
cp /usr/include/pcre2.h .dev/sysroot/include/
[[ -d ../shared/anchors ]] && { rm -rf .dev/anchors; cp -r ../shared/anchors .dev/anchors; }
du -sh .dev/sysroot .dev/anchors 2>/dev/null
