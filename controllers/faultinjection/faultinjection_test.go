// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package faultinjection_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/svcnet-io/svcnet/internal/platform/repairs"
)

// disruptions are the kinds of disruption every run must have done at
// least once: one per object svcnet owns.
var disruptions = []string{
	"disrupt: delete EndpointSlice",
	"disrupt: delete ClusterIP IPAddress",
	"disrupt: strip ClusterIP IPAddress labels",
	"disrupt: delete LoadBalancer IPAddress",
	"disrupt: strip LoadBalancer IPAddress managed-by",
	"disrupt: edit status.loadBalancer",
	"disrupt: edit LoadBalancerIPPool status",
	"disrupt: edit ServiceCIDRBinding status",
}

var _ = Describe("svcnet under churn and a disruptor", func() {
	It("converges to what upstream's controllers would hold, and writes nothing that is not its own", func() {
		ctx := context.Background()
		seed, duration := settings()
		By(fmt.Sprintf("churning for %s with seed %d (SVCNET_FAULT_SEED, SVCNET_FAULT_DURATION)", duration, seed))
		w := newWorld(ctx, seed)
		d := newDisruptor(w)
		repaired := repairs.Count("EndpointSlice", repairs.ReasonDeleted)
		for deadline := time.Now().Add(duration); time.Now().Before(deadline); {
			w.step()
			if w.rnd.Intn(3) == 0 {
				d.step()
			}
		}
		By("the churn stopped: " + summary(w.actions))

		start := time.Now()
		Eventually(w.converged).WithTimeout(convergeTimeout).WithPolling(poll).Should(Succeed())
		AddReportEntry("converged after the churn stopped", time.Since(start).Round(time.Millisecond).String())
		// And stays so: nothing keeps fighting.
		Consistently(w.converged).WithTimeout(2 * time.Second).WithPolling(500 * time.Millisecond).Should(Succeed())

		for _, kind := range disruptions {
			Expect(w.actions).To(HaveKey(kind), "the run never did %q: raise SVCNET_FAULT_DURATION or change the seed", kind)
		}
		Expect(repairs.Count("EndpointSlice", repairs.ReasonDeleted)).To(BeNumerically(">", repaired), "no EndpointSlice repair was counted")
	})
})

// summary lists the actions done, sorted.
func summary(actions map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(actions)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, actions[k]))
	}
	return strings.Join(parts, ", ")
}
