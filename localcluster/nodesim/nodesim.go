// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package nodesim

import (
	"context"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/svcnet-io/svcnet/localcluster/nodesim/images"
	"github.com/svcnet-io/svcnet/localcluster/nodesim/kuberuntime"
)

// DefaultPort is served by a Pod that declares no containerPort and runs
// nothing for real, as the web server images a walkthrough uses would.
const DefaultPort = 80

// ReportingController is the reportingController of the simulator's Events.
const ReportingController = "svcnet-node-simulator"

// DNS is the kubelets' DNS settings (--cluster-dns, --cluster-domain,
// --resolv-conf).
type DNS = kuberuntime.DNS

// Options configure the simulator.
type Options struct {
	Nodes []Node
	// Now is the clock (tests); nil: time.Now.
	Now func() time.Time
	// Images are the images run for real; the containers of other images
	// are stand-ins that answer on their containerPorts.
	Images *images.Store
	// PodsDir holds each Pod's files (volumes, resolv.conf, hosts,
	// container roots); LogDir its containers' logs, in the kubelet's
	// layout (<namespace>_<pod>_<uid>/<container>/<restart>.log).
	PodsDir, LogDir string
	// DNS is the kubelet's DNS settings, for the Pods' resolv.conf.
	DNS DNS
	// RestartBackoff is the first crash back-off (the kubelet's 10 s when
	// zero), doubled per restart up to 5 minutes.
	RestartBackoff time.Duration
	// Kubelet serves a kubelet's API on every node; nil: none.
	Kubelet *KubeletOptions
}

// Add registers the Node keeper, the Pod reconciler and the kubelets'
// API servers with mgr.
func Add(mgr manager.Manager, opts Options) error {
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	if opts.PodsDir == "" || opts.LogDir == "" {
		return errors.New("node simulator: PodsDir and LogDir are required")
	}
	log := mgr.GetLogger().WithName("node-simulator")
	keeper := &nodeKeeper{c: mgr.GetClient(), r: mgr.GetAPIReader(), nodes: opts.Nodes, log: log, now: now}
	if opts.Kubelet != nil {
		keeper.kubeletPort = opts.Kubelet.port()
	}
	if err := mgr.Add(keeper); err != nil {
		return err
	}
	r := newPodReconciler(mgr.GetClient(), mgr.GetEventRecorder(ReportingController), log, now, opts)
	// The containers end with the simulator.
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		<-ctx.Done()
		r.stopAll()
		return nil
	})); err != nil {
		return err
	}
	if opts.Kubelet != nil {
		if err := addKubelets(mgr, r, opts); err != nil {
			return err
		}
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("node-simulator").
		For(&corev1.Pod{}).
		WatchesRawSource(source.Channel(r.changes, &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: 8}).
		Complete(r)
}
