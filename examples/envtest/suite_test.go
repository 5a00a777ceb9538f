// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package operator stands for another project's operator: its envtest
// suite gets EndpointSlices, and svcnet's ClusterIP and nodePort
// allocation, from svcnet's controllers (see the README's "Use in your
// envtest suite").
package operator

import (
	"context"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/svcnet-io/svcnet/controllers"
	"github.com/svcnet-io/svcnet/svcnettest"
)

var (
	env    *envtest.Environment
	svcnet *svcnettest.Controllers
	k8s    client.Client
)

func TestOperator(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Operator suite with svcnet")
}

var _ = BeforeSuite(func(ctx context.Context) {
	webhooks, err := svcnettest.WebhookInstallOptions()
	Expect(err).NotTo(HaveOccurred())
	env = &envtest.Environment{WebhookInstallOptions: webhooks}
	cfg, err := env.Start()
	Expect(err).NotTo(HaveOccurred())

	svcnet, err = svcnettest.Start(ctx, cfg, svcnettest.Options{
		Controllers: controllers.Options{Controllers: []string{"endpointslice", "clusterip", "nodeport"}},
		Webhook:     &env.WebhookInstallOptions,
	})
	Expect(err).NotTo(HaveOccurred())

	k8s, err = client.New(cfg, client.Options{Scheme: scheme.Scheme})
	Expect(err).NotTo(HaveOccurred())
})

var _ = AfterSuite(func() {
	if svcnet != nil {
		Expect(svcnet.Stop()).To(Succeed())
	}
	if env != nil {
		Expect(env.Stop()).To(Succeed())
	}
})
