#!/usr/bin/env python3
"""tests/gguf/crosscheck.py — cross-check ds4::gguf against the `gguf` Python package.

(a) Writes a GGUF with gguf.GGUFWriter (every scalar type, typed arrays incl. strings,
    F32/F16/I32/Q8_0/Q4_K tensors) and checks that `gguf_dump FILE` (our reader) reports the
    same keys, types, values and tensors (names, types, ne, byte size, data hash).
(b) Has our Writer produce a sample (`gguf_dump --write-sample FILE`), reads it with
    gguf.GGUFReader and checks that the Python reader sees exactly what our reader reports,
    plus a few known values.
Exits non-zero on any mismatch, printing every difference found.

usage: crosscheck.py --dump PATH/TO/gguf_dump --workdir DIR
"""
import argparse
import json
import math
import os
import subprocess
import sys

import numpy as np
import gguf
from gguf import GGUFValueType as VT
from gguf import GGMLQuantizationType as QT

VT_NAMES = {
    VT.UINT8: "u8", VT.INT8: "i8", VT.UINT16: "u16", VT.INT16: "i16", VT.UINT32: "u32",
    VT.INT32: "i32", VT.FLOAT32: "f32", VT.BOOL: "bool", VT.STRING: "string",
    VT.ARRAY: "array", VT.UINT64: "u64", VT.INT64: "i64", VT.FLOAT64: "f64",
}

errors = []


def fail(msg):
    errors.append(msg)
    print("MISMATCH:", msg, file=sys.stderr)


