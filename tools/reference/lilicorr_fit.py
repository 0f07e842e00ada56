#!/usr/bin/env python3
"""Fits a tiny LiLiCorr drafter to its tiny target (issue #20: drafting tests with partial acceptance).

Reads what `test_spec_lilicorr --gtest_filter=LilicorrOracle.DumpFitData` wrote (fit.safetensors: the
tiny fixture target's greedy continuations of many prompts, the target's taps at every position, its
embedding and LM head; drafter/: the synthesized random checkpoint to start from), trains every drafter
tensor (the DFlash backbone and the LiLiCorr head; the target's embedding and LM head stay frozen) with
Adam, and writes the fitted checkpoint in the layout tandem loads: the synthesized config.json and a
model.safetensors with the same tensor names, shapes and dtype.

The forward is ours, written from shared/spec/lilicorr.md (sections 1 and 2), batched over every block
start of a sequence: block start n (n committed tokens) sees the context rows hidden_norm(fc(taps)) of
positions 0 ... n-2 and the block [tokens[n-1], mask x 7] at positions n-1 ... n+6; its rows 1 ... 7
should draft tokens[n ... n+6]. Losses: the backbone's cross-entropy per slot (weighted toward the first
slots, which decide acceptance), and the head's cross-entropy on its start scores and on its pair scores
along the true path, where the true token is among the top-K candidates.

Deterministic on one CPU thread for fixed seeds (--seed). Needs torch only (1.13 works).
Usage: lilicorr_fit.py --data DIR --out DIR [--steps N] [--holdout N] [--stop-at RATE --eval-every N]
(tests/fixtures/lilicorr/fitted/README.md gives the fixture's command.)
"""

import argparse
import json
import math
import os
import shutil
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lilicorr_ref import fail, read_safetensors, write_safetensors  # noqa: E402


class Geometry:
    def __init__(self, cfg):
        d = cfg["dflash_config"]
        self.H = int(cfg["hidden_size"])
        self.layers = int(cfg["num_hidden_layers"])
        self.heads = int(cfg["num_attention_heads"])
        self.kv = int(cfg["num_key_value_heads"])
        self.hd = int(cfg["head_dim"])
        self.eps = float(cfg["rms_norm_eps"])
        self.theta = float(cfg.get("rope_theta", 1e6))
        self.B = int(cfg["block_size"])
        self.mask = int(d["mask_token_id"])
        self.taps = list(d["target_layer_ids"])
        self.K = int(d["lilicorr_candidate_topk"])
        self.Hh = int(d.get("lilicorr_hidden_size") or self.H)
        self.hl = int(d["lilicorr_num_layers"])
        self.hh = int(d["lilicorr_num_heads"])
        self.veps = float(d["lilicorr_vector_eps"])
        self.scale = float(d["lilicorr_logit_scale"])
        for k in ("input_embedding_scale", "output_multiplier", "final_logit_softcapping"):
            if d.get(k, cfg.get(k)) not in (None, 1, 1.0):
                fail(f"config.json: {k} = {d.get(k, cfg.get(k))}; this fitter supports only the default")


