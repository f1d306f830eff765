"""tools/train/drafter/dspark_ref.py — PyTorch DSpark drafter (the training-side twin of speculative/).

Role: the DeepSeek V4 Flash DSpark drafter of shared/spec/dspark-drafter.md as an nn.Module,
sized from the TARGET's Ds4Config (tools/reference/ds4_ref.py) plus a DSparkConfig, with
  * target capture (§2): HC mean of the residual after target blocks `target_layers`,
    concatenated in that order (`target_forward_capture`);
  * main_x = RMSNorm_main(main_proj · capture) (§2), per-stage context ("ring") rows
    fp8qdq(rope(RMSNorm_kv_s(attn_kv_s · main_x), p)) (§3.1);
  * S stages, each a V4 block without compressor: window attention over the context rows of
    positions max(0, P−W)..P−1 plus the whole block bidirectionally, sinks in the
    denominator, per-head q RMS, RoPE tail (base freq, no YaRN), grouped output LoRA;
    HC pre/post with Sinkhorn; learned-routing MoE with selection bias + shared expert (§3–§5);
  * block input [anchor, NOISE…] through the TARGET's token_embd, copied into the HC streams;
  * HC head on the last stage, final norm mtp.{S−1}.norm, the TARGET's output head (§6);
  * Markov head Z_k = U_k + W2·W1[prev_k] and confidence ℓ_k = w·[y_k ; W1[prev_k]] with the
    pre-norm y_k (§7, §8).
Target embedding / LM head are passed in (they are the target's, frozen, never stored).

Layout: parameters are stored under their support-GGUF names with torch shape = reversed GGUF
`ne` ([out, in] for matrices, [n_expert, out, in] for expert stacks); `tensor_specs` lists
them in the C++ file order (speculative/drafter_weights.cpp drafter_tensor_specs) with export types.
Numerics: float32 (or bf16 autocast in training); FP8 round trip of the non-RoPE KV dims is
straight-through when gradients are on. Building blocks (rms_norm, RoPE tables, FP8 round
trip, HC pre/post) are the reference's own, imported.
"""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "tools" / "reference"))
from ds4_ref import (Ds4Config, Ds4Model, apply_rope, fp8_e4m3_roundtrip,  # noqa: E402
                     pname, rms_norm, rope_tables)


# ----------------------------------------------------------------------------- config
@dataclass
class DSparkConfig:
    n_stages: int = 3
    block_size: int = 5                 # B: anchor-first slots = drafts per proposal
    markov_rank: int = 64               # R (multiple of 32)
    noise_token_id: int = -1            # MASK token of slots 1..B−1; -1: n_vocab − 2
    target_layers: list = field(default_factory=list)  # empty: last min(3, n_layer) layers
    window: int = 0                     # W context rows; 0: target n_swa (the C++ default)
    swiglu_clamp: float = 10.0

    def resolve(self, t: Ds4Config) -> "DSparkConfig":
        """Same defaults as speculative/drafter_gen.cpp resolve_gen_options (for the tiny target)."""
        if self.noise_token_id < 0:
            self.noise_token_id = 128799 if t.n_vocab > 128799 else t.n_vocab - 2
        if not self.target_layers:
            self.target_layers = list(range(max(0, t.n_layer - 3), t.n_layer))
        if self.window <= 0:
            self.window = t.n_swa
        assert self.markov_rank % 32 == 0, "markov_rank must be a multiple of 32"
        assert all(0 <= l < t.n_layer for l in self.target_layers)
        assert list(self.target_layers) == sorted(set(self.target_layers))
        return self


