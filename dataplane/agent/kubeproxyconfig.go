// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package agent

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/kube-proxy/config/v1alpha1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// defaultConfigSyncPeriod is kube-proxy's default configSyncPeriod.
const defaultConfigSyncPeriod = 15 * time.Minute

// loadKubeProxyConfiguration reads a KubeProxyConfiguration v1alpha1 file
// and applies kube-proxy's defaults to it. As kube-proxy, it decodes
// strictly first and, when only unknown or duplicate fields fail that,
// leniently, noting why.
func loadKubeProxyConfiguration(path string) (*v1alpha1.KubeProxyConfiguration, []string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	var notes []string
	var c v1alpha1.KubeProxyConfiguration
	if strictErr := yaml.UnmarshalStrict(data, &c); strictErr != nil {
		c = v1alpha1.KubeProxyConfiguration{}
		if err := yaml.Unmarshal(data, &c); err != nil {
			return nil, nil, fmt.Errorf("decoding: %w", err)
		}
		notes = append(notes, fmt.Sprintf("--config %s was read leniently, as kube-proxy reads it: %v", path, strictErr))
	}
	if gvk := c.GroupVersionKind(); gvk != v1alpha1.SchemeGroupVersion.WithKind("KubeProxyConfiguration") {
		return nil, nil, fmt.Errorf("apiVersion %q kind %q: want %s KubeProxyConfiguration", c.APIVersion, c.Kind, v1alpha1.SchemeGroupVersion)
	}
	setKubeProxyDefaults(&c)
	return &c, notes, nil
}

// setKubeProxyDefaults fills what the file leaves unset with kube-proxy
// v1.37's defaults (pkg/proxy/apis/config/v1alpha1): kubeadm writes the
// file with every field present and most of them zero.
func setKubeProxyDefaults(c *v1alpha1.KubeProxyConfiguration) {
	if c.BindAddress == "" {
		c.BindAddress = "0.0.0.0"
	}
	healthzHost, metricsHost := "0.0.0.0", "127.0.0.1"
	if strings.Contains(c.BindAddress, ":") {
		healthzHost, metricsHost = "::", "::1"
	}
	c.HealthzBindAddress = hostPortDefault(c.HealthzBindAddress, healthzHost, defaultHealthzPort)
	c.MetricsBindAddress = hostPortDefault(c.MetricsBindAddress, metricsHost, defaultMetricsPort)
	setDefault(&c.OOMScoreAdj, defaultOOMScoreAdj)
	for _, p := range []*metav1.Duration{&c.IPTables.SyncPeriod, &c.IPVS.SyncPeriod, &c.NFTables.SyncPeriod} {
		durationDefault(p, 30*time.Second)
	}
	durationDefault(&c.IPTables.MinSyncPeriod, time.Second)
	durationDefault(&c.NFTables.MinSyncPeriod, time.Second)
	setDefault(&c.IPTables.LocalhostNodePorts, true)
	setDefault(&c.IPTables.MasqueradeBit, defaultMasqueradeBit)
	setDefault(&c.NFTables.MasqueradeBit, defaultMasqueradeBit)
	setDefault(&c.Conntrack.MaxPerCore, defaultConntrackMaxPerCore)
	setDefault(&c.Conntrack.Min, defaultConntrackMin)
	setDefault(&c.Conntrack.TCPEstablishedTimeout, metav1.Duration{Duration: defaultConntrackEstablished})
	setDefault(&c.Conntrack.TCPCloseWaitTimeout, metav1.Duration{Duration: defaultConntrackCloseWait})
	durationDefault(&c.ConfigSyncPeriod, defaultConfigSyncPeriod)
	if c.ClientConnection.QPS == 0 {
		c.ClientConnection.QPS = 5
	}
	if c.ClientConnection.Burst == 0 {
		c.ClientConnection.Burst = 10
	}
}

func setDefault[T any](p **T, v T) {
	if *p == nil {
		*p = &v
	}
}

func durationDefault(d *metav1.Duration, v time.Duration) {
	if d.Duration == 0 {
		d.Duration = v
	}
}

// hostPortDefault is kube-proxy's defaulting of a server address: host and
// port when empty, the port when only a host is given.
func hostPortDefault(addr, host string, port int) string {
	switch {
	case addr == "":
		return joinHostPort(host, port)
	case !strings.Contains(addr, ":") || (strings.Count(addr, ":") > 1 && !strings.HasPrefix(addr, "[")):
		return joinHostPort(addr, port)
	default:
		return addr
	}
}

func joinHostPort(host string, port int) string {
	if strings.Contains(host, ":") {
		return "[" + host + "]:" + strconv.Itoa(port)
	}
	return host + ":" + strconv.Itoa(port)
}

