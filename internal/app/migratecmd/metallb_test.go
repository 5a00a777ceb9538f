// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package migratecmd

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/svcnet-io/svcnet/internal/migrate/metallb"
)

// A Helm render: several documents, one of them a List, and objects that
// are not MetalLB's.
const metallbRender = `---
# Source: metallb/templates/pools.yaml
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata:
  name: first-pool
  namespace: metallb-system
spec:
  addresses:
  - 192.168.1.240-192.168.1.250
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: unrelated
data: {a: b}
---
---
apiVersion: v1
kind: List
items:
- apiVersion: metallb.io/v1beta1
  kind: L2Advertisement
  metadata:
    name: l2
    namespace: metallb-system
  spec:
    ipAddressPools: [first-pool]
- apiVersion: metallb.io/v1beta2
  kind: BGPPeer
  metadata:
    name: tor
    namespace: metallb-system
  spec:
    myASN: 64500
    peerASN: 64501
    peerAddress: 10.0.0.1
    bfdProfile: fast
- apiVersion: metallb.io/v1beta1
  kind: BGPAdvertisement
  metadata:
    name: bgp
    namespace: metallb-system
`

func runMetalLB(t *testing.T, stdin string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := NewCommand()
	cmd.SilenceUsage, cmd.SilenceErrors = true, true // as svcnet's root command
	var out, errOut bytes.Buffer
	cmd.SetIn(strings.NewReader(stdin))
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(append([]string{"metallb"}, args...))
	err = cmd.Execute()
	return out.String(), errOut.String(), err
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "metallb.yaml")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestMetalLBFromFiles(t *testing.T) {
	path := writeFile(t, metallbRender)
	for name, args := range map[string][]string{
		"a file":                 {"-f", path},
		"stdin":                  {"-f", "-"},
		"the same objects twice": {"-f", path, "-f", "-"},
	} {
		t.Run(name, func(t *testing.T) {
			stdout, stderr, err := runMetalLB(t, metallbRender, args...)
			if err != nil {
				t.Fatalf("migrate metallb %v: %v", args, err)
			}
			objs, err := metallb.Decode(strings.NewReader(stdout))
			if err != nil {
				t.Fatalf("the output is not YAML objects: %v\n%s", err, stdout)
			}
			var got []string
			for _, o := range objs {
				got = append(got, o.GetKind()+"/"+o.GetName())
				if _, ok := o.Object["status"]; ok {
					t.Errorf("%s/%s has a status", o.GetKind(), o.GetName())
				}
			}
			want := []string{"LoadBalancerIPPool/first-pool", "LoadBalancerAnnouncement/bgp", "LoadBalancerAnnouncement/l2"}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("objects (-want +got):\n%s", diff)
			}
			// The warning is on stderr and in the output's comments.
			warning := "BGPPeer metallb-system/tor: spec.bfdProfile"
			if !strings.Contains(stderr, warning) || !strings.Contains(stdout, "# - "+warning) {
				t.Errorf("want %q on stderr and as a comment; stderr:\n%s\nstdout:\n%s", warning, stderr, stdout)
			}
		})
	}
}

func TestMetalLBStrict(t *testing.T) {
	stdout, _, err := runMetalLB(t, metallbRender, "-f", "-", "--strict")
	if err == nil || stdout != "" {
		t.Errorf("--strict with a field not converted: error %v, output %q; want an error and no output", err, stdout)
	}
	exact := strings.Split(metallbRender, "---\napiVersion: v1\nkind: List")[0]
	if _, _, err := runMetalLB(t, exact, "-f", "-", "--strict"); err != nil {
		t.Errorf("--strict with every field converted: %v", err)
	}
}

func TestMetalLBBadInput(t *testing.T) {
	for name, tc := range map[string]struct {
		stdin string
		args  []string
	}{
		"no such file":       {args: []string{"-f", filepath.Join(t.TempDir(), "missing.yaml")}},
		"not YAML":           {stdin: "apiVersion: [", args: []string{"-f", "-"}},
		"YAML but no object": {stdin: "just: values\n", args: []string{"-f", "-"}},
	} {
		t.Run(name, func(t *testing.T) {
			if _, _, err := runMetalLB(t, tc.stdin, tc.args...); err == nil {
				t.Error("no error")
			}
		})
	}
}