def fnv1a(data: bytes) -> str:
    h = 1469598103934665603
    for b in data:
        h ^= b
        h = (h * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


def same_value(a, b, vtype):
    if vtype in ("f32", "f64"):
        fa, fb = float(a), float(b)
        if vtype == "f32":
            fa, fb = float(np.float32(fa)), float(np.float32(fb))
        return fa == fb or (math.isnan(fa) and math.isnan(fb))
    if vtype == "bool":
        return bool(a) == bool(b)
    return a == b


def compare_kv(where, ours, key, vtype, value, item_type=None):
    if ours["type"] != vtype:
        fail(f"{where}: key {key}: type {ours['type']} != {vtype}")
        return
    if vtype == "array":
        if ours.get("item_type") != item_type:
            fail(f"{where}: key {key}: item type {ours.get('item_type')} != {item_type}")
            return
        if len(ours["value"]) != len(value):
            fail(f"{where}: key {key}: {len(ours['value'])} items != {len(value)}")
            return
        for i, (x, y) in enumerate(zip(ours["value"], value)):
            if not same_value(x, y, item_type):
                fail(f"{where}: key {key}[{i}]: {x!r} != {y!r}")
                return
    elif not same_value(ours["value"], value, vtype):
        fail(f"{where}: key {key}: {ours['value']!r} != {value!r}")


def run_dump(dump, path):
    out = subprocess.run([dump, path], capture_output=True, text=True)
    if out.returncode != 0:
        fail(f"gguf_dump {path} failed: {out.stderr.strip()}")
        return None
    return json.loads(out.stdout)


# ---------------------------------------------------------------------------------------
# (a) Python writes, we read.
# ---------------------------------------------------------------------------------------

def check_python_written(dump, workdir):
    path = os.path.join(workdir, "py_written.gguf")
    w = gguf.GGUFWriter(path, arch="xcheck")
    scalars = [
        ("s.u8", 201, VT.UINT8), ("s.i8", -101, VT.INT8), ("s.u16", 65001, VT.UINT16),
        ("s.i16", -32001, VT.INT16), ("s.u32", 4000000001, VT.UINT32),
        ("s.i32", -2000000001, VT.INT32), ("s.f32", 1.0 / 3.0, VT.FLOAT32),
        ("s.u64", 2**63 + 5, VT.UINT64), ("s.i64", -(2**62) - 3, VT.INT64),
        ("s.f64", math.pi, VT.FLOAT64), ("s.bool", True, VT.BOOL), ("s.bool2", False, VT.BOOL),
        ("s.str", "h\u00e9llo \u2581world", VT.STRING),
    ]
    for key, val, vt in scalars:
        w.add_key_value(key, val, vt)
    tokens = ["<unk>", "\u2581the", "a b", "\u00e9", "x" * 200] + [f"t{i}" for i in range(1000)]
    arrays = [
        ("a.u8", [1, 2, 255], VT.UINT8), ("a.i16", [-5, 7], VT.INT16),
        ("a.u32", [0, 4294967295], VT.UINT32), ("a.i32", [-1, 2, -3], VT.INT32),
        ("a.u64", [2**40], VT.UINT64), ("a.i64", [-(2**40)], VT.INT64),
        ("a.f32", [0.5, -2.25, 1e-3], VT.FLOAT32), ("a.f64", [1e-300, 2.5], VT.FLOAT64),
        ("a.bool", [True, False, True], VT.BOOL), ("tokenizer.ggml.tokens", tokens, VT.STRING),
    ]
    for key, val, vt in arrays:
        w.add_key_value(key, val, VT.ARRAY, sub_type=vt)

    rng = np.random.default_rng(7)
    f32 = rng.standard_normal((3, 5)).astype(np.float32)        # ne = [5, 3]
    f16 = rng.standard_normal((4, 8)).astype(np.float16)        # ne = [8, 4]
    i32 = np.arange(-6, 6, dtype=np.int32)                       # ne = [12]
    q8 = rng.integers(0, 256, size=(2, 3 * 34), dtype=np.uint8)  # q8_0 ne = [96, 2]
    q4k = rng.integers(0, 256, size=(2, 2, 144), dtype=np.uint8)  # q4_K ne = [256, 2, 2]
    tensors = [
        ("t.f32", f32, None, "f32", [5, 3]),
        ("t.f16", f16, None, "f16", [8, 4]),
        ("t.i32", i32, None, "i32", [12]),
        ("t.q8_0", q8, QT.Q8_0, "q8_0", [96, 2]),
        ("t.q4_k", q4k, QT.Q4_K, "q4_K", [256, 2, 2]),
    ]
    for name, arr, raw, _, _ in tensors:
        if raw is None:
            w.add_tensor(name, arr)
        else:
            w.add_tensor(name, arr, raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    ours = run_dump(dump, path)
    if ours is None:
        return
    where = "python-written"
    by_key = {kv["key"]: kv for kv in ours["kv"]}
    expected_keys = ["general.architecture"] + [k for k, _, _ in scalars] + [k for k, _, _ in arrays]
    if [kv["key"] for kv in ours["kv"]] != expected_keys:
        fail(f"{where}: key order {[kv['key'] for kv in ours['kv']]} != {expected_keys}")
    compare_kv(where, by_key.get("general.architecture", {"type": None}),
               "general.architecture", "string", "xcheck")
    for key, val, vt in scalars:
        if key not in by_key:
            fail(f"{where}: key {key} missing")
            continue
        compare_kv(where, by_key[key], key, VT_NAMES[vt], val)
    for key, val, vt in arrays:
        if key not in by_key:
            fail(f"{where}: key {key} missing")
            continue
        compare_kv(where, by_key[key], key, "array", val, VT_NAMES[vt])

    if ours["version"] != 3 or ours["alignment"] != 32:
        fail(f"{where}: version/alignment {ours['version']}/{ours['alignment']}")
    got = {t["name"]: t for t in ours["tensors"]}
    if [t["name"] for t in ours["tensors"]] != [t[0] for t in tensors]:
        fail(f"{where}: tensor order {[t['name'] for t in ours['tensors']]}")
    for name, arr, _, tname, ne in tensors:
        t = got.get(name)
        if t is None:
            fail(f"{where}: tensor {name} missing")
            continue
        if t["type"] != tname or t["ne"] != ne:
            fail(f"{where}: tensor {name}: {t['type']} {t['ne']} != {tname} {ne}")
        data = np.ascontiguousarray(arr).tobytes()
        if t["nbytes"] != len(data):
            fail(f"{where}: tensor {name}: nbytes {t['nbytes']} != {len(data)}")
        if t["fnv1a"] != fnv1a(data):
            fail(f"{where}: tensor {name}: data hash differs")
    print(f"(a) python-written file: {len(ours['kv'])} keys, {len(ours['tensors'])} tensors checked")


# ---------------------------------------------------------------------------------------
# (b) We write, Python reads.
# ---------------------------------------------------------------------------------------

def field_value(field):
    """(type name, item type name or None, python value) of a GGUFReader field."""
    main = field.types[0]
    if main == VT.ARRAY:
        sub = field.types[-1]
        if sub == VT.STRING:
            vals = [bytes(field.parts[i]).decode("utf-8") for i in field.data]
        else:
            vals = [field.parts[i].tolist()[0] for i in field.data]
        return "array", VT_NAMES[sub], vals
    if main == VT.STRING:
        return "string", None, bytes(field.parts[field.data[0]]).decode("utf-8")
    return VT_NAMES[main], None, field.parts[field.data[0]].tolist()[0]


def check_ours_written(dump, workdir):
    path = os.path.join(workdir, "ds4_written.gguf")
    r = subprocess.run([dump, "--write-sample", path], capture_output=True, text=True)
    if r.returncode != 0:
        fail(f"gguf_dump --write-sample failed: {r.stderr.strip()}")
        return
    ours = run_dump(dump, path)
    if ours is None:
        return
    reader = gguf.GGUFReader(path)
    where = "ds4-written"
    py_kv = [(name, f) for name, f in reader.fields.items() if not name.startswith("GGUF.")]
    if [n for n, _ in py_kv] != [kv["key"] for kv in ours["kv"]]:
        fail(f"{where}: keys {[n for n, _ in py_kv]} != ours {[kv['key'] for kv in ours['kv']]}")
    by_key = {kv["key"]: kv for kv in ours["kv"]}
    for name, field in py_kv:
        vtype, item, val = field_value(field)
        if name in by_key:
            compare_kv(where, by_key[name], name, vtype, val, item)
    if reader.alignment != ours["alignment"] or reader.data_offset != ours["data_offset"]:
        fail(f"{where}: alignment/data offset python {reader.alignment}/{reader.data_offset} "
             f"!= ours {ours['alignment']}/{ours['data_offset']}")
    # Known values written by write_sample().
    known = {"general.architecture": "ds4test", "s.u32": 3000000000, "s.i8": -7,
             "s.bool": True, "a.str": ["<s>", "</s>", "hello", "\u2581w"],
             "general.alignment": 64}
    for k, v in known.items():
        if k not in by_key or by_key[k]["value"] != v:
            fail(f"{where}: {k} = {by_key.get(k, {}).get('value')!r}, expected {v!r}")
    if [t.name for t in reader.tensors] != [t["name"] for t in ours["tensors"]]:
        fail(f"{where}: tensor names differ")
    for pt, t in zip(reader.tensors, ours["tensors"]):
        ne = [int(x) for x in pt.shape]
        if QT(pt.tensor_type).name.lower() != t["type"].lower() or ne != t["ne"]:
            fail(f"{where}: tensor {t['name']}: python {pt.tensor_type.name} {ne} "
                 f"!= ours {t['type']} {t['ne']}")
        if int(pt.n_bytes) != t["nbytes"]:
            fail(f"{where}: tensor {t['name']}: python nbytes {pt.n_bytes} != {t['nbytes']}")
        if int(pt.data_offset) != ours["data_offset"] + t["offset"]:
            fail(f"{where}: tensor {t['name']}: python data offset {pt.data_offset}")
        if fnv1a(np.ascontiguousarray(pt.data).tobytes()) != t["fnv1a"]:
            fail(f"{where}: tensor {t['name']}: data hash differs")
    vec = next((pt for pt in reader.tensors if pt.name == "vec.f32"), None)
    if vec is None or not np.array_equal(np.asarray(vec.data, dtype=np.float32),
                                         0.25 * np.arange(10, dtype=np.float32) - 1.0):
        fail(f"{where}: vec.f32 values differ")
    print(f"(b) ds4-written file: {len(py_kv)} keys, {len(reader.tensors)} tensors checked")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dump", required=True)
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    check_python_written(args.dump, args.workdir)
    check_ours_written(args.dump, args.workdir)
    if errors:
        print(f"FAILED: {len(errors)} mismatches", file=sys.stderr)
        return 1
    print("gguf cross-check OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
