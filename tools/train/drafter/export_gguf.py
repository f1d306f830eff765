"""tools/train/drafter/export_gguf.py — DSparkDrafter <-> DSpark support GGUF.

Role: `export_support_gguf(drafter, path)` writes the support-file layout that
speculative/drafter_weights.h validates (dspark-drafter.md §1): tensors `mtp.{s}.*` + the 9 head /
projection tensors (names, GGUF `ne` = reversed torch shape), metadata
`deepseek4.dspark.{block_size, markov_rank, noise_token_id, target_layer_ids,
sliding_window}` (u32 / u32 array). Types (§1.2): dense Q8_0, HC fns F16, vectors F32,
routed experts gate/up IQ2_XXS + down Q2_K (`expert_quant="q2"`, the target's recipe) or all
Q4_K (`"q4"`). Quantized rows come from ds4cpp's own quantizers through the small C++ helper
quant_rows.cpp (built on demand, see `ensure_quant_tool`); F16/F32 are written by numpy.
`load_support_gguf(path, target_cfg)` reads any such file back (every type dequantized to
f32 with the gguf package) into a DSparkDrafter — used to measure the exported (quantized)
drafter and to check the round trip.
Invariant: the exported bytes depend only on the weights (no timestamps, fixed order).
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

import gguf
from gguf import GGMLQuantizationType as QT

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dspark_ref import REPO, DSparkConfig, DSparkDrafter, tensor_specs  # noqa: E402

sys.path.insert(0, str(REPO / "tools" / "reference"))
from ds4_ref import Ds4Config  # noqa: E402
from gguf_io import _field_value  # noqa: E402

ARCH = "deepseek4"
KEY = "deepseek4.dspark."
QUANT_TOOL_SRC = Path(__file__).resolve().parent / "quant_rows.cpp"


def ensure_quant_tool(build_dir: str | None = None) -> str:
    """Path of the row quantizer, compiling it against build_dir's static ds4 libraries
    (default $DS4_BUILD or build-dtrain; `cmake --build B --target ds4_quant ds4_gguf ds4_core`
    first) when missing or older than its source."""
    b = Path(build_dir or os.environ.get("DS4_BUILD", str(REPO / "build-dtrain")))
    exe = b / "drafter_quant_rows"
    if exe.exists() and exe.stat().st_mtime >= QUANT_TOOL_SRC.stat().st_mtime:
        return str(exe)
    libs = [b / "quant" / "libds4_quant.a", b / "gguf" / "libds4_gguf.a", b / "core" / "libds4_core.a"]
    missing = [str(l) for l in libs if not l.exists()]
    if missing:
        raise FileNotFoundError(
            f"quant helper needs {missing}: run `cmake -S {REPO} -B {b} -G Ninja "
            f"-DCMAKE_BUILD_TYPE=Release && cmake --build {b} --target ds4_quant ds4_gguf ds4_core`")
    cmd = [os.environ.get("CXX", "g++"), "-std=c++20", "-O2", "-ffp-contract=off", f"-I{REPO}",
           str(QUANT_TOOL_SRC)] + [str(l) for l in libs] + ["-o", str(exe)]
    subprocess.run(cmd, check=True)
    return str(exe)


def _quantize(tool: str, arr: np.ndarray, qtype: str) -> np.ndarray:
    """f32 array [..., n] -> uint8 block bytes [..., row_bytes] via the C++ helper."""
    n = arr.shape[-1]
    with tempfile.TemporaryDirectory() as td:
        src, dst = os.path.join(td, "in.f32"), os.path.join(td, "out.bin")
        np.ascontiguousarray(arr, dtype="<f4").tofile(src)
        subprocess.run([tool, qtype.lower(), str(n), src, dst], check=True)
        raw = np.fromfile(dst, dtype=np.uint8)
    rows = int(np.prod(arr.shape[:-1]))
    return raw.reshape(*arr.shape[:-1], raw.size // rows)


def export_types(drafter: DSparkDrafter, expert_quant: str = "q2") -> dict[str, str]:
    out = {}
    for name, _, qtype in drafter.specs:
        if "_exps." in name and expert_quant == "q4":
            qtype = "Q4_K"
        out[name] = qtype
    return out


def export_support_gguf(drafter: DSparkDrafter, path: str, expert_quant: str = "q2",
                        name: str = "ds4-tiny-dspark", description: str = "",
                        quant_tool: str | None = None) -> None:
    d, t = drafter.dcfg, drafter.cfg
    tool = quant_tool or ensure_quant_tool()
    types = export_types(drafter, expert_quant)
    w = gguf.GGUFWriter(path, ARCH)
    w.add_name(name)
    if description:
        w.add_description(description)
    w.add_uint32(KEY + "block_size", d.block_size)
    w.add_uint32(KEY + "markov_rank", d.markov_rank)
    w.add_uint32(KEY + "noise_token_id", d.noise_token_id)
    w.add_key_value(KEY + "target_layer_ids", [int(v) for v in d.target_layers],
                    gguf.GGUFValueType.ARRAY, sub_type=gguf.GGUFValueType.UINT32)
    w.add_uint32(KEY + "sliding_window", d.window)
    with torch.no_grad():
        for gname, shape, _ in drafter.specs:
            arr = drafter.t(gname).detach().float().cpu().numpy()
            assert tuple(arr.shape) == tuple(shape), (gname, arr.shape, shape)
            qt = types[gname]
            if qt == "F32":
                w.add_tensor(gname, np.ascontiguousarray(arr, dtype=np.float32))
            elif qt == "F16":
                w.add_tensor(gname, np.ascontiguousarray(arr.astype(np.float16)))
            else:
                w.add_tensor(gname, _quantize(tool, arr, qt), raw_dtype=QT[qt])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _meta(md: dict, k: str):
    for p in (KEY, "deepseek4.dspark_", "dspark."):
        if p + k in md:
            return md[p + k]
    return None


def load_support_gguf(path: str, tcfg: Ds4Config) -> DSparkDrafter:
    """Support GGUF -> float32 DSparkDrafter (eval mode). Shapes are checked by name."""
    r = gguf.GGUFReader(path)
    md = {k: _field_value(f) for k, f in r.fields.items() if not k.startswith("GGUF.")}
    n_stages = 1 + max(int(t.name.split(".")[1]) for t in r.tensors if t.name.startswith("mtp."))
    win = _meta(md, "sliding_window")
    dcfg = DSparkConfig(n_stages=n_stages, block_size=int(_meta(md, "block_size")),
                        markov_rank=int(_meta(md, "markov_rank")),
                        noise_token_id=int(_meta(md, "noise_token_id")),
                        target_layers=[int(v) for v in _meta(md, "target_layer_ids")],
                        window=int(win) if win is not None else 0)
    dr = DSparkDrafter(tcfg, dcfg)
    by = {t.name: t for t in r.tensors}
    problems = []
    with torch.no_grad():
        for name, shape, _ in dr.specs:
            t = by.get(name)
            if t is None:
                problems.append(f"tensor '{name}': missing")
                continue
            if t.tensor_type in (QT.F32, QT.F16):
                arr = np.asarray(t.data).astype(np.float32)
            else:
                arr = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type)
            arr = arr.reshape(tuple(int(x) for x in reversed(t.shape.tolist())))
            if arr.size == int(np.prod(shape)) and arr.ndim != len(shape):
                arr = arr.reshape(shape)   # 1-D confidence projection
            if tuple(arr.shape) != tuple(shape):
                problems.append(f"tensor '{name}': expected shape {shape}, got {tuple(arr.shape)}")
                continue
            dr.t(name).copy_(torch.from_numpy(np.ascontiguousarray(arr, dtype=np.float32)))
    if problems:
        raise ValueError(f"{path}: " + "; ".join(problems))
    return dr.eval()
