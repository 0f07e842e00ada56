#!/usr/bin/env python3
"""Reference vectors for tandem's LiLiCorr drafter (issue #20; shared/spec/lilicorr.md, oracle plan).

Reads what `test_spec_lilicorr --gtest_filter=LilicorrOracle.DumpInputs` wrote (inputs.safetensors:
the committed sequence, the target's concatenated taps per position, its embedding and LM head, the
schedules; drafter/: the random LiLiCorr checkpoint tandem synthesized), runs the published reference
code on it and writes reference.safetensors for LilicorrOracle.MatchesTheReference:

- backbone: z-lab/dflash dflash/model.py DFlashDraftModel.forward, recomputed from scratch every step
  (past_key_values=None) over the context rows of every committed position but the last and the block
  [anchor, mask x (B-1)] at positions 0 ... T+B-1;
- candidates: top-K of log_softmax(lm_head(rows)) in fp32;
- head: TensorRT-LLM tensorrt_llm/_torch/models/modeling_lilicorr.py LiLiCorrHead (the stored
  scores) and Model-Optimizer modelopt/torch/speculative/plugins/modeling_lilicorr.py LiLiCorrHead
  (must agree), both checked first against TensorRT-LLM's frozen golden vector;
- walk: TensorRT-LLM lilicorr_proposal_logits (greedy), and each argmax's top-2 margin.

The reference sources are not part of tandem: --ref-dir names a folder (ignored by git, carried to
the GPU machine) holding dflash/model.py, trtllm/modeling_lilicorr.py, modelopt/modeling_lilicorr.py.
Needs torch and transformers (the Qwen3 modules z-lab's and Model-Optimizer's code import).
"""

import argparse
import importlib.util
import json
import math
import os
import struct
import sys

import torch

DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16, "I32": torch.int32, "I64": torch.int64}
NAMES = {v: k for k, v in DTYPES.items()}


def fail(msg):
    sys.exit(f"lilicorr_ref: {msg}")


def read_safetensors(path):
    """name -> tensor (as stored), read with torch only."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        fail(f"{path}: shorter than a safetensors header")
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        if e["dtype"] not in DTYPES:
            fail(f"{path}: tensor '{name}' is {e['dtype']}, expected one of {sorted(DTYPES)}")
        lo, hi = e["data_offsets"]
        buf = bytearray(data[8 + n + lo : 8 + n + hi])
        t = torch.frombuffer(buf, dtype=DTYPES[e["dtype"]]) if hi > lo else torch.empty(0, dtype=DTYPES[e["dtype"]])
        out[name] = t.reshape(e["shape"]).clone()
    return out


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        t = t.detach().cpu().contiguous()
        b = t.numpy().tobytes() if t.dtype != torch.bfloat16 else t.view(torch.int16).numpy().tobytes()
        header[name] = {"dtype": NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            f.write(b)


def load_module(name, path):
    if not os.path.isfile(path):
        fail(f"reference source {path} is missing (--ref-dir; see tools/reference/lilicorr_oracle.sh)")
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def qwen3_names():
    """z-lab's model.py imports helper names from transformers' qwen3 module that some transformers
    versions keep elsewhere; point the module at them (names only: no reference math changes)."""
    import transformers.models.qwen3.modeling_qwen3 as q

    homes = {"GradientCheckpointingLayer": "transformers.modeling_layers",
             "FlashAttentionKwargs": "transformers.modeling_flash_attention_utils",
             "ALL_ATTENTION_FUNCTIONS": "transformers.modeling_utils"}
    for name, home in homes.items():
        if not hasattr(q, name):
            try:
                setattr(q, name, getattr(importlib.import_module(home), name))
            except (ImportError, AttributeError):
                pass  # the import in model.py then names what is missing


def make_config(Qwen3Config, keys):
    """Qwen3Config with the drafter's keys; the ones it does not take as arguments become attributes."""
    try:
        return Qwen3Config(**keys)
    except TypeError:
        import inspect

        params = inspect.signature(Qwen3Config.__init__).parameters
        cfg = Qwen3Config(**{k: v for k, v in keys.items() if k in params})
        for k, v in keys.items():
            if k not in params:
                setattr(cfg, k, v)
        return cfg


def top2_margin(x):
    """x [..., n] -> top1 - top2 along the last axis."""
    v = torch.topk(x, 2, dim=-1).values
    return v[..., 0] - v[..., 1]


