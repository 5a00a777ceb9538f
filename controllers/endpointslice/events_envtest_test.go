// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package endpointslice_test

import (
	"context"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/svcnet-io/svcnet/controllers/endpointslice"
)

var _ = Describe("a sync whose slice writes are refused", func() {
	It("says so on the Service as kube-controller-manager does, and publishes once they are allowed", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		By("a ValidatingAdmissionPolicy refusing EndpointSlice creates in the namespace")
		policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "deny-slices-"},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
				FailurePolicy: ptr.To(admissionregistrationv1.Fail),
				MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
						Rule:       admissionregistrationv1.Rule{APIGroups: []string{discoveryv1.GroupName}, APIVersions: []string{"v1"}, Resources: []string{"endpointslices"}},
					}}}},
				Validations: []admissionregistrationv1.Validation{{Expression: "false", Message: "slices are frozen here"}},
			},
		}
		Expect(env.Client.Create(ctx, policy)).To(Succeed())
		binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "deny-slices-"},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
				PolicyName:        policy.Name,
				ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
				MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
					MatchLabels: map[string]string{corev1.LabelMetadataName: ns}}},
			},
		}
		Expect(env.Client.Create(ctx, binding)).To(Succeed())
		unbind := func(ctx context.Context) {
			Expect(client.IgnoreNotFound(env.Client.Delete(ctx, binding))).To(Succeed())
			Expect(client.IgnoreNotFound(env.Client.Delete(ctx, policy))).To(Succeed())
		}
		DeferCleanup(unbind)

		// The API server enforces a policy once it has compiled it.
		Eventually(func() error {
			probe := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "probe-"}, AddressType: discoveryv1.AddressTypeIPv4}
			return env.Client.Create(ctx, probe, client.DryRunAll)
		}).WithTimeout(timeout).WithPolling(poll).Should(MatchError(ContainSubstring("slices are frozen here")))

		createPods(ctx, ns, "web", 2, nil)
		svc := webService(ns)
		Expect(env.Client.Create(ctx, svc)).To(Succeed())

		By("the Warning Event names the Service and the API server's refusal")
		Eventually(func() ([]string, error) {
			evs, err := env.Events(ctx, endpointslice.ReportingController, svc.UID, endpointslice.ReasonFailedToUpdateEndpointSlices)
			var notes []string
			for _, ev := range evs {
				notes = append(notes, ev.Type+": "+ev.Note)
			}
			return notes, err
		}).WithTimeout(timeout).WithPolling(poll).Should(ContainElement(And(
			HavePrefix("Warning: Error updating Endpoint Slices for Service "+ns+"/web: "),
			ContainSubstring("slices are frozen here"))))

		By("the writes allowed again, the slice is published")
		unbind(ctx)
		Eventually(func(g Gomega) {
			var list discoveryv1.EndpointSliceList
			g.Expect(env.Client.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelServiceName: "web"})).To(Succeed())
			g.Expect(list.Items).To(HaveLen(1))
			g.Expect(list.Items[0].Endpoints).To(HaveLen(2))
		}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	})
})
