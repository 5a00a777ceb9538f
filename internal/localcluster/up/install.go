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
	"github.com/svcnet-io/svcnet/internal/localcluster/nodesim/images"
)

// Ways svcnet is installed (--install).
const (
	// InstallInProcess runs the manager inside `svcnet up` and one agent
	// process per node.
	InstallInProcess = "in-process"
	// InstallManifests applies config/default, as on a real cluster: the
	// simulated nodes run the manager Deployment and the agent DaemonSet.
	InstallManifests = "manifests"
)

// Where the installed manifests run, as config/default names them.
const (
	svcnetImage      = "ghcr.io/svcnet-io/svcnet"
	svcnetNamespace  = "svcnet-system"
	managerName      = "svcnet-manager"
	agentName        = "svcnet-agent"
	agentAPIServerCM = "svcnet-agent-apiserver"
	webhookService   = "svcnet-webhook-service"
)

// svcnetImageHostDirs stand for the svcnet image's filesystem besides
// its binary: the agent runs iptables-restore and nft, with their
// libraries and Debian's alternatives links.
var svcnetImageHostDirs = []string{"/usr", "/lib", "/lib64", "/bin", "/sbin", "/etc/alternatives"}

// svcnetImage runs svcnet's image as this very binary.
func svcnetImageOf() (images.Image, error) {
	self, err := os.Executable()
	if err != nil {
		return images.Image{}, fmt.Errorf("finding the svcnet binary for its image: %w", err)
	}
	return images.Image{
		Name: "svcnet", Repositories: []string{svcnetImage}, Config: images.Config{Entrypoint: []string{"/svcnet"}},
		HostDirs: svcnetImageHostDirs, Files: map[string]string{"/svcnet": self},
	}, nil
}

// installManifests builds config/default, sets this run's knobs, applies
// it and waits until the agents run on every node and a manager leads.
func (cl *cluster) installManifests(ctx context.Context, s *session) error {
	objs, err := svcnetconfig.BuildDefault(ctx, filepath.Join(s.binDir, "kubectl"), filepath.Join(s.dataDir, "config"))
	if err != nil {
		return err
	}
	if err := setKnobs(objs, s.cfg); err != nil {
		return err
	}
	if err := applyObjects(ctx, s.admin, objs); err != nil {
		return fmt.Errorf("applying config/default: %w", err)
	}
	if err := waitFor(ctx, 2*time.Minute, "the svcnet-agent DaemonSet ready on every node", func() (bool, error) {
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
	return waitFor(ctx, 2*time.Minute, "a leading svcnet-manager behind "+webhookService, func() (bool, error) {
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

// setKnobs sets what differs on this machine from config/default's
// defaults: the agents' mode and Pod range and the API server's address
// for them (the fabric's forwarder), the manager's node port range.
func setKnobs(objs []*unstructured.Unstructured, c Config) error {
	found := map[string]bool{}
	for _, u := range objs {
		switch u.GetKind() + "/" + u.GetName() {
		case "DaemonSet/" + agentName:
			found[agentName] = true
			if err := setArgs(u, map[string]string{"--mode": c.ProxyMode, "--cluster-cidr": c.ClusterCIDR}); err != nil {
				return err
			}
		case "Deployment/" + managerName:
			found[managerName] = true
			if err := setArgs(u, map[string]string{"--service-node-port-range": c.Manager.Controllers.NodePort.Range}); err != nil {
				return err
			}
		case "ConfigMap/" + agentAPIServerCM:
			found[agentAPIServerCM] = true
			data := map[string]any{"host": fabricAddr.Addr().String(), "port": strconv.Itoa(c.APIServerPort)}
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