# --- TensorRT-LLM's frozen Model-Optimizer golden vector (test_lilicorr.py test_head_matches_reference_scores,
# as spec/lilicorr.md section 4 and tests/plugins/spec-lilicorr/test_head.cpp give it) --------------------
GOLDEN = dict(model_hidden_size=32, hidden_size=8, num_layers=2, num_heads=2, mlp_ratio=2.0, block_size=4,
              candidate_topk=3, factor_dim=8, rms_norm_eps=1e-5, vector_eps=1e-4, logit_scale=8.0)
GOLDEN_START = [-2.00565147, -2.00631571, -2.01010752]
GOLDEN_PAIRS = [1.16437435, 1.16812551, 1.15701485, 1.16656375, 1.17030466, 1.15921211, 1.17068172, 1.17445230,
                1.16334319, 1.14806044, 1.14459574, 1.12698877, 1.14481199, 1.14134955, 1.12373281, 1.14475155,
                1.14125943, 1.12357390]


def export_name(serving):
    """A TensorRT-LLM (serving) head name in the export (nn.Sequential) layout Model-Optimizer's head uses."""
    for a, b in (("feature_norm.", "feature_mlp.0."), ("feature_mlp.up_proj.", "feature_mlp.1."),
                 ("feature_mlp.down_proj.", "feature_mlp.3."), (".mlp.up_proj.", ".mlp.0."),
                 (".mlp.down_proj.", ".mlp.2.")):
        if a in serving:
            serving = serving.replace(a, b, 1)
    return serving


def to_export(serving_sd):
    out = {}
    for k, v in serving_sd.items():
        if k in ("slot_embedding", "rank_embedding") and v.ndim == 4:
            v = v.unsqueeze(1)
        out[export_name(k)] = v
    return out


def mo_scores(mo_head, cand, logp, rows, anchor, table):
    """Model-Optimizer's head on one block: (start [K], pairs [S-1, K, K]) times logit_scale."""
    emb = torch.nn.Embedding.from_pretrained(table, freeze=True)
    s, p = mo_head(candidate_token_ids=cand[None, None], candidate_log_probs=logp[None, None],
                   pass_hidden=rows[None, None], embed_tokens=emb, anchor_hidden=anchor.reshape(1, 1, 1, -1),
                   anchor_valid=None)
    s, p = mo_head.compose_log_factors(start_scores=s, pair_scores=p)
    return s[0, 0], p[0, 0]


