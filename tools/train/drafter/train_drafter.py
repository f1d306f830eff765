#!/usr/bin/env python3
"""tools/train/drafter/train_drafter.py — trains the tiny DSpark drafter against a frozen target.

Role: the one entry point of the drafter pipeline (README.md has the reproducing commands).
Subcommands:
  prepare  (CPU) sample prompts / corpus windows from tokens.npz (tools/train/tokenize_corpus.py)
           -> data.npz: train prompts, train corpus windows, held-out prompts (+ channel ids).
  train    (GPU; CPU with --small) load the target GGUF (dequantized, float32), extend every
           prompt greedily with the target (fp32, full recompute), run ONE fp32 target pass
           over all sequences (captures of the target layers + logits, kept on the device), then
           train a DSparkDrafter with the DeepSpec recipe and evaluate it on the held-out
           greedy continuations. Writes drafter weight shards (fp16 big / fp32 small tensors,
           each < 16 MB), eval sequences and a JSON log.
  gen-cpu  (CPU) greedy sequences of a data file's prompts with the C++ engine
           (tools/greedy-gen: the runtime's own greedy tokens), sharded over processes
           -> gen_seqs.npz for `train --gen-from` (no GPU generation then).
  export   (CPU) shards -> support GGUF (export_gguf.py: Q8_0 / F16 / F32, experts q2 or q4).
  eval     (CPU or GPU) acceptance of a support GGUF on the held-out sequences of a train run.

Training recipe (dspark.md §1.1, DeepSpec): per anchor P (token x_P, context = target rows of
positions < P) the block [x_P, MASK…] gives B slots; slot k predicts position P+1+k. Teacher
forcing: the Markov prev token of slot k is x_{P+k}. Loss per slot, weighted by exp(−k/γ):
  w_ce·CE(Z_k, y_k) + w_l1·‖softmax(Z_k) − p_t‖₁ + w_bce·BCE(σ(ℓ_k), c*_k)
with y_k = the target's argmax at row P+k, p_t its distribution there, and c*_k = 1 if
argmax Z_k == y_k (greedy acceptance, --conf-target greedy) or 1 − ½‖p_d − p_t‖₁ (tv).
Routing balance: the selection bias exp_probs_b moves by --bias-rate against each expert's
load deviation after every step (auxiliary-loss-free, as the target's trainer does).

Acceptance (T = 0, PyTorch): on held-out prompts extended greedily by the target, at every
anchor P of the generated part the drafter proposes with its own Markov chain (prev = its
previous draft); accepted = longest prefix equal to the target's greedy tokens, cut at the
first position whose σ(confidence) < threshold (the C++ proposer's rule). Reported: per-slot
conditional acceptance, mean accepted per proposal, and a simulated speculative decode
(anchor advances by accepted + 1) giving tokens per target verify cycle.
Determinism: data, init and anchor sampling depend only on --seed; step count from --steps
(or derived once from --time-budget and logged).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from dspark_ref import (REPO, DSparkConfig, DSparkDrafter, accepted_lengths,  # noqa: E402
                        target_forward_capture)

sys.path.insert(0, str(REPO / "tools" / "reference"))
CHANNELS = ("structured", "code", "english", "italian")
THRESHOLDS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


def log(msg: str) -> None:
    print(msg, flush=True)


# ----------------------------------------------------------------------------- prepare
def cmd_prepare(a) -> int:
    data = dict(np.load(a.tokens))
    g = np.random.default_rng(a.seed)
    sizes = {c: data[f"{c}.train"].size for c in CHANNELS}
    w = np.array([math.sqrt(sizes[c]) for c in CHANNELS])
    w = w / w.sum()

    def windows(split: str, n: int, length: int, chans: np.ndarray) -> np.ndarray:
        out = np.empty((n, length), dtype=np.int32)
        for i, c in enumerate(chans):
            s = data[f"{CHANNELS[c]}.{split}"]
            off = int(g.integers(0, s.size - length - 1))
            out[i] = s[off:off + length]
        return out

    base = dict(np.load(a.append_to)) if a.append_to else None
    gch = g.choice(len(CHANNELS), size=a.n_gen, p=w)
    cch = g.choice(len(CHANNELS), size=a.n_corpus, p=w)
    ech = np.repeat(np.arange(len(CHANNELS)), a.n_eval_per_channel)
    out = {"gen_prompts": windows("train", a.n_gen, a.prompt_len, gch),
           "corpus": windows("train", a.n_corpus, a.seq_len, cch),
           "eval_prompts": windows("heldout", len(ech), a.prompt_len, ech),
           "eval_channel": ech.astype(np.int32),
           "seq_len": np.int32(a.seq_len), "prompt_len": np.int32(a.prompt_len)}
    if base is not None:  # more generation prompts; the base file's corpus and held-out set stay
        if int(base["prompt_len"]) != a.prompt_len or int(base["seq_len"]) != a.seq_len:
            raise SystemExit(f"--append-to {a.append_to}: different --prompt-len/--seq-len")
        out.update({k: base[k] for k in ("corpus", "eval_prompts", "eval_channel")})
        out["gen_prompts"] = np.concatenate([base["gen_prompts"], out["gen_prompts"]])
        ech = out["eval_channel"]
        log(f"appended {a.n_gen} generation prompts (seed {a.seed}) to {a.append_to}")
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(a.out, **out)
    log(f"wrote {a.out}: gen {out['gen_prompts'].shape[0]}x{a.prompt_len}, "
        f"corpus {out['corpus'].shape[0]}x{a.seq_len}, "
        f"eval {len(ech)}x{a.prompt_len}")
    return 0


def reuse_rows(path: str, flag: str, prompts: np.ndarray, T: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows [N, T] int64 of an earlier gen_seqs.npz (same target) whose first L0 tokens equal
    prompts [N, L0], and the indices of the prompts it does not hold (their rows are left 0)."""
    cached = np.load(path)["seqs"].astype(np.int64)
    if cached.shape[1] != T:
        raise SystemExit(f"{flag} {path}: sequences of {cached.shape[1]} tokens, want {T}")
    L0 = prompts.shape[1]
    by_prompt = {row[:L0].tobytes(): row for row in cached}
    p64 = prompts.astype(np.int64)
    rows = np.zeros((p64.shape[0], T), dtype=np.int64)
    todo = []
    for i in range(p64.shape[0]):
        row = by_prompt.get(p64[i].tobytes())
        if row is None:
            todo.append(i)
        else:
            rows[i] = row
    log(f"{flag} {path}: {p64.shape[0] - len(todo)} of {p64.shape[0]} sequences reused, {len(todo)} to generate")
    return rows, np.array(todo, dtype=np.int64)


