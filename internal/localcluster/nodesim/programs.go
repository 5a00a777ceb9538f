package nodesim

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Program is an image the simulator can run for real: a binary on this
// machine standing for the image's entrypoint. A container of a Pod whose
// image is Image runs Binary, inside the Pod's network namespace and a
// root of its own (see container_linux.go), with the container's command,
// args, env and volume mounts.
type Program struct {
	// Image is the image's repository, without tag or digest, e.g.
	// registry.k8s.io/coredns/coredns. It also matches the same path on
	// another registry (docker.io/coredns/coredns, coredns/coredns).
	Image string
	// Binary is the program's file on this machine.
	Binary string
	// Entrypoint is the image's ENTRYPOINT; Binary is placed at its first
	// word inside the container's root. Cmd is the image's CMD.
	Entrypoint []string
	Cmd        []string
	// ImageDirs are folders of this machine that stand for the rest of the
	// image's filesystem, bound read-only at the same paths: an image
	// that runs other programs (iptables, nft) ships them with their
	// libraries. Empty: the image holds its entrypoint alone.
	ImageDirs []string
}

// CoreDNSImage is the repository of the CoreDNS image that cluster
// installers deploy, whose entrypoint is /coredns.
const CoreDNSImage = "registry.k8s.io/coredns/coredns"

// CoreDNS is the CoreDNS program built into binary (make k8s-bins).
func CoreDNS(binary string) Program {
	return Program{Image: CoreDNSImage, Binary: binary, Entrypoint: []string{"/coredns"}}
}

// repository is image without its tag or digest.
func repository(image string) string {
	if i := strings.Index(image, "@"); i >= 0 {
		image = image[:i]
	}
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		image = image[:i]
	}
	return image
}

// imagePath is a repository without its registry host: the first part
// names a registry when it has a dot or a port, or is localhost.
func imagePath(repo string) string {
	first, rest, ok := strings.Cut(repo, "/")
	if ok && (strings.ContainsAny(first, ".:") || first == "localhost") {
		return rest
	}
	return repo
}

// programFor finds the Program that runs image, if any.
func programFor(programs []Program, image string) (Program, bool) {
	repo := repository(image)
	for _, p := range programs {
		if p.Image == repo || imagePath(p.Image) == imagePath(repo) {
			return p, true
		}
	}
	return Program{}, false
}

// runsPrograms tells whether any of pod's containers is a Program.
func runsPrograms(programs []Program, pod *corev1.Pod) bool {
	return slices.ContainsFunc(pod.Spec.Containers, func(c corev1.Container) bool {
		_, ok := programFor(programs, c.Image)
		return ok
	})
}

// argv is what the container runs: command replaces the image's
// entrypoint and args its cmd, with $(VAR) references expanded from the
// container's environment, as the kubelet does.
func argv(p Program, c corev1.Container, env map[string]string) []string {
	cmd, args := p.Entrypoint, p.Cmd
	if len(c.Command) > 0 {
		cmd, args = c.Command, nil
	}
	if len(c.Args) > 0 {
		args = c.Args
	}
	var out []string
	for _, a := range append(slices.Clone(cmd), args...) {
		out = append(out, expand(a, env))
	}
	return out
}

