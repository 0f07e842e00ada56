#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (tests/fuzz/corpus/<name>/): small, valid or nearly valid
inputs for each reader, so that the fuzzer starts past the first checks. Deterministic: running it again
rewrites the same bytes. Usage: python3 tests/fuzz/make_corpus.py (from anywhere)."""
import json
import os
import random
import shutil
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus")
ROOT = os.path.dirname(os.path.dirname(HERE))
rng = random.Random(19)


def put(name, fname, data):
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, fname), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


# --- GGUF (spec/formats.md § 2) ---------------------------------------------------------------------
T_U8, T_I8, T_U16, T_I16, T_U32, T_I32, T_F32, T_BOOL, T_STR, T_ARR, T_U64, T_I64, T_F64 = range(13)
# ggml type id -> (block elements, block bytes)
GGML = {"F32": (0, 1, 4), "F16": (1, 1, 2), "Q8_0": (8, 32, 34), "Q4_K": (12, 256, 144),
        "Q6_K": (14, 256, 210), "IQ2_XXS": (16, 256, 66), "BF16": (30, 1, 2)}


def gstr(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def gval(t, v):
    if t == T_STR:
        return gstr(v)
    fmt = {T_U8: "B", T_I8: "b", T_U16: "H", T_I16: "h", T_U32: "I", T_I32: "i", T_F32: "f", T_BOOL: "?",
           T_U64: "Q", T_I64: "q", T_F64: "d"}[t]
    return struct.pack("<" + fmt, v)


def gguf(kvs, tensors, version=3, alignment=32):
    """kvs: [(key, type, value)] (arrays: (key, T_ARR, (elem_type, [values]))); tensors: [(name, type, ne)]."""
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    for key, t, v in kvs:
        out += gstr(key) + struct.pack("<i", t)
        if t == T_ARR:
            et, vals = v
            out += struct.pack("<iQ", et, len(vals)) + b"".join(gval(et, x) for x in vals)
        else:
            out += gval(t, v)
    datas, off = [], 0
    for name, ty, ne in tensors:
        tid, be, bb = GGML[ty]
        n = 1
        for d in ne:
            n *= d
        nbytes = n // be * bb
        out += gstr(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
        out += struct.pack("<iQ", tid, off)
        if ty == "F32":
            data = b"".join(struct.pack("<f", rng.uniform(-0.5, 0.5)) for _ in range(n))
        elif ty == "F16":
            data = b"".join(struct.pack("<e", rng.uniform(-0.5, 0.5)) for _ in range(n))
        else:  # quantized blocks: small fp16 scales first, random bits after
            blocks = []
            for _ in range(nbytes // bb):
                blocks.append(struct.pack("<e", 0.01) + bytes(rng.randrange(256) for _ in range(bb - 2)))
            data = b"".join(blocks)
        datas.append(data)
        off += (len(data) + alignment - 1) // alignment * alignment
    out += b"\0" * ((-len(out)) % alignment)
    for d in datas:
        out += d + b"\0" * ((-len(d)) % alignment)
    return out


def tiny_nemotron_kvs(with_tokenizer=True):
    a = "nemotron_h_moe."
    pattern = "MEM*E-"
    H, NQ, NKV, HD, E, TOPK, W, MLP = 16, 4, 2, 4, 4, 2, 8, 20
    kvs = [("general.architecture", T_STR, "nemotron_h_moe"), ("general.name", T_STR, "tiny"),
           ("general.alignment", T_U32, 32),
           (a + "block_count", T_U32, len(pattern)), (a + "context_length", T_U32, 4096),
           (a + "embedding_length", T_U32, H),
           (a + "feed_forward_length", T_ARR, (T_I32, [W if c == "E" else MLP if c == "-" else 0 for c in pattern])),
           (a + "attention.head_count", T_U32, NQ),
           (a + "attention.head_count_kv", T_ARR, (T_I32, [NKV if c == "*" else 0 for c in pattern])),
           (a + "attention.key_length", T_U32, HD), (a + "attention.value_length", T_U32, HD),
           (a + "attention.layer_norm_rms_epsilon", T_F32, 1e-5), (a + "attention.layer_norm_epsilon", T_F32, 1e-5),
           (a + "ssm.conv_kernel", T_U32, 4), (a + "ssm.inner_size", T_U32, 16), (a + "ssm.state_size", T_U32, 4),
           (a + "ssm.time_step_rank", T_U32, 4), (a + "ssm.group_count", T_U32, 2),
           (a + "expert_count", T_U32, E), (a + "expert_used_count", T_U32, TOPK),
           (a + "expert_feed_forward_length", T_U32, W), (a + "expert_shared_feed_forward_length", T_U32, 12),
           (a + "expert_shared_count", T_U32, 1), (a + "expert_weights_scale", T_F32, 2.5),
           (a + "expert_weights_norm", T_BOOL, True), (a + "expert_group_count", T_U32, 1),
           (a + "expert_group_used_count", T_U32, 1), (a + "moe_latent_size", T_U32, 8)]
    if with_tokenizer:
        tokens = ["<unk>", "<s>", "</s>", "<think>"] + [chr(c) for c in range(ord("a"), ord("z") + 1)] + ["Ġ", "Ġa", "ab"]
        kvs += [("tokenizer.ggml.model", T_STR, "gpt2"), ("tokenizer.ggml.pre", T_STR, "default"),
                ("tokenizer.ggml.tokens", T_ARR, (T_STR, tokens)),
                ("tokenizer.ggml.token_type", T_ARR, (T_I32, [3, 3, 3, 4] + [1] * (len(tokens) - 4))),
                ("tokenizer.ggml.merges", T_ARR, (T_STR, ["Ġ a", "a b"])),
                ("tokenizer.ggml.bos_token_id", T_U32, 1), ("tokenizer.ggml.eos_token_id", T_U32, 2),
                ("tokenizer.chat_template", T_STR,
                 "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}")]
    return kvs


def write_gguf():
    put("gguf", "empty_v3.gguf", gguf([], []))
    put("gguf", "kv_types_v2.gguf", gguf([
        ("u8", T_U8, 7), ("i8", T_I8, -3), ("u16", T_U16, 700), ("i16", T_I16, -700), ("i32", T_I32, -70000),
        ("f32", T_F32, 1.5), ("bool", T_BOOL, True), ("s", T_STR, "hé\x01llo"), ("u64", T_U64, 2 ** 40),
        ("i64", T_I64, -(2 ** 40)), ("f64", T_F64, 0.25), ("arr", T_ARR, (T_STR, ["a", "", "bc"])),
        ("arr_f", T_ARR, (T_F32, [1.0, 2.0]))], [("t", "F32", [4])], version=2))
    H, V = 16, 32
    put("gguf", "tiny_nemotron_h.gguf", gguf(tiny_nemotron_kvs(), [
        ("token_embd.weight", "F16", [H, V]), ("output_norm.weight", "F32", [H]),
        ("output.weight", "Q8_0", [32, V]), ("blk.0.attn_norm.weight", "F32", [H]),
        ("blk.0.ssm_in.weight", "Q4_K", [256, 2]), ("blk.0.ssm_a", "F32", [1, 4]), ("blk.0.ssm_d", "F32", [1, 4]),
        ("blk.0.ssm_conv1d.weight", "F32", [4, 32]), ("blk.0.ssm_conv1d.bias", "F32", [32]),
        ("blk.1.ffn_up_exps.weight", "IQ2_XXS", [256, 1, 4]), ("blk.1.ffn_up_exps.scale", "F32", [4]),
        ("blk.1.ffn_down_exps.weight", "Q6_K", [256, 1, 4]), ("blk.1.ffn_gate_inp.weight", "BF16", [H, 4]),
        ("blk.1.exp_probs_b.bias", "F32", [4])]))
    put("gguf", "tiny_no_tokenizer.gguf", gguf(tiny_nemotron_kvs(False), [("token_embd.weight", "F32", [H, 4])]))


# --- safetensors (spec/formats.md § 1) ----------------------------------------------------------------
def safetensors(tensors, metadata=None, pad=0):
    """tensors: [(name, dtype, shape, bytes)]."""
    header, off, data = {}, 0, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, b in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(b)]}
        off += len(b)
        data += b
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((-len(h)) % 8 + pad)
    return struct.pack("<Q", len(h)) + h + data


def f32s(n):
    return b"".join(struct.pack("<f", rng.uniform(-1, 1)) for _ in range(n))


def f16s(n, lo=-1.0, hi=1.0):
    return b"".join(struct.pack("<e", rng.uniform(lo, hi)) for _ in range(n))


def bf16s(n):
    return b"".join(struct.pack("<f", rng.uniform(-1, 1))[2:] for _ in range(n))


def write_safetensors():
    put("safetensors", "empty.safetensors", safetensors([]))
    put("safetensors", "dense.safetensors", safetensors([
        ("model.embed_tokens.weight", "BF16", [8, 4], bf16s(32)),
        ("model.layers.0.mlp.up_proj.weight", "F16", [6, 4], f16s(24)),
        ("model.layers.0.mlp.up_proj.bias", "F32", [6], f32s(6)),
        ("model.norm.weight", "F32", [4], f32s(4)),
        ("lm_head.weight", "F32", [3, 4], f32s(12))], {"format": "pt"}))
    put("safetensors", "dtypes.safetensors", safetensors([
        ("a.u8", "U8", [3], b"\1\2\3"), ("b.i64", "I64", [1], struct.pack("<q", -5)),
        ("c.f8", "F8_E4M3", [2, 2], b"\x38\x40\xb8\x00"), ("d.scalar", "I32", [], struct.pack("<i", 7)),
        ("e.zero", "F32", [0, 5], b""), ("f.weight", "BF16", [2, 1], bf16s(2))]))


# --- EXL3 (spec/formats.md § 5): groups of trellis (I16 [k/16, n/16, 16K]), suh/svh (F16), markers ----
def exl3_group(prefix, k, n, K, marker=None, bias=False, legacy=False):
    t = [(prefix + ".trellis", "I16", [k // 16, n // 16, 16 * K],
          bytes(rng.randrange(256) for _ in range(k // 16 * n // 16 * 16 * K * 2)))]
    if legacy:
        t.append((prefix + ".su", "I16", [k // 16], bytes(rng.randrange(256) for _ in range(k // 16 * 2))))
        t.append((prefix + ".sv", "I16", [n // 16], bytes(rng.randrange(256) for _ in range(n // 16 * 2))))
    else:
        t.append((prefix + ".suh", "F16", [k], f16s(k, 0.01, 0.02)))
        t.append((prefix + ".svh", "F16", [n], f16s(n, 0.01, 0.02)))
    if marker == "mcg":
        t.append((prefix + ".mcg", "I32", [], struct.pack("<I", 0xCBAC1FED)))
    elif marker == "mul1":
        t.append((prefix + ".mul1", "I32", [], struct.pack("<I", 0x83DCD12D)))
    if bias:
        t.append((prefix + ".bias", "F16", [n], f16s(n)))
    return t


def write_exl3():
    put("exl3", "k1_3inst.safetensors", safetensors(exl3_group("model.layers.0.self_attn.q_proj", 128, 128, 1)))
    put("exl3", "k2_mcg_bias.safetensors",
        safetensors(exl3_group("model.layers.0.mlp.down_proj", 128, 128, 2, "mcg", bias=True)))
    put("exl3", "k1_mul1_legacy.safetensors",
        safetensors(exl3_group("model.layers.1.mlp.up_proj", 128, 256, 1, "mul1", legacy=True)))


# --- YAML profiles: the repository's own, plus one using every section --------------------------------
def write_profile():
    for f in sorted(os.listdir(os.path.join(ROOT, "configs"))):
        if f.endswith(".yaml"):
            shutil.copy(os.path.join(ROOT, "configs", f), os.path.join(OUT, "profile", f))
    put("profile", "all_sections.yaml", """model: ./m
