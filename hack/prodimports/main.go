// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Command prodimports fails when a production command links what belongs
// to svcnet's simulator or to tests: `make lint` runs it on cmd/svcnet and
// cmd/svcnet-agent, the binaries of the manager's and the agent's images.
// It lists each command's dependencies with `go list -deps` and prints,
// for each package it refuses, the chain of imports that brought it in.
//
//	go run ./hack/prodimports [packages]   (default ./cmd/svcnet ./cmd/svcnet-agent)
package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
)

func main() {
	roots := os.Args[1:]
	if len(roots) == 0 {
		roots = []string{"./cmd/svcnet", "./cmd/svcnet-agent"}
	}
	failed := false
	for _, root := range roots {
		g, err := loadGraph(root)
		if err != nil {
			fmt.Fprintln(os.Stderr, "prodimports:", err)
			os.Exit(2)
		}
		for _, v := range g.violations() {
			failed = true
			fmt.Fprintf(os.Stderr, "%s links %s (%s):\n  %s\n", root, v.pkg, v.why, strings.Join(g.chain(v.pkg), "\n  -> "))
		}
	}
	if failed {
		fmt.Fprintln(os.Stderr, "production commands must not link the simulator, helm, or test and fake packages, nor the agent the manager's: move the import behind a package only its users import")
		os.Exit(1)
	}
}

// graph is one command's dependencies: each package's imports, the
// command's own package first.
type graph struct {
	order   []string
	imports map[string][]string
}

// loadGraph runs go list -deps on root.
func loadGraph(root string) (*graph, error) {
	cmd := exec.Command("go", "list", "-deps", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, root)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list -deps %s: %w\n%s", root, err, stderr.String())
	}
	return parseGraph(out), nil
}

// parseGraph reads go list's lines: a package, then its imports. go list
// -deps prints the root last; order puts it first.
func parseGraph(out []byte) *graph {
	g := &graph{imports: map[string][]string{}}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 0, 64*1024), 4*1024*1024)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		g.order = append([]string{fields[0]}, g.order...)
		g.imports[fields[0]] = fields[1:]
	}
	return g
}

// violation is a package a production command must not link, and why.
type violation struct{ pkg, why string }

// module is svcnet's module path.
const module = "github.com/svcnet-io/svcnet"

// libraryTestSupport are test-support packages that production libraries
// link themselves, so every client of theirs does (kube-proxy included):
// allowed, with who brings them in.
var libraryTestSupport = map[string]string{
	"k8s.io/client-go/testing":                        "client-go's typed clients (k8s.io/client-go/gentype)",
	"k8s.io/apimachinery/pkg/api/meta/testrestmapper": "k8s.io/client-go/testing",
	"github.com/mdlayher/netlink/nltest":              "github.com/google/nftables (its test dial option)",
}

// refused says why a production command must not link pkg, or "".
func refused(pkg string) string {
	switch {
	case under(pkg, module+"/localcluster"), under(pkg, module+"/cmd/svcnet-up"):
		return "the simulator of svcnet up"
	case under(pkg, module+"/test"), under(pkg, module+"/svcnettest"), under(pkg, module+"/hack"), under(pkg, module+"/examples"):
		return "test code"
	case under(pkg, "helm.sh"):
		return "helm"
	case libraryTestSupport[pkg] != "":
		return ""
	case isFake(pkg):
		return "a fake for tests"
	case isTestSupport(pkg):
		return "a test library"
	}
	return ""
}

// isFake: a package named fake or below one (client-go's fake clientsets,
// controller-runtime's fake client).
func isFake(pkg string) bool {
	return slices.Contains(strings.Split(pkg, "/"), "fake")
}

// isTestSupport: Go's testing packages, envtest, ginkgo and gomega,
// testify, and packages named for tests (testing, testutil, httptest,
// nltest, testrestmapper ...). The standard library's internal packages
// (internal/testlog, which os uses) are not.
func isTestSupport(pkg string) bool {
	if pkg == "testing" || under(pkg, "testing") || pkg == "net/http/httptest" {
		return true
	}
	if !strings.Contains(strings.Split(pkg, "/")[0], ".") {
		return false
	}
	for _, prefix := range []string{"sigs.k8s.io/controller-runtime/pkg/envtest", "github.com/onsi", "github.com/stretchr/testify"} {
		if under(pkg, prefix) {
			return true
		}
	}
	for _, seg := range strings.Split(pkg, "/") {
		if seg == "testing" || seg == "testutil" || strings.HasPrefix(seg, "test") || strings.HasSuffix(seg, "test") && seg != "latest" {
			return true
		}
	}
	return false
}

// under reports whether pkg is prefix or below it.
func under(pkg, prefix string) bool {
	return pkg == prefix || strings.HasPrefix(pkg, prefix+"/")
}

// agentCommand is the node agent's binary, which runs on every node: it
// must not link the manager either (docs/BENCHMARKS.md (n): its memory).
const agentCommand = module + "/cmd/svcnet-agent"

// refusedIn is refused, and for the agent's command the manager's code.
func refusedIn(root, pkg string) string {
	if why := refused(pkg); why != "" {
		return why
	}
	if root != agentCommand {
		return ""
	}
	for _, manager := range []string{module + "/controllers", module + "/admission", module + "/internal/app/manager"} {
		if under(pkg, manager) {
			return "the manager's code, which the node agent does not run"
		}
	}
	return ""
}

func (g *graph) violations() []violation {
	var out []violation
	if len(g.order) == 0 {
		return nil
	}
	for _, pkg := range g.order {
		if why := refusedIn(g.order[0], pkg); why != "" {
			out = append(out, violation{pkg: pkg, why: why})
		}
	}
	return out
}

// chain is the shortest import path from the command to pkg.
func (g *graph) chain(pkg string) []string {
	if len(g.order) == 0 {
		return []string{pkg}
	}
	root := g.order[0]
	from := map[string]string{root: ""}
	queue := []string{root}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		if cur == pkg {
			break
		}
		for _, next := range g.imports[cur] {
			if _, seen := from[next]; !seen {
				from[next] = cur
				queue = append(queue, next)
			}
		}
	}
	if _, ok := from[pkg]; !ok {
		return []string{pkg}
	}
	var path []string
	for p := pkg; p != ""; p = from[p] {
		path = append([]string{p}, path...)
	}
	return path
}
