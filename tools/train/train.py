#!/usr/bin/env python3
"""tools/train/train.py — trains the tiny DS4 target model with the PyTorch reference.

Role: the one training entry point (see tools/train/README.md for the full pipeline).
Reads OUT-of-tokenize_corpus.py (tokens.npz: uint16 streams per channel/split) and the
tokenizer GGUF, trains Ds4Model (tools/reference/ds4_ref.py) on random windows of
--seq-len tokens with AdamW and a warmup + cosine schedule, bf16 autocast on CUDA, and
writes:
  OUT/ds4-tiny-f32.gguf   float DS4-layout GGUF (input of `ds4-gguf quantize --quant q2`)
  OUT/train_log.json      config, steps, loss curve, held-out perplexity per channel
Determinism: the model init, the hash-routing tables (tid2eid) and the data order depend only
on --seed. With --steps 0 the step count is derived from --time-budget after timing the
first steps (the count used is printed and logged, so `--steps N` reproduces a run).

Balancing: routed layers use auxiliary-loss-free balancing (the selection bias
exp_probs_b moves by --bias-rate against each expert's load deviation after every step).
The indexer (ratio-4 layers) is trained by a KL term towards the main attention's
distribution over visible compressed rows (its inputs detached), since top-k selection
passes no gradient.
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

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools" / "reference"))
from ds4_ref import Ds4Config, Ds4Model  # noqa: E402

CHANNELS = ("structured", "code", "english", "italian")


def tiny_config(vocab: int) -> Ds4Config:
    """design.md §5 tiny profile (model/profiles.h: expert FF 256, vocab 8192)."""
    return Ds4Config(n_layer=8, n_embd=256, n_vocab=vocab, n_head=8, head_dim=128, n_rot=64,
                     q_lora_rank=64, o_lora_rank=64, n_out_group=4, n_expert=16,
                     n_expert_used=4, n_expert_shared=1, n_ff_exp=256, n_hash_layer=3,
                     n_swa=32, n_indexer_head=4, indexer_head_dim=128, indexer_top_k=16,
                     n_hc=4, n_hc_sinkhorn_iter=20, context_length=4096)


class Batches:
    """Random windows of seq_len+1 tokens; channel drawn with fixed weights."""

    def __init__(self, streams: dict[str, np.ndarray], weights: dict[str, float], seq_len: int,
                 seed: int):
        self.streams = {c: torch.from_numpy(s.astype(np.int64)) for c, s in streams.items()}
        self.names = list(streams)
        w = np.array([weights[c] for c in self.names], dtype=np.float64)
        self.p = torch.tensor(w / w.sum())
        self.seq = seq_len
        self.g = torch.Generator().manual_seed(seed)

    def next(self, batch: int) -> torch.Tensor:
        ch = torch.multinomial(self.p, batch, replacement=True, generator=self.g)
        rows = []
        for c in ch.tolist():
            s = self.streams[self.names[c]]
            off = int(torch.randint(0, s.numel() - self.seq - 1, (1,), generator=self.g))
            rows.append(s[off:off + self.seq + 1])
        return torch.stack(rows)


@torch.no_grad()
def heldout_nll(model: Ds4Model, stream: np.ndarray, seq_len: int, device: str,
                max_tokens: int, batch: int = 16) -> tuple[float, int]:
    """Mean NLL (nats/token) over consecutive non-overlapping windows of seq_len tokens;
    each window predicts its tokens 1..seq_len−1 from its own prefix."""
    n_win = min(len(stream) // seq_len, max(1, max_tokens // seq_len))
    wins = torch.from_numpy(stream[:n_win * seq_len].astype(np.int64)).reshape(n_win, seq_len)
    tot, cnt = 0.0, 0
    for i in range(0, n_win, batch):
        x = wins[i:i + batch].to(device)
        logits = model(x).float()
        nll = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                              x[:, 1:].reshape(-1), reduction="sum")
        tot += float(nll)
        cnt += x[:, 1:].numel()
    return tot / max(cnt, 1), cnt


def unigram_nll(train: np.ndarray, held: np.ndarray, vocab: int) -> float:
    counts = np.bincount(train.astype(np.int64), minlength=vocab).astype(np.float64) + 1.0
    logp = np.log(counts / counts.sum())
    n = held.size // 512 * 512  # same windows as the model figures: skip each window's 1st token
    h = held[:n].reshape(-1, 512)[:, 1:].reshape(-1) if n else held
    return float(-logp[h.astype(np.int64)].mean())


def evaluate(model: Ds4Model, data, args, device) -> dict:
    model.eval()
    res = {}
    for ch in CHANNELS:
        nll, n = heldout_nll(model, data[f"{ch}.heldout"], args.seq_len, device, args.eval_tokens)
        res[ch] = {"nll": nll, "ppl": math.exp(nll), "tokens": n}
    model.train()
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", required=True, help="tokens.npz from tokenize_corpus.py")
    ap.add_argument("--tokenizer", required=True, help="tokenizer GGUF (metadata copied)")
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--seed", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=0, help="0 = derive from --time-budget")
    ap.add_argument("--time-budget", type=float, default=420.0, help="seconds of training")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.05)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--wd", type=float, default=0.05)
    ap.add_argument("--bias-rate", type=float, default=1e-3)
    ap.add_argument("--eval-tokens", type=int, default=200_000)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--small", action="store_true", help="CPU smoke test: 2 layers, tiny data")
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    device = args.device
    data = dict(np.load(args.tokens))
    import gguf
    vocab = len(gguf.GGUFReader(args.tokenizer).fields["tokenizer.ggml.tokens"].data)
    cfg = tiny_config(vocab)
    if args.small:
        cfg = Ds4Config(n_layer=4, n_embd=256, n_vocab=vocab, n_expert=8, n_expert_used=2,
                        n_hash_layer=3, context_length=4096)
    model = Ds4Model(cfg)
    model.init_weights(args.seed)
    model.to(device).train()
    model.want_aux = True
    n_params = sum(p.numel() for p in model.parameters())
    print(f"params {n_params / 1e6:.2f} M, device {device}", flush=True)

    sizes = {c: data[f"{c}.train"].size for c in CHANNELS}
    weights = {c: math.sqrt(sizes[c]) for c in CHANNELS}   # sqrt-size mixing
    batches = Batches({c: data[f"{c}.train"] for c in CHANNELS}, weights, args.seq_len, args.seed)

    decay, no_decay = [], []
    for n, p in model.named_parameters():
        (decay if p.ndim >= 2 and "hc_" not in n else no_decay).append(p)
    for n, p in model.named_parameters():
        if n.endswith("exp_probs_b__bias"):
            p.requires_grad_(False)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.wd},
                             {"params": [p for p in no_decay if p.requires_grad],
                              "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8,
                            fused=device.startswith("cuda"))
    routed = [il for il in range(cfg.n_layer) if il >= cfg.n_hash_layer]
    biases = [model.t(f"blk.{il}.exp_probs_b.bias") for il in routed]

    use_amp = device.startswith("cuda")
    total_steps = args.steps
    log = {"args": vars(args), "n_params": n_params, "config": cfg.__dict__, "loss": []}
    t0 = time.time()
    step = 0
    ema = None
    while True:
        if total_steps and step >= total_steps:
            break
        if step == 20 and not total_steps:
            if use_amp:
                torch.cuda.synchronize()
            per = (time.time() - t_timing) / 15.0
            total_steps = max(step + 1, int(args.time_budget / per))
            print(f"{per * 1000:.0f} ms/step -> {total_steps} steps", flush=True)
        if step == 5:
            if use_amp:
                torch.cuda.synchronize()
            t_timing = time.time()
        horizon = total_steps or 10_000
        if step < args.warmup:
            lr = args.lr * (step + 1) / args.warmup
        else:
            frac = min(1.0, (step - args.warmup) / max(1, horizon - args.warmup))
            lr = args.lr * (args.min_lr_frac + (1 - args.min_lr_frac) * 0.5 *
                            (1 + math.cos(math.pi * frac)))
        for gr in opt.param_groups:
            gr["lr"] = lr
        xb = batches.next(args.batch).to(device, non_blocking=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=use_amp):
            logits = model(xb[:, :-1])
            loss = F.cross_entropy(logits.float().reshape(-1, cfg.n_vocab), xb[:, 1:].reshape(-1))
            aux = torch.stack(model.aux_losses).mean() if model.aux_losses else loss * 0
        opt.zero_grad(set_to_none=True)
        (loss + aux).backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        with torch.no_grad():
            for b, load in zip(biases, model.expert_load):
                b.add_(args.bias_rate * torch.sign(load.mean() - load))
        step += 1
        if step % 25 == 0 or step == 1:
            lv, av = loss.item(), aux.item()
            ema = lv if ema is None else 0.9 * ema + 0.1 * lv
            el = time.time() - t0
            print(f"step {step:5d}/{total_steps} loss {lv:.4f} aux {av:.4f} gn {float(gn):.2f} "
                  f"lr {lr:.2e} {el:.0f}s", flush=True)
            log["loss"].append([step, lv, av, el])
    train_s = time.time() - t0
    log["steps"] = step
    log["train_seconds"] = train_s
    log["tokens_seen"] = step * args.batch * args.seq_len
    print(f"trained {step} steps in {train_s:.0f}s ({log['tokens_seen'] / 1e6:.1f} M tokens)",
          flush=True)

    model.float()
    res = evaluate(model, data, args, device)
    for ch in CHANNELS:
        res[ch]["unigram_ppl"] = math.exp(unigram_nll(data[f"{ch}.train"], data[f"{ch}.heldout"],
                                                      cfg.n_vocab))
        print(f"held-out {ch:10s} ppl {res[ch]['ppl']:8.2f}  unigram {res[ch]['unigram_ppl']:8.2f}"
              f"  ({res[ch]['tokens']} tokens)", flush=True)
    log["heldout_float"] = res
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from gguf_io import export_model
    model.cpu()
    export_model(model, str(out / "ds4-tiny-f32.gguf"), tokenizer_gguf=args.tokenizer,
                 name="ds4-tiny")
    (out / "train_log.json").write_text(json.dumps(log, indent=1, default=str) + "\n")
    print("wrote", out / "ds4-tiny-f32.gguf", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
