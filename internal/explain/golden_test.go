// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package explain

import (
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
	"github.com/svcnet-io/svcnet/test/builder"
)

// TestGoldenReports compares the text report of a healthy Service of
// every type, from a Pod whose node's agent is read, with
// testdata/golden; SVCNET_UPDATE_GOLDEN=1 rewrites the files.
func TestGoldenReports(t *testing.T) {
	nodePort := web().Type(corev1.ServiceTypeNodePort).Obj()
	nodePort.Spec.Ports[0].NodePort = 30080
	loadBalancer := lb("192.168.240.1")
	loadBalancer.Status.Conditions = []metav1.Condition{{Type: svcnetv1alpha1.ServiceConditionLoadBalancerAnnounced, Status: metav1.ConditionTrue,
		Message: "192.168.240.1 answered by node-2 (ARP on eth0)"}}
	for name, svc := range map[string]*corev1.Service{
		"clusterip":    web().Obj(),
		"nodeport":     nodePort,
		"loadbalancer": loadBalancer,
		"headless":     builder.Service("web", "default").Selector("app", "web").Port("http", 80, intstr.FromString("http")).Headless().Obj(),
		"externalname": builder.Service("web", "default").ExternalName("example.com").Obj(),
	} {
		t.Run(name, func(t *testing.T) {
			w := healthy(svc)
			fromPod(w, "node-1")
			withAgent(w)
			got := text(t, Analyze(w.in))
			file := filepath.Join("testdata", "golden", name+".txt")
			if os.Getenv("SVCNET_UPDATE_GOLDEN") == "1" {
				must(t, os.MkdirAll(filepath.Dir(file), 0o755))
				must(t, os.WriteFile(file, []byte(got), 0o644))
			}
			want, err := os.ReadFile(file)
			must(t, err)
			if got != string(want) {
				t.Errorf("report of a healthy %s Service differs from %s (SVCNET_UPDATE_GOLDEN=1 rewrites it):\ngot:\n%s\nwant:\n%s", name, file, got, want)
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
