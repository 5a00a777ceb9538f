// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package kuberuntime

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The files a kubelet writes for a Pod, here under PodsDir/<uid>/: the
// volumes a container may mount, /etc/resolv.conf from the dnsPolicy and
// /etc/hosts.

// defaultTokenSeconds is a projected token's lifetime when the Pod does
// not say (the ServiceAccount admission plugin asks for 3607 s).
const defaultTokenSeconds = 3607

// podFiles writes and refreshes one Pod's files.
type podFiles struct {
	c   client.Client
	dir string
	pod *corev1.Pod
	now func() time.Time
	// tokens remember when each projected token must be renewed (80% of
	// its lifetime, as the kubelet does), by file path.
	tokens map[string]time.Time
}

func (f *podFiles) volumeDir(name string) string { return filepath.Join(f.dir, "volumes", name) }

// volumeSource is the file or folder a mount of the named volume binds:
// the folder writeVolumes wrote, or a hostPath volume's path on this
// machine.
func (f *podFiles) volumeSource(name string) (string, error) {
	for _, v := range f.pod.Spec.Volumes {
		if v.Name == name && v.HostPath != nil {
			return f.hostPath(name, v.HostPath)
		}
	}
	src := f.volumeDir(name)
	if _, err := os.Stat(src); err != nil {
		return "", errors.New("not provided by the simulator")
	}
	return src, nil
}

// hostPath checks a hostPath volume's path against its type, creating it
// for the ...OrCreate types as the kubelet does. A missing path of no
// type, which a container runtime would create as a folder on the host, is
// given an empty folder of the Pod's instead: the simulator makes nothing
// on this machine that a type does not ask for.
func (f *podFiles) hostPath(name string, hp *corev1.HostPathVolumeSource) (string, error) {
	p := filepath.Clean(hp.Path)
	fi, err := os.Stat(p)
	t := ptr.Deref(hp.Type, corev1.HostPathUnset)
	switch {
	case err == nil && (t == corev1.HostPathDirectory || t == corev1.HostPathDirectoryOrCreate) && !fi.IsDir():
		return "", fmt.Errorf("hostPath %s is not a directory", p)
	case err == nil && (t == corev1.HostPathFile || t == corev1.HostPathFileOrCreate) && !fi.Mode().IsRegular():
		return "", fmt.Errorf("hostPath %s is not a file", p)
	case err == nil:
		return p, nil
	case !errors.Is(err, os.ErrNotExist):
		return "", err
	}
	switch t {
	case corev1.HostPathDirectoryOrCreate:
		return p, mkdirAll(p)
	case corev1.HostPathFileOrCreate:
		if err := mkdirAll(filepath.Dir(p)); err != nil {
			return "", err
		}
		return p, writeFile(p, nil)
	case corev1.HostPathUnset:
		stand := filepath.Join(f.dir, "hostpaths", name)
		return stand, mkdirAll(stand)
	}
	return "", fmt.Errorf("hostPath %s (type %s) does not exist", p, t)
}

// writeVolumes writes every volume a program can read: configMap, secret,
// projected (serviceAccountToken, configMap, secret, downwardAPI),
// downwardAPI and emptyDir. Each volume is tried; the errors are joined,
// naming the volume.
func (f *podFiles) writeVolumes(ctx context.Context) error {
	var errs []error
	for _, v := range f.pod.Spec.Volumes {
		if err := f.writeVolume(ctx, v); err != nil {
			errs = append(errs, fmt.Errorf("volume %q: %w", v.Name, err))
		}
	}
	return errors.Join(errs...)
}

func (f *podFiles) writeVolume(ctx context.Context, v corev1.Volume) error {
	dir := f.volumeDir(v.Name)
	if v.ConfigMap == nil && v.Secret == nil && v.DownwardAPI == nil && v.Projected == nil && v.EmptyDir == nil {
		// A volume type the simulator does not provide gets no folder, so
		// a container mounting it fails to start and says so.
		return nil
	}
	if err := mkdirAll(dir); err != nil {
		return err
	}
	files := map[string][]byte{}
	var err error
	switch {
	case v.ConfigMap != nil:
		err = f.configMapFiles(ctx, v.ConfigMap.Name, v.ConfigMap.Items, ptr.Deref(v.ConfigMap.Optional, false), files)
	case v.Secret != nil:
		err = f.secretFiles(ctx, v.Secret.SecretName, v.Secret.Items, ptr.Deref(v.Secret.Optional, false), files)
	case v.DownwardAPI != nil:
		err = f.downwardFiles(v.DownwardAPI.Items, files)
	case v.Projected != nil:
		err = f.projectedFiles(ctx, v.Projected.Sources, dir, files)
	default: // emptyDir: an empty folder, kept across restarts of the container,
		// writable by any user the containers run as, as the kubelet makes it
		return os.Chmod(dir, 0o777)
	}
	if err != nil {
		return err
	}
	return syncDir(dir, files)
}