# ----------------------------------------------------------------------------- target passes
@torch.no_grad()
def greedy_extend(target, prompts: torch.Tensor, total_len: int, chunk: int) -> torch.Tensor:
    """prompts [N, L0] -> [N, total_len]: greedy continuation, full recompute per token
    (the reference is causal, so this equals sequential decode)."""
    outs = []
    for i in range(0, prompts.shape[0], chunk):
        x = prompts[i:i + chunk]
        while x.shape[1] < total_len:
            nxt = target(x)[:, -1].float().argmax(-1)
            x = torch.cat([x, nxt[:, None]], 1)
        outs.append(x)
    return torch.cat(outs)


@torch.no_grad()
def target_pass(target, seqs: torch.Tensor, layers: list[int], chunk: int,
                logits_dtype=torch.bfloat16):
    """fp32 target over seqs [N, T] -> captures [N, T, NC·E] f32, logits [N, T, V] (dtype),
    argmax labels [N, T] (row p = the target's greedy token for position p+1)."""
    caps = lgs = labs = None  # filled in place: a list + torch.cat would hold everything twice
    for i in range(0, seqs.shape[0], chunk):
        c, lg = target_forward_capture(target, seqs[i:i + chunk], layers)
        if caps is None:
            n = seqs.shape[0]
            caps = torch.empty((n, *c.shape[1:]), dtype=c.dtype, device=c.device)
            lgs = torch.empty((n, *lg.shape[1:]), dtype=logits_dtype, device=lg.device)
            labs = torch.empty(seqs.shape, dtype=torch.int64, device=lg.device)
        caps[i:i + chunk] = c
        labs[i:i + chunk] = lg.float().argmax(-1)
        lgs[i:i + chunk] = lg.to(logits_dtype)
        del c, lg
    return caps, lgs, labs


