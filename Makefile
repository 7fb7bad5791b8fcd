# The quick start's `./dev.sh run` and `./dev.sh test` install make and everything else, then
# call these targets; each target also installs what is missing (scripts/install_deps.sh).
BUILD ?= build
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=RelWithDebInfo

.PHONY: all deps configure build run test bench fuzz clean gateway

all: build

deps:
	@scripts/install_deps.sh

configure: deps
	@cmake -S . -B $(BUILD) -G Ninja $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD)

# The demo runs the binary alone: a newcomer's first command builds that, not the test suite.
run: configure
	@cmake --build $(BUILD) --target pillar
	@scripts/run_demo.sh $(BUILD)/src/pillar

# The two digit models behind a pillar gateway over two replicas (docs/resilience.md).
gateway: configure
	@cmake --build $(BUILD) --target pillar
	@scripts/run_gateway_demo.sh $(BUILD)/src/pillar

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
	@bench/run_cli.sh $(BUILD)

clean:
	rm -rf $(BUILD) build-fuzz .pillar