def rms(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rope(x, pos, theta):
    """x [..., L, hd] at positions pos [..., L] (rotate-half convention)."""
    hd = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
    f = pos[..., None].float() * inv
    e = torch.cat((f, f), -1)
    h = hd // 2
    rot = torch.cat((-x[..., h:], x[..., :h]), -1)
    return x * e.cos() + rot * e.sin()


def lin(p, name, x):
    y = x @ p[name + ".weight"].T
    b = p.get(name + ".bias")
    return y if b is None else y + b


def backbone(p, g, feats, tokens, starts, table):
    """One sequence: feats [N, taps*H], tokens [N], block starts [M] (committed counts n) ->
    (rows [M, B-1, H] after norm, context rows [N, H])."""
    N = feats.shape[0]
    M = starts.shape[0]
    B, H, nh, nkv, hd = g.B, g.H, g.heads, g.kv, g.hd
    ctx = rms(feats @ p["fc.weight"].T, p["hidden_norm.weight"], g.eps)  # [N, H]
    ids = torch.full((M, B), g.mask, dtype=torch.long)
    ids[:, 0] = tokens[starts - 1]
    x = table[ids]  # [M, B, H]
    bpos = (starts - 1)[:, None] + torch.arange(B)[None]  # [M, B]
    cpos = torch.arange(N)
    visible = cpos[None, :] < (starts - 1)[:, None]  # [M, N]: context rows 0 ... n-2
    cmask = torch.zeros(M, N).masked_fill(~visible, float("-inf"))[:, None, None, :]
    rep = nh // nkv
    for i in range(g.layers):
        q_ = f"layers.{i}."
        a = q_ + "self_attn."
        h = rms(x, p[q_ + "input_layernorm.weight"], g.eps)
        q = rms((h @ p[a + "q_proj.weight"].T).view(M, B, nh, hd), p[a + "q_norm.weight"], g.eps).transpose(1, 2)
        q = rope(q, bpos[:, None, :], g.theta)  # [M, nh, B, hd]
        kc = rms((ctx @ p[a + "k_proj.weight"].T).view(N, nkv, hd), p[a + "k_norm.weight"], g.eps).transpose(0, 1)
        kc = rope(kc, cpos[None], g.theta)  # [nkv, N, hd]
        vc = (ctx @ p[a + "v_proj.weight"].T).view(N, nkv, hd).transpose(0, 1)
        kb = rms((h @ p[a + "k_proj.weight"].T).view(M, B, nkv, hd), p[a + "k_norm.weight"], g.eps).transpose(1, 2)
        kb = rope(kb, bpos[:, None, :], g.theta)  # [M, nkv, B, hd]
        vb = (h @ p[a + "v_proj.weight"].T).view(M, B, nkv, hd).transpose(1, 2)
        kc, vc = kc.repeat_interleave(rep, 0), vc.repeat_interleave(rep, 0)
        kb, vb = kb.repeat_interleave(rep, 1), vb.repeat_interleave(rep, 1)
        sc = torch.einsum("mhqd,hnd->mhqn", q, kc) / math.sqrt(hd) + cmask
        sb = torch.einsum("mhqd,mhkd->mhqk", q, kb) / math.sqrt(hd)
        w = torch.softmax(torch.cat((sc, sb), -1), -1)
        o = torch.einsum("mhqn,hnd->mhqd", w[..., :N], vc) + torch.einsum("mhqk,mhkd->mhqd", w[..., N:], vb)
        x = x + o.transpose(1, 2).reshape(M, B, nh * hd) @ p[a + "o_proj.weight"].T
        h = rms(x, p[q_ + "post_attention_layernorm.weight"], g.eps)
        m = q_ + "mlp."
        x = x + (F.silu(h @ p[m + "gate_proj.weight"].T) * (h @ p[m + "up_proj.weight"].T)) @ p[m + "down_proj.weight"].T
    x = rms(x, p["norm.weight"], g.eps)
    return x[:, 1:], ctx


def head(p, g, cand, logp, rows, anchor, table):
    """Blocks: cand [M, S, K], logp [M, S, K], rows [M, S, H], anchor [M, H] ->
    (start [M, K], pairs [M, S-1, K, K]), scaled by logit_scale (spec section 2, steps 3-8)."""
    M, S, K = cand.shape
    Hh, nh = g.Hh, g.hh
    P = "lilicorr."
    e = table[cand]
    x = lin(p, P + "token_proj", e) if (P + "token_proj.weight") in p else e
    mx = logp.max(-1, keepdim=True).values
    rank = torch.arange(K, dtype=torch.float32).expand(M, S, K) / max(K - 1, 1)
    feat = torch.stack((logp, logp.exp(), logp - mx, rank, (torch.arange(K) == 0).float().expand(M, S, K)), -1)
    feat = F.layer_norm(feat, (5,), p[P + "feature_mlp.0.weight"], p[P + "feature_mlp.0.bias"], 1e-5)
    x = x + lin(p, P + "pass_hidden_proj", rows)[:, :, None, :]
    x = x + lin(p, P + "feature_mlp.3", F.silu(lin(p, P + "feature_mlp.1", feat)))
    x = x + p[P + "slot_embedding"].reshape(S, 1, Hh) + p[P + "rank_embedding"].reshape(1, K, Hh)
    x = x.reshape(M, S * K, Hh)
    slot = torch.arange(S * K) // K
    rel = p[P + "relative_slot_bias"][:, slot[:, None] - slot[None, :] + g.B - 1]  # [nh, n, n]
    bias = rel + p[P + "same_slot_bias"][:, None, None] * (slot[:, None] == slot[None, :]).float()
    hd = Hh // nh
    for j in range(g.hl):
        L = f"{P}layers.{j}."
        h = rms(x, p[L + "attn_norm.weight"], g.eps)
        qkv = h @ p[L + "attn.in_proj_weight"].T + p[L + "attn.in_proj_bias"]
        q, k, v = (t.reshape(M, S * K, nh, hd).transpose(1, 2) for t in qkv.chunk(3, -1))
        w = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(hd) + bias, -1)
        x = x + lin(p, L + "attn.out_proj", (w @ v).transpose(1, 2).reshape(M, S * K, Hh))
        h = rms(x, p[L + "mlp_norm.weight"], g.eps)
        x = x + lin(p, L + "mlp.2", F.silu(lin(p, L + "mlp.0", h)))
    y = rms(x, p[P + "output_norm.weight"], g.eps)  # [M, n, Hh]
    al = rms(lin(p, P + "context_proj", anchor), p[P + "anchor_norm.weight"], g.eps)[:, None, :]  # [M, 1, Hh]
    gg = F.silu(lin(p, P + "factor_input_proj", torch.cat((y, al.expand_as(y), y * al), -1)))

    def unit(t):
        return t / t.norm(dim=-1, keepdim=True).clamp_min(g.veps)

    o = unit(lin(p, P + "out_head", gg)).reshape(M, S, K, -1)
    i = unit(lin(p, P + "in_head", gg)).reshape(M, S, K, -1)
    ao = unit(lin(p, P + "anchor_out_head", al[:, 0]))
    start = torch.einsum("mf,mkf->mk", ao, i[:, 0]) * g.scale
    pairs = torch.einsum("mskf,msjf->mskj", o[:, :-1], i[:, 1:]) * g.scale
    return start, pairs