# ----------------------------------------------------------------------------- evaluation
@torch.no_grad()
def propose_all(dr: DSparkDrafter, target, seqs, caps, labels, p0: int, chunk: int):
    """Every anchor P in [p0, T−B] of every sequence -> (drafts, labels, conf logits) [n, B]
    and the (seq, P) of each row."""
    B, T = dr.dcfg.block_size, seqs.shape[1]
    emb, outw = target.t("token_embd.weight"), target.t("output.weight")
    res = {"drafts": [], "labels": [], "conf": [], "seq": [], "pos": []}
    for i in range(0, seqs.shape[0], chunk):
        s, c, lab = seqs[i:i + chunk], caps[i:i + chunk], labels[i:i + chunk]
        rows = dr.context_rows(c)
        P = torch.arange(p0, T - B + 1, device=s.device)
        bidx = torch.arange(s.shape[0], device=s.device).repeat_interleave(P.numel())
        pos = P.repeat(s.shape[0])
        ctx, mask = dr.gather_context(rows, bidx, pos)
        anchors = s[bidx, pos]
        y, U = dr.forward_blocks(anchors, pos, ctx, mask, emb, outw)
        d, cf = dr.greedy_chain(y, U, anchors)
        k = torch.arange(B, device=s.device)
        res["drafts"].append(d)
        res["labels"].append(lab[bidx[:, None], pos[:, None] + k[None, :]])
        res["conf"].append(cf)
        res["seq"].append(bidx + i)
        res["pos"].append(pos)
    return {k: torch.cat(v).cpu() for k, v in res.items()}


def acceptance_report(r: dict, channel: np.ndarray | None, p0: int, T: int, B: int) -> dict:
    d, lab, cf = r["drafts"], r["labels"], r["conf"]
    match = (d == lab)
    pref = torch.cumprod(match.int(), 1)
    cond = []
    for k in range(B):
        prev_ok = pref[:, k - 1].bool() if k else torch.ones_like(match[:, 0])
        n = int(prev_ok.sum())
        cond.append(float(match[prev_ok, k].float().mean()) if n else float("nan"))
    out = {"anchors": int(d.shape[0]), "cond_accept": cond,
           "mean_accept_all": float(pref.sum(1).float().mean()), "by_threshold": {}}
    seq = r["seq"].numpy()
    pos = r["pos"].numpy()
    n_seq = int(seq.max()) + 1
    for thr in THRESHOLDS:
        nd, na = accepted_lengths(d, lab, cf, thr)
        na_np = na.numpy()
        acc_at = np.zeros((n_seq, T), dtype=np.int64)
        acc_at[seq, pos] = na_np
        # simulated speculative decode per sequence: anchor advances by accepted + 1
        toks = cyc = 0
        for si in range(n_seq):
            P = p0
            while P <= T - B:
                a = int(acc_at[si, P])
                toks += a + 1
                cyc += 1
                P += a + 1
        e = {"mean_drafted": float(nd.float().mean()), "mean_accepted": float(na.float().mean()),
             "accept_rate": float(na.sum()) / max(1.0, float(nd.sum())),
             "tokens_per_cycle": toks / max(cyc, 1)}
        if channel is not None and thr in (0.0, 0.6):
            ch = channel[seq]
            e["mean_accepted_by_channel"] = {CHANNELS[c]: float(na_np[ch == c].mean())
                                             for c in range(len(CHANNELS)) if (ch == c).any()}
        out["by_threshold"][str(thr)] = e
    return out


def print_report(rep: dict, title: str) -> None:
    log(f"== acceptance ({title}): {rep['anchors']} anchors; conditional accept per slot "
        + " ".join(f"{c:.3f}" for c in rep["cond_accept"])
        + f"; mean accepted (no cut) {rep['mean_accept_all']:.3f}")
    log("   thr  drafted accepted rate   tok/cycle")
    for thr, e in rep["by_threshold"].items():
        log(f"   {float(thr):.1f}  {e['mean_drafted']:.3f}   {e['mean_accepted']:.3f}    "
            f"{e['accept_rate']:.3f}  {e['tokens_per_cycle']:.3f}")
    for thr in ("0.0", "0.6"):
        bc = rep["by_threshold"][thr].get("mean_accepted_by_channel")
        if bc:
            log(f"   by channel @{thr}: " + ", ".join(f"{k} {v:.3f}" for k, v in bc.items()))


