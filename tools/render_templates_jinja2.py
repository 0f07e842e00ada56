#!/usr/bin/env python3
"""Renders chat-template test conversations with Python's Jinja2 the way transformers does
(apply_chat_template: ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and loopcontrols;
tojson = json.dumps(ensure_ascii=False); raise_exception; strftime_now). This is the reference where
@huggingface/jinja departs from Jinja2 (str(True) is "True", str(list) is Python's repr, ...):
tests/core/chat_template compares tandem against both.

    python3 tools/render_templates_jinja2.py CASES.json OUT.json [TEMPLATES_DIR]

Same case format (file template or inline `source`, shared `variables`) and input normalization as
tools/render_templates.mjs (see there).
"""
import json
import os
import sys
from datetime import datetime

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


def environment():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env


def is_text_parts(content):
    return isinstance(content, list) and len(content) > 0 and all(
        isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in content)


def parse_arguments(args, where):
    if args.strip() == "":
        return {}
    v = json.loads(args)
    if not isinstance(v, dict):
        raise ValueError(f"{where}: expected a JSON object")
    return v


def normalize(variables, options):
    join_parts = options.get("join_text_parts", True)
    parse_args = options.get("parse_tool_arguments", True)
    messages = variables.get("messages")
    if not isinstance(messages, list):
        return variables
    out_messages = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            out_messages.append(m)
            continue
        m = dict(m)
        if join_parts and is_text_parts(m.get("content")):
            m["content"] = "\n".join(p["text"] for p in m["content"])
        if parse_args and isinstance(m.get("tool_calls"), list):
            calls = []
            for j, c in enumerate(m["tool_calls"]):
                if isinstance(c, dict):
                    nested = isinstance(c.get("function"), dict)
                    fn = dict(c["function"] if nested else c)
                    if isinstance(fn.get("arguments"), str):
                        fn["arguments"] = parse_arguments(fn["arguments"], f"messages[{i}].tool_calls[{j}]")
                    c = dict(c, function=fn) if nested else fn
                calls.append(c)
            m["tool_calls"] = calls
        out_messages.append(m)
    return dict(variables, messages=out_messages)


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: render_templates_jinja2.py CASES.json OUT.json [TEMPLATES_DIR]")
    here = os.path.dirname(os.path.abspath(__file__))
    templates_dir = sys.argv[3] if len(sys.argv) > 3 else os.path.join(here, "..", "..", "shared", "data", "chat_templates")
    with open(sys.argv[1], encoding="utf-8") as f:
        spec = json.load(f)
    env = environment()
    file_template = None
    if spec.get("template"):
        with open(os.path.join(templates_dir, spec["template"]), encoding="utf-8") as f:
            file_template = env.from_string(f.read())
    renders = {}
    for c in spec["cases"]:
        try:
            template = env.from_string(c["source"]) if "source" in c else file_template
            variables = dict(spec.get("variables", {}), **c.get("variables", {}))
            renders[c["name"]] = {"text": template.render(**normalize(variables, c.get("options", {})))}
        except Exception as e:  # recorded, compared as "must fail"
            renders[c["name"]] = {"error": f"{type(e).__name__}: {e}"}
    out = {"renderer": f"jinja2 {jinja2.__version__} (transformers' settings)", "template": spec.get("template"),
           "renders": renders}
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"{sys.argv[2]}: {len(spec['cases'])} cases rendered with jinja2 {jinja2.__version__}")


if __name__ == "__main__":
    main()