// withFile are the options with the file's settings over the flags', as
// kube-proxy's --config replaces its flags: only --hostname-override,
// -v and svcnet's own flags keep their values.
func (o *Options) withFile(c *v1alpha1.KubeProxyConfiguration) Options {
	eff := *o
	eff.Kubeconfig = c.ClientConnection.Kubeconfig
	eff.KubeAPIQPS, eff.KubeAPIBurst = c.ClientConnection.QPS, c.ClientConnection.Burst
	if name := strings.TrimSpace(c.HostnameOverride); name != "" && !o.changed("hostname-override", "node-name") {
		eff.NodeName = strings.ToLower(name)
	}
	eff.Mode = string(c.Mode)
	eff.ClusterCIDRs = nil
	if c.ClusterCIDR != "" {
		eff.ClusterCIDRs = strings.Split(c.ClusterCIDR, ",")
	}
	eff.DetectLocalMode = string(c.DetectLocalMode)
	switch eff.Mode {
	case ModeNFTables:
		eff.MasqueradeAll, eff.MasqueradeBit = c.NFTables.MasqueradeAll, *c.NFTables.MasqueradeBit
		eff.SyncPeriod, eff.MinSyncPeriod = c.NFTables.SyncPeriod.Duration, c.NFTables.MinSyncPeriod.Duration
	case modeIPVS:
		eff.SyncPeriod, eff.MinSyncPeriod = c.IPVS.SyncPeriod.Duration, c.IPVS.MinSyncPeriod.Duration
	default:
		eff.MasqueradeAll, eff.MasqueradeBit = c.IPTables.MasqueradeAll, *c.IPTables.MasqueradeBit
		eff.SyncPeriod, eff.MinSyncPeriod = c.IPTables.SyncPeriod.Duration, c.IPTables.MinSyncPeriod.Duration
	}
	eff.LocalhostNodePorts = *c.IPTables.LocalhostNodePorts
	eff.NodePortAddresses = c.NodePortAddresses
	eff.BindAddress, eff.BindAddressHardFail = c.BindAddress, c.BindAddressHardFail
	eff.Conntrack = ConntrackConfig{
		MaxPerCore:            *c.Conntrack.MaxPerCore,
		Min:                   *c.Conntrack.Min,
		TCPEstablishedTimeout: c.Conntrack.TCPEstablishedTimeout.Duration,
		TCPCloseWaitTimeout:   c.Conntrack.TCPCloseWaitTimeout.Duration,
		TCPBeLiberal:          c.Conntrack.TCPBeLiberal,
		UDPTimeout:            c.Conntrack.UDPTimeout.Duration,
		UDPStreamTimeout:      c.Conntrack.UDPStreamTimeout.Duration,
	}
	eff.OOMScoreAdj = *c.OOMScoreAdj
	eff.HealthzBindAddress, eff.MetricsBindAddress = c.HealthzBindAddress, c.MetricsBindAddress
	if !o.changed("v") {
		v := int(c.Logging.Verbosity)
		eff.unsupported.logVerbosity = &v
	}
	eff.unsupported.fromFile = unsupportedFileSettings(c)
	return eff
}

// changed tells whether any of the flags was given.
func (o *Options) changed(flags ...string) bool {
	if o.flags == nil {
		return false
	}
	for _, f := range flags {
		if o.flags.Changed(f) {
			return true
		}
	}
	return false
}

// unsupportedFileSettings names the file's settings that svcnet does not
// act on and that differ from kube-proxy's defaults, each with why.
func unsupportedFileSettings(c *v1alpha1.KubeProxyConfiguration) []string {
	var out []string
	note := func(set bool, field, why string) {
		if set {
			out = append(out, fmt.Sprintf("%s (%s)", field, why))
		}
	}
	note(len(c.FeatureGates) > 0, "featureGates", unsupportedFlags["feature-gates"])
	note(c.EnableProfiling, "enableProfiling", unsupportedFlags["profiling"])
	note(c.ShowHiddenMetricsForVersion != "", "showHiddenMetricsForVersion", unsupportedFlags["show-hidden-metrics-for-version"])
	note(c.ConfigSyncPeriod.Duration != defaultConfigSyncPeriod, "configSyncPeriod", unsupportedFlags["config-sync-period"])
	note(c.ClientConnection.ContentType != "" || c.ClientConnection.AcceptContentTypes != "", "clientConnection.contentType", unsupportedFlags["kube-api-content-type"])
	note(c.Logging.Format != "" && c.Logging.Format != "text", "logging.format", "svcnet logs text")
	ipvs := c.IPVS
	note(string(c.Mode) != modeIPVS && (ipvs.Scheduler != "" || len(ipvs.ExcludeCIDRs) > 0 || ipvs.StrictARP || ipvs.TCPTimeout.Duration != 0 ||
		ipvs.TCPFinTimeout.Duration != 0 || ipvs.UDPTimeout.Duration != 0 || ipvs.MinSyncPeriod.Duration != 0), "ipvs", "svcnet has no ipvs mode")
	note(c.Winkernel != (v1alpha1.KubeProxyWinkernelConfiguration{}) || c.WindowsRunAsService, "winkernel", "svcnet runs on Linux")
	note(c.BindAddressHardFail, "bindAddressHardFail", unsupportedFlags["bind-address-hard-fail"])
	note(c.PortRange != "", "portRange", "kube-proxy ignores it too")
	note(c.DetectLocal != (v1alpha1.DetectLocalConfiguration{}) && string(c.DetectLocalMode) != LocalModeBridgeInterface &&
		string(c.DetectLocalMode) != LocalModeInterfaceNamePrefix, "detectLocal", "only read by the detectLocalMode values svcnet refuses")
	return out
}