func (f *podFiles) configMapFiles(ctx context.Context, name string, items []corev1.KeyToPath, optional bool, out map[string][]byte) error {
	var cm corev1.ConfigMap
	if err := f.c.Get(ctx, client.ObjectKey{Namespace: f.pod.Namespace, Name: name}, &cm); err != nil {
		if optional && client.IgnoreNotFound(err) == nil {
			return nil
		}
		return fmt.Errorf("reading ConfigMap %s: %w", name, err)
	}
	data := map[string][]byte{}
	for k, v := range cm.Data {
		data[k] = []byte(v)
	}
	maps.Copy(data, cm.BinaryData)
	return project(data, items, optional, "ConfigMap "+name, out)
}

func (f *podFiles) secretFiles(ctx context.Context, name string, items []corev1.KeyToPath, optional bool, out map[string][]byte) error {
	var s corev1.Secret
	if err := f.c.Get(ctx, client.ObjectKey{Namespace: f.pod.Namespace, Name: name}, &s); err != nil {
		if optional && client.IgnoreNotFound(err) == nil {
			return nil
		}
		return fmt.Errorf("reading Secret %s: %w", name, err)
	}
	return project(s.Data, items, optional, "Secret "+name, out)
}

// project puts data's keys into out: every key under its own name, or
// only the listed items under their paths.
func project(data map[string][]byte, items []corev1.KeyToPath, optional bool, what string, out map[string][]byte) error {
	if len(items) == 0 {
		maps.Copy(out, data)
		return nil
	}
	for _, it := range items {
		v, ok := data[it.Key]
		if !ok {
			if optional {
				continue
			}
			return fmt.Errorf("%s has no key %q", what, it.Key)
		}
		out[it.Path] = v
	}
	return nil
}

func (f *podFiles) downwardFiles(items []corev1.DownwardAPIVolumeFile, out map[string][]byte) error {
	for _, it := range items {
		if it.FieldRef == nil {
			continue // resourceFieldRef: the simulator sets no limits
		}
		v, err := fieldValue(f.pod, it.FieldRef.FieldPath)
		if err != nil {
			return err
		}
		out[it.Path] = []byte(v)
	}
	return nil
}

func (f *podFiles) projectedFiles(ctx context.Context, sources []corev1.VolumeProjection, dir string, out map[string][]byte) error {
	for _, s := range sources {
		var err error
		switch {
		case s.ServiceAccountToken != nil:
			err = f.tokenFile(ctx, s.ServiceAccountToken, filepath.Join(dir, s.ServiceAccountToken.Path), out)
		case s.ConfigMap != nil:
			err = f.configMapFiles(ctx, s.ConfigMap.Name, s.ConfigMap.Items, ptr.Deref(s.ConfigMap.Optional, false), out)
		case s.Secret != nil:
			err = f.secretFiles(ctx, s.Secret.Name, s.Secret.Items, ptr.Deref(s.Secret.Optional, false), out)
		case s.DownwardAPI != nil:
			err = f.downwardFiles(s.DownwardAPI.Items, out)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// tokenFile asks the API server for a token of the Pod's ServiceAccount,
// bound to the Pod, as the kubelet does; the file keeps its token until
// 80% of its lifetime has passed.
func (f *podFiles) tokenFile(ctx context.Context, p *corev1.ServiceAccountTokenProjection, path string, out map[string][]byte) error {
	if renew, ok := f.tokens[path]; ok && f.now().Before(renew) {
		if cur, err := os.ReadFile(path); err == nil {
			out[p.Path] = cur
			return nil
		}
	}
	seconds := ptr.Deref(p.ExpirationSeconds, defaultTokenSeconds)
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: f.pod.Namespace, Name: serviceAccountName(f.pod)}}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: &seconds,
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: f.pod.Name, UID: f.pod.UID},
	}}
	if p.Audience != "" {
		tr.Spec.Audiences = []string{p.Audience}
	}
	if err := f.c.SubResource("token").Create(ctx, sa, tr); err != nil {
		return fmt.Errorf("token of ServiceAccount %s: %w", sa.Name, err)
	}
	out[p.Path] = []byte(tr.Status.Token)
	f.tokens[path] = f.now().Add(time.Duration(seconds) * time.Second * 8 / 10)
	return nil
}

