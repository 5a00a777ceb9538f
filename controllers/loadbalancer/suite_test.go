// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package loadbalancer_test

import (
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/svcnet-io/svcnet/controllers"
	"github.com/svcnet-io/svcnet/test/testenv"
)

const (
	timeout  = 20 * time.Second
	interval = 100 * time.Millisecond
)

var (
	env         *testenv.Env
	managerOpts = controllers.Options{
		Controllers: []string{controllers.LoadBalancerName},
		// A short grace period, so that a leaked address is cleaned up
		// within a test.
		Audit: controllers.AuditOptions{EventQuietPeriod: time.Hour, LeakGracePeriod: 2 * time.Second},
	}
)

func TestLoadBalancer(t *testing.T) {
	RegisterFailHandler(Fail)
	ctrl.SetLogger(GinkgoLogr)
	RunSpecs(t, "loadbalancer controller")
}

var _ = BeforeSuite(func() {
	var err error
	env, err = testenv.StartWithManager(testenv.Options{ServiceCIDRs: "10.96.0.0/16"}, managerOpts)
	Expect(err).NotTo(HaveOccurred())
})

var _ = AfterSuite(func() {
	if env != nil {
		Expect(env.Stop()).To(Succeed())
	}
})