# ----------------------------------------------------------------------------- weights I/O
def save_shards(dr: DSparkDrafter, out: Path, max_bytes: int = 12 << 20) -> list[str]:
    """Weights as .pt shards: tensors > 65536 elements in fp16, others fp32; each < max_bytes."""
    shards, cur, size = [], {}, 0
    for name, p, _ in dr.named_gguf_tensors():
        t = p.detach().cpu()
        t = t.half() if t.numel() > 65536 else t.float()
        nb = t.numel() * t.element_size()
        if cur and size + nb > max_bytes:
            shards.append(cur)
            cur, size = {}, 0
        cur[name] = t
        size += nb
    if cur:
        shards.append(cur)
    names = []
    for i, sh in enumerate(shards):
        fn = out / f"drafter_w{i}.pt"
        torch.save(sh, fn)
        names.append(fn.name)
    return names


def load_shards(dr: DSparkDrafter, run_dir: Path) -> None:
    got = {}
    for fn in sorted(run_dir.glob("drafter_w*.pt")):
        got.update(torch.load(fn, map_location="cpu"))
    with torch.no_grad():
        for name, p, _ in dr.named_gguf_tensors():
            p.copy_(got[name].float())


def drafter_config_from(run: dict) -> DSparkConfig:
    return DSparkConfig(**run["drafter_config"])