def tensor_specs(t: Ds4Config, d: DSparkConfig) -> list[tuple[str, tuple[int, ...], str]]:
    """(GGUF name, torch shape = reversed ne, export type) in the C++ file order.
    Export types follow dspark-drafter.md §1.2: dense Q8_0, HC fns F16, vectors F32,
    routed experts gate/up IQ2_XXS, down Q2_K."""
    E, H, V = t.n_embd, t.n_hc, t.n_vocab
    HC, MIX = H * E, t.hc_mix_dim
    QL, Q, D = t.q_lora_rank, t.n_head * t.head_dim, t.head_dim
    OL, G = t.n_out_group * t.o_lora_rank, t.group_dim
    X, FF, R, NC = t.n_expert, t.n_ff_exp, d.markov_rank, len(d.target_layers)
    s = []
    for st in range(d.n_stages):
        p = f"mtp.{st}."
        s += [(p + "hc_attn_fn.weight", (MIX, HC), "F16"),
              (p + "hc_attn_scale.weight", (3,), "F32"),
              (p + "hc_attn_base.weight", (MIX,), "F32"),
              (p + "attn_norm.weight", (E,), "F32"),
              (p + "attn_q_a.weight", (QL, E), "Q8_0"),
              (p + "attn_q_a_norm.weight", (QL,), "F32"),
              (p + "attn_q_b.weight", (Q, QL), "Q8_0"),
              (p + "attn_kv.weight", (D, E), "Q8_0"),
              (p + "attn_kv_a_norm.weight", (D,), "F32"),
              (p + "attn_sinks.weight", (t.n_head,), "F32"),
              (p + "attn_output_a.weight", (OL, G), "Q8_0"),
              (p + "attn_output_b.weight", (E, OL), "Q8_0"),
              (p + "hc_ffn_fn.weight", (MIX, HC), "F16"),
              (p + "hc_ffn_scale.weight", (3,), "F32"),
              (p + "hc_ffn_base.weight", (MIX,), "F32"),
              (p + "ffn_norm.weight", (E,), "F32"),
              (p + "ffn_gate_inp.weight", (X, E), "Q8_0"),
              (p + "exp_probs_b.bias", (X,), "F32"),
              (p + "ffn_gate_exps.weight", (X, FF, E), "IQ2_XXS"),
              (p + "ffn_up_exps.weight", (X, FF, E), "IQ2_XXS"),
              (p + "ffn_down_exps.weight", (X, E, FF), "Q2_K"),
              (p + "ffn_gate_shexp.weight", (FF, E), "Q8_0"),
              (p + "ffn_up_shexp.weight", (FF, E), "Q8_0"),
              (p + "ffn_down_shexp.weight", (E, FF), "Q8_0")]
    last = f"mtp.{d.n_stages - 1}."
    s += [("mtp.0.main_proj.weight", (E, NC * E), "Q8_0"),
          ("mtp.0.main_norm.weight", (E,), "F32"),
          (last + "norm.weight", (E,), "F32"),
          (last + "hc_head_base.weight", (H,), "F32"),
          (last + "hc_head_fn.weight", (H, HC), "F16"),
          (last + "hc_head_scale.weight", (1,), "F32"),
          (last + "markov_head.markov_w1.weight", (V, R), "Q8_0"),
          (last + "markov_head.markov_w2.weight", (V, R), "Q8_0"),
          (last + "confidence_head.proj.weight", (1, E + R), "Q8_0")]
    return s


# ----------------------------------------------------------------------------- target capture
def target_forward_capture(target: Ds4Model, tokens: torch.Tensor, layers: list[int],
                           want_logits: bool = True):
    """Target forward over tokens [B, T] -> (capture [B, T, n_capture·E], logits [B, T, V]).
    capture = concat over `layers` (in order) of the HC mean of the residual AFTER that block
    (attention + FFN) ran (dspark-drafter.md §2). Same loop as Ds4Model.forward."""
    cfg = target.cfg
    target.aux_losses, target.expert_load = [], []
    emb = target.t("token_embd.weight")[tokens]
    if emb.dtype != torch.float32 and not torch.is_autocast_enabled():
        emb = emb.float()
    X = emb.unsqueeze(2).expand(*tokens.shape, cfg.n_hc, cfg.n_embd).contiguous()
    caps = []
    for il in range(cfg.n_layer):
        X = target.attention(il, X, tokens)
        X = target.ffn(il, X, tokens)
        if il in layers:
            caps.append(X.float().mean(2))
    cap = torch.cat(caps, -1)
    logits = target.output_head(X) if want_logits else None
    return cap, logits


