// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package servicecidr_test

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
	// timeout covers servicecidr.DeletionGracePeriod (10 s).
	timeout  = 30 * time.Second
	interval = 100 * time.Millisecond
	// repairTimeout bounds how long an object someone else changed stays so.
	repairTimeout = 5 * time.Second
)

var env *testenv.Env

func TestServiceCIDR(t *testing.T) {
	RegisterFailHandler(Fail)
	ctrl.SetLogger(GinkgoLogr)
	RunSpecs(t, "ServiceCIDR controller")
}

var _ = BeforeSuite(func() {
	var err error
	// A tiny default range (14 addresses), so that filling it is quick.
	env, err = testenv.StartWithManager(testenv.Options{ServiceCIDRs: "10.100.0.0/28"}, controllers.Options{
		Controllers: []string{controllers.ServiceCIDRName, controllers.ClusterIPName, controllers.IPAddressName},
	})
	Expect(err).NotTo(HaveOccurred())
})

var _ = AfterSuite(func() {
	if env != nil {
		Expect(env.Stop()).To(Succeed())
	}
})
