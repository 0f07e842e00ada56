#!/usr/bin/env bash
# On the device machine: why a kernel runs below its rate. ncu's speed-of-light, occupancy, launch,
# scheduler and warp-state sections for the kernels whose names match FILTER, over COMMAND:
#   tools/device/stall_profile.sh OUT.txt FILTER -- COMMAND...
#   e.g. tools/device/stall_profile.sh flash.txt attention_flash -- build-dev/bin/bench_attention_cuda
#        tools/device/stall_profile.sh exl3.txt prefill_gemm -- build-dev/bin/tandem bench --synth bolt
#          --mix exl3-2 --device cuda --prompt-tokens 2048 --prefill 2048 --decode-tokens 1 --verify-max 1 --no-profile
# NCU_ARGS replaces the capture range (default: skip 2 matching launches, capture 3). The summary keeps
# each kernel's duration, SM and memory throughput, achieved occupancy, issue-slot use and the warp
# stall reasons (cycles per issued instruction), which say whether a kernel waits on memory, on a
# barrier, on the tensor pipe or on its own dependent instructions.
set -eu
out=$1 filter=$2; shift 2; [[ $1 == -- ]] && shift
ncu --clock-control none -k "regex:$filter" ${NCU_ARGS:---launch-skip 2 -c 3} \
  --section SpeedOfLight --section Occupancy --section LaunchStats --section SchedulerStats \
  --section WarpStateStats --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio' "$@" > "$out.raw" 2>&1 || true
grep -E "^  [A-Za-z_].*\(|Duration|Compute \(SM\) Throughput|Memory Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per Thread|Dynamic Shared Memory Per Block|Block Limit|Issue Slots Busy|No Eligible|Warp Cycles Per Issued Instruction|Stall|stall" "$out.raw" > "$out" || true
echo "summary: $out (full report: $out.raw)"