def golden_check(trt, mo, device):
    trt_head = trt.LiLiCorrHead(**GOLDEN).to(device)
    sd = {}
    for name, p in trt_head.state_dict().items():
        off = 0.013 * sum(name.encode())
        sd[name] = (0.2 * torch.sin(0.17 * torch.arange(p.numel(), dtype=torch.float32) + off)).reshape(p.shape)
    trt_head.load_state_dict(sd, strict=True)
    mo_head = mo.LiLiCorrHead(**GOLDEN).to(device)
    mo_head.load_state_dict(to_export(sd), strict=True)
    table = torch.linspace(-1.2, 1.3, 512).view(16, 32).to(device)
    ids = torch.tensor([[2, 5, 9], [6, 3, 1], [4, 7, 8]], device=device)
    logp = torch.tensor([[-0.4, -1.5, -3.0], [-0.6, -1.7, -2.7], [-0.2, -2.1, -3.4]], device=device)
    hidden = torch.linspace(-0.7, 0.9, 96).view(1, 3, 32).to(device)
    anchor = torch.linspace(-0.5, 0.4, 32).to(device)
    with torch.no_grad():
        s, p = trt_head(table[ids][None], logp[None], hidden, anchor[None])
        ms, mp = mo_scores(mo_head, ids, logp, hidden[0], anchor, table)
    want_s = torch.tensor(GOLDEN_START, device=device)
    want_p = torch.tensor(GOLDEN_PAIRS, device=device).view(2, 3, 3)
    for what, got_s, got_p in (("TensorRT-LLM", s[0], p[0]), ("Model-Optimizer", ms, mp)):
        es, ep = (got_s - want_s).abs().max().item(), (got_p - want_p).abs().max().item()
        if max(es, ep) > 2e-5 + 2e-5 * 2.1:
            fail(f"the {what} head misses the golden vector (start {es:.2e}, pairs {ep:.2e}): "
                 "the reference copy under --ref-dir is not the published code")
    return max((s[0] - ms).abs().max().item(), (p[0] - mp).abs().max().item())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ref-dir", required=True, help="folder with dflash/, trtllm/, modelopt/ reference sources")
    ap.add_argument("--inputs", required=True, help="inputs.safetensors from LilicorrOracle.DumpInputs")
    ap.add_argument("--drafter", required=True, help="the drafter checkpoint folder (config.json, model.safetensors)")
    ap.add_argument("--out", required=True, help="reference.safetensors to write")
    ap.add_argument("--summary", help="a JSON summary to write beside it")
    ap.add_argument("--device", default="cpu", help="torch device (default cpu: fp32, no TF32)")
    a = ap.parse_args()

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_grad_enabled(False)
    dev = torch.device(a.device)

    qwen3_names()
    dflash = load_module("lilicorr_ref_dflash", os.path.join(a.ref_dir, "dflash", "model.py"))
    trt = load_module("lilicorr_ref_trtllm", os.path.join(a.ref_dir, "trtllm", "modeling_lilicorr.py"))
    mo = load_module("lilicorr_ref_modelopt", os.path.join(a.ref_dir, "modelopt", "modeling_lilicorr.py"))
    golden_diff = golden_check(trt, mo, dev)

    # The drafter: config and tensors as tandem wrote them.
    with open(os.path.join(a.drafter, "config.json")) as f:
        cfg = json.load(f)
    dcfg = cfg.get("dflash_config", {})
    raw = read_safetensors(os.path.join(a.drafter, "model.safetensors"))
    raw = {k[6:] if k.startswith("model.") else k: v.float() for k, v in raw.items()}
    backbone_sd = {k: v for k, v in raw.items() if not k.startswith("lilicorr.")}
    head_sd = {k[len("lilicorr."):]: v for k, v in raw.items() if k.startswith("lilicorr.")}
    if not head_sd:
        fail(f"{a.drafter}: no lilicorr.* tensors (synthesize the drafter with head=true)")

    from transformers.models.qwen3.modeling_qwen3 import Qwen3Config

    theta = float(cfg.get("rope_theta", 1e6))
    keys = {k: v for k, v in cfg.items() if k not in ("architectures", "torch_dtype", "model_type")}
    for attempt in range(2):
        qcfg = make_config(Qwen3Config, keys)
        qcfg._attn_implementation = "eager"
        model = dflash.DFlashDraftModel(qcfg).to(dev, torch.float32).eval()
        hd = qcfg.head_dim
        want_inv = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
        got_inv = model.rotary_emb.inv_freq.float().cpu()
        if torch.allclose(got_inv, want_inv, rtol=1e-5):
            break
        if attempt:
            fail(f"the installed transformers did not take rope_theta {theta} (inv_freq {got_inv[:3].tolist()} ...)")
        keys["rope_parameters"] = {"rope_type": "default", "rope_theta": theta}  # transformers 5 naming
    missing, unexpected = model.load_state_dict({k: v.to(dev) for k, v in backbone_sd.items()}, strict=False)
    if missing or unexpected:
        fail(f"{a.drafter}: backbone tensors do not fit DFlashDraftModel: missing {missing}, unexpected {unexpected}")
    if list(model.target_layer_ids) != list(dcfg["target_layer_ids"]):
        fail(f"target_layer_ids {model.target_layer_ids} != config {dcfg['target_layer_ids']}")

    B = int(cfg["block_size"])
    S = B - 1
    H = int(cfg["hidden_size"])
    mask = int(dcfg["mask_token_id"])
    eps = float(cfg["rms_norm_eps"])
    head_args = dict(model_hidden_size=H, hidden_size=int(dcfg.get("lilicorr_hidden_size") or H),
                     num_layers=int(dcfg["lilicorr_num_layers"]), num_heads=int(dcfg["lilicorr_num_heads"]),
                     mlp_ratio=float(dcfg["lilicorr_mlp_ratio"]), block_size=B,
                     candidate_topk=int(dcfg["lilicorr_candidate_topk"]), factor_dim=int(dcfg["lilicorr_factor_dim"]),
                     rms_norm_eps=eps, vector_eps=float(dcfg["lilicorr_vector_eps"]),
                     logit_scale=float(dcfg["lilicorr_logit_scale"]))
    K = head_args["candidate_topk"]
    trt_head = trt.LiLiCorrHead(**head_args).to(dev).eval()
    trt_head.load_state_dict({k: v.to(dev) for k, v in trt._normalize_lilicorr_weights(head_sd).items()}, strict=True)
    mo_head = mo.LiLiCorrHead(**head_args).to(dev).eval()
    mo_head.load_state_dict({k: v.to(dev) for k, v in to_export(trt._normalize_lilicorr_weights(head_sd)).items()},
                            strict=True)
    out_mult = float(dcfg.get("output_multiplier", cfg.get("output_multiplier", 1.0)) or 1.0)
    emb_scale = float(dcfg.get("input_embedding_scale", cfg.get("input_embedding_scale", 1.0)) or 1.0)
    softcap = dcfg.get("final_logit_softcapping", cfg.get("final_logit_softcapping"))

    # The inputs tandem used.
    inp = read_safetensors(a.inputs)
    tokens = inp["tokens"].long()
    feats = inp["feats"].float().to(dev)
    table = inp["embedding"].float().to(dev)
    lm_head = inp["lm_head"].float().to(dev)
    N = tokens.numel()
    if feats.shape != (N, len(dcfg["target_layer_ids"]) * H):
        fail(f"{a.inputs}: feats is {tuple(feats.shape)}, expected ({N}, {len(dcfg['target_layer_ids']) * H})")
    ctx = model.hidden_norm(model.fc(feats))  # every position's context row (the anchor is one of them)

    out = {"meta.seed": inp["meta.seed"], "meta.prompt_len": inp["meta.prompt_len"], "tokens": inp["tokens"],
           "feats": inp["feats"].float(), "ctx": ctx}
    summary = {"torch": torch.__version__, "device": str(dev), "golden_trt_vs_modelopt": golden_diff, "cases": {}}
    import transformers

    summary["transformers"] = transformers.__version__
    worst_heads = 0.0
    for case in ("natural", "forced"):
        committed = inp[f"{case}.committed"].long().tolist()
        acc = {k: [] for k in ("rows", "cand", "logp", "start", "pairs", "path", "drafts", "margin", "argmax",
                               "argmax_margin")}
        natural_acc = []
        for n in committed:
            T = n - 1
            if T < 1 or n > N:
                fail(f"{a.inputs}: {case} commits {n} tokens of {N}; a block needs 2 ... N")
            ids = torch.full((1, B), mask, dtype=torch.long, device=dev)
            ids[0, 0] = tokens[n - 1]
            noise = table[ids] * emb_scale
            pos = torch.arange(T + B, device=dev)[None]
            h = model(position_ids=pos, noise_embedding=noise, target_hidden=feats[None, :T], past_key_values=None,
                      use_cache=False)
            rows = h[0, 1:]  # [S, H], after norm
            logits = (rows @ lm_head.T) * out_mult
            if softcap:
                logits = softcap * torch.tanh(logits / softcap)
            logp_all = torch.log_softmax(logits.float(), dim=-1)
            top = torch.topk(logp_all, K + 1, dim=-1)
            cand, lp = top.indices[:, :K], top.values[:, :K]
            anchor = ctx[T - 1]
            s, p = trt_head(table[cand][None], lp[None], rows[None], anchor[None])
            ms, mp = mo_scores(mo_head, cand, lp, rows, anchor, table)
            diff = max((s[0] - ms).abs().max().item(), (p[0] - mp).abs().max().item())
            worst_heads = max(worst_heads, diff)
            walk = trt.lilicorr_proposal_logits(s, p)[0]  # [S, K]: the rows the greedy path read
            path = walk.argmax(-1)
            drafts = cand.gather(1, path[:, None])[:, 0]
            acc["rows"].append(rows)
            acc["cand"].append(cand.int())
            acc["logp"].append(top.values)
            acc["start"].append(s[0])
            acc["pairs"].append(p[0])
            acc["path"].append(path.int())
            acc["drafts"].append(drafts.int())
            acc["margin"].append(top2_margin(walk))
            acc["argmax"].append(logits.argmax(-1).int())
            acc["argmax_margin"].append(top2_margin(logits))
            m = 0
            while m < S and n + m < N and int(drafts[m]) == int(tokens[n + m]):
                m += 1
            natural_acc.append(m)
        out[f"{case}.committed"] = inp[f"{case}.committed"]
        for k, v in acc.items():
            out[f"{case}.{k}"] = torch.stack(v)
        summary["cases"][case] = {"committed": committed, "reference_accepts": natural_acc,
                                  "min_margin": float(out[f"{case}.margin"].min())}
    summary["trt_vs_modelopt_max_abs"] = worst_heads
    if worst_heads > 1e-4:
        fail(f"the TensorRT-LLM and Model-Optimizer heads differ by {worst_heads:.2e} (> 1e-4)")
    write_safetensors(a.out, {k: v.detach().cpu() for k, v in out.items()})
    text = json.dumps(summary, indent=1)
    if a.summary:
        with open(a.summary, "w") as f:
            f.write(text + "\n")
    print(text)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
