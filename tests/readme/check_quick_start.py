#!/usr/bin/env python3
"""tests/readme/check_quick_start.py ROOT BUILD — README.md's Quick start is what `make run` prints.

Runs scripts/run_default.sh BUILD (what `make run` runs after the build) and checks that
  * README.md opens (after its title) with a code block holding exactly `make run` and `make test`;
  * the continuation in the README's `$ make run` block equals the script's stdout, line by line;
  * the README's prompt lines and command line equal the script's stderr lines;
  * the README's speed line and the real one agree on the token counts and the stop reason
    (the tokens/s figures depend on the machine and are not compared);
  * ds4 prints exactly one backend line ("ds4: backend cpu: avx512, 2 threads"), and so does the
    README, right after "continuation:" (what it names depends on the machine: only its form is
    compared).
Exit status 0 when all hold, 1 with the differences otherwise.
"""
import re
import subprocess
import sys
from pathlib import Path

BACKEND_PREFIX = "ds4: backend "
BACKEND_LINE = re.compile(r"ds4: backend (cpu: (scalar|avx2|avx512), \d+ threads?|cuda: device \d+, .+)$")


def main() -> int:
    root, build = Path(sys.argv[1]), sys.argv[2]
    readme = (root / "README.md").read_text(encoding="utf-8").splitlines()
    errors = []

    # The opening: title, blank, ``` block with the two commands.
    body = [l for l in readme[1:] if l.strip()][:4]
    cmds = [l.split("#")[0].strip() for l in body[1:3]]
    if body[0] != "```" or cmds != ["make run", "make test"] or body[3] != "```":
        errors.append(f"README does not open with the make run / make test block: {body}")

    # The `$ make run` block.
    try:
        start = readme.index("$ make run")
    except ValueError:
        print("README.md: no '$ make run' block")
        return 1
    end = readme.index("```", start)
    block = readme[start + 1:end]
    cont_at = block.index("continuation:")
    want_err = [l for l in block[:cont_at] if not l.startswith("...")] + ["continuation:"]
    want_backend = [l for l in block[cont_at + 1:-1] if l.startswith(BACKEND_PREFIX)]
    want_out = [l for l in block[cont_at + 1:-1] if not l.startswith(BACKEND_PREFIX)]
    want_speed = block[-1]

    # The README shows `make run` from the repo root with BUILD=build; any other build folder is
    # passed relative to the root when inside it and named "build/" in the comparison.
    build_abs = Path(build).resolve()
    try:
        build = str(build_abs.relative_to(root.resolve()))
    except ValueError:
        build = str(build_abs)
    run = subprocess.run(["bash", str(root / "scripts" / "run_default.sh"), build],
                         cwd=root, capture_output=True, text=True, timeout=100)
    if run.returncode != 0:
        print(f"run_default.sh exited {run.returncode}:\n{run.stderr}")
        return 1
    got_out = run.stdout.splitlines()
    got_err = run.stderr.splitlines()
    speed = [l for l in got_err if l.startswith("prefill:")]
    backend = [l for l in got_err if l.startswith(BACKEND_PREFIX)]
    got_err = [l.replace(build.rstrip("/") + "/", "build/") for l in got_err
               if not l.startswith("prefill") and not l.startswith(BACKEND_PREFIX)]

    if got_out != want_out:
        errors.append("continuation differs:\n README: " + "\n         ".join(want_out) +
                      "\n actual: " + "\n         ".join(got_out))
    if got_err != want_err:
        errors.append("stderr lines differ:\n README: " + "\n         ".join(want_err) +
                      "\n actual: " + "\n         ".join(got_err))

    def shape(line: str):  # token counts and stop reason, not the rates
        m = re.match(r"prefill: (\d+) tokens, [\d.]+ t/s, generation: (\d+) tokens, [\d.]+ t/s \((.*)\)$",
                     line)
        return m.groups() if m else None

    if len(speed) != 1 or shape(speed[0]) is None or shape(speed[0]) != shape(want_speed):
        errors.append(f"speed line: README {want_speed!r}, actual {speed!r}")

    for name, lines in (("README", want_backend), ("actual", backend)):
        if len(lines) != 1 or not BACKEND_LINE.match(lines[0]):
            errors.append(f"backend line ({name}): want one line like 'ds4: backend cpu: avx512, 2 threads', "
                          f"got {lines!r}")
    if not block[cont_at + 1].startswith(BACKEND_PREFIX):
        errors.append(f"README: the backend line should follow 'continuation:', not {block[cont_at + 1]!r}")

    for e in errors:
        print(e)
    if not errors:
        print(f"README quick start matches: {len(got_out)} continuation lines, {speed[0]}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
