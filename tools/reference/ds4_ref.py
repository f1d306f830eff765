"""tools/reference/ds4_ref.py — independent PyTorch reference of the DS4 architecture.

Role: the float32 parity oracle for the C++ engine and the model that tools/train trains.
Written from ds4-architecture.md §1–§4 (not from the C++ engine). One batched forward
computes every position of a sequence in parallel (causal masks replace the decode caches):
  * raw sliding window: query t sees raw rows [max(0, t−n_swa+1), t];
  * compressed rows: row c (covering tokens [cR, cR+R−1]) is visible to queries t ≥ cR+R−1,
    i.e. c < (t+1)//R, exactly what sequential decode sees;
  * indexer: per query, the top-k visible compressed rows (ties → lowest index).

Numerics: float32 everywhere by default; the simulations of the C++ numerics that change
values by more than rounding noise are applied (FP8-E4M3 round trip of the non-RoPE KV dims,
Hadamard + FP4-E2M1 on indexer rows/queries, f16 rounding of raw and compressed KV rows when
`sim_f16_kv` is on). In training mode the FP8/FP4 round trips are straight-through
(forward quantized, gradient identity) and f16 rounding is skipped. The engine's Q8_0/Q8_K
activation quantization and weight quantization are NOT simulated: the difference between
this reference and the engine is what tests/reference measures.

Tensor layout: parameters are stored under their GGUF names with numpy/torch shape =
reversed GGUF `ne` ([out, in] for 2-D weights, [n_expert, out, in] for expert stacks), so
loading and exporting are plain copies (see gguf_io.py).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

NEG_BIG = -1.0e30


# ----------------------------------------------------------------------------- config
@dataclass
class Ds4Config:
    n_layer: int = 8
    n_embd: int = 256
    n_vocab: int = 8192
    n_head: int = 8
    head_dim: int = 128
    n_rot: int = 64
    q_lora_rank: int = 64
    o_lora_rank: int = 64
    n_out_group: int = 4
    n_expert: int = 16
    n_expert_used: int = 4
    n_expert_shared: int = 1
    n_ff_exp: int = 256
    n_hash_layer: int = 3
    n_swa: int = 32
    n_indexer_head: int = 4
    indexer_head_dim: int = 128
    indexer_top_k: int = 16
    n_hc: int = 4
    n_hc_sinkhorn_iter: int = 20
    rms_eps: float = 1e-6
    hc_eps: float = 1e-6
    expert_weights_scale: float = 1.5
    expert_weights_norm: bool = True
    swiglu_clamp: list = field(default_factory=lambda: [10.0] * 8)
    rope_freq_base: float = 10000.0
    compress_rope_freq_base: float = 160000.0
    rope_scaling_factor: float = 16.0
    rope_orig_ctx: int = 65536
    yarn_beta_fast: float = 32.0
    yarn_beta_slow: float = 1.0
    compress_ratios: list = field(default_factory=list)
    context_length: int = 4096

    def __post_init__(self):
        if not self.compress_ratios:
            self.compress_ratios = [self.expected_ratio(il) for il in range(self.n_layer)]
        if len(self.swiglu_clamp) < self.n_layer:
            self.swiglu_clamp = list(self.swiglu_clamp) + [10.0] * (
                self.n_layer - len(self.swiglu_clamp))

    @staticmethod
    def expected_ratio(il: int) -> int:
        return 0 if il < 2 else (4 if il % 2 == 0 else 128)

    @property
    def hc_mix_dim(self) -> int:
        return 2 * self.n_hc + self.n_hc * self.n_hc

    @property
    def group_dim(self) -> int:
        return self.head_dim * (self.n_head // self.n_out_group)

    def coff(self, il: int) -> int:
        r = self.compress_ratios[il]
        return 0 if r == 0 else (2 if r == 4 else 1)


# Metadata keys (deepseek4.*) <-> Ds4Config fields. Order = the order the exporter writes.
META_KEYS = [
    ("block_count", "n_layer", "u32"),
    ("context_length", "context_length", "u64"),
    ("embedding_length", "n_embd", "u32"),
    ("vocab_size", "n_vocab", "u32"),
    ("attention.head_count", "n_head", "u32"),
    ("attention.head_count_kv", None, "u32"),
    ("attention.key_length", "head_dim", "u32"),
    ("attention.value_length", "head_dim", "u32"),
    ("rope.dimension_count", "n_rot", "u32"),
    ("attention.q_lora_rank", "q_lora_rank", "u32"),
    ("attention.output_lora_rank", "o_lora_rank", "u32"),
    ("attention.output_group_count", "n_out_group", "u32"),
    ("expert_count", "n_expert", "u32"),
    ("expert_used_count", "n_expert_used", "u32"),
    ("expert_shared_count", "n_expert_shared", "u32"),
    ("expert_feed_forward_length", "n_ff_exp", "u32"),
    ("hash_layer_count", "n_hash_layer", "u32"),
    ("expert_group_count", None, "u32"),
    ("expert_group_used_count", None, "u32"),
    ("attention.sliding_window", "n_swa", "u32"),
    ("attention.indexer.head_count", "n_indexer_head", "u32"),
    ("attention.indexer.key_length", "indexer_head_dim", "u32"),
    ("attention.indexer.top_k", "indexer_top_k", "u32"),
    ("hyper_connection.count", "n_hc", "u32"),
    ("hyper_connection.sinkhorn_iterations", "n_hc_sinkhorn_iter", "u32"),
    ("attention.layer_norm_rms_epsilon", "rms_eps", "f32"),
    ("hyper_connection.epsilon", "hc_eps", "f32"),
    ("expert_weights_scale", "expert_weights_scale", "f32"),
    ("expert_weights_norm", "expert_weights_norm", "bool"),
    ("swiglu_clamp_exp", "swiglu_clamp", "f32[]"),
    ("rope.freq_base", "rope_freq_base", "f32"),
    ("attention.compress_rope_freq_base", "compress_rope_freq_base", "f32"),
    ("rope.scaling.factor", "rope_scaling_factor", "f32"),
    ("rope.scaling.original_context_length", "rope_orig_ctx", "u32"),
    ("rope.scaling.yarn_beta_fast", "yarn_beta_fast", "f32"),
    ("rope.scaling.yarn_beta_slow", "yarn_beta_slow", "f32"),
    ("attention.compress_ratios", "compress_ratios", "u32[]"),
]


# ----------------------------------------------------------------------------- tensor names
def tensor_specs(cfg: Ds4Config) -> list[tuple[str, tuple[int, ...], str]]:
    """(GGUF name, torch shape = reversed ne, published type) of every tensor, file order."""
    E, V, H = cfg.n_embd, cfg.n_vocab, cfg.n_hc
    D, NH, QL, OL, G = cfg.head_dim, cfg.n_head, cfg.q_lora_rank, cfg.o_lora_rank, cfg.n_out_group
    NE, FF, IH, ID = cfg.n_expert, cfg.n_ff_exp, cfg.n_indexer_head, cfg.indexer_head_dim
    mix = cfg.hc_mix_dim
    s = [("token_embd.weight", (V, E), "F16"),
         ("output_hc_base.weight", (H,), "F32"),
         ("output_hc_fn.weight", (H, H * E), "F16"),
         ("output_hc_scale.weight", (1,), "F32"),
         ("output_norm.weight", (E,), "F32"),
         ("output.weight", (V, E), "Q8_0")]
    for il in range(cfg.n_layer):
        p = f"blk.{il}."
        r = cfg.compress_ratios[il]
        s += [(p + "hc_attn_fn.weight", (mix, H * E), "F16"),
              (p + "hc_attn_scale.weight", (3,), "F32"),
              (p + "hc_attn_base.weight", (mix,), "F32"),
              (p + "attn_norm.weight", (E,), "F32"),
              (p + "attn_q_a.weight", (QL, E), "Q8_0"),
              (p + "attn_q_a_norm.weight", (QL,), "F32"),
              (p + "attn_q_b.weight", (NH * D, QL), "Q8_0"),
              (p + "attn_kv.weight", (D, E), "Q8_0"),
              (p + "attn_kv_a_norm.weight", (D,), "F32"),
              (p + "attn_sinks.weight", (NH,), "F32"),
              (p + "attn_output_a.weight", (G * OL, cfg.group_dim), "Q8_0"),
              (p + "attn_output_b.weight", (E, G * OL), "Q8_0")]
        if r != 0:
            W = cfg.coff(il) * D
            s += [(p + "attn_compressor_ape.weight", (r, W), "F16"),
                  (p + "attn_compressor_kv.weight", (W, E), "F16"),
                  (p + "attn_compressor_gate.weight", (W, E), "F16"),
                  (p + "attn_compressor_norm.weight", (D,), "F32")]
        if r == 4:
            s += [(p + "indexer.attn_q_b.weight", (IH * ID, QL), "F16"),
                  (p + "indexer.proj.weight", (IH, E), "F16"),
                  (p + "indexer_compressor_ape.weight", (4, 2 * ID), "F16"),
                  (p + "indexer_compressor_kv.weight", (2 * ID, E), "F16"),
                  (p + "indexer_compressor_gate.weight", (2 * ID, E), "F16"),
                  (p + "indexer_compressor_norm.weight", (ID,), "F32")]
        s += [(p + "hc_ffn_fn.weight", (mix, H * E), "F16"),
              (p + "hc_ffn_scale.weight", (3,), "F32"),
              (p + "hc_ffn_base.weight", (mix,), "F32"),
              (p + "ffn_norm.weight", (E,), "F32"),
              (p + "ffn_gate_inp.weight", (NE, E), "F16"),
              (p + "exp_probs_b.bias", (NE,), "F32")]
        if il < cfg.n_hash_layer:
            s += [(p + "ffn_gate_tid2eid.weight", (V, cfg.n_expert_used), "I32")]
        s += [(p + "ffn_gate_exps.weight", (NE, FF, E), "IQ2_XXS"),
              (p + "ffn_up_exps.weight", (NE, FF, E), "IQ2_XXS"),
              (p + "ffn_down_exps.weight", (NE, E, FF), "Q2_K"),
              (p + "ffn_gate_shexp.weight", (FF, E), "Q8_0"),
              (p + "ffn_up_shexp.weight", (FF, E), "Q8_0"),
              (p + "ffn_down_shexp.weight", (E, FF), "Q8_0")]
    return s


def pname(gguf_name: str) -> str:
    return gguf_name.replace(".", "__")


# ----------------------------------------------------------------------------- primitives
def rms_norm(x: torch.Tensor, w: torch.Tensor | None, eps: float) -> torch.Tensor:
    # §3.2: mean of squares (double-accumulated in C; float64 here when x is float32 on CPU).
    xf = x.float()
    if xf.device.type == "cpu":
        ms = xf.double().pow(2).mean(-1, keepdim=True).float()
    else:
        ms = xf.pow(2).mean(-1, keepdim=True)
    y = xf * (1.0 / torch.sqrt(ms + eps))
    y = y.to(x.dtype)
    return y * w if w is not None else y


def q8_0_act(x: torch.Tensor) -> torch.Tensor:
    """§3.3 activation quantization (blocks of 32, d = amax/127, round half to even),
    returned dequantized. Used only with Ds4Model.sim_act_quant (diagnostics)."""
    xb = x.float().reshape(*x.shape[:-1], x.shape[-1] // 32, 32)
    d = xb.abs().amax(-1, keepdim=True) / 127.0
    inv = torch.where(d != 0, 1.0 / d, torch.zeros_like(d))
    q = torch.round(xb * inv).clamp(-128, 127)
    return (q * d).reshape(x.shape).to(x.dtype)


def q8_k_act(x: torch.Tensor) -> torch.Tensor:
    """§3.4 activation quantization (blocks of 256, signed max, iscale = −127/max)."""
    xb = x.float().reshape(*x.shape[:-1], x.shape[-1] // 256, 256)
    idx = xb.abs().argmax(-1, keepdim=True)
    mx = xb.gather(-1, idx)
    iscale = torch.where(mx != 0, -127.0 / mx, torch.zeros_like(mx))
    q = torch.round(iscale * xb).clamp(-128, 127)
    d = torch.where(mx != 0, 1.0 / iscale, torch.zeros_like(mx))
    return (q * d).reshape(x.shape).to(x.dtype)


def f16_round(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.float16).to(x.dtype)


def _ste(x: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    return x + (q - x).detach()


def fp8_e4m3_roundtrip(x: torch.Tensor, n_dims: int, block: int = 64) -> torch.Tensor:
    """§3.6 on the first n_dims of the last axis, in blocks of 64; rest untouched."""
    head, tail = x[..., :n_dims], x[..., n_dims:]
    xb = head.float().reshape(*head.shape[:-1], n_dims // block, block)
    amax = xb.abs().amax(-1, keepdim=True).clamp_min(1e-4)
    scale = torch.exp2(torch.ceil(torch.log2(amax / 448.0)))
    v = (xb / scale).clamp(-448.0, 448.0)
    q = v.to(torch.float8_e4m3fn).float() * scale
    q = q.reshape(head.shape).to(x.dtype)
    if torch.is_grad_enabled():
        q = _ste(head, q)
    return torch.cat([q, tail], -1)


def _fp4_values(v: torch.Tensor) -> torch.Tensor:
    a = v.abs()
    r = torch.where(a <= 2.0, torch.round(a * 2.0) * 0.5,
                    torch.where(a <= 4.0, 2.0 + torch.round(a - 2.0),
                                torch.where(a <= 5.0, torch.full_like(a, 4.0),
                                            torch.full_like(a, 6.0))))
    return torch.sign(v) * r


_HADAMARD: dict[tuple[int, str], torch.Tensor] = {}


def hadamard_matrix(n: int, device) -> torch.Tensor:
    key = (n, str(device))
    if key not in _HADAMARD:
        h = np.array([[1.0]], dtype=np.float64)
        while h.shape[0] < n:
            h = np.block([[h, h], [h, -h]])
        _HADAMARD[key] = torch.tensor(h, dtype=torch.float32, device=device)
    return _HADAMARD[key]


def hadamard_rotate(x: torch.Tensor) -> torch.Tensor:
    """§3.7 first half: Walsh–Hadamard over the last axis, scaled 1/sqrt(n)."""
    n = x.shape[-1]
    hm = hadamard_matrix(n, x.device).to(x.dtype)
    return (x @ hm) * (1.0 / math.sqrt(n))


def hadamard_fp4(x: torch.Tensor, block: int = 32) -> torch.Tensor:
    """§3.7: Walsh–Hadamard (scaled 1/sqrt(n)) then FP4-E2M1 round trip in blocks of 32."""
    return fp4_e2m1_roundtrip(hadamard_rotate(x), block)


def fp4_e2m1_roundtrip(y: torch.Tensor, block: int = 32) -> torch.Tensor:
    """§3.7 second half: FP4-E2M1 round trip in blocks of 32 (power-of-two block scales)."""
    n = y.shape[-1]
    yb = y.float().reshape(*y.shape[:-1], n // block, block)
    amax = yb.abs().amax(-1, keepdim=True).clamp_min(7.052966104933725e-38)
    scale = torch.exp2(torch.ceil(torch.log2(amax / 6.0)))
    q = _fp4_values((yb / scale).clamp(-6.0, 6.0)) * scale
    q = q.reshape(y.shape).to(y.dtype)
    return _ste(y, q) if torch.is_grad_enabled() else q


def rope_tables(cfg: Ds4Config, il: int, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """§3.8, float32 in the source's operation order. Returns (cos·m, sin·m), [n_pos, n_rot/2]."""
    f32 = np.float32
    compressed = cfg.compress_ratios[il] != 0
    n_rot = cfg.n_rot
    if compressed:
        b = f32(cfg.compress_rope_freq_base)
        s = f32(1.0) / f32(cfg.rope_scaling_factor)
        ext = True
        attn_factor = f32(1.0) / (f32(1.0) + f32(0.1) * f32(np.log(f32(1.0) / s)))
    else:
        b, s, ext, attn_factor = f32(cfg.rope_freq_base), f32(1.0), False, f32(1.0)
    # powf(b, -2/n_rot), correctly rounded (as glibc's powf): numpy's float32 power is off by
    # one ulp for b = 10000, n_rot = 64, which moves every RoPE angle by up to ~pos·1e-7.
    theta_scale = f32(np.power(np.float64(b), np.float64(f32(-2.0) / f32(n_rot))))
    if ext:
        def cd(beta):
            return f32(n_rot) * f32(np.log(f32(cfg.rope_orig_ctx) / (f32(beta) * f32(2.0 * np.pi)))) \
                / (f32(2.0) * f32(np.log(b)))
        corr_lo = max(0.0, math.floor(cd(cfg.yarn_beta_fast)))
        corr_hi = min(float(n_rot - 1), math.ceil(cd(cfg.yarn_beta_slow)))
    t_ext = positions.astype(f32)
    cos = np.empty((len(positions), n_rot // 2), dtype=f32)
    sin = np.empty_like(cos)
    for k in range(n_rot // 2):
        t_int = s * t_ext
        theta = t_int
        m = attn_factor
        if ext:
            y = f32((k - corr_lo) / max(0.001, corr_hi - corr_lo))
            ramp = f32(1.0) - f32(min(1.0, max(0.0, y)))
            theta = t_int * (f32(1.0) - ramp) + t_ext * ramp
            m = m * (f32(1.0) + f32(0.1) * f32(np.log(f32(1.0) / s)))
        cos[:, k] = np.cos(theta.astype(np.float64)).astype(f32) * m
        sin[:, k] = np.sin(theta.astype(np.float64)).astype(f32) * m
        t_ext = (t_ext * theta_scale).astype(f32)
    return cos, sin


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, inverse: bool = False
               ) -> torch.Tensor:
    """Rotate the last n_rot dims of x (interleaved pairs). cos/sin broadcast to [..., n_rot/2]."""
    n_rot = cos.shape[-1] * 2
    head, tail = x[..., :-n_rot], x[..., -n_rot:]
    t = tail.reshape(*tail.shape[:-1], n_rot // 2, 2)
    x0, x1 = t[..., 0], t[..., 1]
    c = cos.to(x.dtype)
    sn = sin.to(x.dtype)
    if inverse:
        sn = -sn
    r0 = x0 * c - x1 * sn
    r1 = x0 * sn + x1 * c
    out = torch.stack([r0, r1], -1).reshape(tail.shape)
    return torch.cat([head, out], -1)


# ----------------------------------------------------------------------------- model
class Ds4Model(nn.Module):
    """DS4 transformer. forward(tokens [B, T] int64) -> logits [B, T, n_vocab] (positions 0..T−1).

    Options (attributes, settable after construction):
      sim_f16_kv   f16-round raw and compressed KV rows (on in eval, the engine does it)
      use_indexer  apply the ratio-4 indexer top-k (off = all visible compressed rows)
      sim_act_quant  quantize activations like the engine (Q8_0 before Q8_0 matvecs, Q8_K
                   before expert dots); off by default, used to attribute parity gaps
    """

    def __init__(self, cfg: Ds4Config):
        super().__init__()
        self.cfg = cfg
        self.specs = tensor_specs(cfg)
        for name, shape, qtype in self.specs:
            if qtype == "I32":
                self.register_buffer(pname(name), torch.zeros(shape, dtype=torch.int64))
            else:
                self.register_parameter(pname(name), nn.Parameter(torch.zeros(shape)))
        self.sim_f16_kv = True
        self.sim_act_quant = False   # Q8_0/Q8_K activation quantization (engine numerics)
        self.use_indexer = True
        self.aux_losses: list[torch.Tensor] = []   # indexer distillation terms (training)
        self.want_aux = False
        self.expert_load: list[torch.Tensor] = []  # per routed layer, token counts [n_expert]
        self._rope_cache: dict = {}
        # Decision replay (tools/reference/decision_replay.py): an object whose hooks get
        # each discrete decision (pre-rounding value / scores and this model's own result)
        # and return the decision to use. None = the model's own decisions.
        self.replay = None

    # -- parameter access by GGUF name
    def t(self, name: str) -> torch.Tensor:
        return getattr(self, pname(name))

    def named_gguf_tensors(self):
        for name, _, qtype in self.specs:
            yield name, self.t(name), qtype

    # -- deterministic random init (training start / synthetic tests)
    @torch.no_grad()
    def init_weights(self, seed: int, std: float = 0.02) -> None:
        cfg = self.cfg
        g = torch.Generator().manual_seed(seed)
        for name, p, qtype in self.named_gguf_tensors():
            base = name.split(".")[-2] if name.endswith((".weight", ".bias")) else name
            if qtype == "I32":
                # hash routing: K distinct experts per token id, random but fixed by seed
                rows = [torch.randperm(cfg.n_expert, generator=g)[:cfg.n_expert_used]
                        for _ in range(cfg.n_vocab)]
                p.copy_(torch.stack(rows))
            elif base.endswith("norm") or base.endswith("_norm"):
                p.fill_(1.0)
            elif base in ("hc_attn_scale", "hc_ffn_scale", "output_hc_scale"):
                p.fill_(1.0)
            elif base in ("hc_attn_base", "hc_ffn_base"):
                H = cfg.n_hc
                b = torch.zeros(cfg.hc_mix_dim)
                b[:H] = math.log(1.0 / (H - 1))        # pre weights sigmoid -> 1/H
                b[H:2 * H] = 0.0                       # post = 2·sigmoid(0) = 1
                comb = torch.full((H, H), 0.0)
                comb.fill_diagonal_(4.0)               # near-identity stream mixing
                b[2 * H:] = comb.reshape(-1)
                p.copy_(b)
            elif base == "output_hc_base":
                p.fill_(math.log(1.0 / (cfg.n_hc - 1)))
            elif base in ("hc_attn_fn", "hc_ffn_fn", "output_hc_fn"):
                p.normal_(0.0, 0.002, generator=g)
            elif base == "attn_sinks" or base == "exp_probs_b":
                p.zero_()
            elif base in ("attn_compressor_ape", "indexer_compressor_ape"):
                p.normal_(0.0, 0.02, generator=g)
            elif base == "token_embd":
                p.normal_(0.0, 1.0, generator=g)
            else:
                fan_in = p.shape[-1]
                s = std if base in ("output",) else 1.0 / math.sqrt(fan_in)
                if base in ("attn_output_b", "ffn_down_exps", "ffn_down_shexp"):
                    s = s / math.sqrt(2 * cfg.n_layer)
                p.normal_(0.0, s, generator=g)

    # -- building blocks
    def _q8(self, x: torch.Tensor) -> torch.Tensor:
        return q8_0_act(x) if self.sim_act_quant else x

    def _qk(self, x: torch.Tensor) -> torch.Tensor:
        return q8_k_act(x) if self.sim_act_quant else x

    def _rope(self, il: int, positions: torch.Tensor, device) -> tuple[torch.Tensor, torch.Tensor]:
        kind = self.cfg.compress_ratios[il] != 0
        n = int(positions.max().item()) + 1 if positions.numel() else 1
        key = (kind, str(device))
        cached = self._rope_cache.get(key)
        if cached is None or cached[0].shape[0] < n:
            cos, sin = rope_tables(self.cfg, il, np.arange(max(n, 1024)))
            cached = (torch.tensor(cos, device=device), torch.tensor(sin, device=device))
            self._rope_cache[key] = cached
        return cached[0][positions], cached[1][positions]

    def hc_pre(self, X: torch.Tensor, fn: torch.Tensor, scale: torch.Tensor, base: torch.Tensor):
        """§4.2. X [B,T,H,E] -> y [B,T,E], post [B,T,H], A [B,T,H(in),H(out)]."""
        cfg = self.cfg
        H, eps = cfg.n_hc, cfg.hc_eps
        B, T = X.shape[:2]
        xn = rms_norm(X.reshape(B, T, H * cfg.n_embd), None, cfg.rms_eps)
        m = (xn @ fn.t().to(xn.dtype)).float()
        pre = torch.sigmoid(m[..., :H] * scale[0] + base[:H]) + eps
        post = 2.0 * torch.sigmoid(m[..., H:2 * H] * scale[1] + base[H:2 * H])
        Z = (m[..., 2 * H:] * scale[2] + base[2 * H:]).reshape(B, T, H, H)
        A = torch.softmax(Z, -1) + eps
        A = A / (A.sum(-2, keepdim=True) + eps)
        for _ in range(cfg.n_hc_sinkhorn_iter - 1):
            A = A / (A.sum(-1, keepdim=True) + eps)
            A = A / (A.sum(-2, keepdim=True) + eps)
        y = (X * pre.unsqueeze(-1).to(X.dtype)).sum(2)
        return y, post, A

    @staticmethod
    def hc_post(f: torch.Tensor, X: torch.Tensor, post: torch.Tensor, A: torch.Tensor):
        # X'[c] = f·post_c + Σ_r A[r][c]·X[r]
        return f.unsqueeze(2) * post.unsqueeze(-1).to(f.dtype) + \
            torch.einsum("btrc,btre->btce", A.to(X.dtype), X)

    def compress(self, h: torch.Tensor, il: int, prefix: str, D: int, ratio: int,
                 norm: torch.Tensor) -> torch.Tensor:
        """§4.4 for all complete windows at once. h [B,T,E] -> rows [B, T//ratio, D]
        (normalized, RoPE'd at the window's first position; no FP8/FP4 here)."""
        B, T, _ = h.shape
        nc = T // ratio
        if nc == 0:
            return h.new_zeros(B, 0, D)
        ape = self.t(prefix + "_ape.weight")
        kv = h[:, :nc * ratio] @ self.t(prefix + "_kv.weight").t().to(h.dtype)
        sc = h[:, :nc * ratio] @ self.t(prefix + "_gate.weight").t().to(h.dtype)
        W = kv.shape[-1]
        kv = kv.reshape(B, nc, ratio, W).float()
        sc = sc.reshape(B, nc, ratio, W).float() + ape.float()
        if ratio == 4:
            # candidates: previous window lane A (dims [0,D)), current window lane B ([D,2D))
            prev_kv = F.pad(kv[:, :-1, :, :D], (0, 0, 0, 0, 1, 0))
            prev_sc = F.pad(sc[:, :-1, :, :D], (0, 0, 0, 0, 1, 0), value=NEG_BIG)
            ckv = torch.cat([prev_kv, kv[..., D:]], 2)
            csc = torch.cat([prev_sc, sc[..., D:]], 2)
        else:
            ckv, csc = kv, sc
        w = torch.softmax(csc, 2)
        pooled = (w * ckv).sum(2)
        out = rms_norm(pooled, norm.float(), self.cfg.rms_eps)
        pos = torch.arange(nc, device=h.device) * ratio
        cos, sin = self._rope(il, pos, h.device)
        return apply_rope(out, cos, sin).to(h.dtype)

    def attention(self, il: int, X: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        cfg = self.cfg
        p = f"blk.{il}."
        B, T = tokens.shape
        D, NH, R = cfg.head_dim, cfg.n_head, cfg.n_rot
        ratio = cfg.compress_ratios[il]
        dev = X.device
        y, post, A = self.hc_pre(X, self.t(p + "hc_attn_fn.weight"), self.t(p + "hc_attn_scale.weight"),
                                 self.t(p + "hc_attn_base.weight"))
        h = rms_norm(y, self.t(p + "attn_norm.weight"), cfg.rms_eps)
        qr = rms_norm(self._q8(h) @ self.t(p + "attn_q_a.weight").t(),
                      self.t(p + "attn_q_a_norm.weight"), cfg.rms_eps)
        q = (self._q8(qr) @ self.t(p + "attn_q_b.weight").t()).reshape(B, T, NH, D)
        q = rms_norm(q, None, cfg.rms_eps)
        kv = rms_norm(self._q8(h) @ self.t(p + "attn_kv.weight").t(), self.t(p + "attn_kv_a_norm.weight"),
                      cfg.rms_eps)
        pos = torch.arange(T, device=dev)
        cos, sin = self._rope(il, pos, dev)             # [T, R/2]
        q = apply_rope(q, cos[:, None, :], sin[:, None, :])
        kv = apply_rope(kv, cos, sin)
        kv_pre = kv
        kv = fp8_e4m3_roundtrip(kv, D - R)
        if self.sim_f16_kv and not self.training:
            kv = f16_round(kv)
        if self.replay is not None:
            kv = self.replay.raw_kv(il, kv_pre, kv)
        keys = [kv]
        # raw window mask [T, T]: key s visible to query t iff t-n_swa < s <= t
        tq = pos[:, None]
        ks = pos[None, :]
        mask = (ks <= tq) & (ks > tq - cfg.n_swa)
        masks = [mask.expand(B, T, T)]
        if ratio != 0:
            comp = self.compress(h, il, p + "attn_compressor", D, ratio,
                                 self.t(p + "attn_compressor_norm.weight"))
            comp_pre = comp
            comp = fp8_e4m3_roundtrip(comp, D - R)
            if self.sim_f16_kv and not self.training:
                comp = f16_round(comp)
            if self.replay is not None:
                comp = self.replay.comp(il, comp_pre, comp)
            nc = comp.shape[1]
            cvis = (torch.arange(nc, device=dev)[None, :] < ((pos + 1) // ratio)[:, None])
            cmask = cvis.expand(B, T, nc)
            if ratio == 4 and nc > 0 and self.use_indexer:
                cmask = self.indexer(il, h, qr, cvis, cos, sin, q, comp)
            keys.append(comp)
            masks.append(cmask)
        K = torch.cat(keys, 1)                            # [B, S, D]
        M = torch.cat(masks, 2)                           # [B, T, S]
        scores = torch.einsum("bthd,bsd->bhts", q, K) * (1.0 / math.sqrt(D))
        scores = scores.float().masked_fill(~M[:, None], float("-inf"))
        sink = self.t(p + "attn_sinks.weight").float().reshape(1, NH, 1, 1).expand(B, NH, T, 1)
        probs = torch.softmax(torch.cat([sink, scores], -1), -1)[..., 1:]
        heads = torch.einsum("bhts,bsd->bthd", probs.to(K.dtype), K)
        heads = apply_rope(heads, cos[:, None, :], sin[:, None, :], inverse=True)
        # grouped output LoRA: group g reads heads [g·NH/G, (g+1)·NH/G)
        G, OL = cfg.n_out_group, cfg.o_lora_rank
        hg = self._q8(heads.reshape(B, T, G, cfg.group_dim))
        wa = self.t(p + "attn_output_a.weight").reshape(G, OL, cfg.group_dim)
        low = torch.einsum("btgi,goi->btgo", hg, wa.to(hg.dtype)).reshape(B, T, G * OL)
        o = self._q8(low) @ self.t(p + "attn_output_b.weight").t()
        return self.hc_post(o, X, post, A)

    def indexer(self, il, h, qr, cvis, cos, sin, q, comp) -> torch.Tensor:
        """§4.5 for every query: mask [B,T,nc] of selected compressed rows."""
        cfg = self.cfg
        p = f"blk.{il}."
        B, T, _ = h.shape
        IH, ID, K = cfg.n_indexer_head, cfg.indexer_head_dim, cfg.indexer_top_k
        if self.training:  # the indexer learns only from its distillation term
            h, qr = h.detach(), qr.detach()
        irows = self.compress(h, il, p + "indexer_compressor", ID, 4,
                              self.t(p + "indexer_compressor_norm.weight"))
        irows_pre = hadamard_rotate(irows)
        irows = fp4_e2m1_roundtrip(irows_pre)
        if self.sim_f16_kv and not self.training:
            irows = f16_round(irows)
        qi = (qr @ self.t(p + "indexer.attn_q_b.weight").t().to(qr.dtype)).reshape(B, T, IH, ID)
        qi = apply_rope(qi, cos[:, None, :], sin[:, None, :])
        qi_pre = hadamard_rotate(qi)
        qi = fp4_e2m1_roundtrip(qi_pre)
        if self.replay is not None:
            irows = self.replay.index(il, irows_pre, irows)
            qi = self.replay.index_query(il, qi_pre, qi)
        w = (h @ self.t(p + "indexer.proj.weight").t().to(h.dtype)) * (1.0 / math.sqrt(ID * IH))
        dots = torch.relu(torch.einsum("btkd,bcd->btkc", qi, irows))
        score = (dots * w.unsqueeze(-1)).sum(2).float()            # [B,T,nc]
        nc = score.shape[-1]
        vis = cvis.expand(B, T, nc)
        masked = score.masked_fill(~vis, float("-inf")).detach()
        order = torch.sort(masked, dim=-1, descending=True, stable=True).indices[..., :K]
        sel = torch.zeros_like(vis).scatter_(-1, order, True) & vis
        if self.replay is not None:
            sel = self.replay.index_select(il, masked, vis, sel)
        if self.want_aux and self.training:
            # distillation target: the main attention's mean head distribution over the
            # visible compressed rows (detached), as in DSA's indexer warm-up
            with torch.no_grad():
                att = torch.einsum("bthd,bcd->bthc", q.float(), comp.float()) / math.sqrt(cfg.head_dim)
                att = att.masked_fill(~vis[:, :, None, :], float("-inf"))
                tgt = torch.softmax(att, -1).mean(2)
                rows = vis.any(-1)
            logp = torch.log_softmax(score.masked_fill(~vis, float("-inf")), -1)
            kl = (tgt * (torch.log(tgt.clamp_min(1e-12)) - logp)).masked_fill(~vis, 0.0).sum(-1)
            self.aux_losses.append(kl[rows].mean())
        return sel

    def ffn(self, il: int, X: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        cfg = self.cfg
        p = f"blk.{il}."
        y, post, A = self.hc_pre(X, self.t(p + "hc_ffn_fn.weight"), self.t(p + "hc_ffn_scale.weight"),
                                 self.t(p + "hc_ffn_base.weight"))
        x = rms_norm(y, self.t(p + "ffn_norm.weight"), cfg.rms_eps)
        logits = (x @ self.t(p + "ffn_gate_inp.weight").t().to(x.dtype)).float()
        probs = torch.sqrt(F.softplus(logits))
        if il < cfg.n_hash_layer:
            sel = self.t(p + "ffn_gate_tid2eid.weight")[tokens]          # [B,T,K]
            if self.replay is not None:
                sel = self.replay.experts(il, None, sel)
        else:
            score = (probs + self.t(p + "exp_probs_b.bias")).detach()
            sel = torch.sort(score, dim=-1, descending=True, stable=True).indices[..., :cfg.n_expert_used]
            if self.replay is not None:
                sel = self.replay.experts(il, score, sel)
            if self.training:
                self.expert_load.append(
                    torch.bincount(sel.reshape(-1), minlength=cfg.n_expert).float())
        w = probs.gather(-1, sel)
        if cfg.expert_weights_norm:
            w = w / w.sum(-1, keepdim=True).clamp_min(6.103515625e-5)
        w = w * cfg.expert_weights_scale
        gate = torch.zeros_like(probs).scatter(-1, sel, w)               # [B,T,NE], 0 off-route
        clamp = cfg.swiglu_clamp[il]
        wg, wu, wd = (self.t(p + "ffn_gate_exps.weight"), self.t(p + "ffn_up_exps.weight"),
                      self.t(p + "ffn_down_exps.weight"))
        # dense over experts (small NE): mid[b,t,e,f]; unselected experts get weight 0
        xk = self._qk(x)
        g = torch.einsum("bti,efi->btef", xk, wg.to(x.dtype)).clamp(max=clamp)
        u = torch.einsum("bti,efi->btef", xk, wu.to(x.dtype)).clamp(-clamp, clamp)
        mid = F.silu(g) * u * gate.unsqueeze(-1).to(x.dtype)
        moe = torch.einsum("btef,eof->bto", self._qk(mid), wd.to(x.dtype))
        xs = self._q8(x)
        gs = (xs @ self.t(p + "ffn_gate_shexp.weight").t()).clamp(max=clamp)
        us = (xs @ self.t(p + "ffn_up_shexp.weight").t()).clamp(-clamp, clamp)
        sh = self._q8(F.silu(gs) * us) @ self.t(p + "ffn_down_shexp.weight").t()
        return self.hc_post(moe + sh, X, post, A)

    def output_head(self, X: torch.Tensor, return_hidden: bool = False):
        cfg = self.cfg
        B, T, H, E = X.shape
        xn = rms_norm(X.reshape(B, T, H * E), None, cfg.rms_eps)
        m = (xn @ self.t("output_hc_fn.weight").t().to(xn.dtype)).float()
        w = torch.sigmoid(m * self.t("output_hc_scale.weight")[0] + self.t("output_hc_base.weight")) \
            + cfg.hc_eps
        y = (X * w.unsqueeze(-1).to(X.dtype)).sum(2)
        z = rms_norm(y, self.t("output_norm.weight"), cfg.rms_eps)
        logits = self._q8(z) @ self.t("output.weight").t()
        return (logits, z) if return_hidden else logits

    def forward(self, tokens: torch.Tensor, return_hidden: bool = False):
        cfg = self.cfg
        self.aux_losses = []
        self.expert_load = []
        emb = self.t("token_embd.weight")[tokens]
        if emb.dtype != torch.float32 and not torch.is_autocast_enabled():
            emb = emb.float()
        X = emb.unsqueeze(2).expand(*tokens.shape, cfg.n_hc, cfg.n_embd).contiguous()
        for il in range(cfg.n_layer):
            X = self.attention(il, X, tokens)
            X = self.ffn(il, X, tokens)
        return self.output_head(X, return_hidden)


# ----------------------------------------------------------------------------- helpers
@torch.no_grad()
def nll_per_token(model: Ds4Model, tokens: torch.Tensor) -> torch.Tensor:
    """Negative log-likelihood (nats) of tokens[1:] given the prefix, [B, T−1]."""
    logits = model(tokens).float()
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                           tokens[:, 1:].reshape(-1), reduction="none").reshape(tokens.shape[0], -1)
