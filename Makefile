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
HELM_VERSION           ?= v3.22.0
CONTROLLER_GEN := $(TOOLS)/controller-gen-$(CONTROLLER_GEN_VERSION)
GOLANGCI_LINT  := $(TOOLS)/golangci-lint-$(GOLANGCI_LINT_VERSION)
HELM           := $(TOOLS)/helm-$(HELM_VERSION)

# envtest finds etcd and kube-apiserver here.
export KUBEBUILDER_ASSETS := $(K8S_BIN)

##@ Use

.PHONY: help
help: ## List the targets.
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z_-]+:.*?##/ { printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n%s\n", substr($$0, 5) }' $(MAKEFILE_LIST)

.PHONY: build
build: ## Build bin/svcnet (the manager and the CLI; bin/kubectl-svcnet links to it for kubectl), bin/svcnet-agent (the node agent), what the images ship, and bin/svcnet-up (the simulator `svcnet up` runs).
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/ ./cmd/svcnet ./cmd/svcnet-agent ./cmd/svcnet-up
	ln -sf svcnet $(BIN)/kubectl-svcnet

.PHONY: run
run: deps k8s-bins node-images frr build ## Run svcnet up: a whole control plane on this machine (state in .svcnet/).
	$(BIN)/svcnet up $(ARGS)

# The pure unit tests: no root, no bin/k8s, no cluster. Left out: the
# envtest suites (admission, config, controllers/*, internal/app/manager,
# informersync, svcnettest), the network-namespace tests (netlab, nodesim,
# container) and test/kernel, test/e2e, test/nodeimages.
UNIT_PKGS = ./allocator/... ./cmd/... ./controllers ./controllers/internal/... ./dataplane/... \
	./internal/announcementpolicy ./internal/platform/auditevents ./internal/platform/certs ./internal/platform/childproc \
	./internal/platform/ipfamily ./internal/platform/nfacct ./internal/platform/repairs ./internal/platform/restconfig ./internal/platform/tombstone \
	./localcluster/up ./localcluster/addons ./localcluster/controlplane ./localcluster/walkthrough \
	./localcluster/nodesim/images ./localcluster/nodesim/kuberuntime \
	./internal/app/cli ./internal/app/agentcmd ./internal/kubeadm ./test/conformance ./test/harness/proctree ./test/harness/trafficload ./hack/prodimports

.PHONY: unit
unit: ## Run the pure unit tests: no root, no cluster binaries, nothing to install (about 25 s of tests once built).
	$(GO) test -count=1 $(UNIT_PKGS)

.PHONY: test
test: deps k8s-bins node-images frr metallb prometheus images helm verify-manifests ## Run every test: unit (-race), envtest suites, kernel tests, the downstream example.
	$(GO) test -race -count=1 -timeout 25m ./...
	cd hack/images && $(GO) test -count=1 ./...
	cd examples/envtest && $(GO) vet ./... && $(GO) test -race -count=1 -timeout 5m ./...

.PHONY: bench
bench: deps k8s-bins frr metallb build ## Run the benchmarks side by side with upstream; writes docs/BENCHMARKS.md and the records of test/bench/results.
	tmp=$$(mktemp); trap 'rm -f $$tmp' EXIT; \
	$(GO) test -run '^$$' -bench . -benchmem -count=1 ./allocator/... ./controllers/... ./dataplane/... | grep -E '^(Benchmark|goos|goarch|cpu|pkg)' | tee $$tmp; \
	$(GO) run ./test/bench -micro $$tmp -out docs/BENCHMARKS.md

.PHONY: bench-report
bench-report: ## Render docs/BENCHMARKS.md's recorded sections again from test/bench/results alone (runs nothing).
	$(GO) run ./test/bench -report -out docs/BENCHMARKS.md

# make conformance: upstream's [sig-network] e2e tests on `svcnet up`
# (docs/conformance.md). SUITE chooses the tests: conformance (the 47
# [sig-network] conformance tests), network (upstream's [sig-network]
# suite as its kind-based network CI selects it) or endpoints-free (the
# network suite on the Endpoints-free cluster of KEP-4974, as upstream's
# job for it runs); FOCUS replaces the suite's ginkgo focus, SKIP adds to
# its skip; PROCS is ginkgo's parallel processes, TIMEOUT the whole run's
# bound, ARGS svcnet up's flags (after the suite's own), OUT the results
# folder.
SUITE   ?= conformance
FOCUS   ?=
SKIP    ?=
PROCS   ?= 8
TIMEOUT ?= 60m
OUT     ?=

