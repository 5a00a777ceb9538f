// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package up

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	svcnetconfig "github.com/svcnet-io/svcnet/config"
	"github.com/svcnet-io/svcnet/internal/platform/version"
	"github.com/svcnet-io/svcnet/localcluster/addons"
	"github.com/svcnet-io/svcnet/localcluster/controlplane"
	"github.com/svcnet-io/svcnet/localcluster/nodesim/images"
)

// Install is --install: how svcnet runs.
type Install string

// Ways svcnet is installed (--install).
const (
	// InstallInProcess runs the manager inside `svcnet up` and one agent
	// process per node.
	InstallInProcess Install = "in-process"
	// InstallManifests applies config/default, as on a real cluster: the
	// simulated nodes run the manager Deployment and the agent DaemonSet.
	InstallManifests Install = "manifests"
	// InstallHelm installs charts/svcnet with helm, as on a real
	// cluster: the same images and objects as InstallManifests, by the
	// chart (helm.go).
	InstallHelm Install = "helm"
)

// Installs are the values of --install.
var Installs = []Install{InstallInProcess, InstallManifests, InstallHelm}

// Where the installed manifests run, as config/default names them.
const (
	svcnetNamespace  = "svcnet-system"
	managerName      = "svcnet-manager"
	agentName        = "svcnet-agent"
	agentAPIServerCM = "svcnet-agent-apiserver"
	webhookService   = "svcnet-webhook-service"
)

// imageVersionLabel is the label of svcnet's images that holds their
// svcnet's version.
const imageVersionLabel = "org.opencontainers.image.version"

// svcnetImages are the archives of svcnet's images that `make images`
// writes, which the nodes run for --install=manifests: the images a
// cluster pulls.
var svcnetImages = []string{"svcnet.tar", "svcnet-agent.tar"}

// findOCIDir resolves the folder of svcnet's image archives: $SVCNET_OCI_DIR,
// else oci/ beside the node images' folder (bin/oci beside bin/images),
// oci/ beside the svcnet binary, ./bin/oci; the first that holds them.
func (c *Config) findOCIDir() (string, error) {
	candidates := []string{os.Getenv("SVCNET_OCI_DIR")}
	if d := c.findImagesDir(); d != "" {
		candidates = append(candidates, filepath.Join(filepath.Dir(d), "oci"))
	}
	if exe, err := os.Executable(); err == nil {
		candidates = append(candidates, filepath.Join(filepath.Dir(exe), "oci"))
	}
	candidates = append(candidates, filepath.Join("bin", "oci"))
	for _, d := range candidates {
		if d == "" {
			continue
		}
		if _, err := os.Stat(filepath.Join(d, svcnetImages[0])); err == nil {
			return filepath.Abs(d)
		}
	}
	return "", fmt.Errorf("--install=%s runs svcnet's images, and no folder has %s: run `make images` (it writes bin/oci) or set SVCNET_OCI_DIR", InstallManifests, strings.Join(svcnetImages, " and "))
}

// svcnetImagesOf loads svcnet's images from their archives, unpacked
// under the data dir.
func (s *session) svcnetImagesOf() ([]images.Image, error) {
	dir, err := s.cfg.findOCIDir()
	if err != nil {
		return nil, err
	}
	var out []images.Image
	for _, name := range svcnetImages {
		img, err := images.LoadArchive(filepath.Join(dir, name), filepath.Join(s.dataDir, "images"))
		if err != nil {
			return nil, fmt.Errorf("loading svcnet's image: %w", err)
		}
		fmt.Fprintf(s.out, "svcnet image %s from %s\n", strings.Join(img.Repositories, ", "), filepath.Join(dir, name))
		if v := img.Config.Labels[imageVersionLabel]; v != version.Version {
			fmt.Fprintf(s.out, "  its svcnet is %s, this one %s: `make images` builds them from this checkout\n", v, version.Version)
		}
		out = append(out, img)
	}
	return out, nil
}