// kubeProxyConfiguration is the KubeProxyConfiguration in effect, as
// kube-proxy's /configz serves it: the settings the agent acts on as
// Complete checked them (mode and detectLocalMode defaulted), kube-proxy's
// defaults for the rest, and, as kube-proxy's conversion writes it, the
// sync periods and masqueradeAll only under the mode in use.
func (o *Options) kubeProxyConfiguration(mode, localMode string) *v1alpha1.KubeProxyConfiguration {
	c := &v1alpha1.KubeProxyConfiguration{BindAddress: o.BindAddress}
	c.SetGroupVersionKind(v1alpha1.SchemeGroupVersion.WithKind("KubeProxyConfiguration"))
	c.ClientConnection.Kubeconfig = o.Kubeconfig
	c.ClientConnection.QPS, c.ClientConnection.Burst = o.KubeAPIQPS, o.KubeAPIBurst
	setKubeProxyDefaults(c)
	c.HostnameOverride = strings.ToLower(strings.TrimSpace(o.NodeName))
	c.HealthzBindAddress, c.MetricsBindAddress = o.HealthzBindAddress, o.MetricsBindAddress
	c.BindAddressHardFail = o.BindAddressHardFail
	c.Mode = v1alpha1.ProxyMode(mode)
	c.DetectLocalMode = v1alpha1.LocalMode(localMode)
	c.ClusterCIDR = strings.Join(o.ClusterCIDRs, ",")
	c.NodePortAddresses = o.NodePortAddresses
	if len(c.NodePortAddresses) == 0 && mode == ModeNFTables {
		c.NodePortAddresses = []string{"primary"}
	}
	c.OOMScoreAdj = ptr.To(o.OOMScoreAdj)
	period, minPeriod := metav1.Duration{Duration: o.SyncPeriod}, metav1.Duration{Duration: o.MinSyncPeriod}
	c.IPTables.SyncPeriod, c.IPTables.MinSyncPeriod = metav1.Duration{}, metav1.Duration{}
	c.NFTables.SyncPeriod, c.NFTables.MinSyncPeriod = metav1.Duration{}, metav1.Duration{}
	c.IPVS.SyncPeriod = metav1.Duration{}
	if mode == ModeNFTables {
		c.NFTables.SyncPeriod, c.NFTables.MinSyncPeriod, c.NFTables.MasqueradeAll = period, minPeriod, o.MasqueradeAll
	} else {
		c.IPTables.SyncPeriod, c.IPTables.MinSyncPeriod, c.IPTables.MasqueradeAll = period, minPeriod, o.MasqueradeAll
	}
	c.IPTables.MasqueradeBit, c.NFTables.MasqueradeBit = ptr.To(o.MasqueradeBit), ptr.To(o.MasqueradeBit)
	c.IPTables.LocalhostNodePorts = ptr.To(o.LocalhostNodePorts)
	cc := o.Conntrack
	c.Conntrack = v1alpha1.KubeProxyConntrackConfiguration{
		MaxPerCore:            ptr.To(cc.MaxPerCore),
		Min:                   ptr.To(cc.Min),
		TCPEstablishedTimeout: &metav1.Duration{Duration: cc.TCPEstablishedTimeout},
		TCPCloseWaitTimeout:   &metav1.Duration{Duration: cc.TCPCloseWaitTimeout},
		TCPBeLiberal:          cc.TCPBeLiberal,
		UDPTimeout:            metav1.Duration{Duration: cc.UDPTimeout},
		UDPStreamTimeout:      metav1.Duration{Duration: cc.UDPStreamTimeout},
	}
	if v := o.unsupported.logVerbosity; v != nil {
		c.Logging.Verbosity = logsapi.VerbosityLevel(*v)
	}
	return c
}
