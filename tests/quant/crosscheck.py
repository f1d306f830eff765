#!/usr/bin/env python3
"""tests/quant/crosscheck.py — quant/ vs the GGUF python package, bit for bit.

For F32, F16, BF16, Q8_0, Q2_K, Q4_K and IQ2_XXS: random blocks (random bytes; f16 scale
fields replaced by random finite values — normal ones, then a second pass that also allows
subnormals, zero and negative scales) are dequantized by gguf.quants.dequantize and by our
dequantize_row (through quant_tool); the float32 outputs must be identical bit patterns.
F16 and BF16 are checked exhaustively over all 65536 patterns (NaN payloads included).
Q8_K is skipped: gguf-py has no Q8_K dequantizer (its C++ side is covered by unit tests).

Quantizers: our Q8_0, F16 and BF16 quantize_row output must equal gguf's quantize byte for
byte (Q8_0: d = amax/127, q = round-half-away(x/d), as ggml), including exact .5 ties.

Exit 0 on success, 1 on any mismatch, 77 if numpy/gguf are missing (a failure in ctest: scripts/setup.sh installs them).
"""
import argparse
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    from gguf import GGMLQuantizationType as T
    from gguf import quants
    from gguf.constants import GGML_QUANT_SIZES
except ImportError as e:  # pragma: no cover
    print(f"SKIP: {e}")
    sys.exit(77)

# Offsets of f16 scale fields inside one block, per type.
F16_FIELDS = {
    T.Q8_0: [0],
    T.Q2_K: [80, 82],
    T.Q4_K: [0, 2],
    T.IQ2_XXS: [0],
}
TOOL_NAMES = {T.F32: "f32", T.F16: "f16", T.BF16: "bf16", T.Q8_0: "q8_0", T.Q2_K: "q2_K",
              T.Q4_K: "q4_K", T.IQ2_XXS: "iq2_xxs"}


def run_tool(tool, mode, qtype, data: bytes, tmp) -> bytes:
    src = os.path.join(tmp, "in.bin")
    dst = os.path.join(tmp, "out.bin")
    with open(src, "wb") as f:
        f.write(data)
    subprocess.run([tool, mode, TOOL_NAMES[qtype], src, dst], check=True)
    with open(dst, "rb") as f:
        return f.read()


def random_f16_scales(rng, n, allow_any_finite):
    if allow_any_finite:
        bits = rng.integers(0, 0x10000, size=n, dtype=np.uint32).astype(np.uint16)
        bits = np.where((bits & 0x7C00) == 0x7C00, bits & 0x83FF, bits)  # inf/nan -> subnormal
        return bits.astype(np.uint16)
    # Normal, both signs, magnitudes 2^-14 .. 2^4 (larger ones are legal but uninteresting).
    exp = rng.integers(1, 20, size=n, dtype=np.uint16)
    mant = rng.integers(0, 1024, size=n, dtype=np.uint16)
    sign = rng.integers(0, 2, size=n, dtype=np.uint16)
    return ((sign << 15) | (exp << 10) | mant).astype(np.uint16)


def random_blocks(rng, qtype, n_blocks, allow_any_finite):
    _, type_size = GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(n_blocks, type_size), dtype=np.uint8)
    for off in F16_FIELDS.get(qtype, []):
        scales = random_f16_scales(rng, n_blocks, allow_any_finite)
        raw[:, off:off + 2] = scales.view(np.uint8).reshape(n_blocks, 2)
    return raw