# ----------------------------------------------------------------------------- train
def cmd_train(a) -> int:
    from gguf_io import load_model
    torch.manual_seed(a.seed)
    dev = a.device
    t_all = time.time()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    target, _ = load_model(a.target, device=dev)
    target.eval()
    for p in target.parameters():
        p.requires_grad_(False)
    tcfg = target.cfg
    data = dict(np.load(a.data))
    T, L0 = int(data["seq_len"]), int(data["prompt_len"])
    gen_p = torch.from_numpy(data["gen_prompts"].astype(np.int64))
    corpus = torch.from_numpy(data["corpus"].astype(np.int64))
    eval_p = torch.from_numpy(data["eval_prompts"].astype(np.int64))
    eval_ch = data["eval_channel"]
    if a.small:
        gen_p, corpus = gen_p[:a.small_n], corpus[:a.small_n]
        keep = np.concatenate([np.where(eval_ch == c)[0][:max(1, a.small_n // 4)] for c in range(4)])
        eval_p, eval_ch = eval_p[keep], eval_ch[keep]
        T = min(T, a.small_len)
        corpus = corpus[:, :T]
    dcfg = DSparkConfig(n_stages=a.stages, block_size=a.block, markov_rank=a.rank).resolve(tcfg)
    B = dcfg.block_size
    log(f"target {a.target}: {tcfg.n_layer} layers, E {tcfg.n_embd}, V {tcfg.n_vocab}; drafter {dcfg}")

    if a.max_gen:
        gen_p = gen_p[:a.max_gen]
    t0 = time.time()
    want = torch.cat([gen_p, eval_p])
    both = torch.empty((want.shape[0], T), dtype=torch.int64)
    todo = list(range(want.shape[0]))
    if a.gen_from:  # greedy sequences of an earlier run of the same target (gen_seqs.npz)
        rows, missing = reuse_rows(a.gen_from, "--gen-from", want.numpy(), T)
        both.copy_(torch.from_numpy(rows))
        todo = missing.tolist()
    if todo:
        idx = torch.tensor(todo)
        both[idx] = greedy_extend(target, want[idx].to(dev), T, a.gen_chunk).cpu()
    both = both.to(dev)
    gen, ev = both[:gen_p.shape[0]], both[gen_p.shape[0]:]
    if dev.startswith("cuda"):
        torch.cuda.synchronize()
    t_gen = time.time() - t0
    np.savez_compressed(out / "gen_seqs.npz", seqs=both.cpu().numpy().astype(np.int32))
    log(f"greedy generation: {gen.shape[0]} train + {ev.shape[0]} eval sequences of {T} in {t_gen:.1f}s"
        + (f" (from {a.gen_from})" if a.gen_from else ""))
    seqs = torch.cat([gen, corpus.to(dev)])
    t0 = time.time()
    caps, logits, labels = target_pass(target, seqs, dcfg.target_layers, a.pass_chunk)
    ecaps, _, elabels = target_pass(target, ev, dcfg.target_layers, a.pass_chunk)
    consist = float((labels[:gen.shape[0], L0 - 1:T - 1] == gen[:, L0:]).float().mean())
    log(f"target pass: {seqs.shape[0]} sequences in {time.time() - t0:.1f}s; greedy label "
        f"consistency {consist:.5f}")
    if a.labels == "sequence":  # the generated part's own next tokens (what the runtime verifies)
        labels[:gen.shape[0], L0 - 1:T - 1] = gen[:, L0:]
        elabels[:, L0 - 1:T - 1] = ev[:, L0:]
        log("labels: the sequences' own tokens for the generated part (--labels sequence)")

    dr = DSparkDrafter(tcfg, dcfg)
    dr.init_weights(a.seed)
    if a.init_from.endswith(".gguf"):  # continue from a shipped support file (dequantized)
        from export_gguf import load_support_gguf
        src = load_support_gguf(a.init_from, tcfg)
        if src.dcfg.__dict__ != dcfg.__dict__:
            raise SystemExit(f"--init-from {a.init_from}: drafter {src.dcfg}, this run wants {dcfg}")
        dr.load_state_dict(src.state_dict())
        log(f"initialised from {a.init_from} (dequantized)")
    elif a.init_from:  # continue training from the shards of an earlier run (optimizer restarts)
        load_shards(dr, Path(a.init_from))
        log(f"initialised from {a.init_from}")
    dr.to(dev).train()
    n_params = sum(p.numel() for p in dr.parameters())
    decay, no_decay = [], []
    for n, p in dr.named_parameters():
        if n.endswith("exp_probs_b__bias"):
            p.requires_grad_(False)
        elif p.ndim >= 2 and "hc_" not in n:
            decay.append(p)
        else:
            no_decay.append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.wd},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8, fused=dev.startswith("cuda"))
    biases = [dr.t(f"mtp.{s}.exp_probs_b.bias") for s in range(dcfg.n_stages)]
    emb, outw = target.t("token_embd.weight"), target.t("output.weight")
    kw = torch.exp(-torch.arange(B, device=dev, dtype=torch.float32) / a.gamma)
    kw = kw / kw.sum()
    g = torch.Generator(device=dev).manual_seed(a.seed)
    use_amp = dev.startswith("cuda")
    n_seq = seqs.shape[0]
    n_anchor_pos = T - B  # anchors 1..T−B
    A = min(a.anchors, n_anchor_pos)
    total = a.steps
    if a.deadline > 0:  # the whole command must end by --deadline seconds after its start
        a.time_budget = min(a.time_budget, a.deadline - (time.time() - t_all) - a.reserve)
        log(f"training time budget {a.time_budget:.0f}s")
    hist = []
    t_train = time.time()
    step = 0
    t_timing = None
    while True:
        if total and step >= total:
            break
        if a.deadline > 0 and step > 25 and time.time() - t_train > a.time_budget:
            log(f"deadline: stopping at step {step} of {total}")  # safety net; schedule cut short
            break
        if step == 5:
            if use_amp:
                torch.cuda.synchronize()
            t_timing = time.time()
        if step == 25 and not total:
            if use_amp:
                torch.cuda.synchronize()
            per = (time.time() - t_timing) / 20.0
            total = max(step + 1, int((a.time_budget - (time.time() - t_train)) / per) + step)
            log(f"{per * 1000:.0f} ms/step -> {total} steps")
        horizon = total or 10_000
        if step < a.warmup:
            lr = a.lr * (step + 1) / a.warmup
        else:
            f = min(1.0, (step - a.warmup) / max(1, horizon - a.warmup))
            lr = a.lr * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * f)))
        for gr in opt.param_groups:
            gr["lr"] = lr
        bi = torch.randint(0, n_seq, (a.batch,), device=dev, generator=g)
        P = torch.rand(a.batch, n_anchor_pos, device=dev, generator=g).argsort(1)[:, :A] + 1
        bidx = bi[:, None].expand(-1, A).reshape(-1)
        pos = P.reshape(-1)
        k = torch.arange(B, device=dev)
        rowp = pos[:, None] + k[None, :]                                  # [N, B] rows P+k
        prev = seqs[bidx[:, None], rowp]                                  # teacher forcing
        lab = labels[bidx[:, None], rowp]
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=use_amp):
            rows = dr.context_rows(caps[bi])                              # [Bs, T, D] per stage
            ctx, mask = dr.gather_context(rows, torch.arange(a.batch, device=dev).repeat_interleave(A), pos)
            y, U = dr.forward_blocks(seqs[bidx, pos], pos, ctx, mask, emb, outw)
            e = dr.markov_embed(prev)
            Z = (U.float() + dr.markov_bias(e).float())
            cl = dr.conf_logit(y, e)
        logp = torch.log_softmax(Z, -1)
        pt = torch.softmax(logits[bidx[:, None], rowp].float(), -1)
        ce = F.nll_loss(logp.reshape(-1, logp.shape[-1]), lab.reshape(-1), reduction="none").view_as(lab)
        l1 = (logp.exp() - pt).abs().sum(-1)
        with torch.no_grad():
            hit = (Z.argmax(-1) == lab).float()
            cstar = hit if a.conf_target == "greedy" else (1.0 - 0.5 * l1).clamp(0, 1)
        bce = F.binary_cross_entropy_with_logits(cl.float(), cstar, reduction="none")
        loss = ((a.w_ce * ce + a.w_l1 * l1 + a.w_bce * bce) * kw).sum(1).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(dr.parameters(), 1.0)
        opt.step()
        with torch.no_grad():
            for b, load in zip(biases, dr.expert_load):
                b.add_(a.bias_rate * torch.sign(load.mean() - load))
        step += 1
        if step % a.log_every == 0 or step == 1:
            acc = hit.mean(0).tolist()
            rec = {"step": step, "loss": float(loss.detach()), "ce": float(ce.detach().mean()),
                   "l1": float(l1.detach().mean()), "bce": float(bce.detach().mean()), "tf_acc": acc, "gn": float(gn), "lr": lr,
                   "t": time.time() - t_train}
            hist.append(rec)
            log(f"step {step:5d}/{total} loss {rec['loss']:.4f} ce {rec['ce']:.3f} l1 {rec['l1']:.3f} "
                f"bce {rec['bce']:.3f} tf-acc " + " ".join(f"{x:.3f}" for x in acc)
                + f" gn {rec['gn']:.2f} {rec['t']:.0f}s")
    train_s = time.time() - t_train
    log(f"trained {step} steps in {train_s:.0f}s")

    dr.eval()
    dr.float()
    t0 = time.time()
    r = propose_all(dr, target, ev, ecaps, elabels, L0, a.eval_chunk)
    rep = acceptance_report(r, eval_ch, L0, T, B)
    print_report(rep, "float drafter, held-out")
    log(f"eval in {time.time() - t0:.1f}s")
    shards = save_shards(dr, out)
    np.savez_compressed(out / "eval_seqs.npz", seqs=ev.cpu().numpy().astype(np.int32),
                        channel=eval_ch.astype(np.int32), prompt_len=np.int32(L0))
    run = {"args": vars(a), "drafter_config": dcfg.__dict__, "n_params": n_params, "steps": step,
           "train_seconds": train_s, "gen_seconds": t_gen, "label_consistency": consist,
           "history": hist, "eval_float": rep, "shards": shards,
           "total_seconds": time.time() - t_all}
    (out / "run.json").write_text(json.dumps(run, indent=1) + "\n")
    log(f"wrote {out} in {time.time() - t_all:.0f}s total")
    return 0


