#!/usr/bin/env python3
"""tests/tools/check_cuda_ab.py SCRIPT WORKDIR — scripts/cuda_ab.sh's GPU-free modes.

In a scratch git repository holding a copy of the script: a commit, then a working tree that
modifies one file, adds one and deletes one. `prepare HEAD DIR` must hold HEAD's versions of the
modified and the deleted file and list the added one in DIR/.added; `overlay DIR DEST` must give
HEAD's tree back (the added file gone, the others restored) without .git or build folders; bad
arguments exit 2 with a message. The `run` mode needs a GPU machine and is not run here.
"""
import os
import shutil
import subprocess
import sys


def sh(*args, cwd=None, ok=True):
    p = subprocess.run(list(args), cwd=cwd, capture_output=True, text=True)
    if ok and p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(args)} exited {p.returncode}: {p.stderr}")
    return p


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def read(path):
    with open(path) as f:
        return f.read()


def expect(cond, what):
    if not cond:
        sys.exit("FAIL: " + what)


def main():
    script, work = sys.argv[1], sys.argv[2]
    shutil.rmtree(work, ignore_errors=True)
    repo = os.path.join(work, "repo")
    os.makedirs(os.path.join(repo, "scripts"))
    shutil.copy(script, os.path.join(repo, "scripts", "cuda_ab.sh"))
    write(os.path.join(repo, "backend", "x.cu"), "version 1\n")
    write(os.path.join(repo, "data", "keep.txt"), "kept\n")
    write(os.path.join(repo, "README.md"), "unchanged\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    sh(*git, "init", "-q", cwd=repo)
    sh(*git, "add", ".", cwd=repo)
    sh(*git, "commit", "-q", "-m", "base", cwd=repo)
    # The working tree: x.cu modified, y.cu added, keep.txt deleted, build outputs beside it.
    write(os.path.join(repo, "backend", "x.cu"), "version 2\n")
    write(os.path.join(repo, "backend", "y.cu"), "new file\n")
    sh(*git, "add", "backend/y.cu", cwd=repo)
    sh(*git, "rm", "-q", "data/keep.txt", cwd=repo)
    write(os.path.join(repo, "build", "junk"), "x")
    write(os.path.join(repo, "build-cuda", "junk"), "x")

    ab = os.path.join(repo, "scripts", "cuda_ab.sh")
    prepared = os.path.join(work, "base-files")
    p = sh("bash", ab, "prepare", "HEAD", prepared, cwd=work)
    expect("3 file(s) differ" in p.stdout, f"prepare's summary: {p.stdout!r}")
    expect(read(os.path.join(prepared, "backend", "x.cu")) == "version 1\n", "prepare: HEAD's x.cu")
    expect(read(os.path.join(prepared, "data", "keep.txt")) == "kept\n", "prepare: the deleted file's HEAD version")
    expect(read(os.path.join(prepared, ".added")).split() == ["backend/y.cu"], "prepare: .added lists y.cu alone")
    expect(not os.path.exists(os.path.join(prepared, "README.md")), "prepare: an unchanged file is not copied")

    dest = os.path.join(work, "base-tree")
    sh("bash", ab, "overlay", prepared, dest, cwd=work)
    expect(read(os.path.join(dest, "backend", "x.cu")) == "version 1\n", "overlay: x.cu back to HEAD's")
    expect(not os.path.exists(os.path.join(dest, "backend", "y.cu")), "overlay: the added file removed")
    expect(read(os.path.join(dest, "data", "keep.txt")) == "kept\n", "overlay: the deleted file restored")
    expect(read(os.path.join(dest, "README.md")) == "unchanged\n", "overlay: an unchanged file copied")
    expect(os.path.exists(os.path.join(dest, "scripts", "cuda_ab.sh")), "overlay: the scripts copied")
    for gone in (".git", "build", "build-cuda"):
        expect(not os.path.exists(os.path.join(dest, gone)), f"overlay: {gone} must not be copied")
    # The working tree itself is untouched.
    expect(read(os.path.join(repo, "backend", "x.cu")) == "version 2\n", "the working tree unchanged")

    for args, needle in ((["prepare", "no-such-rev", os.path.join(work, "d")], "not a revision"),
                         (["overlay", os.path.join(work, "empty"), os.path.join(work, "d2")], "no prepared revision"),
                         ([], "scripts/cuda_ab.sh prepare")):
        os.makedirs(os.path.join(work, "empty"), exist_ok=True)
        p = sh("bash", ab, *args, cwd=work, ok=False)
        expect(p.returncode == 2, f"{args}: exit {p.returncode}, want 2")
        expect(needle in p.stderr, f"{args}: stderr {p.stderr!r} lacks {needle!r}")
    print("cuda_ab: prepare, overlay and bad arguments checked")


if __name__ == "__main__":
    main()