# ----------------------------------------------------------------------------- drafter
class DSparkDrafter(nn.Module):
    """forward_blocks(...) runs S stages over N blocks of B slots; see the module docstring."""

    # The reference's HC primitives (they only read self.cfg = the TARGET config).
    hc_pre = Ds4Model.hc_pre
    hc_post = staticmethod(Ds4Model.hc_post)

    def __init__(self, tcfg: Ds4Config, dcfg: DSparkConfig):
        super().__init__()
        self.cfg = tcfg
        self.dcfg = dcfg.resolve(tcfg)
        self.specs = tensor_specs(tcfg, self.dcfg)
        for name, shape, _ in self.specs:
            self.register_parameter(pname(name), nn.Parameter(torch.zeros(shape)))
        self.expert_load: list[torch.Tensor] = []   # per stage, token counts (training)
        self._rope_cache: dict = {}

    def t(self, name: str) -> torch.Tensor:
        return getattr(self, pname(name))

    def named_gguf_tensors(self):
        for name, _, qtype in self.specs:
            yield name, self.t(name), qtype

    @property
    def last(self) -> str:
        return f"mtp.{self.dcfg.n_stages - 1}."

    # -- deterministic init (same conventions as Ds4Model.init_weights)
    @torch.no_grad()
    def init_weights(self, seed: int) -> None:
        cfg, H = self.cfg, self.cfg.n_hc
        g = torch.Generator().manual_seed(seed)
        for name, p, _ in self.named_gguf_tensors():
            base = name.split(".")[-2]
            if base.endswith("norm"):
                p.fill_(1.0)
            elif base in ("hc_attn_scale", "hc_ffn_scale", "hc_head_scale"):
                p.fill_(1.0)
            elif base in ("hc_attn_base", "hc_ffn_base"):
                b = torch.zeros(cfg.hc_mix_dim)
                b[:H] = math.log(1.0 / (H - 1))      # pre = sigmoid -> 1/H
                comb = torch.zeros(H, H)
                comb.fill_diagonal_(4.0)             # near-identity stream mixing
                b[2 * H:] = comb.reshape(-1)
                p.copy_(b)
            elif base == "hc_head_base":
                p.fill_(math.log(1.0 / (H - 1)))
            elif base in ("hc_attn_fn", "hc_ffn_fn", "hc_head_fn"):
                p.normal_(0.0, 0.002, generator=g)
            elif base in ("attn_sinks", "exp_probs_b"):
                p.zero_()
            elif base == "markov_w1":
                p.normal_(0.0, 1.0, generator=g)
            elif base in ("markov_w2", "proj"):
                p.zero_()                            # Markov bias and confidence start at 0
            else:
                s = 1.0 / math.sqrt(p.shape[-1])
                if base in ("attn_output_b", "ffn_down_exps", "ffn_down_shexp"):
                    s = s / math.sqrt(2 * self.dcfg.n_stages)
                p.normal_(0.0, s, generator=g)

    # -- RoPE of the stages: base freq, no YaRN (a compress-ratio-0 layer of the target)
    def rope(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        n = int(positions.max().item()) + 1 if positions.numel() else 1
        key = str(positions.device)
        c = self._rope_cache.get(key)
        if c is None or c[0].shape[0] < n:
            cfg0 = Ds4Config(**{**self.cfg.__dict__, "compress_ratios": [0] * self.cfg.n_layer})
            cos, sin = rope_tables(cfg0, 0, np.arange(max(n, 4096)))
            c = (torch.tensor(cos, device=positions.device), torch.tensor(sin, device=positions.device))
            self._rope_cache[key] = c
        return c[0][positions], c[1][positions]

    # -- §2 / §3.1
    def main_x(self, capture: torch.Tensor) -> torch.Tensor:
        """[..., n_capture·E] -> [..., E]."""
        return rms_norm(capture @ self.t("mtp.0.main_proj.weight").t(), self.t("mtp.0.main_norm.weight"),
                        self.cfg.rms_eps)

    def ring_rows(self, s: int, main_x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Context rows of stage s: main_x [..., E], positions broadcastable to main_x[..., 0]
        -> [..., D]."""
        cfg, p = self.cfg, f"mtp.{s}."
        kv = rms_norm(main_x @ self.t(p + "attn_kv.weight").t(), self.t(p + "attn_kv_a_norm.weight"),
                      cfg.rms_eps)
        cos, sin = self.rope(positions)
        kv = apply_rope(kv, cos, sin)
        return fp8_e4m3_roundtrip(kv, cfg.head_dim - cfg.n_rot)

    # -- §3.2–3.3: one stage's attention over N blocks
    def attention(self, s: int, X: torch.Tensor, pos: torch.Tensor, ctx: torch.Tensor,
                  ctx_mask: torch.Tensor) -> torch.Tensor:
        """X [N, B, H, E]; pos [N] anchor positions; ctx [N, W, D] ring rows; ctx_mask [N, W]."""
        cfg, p = self.cfg, f"mtp.{s}."
        N, B = X.shape[:2]
        D, NH, R = cfg.head_dim, cfg.n_head, cfg.n_rot
        y, post, A = self.hc_pre(X, self.t(p + "hc_attn_fn.weight"), self.t(p + "hc_attn_scale.weight"),
                                 self.t(p + "hc_attn_base.weight"))
        a = rms_norm(y, self.t(p + "attn_norm.weight"), cfg.rms_eps)
        qr = rms_norm(a @ self.t(p + "attn_q_a.weight").t(), self.t(p + "attn_q_a_norm.weight"),
                      cfg.rms_eps)
        q = (qr @ self.t(p + "attn_q_b.weight").t()).reshape(N, B, NH, D)
        q = rms_norm(q, None, cfg.rms_eps)                       # per-head RMS, no weight
        kvb = rms_norm(a @ self.t(p + "attn_kv.weight").t(), self.t(p + "attn_kv_a_norm.weight"),
                       cfg.rms_eps)
        qpos = pos[:, None] + torch.arange(B, device=pos.device)[None, :]   # [N, B]
        cos, sin = self.rope(qpos)                                          # [N, B, R/2]
        q = apply_rope(q, cos[:, :, None], sin[:, :, None])
        kvb = fp8_e4m3_roundtrip(apply_rope(kvb, cos, sin), D - R)
        K = torch.cat([ctx.to(kvb.dtype), kvb], 1)                          # [N, W+B, D]
        M = torch.cat([ctx_mask, torch.ones(N, B, dtype=torch.bool, device=X.device)], 1)
        scores = torch.einsum("nbhd,nsd->nhbs", q, K) * (1.0 / math.sqrt(D))
        scores = scores.float().masked_fill(~M[:, None, None, :], float("-inf"))
        sink = self.t(p + "attn_sinks.weight").float().reshape(1, NH, 1, 1).expand(N, NH, B, 1)
        probs = torch.softmax(torch.cat([sink, scores], -1), -1)[..., 1:]
        heads = torch.einsum("nhbs,nsd->nbhd", probs.to(K.dtype), K)
        heads = apply_rope(heads, cos[:, :, None], sin[:, :, None], inverse=True)
        G, OL = cfg.n_out_group, cfg.o_lora_rank
        hg = heads.reshape(N, B, G, cfg.group_dim)
        wa = self.t(p + "attn_output_a.weight").reshape(G, OL, cfg.group_dim)
        low = torch.einsum("nbgi,goi->nbgo", hg, wa.to(hg.dtype)).reshape(N, B, G * OL)
        o = low @ self.t(p + "attn_output_b.weight").t()
        return self.hc_post(o, X, post, A)

    # -- §4: learned-routing MoE (256/16 experts, top-k, selection bias) + shared expert
    def ffn(self, s: int, X: torch.Tensor) -> torch.Tensor:
        cfg, p = self.cfg, f"mtp.{s}."
        y, post, A = self.hc_pre(X, self.t(p + "hc_ffn_fn.weight"), self.t(p + "hc_ffn_scale.weight"),
                                 self.t(p + "hc_ffn_base.weight"))
        x = rms_norm(y, self.t(p + "ffn_norm.weight"), cfg.rms_eps)
        logits = (x @ self.t(p + "ffn_gate_inp.weight").t().to(x.dtype)).float()
        probs = torch.sqrt(F.softplus(logits))
        score = (probs + self.t(p + "exp_probs_b.bias").float()).detach()
        sel = torch.sort(score, dim=-1, descending=True, stable=True).indices[..., :cfg.n_expert_used]
        if self.training:
            self.expert_load.append(torch.bincount(sel.reshape(-1), minlength=cfg.n_expert).float())
        w = probs.gather(-1, sel)
        if cfg.expert_weights_norm:
            w = w / w.sum(-1, keepdim=True).clamp_min(6.103515625e-5)
        w = w * cfg.expert_weights_scale
        gate = torch.zeros_like(probs).scatter(-1, sel, w)
        c = self.dcfg.swiglu_clamp
        wg, wu, wd = (self.t(p + "ffn_gate_exps.weight"), self.t(p + "ffn_up_exps.weight"),
                      self.t(p + "ffn_down_exps.weight"))
        g = torch.einsum("nbi,efi->nbef", x, wg.to(x.dtype)).clamp(max=c)
        u = torch.einsum("nbi,efi->nbef", x, wu.to(x.dtype)).clamp(-c, c)
        mid = F.silu(g) * u * gate.unsqueeze(-1).to(x.dtype)
        moe = torch.einsum("nbef,eof->nbo", mid, wd.to(x.dtype))
        gs = (x @ self.t(p + "ffn_gate_shexp.weight").t()).clamp(max=c)
        us = (x @ self.t(p + "ffn_up_shexp.weight").t()).clamp(-c, c)
        sh = (F.silu(gs) * us) @ self.t(p + "ffn_down_shexp.weight").t()
        return self.hc_post(moe + sh, X, post, A)

    # -- §6: HC head (sigmoid collapse) -> pre-norm y
    def hc_head(self, X: torch.Tensor) -> torch.Tensor:
        cfg, L = self.cfg, self.last
        N, B, H, E = X.shape
        xn = rms_norm(X.reshape(N, B, H * E), None, cfg.rms_eps)
        m = (xn @ self.t(L + "hc_head_fn.weight").t().to(xn.dtype)).float()
        w = torch.sigmoid(m * self.t(L + "hc_head_scale.weight")[0] + self.t(L + "hc_head_base.weight")) \
            + cfg.hc_eps
        return (X * w.unsqueeze(-1).to(X.dtype)).sum(2)

    # -- §5 + §6: blocks -> (pre-norm y [N,B,E], base logits U [N,B,V])
    def forward_blocks(self, anchors: torch.Tensor, pos: torch.Tensor, ctx: list[torch.Tensor],
                       ctx_mask: torch.Tensor, token_embd: torch.Tensor, output_w: torch.Tensor):
        """anchors [N] token ids at positions pos [N]; ctx[s] [N, W, D] ring rows of stage s
        (positions pos−W..pos−1), ctx_mask [N, W] (False = no row)."""
        cfg, d = self.cfg, self.dcfg
        N, B = anchors.shape[0], d.block_size
        ids = torch.full((N, B), d.noise_token_id, dtype=torch.long, device=anchors.device)
        ids[:, 0] = anchors
        x0 = token_embd[ids]
        if x0.dtype != torch.float32 and not torch.is_autocast_enabled():
            x0 = x0.float()
        X = x0.unsqueeze(2).expand(N, B, cfg.n_hc, cfg.n_embd).contiguous()
        self.expert_load = []
        for s in range(d.n_stages):
            X = self.attention(s, X, pos, ctx[s], ctx_mask)
            X = self.ffn(s, X)
        y = self.hc_head(X)
        U = rms_norm(y, self.t(self.last + "norm.weight"), cfg.rms_eps) @ output_w.t().to(y.dtype)
        return y, U

    # -- §7 / §8
    def markov_embed(self, prev: torch.Tensor) -> torch.Tensor:
        return self.t(self.last + "markov_head.markov_w1.weight")[prev]

    def markov_bias(self, e: torch.Tensor) -> torch.Tensor:
        return e @ self.t(self.last + "markov_head.markov_w2.weight").t().to(e.dtype)

    def conf_logit(self, y: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
        w = self.t(self.last + "confidence_head.proj.weight")[0]
        return (torch.cat([y, e.to(y.dtype)], -1) @ w.to(y.dtype)).float()

    # -- helpers over whole sequences
    def context_rows(self, capture: torch.Tensor) -> list[torch.Tensor]:
        """capture [Bs, T, NC·E] -> per stage ring rows [Bs, T, D] at positions 0..T−1."""
        mx = self.main_x(capture)
        pos = torch.arange(capture.shape[1], device=capture.device)
        return [self.ring_rows(s, mx, pos[None, :].expand(mx.shape[0], -1))
                for s in range(self.dcfg.n_stages)]

    def gather_context(self, rows: list[torch.Tensor], bidx: torch.Tensor, pos: torch.Tensor):
        """rows[s] [Bs, T, D]; anchors (bidx [N] sequence index, pos [N]) -> ctx list of
        [N, W, D] and mask [N, W] for positions pos−W..pos−1 (negative positions masked)."""
        W = self.dcfg.window
        idx = pos[:, None] - W + torch.arange(W, device=pos.device)[None, :]
        mask = idx >= 0
        idxc = idx.clamp_min(0)
        return [r[bidx[:, None], idxc] for r in rows], mask

    @torch.no_grad()
    def greedy_chain(self, y: torch.Tensor, U: torch.Tensor, anchors: torch.Tensor):
        """Inference chain (§7, T = 0): -> drafts [N,B] (ties -> smallest id), confidence
        logits [N,B] (computed with the previous DRAFT's Markov embedding)."""
        N, B = anchors.shape[0], self.dcfg.block_size
        prev = anchors
        drafts, confs = [], []
        for k in range(B):
            e = self.markov_embed(prev)
            z = U[:, k].float() + self.markov_bias(e.float())
            confs.append(self.conf_logit(y[:, k].float(), e.float()))
            prev = torch.argmax(z, -1)
            drafts.append(prev)
        return torch.stack(drafts, 1), torch.stack(confs, 1)


def accepted_lengths(drafts: torch.Tensor, labels: torch.Tensor, conf_logits: torch.Tensor,
                     threshold: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Per proposal: (n drafted, n accepted) at a σ threshold (stop at the first position whose
    σ(conf) < threshold, as the C++ proposer does; threshold 0 drafts all B)."""
    ok = torch.sigmoid(conf_logits) >= threshold
    n_draft = torch.cumprod(ok.int(), 1).sum(1)
    match = torch.cumprod((drafts == labels).int(), 1)
    n_acc = torch.minimum(match.sum(1), n_draft)
    return n_draft, n_acc
