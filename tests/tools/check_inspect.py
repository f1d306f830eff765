#!/usr/bin/env python3
"""tests/tools/check_inspect.py — cross-checks `ds4-gguf inspect --json --tensors` against the
`gguf` Python package (GGUFReader) on a file made by `ds4-gguf generate`.

Checks: the same tensor set with the same type id, shape (GGUF ne order), byte size and
absolute data offset; the same metadata keys with the same value types and values (arrays:
count, and every item inspect lists — all items up to 64, else the first 16); and that the
validation report says the generated file is a valid DS4 model.
Usage: check_inspect.py DS4_GGUF_BINARY WORK_DIR [generate args...]
Exit 0 on agreement; prints every mismatch and exits 1 otherwise.
"""
import json
import math
import os
import subprocess
import sys

import numpy as np
from gguf import GGUFReader, GGUFValueType

TYPE_NAMES = {
    GGUFValueType.UINT8: "u8", GGUFValueType.INT8: "i8", GGUFValueType.UINT16: "u16",
    GGUFValueType.INT16: "i16", GGUFValueType.UINT32: "u32", GGUFValueType.INT32: "i32",
    GGUFValueType.FLOAT32: "f32", GGUFValueType.BOOL: "bool", GGUFValueType.STRING: "string",
    GGUFValueType.UINT64: "u64", GGUFValueType.INT64: "i64", GGUFValueType.FLOAT64: "f64",
}


def same_scalar(ours, theirs, vtype):
    if vtype == GGUFValueType.FLOAT32:
        return np.float32(ours) == np.float32(theirs) or (math.isnan(ours) and math.isnan(theirs))
    if vtype == GGUFValueType.FLOAT64:
        return float(ours) == float(theirs)
    if vtype == GGUFValueType.BOOL:
        return bool(ours) == bool(theirs)
    return ours == theirs


def main():
    tool, work = sys.argv[1], sys.argv[2]
    gen_args = sys.argv[3:] or ["--profile", "tiny", "--quant", "q2", "--seed", "3",
                                "--fill", "random"]
    os.makedirs(work, exist_ok=True)
    path = os.path.join(work, "inspect-check.gguf")
    subprocess.run([tool, "generate", "-q", *gen_args, "-o", path], check=True)
    out = subprocess.run([tool, "inspect", "--json", "--tensors", path], check=False,
                         capture_output=True, text=True)
    errors = []
    if out.returncode != 0:
        errors.append(f"inspect exit code {out.returncode}, expected 0; stderr: {out.stderr}")
    doc = json.loads(out.stdout)
    reader = GGUFReader(path)

    # ---- tensors ----
    ours = {t["name"]: t for t in doc["tensors"]}
    theirs = {t.name: t for t in reader.tensors}
    for name in sorted(set(ours) ^ set(theirs)):
        errors.append(f"tensor {name}: only in {'inspect' if name in ours else 'GGUFReader'}")
    for name in sorted(set(ours) & set(theirs)):
        a, b = ours[name], theirs[name]
        if a["type_id"] != int(b.tensor_type):
            errors.append(f"tensor {name}: type {a['type_id']} vs {int(b.tensor_type)}")
        if a["shape"] != [int(x) for x in b.shape]:
            errors.append(f"tensor {name}: shape {a['shape']} vs {list(b.shape)}")
        if a["nbytes"] != int(b.n_bytes):
            errors.append(f"tensor {name}: nbytes {a['nbytes']} vs {b.n_bytes}")
        if doc["data_offset"] + a["offset"] != int(b.data_offset):
            errors.append(f"tensor {name}: offset {doc['data_offset'] + a['offset']} vs {b.data_offset}")
    if len(doc["tensors"]) != len(reader.tensors):
        errors.append(f"tensor count {len(doc['tensors'])} vs {len(reader.tensors)}")

    # ---- metadata ----
    fields = {k: f for k, f in reader.fields.items() if not k.startswith("GGUF.")}
    meta = doc["metadata"]
    for key in sorted(set(meta) ^ set(fields)):
        errors.append(f"key {key}: only in {'inspect' if key in meta else 'GGUFReader'}")
    for key in sorted(set(meta) & set(fields)):
        f, m = fields[key], meta[key]
        main_t = f.types[0]
        if main_t == GGUFValueType.ARRAY:
            sub_t = f.types[-1]
            want_type = f"array[{TYPE_NAMES[sub_t]}]"
            values = f.contents()
            v = m["value"]
            if v["count"] != len(values):
                errors.append(f"key {key}: count {v['count']} vs {len(values)}")
            listed = v.get("values", v.get("head"))
            for i, item in enumerate(listed):
                if not same_scalar(item, values[i], sub_t):
                    errors.append(f"key {key}[{i}]: {item!r} vs {values[i]!r}")
                    break
            if "values" in v and len(listed) != len(values):
                errors.append(f"key {key}: inspect lists {len(listed)} of {len(values)} items")
        else:
            want_type = TYPE_NAMES[main_t]
            if not same_scalar(m["value"], f.contents(), main_t):
                errors.append(f"key {key}: {m['value']!r} vs {f.contents()!r}")
        if m["type"] != want_type:
            errors.append(f"key {key}: type {m['type']} vs {want_type}")

    if not doc["validation"]["ok"]:
        errors.append(f"validation failed: {doc['validation']['errors']}")
    arch = fields.get("general.architecture")
    if arch is None or arch.contents() != "deepseek4":
        errors.append("general.architecture is not deepseek4")

    os.remove(path)
    if errors:
        print("\n".join(errors))
        return 1
    print(f"ok: {len(ours)} tensors and {len(meta)} metadata keys agree with GGUFReader")
    return 0


if __name__ == "__main__":
    sys.exit(main())
