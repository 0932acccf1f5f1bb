# Developer and CI entry points; `make` lists them. CI runs `make test`
# through .ci/run.

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
MAKEFLAGS += --no-builtin-rules

# How long `make fuzz` runs each fuzz target.
FUZZTIME ?= 15s

# staticcheck is pinned in the separate tools module so its dependencies
# stay out of the main go.mod.
STATICCHECK := go tool -modfile=tools/go.mod staticcheck

# Generated protobuf code, without protoc: tools/protogen compiles PROTOS
# (named relative to proto/, as their imports and descriptors name them)
# with protocompile and runs protoc-gen-go and protoc-gen-go-grpc, pinned
# in the tools module, writing under the directory given as $(1). Their
# go_package puts the output in PB_DIR.
PROTOS := agenthost/agent/v1/agent.proto
PB_DIR := internal/agentpb
protogen = (cd tools && go run ./protogen -I ../proto -out $(1) $(addprefix ../proto/,$(PROTOS)))

.PHONY: help build test test-loaded test-faults lint generate check-generate fuzz bench bench-go demo demo-real cluster-demo tidy check-tidy clean clis test-real-clis acp-sdk acpx test-acp-sdk

help: ## Show this help.
	@echo "usage: make <target> [FUZZTIME=$(FUZZTIME)]"
	@echo
	@awk 'BEGIN { FS = ":.*## " } /^[a-zA-Z0-9_-]+:.*## / { printf "  %-15s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)

build: ## Build every package, and bin/agenthost.
	go build ./...
	go build -o bin/agenthost ./cmd/agenthost

# Where the pinned CLIs are installed (make clis), the tests that drive
# them run too: the realclis build tag and the variables that name them.
# The official ACP TypeScript SDK's client test runs where make acp-sdk
# installed it (npm); without, it skips and says so.
test: lint clis acp-sdk ## Run lint, then every test with the race detector (the fault-injection suite and, where npm is, the real CLIs and the ACP TypeScript SDK client included).
	@if [[ -e "$(CLI_STAMP)" ]]; then \
		echo "go test: with the pinned claude $(CLAUDE_CLI_VERSION) and codex $(CODEX_CLI_VERSION) from $(CLI_CACHE)"; \
		export AGENTHOST_REAL_CLAUDE=$(CLI_CACHE)/node_modules/.bin/claude AGENTHOST_REAL_CODEX=$(CLI_CACHE)/node_modules/.bin/codex; \
		tags="-tags realclis"; \
	fi; \
	if [[ -e "$(ACP_SDK_STAMP)" ]]; then \
		echo "go test: with the pinned ACP TypeScript SDK $(ACP_SDK_VERSION) from $(ACP_SDK_CACHE)"; \
		export AGENTHOST_ACP_SDK=$(ACP_SDK_CACHE); \
	fi; \
	go test -race -count=1 -timeout 9m $${tags:-} ./...

# The suite must hold on a busy machine: test-loaded runs make test three
# times in a row while two busy loops (started and always stopped by the
# script) compete for the CPUs, and stops at the first failure.
test-loaded: ## Run make test three times in a row while two busy loops compete for the CPUs; stop at the first failure.
	RUNS=3 BUSY_LOOPS=2 MAKE="$(MAKE)" scripts/test-loaded.sh

# The faults need root for a small tmpfs and a read-only bind mount; as
# another user those two skip and say so. The host's own log lines (routed
# to t.Log) are filtered out; the tests' lines, results and panics stay.
# The cluster fault test (internal/clusterfaults) runs at its large size
# here, at its small one in make test.
test-faults: ## Run only the fault-injection suites (one machine's, and the cluster's at its large size), printing what each fault injected and what held.
	AGENTHOST_CLUSTER_FAULTS=large go test -race -count=1 -v -timeout 20m ./internal/faults ./internal/clusterfaults 2>&1 | grep -vE '^\s+(logtest\.go:[0-9]+:|Level )'

# gofmt is given the tracked and untracked (but not ignored) files, so
# testdata and scratch files outside git do not count; generated protobuf
# code is left as protoc-gen-go writes it.
lint: check-generate ## Check generated code and gofmt, then run go vet and staticcheck.
	@unformatted=$$(git ls-files -z --cached --others --exclude-standard -- '*.go' ':!:*.pb.go' \
		| xargs -0 -r sh -c 'for f; do [ -e "$$f" ] && printf "%s\0" "$$f"; done' _ | xargs -0 -r gofmt -l); \
	if [[ -n "$$unformatted" ]]; then \
		echo "These files need gofmt -w:"; echo "$$unformatted"; exit 1; \
	fi
	go vet ./...
	$(STATICCHECK) ./...

