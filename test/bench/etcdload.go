// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/google/uuid"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/svcnet-io/svcnet/test/testenv"
)

// The scale benchmarks' background Services are written straight into the
// API server's etcd, as kube-apiserver itself stores them (protobuf, under
// /registry), with the IPAddress objects its allocator would have made, so
// that nothing repairs them afterwards. Created through the API, 50,000
// Services and their slices took an hour on 2 cores, each create slower
// than the last; what (n) and (m) measure starts after they exist, when
// every proxy lists them from the API server like any other object.
const (
	etcdPrefix = "/registry"
	etcdTxnOps = 100 // etcd's default --max-txn-ops is 128
)

// storedService is one background Service with its slice and ClusterIP.
type storedService struct {
	name      string
	clusterIP string
	endpoints []string
}

// etcdObject is a key and the bytes kube-apiserver would store there.
type etcdObject struct {
	key   string
	value []byte
}

// loadIntoEtcd writes each Service, its EndpointSlice (10 endpoints on
// agentPort) and its IPAddress into namespace ns.
func loadIntoEtcd(ctx context.Context, endpoint, ns string, services []storedService) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 10 * time.Second})
	if err != nil {
		return fmt.Errorf("connecting to etcd at %s: %w", endpoint, err)
	}
	defer cli.Close()
	enc := protobuf.NewSerializer(nil, nil)
	// Each Service is three objects: a batch stays within one transaction.
	per := etcdTxnOps / 3
	return testenv.Parallel((len(services)+per-1)/per, func(i int) error {
		return putBatch(ctx, cli, enc, ns, services[i*per:min((i+1)*per, len(services))])
	})
}

func putBatch(ctx context.Context, cli *clientv3.Client, enc runtime.Encoder, ns string, batch []storedService) error {
	var ops []clientv3.Op
	for _, s := range batch {
		objs, err := storedObjects(enc, ns, s)
		if err != nil {
			return err
		}
		for _, o := range objs {
			// Only where nothing is stored yet, as a create.
			ops = append(ops, clientv3.OpPut(o.key, string(o.value)))
		}
	}
	cmps := make([]clientv3.Cmp, 0, len(ops))
	for _, op := range ops {
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(string(op.KeyBytes())), "=", 0))
	}
	resp, err := cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
	if err != nil {
		return fmt.Errorf("writing %d objects to etcd: %w", len(ops), err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("writing %d objects to etcd: some already exist (from %s)", len(ops), batch[0].name)
	}
	return nil
}

// storedObjects are a Service's three objects as kube-apiserver stores
// them: every field its defaulting would set, set.
func storedObjects(enc runtime.Encoder, ns string, s storedService) ([]etcdObject, error) {
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	meta := func(name, namespace string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: namespace, UID: types.UID(uuid.NewString()), CreationTimestamp: now}
	}
	svc := &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: meta(s.name, ns),
		Spec: corev1.ServiceSpec{
			Type:                  corev1.ServiceTypeClusterIP,
			ClusterIP:             s.clusterIP,
			ClusterIPs:            []string{s.clusterIP},
			IPFamilies:            []corev1.IPFamily{corev1.IPv4Protocol},
			IPFamilyPolicy:        ptr.To(corev1.IPFamilyPolicySingleStack),
			SessionAffinity:       corev1.ServiceAffinityNone,
			InternalTrafficPolicy: ptr.To(corev1.ServiceInternalTrafficPolicyCluster),
			Ports:                 []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(agentPort)}},
		},
	}
	slice := agentSlice(svc, s.endpoints)
	slice.TypeMeta = metav1.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice"}
	labels := slice.Labels
	slice.ObjectMeta = meta(s.name, ns)
	slice.Labels = labels
	for i := range slice.Endpoints {
		slice.Endpoints[i].Conditions.Serving = ptr.To(true)
		slice.Endpoints[i].Conditions.Terminating = ptr.To(false)
	}
	ip := &networkingv1.IPAddress{
		TypeMeta:   metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "IPAddress"},
		ObjectMeta: meta(netip.MustParseAddr(s.clusterIP).String(), ""),
		Spec:       networkingv1.IPAddressSpec{ParentRef: &networkingv1.ParentReference{Resource: "services", Namespace: ns, Name: s.name}},
	}
	ip.Labels = map[string]string{networkingv1.LabelIPAddressFamily: string(corev1.IPv4Protocol), networkingv1.LabelManagedBy: "ipallocator.k8s.io"}
	out := make([]etcdObject, 0, 3)
	for _, o := range []struct {
		key string
		obj runtime.Object
	}{
		{etcdPrefix + "/services/specs/" + ns + "/" + s.name, svc},
		{etcdPrefix + "/endpointslices/" + ns + "/" + s.name, slice},
		{etcdPrefix + "/ipaddresses/" + ip.Name, ip},
	} {
		b, err := runtime.Encode(enc, o.obj)
		if err != nil {
			return nil, fmt.Errorf("encoding %s: %w", o.key, err)
		}
		out = append(out, etcdObject{key: o.key, value: b})
	}
	return out, nil
}
