// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"os"
	"strconv"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/svcnet-io/svcnet/internal/platform/restconfig"
)

// Main is the agent's command once its flags are complete: --cleanup, or
// the process set up as kube-proxy sets itself up (its OOM score) and the
// agent run against the API server of cfg.Client. `svcnet agent`, its
// kube-proxy form and the tests that run the agent as a process all go
// through it.
func Main(ctx context.Context, cfg Config, log logr.Logger) error {
	if cfg.Cleanup {
		return Cleanup(ctx, cfg, log)
	}
	restCfg, err := cfg.Client.RESTConfig()
	if err != nil {
		return err
	}
	applyOOMScoreAdj(cfg.OOMScoreAdj, log)
	return Run(ctx, restCfg, cfg, log)
}

// RESTConfig loads the kubeconfig (or the in-cluster configuration, then
// $KUBECONFIG, when there is none), with the API server address and rate
// limits of the client settings over it.
func (c ClientConfig) RESTConfig() (*rest.Config, error) {
	cfg, err := restconfig.Load(c.Kubeconfig, c.Master)
	if err != nil {
		return nil, err
	}
	if c.QPS > 0 {
		cfg.QPS = c.QPS
	}
	if c.Burst > 0 {
		cfg.Burst = int(c.Burst)
	}
	return cfg, nil
}

// applyOOMScoreAdj sets the process's oom_score_adj as kube-proxy does,
// logging (not failing on) an error, as it does.
func applyOOMScoreAdj(score int, log logr.Logger) {
	if err := os.WriteFile("/proc/self/oom_score_adj", []byte(strconv.Itoa(score)), 0o644); err != nil {
		log.V(2).Info("Could not set the OOM score", "oomScoreAdj", score, "err", err.Error())
	}
}

// LogIgnored names, in one line, the settings given that svcnet accepts
// and does not act on.
func (c Config) LogIgnored(log logr.Logger) {
	if len(c.Ignored) > 0 {
		log.Info("WARNING: ignoring kube-proxy settings that svcnet does not implement", "settings", c.Ignored)
	}
}

// prepareNode is what the agent does on the node before its first sync,
// as kube-proxy does before its proxier starts: the warning about what it
// ignores, the conntrack sysctls, and what it reads of its Node.
func prepareNode(ctx context.Context, c client.Reader, cfg Config, log logr.Logger) (Config, error) {
	cfg.LogIgnored(log)
	if err := setupNodeConntrack(ctx, cfg, log); err != nil {
		return cfg, err
	}
	return completeFromNode(ctx, c, cfg, log)
}