func serviceAccountName(pod *corev1.Pod) string {
	if pod.Spec.ServiceAccountName != "" {
		return pod.Spec.ServiceAccountName
	}
	return "default"
}

// fieldValue is a downward API field of pod.
func fieldValue(pod *corev1.Pod, path string) (string, error) {
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.podIP":
		return pod.Status.PodIP, nil
	case "status.hostIP":
		return pod.Status.HostIP, nil
	case "status.podIPs":
		var ips []string
		for _, ip := range pod.Status.PodIPs {
			ips = append(ips, ip.IP)
		}
		return strings.Join(ips, ","), nil
	case "status.hostIPs":
		var ips []string
		for _, ip := range pod.Status.HostIPs {
			ips = append(ips, ip.IP)
		}
		return strings.Join(ips, ","), nil
	case "metadata.labels", "metadata.annotations":
		m := pod.Labels
		if path == "metadata.annotations" {
			m = pod.Annotations
		}
		var b strings.Builder
		for _, k := range slices.Sorted(maps.Keys(m)) {
			fmt.Fprintf(&b, "%s=%q\n", k, m[k])
		}
		return b.String(), nil
	}
	if k, ok := strings.CutPrefix(path, "metadata.labels['"); ok {
		return pod.Labels[strings.TrimSuffix(k, "']")], nil
	}
	if k, ok := strings.CutPrefix(path, "metadata.annotations['"); ok {
		return pod.Annotations[strings.TrimSuffix(k, "']")], nil
	}
	return "", fmt.Errorf("unsupported fieldPath %q", path)
}

// syncDir makes dir hold exactly files (paths relative to dir): changed
// files are replaced by a rename, so that a reader never sees half a file,
// and files no longer wanted go. Unchanged files are left alone, so a
// program watching them (CoreDNS's reload) sees only real changes.
func syncDir(dir string, files map[string][]byte) error {
	for rel, data := range files {
		p := filepath.Join(dir, filepath.Clean("/"+rel))
		if cur, err := os.ReadFile(p); err == nil && bytes.Equal(cur, data) {
			continue
		}
		if err := writeAtomic(p, data); err != nil {
			return err
		}
	}
	return filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if _, ok := files[rel]; !ok {
			return os.Remove(p)
		}
		return nil
	})
}

func writeAtomic(path string, data []byte) error {
	if err := mkdirAll(filepath.Dir(path)); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := writeFile(tmp, data); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// The modes of what the kubelet writes for a Pod (volumes, hostPaths it
// creates, resolv.conf and hosts): folders 0755 and files 0644, as a
// volume's defaultMode, set whatever this machine's umask is, so that a
// container's user of any uid reads them.
const (
	podDirMode  os.FileMode = 0o755
	podFileMode os.FileMode = 0o644
)

// mkdirAll makes dir and its missing parents with podDirMode.
func mkdirAll(dir string) error {
	var missing []string
	for d := dir; d != filepath.Dir(d); d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil {
			break
		}
		missing = append(missing, d)
	}
	if err := os.MkdirAll(dir, podDirMode); err != nil {
		return err
	}
	for _, d := range missing {
		if err := os.Chmod(d, podDirMode); err != nil {
			return err
		}
	}
	return nil
}

// writeFile writes data to path with podFileMode.
func writeFile(path string, data []byte) error {
	if err := os.WriteFile(path, data, podFileMode); err != nil {
		return err
	}
	return os.Chmod(path, podFileMode)
}

// DNS is what the kubelet's --cluster-dns, --cluster-domain and
// --resolv-conf say.
type DNS struct {
	// Servers are the cluster DNS addresses; empty: ClusterFirst Pods
	// resolve as Default ones, as with a kubelet without --cluster-dns.
	Servers []netip.Addr
	// Domain is the cluster domain (cluster.local when empty).
	Domain string
	// HostResolvConf is the node's resolver file, for dnsPolicy Default
	// (/etc/resolv.conf when empty).
	HostResolvConf string
}

func (d DNS) domain() string {
	if d.Domain == "" {
		return "cluster.local"
	}
	return d.Domain
}

