# agentmesh — build, test and run the mesh.
#
#   make run       the whole mesh on embedded infrastructure, gateway on :8080
#   make test      unit and integration tests (what CI runs)
#   make e2e       the mesh started as a user would, driven over REST/SSE
#   make e2e-cluster  every service its own process, replicated, on a NATS cluster, under faults
#   make bench     benchmarks and load tests, printing the figures
#   make bench-growth  throughput as stored items grow (part of make bench)
#   make generate  regenerate code from the protos (needs `make tools`)
#   make images    one OCI image per service under dist/images, no container engine needed

SHELL := /bin/bash
GOBIN ?= $(shell go env GOPATH)/bin
export PATH := $(GOBIN):$(PATH)

# Pinned code generators: `make tools` installs exactly these.
BUF_VERSION              := v1.75.0
PROTOC_GEN_GO_VERSION    := v1.36.12
PROTOC_GEN_GO_GRPC_VER   := v1.6.2
GRPC_GATEWAY_VERSION     := v2.32.0

MODULES := libs gateway cmd/agentmesh cmd/imagebuild $(addprefix services/,modelgateway orchestrator vision indexer classifier sqlagent)
PKGS    := $(addsuffix /...,$(addprefix ./,$(MODULES)))
TEST_FLAGS ?= -count=1 -timeout 12m

# What `make images` stamps on the images: the version from git (also the
# tag), the commit, and the commit time as the creation time, so two builds
# of one commit give the same digests.
VERSION           ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION          ?= $(shell git rev-parse HEAD 2>/dev/null)
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)

.PHONY: docs all tools generate generate-check lint build test test-race run e2e e2e-cluster bench bench-growth eval fmt vet clean images images-test

all: build

tools:
	go install github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION)
	go install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VER)
	go install github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-grpc-gateway@$(GRPC_GATEWAY_VERSION)
	go install github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-openapiv2@$(GRPC_GATEWAY_VERSION)