.PHONY: conformance
conformance: deps k8s-bins node-images build e2e-bins ## Run upstream's [sig-network] e2e tests on svcnet up (SUITE=conformance|network|endpoints-free|dual|ipv6, FOCUS, SKIP, PROCS, TIMEOUT, ARGS, OUT); results in _output/conformance/.
	$(GO) build -o $(BIN)/conformance ./test/conformance
	$(BIN)/conformance -suite '$(SUITE)' -focus '$(FOCUS)' -skip '$(SKIP)' -procs $(PROCS) -timeout $(TIMEOUT) $(if $(OUT),-out '$(OUT)') -- $(ARGS)

##@ Develop

CONTROLLER_GEN_MANIFESTS = rbac:roleName=svcnet-manager crd webhook paths=./...

.PHONY: manifests
manifests: $(CONTROLLER_GEN) ## Regenerate RBAC, CRDs and the webhook configuration in config/ from markers.
	$(CONTROLLER_GEN) $(CONTROLLER_GEN_MANIFESTS) output:rbac:artifacts:config=config/rbac output:crd:artifacts:config=config/crd/bases output:webhook:artifacts:config=config/webhook
	$(CHART_FILES_COPY)

.PHONY: verify-manifests
verify-manifests: $(CONTROLLER_GEN) ## Fail if config/ or the generated Go code is out of date with the markers.
	tmp=$$(mktemp -d); trap 'rm -rf $$tmp' EXIT; \
	$(CONTROLLER_GEN) $(CONTROLLER_GEN_MANIFESTS) output:rbac:artifacts:config=$$tmp/rbac output:crd:artifacts:config=$$tmp/crd/bases output:webhook:artifacts:config=$$tmp/webhook; \
	for d in rbac crd/bases webhook; do diff -ru -x kustomization.yaml config/$$d $$tmp/$$d || { echo "config/$$d is out of date: run make manifests and commit"; exit 1; }; done; \
	for d in $(CHART_FILES); do diff -ru -x kustomization.yaml config/$$d charts/svcnet/files/$${d%/bases} || { echo "charts/svcnet/files is out of date: run make manifests and commit"; exit 1; }; done; \
	cp -r api $$tmp/api; \
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths=./api/... ; \
	diff -ru $$tmp/api api || { cp -r $$tmp/api/. api/; echo "api/ generated code is out of date: run make generate and commit"; exit 1; }

# The chart's copies of what controller-gen writes into config/.
CHART_FILES = crd/bases rbac webhook
define CHART_FILES_COPY
for d in $(CHART_FILES); do rm -rf charts/svcnet/files/$${d%/bases} && mkdir -p charts/svcnet/files/$${d%/bases} && cp config/$$d/*.yaml charts/svcnet/files/$${d%/bases}/ && rm -f charts/svcnet/files/$${d%/bases}/kustomization.yaml; done
endef

.PHONY: monitoring
monitoring: ## Rewrite the chart's alerting rules and dashboards (charts/svcnet/files/monitoring) from internal/monitoring.
	$(GO) test -count=1 ./internal/monitoring -run '^TestChartFiles$$' -update

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
lint: $(GOLANGCI_LINT) ## Run golangci-lint (.golangci.yml), check that the production binaries link no simulator, helm or test package, and every Go file's licence line.
	$(GOLANGCI_LINT) run ./...
	cd hack/images && $(GOLANGCI_LINT) run ./...
	$(GO) run ./hack/prodimports ./cmd/svcnet ./cmd/svcnet-agent
	hack/verify-boilerplate.sh

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

.PHONY: prometheus
prometheus: ## Build Prometheus and promtool from their Go module into bin/prometheus (once; the tests of svcnet's alerting rules and dashboards run them).
	@hack/prometheus/build.sh $(BIN)/prometheus

.PHONY: metallb
metallb: ## Build MetalLB's speaker and controller from its Go module, and copy its CRDs, into bin/metallb (once; the kernel test of the move from MetalLB runs them).
	@hack/metallb/build.sh $(BIN)/metallb

.PHONY: e2e-bins
e2e-bins: ## Build upstream's e2e.test and the ginkgo CLI into bin/e2e (once; make conformance runs them).
	@hack/e2e/build.sh $(BIN)/e2e

.PHONY: images
images: ## Build svcnet's images (manager and agent) as OCI archives into bin/oci, without a Docker daemon.
	@VERSION=$(VERSION) hack/images/build.sh $(BIN)/oci

.PHONY: helm
helm: $(HELM) ## Build helm from Go modules into bin/tools (for svcnet up --install=helm and the chart's tests).
	ln -sf $(notdir $(HELM)) $(TOOLS)/helm

$(HELM):
	GOBIN=$(TOOLS) $(GO) install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)
	mv $(TOOLS)/helm $@

$(CONTROLLER_GEN):
	GOBIN=$(TOOLS) $(GO) install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_GEN_VERSION)
	mv $(TOOLS)/controller-gen $@

$(GOLANGCI_LINT):
	GOBIN=$(TOOLS) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	mv $(TOOLS)/golangci-lint $@
