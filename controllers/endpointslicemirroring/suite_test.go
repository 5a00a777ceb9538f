// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package endpointslicemirroring_test

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
	// repairTimeout bounds how long a slice someone else deleted or
	// changed stays so.
	repairTimeout = 5 * time.Second
)

var env *testenv.Env

func TestEndpointSliceMirroring(t *testing.T) {
	RegisterFailHandler(Fail)
	ctrl.SetLogger(GinkgoLogr)
	RunSpecs(t, "EndpointSlice mirroring controller")
}

var _ = BeforeSuite(func() {
	var err error
	env, err = testenv.StartWithManager(testenv.Options{}, controllers.Options{
		Controllers:            []string{controllers.EndpointSliceMirroringName},
		EndpointSliceMirroring: controllers.EndpointSliceMirroringOptions{MaxEndpointsPerSubset: 50},
	})
	Expect(err).NotTo(HaveOccurred())
})

var _ = AfterSuite(func() {
	if env != nil {
		Expect(env.Stop()).To(Succeed())
	}
})
