# ds4cpp — the two set-up commands (see README.md):
#   make run    installs what is missing, builds, runs the ds4 CLI on the bundled model
#   make test   installs what is missing, builds, runs the whole CPU test suite
# Other targets: build, serve, bench, bench-spec, fuzz, test-cuda, bench-cuda, bench-flash, clean.
# test-cuda / bench-cuda need a GPU machine (sm_90: H100/H200): the cuda-labelled tests (the
# CUDA backend against the CPU oracle, bit for bit, then the DSpark identity sweep on CUDA)
# and the CUDA kernels' GB/s. bench-flash OUT=DIR (GPU machine): the full-shape Flash sweep
# (scripts/bench_cuda_sweep.sh: roofline probe, decode and verify(r) sweeps, op profiles,
# memory, long-context decode after a synthetic fill (ds4-bench --fill-ctx), DSpark with the
# oracle proposer at hit rates 0.9 and 0.7 and a generated random drafter) into DIR
# (STEPS=longctx,spec: those steps alone); tools/bench_plots.py DIR draws its figures.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
PROMPT ?=
N ?= 131

.PHONY: all setup configure build run serve test bench bench-spec fuzz test-cuda bench-cuda bench-flash clean

all: build

setup:
	@bash scripts/setup.sh

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

configure: setup $(BUILD)/build.ninja

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# run: a held-out prompt of the structured channel (scripts/run_default.sh says which), greedy,
# 131 tokens (three whole records);
# PROMPT="..." continues that text instead, N sets the token count.
run: build
	@bash scripts/run_default.sh $(BUILD) "$(PROMPT)" $(N)

PORT ?= 8000
serve: build
	$(BUILD)/bin/ds4-server --port $(PORT)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 900

bench: build
	@bash scripts/bench.sh $(BUILD)

bench-spec: build
	@bash scripts/bench_spec.sh $(BUILD)

fuzz: setup
	@bash scripts/fuzz.sh

build-cuda/build.ninja:
	cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DDS4_CUDA=ON $(CMAKE_FLAGS)

test-cuda: setup build-cuda/build.ninja
	cmake --build build-cuda -j $(JOBS) --target test_cuda test_speculative_sweep
	./build-cuda/tests/test_cuda
	DS4_TEST_BACKEND=cuda ./build-cuda/tests/test_speculative_sweep

bench-cuda: setup build-cuda/build.ninja
	cmake --build build-cuda -j $(JOBS) --target bench_cuda
	./build-cuda/bench/kernels/bench_cuda

# No `setup` here: the GPU machine may have no network; the sweep needs only the build.
OUT ?= bench-flash-out
bench-flash: build-cuda/build.ninja
	cmake --build build-cuda -j $(JOBS) --target ds4-gguf ds4-bench bench_verify bench_cuda
	-cmake --build build-cuda -j $(JOBS) --target ds4-bench-spec ds4-dspark-gguf  # step 7; skipped when it cannot build
	bash scripts/bench_cuda_sweep.sh $(OUT) build-cuda

clean:
	rm -rf $(BUILD) build-cuda
