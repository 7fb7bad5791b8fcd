# The quick start's `./dev.sh run` and `./dev.sh test` install make and everything else, then
# call these targets; each target also installs what is missing (scripts/install_deps.sh).
BUILD ?= build
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=RelWithDebInfo

.PHONY: all deps build run test bench fuzz clean

all: build

deps:
	@scripts/install_deps.sh

build: deps
	@cmake -S . -B $(BUILD) -G Ninja $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD)

run: build
	@scripts/run_demo.sh $(BUILD)/src/pillar

test: build
	@scripts/run_tests.sh $(BUILD)

bench: build
	@scripts/install_deps.sh --bench
	@bench/run_all.sh $(BUILD)/src/pillar
	@bench/run_security.sh $(BUILD)
	@bench/run_signing.sh $(BUILD)
	@bench/run_audit.sh $(BUILD)
	@bench/run_ckpt.sh $(BUILD)
	@bench/run_collective.sh $(BUILD)

clean:
	rm -rf $(BUILD) build-fuzz .pillar
