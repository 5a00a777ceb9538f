# svcnet — see README.md. `make help` lists the targets.
SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec
.DEFAULT_GOAL := help

GO       ?= go
BIN      := $(CURDIR)/bin
K8S_BIN  := $(BIN)/k8s
TOOLS    := $(BIN)/tools
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
LDFLAGS  := -X github.com/svcnet-io/svcnet/internal/platform/version.Version=$(VERSION)

CONTROLLER_GEN_VERSION ?= v0.23.0
GOLANGCI_LINT_VERSION  ?= v2.15.0
CONTROLLER_GEN := $(TOOLS)/controller-gen-$(CONTROLLER_GEN_VERSION)
GOLANGCI_LINT  := $(TOOLS)/golangci-lint-$(GOLANGCI_LINT_VERSION)

# envtest finds etcd and kube-apiserver here.
export KUBEBUILDER_ASSETS := $(K8S_BIN)

##@ Use

.PHONY: help
help: ## List the targets.
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z_-]+:.*?##/ { printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n%s\n", substr($$0, 5) }' $(MAKEFILE_LIST)

.PHONY: build
build: ## Build bin/svcnet.
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/svcnet ./cmd/svcnet

.PHONY: run
run: deps k8s-bins node-images frr build ## Run svcnet up: a whole control plane on this machine (state in .svcnet/).
	$(BIN)/svcnet up $(ARGS)

.PHONY: test
test: deps k8s-bins node-images frr verify-manifests ## Run every test: unit (-race), envtest suites, kernel tests, the downstream example.
	$(GO) test -race -count=1 -timeout 25m ./...
	cd examples/envtest && $(GO) vet ./... && $(GO) test -race -count=1 -timeout 5m ./...

.PHONY: bench
bench: deps k8s-bins frr build ## Run the benchmarks side by side with upstream; writes docs/BENCHMARKS.md.
	tmp=$$(mktemp); trap 'rm -f $$tmp' EXIT; \
	$(GO) test -run '^$$' -bench . -benchmem -count=1 ./allocator/... ./controllers/... ./dataplane/... | grep -E '^(Benchmark|goos|goarch|cpu|pkg)' | tee $$tmp; \
	$(GO) run ./test/bench -micro $$tmp -out docs/BENCHMARKS.md

##@ Develop

CONTROLLER_GEN_MANIFESTS = rbac:roleName=svcnet-manager crd webhook paths=./...

.PHONY: manifests
manifests: $(CONTROLLER_GEN) ## Regenerate RBAC, CRDs and the webhook configuration in config/ from markers.
	$(CONTROLLER_GEN) $(CONTROLLER_GEN_MANIFESTS) output:rbac:artifacts:config=config/rbac output:crd:artifacts:config=config/crd/bases output:webhook:artifacts:config=config/webhook

.PHONY: verify-manifests
verify-manifests: $(CONTROLLER_GEN) ## Fail if config/ or the generated Go code is out of date with the markers.
	tmp=$$(mktemp -d); trap 'rm -rf $$tmp' EXIT; \
	$(CONTROLLER_GEN) $(CONTROLLER_GEN_MANIFESTS) output:rbac:artifacts:config=$$tmp/rbac output:crd:artifacts:config=$$tmp/crd/bases output:webhook:artifacts:config=$$tmp/webhook; \
	for d in rbac crd/bases webhook; do diff -ru -x kustomization.yaml config/$$d $$tmp/$$d || { echo "config/$$d is out of date: run make manifests and commit"; exit 1; }; done; \
	cp -r api $$tmp/api; \
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths=./api/... ; \
	diff -ru $$tmp/api api || { cp -r $$tmp/api/. api/; echo "api/ generated code is out of date: run make generate and commit"; exit 1; }

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Regenerate deepcopy code for api/ types.
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths=./api/...

.PHONY: fmt
fmt: ## gofmt the code.
	$(GO) fmt ./...

.PHONY: vet
vet: ## go vet the code.
	$(GO) vet ./...

.PHONY: lint
lint: $(GOLANGCI_LINT) ## Run golangci-lint (.golangci.yml).
	$(GOLANGCI_LINT) run ./...

##@ Dependencies

.PHONY: deps
deps: ## Install missing Debian packages (iptables, nftables, conntrack, iproute2).
	@hack/install-deps.sh

.PHONY: k8s-bins
k8s-bins: ## Build etcd, kube-apiserver, kube-controller-manager, kubectl, kube-proxy into bin/k8s (once).
	@hack/k8s-bins/build.sh $(K8S_BIN)

.PHONY: node-images frr
node-images: ## Build the filesystems of the images the simulated nodes run (agnhost, busybox, nginx, httpd, pause, curl, dnsutils) into bin/images (once).
	@hack/node-images/build.sh $(BIN)/images

frr: ## Unpack FRR from Debian's packages into bin/frr (the router of svcnet up --lb-announce=bgp and the BGP tests; never installed, never started outside their namespaces).
	@hack/frr/build.sh $(BIN)/frr

$(CONTROLLER_GEN):
	GOBIN=$(TOOLS) $(GO) install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_GEN_VERSION)
	mv $(TOOLS)/controller-gen $@

$(GOLANGCI_LINT):
	GOBIN=$(TOOLS) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	mv $(TOOLS)/golangci-lint $@
