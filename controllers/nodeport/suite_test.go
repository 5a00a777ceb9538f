// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package nodeport_test

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
	env *testenv.Env
	// svcnet is told a narrower range than the API server's, as after a
	// misconfiguration, so that out-of-range ports can exist.
	managerOpts = controllers.Options{
		Controllers: []string{controllers.NodePortName},
		NodePort:    controllers.NodePortOptions{Range: "30000-31999", Exclude: []string{"31000-31099"}},
		Audit:       controllers.AuditOptions{EventQuietPeriod: time.Hour, LeakGracePeriod: time.Minute},
	}
)

func TestNodePort(t *testing.T) {
	RegisterFailHandler(Fail)
	ctrl.SetLogger(GinkgoLogr)
	RunSpecs(t, "nodeport audit")
}

var _ = BeforeSuite(func() {
	var err error
	env, err = testenv.StartWithManager(testenv.Options{NodePortRange: "30000-32767"}, managerOpts)
	Expect(err).NotTo(HaveOccurred())
})

var _ = AfterSuite(func() {
	if env != nil {
		Expect(env.Stop()).To(Succeed())
	}
})
