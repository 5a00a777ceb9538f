// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package up

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/svcnet-io/svcnet/charts"
)

// helmRelease is the release `svcnet up --install=helm` installs.
const helmRelease = "svcnet"

// findHelm resolves the helm binary: $SVCNET_HELM, else tools/helm beside
// the Kubernetes binaries' folder (bin/tools/helm, make helm), tools/helm
// beside the svcnet binary, helm on $PATH.
func (s *session) findHelm() (string, error) {
	candidates := []string{os.Getenv("SVCNET_HELM"), filepath.Join(filepath.Dir(s.binDir), "tools", "helm")}
	if exe, err := os.Executable(); err == nil {
		candidates = append(candidates, filepath.Join(filepath.Dir(exe), "tools", "helm"))
	}
	for _, p := range candidates {
		if p != "" && executable(p) {
			return p, nil
		}
	}
	if p, err := exec.LookPath("helm"); err == nil {
		return p, nil
	}
	return "", errors.New("--install=helm needs helm: run `make helm` (bin/tools/helm) or set SVCNET_HELM")
}

// helmValues are this run's knobs as the chart's values, the same that
// setKnobs sets in config/default.
func helmValues(c Config) []string {
	return []string{
		"agent.mode=" + string(c.ProxyMode),
		// helm --set splits a value at its commas unless escaped.
		"agent.clusterCIDR=" + strings.ReplaceAll(c.ClusterCIDR, ",", `\,`),
		"agent.conntrackMaxPerCore=0", // nf_conntrack_max is the host's
		"agent.apiServer.host=" + c.apiServerAddr().String(),
		"agent.apiServer.port=" + strconv.Itoa(c.APIServerPort),
		"manager.serviceNodePortRange=" + c.Manager.Controllers.NodePort.Range,
	}
}

// installChart writes the embedded chart into the data dir and installs
// it (or upgrades it, on a data dir that has it) with helm, keeping
// helm's own files in the data dir too.
func installChart(ctx context.Context, s *session) error {
	helm, err := s.findHelm()
	if err != nil {
		return err
	}
	chart, err := charts.WriteSvcnet(filepath.Join(s.dataDir, "chart"))
	if err != nil {
		return err
	}
	args := []string{"upgrade", "--install", helmRelease, chart, "--namespace", svcnetNamespace, "--create-namespace", "--kubeconfig", s.kubeconfig, "--timeout", "5m"}
	for _, v := range helmValues(s.cfg) {
		args = append(args, "--set", v)
	}
	cmd := exec.CommandContext(ctx, helm, args...)
	cmd.Env = append(os.Environ(), HelmEnv(s.dataDir)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("helm %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out.Bytes()))
	}
	return nil
}

// HelmEnv keeps helm's cache, configuration and data in a data dir, not
// in the user's home.
func HelmEnv(dataDir string) []string {
	d := filepath.Join(dataDir, "helm")
	return []string{"HELM_CACHE_HOME=" + filepath.Join(d, "cache"), "HELM_CONFIG_HOME=" + filepath.Join(d, "config"), "HELM_DATA_HOME=" + filepath.Join(d, "data")}
}

// installedWhat names what --install installs, in messages.
var installedWhat = map[Install]string{InstallManifests: "config/default", InstallHelm: "the svcnet chart (helm release " + helmRelease + ")"}
