// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package up

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/spf13/pflag"
)

// Clusters side by side (--name, as `kind create cluster --name`): a named
// cluster's network namespaces start with its name, its data dir defaults
// to .svcnet-<name>, and, unless given, its ports are chosen free on its
// first start and kept in the data dir, so that its kubeconfig stays
// valid across restarts and two clusters never share a port.

// nameRE is a cluster name: a DNS label short enough for the namespace
// names made from it.
var nameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,18}[a-z0-9])?$`)

// roleWords are the namespace roles after a cluster's name; a name
// holding one as a dash-separated word would look like another cluster's
// namespace.
var roleWords = []string{"node", "client", "pod", "fabric", "control"}

func validateName(name string) error {
	if name == "" {
		return nil
	}
	if !nameRE.MatchString(name) {
		return fmt.Errorf("--name %q must be 1 to 20 lower-case letters, digits and dashes, starting and ending with a letter or digit", name)
	}
	for _, w := range roleWords {
		for _, part := range strings.Split(name, "-")[1:] {
			if part == w {
				return fmt.Errorf("--name %q must not hold %q as a word after a dash (its namespaces would look like another cluster's)", name, w)
			}
		}
	}
	return nil
}

// deriveFromName fills in what a named cluster derives from its name,
// from the settings not given, and tells whether it chooses its ports. A
// setting was given when fs says its flag changed; without fs, when it
// differs from its default.
func (o *Options) deriveFromName(fs *pflag.FlagSet) (choosePorts bool) {
	if o.Name == "" {
		return false
	}
	defaults := DefaultOptions()
	given := func(flag string, value, def any) bool {
		if fs != nil {
			return fs.Changed(flag)
		}
		return value != def
	}
	if !given("data-dir", o.DataDir, defaults.DataDir) {
		o.DataDir = ".svcnet-" + o.Name
	}
	ports := map[string][2]int{
		"apiserver-port":   {o.APIServerPort, defaults.APIServerPort},
		"etcd-client-port": {o.EtcdClientPort, defaults.EtcdClientPort},
		"etcd-peer-port":   {o.EtcdPeerPort, defaults.EtcdPeerPort},
		"webhook-port":     {o.Manager.Webhook.Port, defaults.Manager.Webhook.Port},
	}
	for flag, v := range ports {
		if given(flag, v[0], v[1]) {
			return false
		}
	}
	return true
}

// clusterPorts are a named cluster's ports, kept in its data dir.
type clusterPorts struct {
	APIServer  int `json:"apiserver"`
	EtcdClient int `json:"etcdClient"`
	EtcdPeer   int `json:"etcdPeer"`
	Webhook    int `json:"webhook"`
}

// resolvePorts sets a named cluster's ports: those of its earlier starts,
// or free ones, saved for the next start.
func (s *session) resolvePorts() error {
	c := &s.cfg
	if !c.choosePorts {
		return nil
	}
	path := filepath.Join(s.dataDir, "ports.json")
	var p clusterPorts
	data, err := os.ReadFile(path)
	switch {
	case err == nil:
		if err := json.Unmarshal(data, &p); err != nil {
			return fmt.Errorf("%s: %w; delete it to have new ports chosen", path, err)
		}
	case errors.Is(err, os.ErrNotExist):
		for _, port := range []*int{&p.APIServer, &p.EtcdClient, &p.EtcdPeer, &p.Webhook} {
			if *port, err = freeLoopbackPort(); err != nil {
				return err
			}
		}
		data, _ := json.Marshal(p)
		if err := os.WriteFile(path, data, 0o644); err != nil {
			return err
		}
	default:
		return err
	}
	c.APIServerPort, c.EtcdClientPort, c.EtcdPeerPort, c.Manager.Webhook.Port = p.APIServer, p.EtcdClient, p.EtcdPeer, p.Webhook
	return nil
}
