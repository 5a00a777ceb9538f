// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package endpointslice_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/svcnet-io/svcnet/controllers"
	"github.com/svcnet-io/svcnet/controllers/endpointslice"
	"github.com/svcnet-io/svcnet/test/testenv"
)

const (
	// timeout bounds how long a test waits for the controller to converge.
	timeout = 60 * time.Second
	// poll is how often the world is looked at while waiting.
	poll = 100 * time.Millisecond
	// quiet is how long "nothing happens" is watched for.
	quiet = 2 * time.Second
	// repairTimeout bounds how long a slice someone else deleted or
	// changed stays so: the informer's event starts the repair at once.
	repairTimeout = 5 * time.Second
)

var env *testenv.Env

func TestEndpointSlice(t *testing.T) {
	RegisterFailHandler(Fail)
	ctrl.SetLogger(GinkgoLogr)
	RunSpecs(t, "EndpointSlice controller")
}

var _ = BeforeSuite(func() {
	var err error
	// Dual-stack, so that one environment covers single- and dual-stack.
	env, err = testenv.StartWithManager(testenv.Options{ServiceCIDRs: "10.96.0.0/16,fd00:10:96::/112"}, controllers.Options{
		Controllers:   []string{endpointslice.ControllerName},
		EndpointSlice: endpointslice.DefaultOptions(),
	})
	Expect(err).NotTo(HaveOccurred())
})

var _ = AfterSuite(func() {
	if env != nil {
		Expect(env.Stop()).To(Succeed())
	}
})

func newNamespace(ctx context.Context) string {
	ns, err := env.Namespace(ctx, CurrentSpecReport().LeafNodeText)
	Expect(err).NotTo(HaveOccurred())
	return ns
}