def block_losses(p, g, seq, lm_head, table, slot_w):
    """Loss terms and counts for all block starts of one sequence (a dict of tensors / ints)."""
    tokens, feats, starts = seq
    S, K = g.B - 1, g.K
    rows, ctx = backbone(p, g, feats, tokens, starts, table)
    N = tokens.shape[0]
    idx = starts[:, None] + torch.arange(S)[None]  # [M, S]
    valid = idx < N
    labels = tokens[idx.clamp(max=N - 1)]
    logits = rows @ lm_head.T
    logp_all = torch.log_softmax(logits, -1)
    ce = F.nll_loss(logp_all.reshape(-1, logits.shape[-1]), labels.reshape(-1), reduction="none").view_as(labels)
    bb = (ce * valid * slot_w).sum() / (valid * slot_w).sum()
    top = torch.topk(logp_all.detach(), K, -1)  # the candidates: a discrete choice
    cand = top.indices
    lp = logp_all.gather(-1, cand)  # values keep their gradient into the backbone
    start, pairs = head(p, g, cand, lp, rows, ctx[starts - 2], table)
    hit = (cand == labels[..., None]) & valid[..., None]  # [M, S, K]
    inset = hit.any(-1)
    true_k = hit.float().argmax(-1)  # [M, S]
    hs = F.cross_entropy(start, true_k[:, 0], reduction="none")
    h0 = (hs * inset[:, 0]).sum()
    both = inset[:, :-1] & inset[:, 1:]
    prow = pairs.gather(2, true_k[:, :-1, None, None].expand(-1, -1, 1, K))[:, :, 0]  # [M, S-1, K]
    hp = F.cross_entropy(prow.reshape(-1, K), true_k[:, 1:].reshape(-1), reduction="none").view_as(both)
    hw = slot_w[1:] / slot_w[0]
    h1 = (hp * both * hw).sum()
    hn = inset[:, 0].sum() + (both * hw).sum()
    # Drafts as tandem makes them: the greedy walk over the head's scores, and the accepted prefix.
    with torch.no_grad():
        path = [start.argmax(-1)]
        for s in range(S - 1):
            path.append(pairs[:, s].gather(1, path[-1][:, None, None].expand(-1, 1, K))[:, 0].argmax(-1))
        path = torch.stack(path, 1)
        drafts = cand.gather(2, path[..., None])[..., 0]
        ok = ((drafts == labels) & valid).long().cumprod(1)
        accepted = ok.sum().item()
        argmax_ok = ((cand[..., 0] == labels) & valid).long().cumprod(1).sum().item()
    return {"bb": bb, "head": (h0 + h1) / hn.clamp_min(1), "accepted": accepted, "argmax_accepted": argmax_ok,
            "blocks": int(starts.shape[0]), "drafts": int(starts.shape[0]) * S}