// resolvConf is the Pod's /etc/resolv.conf, from its dnsPolicy and
// dnsConfig, as the kubelet writes it.
func (d DNS) resolvConf(pod *corev1.Pod) ([]byte, error) {
	policy := pod.Spec.DNSPolicy
	if policy == "" {
		policy = corev1.DNSClusterFirst
	}
	if policy == corev1.DNSClusterFirst && pod.Spec.HostNetwork {
		policy = corev1.DNSDefault // ClusterFirstWithHostNet asks for cluster DNS on the host network
	}
	if (policy == corev1.DNSClusterFirst || policy == corev1.DNSClusterFirstWithHostNet) && len(d.Servers) == 0 {
		policy = corev1.DNSDefault
	}
	var servers, searches, options []string
	switch policy {
	case corev1.DNSClusterFirst, corev1.DNSClusterFirstWithHostNet:
		for _, s := range d.Servers {
			servers = append(servers, s.String())
		}
		dom := d.domain()
		searches = []string{pod.Namespace + ".svc." + dom, "svc." + dom, dom}
		options = []string{"ndots:5"}
	case corev1.DNSDefault:
		path := d.HostResolvConf
		if path == "" {
			path = "/etc/resolv.conf"
		}
		host, err := os.ReadFile(path)
		if err != nil && !os.IsNotExist(err) {
			return nil, err
		}
		servers, searches, options = parseResolvConf(host)
	case corev1.DNSNone:
	default:
		return nil, fmt.Errorf("unknown dnsPolicy %q", policy)
	}
	if c := pod.Spec.DNSConfig; c != nil {
		servers = appendNew(servers, c.Nameservers...)
		searches = appendNew(searches, c.Searches...)
		for _, o := range c.Options {
			opt := o.Name
			if o.Value != nil {
				opt += ":" + *o.Value
			}
			options = slices.DeleteFunc(options, func(x string) bool { return strings.SplitN(x, ":", 2)[0] == o.Name })
			options = append(options, opt)
		}
	}
	var b bytes.Buffer
	for _, s := range servers {
		fmt.Fprintf(&b, "nameserver %s\n", s)
	}
	if len(searches) > 0 {
		fmt.Fprintf(&b, "search %s\n", strings.Join(searches, " "))
	}
	if len(options) > 0 {
		fmt.Fprintf(&b, "options %s\n", strings.Join(options, " "))
	}
	return b.Bytes(), nil
}

func appendNew(list []string, add ...string) []string {
	for _, a := range add {
		if !slices.Contains(list, a) {
			list = append(list, a)
		}
	}
	return list
}

func parseResolvConf(data []byte) (servers, searches, options []string) {
	for line := range strings.SplitSeq(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || strings.HasPrefix(f[0], "#") || strings.HasPrefix(f[0], ";") {
			continue
		}
		switch f[0] {
		case "nameserver":
			servers = append(servers, f[1])
		case "search", "domain":
			searches = f[1:]
		case "options":
			options = append(options, f[1:]...)
		}
	}
	return servers, searches, options
}

// hostsFile is the Pod's /etc/hosts, as the kubelet writes it: the
// loopback names, the Pod's own address under its hostname (and its FQDN
// under a subdomain), then its hostAliases. A Pod on the host network
// sees its node's names instead.
func hostsFile(pod *corev1.Pod, sb Sandbox, domain string) []byte {
	var b bytes.Buffer
	b.WriteString("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n" +
		"fe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n")
	switch {
	case pod.Spec.HostNetwork:
		for _, ip := range sb.NodeIPs {
			fmt.Fprintf(&b, "%s\t%s\n", ip, sb.NodeName)
		}
	case pod.Spec.Subdomain != "":
		name := hostname(pod)
		for _, ip := range sb.IPs {
			fmt.Fprintf(&b, "%s\t%s.%s.%s.svc.%s\t%s\n", ip, name, pod.Spec.Subdomain, pod.Namespace, domain, name)
		}
	default:
		for _, ip := range sb.IPs {
			fmt.Fprintf(&b, "%s\t%s\n", ip, hostname(pod))
		}
	}
	if len(pod.Spec.HostAliases) > 0 {
		b.WriteString("\n# Entries added by HostAliases.\n")
	}
	for _, h := range pod.Spec.HostAliases {
		fmt.Fprintf(&b, "%s\t%s\n", h.IP, strings.Join(h.Hostnames, "\t"))
	}
	return b.Bytes()
}
