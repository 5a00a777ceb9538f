// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package manager

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
)

// apiServerPollInterval is how often WaitForAPIServer asks.
const apiServerPollInterval = time.Second

// WaitForAPIServer waits until the API server at cfg answers /healthz
// with 200, for at most timeout, as kube-controller-manager does before
// it starts anything. On a cluster a manager Pod can start before its
// node can reach the API server: the kubernetes Service's rules are
// written by the agent starting beside it on that node (or by
// kube-proxy), so the first requests may be refused for a moment. Giving
// up at the first refusal would show as restarts of a healthy install.
func WaitForAPIServer(ctx context.Context, cfg *rest.Config, timeout time.Duration) error {
	cs, err := kubernetes.NewForConfig(rest.CopyConfig(cfg))
	if err != nil {
		return err
	}
	log := ctrl.LoggerFrom(ctx)
	var last error
	start := time.Now()
	err = wait.PollUntilContextTimeout(ctx, apiServerPollInterval, timeout, true, func(ctx context.Context) (bool, error) {
		reqCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		code := 0
		last = cs.Discovery().RESTClient().Get().AbsPath("/healthz").Do(reqCtx).StatusCode(&code).Error()
		if last == nil && code == http.StatusOK {
			return true, nil
		}
		if time.Since(start) < 2*apiServerPollInterval || int(time.Since(start)/apiServerPollInterval)%10 == 0 {
			log.Info("Waiting for the API server", "host", cfg.Host, "err", last, "status", code)
		}
		return false, nil
	})
	if err != nil {
		if last != nil {
			err = last
		}
		return fmt.Errorf("the API server at %s did not answer /healthz within %s: %w", cfg.Host, timeout, err)
	}
	if time.Since(start) > apiServerPollInterval {
		log.Info("The API server answers", "host", cfg.Host, "after", time.Since(start).Round(time.Millisecond))
	}
	return nil
}