// expand replaces $(NAME) with env's value when NAME is defined, and $$
// with $; anything else stays as written.
func expand(s string, env map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
			continue
		case '(':
			if end := strings.IndexByte(s[i+2:], ')'); end >= 0 {
				name := s[i+2 : i+2+end]
				if v, ok := env[name]; ok {
					b.WriteString(v)
					i += 2 + end
					continue
				}
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// containerEnv is the container's environment as the kubelet builds it:
// the Service links of the Pod's namespace (and the kubernetes Service's
// always), then the container's own env, whose values may refer to
// earlier ones.
func containerEnv(ctx context.Context, c client.Reader, pod *corev1.Pod, ctr corev1.Container) (map[string]string, []string, error) {
	env := map[string]string{}
	var order []string
	set := func(k, v string) {
		if _, ok := env[k]; !ok {
			order = append(order, k)
		}
		env[k] = v
	}
	links, err := serviceLinks(ctx, c, pod)
	if err != nil {
		return nil, nil, err
	}
	for _, k := range slices.Sorted(maps.Keys(links)) {
		set(k, links[k])
	}
	set("HOSTNAME", pod.Name)
	set("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	for _, e := range ctr.Env {
		v, ok := expand(e.Value, env), true
		if e.ValueFrom != nil {
			if v, ok, err = envFrom(ctx, c, pod, e.ValueFrom); err != nil {
				return nil, nil, fmt.Errorf("env %s: %w", e.Name, err)
			}
		}
		if ok {
			set(e.Name, v)
		}
	}
	return env, order, nil
}

// envFrom is a variable's value from its source; ok is false when an
// optional ConfigMap or Secret key is missing, which leaves the variable
// unset, as the kubelet does.
func envFrom(ctx context.Context, c client.Reader, pod *corev1.Pod, src *corev1.EnvVarSource) (value string, ok bool, err error) {
	switch {
	case src.FieldRef != nil:
		v, err := fieldValue(pod, src.FieldRef.FieldPath)
		return v, err == nil, err
	case src.ConfigMapKeyRef != nil:
		ref := src.ConfigMapKeyRef
		var cm corev1.ConfigMap
		if err := c.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: ref.Name}, &cm); err != nil {
			return optionalKey(ref.Optional, err, "ConfigMap "+ref.Name)
		}
		if v, found := cm.Data[ref.Key]; found {
			return v, true, nil
		}
		return optionalKey(ref.Optional, nil, fmt.Sprintf("ConfigMap %s has no key %s", ref.Name, ref.Key))
	case src.SecretKeyRef != nil:
		ref := src.SecretKeyRef
		var s corev1.Secret
		if err := c.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: ref.Name}, &s); err != nil {
			return optionalKey(ref.Optional, err, "Secret "+ref.Name)
		}
		if v, found := s.Data[ref.Key]; found {
			return string(v), true, nil
		}
		return optionalKey(ref.Optional, nil, fmt.Sprintf("Secret %s has no key %s", ref.Name, ref.Key))
	}
	return "", true, nil // resourceFieldRef: the simulator sets no limits
}

// optionalKey is envFrom's answer for a missing object (err) or key (err
// nil): no variable when the reference is optional, else an error.
func optionalKey(optional *bool, err error, what string) (string, bool, error) {
	if err != nil && !apierrors.IsNotFound(err) {
		return "", false, err
	}
	if optional != nil && *optional {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	return "", false, errors.New(what)
}

// serviceLinks are the Docker-link style variables of the Services a
// container sees: those of its namespace (unless enableServiceLinks is
// false) and the kubernetes Service of the default namespace, which is how
// a program finds the API server (KUBERNETES_SERVICE_HOST/PORT).
func serviceLinks(ctx context.Context, c client.Reader, pod *corev1.Pod) (map[string]string, error) {
	var svcs []corev1.Service
	if pod.Spec.EnableServiceLinks == nil || *pod.Spec.EnableServiceLinks {
		var list corev1.ServiceList
		if err := c.List(ctx, &list, client.InNamespace(pod.Namespace)); err != nil {
			return nil, err
		}
		svcs = list.Items
	}
	var k8s corev1.Service
	if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "kubernetes"}, &k8s); err != nil {
		return nil, fmt.Errorf("the kubernetes Service: %w", err)
	}
	if pod.Namespace != "default" || !slices.ContainsFunc(svcs, func(s corev1.Service) bool { return s.Name == "kubernetes" }) {
		svcs = append(svcs, k8s)
	}
	env := map[string]string{}
	for _, s := range svcs {
		ip := s.Spec.ClusterIP
		if ip == "" || ip == corev1.ClusterIPNone || len(s.Spec.Ports) == 0 {
			continue
		}
		prefix := strings.ToUpper(strings.ReplaceAll(s.Name, "-", "_"))
		first := s.Spec.Ports[0]
		env[prefix+"_SERVICE_HOST"] = ip
		env[prefix+"_SERVICE_PORT"] = strconv.Itoa(int(first.Port))
		env[prefix+"_PORT"] = fmt.Sprintf("%s://%s:%d", strings.ToLower(string(protocol(first.Protocol))), ip, first.Port)
		for _, p := range s.Spec.Ports {
			if p.Name != "" {
				env[prefix+"_SERVICE_PORT_"+strings.ToUpper(strings.ReplaceAll(p.Name, "-", "_"))] = strconv.Itoa(int(p.Port))
			}
			proto := protocol(p.Protocol)
			base := fmt.Sprintf("%s_PORT_%d_%s", prefix, p.Port, proto)
			env[base] = fmt.Sprintf("%s://%s:%d", strings.ToLower(string(proto)), ip, p.Port)
			env[base+"_PROTO"] = strings.ToLower(string(proto))
			env[base+"_PORT"] = strconv.Itoa(int(p.Port))
			env[base+"_ADDR"] = ip
		}
	}
	return env, nil
}

func protocol(p corev1.Protocol) corev1.Protocol {
	if p == "" {
		return corev1.ProtocolTCP
	}
	return p
}
