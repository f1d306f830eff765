#!/usr/bin/env bash
# scripts/offline_deps.sh — the build dependencies for a GPU machine without network access.
#   scripts/offline_deps.sh download DIR   (on a Debian machine with network: apt-get download
#                                           the -dev packages scripts/setup.sh installs, into DIR)
#   scripts/offline_deps.sh configure DIR [BUILD]   (on the GPU machine: unpack DIR/*.deb under
#                                           /tmp/ds4-deps, no root needed, and configure BUILD,
#                                           default build-cuda, against them with DS4_CUDA=ON)
# Then build as usual (cmake --build build-cuda -j$(nproc) --target test_cuda ...) with
# LD_LIBRARY_PATH=/tmp/ds4-deps/usr/lib/x86_64-linux-gnu for the shared libraries (Google
# Benchmark, OpenSSL). The server (cpp-httplib) is left out: it is not needed to test or time
# the CUDA backend. Why a script: a leased GPU machine starts bare and cannot reach a package
# mirror, while its CUDA toolkit, CMake and ninja are there.
set -euo pipefail
cd "$(dirname "$0")/.."
PKGS=(libgtest-dev libgmock-dev googletest libbenchmark-dev libbenchmark1debian libcli11-dev
      nlohmann-json3-dev libssl-dev libssl3)
DEPS=/tmp/ds4-deps
case "${1:-}" in
  download)
    dir=${2:?usage: scripts/offline_deps.sh download DIR}
    mkdir -p "$dir"
    (cd "$dir" && apt-get download "${PKGS[@]}")
    echo "offline_deps: $(ls "$dir"/*.deb | wc -l) packages in $dir"
    ;;
  configure)
    dir=${2:?usage: scripts/offline_deps.sh configure DIR [BUILD]}
    build=${3:-build-cuda}
    ls "$dir"/*.deb >/dev/null 2>&1 || { echo "offline_deps: no .deb files in $dir" >&2; exit 1; }
    mkdir -p "$DEPS"
    for f in "$dir"/*.deb; do dpkg -x "$f" "$DEPS"; done
    lib=$DEPS/usr/lib/x86_64-linux-gnu
    cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDS4_CUDA=ON \
      -DCMAKE_PREFIX_PATH="$DEPS/usr" -DOPENSSL_ROOT_DIR="$DEPS/usr" -DOPENSSL_INCLUDE_DIR="$DEPS/usr/include" \
      -DOPENSSL_CRYPTO_LIBRARY="$lib/libcrypto.so" -DOPENSSL_SSL_LIBRARY="$lib/libssl.so" \
      -DCMAKE_DISABLE_FIND_PACKAGE_httplib=ON
    echo "offline_deps: configured $build; run its programs with LD_LIBRARY_PATH=$lib"
    ;;
  *)
    sed -n '2,12p' "$0" >&2
    exit 2
    ;;
esac
