#!/usr/bin/env python3
"""Checks the dependency rule of docs/ARCHITECTURE.md on every #include "..." line.

A library folder may include only itself and folders above it in the order below;
frontends (cli/, bench/, server/) may include only engine/ and core/. Tools may include
any library (they are leaf programs) but no frontend. A folder inside a library (a
sub-library, e.g. backend/cpu/) is private to that library: only files of the library
include it (others reach it through the library's interface, e.g. backend/registry.h).
tests/ and bench/kernels/ may include anything. Exits non-zero listing violations.
"""
import pathlib
import re
import sys

ORDER = ["core", "gguf", "quant", "tokenizer", "model", "backend", "session", "sample",
         "speculative", "engine"]
FRONTENDS = {"cli", "bench", "server"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
SUFFIXES = {".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh", ".inc"}


def top_folder(rel: pathlib.PurePosixPath) -> str:
    return rel.parts[0] if len(rel.parts) > 1 else ""


def allowed(src: str, dst: str) -> bool:
    if dst == src:
        return True
    if src in ORDER:
        return dst in ORDER and ORDER.index(dst) < ORDER.index(src)
    if src in FRONTENDS:
        return dst in ("engine", "core")
    if src == "tools":
        return dst in ORDER
    return True  # tests/ may include anything


def self_test() -> int:
    """The checker must catch an upward include and a sub-library include from another
    library, and accept a downward one."""
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        t = pathlib.Path(tmp)
        (t / "gguf").mkdir()
        (t / "engine").mkdir()
        (t / "cli").mkdir()
        (t / "gguf" / "a.cpp").write_text('#include "core/status.h"\n')
        (t / "engine" / "b.cpp").write_text('#include "gguf/gguf.h"\n')
        if scan(t)[1]:
            print("self-test: clean tree reported violations")
            return 1
        (t / "backend" / "cpu").mkdir(parents=True)
        (t / "speculative").mkdir()
        (t / "backend" / "b.cpp").write_text('#include "backend/cpu/ops.h"\n')
        (t / "backend" / "cpu" / "ops.cpp").write_text('#include "backend/cpu/ops.h"\n')
        (t / "engine" / "e.cpp").write_text('#include "backend/backend.h"\n')
        if scan(t)[1]:
            print("self-test: clean tree (with a sub-library) reported violations")
            return 1
        (t / "gguf" / "c.cpp").write_text('#include "model/config.h"\n')
        (t / "cli" / "d.cpp").write_text('#include "session/session.h"\n')
        (t / "speculative" / "s.cpp").write_text('#include "backend/cpu/ops.h"\n')
        (t / "engine" / "f.cpp").write_text('#include "backend/cpu/ops.h"\n')
        bad = scan(t)[1]
        if len(bad) != 4 or sum("private" in b for b in bad) != 2:
            print("self-test: violations not detected:", bad)
            return 1
    return 0


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--self-test":
        rc = self_test()
        print("layering self-test:", "ok" if rc == 0 else "FAILED")
        return rc
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    checked, bad = scan(root)
    for b in bad:
        print(b)
    print(f"layering: {checked} include lines checked, {len(bad)} violations")
    return 1 if bad else 0


def scan(root: pathlib.Path):
    known = set(ORDER) | FRONTENDS | {"tools"}
    bad = []
    checked = 0
    for path in sorted(root.rglob("*")):
        if path.suffix not in SUFFIXES or not path.is_file():
            continue
        rel = pathlib.PurePosixPath(path.relative_to(root).as_posix())
        if rel.parts[0].startswith("build") or rel.parts[0].startswith("."):
            continue
        src = top_folder(rel)
        if src not in known or rel.parts[:2] == ("bench", "kernels"):
            continue  # bench/kernels/ holds internal benchmarks: like tests, they include anything
        for lineno, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            checked += 1
            target = pathlib.PurePosixPath(m.group(1))
            dst = top_folder(target)
            if dst not in known:
                continue  # same-folder relative include or a third-party header
            if not allowed(src, dst):
                bad.append(f"{rel}:{lineno}: {src}/ may not include {m.group(1)}")
            elif (src != dst and src in known and len(target.parts) > 2
                  and (root / target.parts[0] / target.parts[1]).is_dir()):
                bad.append(f"{rel}:{lineno}: {m.group(1)} is private to {dst}/ "
                           f"({dst}/{target.parts[1]}/ is a sub-library; use {dst}/'s interface)")
    return checked, bad


if __name__ == "__main__":
    sys.exit(main())