format: gguf
device: cpu
threads: 2
context: 512
max_tokens: 16
chat_template: t.jinja
tokenizer: tok.json
sampling: {temperature: 0.7, top_p: 0.9, top_k: 40, seed: 3}
server:
  host: 0.0.0.0
  port: 8080
  api_key: [a, b]
  served_model_name: x
  aliases: y
  max_body_bytes: 1048576
  queue_timeout: 1.5
  strict_fields: true
  reasoning_budget: -1
draft:
  drafters: [lookup]
  lookup: {n: 3}
""")


# --- tokenizer.json (then a NUL and tokenizer_config.json) -------------------------------------------
def write_tokenizer():
    def byte_level():
        # GPT-2's byte alphabet: printable bytes map to themselves, others to U+0100 upwards.
        keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
        m, extra = {}, 0
        for b in range(256):
            if b in keep:
                m[b] = chr(b)
            else:
                m[b] = chr(256 + extra)
                extra += 1
        return m
    bl = byte_level()
    vocab = {bl[b]: b for b in range(256)}
    merges = [["Ġ", "t"], ["h", "e"], ["Ġt", "he"], ["l", "l"], ["e", "ll"]]
    for a, b in merges:
        vocab[a + b] = len(vocab)
    added = [{"id": len(vocab), "content": "<|im_end|>", "special": True},
             {"id": len(vocab) + 1, "content": "<think>", "special": False}]
    tok = {"version": "1.0", "added_tokens": added,
           "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
               {"type": "Split", "pattern": {"Regex": "\\p{N}{1,3}| ?\\p{L}+| ?[^\\s\\p{L}\\p{N}]+|\\s+"},
                "behavior": "Isolated", "invert": False},
               {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
           "decoder": {"type": "ByteLevel"},
           "model": {"type": "BPE", "vocab": vocab, "merges": merges, "ignore_merges": False}}
    cfg = {"bos_token": "<|im_end|>", "eos_token": "<|im_end|>", "add_bos_token": False,
           "chat_template": "{{ messages[0].content }}"}
    put("tokenizer", "byte_level.json", json.dumps(tok, ensure_ascii=False) + "\0" + json.dumps(cfg))
    tok2 = dict(tok)
    tok2["model"] = dict(tok["model"], merges=[" ".join(m) for m in merges])
    tok2["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": True, "use_regex": True}
    put("tokenizer", "string_merges.json", json.dumps(tok2, ensure_ascii=False))


# --- chat templates (then a NUL and the variables JSON) -----------------------------------------------
CHATML = """{%- if tools %}{{- '<|im_start|>system\\n' }}{%- for tool in tools %}{{- tool | tojson }}{%- endfor %}
{{- '<|im_end|>\\n' }}{%- endif %}
{%- for message in messages %}
  {%- if message.role == 'assistant' and message.tool_calls is defined %}
    {{- '<|im_start|>assistant\\n' }}
    {%- for call in message.tool_calls %}<tool_call>{{ call.function.name }}
      {%- for k, v in call.function.arguments | items %} {{ k }}={{ v | tojson }}{% endfor %}</tool_call>
    {%- endfor %}{{- '<|im_end|>\\n' }}
  {%- else %}
    {%- set content = message.content | trim %}
    {{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>\\n' }}
  {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- if not enable_thinking %}<think></think>{% endif %}{%- endif %}"""

MACROS = """{% macro render(m, depth=0) -%}
{{ m.role | upper }}: {{ m.content if m.content is string else m.content | map(attribute='text') | join(' ') }}
{%- endmacro %}{% set ns = namespace(n=0) %}{% for m in messages | selectattr('role', 'ne', 'system') %}
{%- set ns.n = ns.n + 1 %}{{ loop.index }}/{{ loop.length }} {{ render(m) }}{% if not loop.last %}
{% endif %}{% endfor %} [{{ ns.n }}] {{ strftime_now('%Y-%m-%d') }} {{ messages | length }}
{%- if raise_me is defined %}{{ raise_exception('bad') }}{% endif %}"""


def write_chat_template():
    put("chat_template", "chatml_tools.jinja", CHATML)
    put("chat_template", "macros.jinja", MACROS)
    put("chat_template", "macros_vars.jinja", MACROS + "\0" + json.dumps(
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "text", "text": "yo"}]}]}))
    cases = json.load(open(os.path.join(ROOT, "tests/fixtures/chat_template/jinja_cases.json")))
    variables = json.dumps(cases["variables"])
    for i, c in enumerate(cases["cases"][::3]):
        put("chat_template", "case_%02d.jinja" % i, c["source"] + "\0" + variables)


# --- NVFP4 / ModelOpt (spec/formats.md § 6): a selector byte, the config, a NUL, a safetensors file -----
# Selector bit 0: the config is hf_quant_config.json (else config.json); bit 1: a plain config.json too.
def e4m3_scales(n):
    return bytes(rng.randrange(0x20, 0x48) for _ in range(n))  # non-negative, finite


def fp8_weights(n):
    return bytes(rng.choice([b for b in range(256) if b & 0x7F != 0x7F]) for _ in range(n))


def nvfp4_module(prefix, out, inp, input_scale=True):
    t = [(prefix + ".weight", "U8", [out, inp // 2], bytes(rng.randrange(256) for _ in range(out * inp // 2))),
         (prefix + ".weight_scale", "F8_E4M3", [out, inp // 16], e4m3_scales(out * inp // 16)),
         (prefix + ".weight_scale_2", "F32", [], struct.pack("<f", 0.0125))]
    if input_scale:
        t.append((prefix + ".input_scale", "F32", [], struct.pack("<f", 0.5)))
    return t


def fp8_module(prefix, out, inp, per_row):
    scale = f32s(out) if per_row else struct.pack("<f", 0.03)
    return [(prefix + ".weight", "F8_E4M3", [out, inp], fp8_weights(out * inp)),
            (prefix + ".weight_scale", "F32", [out] if per_row else [], scale)]


def folder_input(selector, config, tensors):
    return bytes([selector]) + json.dumps(config).encode() + b"\0" + safetensors(tensors)


def write_nvfp4():
    layer = "backbone.layers.%d.mixer.%s"
    put("nvfp4", "nvfp4_legacy.bin", folder_input(1, {
        "producer": {"name": "modelopt", "version": "0.29.0"},
        "quantization": {"quant_algo": "NVFP4", "group_size": 16, "kv_cache_quant_algo": None,
                         "exclude_modules": ["lm_head", "backbone.layers.1*"]}},
        nvfp4_module(layer % (0, "in_proj"), 4, 32) + [
            (layer % (1, "out_proj") + ".weight", "BF16", [4, 8], bf16s(32)),
            ("lm_head.weight", "F16", [6, 8], f16s(48)), ("backbone.norm_f.weight", "F32", [8], f32s(8))]))
    put("nvfp4", "mixed_config_json.bin", folder_input(0, {
        "architectures": ["NemotronHForCausalLM"],
        "quantization_config": {
            "quant_method": "modelopt", "quant_algo": "MIXED_PRECISION", "kv_cache_quant_algo": "FP8",
            "config_groups": {"group_0": {"weights": {"num_bits": 4, "group_size": 16}}},
            "ignore": ["lm_head"],
            "quantized_layers": {layer % (0, "in_proj"): {"quant_algo": "NVFP4", "group_size": 16},
                                 layer % (0, "out_proj"): {"quant_algo": "FP8"}}}},
        nvfp4_module(layer % (0, "in_proj"), 2, 64, input_scale=False) + fp8_module(layer % (0, "out_proj"), 4, 8, True) +
        [("lm_head.weight", "BF16", [4, 8], bf16s(32))]))
    put("nvfp4", "fp8_both_files.bin", folder_input(3, {
        "quantization": {"quant_algo": "FP8", "exclude_modules": ["*.mixer.gate", "lm_?ead"]}},
        fp8_module("backbone.layers.0.mixer.experts.0.up_proj", 3, 4, False) +
        fp8_module("backbone.layers.0.mixer.experts.1.up_proj", 1, 4, True) +
        [("backbone.layers.0.mixer.gate.weight", "F32", [2, 4], f32s(8))]))


# --- MLX (spec/formats.md § 7): a selector byte (unused), config.json, a NUL, model.safetensors ----------
def u32_words(n):
    return bytes(rng.randrange(256) for _ in range(4 * n))


def affine8_module(prefix, n, k, group):
    g = n * (k // group)
    scales = [rng.choice([2.0 ** -8, 2.0 ** -7, 0.0078125 * 1.5]) for _ in range(g)]
    return [(prefix + ".weight", "U32", [n, k // 4], u32_words(n * k // 4)),
            (prefix + ".scales", "F16", [n, k // group], b"".join(struct.pack("<e", v) for v in scales)),
            (prefix + ".biases", "F16", [n, k // group], b"".join(struct.pack("<e", -128 * v) for v in scales))]


def write_mlx():
    put("mlx", "affine8.bin", folder_input(0, {
        "model_type": "nemotron_h", "quantization": {"group_size": 32, "bits": 8, "mode": "affine"},
        "quantization_config": {"group_size": 32, "bits": 8}},
        affine8_module("backbone.layers.0.mixer.in_proj", 2, 64, 32) +
        [("backbone.embeddings.weight", "BF16", [8, 4], bf16s(32))]))
    stack = "backbone.layers.1.mixer.switch_mlp.fc1"
    put("mlx", "nvfp4_experts.bin", folder_input(0, {
        "model_type": "nemotron_h", "quantization": {"group_size": 16, "bits": 4, "mode": "nvfp4"}},
        [(stack + ".weight", "U32", [2, 2, 8], u32_words(32)),
         (stack + ".scales", "U8", [2, 2, 4], e4m3_scales(16)),
         (stack + ".global_scale", "F32", [2], struct.pack("<2f", 2688.0, 1344.0)),
         ("backbone.layers.0.mixer.out_proj.weight", "U32", [2, 8], u32_words(16)),
         ("backbone.layers.0.mixer.out_proj.scales", "U8", [2, 4], e4m3_scales(8))]))
    put("mlx", "iq2_xxs_override.bin", folder_input(0, {
        "model_type": "nemotron_h",
        "quantization": {"group_size": 256, "bits": 2, "mode": "iq2_xxs", "lm_head": False,
                         "backbone.layers.0.mixer.up_proj": {"group_size": 32, "bits": 8, "mode": "affine"}}},
        [("backbone.layers.0.mixer.down_proj.weight", "U32", [2, 16], u32_words(32)),
         ("backbone.layers.0.mixer.down_proj.scales", "F16", [2, 1], f16s(2, 0.001, 0.01)),
         ("lm_head.weight", "BF16", [4, 8], bf16s(32)),
         ("backbone.layers.2.mixer.switch_mlp.fc2.weight", "BF16", [2, 4, 4], bf16s(32))] +
        affine8_module("backbone.layers.0.mixer.up_proj", 1, 32, 32)))


def main():
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    os.makedirs(os.path.join(OUT, "profile"))
    write_gguf()
    write_safetensors()
    write_exl3()
    write_profile()
    write_tokenizer()
    write_chat_template()
    write_nvfp4()
    write_mlx()


if __name__ == "__main__":
    main()
