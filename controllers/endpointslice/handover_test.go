// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package endpointslice_test

import (
	"context"
	"fmt"
	"maps"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/svcnet-io/svcnet/test/builder"
	"github.com/svcnet-io/svcnet/test/testenv"
)

// startKCM runs kube-controller-manager from bin/k8s with its EndpointSlice
// controller alone, and returns the function that stops it (SIGTERM, then
// wait).
func startKCM() (stop func()) {
	bins, err := testenv.BinDir()
	Expect(err).NotTo(HaveOccurred())
	dir := GinkgoT().TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	Expect(env.WriteKubeconfig(kubeconfig)).To(Succeed())
	cmd := exec.Command(filepath.Join(bins, "kube-controller-manager"), "--kubeconfig="+kubeconfig,
		"--controllers=endpointslice-controller", "--leader-elect=false", "--secure-port=0")
	cmd.Stdout, cmd.Stderr = GinkgoWriter, GinkgoWriter
	Expect(cmd.Start()).To(Succeed())
	var once sync.Once
	return func() {
		once.Do(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			_ = cmd.Wait()
		})
	}
}

// watchReady records, from now on, the fewest distinct ready addresses the
// slices of a Service published at any moment; stop ends the watch and
// returns that number.
func watchReady(ctx context.Context, ns, svc string, start int) (stop func() int) {
	var list discoveryv1.EndpointSliceList
	w, err := env.WatchClient().Watch(ctx, &list, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelServiceName: svc})
	Expect(err).NotTo(HaveOccurred())
	current := map[string]discoveryv1.EndpointSlice{}
	minReady := start
	done := make(chan struct{})
	var mu sync.Mutex
	go func() {
		defer GinkgoRecover()
		defer close(done)
		for ev := range w.ResultChan() {
			s, ok := ev.Object.(*discoveryv1.EndpointSlice)
			if !ok {
				continue
			}
			mu.Lock()
			if ev.Type == watch.Deleted {
				delete(current, s.Name)
			} else {
				current[s.Name] = *s
			}
			ready := slices.Compact(slices.Sorted(slices.Values(addresses(slices.Collect(maps.Values(current)), true))))
			minReady = min(minReady, len(ready))
			mu.Unlock()
		}
	}()
	return func() int {
		w.Stop()
		<-done
		mu.Lock()
		defer mu.Unlock()
		return minReady
	}
}

// The takeover from kube-controller-manager (docs/operations.md): its
// controller is switched off, svcnet's on; svcnet adopts the slices in
// place, since both write managed-by endpointslice-controller.k8s.io, and
// the rollback is the same move the other way.
var _ = Describe("Taking over from kube-controller-manager's EndpointSlice controller", func() {
	It("adopts its slices in place with no gap in ready endpoints, and hands them back the same way", func() {
		ctx := context.Background()
		ns := newNamespace(ctx)
		env.StopManager()
		DeferCleanup(func() { Expect(env.RestartManager()).To(Succeed()) })

		// kube-controller-manager skips Pods on Nodes it does not know.
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{GenerateName: "node-"}}
		Expect(env.Client.Create(ctx, node)).To(Succeed())
		DeferCleanup(func() { Expect(env.Client.Delete(context.Background(), node)).To(Succeed()) })
		onNode := func(_ int, b *builder.PodBuilder) { b.Node(node.Name) }
		pod := func(i int) *corev1.Pod {
			ip := fmt.Sprintf("10.100.0.%d", i)
			return builder.Pod(fmt.Sprintf("web-%d", i), ns).Label("app", "web").ContainerPort("http", 8080).Node(node.Name).IP(ip).Ready().Obj()
		}
		ips := createPods(ctx, ns, "web", 3, onNode)

		By("kube-controller-manager's controller publishes the Service")
		stopKCM := startKCM()
		DeferCleanup(stopKCM)
		Expect(env.Client.Create(ctx, webService(ns))).To(Succeed())
		// Only one controller runs at a time: what changes, it wrote.
		var theirs []types.UID
		Eventually(func(g Gomega) {
			got := slicesOf(g, ctx, ns, "web")
			g.Expect(addresses(got, true)).To(ConsistOf(ips))
			theirs = uidsOf(got)
		}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
		minReady := watchReady(ctx, ns, "web", len(ips))

		By("switching kube-controller-manager's controller off and svcnet's on")
		stopKCM()
		Expect(env.RestartManager()).To(Succeed())
		Expect(env.CreatePod(ctx, pod(3))).To(Succeed())
		ips = append(ips, "10.100.0.3")
		Eventually(func(g Gomega) {
			got := slicesOf(g, ctx, ns, "web")
			g.Expect(addresses(got, true)).To(ConsistOf(ips))
			g.Expect(uidsOf(got)).To(ConsistOf(theirs), "adopted in place")
		}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
		Expect(minReady()).To(Equal(3), "ready endpoints dipped during the takeover")

		By("rolling back: svcnet's controller off, kube-controller-manager's on")
		minReady = watchReady(ctx, ns, "web", len(ips))
		env.StopManager()
		stopKCM = startKCM()
		DeferCleanup(stopKCM)
		Expect(env.CreatePod(ctx, pod(4))).To(Succeed())
		ips = append(ips, "10.100.0.4")
		Eventually(func(g Gomega) {
			got := slicesOf(g, ctx, ns, "web")
			g.Expect(addresses(got, true)).To(ConsistOf(ips))
			g.Expect(uidsOf(got)).To(ConsistOf(theirs), "handed back in place")
		}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
		Expect(minReady()).To(Equal(4), "ready endpoints dipped during the rollback")
		stopKCM()
	})
})
