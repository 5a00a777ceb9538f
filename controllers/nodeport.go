// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package controllers

import (
	"fmt"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/svcnet-io/svcnet/allocator/portrange"
	"github.com/svcnet-io/svcnet/controllers/nodeport"
)

// NodePortName is the nodeport controller's --controllers name: nodePort
// allocation at admission, and the audit.
const NodePortName = nodeport.ControllerName

// DefaultNodePortRange is kube-apiserver's default --service-node-port-range.
const DefaultNodePortRange = "30000-32767"

// NodePortOptions configures nodePort allocation and its audit.
type NodePortOptions struct {
	// Range is kube-apiserver's --service-node-port-range.
	Range string
	// Exclude are sub-ranges never handed out dynamically.
	Exclude []string
	// ReuseDelay is how long a released nodePort stays out of use.
	ReuseDelay time.Duration
}

// Parse checks the options, naming the bad flag.
func (o NodePortOptions) Parse() (portrange.Options, error) {
	r, err := portrange.ParseRange(o.Range)
	if err != nil {
		return portrange.Options{}, fmt.Errorf("NodePort.Range (--service-node-port-range): %w", err)
	}
	ex, err := portrange.ParseRanges(o.Exclude)
	if err != nil {
		return portrange.Options{}, fmt.Errorf("NodePort.Exclude (--nodeport-exclude): %w", err)
	}
	if o.ReuseDelay < 0 {
		return portrange.Options{}, fmt.Errorf("NodePort.ReuseDelay (--nodeport-reuse-delay) must not be negative, got %v", o.ReuseDelay)
	}
	return portrange.Options{Range: r, Exclude: ex, ReuseDelay: o.ReuseDelay}, nil
}

func setupNodePortAudit(mgr ctrl.Manager, opts Options, _ map[string]bool) error {
	ports, err := opts.NodePort.Parse()
	if err != nil {
		return err
	}
	r, err := nodeport.New(mgr.GetClient(), mgr.GetAPIReader(), mgr.GetEventRecorder(nodeport.ReportingController), ports, opts.Audit.EventQuietPeriod)
	if err != nil {
		return err
	}
	return r.SetupWithManager(mgr)
}
