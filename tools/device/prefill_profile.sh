#!/usr/bin/env bash
# On the device machine: per-kernel GPU time of one prefill pass under ncu, prefill kernels only.
#   tools/device/prefill_profile.sh OUT.txt -- tandem bench ARGS...   (e.g. --synth bolt --mix exl3-2
#   --device cuda --prefill 2048 --prefill-chunk 2048 --decode-tokens 1 --verify-max 1 --no-profile)
# Decode and verify passes (≤ 16 rows) run other kernels, so a name filter keeps the profile to the
# prefill: GEMMs and grouped gathers, the SSD scan, flash attention, and the norms and routers every
# pass shares (those also appear in decode; their prefill calls are the ones with large grids). ncu
# NCU_FILTER replaces the name filter, NCU_ARGS the capture range (default -c 4000; e.g. "--launch-skip
# 120 -c 8"). The bench's own short prompt runs first: give it --prompt-tokens N to profile an N-token pass.
# replays each kernel once with the clocks unlocked; the summary is µs per kernel name, sorted.
set -eu
out=$1; shift; [[ $1 == -- ]] && shift
filter=${NCU_FILTER:-'regex:gemm|mma|grouped|chunk_|state_pass|flash|rms_norm|route|moe_combine|conv|gather|rotate|dt_kernel|relu2|decode_kernel'}
ncu --clock-control none --metrics gpu__time_duration.sum -k "$filter" ${NCU_ARGS:--c 4000} "$@" > "$out.raw" 2>&1 || true
python3 - "$out.raw" > "$out" <<'PY'
import collections, re, sys
d = collections.defaultdict(lambda: [0, 0.0]); g = collections.defaultdict(lambda: [0, 0.0]); key = None
for l in open(sys.argv[1]):
    m = re.match(r'\s+(\S.*?) (\(\d+, \d+, \d+\))x\(\d+, \d+, \d+\)', l)
    if m: key = (m.group(1).split('(')[0][:100], m.group(2)); continue
    m = re.search(r'gpu__time_duration.sum\s+(\S+)\s+([\d.,]+)', l)
    if m and key:
        v = float(m.group(2).replace(',', '')); u = m.group(1)
        us = v / 1000 if u == 'ns' else v * 1000 if u == 'ms' else v
        for t, k in ((d, key[0]), (g, key)): t[k][0] += 1; t[k][1] += us
tot = sum(v[1] for v in d.values()) or 1
print(f"total {tot:.0f} us over {sum(v[0] for v in d.values())} kernels")
for k, v in sorted(d.items(), key=lambda x: -x[1][1]): print(f"{v[1]:10.0f} us {v[0]:6d} calls {100*v[1]/tot:5.1f}%  {k}")
print("by grid (top 20): total us, calls, mean us, kernel, grid")
for k, v in sorted(g.items(), key=lambda x: -x[1][1])[:20]: print(f"{v[1]:10.0f} us {v[0]:6d} calls {v[1]/v[0]:9.1f} us  {k[0]} {k[1]}")
PY
head -25 "$out"
