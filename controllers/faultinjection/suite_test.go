// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package faultinjection_test

import (
	"os"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/svcnet-io/svcnet/controllers"
	"github.com/svcnet-io/svcnet/test/testenv"
)

const (
	// defaultDuration is the churn of `make test`; SVCNET_FAULT_DURATION
	// sets another.
	defaultDuration = 12 * time.Second
	// defaultSeed makes `make test` replay one sequence of actions;
	// SVCNET_FAULT_SEED sets another.
	defaultSeed = 35
	// convergeTimeout bounds how long after the churn stops the cluster
	// must hold what upstream's controllers would.
	convergeTimeout = 20 * time.Second
	// poll is how often the world is looked at while waiting.
	poll = 200 * time.Millisecond
	// leakGracePeriod is the controllers' grace period for an IPAddress
	// whose Service is gone, short so that orphans are cleaned within the
	// convergence bound.
	leakGracePeriod = 2 * time.Second
)

var env *testenv.Env

func TestFaultInjection(t *testing.T) {
	RegisterFailHandler(Fail)
	ctrl.SetLogger(GinkgoLogr)
	RunSpecs(t, "fault injection")
}

var _ = BeforeSuite(func() {
	var err error
	env, err = testenv.StartWithManager(testenv.Options{ServiceCIDRs: "10.96.0.0/16"}, controllers.Options{
		// Every controller, the admission allocators included, as production.
		Controllers: []string{"*"},
		Audit:       controllers.AuditOptions{EventQuietPeriod: time.Hour, LeakGracePeriod: leakGracePeriod},
	})
	Expect(err).NotTo(HaveOccurred())
})

var _ = AfterSuite(func() {
	if env != nil {
		Expect(env.Stop()).To(Succeed())
	}
})

// settings reads the seed and the churn's duration from the environment.
func settings() (seed int64, duration time.Duration) {
	seed, duration = defaultSeed, defaultDuration
	if v := os.Getenv("SVCNET_FAULT_SEED"); v != "" {
		s, err := strconv.ParseInt(v, 10, 64)
		Expect(err).NotTo(HaveOccurred(), "SVCNET_FAULT_SEED must be an integer")
		seed = s
	}
	if v := os.Getenv("SVCNET_FAULT_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		Expect(err).NotTo(HaveOccurred(), "SVCNET_FAULT_DURATION must be a duration, e.g. 5m")
		duration = d
	}
	return seed, duration
}