generate:
	rm -rf libs/gen/agentmesh gateway/openapi/*.json
	buf generate
	go run ./gateway/openapi/cmd/openapirules gateway/openapi/agentmesh.swagger.json gateway/openapi/fragments/*.json

# Fails when the committed generated code differs from what the protos produce.
generate-check: generate
	@git diff --exit-code --stat -- libs/gen gateway/openapi || { echo "generated code is stale: run 'make generate' and commit"; exit 1; }
	@test -z "$$(git status --porcelain -- libs/gen gateway/openapi)" || { git status --porcelain -- libs/gen gateway/openapi; echo "untracked generated files: run 'make generate' and commit"; exit 1; }

lint:
	buf lint
	@test -z "$$(gofmt -l $$(git ls-files '*.go' | grep -v '^libs/gen/'))" || { gofmt -l $$(git ls-files '*.go' | grep -v '^libs/gen/'); echo "gofmt needed"; exit 1; }
	go vet $(PKGS)
	go vet -tags images ./cmd/imagebuild/
	go vet -tags e2ecluster ./cmd/agentmesh/e2e/cluster/

build:
	mkdir -p bin
	go build -o bin/ ./cmd/agentmesh ./gateway $(addprefix ./services/,modelgateway orchestrator vision indexer classifier sqlagent)

test:
	go test $(TEST_FLAGS) $(PKGS)

test-race:
	go test -race $(TEST_FLAGS) $(PKGS)

# One OCI image per service, built without a container engine or network
# (cmd/imagebuild): dist/images/<name>/ is an OCI layout, dist/images/<name>.tar
# a `docker load` tarball tagged agentmesh/<name>:$(VERSION). Prints sizes.
images:
	go run ./cmd/imagebuild -out dist/images -version '$(VERSION)' -revision '$(REVISION)' -created '$(SOURCE_DATE_EPOCH)'

# Builds every image and runs each one's entrypoint chrooted into its
# unpacked root filesystem until it serves health (needs root; about a
# minute with a warm build cache).
images-test:
	go test -count=1 -tags images -timeout 15m -run TestImages -v ./cmd/imagebuild/

run:
	go run ./cmd/agentmesh up

e2e:
	go test -count=1 -tags e2e -timeout 20m ./cmd/agentmesh/e2e/...

# The production topology on loopback (cmd/agentmesh/e2e/cluster): every
# service from its own binary in bin/, two replicas where the design allows,
# a three-node NATS JetStream cluster and a ferretdb process (both built at
# the pinned versions, cached in the temp directory), driven through the
# gateways while a replica of each service, a NATS node and the database are
# killed. Prints flows, faults, recovery times and duplicate counts; 3 to 6
# minutes. Not in .ci/run: see the README.
e2e-cluster: build
	E2ECLUSTER_BIN_DIR=$(CURDIR)/bin go test -count=1 -tags e2ecluster -timeout 25m -v -run . ./cmd/agentmesh/e2e/cluster/

# Benchmarks and load tests: every figure the issues ask for, each against a
# baseline measured in the same run. Takes several minutes.
bench:
	@echo "== model gateway: request/response translation per adapter, and one round trip vs the bare gRPC hop"
	go test -run '^$$' -bench . -benchmem -benchtime 2s ./services/modelgateway/...
	@echo "== model gateway: fixed-rate load, gateway vs direct to a 20 ms mock upstream"
	bench/modelgateway/run.sh
	@echo "== orchestrator: chat loop overhead per iteration (Mongo storage)"
	go test -run '^$$' -bench BenchmarkLoopIteration -benchtime 200x ./services/orchestrator/internal/chat/
	@echo "== orchestrator: analysis jobs per second and event latency to a WatchJob subscriber"
	go test -run '^$$' -bench BenchmarkAnalysisFlow -benchtime 100x ./services/orchestrator/internal/analysis/jobservice/
	@echo "== classifier: checkpoint writes and run transitions"
	go test -run '^$$' -bench BenchmarkCheckpointWrite -benchtime 500x ./services/classifier/internal/checkpoint/
	go test -run '^$$' -bench BenchmarkRunTransitions -benchtime 5x ./services/classifier/classifier/
	@echo "== indexer: 100,000 chunks, hybrid query latency, vector recall vs exact, ingestion rate, memory"
	go run ./services/indexer/cmd/bench
	@echo "== indexer: intake throughput, the qualifier pipeline (models, vision; provider simulator answering at once) beside plain ingest"
	go test -run '^$$' -bench BenchmarkIntakeThroughput -benchtime 20x ./services/indexer/indexer/
	@echo "== sqlagent: one stage transition (a dropdown selection: no model call, no SQL) vs a bare session-store write, p50/p99 and ratios, load average"
	go test -run '^$$' -bench BenchmarkStageTransition -benchtime 300x ./services/sqlagent/internal/session/
	@echo "== growth (issue 21): chat turns, analyses, classification runs, ingests per second at 0, 1,000, 10,000 stored items"
	@$(MAKE) --no-print-directory bench-growth

# The embedded default as data grows: every workload through the gateway at
# each level of stored items (seeding 10,000 of each takes long on a store
# that scans). GROWTH_FLAGS="-levels 0,1000" stops earlier; see -help.
GROWTH_FLAGS ?=
bench-growth:
	go run ./cmd/agentmesh/bench/growth $(GROWTH_FLAGS)

# Retrieval quality on the labelled corpus: recall@10 and MRR for BM25,
# vectors and hybrid.
eval:
	go run ./services/indexer/cmd/eval -corpus services/indexer/testdata/eval

fmt:
	gofmt -w $$(git ls-files '*.go' | grep -v '^libs/gen/')

clean:
	rm -rf bin dist .agentmesh

# Regenerates the README's configuration table from the config structs.
docs:
	go run ./cmd/agentmesh env > /tmp/agentmesh-env.md
	python3 -c 'import re,sys; r=open("README.md").read(); t=open("/tmp/agentmesh-env.md").read(); open("README.md","w").write(re.sub(r"(<!-- config-table:start -->\n).*?(<!-- config-table:end -->)", lambda m: m.group(1)+t+m.group(2), r, flags=re.S))'