# Generating into a temporary directory first means a failed run leaves
# PB_DIR alone, and a .pb.go whose .proto is gone does not linger.
generate: ## Regenerate internal/agentpb from proto/ (no protoc needed).
	@tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	$(call protogen,"$$tmp"); \
	rm -f $(PB_DIR)/*.pb.go; \
	cp "$$tmp/$(PB_DIR)"/*.pb.go $(PB_DIR)/

check-generate: ## Fail if internal/agentpb is not what make generate writes.
	@tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	$(call protogen,"$$tmp/new"); \
	mkdir -p "$$tmp/new/$(PB_DIR)" "$$tmp/old"; \
	find $(PB_DIR) -maxdepth 1 -name '*.pb.go' -exec cp -t "$$tmp/old" {} +; \
	if ! diff -ru "$$tmp/old" "$$tmp/new/$(PB_DIR)" >"$$tmp/diff"; then \
		echo "$(PB_DIR) does not match proto/: run make generate"; \
		head -n 40 "$$tmp/diff"; exit 1; \
	fi

fuzz: ## Run every Fuzz* target for FUZZTIME each (default 15s).
	FUZZTIME=$(FUZZTIME) scripts/fuzz.sh

# The first-token rows drive the pinned CLIs (make clis); without npm
# they are printed as skipped, saying why.
bench: clis ## Measure every performance figure (internal/benchrun lists them), and the real CLIs' first token, beside its baseline; print the table and write it into BENCHMARKS.md.
	@if [[ -e "$(CLI_STAMP)" ]]; then \
		export AGENTHOST_REAL_CLAUDE=$(CLI_CACHE)/node_modules/.bin/claude AGENTHOST_REAL_CODEX=$(CLI_CACHE)/node_modules/.bin/codex; \
	fi; \
	echo "go run ./internal/benchrun -update BENCHMARKS.md"; \
	go run ./internal/benchrun -update BENCHMARKS.md

bench-go: ## Run the packages' go test -bench suites.
	go test -run '^$$' -bench . -benchmem ./...

# On a fresh machine the first run compiles every dependency (Badger,
# gRPC, go-plugin…) for minutes; -v names each package as it is compiled,
# so the wait says what it is doing, and prints nothing once cached.
demo: ## Build bin/agenthost, kill its host mid-turn, restart it, and check the session's journal (examples/demo).
	@echo "make demo: compiling bin/agenthost and the demo (examples/demo); the first run on a fresh machine compiles every dependency, about 3 CPU-minutes (2-3 minutes on an idle 2-core machine), listing each package as it goes"
	go build -v -o bin/agenthost ./cmd/agenthost
	go run -v ./examples/demo

# Unlike the tests, which skip without the CLIs, the demo of the real path
# has nothing to show without them: no npm is an error here.
demo-real: clis ## Watch the real claude CLI do a turn with a tool call and a permission through agenthost, offline (examples/demoreal; needs npm).
	@[[ -e "$(CLI_STAMP)" ]] || { echo "make demo-real needs the pinned claude CLI, which make clis installs with npm: install Node.js and npm, then run it again"; exit 1; }
	AGENTHOST_REAL_CLAUDE=$(CLI_CACHE)/node_modules/.bin/claude go run ./examples/demoreal

# The member binary embeds an etcd server; agenthost itself links only the
# etcd client. The script keeps everything in a private temporary
# directory and kills every process it started however it ends.
cluster-demo: ## Build bin/agenthost and bin/etcdmember, run a 3-member etcd on loopback and two hosts on it, kill one host and watch the other take its session over (scripts/cluster-demo.sh).
	go build -o bin/agenthost ./cmd/agenthost
	go build -o bin/etcdmember ./internal/etcdmember
	scripts/cluster-demo.sh bin

tidy: ## Tidy go.mod and go.sum (also those of the tools module).
	go mod tidy
	cd tools && go mod tidy

# go mod tidy -diff prints the changes tidy would make and fails if there
# are any, without writing go.mod or go.sum.
check-tidy: ## Fail if go.mod or go.sum (or the tools module's) are not tidy.
	go mod tidy -diff
	cd tools && go mod tidy -diff

clean: ## Remove build output (bin/).
	rm -rf bin/

# npm_pinned installs npm packages $(3), pinned, into the cache folder
# $(1) (never globally) and touches the stamp $(2), which names the pins,
# so a changed pin reinstalls; without npm it prints $(4) and succeeds, so
# the tests that need the packages skip.
define npm_pinned
if [[ -e "$(2)" ]]; then exit 0; fi; \
if ! command -v npm >/dev/null; then echo "$(4)"; exit 0; fi; \
echo "installing $(3) into $(1)"; \
rm -rf "$(1)"; mkdir -p "$(1)"; \
npm install --no-save --no-audit --no-fund --loglevel=error --prefix "$(1)" $(3); \
touch "$(2)"
endef

# The real agent CLIs, pinned, installed into a cache folder (never
# globally) for the tests that drive them offline against a scripted model
# server. The stamp names both versions, so a changed pin reinstalls;
# without npm the tests skip, and this says so.
CLI_CACHE ?= $(CURDIR)/.cache/clis
CLAUDE_CLI_VERSION := 2.1.332
CODEX_CLI_VERSION := 0.171.0
CLI_STAMP = $(CLI_CACHE)/.installed-claude-$(CLAUDE_CLI_VERSION)-codex-$(CODEX_CLI_VERSION)

clis: ## Install the pinned claude and codex CLIs with npm into .cache/clis (without npm, say so: their tests skip).
	@$(call npm_pinned,$(CLI_CACHE),$(CLI_STAMP),@anthropic-ai/claude-code@$(CLAUDE_CLI_VERSION) @openai/codex@$(CODEX_CLI_VERSION),npm not found: the tests of the real claude and codex CLIs will skip (install Node.js and npm to run them))

test-real-clis: clis ## Run only the tests of the real claude and codex CLIs, verbosely.
	@[[ -e "$(CLI_STAMP)" ]] || { echo "the pinned CLIs are not installed: make clis needs npm"; exit 1; }
	AGENTHOST_REAL_CLAUDE=$(CLI_CACHE)/node_modules/.bin/claude \
	AGENTHOST_REAL_CODEX=$(CLI_CACHE)/node_modules/.bin/codex \
		go test -race -tags realclis -count=1 -v ./internal/realcli ./plugins/...

# The official ACP TypeScript SDK, pinned (with the zod it needs), for the
# test that drives agenthost acp with it as the client
# (examples/acp-ts-client); installed like the CLIs, never globally.
ACP_SDK_CACHE ?= $(CURDIR)/.cache/acp-sdk
ACP_SDK_VERSION := 2.4.0
ACP_SDK_ZOD_VERSION := 4.6.7
ACP_SDK_STAMP = $(ACP_SDK_CACHE)/.installed-sdk-$(ACP_SDK_VERSION)-zod-$(ACP_SDK_ZOD_VERSION)

acp-sdk: ## Install the pinned ACP TypeScript SDK with npm into .cache/acp-sdk (without npm, say so: its client test skips).
	@$(call npm_pinned,$(ACP_SDK_CACHE),$(ACP_SDK_STAMP),@agentclientprotocol/sdk@$(ACP_SDK_VERSION) zod@$(ACP_SDK_ZOD_VERSION),npm not found: the ACP TypeScript SDK client test will skip (install Node.js and npm to run it))

test-acp-sdk: acp-sdk ## Run only the ACP TypeScript SDK client test, verbosely.
	@[[ -e "$(ACP_SDK_STAMP)" ]] || { echo "the ACP TypeScript SDK is not installed: make acp-sdk needs npm"; exit 1; }
	AGENTHOST_ACP_SDK=$(ACP_SDK_CACHE) go test -race -count=1 -v ./examples/acp-ts-client

# acpx, a headless ACP client, pinned, for trying agenthost acp by hand
# (the README's "Try it with an ACP client"); no test needs it.
ACPX_CACHE ?= $(CURDIR)/.cache/acpx
ACPX_VERSION := 0.19.1
ACPX_STAMP = $(ACPX_CACHE)/.installed-acpx-$(ACPX_VERSION)

acpx: ## Install the pinned acpx ACP client with npm into .cache/acpx, to try agenthost acp by hand.
	@if [[ ! -e "$(ACPX_STAMP)" ]]; then \
		command -v npm >/dev/null || { echo "make acpx needs npm: install Node.js and npm, then run it again"; exit 1; }; \
		echo "installing acpx $(ACPX_VERSION) into $(ACPX_CACHE)"; \
		rm -rf "$(ACPX_CACHE)"; mkdir -p "$(ACPX_CACHE)"; \
		npm install --no-save --no-audit --no-fund --loglevel=error --prefix "$(ACPX_CACHE)" acpx@$(ACPX_VERSION); \
		touch "$(ACPX_STAMP)"; \
	fi; \
	echo "acpx $(ACPX_VERSION): $(ACPX_CACHE)/node_modules/.bin/acpx"