def sequences(data, lo, hi, after_prompt):
    """(tokens, feats, block starts) of sequences lo ... hi-1; block starts n = 2 ... N-1 (n committed
    tokens, at least one context row and one anchor), or only those after the prompt."""
    off = data["offsets"].long().tolist()
    pl = data["prompt_lens"].long().tolist()
    out = []
    for i in range(lo, hi):
        t = data["tokens"][off[i] : off[i + 1]].long()
        f = data["feats"][off[i] : off[i + 1]].float()
        first = pl[i] + 1 if after_prompt else 2
        out.append((t, f, torch.arange(max(first, 2), t.shape[0])))
    return out


def evaluate(p, g, seqs, lm_head, table, slot_w):
    acc = arg = drafts = 0
    with torch.no_grad():
        for s in seqs:
            r = block_losses(p, g, s, lm_head, table, slot_w)
            acc += r["accepted"]
            arg += r["argmax_accepted"]
            drafts += r["drafts"]
    return acc / max(drafts, 1), arg / max(drafts, 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True, help="folder LilicorrOracle.DumpFitData wrote (fit.safetensors, drafter/)")
    ap.add_argument("--out", required=True, help="the fitted checkpoint folder to write")
    ap.add_argument("--steps", type=int, default=600, help="Adam steps (one sequence batch each)")
    ap.add_argument("--batch", type=int, default=8, help="sequences per step")
    ap.add_argument("--blocks", type=int, default=16, help="block starts drawn per sequence and step")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--holdout", type=int, default=16, help="last sequences kept out of fitting (reported)")
    ap.add_argument("--seed", type=int, default=20)
    ap.add_argument("--stop-at", type=float, default=0.0,
                    help="stop once the fitting sequences' acceptance reaches this (checked every --eval-every)")
    ap.add_argument("--eval-every", type=int, default=200, help="report acceptance every N steps (0: at the end only)")
    a = ap.parse_args()

    torch.manual_seed(a.seed)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    with open(os.path.join(a.data, "drafter", "config.json")) as f:
        cfg = json.load(f)
    g = Geometry(cfg)
    src = read_safetensors(os.path.join(a.data, "drafter", "model.safetensors"))
    dtype = {n: t.dtype for n, t in src.items()}
    p = {n: t.float().clone().requires_grad_(True) for n, t in src.items()}
    data = read_safetensors(os.path.join(a.data, "fit.safetensors"))
    table = data["embedding"].float()
    lm_head = data["lm_head"].float()
    nseq = data["offsets"].numel() - 1
    if data["feats"].shape[1] != len(g.taps) * g.H:
        fail(f"{a.data}/fit.safetensors: feats is {tuple(data['feats'].shape)}, expected [N, {len(g.taps) * g.H}]")
    if not 0 <= a.holdout < nseq or a.blocks < 1:
        fail(f"--holdout {a.holdout} / --blocks {a.blocks}: the data holds {nseq} sequences; blocks must be >= 1")
    train = sequences(data, 0, nseq - a.holdout, False)
    held = sequences(data, nseq - a.holdout, nseq, True)
    train_eval = sequences(data, 0, min(16, nseq - a.holdout), True)
    S = g.B - 1
    slot_w = torch.tensor([0.8**s for s in range(S)])

    opt = torch.optim.Adam(p.values(), lr=a.lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / max(1, min(100, a.steps // 10))) * 0.5 * (1 + math.cos(math.pi * s / a.steps)))
    gen = torch.Generator().manual_seed(a.seed)
    t0 = time.time()
    print(f"{nseq - a.holdout} fitting sequences, {a.holdout} held out; start: acceptance (head, argmax) "
          f"held-out {evaluate(p, g, held, lm_head, table, slot_w)}")
    for step in range(a.steps):
        pick = torch.randint(0, len(train), (a.batch,), generator=gen).tolist()
        opt.zero_grad()
        bb = hd = 0.0
        for i in pick:
            t, f, st = train[i]
            st = st[torch.randperm(st.shape[0], generator=gen)[: a.blocks]]
            r = block_losses(p, g, (t, f, st), lm_head, table, slot_w)
            ((r["bb"] + r["head"]) / a.batch).backward()
            bb += r["bb"].item() / a.batch
            hd += r["head"].item() / a.batch
        opt.step()
        sched.step()
        if step % 100 == 0 or step == a.steps - 1:
            print(f"step {step}: backbone ce {bb:.3f}, head ce {hd:.3f} ({time.time() - t0:.0f} s)", flush=True)
        if a.eval_every and step % a.eval_every == a.eval_every - 1:
            fit = evaluate(p, g, train_eval, lm_head, table, slot_w)
            print(f"  step {step}: acceptance (head, argmax): fitting {fit}, "
                  f"held-out {evaluate(p, g, held, lm_head, table, slot_w)}", flush=True)
            if a.stop_at and fit[0] >= a.stop_at:
                print(f"  fitting acceptance {fit[0]:.3f} >= --stop-at {a.stop_at}: stopping", flush=True)
                break

    # Store as the source stored it (bf16 rounding included), and report on what tandem will load.
    out = {n: t.detach().to(dtype[n]) for n, t in p.items()}
    q = {n: t.float() for n, t in out.items()}
    fit_acc = evaluate(q, g, train_eval, lm_head, table, slot_w)
    held_acc = evaluate(q, g, held, lm_head, table, slot_w)
    os.makedirs(a.out, exist_ok=True)
    shutil.copy(os.path.join(a.data, "drafter", "config.json"), os.path.join(a.out, "config.json"))
    write_safetensors(os.path.join(a.out, "model.safetensors"), out)
    summary = {"torch": torch.__version__, "steps": a.steps, "steps_run": step + 1, "stop_at": a.stop_at, "batch": a.batch, "lr": a.lr, "seed": a.seed,
               "fitting_sequences": nseq - a.holdout, "held_out": a.holdout,
               "acceptance_fitting": fit_acc[0], "acceptance_held_out": held_acc[0],
               "argmax_acceptance_fitting": fit_acc[1], "argmax_acceptance_held_out": held_acc[1],
               "seconds": round(time.time() - t0)}
    print(json.dumps(summary, indent=1))
    print(f"wrote {a.out} ({os.path.getsize(os.path.join(a.out, 'model.safetensors'))} bytes of tensors)")


if __name__ == "__main__":
    main()
