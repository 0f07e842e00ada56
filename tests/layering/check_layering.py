#!/usr/bin/env python3
"""The house's layering as a test: which folder may include which (docs/architecture.md).

Every `#include "..."` in the tree is resolved the way the build resolves it (beside the including
file, then the include roots every target shares, then any folder of the tree that holds a header of
that name, which is how a private header leaks through an include path) and its owner checked:

  core/            only core/
  text/            core/, text/
  kernels/         core/, kernels/
  plugins/X, formats/X   core/, kernels/ and X itself: never another plugin's folder
  schedulers/      core/, text/, schedulers/
  server/          core/, text/, schedulers/, server/: no plugin's private header
  apps/            anything public: core/, text/, kernels/, schedulers/, server/, apps/; no plugin's
                   private header either (a format offers what the CLI needs through the plugin ABI)

Usage: check_layering.py ROOT       exits 1 and lists each include that breaks a rule
       check_layering.py --self-test  builds a small tree that breaks each rule once and checks
                                      that every break is reported (so the test can fail)
"""
import os
import re
import sys
import tempfile

SOURCES = (".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh", ".inc")
AREAS = ("core", "text", "kernels", "plugins", "formats", "schedulers", "server", "apps")
ROOTS = ("core/include", "text/include", "kernels/cuda/include")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def owner(rel):
    """core, text, … or plugins/X, formats/X; None outside the product's folders (tests, tools)."""
    parts = rel.split("/")
    if parts[0] not in AREAS:
        return None
    if parts[0] in ("plugins", "formats") and len(parts) > 2:
        return parts[0] + "/" + parts[1]
    return parts[0]


# Headers a format (or a drafter) may use from another format's static library, named one by one: a plugin
# built on another's container or kernels links that library (it never loads the other plugin). docs/decisions.md
# ("ModelOpt NVFP4 rides on the GGUF kernels") says why.
SHARED = {
    "formats/nvfp4": {
        "formats/safetensors/safetensors_checkpoint.h",  # ModelOpt folders are safetensors folders
        "formats/gguf/gguf_format_cuda.h",  # NVFP4 repacked into GGUF blocks on the GGUF CUDA kernels
        "formats/gguf/quant.h",
    },
    "plugins/spec-lilicorr": {
        "formats/safetensors/safetensors_checkpoint.h",  # a drafter checkpoint is an HF safetensors folder
        "formats/safetensors/safetensors_file_writer.h",  # synthetic drafter checkpoints
        "formats/nvfp4/nvfp4_checkpoint.h",  # NVFP4 drafter modules: ModelOpt's exclude check (quant.cpp)
        "formats/nvfp4/modelopt_config.h",  # ModelOpt's quantization config (quant.h)
        "formats/nvfp4/encodings.h",  # e2m1 / E4M3 decoding (quant.cpp)
    },
}


def allowed(src, dst):
    if src == dst:
        return True
    area = src.split("/")[0]
    rules = {
        "core": {"core"},
        "text": {"core"},
        "kernels": {"core"},
        "plugins": {"core", "kernels"},
        "formats": {"core", "kernels"},
        "schedulers": {"core", "text"},
        "server": {"core", "text", "schedulers"},
        "apps": {"core", "text", "kernels", "schedulers", "server"},
    }
    return dst in rules[area]


def scan(root):
    files, by_name = [], {}
    for area in AREAS:
        for d, dirs, names in os.walk(os.path.join(root, area)):
            dirs[:] = [x for x in dirs if x not in ("node_modules", ".git") and not x.startswith("build")]
            for n in names:
                if n.endswith(SOURCES):
                    rel = os.path.relpath(os.path.join(d, n), root).replace(os.sep, "/")
                    files.append(rel)
                    by_name.setdefault(n, []).append(rel)
    return files, by_name


def resolve(root, rel, inc, by_name):
    here = os.path.dirname(rel)
    for base in [here, ""] + list(ROOTS):
        cand = os.path.normpath(os.path.join(base, inc)).replace(os.sep, "/")
        if os.path.isfile(os.path.join(root, cand)):
            return cand
    # Found only through some target's include path: a header of that name elsewhere in the tree.
    hits = [h for h in by_name.get(os.path.basename(inc), []) if h.endswith("/" + inc) or h == inc]
    return hits[0] if hits else None


def check(root):
    files, by_name = scan(root)
    broken = []
    for rel in files:
        src = owner(rel)
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            text = f.read()
        for inc in INCLUDE.findall(text):
            target = resolve(root, rel, inc, by_name)
            if target is None:
                continue  # generated or outside the tree (build-dir instances)
            dst = owner(target)
            if dst is None or allowed(src, dst) or target in SHARED.get(src, ()):
                continue
            broken.append(f'{rel}: #include "{inc}" ({target}) — {src} may not include {dst}')
    return files, broken


def self_test():
    cases = {
        "core/src/a.cpp": '#include "tandem/text/tokenizer.h"\n',
        "core/src/b.cpp": '#include "tandem/slot_scheduler.h"\n',
        "plugins/x/a.cu": '#include "plugins/y/private.h"\n',
        "formats/f/a.cu": '#include "private.h"\n',  # found only in plugins/y: an include-path leak
        "server/a.cpp": '#include "formats/f/own.h"\n',
        "apps/a.cpp": '#include "formats/f/own.h"\n',
        "text/a.cpp": '#include "tandem/slot_scheduler.h"\n',
        # allowed, must not be reported:
        "formats/f/own.h": '#include "tandem/weights.h"\n',
        "formats/f/b.cu": '#include "tandem/cuda/util.cuh"\n#include "own.h"\n',
        "apps/b.cpp": '#include "tandem/slot_scheduler.h"\n#include "tandem/text/tokenizer.h"\n',
        "core/include/tandem/weights.h": "",
        "text/include/tandem/text/tokenizer.h": "",
        "schedulers/slots/include/tandem/slot_scheduler.h": '#include "tandem/text/tokenizer.h"\n',
        "kernels/cuda/include/tandem/cuda/util.cuh": '#include "tandem/weights.h"\n',
        "plugins/y/private.h": "",
    }
    with tempfile.TemporaryDirectory() as t:
        for rel, body in cases.items():
            os.makedirs(os.path.join(t, os.path.dirname(rel)), exist_ok=True)
            with open(os.path.join(t, rel), "w") as f:
                f.write(body)
        _, broken = check(t)
    want = {"core/src/a.cpp", "core/src/b.cpp", "plugins/x/a.cu", "formats/f/a.cu", "server/a.cpp", "apps/a.cpp",
            "text/a.cpp"}
    got = {b.split(":")[0] for b in broken}
    if got != want:
        print("self-test: expected breaks in", sorted(want), "reported", sorted(got))
        for b in broken:
            print("  ", b)
        return 1
    print(f"self-test: all {len(want)} planted breaks reported, nothing else")
    return 0


def main():
    if len(sys.argv) == 2 and sys.argv[1] == "--self-test":
        return self_test()
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    files, broken = check(sys.argv[1])
    for b in broken:
        print(b)
    print(f"layering: {len(files)} files, {len(broken)} includes break the rules")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
