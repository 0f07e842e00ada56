#!/usr/bin/env node
// Renders chat-template test conversations with @huggingface/jinja: the golden prompts that
// tests/core/chat_template compares tandem's Jinja interpreter against (byte for byte).
//
//   npm ci --prefix tools   (or: cd tools && npm install; pins @huggingface/jinja 0.5.11)
//   node tools/render_templates.mjs tests/fixtures/chat_template/nemotron3_cases.json \
//        tests/fixtures/chat_template/nemotron3_expected.json [TEMPLATES_DIR]
//
// CASES.json: {"template"?: "<file name>", "variables"?: {shared}, "cases": [{"name", "source"?,
// "variables", "options"?, "hf_differs"?}]}. The template is read from TEMPLATES_DIR (default:
// ../shared/data/chat_templates beside the checkout) unless a case brings its own `source`; a case's
// variables are laid over the shared ones.
// Before rendering, the variables get the same input normalization as tandem::ChatTemplate's
// defaults (ChatRenderOptions), so both sides render the same data: a tool call's `arguments` JSON
// string is parsed into an object ("" counts as {}), and a content that is a non-empty list of only
// text parts becomes the texts joined by "\n". `options` may turn either off
// (parse_tool_arguments, join_text_parts). A render that throws is recorded as {"error": message}.
import { Template } from "@huggingface/jinja";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const [casesPath, outPath, templatesDir = path.join(here, "..", "..", "shared", "data", "chat_templates")] =
  process.argv.slice(2);
if (!casesPath || !outPath) {
  console.error("usage: node tools/render_templates.mjs CASES.json OUT.json [TEMPLATES_DIR]");
  process.exit(2);
}
// The package's exports hide package.json; find it beside the resolved entry (dist/index.js).
const entry = fileURLToPath(import.meta.resolve("@huggingface/jinja"));
const version = JSON.parse(fs.readFileSync(path.join(path.dirname(entry), "..", "package.json"), "utf8")).version;

function isTextParts(content) {
  return Array.isArray(content) && content.length > 0 &&
    content.every((p) => p && typeof p === "object" && p.type === "text" && typeof p.text === "string");
}

function parseArguments(args, where) {
  if (args.trim() === "") return {};
  const v = JSON.parse(args);
  if (v === null || typeof v !== "object" || Array.isArray(v)) throw new Error(`${where}: expected a JSON object`);
  return v;
}

function normalize(variables, options) {
  const joinParts = options.join_text_parts ?? true;
  const parseArgs = options.parse_tool_arguments ?? true;
  if (!Array.isArray(variables.messages)) return variables;
  const messages = variables.messages.map((m, i) => {
    if (!m || typeof m !== "object") return m;
    const out = { ...m };
    if (joinParts && isTextParts(m.content)) out.content = m.content.map((p) => p.text).join("\n");
    if (parseArgs && Array.isArray(m.tool_calls)) {
      out.tool_calls = m.tool_calls.map((c, j) => {
        if (!c || typeof c !== "object") return c;
        const nested = c.function && typeof c.function === "object" && !Array.isArray(c.function);
        const fn = nested ? { ...c.function } : { ...c };
        if (typeof fn.arguments === "string") fn.arguments = parseArguments(fn.arguments, `messages[${i}].tool_calls[${j}]`);
        return nested ? { ...c, function: fn } : fn;
      });
    }
    return out;
  });
  return { ...variables, messages };
}

const spec = JSON.parse(fs.readFileSync(casesPath, "utf8"));
const fileTemplate = spec.template ? new Template(fs.readFileSync(path.join(templatesDir, spec.template), "utf8")) : null;
const renders = {};
for (const c of spec.cases) {
  try {
    const template = c.source !== undefined ? new Template(c.source) : fileTemplate;
    const variables = { ...(spec.variables ?? {}), ...c.variables };
    renders[c.name] = { text: template.render(normalize(variables, c.options ?? {})) };
  } catch (e) {
    renders[c.name] = { error: String(e.message ?? e) };
  }
}
const out = { renderer: `@huggingface/jinja ${version}`, template: spec.template ?? null, renders };
fs.writeFileSync(outPath, JSON.stringify(out, null, 1) + "\n");
console.log(`${outPath}: ${spec.cases.length} cases rendered with @huggingface/jinja ${version}`);
