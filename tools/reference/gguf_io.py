"""tools/reference/gguf_io.py — DS4-layout GGUF <-> Ds4Model (reference) conversion.

Role: `load_model(path)` reads any DS4-layout GGUF (float or quantized: q2 / q4 published
layouts, F16/F32 floats) with gguf.GGUFReader, dequantizes every tensor to float32 with
gguf.quants.dequantize, builds a Ds4Config from the `deepseek4.*` metadata and returns the
model. `export_model(model, path, tokenizer_gguf=...)` writes the module back as a *float*
DS4-layout GGUF (exact names and shapes; F16 where the published layout is F16, F32 for the
tensors that `ds4-gguf quantize` turns into Q8_0 / IQ2_XXS / Q2_K, I32 for tid2eid), with the
full metadata and the tokenizer keys copied from a tokenizer GGUF.

Invariant: shapes are checked against tensor_specs(cfg); a mismatch names the tensor,
expected vs actual shape.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

import gguf
from gguf import GGMLQuantizationType as QT

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ds4_ref import META_KEYS, Ds4Config, Ds4Model, tensor_specs  # noqa: E402

ARCH = "deepseek4"


def _field_value(field):
    try:
        return field.contents()
    except Exception:  # older gguf: decode by hand
        if len(field.types) == 1 and field.types[0] == gguf.GGUFValueType.STRING:
            return bytes(field.parts[-1]).decode("utf-8")
        if field.types and field.types[0] == gguf.GGUFValueType.ARRAY:
            return [field.parts[i].tolist()[0] for i in field.data]
        return field.parts[-1].tolist()[0]


def read_metadata(reader: gguf.GGUFReader) -> dict:
    return {k: _field_value(f) for k, f in reader.fields.items() if not k.startswith("GGUF.")}


def config_from_metadata(md: dict) -> Ds4Config:
    kw = {}
    for key, fld, typ in META_KEYS:
        full = f"{ARCH}.{key}"
        if fld is None or full not in md:
            continue
        v = md[full]
        if typ.endswith("[]"):
            v = list(v)
        elif typ == "bool":
            v = bool(v)
        elif typ == "f32":
            v = float(v)
        else:
            v = int(v)
        kw[fld] = v
    if "n_vocab" not in kw and "tokenizer.ggml.tokens" in md:
        kw["n_vocab"] = len(md["tokenizer.ggml.tokens"])
    cfg = Ds4Config(**kw)
    cfg.compress_ratios = [int(r) for r in cfg.compress_ratios[:cfg.n_layer]]
    cfg.swiglu_clamp = [float(c) for c in cfg.swiglu_clamp[:cfg.n_layer]]
    return cfg


def load_model(path: str, device: str = "cpu") -> tuple[Ds4Model, dict]:
    """DS4-layout GGUF -> (float32 Ds4Model in eval mode, metadata dict)."""
    reader = gguf.GGUFReader(path)
    md = read_metadata(reader)
    cfg = config_from_metadata(md)
    model = Ds4Model(cfg)
    by_name = {t.name: t for t in reader.tensors}
    problems = []
    with torch.no_grad():
        for name, shape, _ in model.specs:
            t = by_name.get(name)
            if t is None:
                if name.endswith("exp_probs_b.bias"):
                    continue  # optional: zeros
                problems.append(f"tensor '{name}': missing")
                continue
            if t.tensor_type in (QT.F32, QT.F16, QT.BF16, QT.I32, QT.I64):
                arr = np.asarray(t.data)
                if t.tensor_type == QT.BF16:
                    arr = gguf.quants.dequantize(arr, QT.BF16)
            else:
                arr = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type)
            arr = arr.reshape(tuple(int(x) for x in reversed(t.shape.tolist())))
            if tuple(arr.shape) != tuple(shape):
                problems.append(f"tensor '{name}': expected shape {shape}, got {tuple(arr.shape)}")
                continue
            dst = model.t(name)
            if dst.dtype == torch.int64:
                dst.copy_(torch.from_numpy(arr.astype(np.int64)))
            else:
                dst.copy_(torch.from_numpy(arr.astype(np.float32)))
    if problems:
        raise ValueError(f"{path}: " + "; ".join(problems))
    model.eval()
    return model.to(device), md


def _writer_add_meta(w: gguf.GGUFWriter, key: str, value, typ: str) -> None:
    if typ == "u32":
        w.add_uint32(key, int(value))
    elif typ == "u64":
        w.add_uint64(key, int(value))
    elif typ == "f32":
        w.add_float32(key, float(value))
    elif typ == "bool":
        w.add_bool(key, bool(value))
    elif typ == "f32[]":
        w.add_array(key, [float(v) for v in value])
    elif typ == "u32[]":
        w.add_key_value(key, [int(v) for v in value], gguf.GGUFValueType.ARRAY,
                        sub_type=gguf.GGUFValueType.UINT32)
    else:
        raise ValueError(typ)


def export_model(model: Ds4Model, path: str, tokenizer_gguf: str | None = None,
                 name: str = "ds4-tiny", extra_meta: dict | None = None) -> None:
    """Float DS4-layout GGUF (input of `ds4-gguf quantize`)."""
    cfg = model.cfg
    w = gguf.GGUFWriter(path, ARCH)
    w.add_name(name)
    for key, fld, typ in META_KEYS:
        if fld is None:
            value = 1 if key == "attention.head_count_kv" else 0
        else:
            value = getattr(cfg, fld)
        _writer_add_meta(w, f"{ARCH}.{key}", value, typ)
    if tokenizer_gguf:
        tr = gguf.GGUFReader(tokenizer_gguf)
        for k, f in tr.fields.items():
            if not k.startswith("tokenizer."):
                continue
            v = _field_value(f)
            vt = f.types[0]
            if vt == gguf.GGUFValueType.ARRAY:
                w.add_key_value(k, list(v), vt, sub_type=f.types[-1])
            else:
                w.add_key_value(k, v, vt)
    for k, v in (extra_meta or {}).items():
        w.add_string(k, str(v))
    with torch.no_grad():
        for gname, shape, qtype in tensor_specs(cfg):
            t = model.t(gname).detach().cpu()
            if qtype == "I32":
                arr = t.numpy().astype(np.int32)
            elif qtype == "F16":
                arr = t.float().numpy().astype(np.float16)
            else:
                arr = t.float().numpy().astype(np.float32)
            assert tuple(arr.shape) == tuple(shape), (gname, arr.shape, shape)
            w.add_tensor(gname, np.ascontiguousarray(arr))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
