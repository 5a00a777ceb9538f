// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package admission_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/svcnet-io/svcnet/controllers"
	"github.com/svcnet-io/svcnet/test/testenv"
)

const (
	timeout  = 20 * time.Second
	interval = 50 * time.Millisecond
)

var (
	env         *testenv.Env
	managerOpts = controllers.Options{
		Controllers: []string{controllers.ClusterIPName, controllers.NodePortName},
		ClusterIP:   controllers.ClusterIPOptions{ReuseDelay: 5 * time.Minute},
		NodePort: controllers.NodePortOptions{
			Range:      "30000-32767",
			Exclude:    []string{"30086-30100"}, // the first ports of the upper band
			ReuseDelay: 5 * time.Minute,
		},
	}
)

func TestAdmission(t *testing.T) {
	RegisterFailHandler(Fail)
	ctrl.SetLogger(GinkgoLogr)
	RunSpecs(t, "Service admission (ClusterIP, nodePort)")
}

var _ = BeforeSuite(func() {
	var err error
	env, err = testenv.StartWithManager(testenv.Options{ServiceCIDRs: "10.96.0.0/16,fd00:10:96::/112"}, managerOpts)
	Expect(err).NotTo(HaveOccurred())
})

var _ = AfterSuite(func() {
	if env != nil {
		Expect(env.Stop()).To(Succeed())
	}
})

func newNamespace(ctx context.Context, labels map[string]string) string {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "adm-", Labels: labels}}
	Expect(env.Client.Create(ctx, ns)).To(Succeed())
	return ns.Name
}