# ----------------------------------------------------------------------------- CPU generation
def cmd_gen_cpu(a) -> int:
    """gen_prompts (first --max-gen) + eval_prompts of --data, extended to seq_len by
    ds4-greedy-gen in --jobs processes of --threads each -> --out (seqs [N, T] int32, the
    layout `train --gen-from` reads; rows are matched by their prompt there)."""
    import subprocess
    import tempfile
    data = np.load(a.data)
    T, L0 = int(data["seq_len"]), int(data["prompt_len"])
    gen_p = data["gen_prompts"][:a.max_gen] if a.max_gen else data["gen_prompts"]
    want = np.ascontiguousarray(np.concatenate([gen_p, data["eval_prompts"]]), dtype="<i4")
    n_all = want.shape[0]
    full = np.empty((n_all, T), dtype="<i4")
    todo = np.arange(n_all)
    if a.reuse:  # rows of an earlier gen_seqs.npz (same target) whose prompt matches are kept
        rows, todo = reuse_rows(a.reuse, "--reuse", want, T)
        full[:] = rows
    want = np.ascontiguousarray(want[todo])
    n = want.shape[0]
    jobs = max(1, min(a.jobs, max(n, 1)))
    t0 = time.time()
    with tempfile.TemporaryDirectory() as td:
        src = os.path.join(td, "prompts.i32")
        want.tofile(src)
        per = -(-n // jobs)
        procs = []
        for j in range(jobs):
            first, count = j * per, min(per, n - j * per)
            if count <= 0:
                break
            cmd = [a.tool, "-m", a.target, "--in", src, "--out", os.path.join(td, f"part{j}.i32"),
                   "--prompt-len", str(L0), "--total-len", str(T), "--first", str(first),
                   "--count", str(count), "-t", str(a.threads)] + ([] if j == 0 else ["-q"])
            procs.append(subprocess.Popen(cmd))
        bad = [j for j, p in enumerate(procs) if p.wait() != 0]
        if bad:
            raise SystemExit(f"ds4-greedy-gen failed in jobs {bad}")
        seqs = np.concatenate([np.fromfile(os.path.join(td, f"part{j}.i32"), dtype="<i4").reshape(-1, T)
                               for j in range(len(procs))]) if procs else np.empty((0, T), dtype="<i4")
    if seqs.shape[0] != n or not (seqs[:, :L0] == want).all():
        raise SystemExit("gen-cpu: the generated rows do not match the prompts")
    full[todo] = seqs
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(a.out, seqs=full.astype(np.int32))
    dt = time.time() - t0
    log(f"wrote {a.out}: {n_all} sequences of {T} ({gen_p.shape[0]} train + {n_all - gen_p.shape[0]} held-out; "
        f"{n} generated in {dt:.0f}s, {jobs} jobs x {a.threads} threads, {n * (T - L0) / max(dt, 1e-9):.0f} tok/s)")
    return 0


# ----------------------------------------------------------------------------- export / eval
def _load_target(path: str, device: str):
    from gguf_io import load_model
    target, _ = load_model(path, device=device)
    target.eval()
    return target


def cmd_export(a) -> int:
    from export_gguf import export_support_gguf
    import hashlib
    run_dir = Path(a.run)
    run = json.loads((run_dir / "run.json").read_text())
    from gguf_io import config_from_metadata, read_metadata
    import gguf
    tcfg = config_from_metadata(read_metadata(gguf.GGUFReader(a.target)))
    dr = DSparkDrafter(tcfg, drafter_config_from(run))
    load_shards(dr, run_dir)
    sha = hashlib.sha256(Path(a.target).read_bytes()).hexdigest()
    desc = (f"DSpark drafter for target sha256 {sha}; tools/train/drafter/train_drafter.py "
            f"seed {run['args']['seed']}, {run['steps']} steps; experts {a.expert_quant}")
    export_support_gguf(dr, a.out, expert_quant=a.expert_quant, description=desc)
    log(f"wrote {a.out} ({os.path.getsize(a.out)} bytes); {desc}")
    return 0


def cmd_eval(a) -> int:
    from export_gguf import load_support_gguf
    torch.set_num_threads(a.threads)
    run_dir = Path(a.run)
    target = _load_target(a.target, a.device)
    ev = np.load(run_dir / "eval_seqs.npz")
    seqs, ch, L0 = ev["seqs"], ev["channel"], int(ev["prompt_len"])
    if a.per_channel:
        keep = np.concatenate([np.where(ch == c)[0][:a.per_channel] for c in range(len(CHANNELS))])
        seqs, ch = seqs[keep], ch[keep]
    s = torch.from_numpy(seqs.astype(np.int64)).to(a.device)
    dr = load_support_gguf(a.drafter, target.cfg).to(a.device)
    t0 = time.time()
    caps, _, labels = target_pass(target, s, dr.dcfg.target_layers, a.chunk)
    r = propose_all(dr, target, s, caps, labels, L0, a.chunk)
    rep = acceptance_report(r, ch, L0, s.shape[1], dr.dcfg.block_size)
    print_report(rep, f"{a.drafter}, {s.shape[0]} held-out sequences")
    log(f"eval in {time.time() - t0:.1f}s")
    if a.json:
        Path(a.json).write_text(json.dumps(rep, indent=1) + "\n")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--tokens", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=5)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument("--n-gen", type=int, default=3072)
    p.add_argument("--n-corpus", type=int, default=3072)
    p.add_argument("--n-eval-per-channel", type=int, default=64)
    p.add_argument("--append-to", default="", help="data file whose generation prompts come "
                   "first and whose corpus and held-out set are kept (use another --seed)")
    p = sub.add_parser("train")
    p.add_argument("--target", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=5)
    p.add_argument("--stages", type=int, default=3)
    p.add_argument("--block", type=int, default=5)
    p.add_argument("--rank", type=int, default=64)
    p.add_argument("--steps", type=int, default=0, help="0 = derive from --time-budget")
    p.add_argument("--time-budget", type=float, default=150.0)
    p.add_argument("--deadline", type=float, default=0.0,
                   help="seconds from start by which training must end, minus --reserve (0 = off)")
    p.add_argument("--reserve", type=float, default=30.0, help="seconds kept for eval + save")
    p.add_argument("--batch", type=int, default=64, help="sequences per step")
    p.add_argument("--anchors", type=int, default=48, help="anchors per sequence per step")
    p.add_argument("--lr", type=float, default=1.5e-3)
    p.add_argument("--wd", type=float, default=0.01)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--gamma", type=float, default=4.0, help="position decay exp(-k/gamma)")
    p.add_argument("--w-ce", type=float, default=0.1)
    p.add_argument("--w-l1", type=float, default=0.9)
    p.add_argument("--w-bce", type=float, default=1.0)
    p.add_argument("--conf-target", choices=("greedy", "tv"), default="greedy")
    p.add_argument("--labels", choices=("argmax", "sequence"), default="argmax",
                   help="CE/confidence labels of the generated part: the fp32 reference's argmax, or "
                   "the sequence's own next token (with --gen-from gen-cpu output: the engine's "
                   "greedy choice, which the runtime verifies against); held-out eval likewise")
    p.add_argument("--bias-rate", type=float, default=1e-3)
    p.add_argument("--gen-chunk", type=int, default=1024)
    p.add_argument("--max-gen", type=int, default=0, help="use only the first N generation prompts")
    p.add_argument("--init-from", default="", help="run directory whose weight shards start "
                   "training, or a support .gguf (weights dequantized)")
    p.add_argument("--gen-from", default="", help="gen_seqs.npz of an earlier run with the same "
                   "target, data and --max-gen: skips the greedy generation")
    p.add_argument("--pass-chunk", type=int, default=512)
    p.add_argument("--eval-chunk", type=int, default=64)
    p.add_argument("--log-every", type=int, default=100)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--small", action="store_true", help="CPU smoke test on a few sequences")
    p.add_argument("--small-n", type=int, default=8)
    p.add_argument("--small-len", type=int, default=48)
    p = sub.add_parser("gen-cpu")
    p.add_argument("--target", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--out", required=True, help="gen_seqs.npz to write")
    p.add_argument("--tool", default=str(REPO / "build" / "bin" / "ds4-greedy-gen"))
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    p.add_argument("--threads", type=int, default=1, help="engine threads per job")
    p.add_argument("--max-gen", type=int, default=0, help="only the first N generation prompts")
    p.add_argument("--reuse", default="", help="gen_seqs.npz of an earlier run with the same target: "
                   "rows whose prompt it holds are copied, only the others are generated")
    p = sub.add_parser("export")
    p.add_argument("--run", required=True, help="output directory of `train`")
    p.add_argument("--target", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--expert-quant", choices=("q2", "q4"), default="q2")
    p = sub.add_parser("eval")
    p.add_argument("--run", required=True, help="output directory of `train` (eval_seqs.npz)")
    p.add_argument("--target", required=True)
    p.add_argument("--drafter", required=True, help="support GGUF")
    p.add_argument("--per-channel", type=int, default=0, help="first N sequences per channel (0 = all)")
    p.add_argument("--chunk", type=int, default=16)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", default="")
    p.add_argument("--device", default="cpu")
    a = ap.parse_args()
    return {"prepare": cmd_prepare, "gen-cpu": cmd_gen_cpu, "train": cmd_train, "export": cmd_export, "eval": cmd_eval}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
