// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package restconfig loads the client configuration every svcnet command
// starts from, one way: a kubeconfig file, an API server address, or the
// in-cluster configuration and then $KUBECONFIG.
package restconfig

import (
	"fmt"
	"os"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
)

// Load reads the kubeconfig at path (--kubeconfig), with master
// (--master) over its server when set; with neither, the in-cluster
// configuration, then $KUBECONFIG. Errors name the flag.
func Load(path, master string) (*rest.Config, error) {
	switch {
	case path != "":
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("--kubeconfig: %w", err)
		}
		cfg, err := clientcmd.BuildConfigFromFlags(master, path)
		if err != nil {
			return nil, fmt.Errorf("--kubeconfig %s: %w", path, err)
		}
		return cfg, nil
	case master != "":
		cfg, err := clientcmd.BuildConfigFromFlags(master, "")
		if err != nil {
			return nil, fmt.Errorf("--master %s: %w", master, err)
		}
		return cfg, nil
	default:
		cfg, err := ctrl.GetConfig()
		if err != nil {
			return nil, fmt.Errorf("loading client configuration: %w", err)
		}
		return cfg, nil
	}
}