// installManifests installs svcnet as --install says: config/default
// built, given this run's knobs and applied, or the chart installed with
// helm; then it waits until the agents run on every node and a manager
// leads.
func (cl *cluster) installManifests(ctx context.Context, s *session) error {
	var err error
	if s.cfg.Install == InstallHelm {
		err = installChart(ctx, s)
	} else {
		err = applyConfigDefault(ctx, s)
	}
	if err != nil {
		return err
	}
	if err := controlplane.WaitFor(ctx, 2*time.Minute, "the svcnet-agent DaemonSet ready on every node", func() (bool, error) {
		var ds appsv1.DaemonSet
		if err := s.admin.Get(ctx, client.ObjectKey{Namespace: svcnetNamespace, Name: agentName}, &ds); err != nil {
			return false, err
		}
		return ds.Status.DesiredNumberScheduled == int32(len(cl.nodes)) && ds.Status.NumberReady == ds.Status.DesiredNumberScheduled, nil
	}); err != nil {
		return err
	}
	// Every replica in sync is Ready; the leader is the one the webhook
	// Service selects, so its Ready endpoint there means a leader answers.
	return controlplane.WaitFor(ctx, 2*time.Minute, "a leading svcnet-manager behind "+webhookService, func() (bool, error) {
		var slices discoveryv1.EndpointSliceList
		if err := s.admin.List(ctx, &slices, client.InNamespace(svcnetNamespace), client.MatchingLabels{discoveryv1.LabelServiceName: webhookService}); err != nil {
			return false, err
		}
		for _, sl := range slices.Items {
			for _, ep := range sl.Endpoints {
				if ptr.Deref(ep.Conditions.Ready, false) {
					return true, nil
				}
			}
		}
		return false, nil
	})
}

// applyConfigDefault builds config/default, sets this run's knobs and
// applies it.
func applyConfigDefault(ctx context.Context, s *session) error {
	objs, err := svcnetconfig.BuildDefault(ctx, filepath.Join(s.binDir, "kubectl"), filepath.Join(s.dataDir, "config"))
	if err != nil {
		return err
	}
	if err := setKnobs(objs, s.cfg); err != nil {
		return err
	}
	if err := addons.Apply(ctx, s.admin, objs); err != nil {
		return fmt.Errorf("applying config/default: %w", err)
	}
	return nil
}

// setKnobs sets what differs on this machine from config/default's
// defaults: the agents' mode and Pod range and the API server's address
// for them (the fabric's forwarder), the manager's node port range.
func setKnobs(objs []*unstructured.Unstructured, c Config) error {
	found := map[string]bool{}
	for _, u := range objs {
		switch u.GetKind() + "/" + u.GetName() {
		case "DaemonSet/" + agentName:
			found[agentName] = true
			// nf_conntrack_max is the host's, read-only in a node's namespace.
			if err := setArgs(u, map[string]string{"--mode": string(c.ProxyMode), "--cluster-cidr": c.ClusterCIDR, "--conntrack-max-per-core": "0"}); err != nil {
				return err
			}
		case "Deployment/" + managerName:
			found[managerName] = true
			if err := setArgs(u, map[string]string{"--service-node-port-range": c.Manager.Controllers.NodePort.Range}); err != nil {
				return err
			}
		case "ConfigMap/" + agentAPIServerCM:
			found[agentAPIServerCM] = true
			data := map[string]any{"host": c.apiServerAddr().String(), "port": strconv.Itoa(c.APIServerPort)}
			if err := unstructured.SetNestedField(u.Object, data, "data"); err != nil {
				return err
			}
		}
	}
	for _, name := range []string{agentName, managerName, agentAPIServerCM} {
		if !found[name] {
			return fmt.Errorf("config/default has no %s", name)
		}
	}
	return nil
}

// setArgs replaces the values of flags in the first container's args;
// every flag must be there.
func setArgs(u *unstructured.Unstructured, flags map[string]string) error {
	containers, _, err := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
	if err != nil || len(containers) == 0 {
		return fmt.Errorf("%s %s has no containers", u.GetKind(), u.GetName())
	}
	ctr := containers[0].(map[string]any)
	args, _, _ := unstructured.NestedStringSlice(ctr, "args")
	for flag, value := range flags {
		i := -1
		for j, a := range args {
			if strings.HasPrefix(a, flag+"=") {
				i = j
			}
		}
		if i < 0 {
			return fmt.Errorf("%s %s: config/default sets no %s", u.GetKind(), u.GetName(), flag)
		}
		args[i] = flag + "=" + value
	}
	if err := unstructured.SetNestedStringSlice(ctr, args, "args"); err != nil {
		return err
	}
	containers[0] = ctr
	return unstructured.SetNestedSlice(u.Object, containers, "spec", "template", "spec", "containers")
}

// executable tells whether p is a file anyone may run.
func executable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}