def compare(name, ours: np.ndarray, theirs: np.ndarray) -> bool:
    a = ours.view(np.uint32)
    b = np.ascontiguousarray(theirs, dtype=np.float32).reshape(-1).view(np.uint32)
    if a.shape != b.shape:
        print(f"FAIL {name}: {a.shape} values vs gguf {b.shape}")
        return False
    bad = np.nonzero(a != b)[0]
    if bad.size:
        i = bad[0]
        print(f"FAIL {name}: {bad.size}/{a.size} differ; first at {i}: "
              f"ours {a[i]:08x} ({ours[i]!r}) gguf {b[i]:08x} ({b.view(np.float32)[i]!r})")
        return False
    print(f"ok   {name}: {a.size} values bit-identical")
    return True


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    ap.add_argument("--blocks", type=int, default=4096)
    ap.add_argument("--seed", type=int, default=20261202)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        # ---- dequantization -----------------------------------------------------------
        all16 = np.arange(0x10000, dtype=np.uint32).astype(np.uint16)
        for qtype in (T.F16, T.BF16):
            ours = np.frombuffer(run_tool(args.tool, "dequant", qtype, all16.tobytes(), tmp),
                                 dtype=np.float32)
            ok &= compare(f"dequant {qtype.name} exhaustive", ours,
                          quants.dequantize(all16.view(np.uint8), qtype))
        f32 = rng.integers(0, 2**32, size=65536, dtype=np.uint64).astype(np.uint32)
        ours = np.frombuffer(run_tool(args.tool, "dequant", T.F32, f32.tobytes(), tmp),
                             dtype=np.float32)
        ok &= compare("dequant F32", ours, quants.dequantize(f32.view(np.uint8), T.F32))
        for qtype in (T.Q8_0, T.Q2_K, T.Q4_K, T.IQ2_XXS):
            for any_finite in (False, True):
                raw = random_blocks(rng, qtype, args.blocks, any_finite)
                ours = np.frombuffer(run_tool(args.tool, "dequant", qtype, raw.tobytes(), tmp),
                                     dtype=np.float32)
                theirs = quants.dequantize(raw, qtype)
                label = "finite scales" if any_finite else "normal scales"
                ok &= compare(f"dequant {qtype.name} ({label})", ours, theirs)
        print("skip Q8_K: gguf-py has no Q8_K dequantizer")

        # ---- quantizers with a gguf-py counterpart ---------------------------------------
        x = rng.standard_normal(32 * 2048).astype(np.float32)
        x[: 32 * 512] *= np.float32(1e-3)
        x[32 * 512: 32 * 1024] *= np.float32(300.0)
        # Exact ties: blocks with amax 127 (d = 1) and values k + 0.5.
        ties = rng.integers(-126, 126, size=(64, 32)).astype(np.float32) + np.float32(0.5)
        ties[:, 0] = np.float32(127.0)
        x = np.concatenate([x, ties.reshape(-1), np.zeros(32, dtype=np.float32)])
        for qtype in (T.Q8_0, T.F16, T.BF16):
            ours = np.frombuffer(run_tool(args.tool, "quant", qtype, x.tobytes(), tmp),
                                 dtype=np.uint8)
            theirs = np.ascontiguousarray(quants.quantize(x, qtype)).view(np.uint8).reshape(-1)
            if ours.shape != theirs.shape or not np.array_equal(ours, theirs):
                n_bad = int(np.count_nonzero(ours != theirs)) if ours.shape == theirs.shape else -1
                print(f"FAIL quant {qtype.name}: {n_bad} bytes differ from gguf quantize")
                ok = False
            else:
                print(f"ok   quant {qtype.name}: {ours.size} bytes identical to gguf quantize")
        # F16 rounding on awkward values: overflow, subnormals, ties.
        edge = np.array([65504, 65519, 65520, 1e9, -1e9, 2**-24, 2**-25, 3 * 2**-25, 2**-26,
                         1 + 2**-11, 1 + 3 * 2**-11, -0.0, 0.0, 1e-30, np.inf, -np.inf],
                        dtype=np.float32)
        edge = np.concatenate([edge, np.zeros(32 - edge.size % 32, dtype=np.float32)])
        ours = np.frombuffer(run_tool(args.tool, "quant", T.F16, edge.tobytes(), tmp),
                             dtype=np.uint16)
        with np.errstate(over="ignore"):
            theirs = edge.astype(np.float16).view(np.uint16)
        if not np.array_equal(ours, theirs):
            print(f"FAIL quant F16 edge cases: ours {ours[:16]} numpy {theirs[:16]}")
            ok = False
        else:
            print("ok   quant F16 edge cases identical to numpy")
    print("PASS" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
