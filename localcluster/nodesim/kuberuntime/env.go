// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package kuberuntime

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

	"github.com/svcnet-io/svcnet/localcluster/nodesim/images"
)

// argv is what the container runs: command replaces the image's
// entrypoint and args its cmd, with $(VAR) references expanded from the
// container's environment, as the kubelet does.
func argv(img images.Config, c corev1.Container, env map[string]string) []string {
	cmd, args := img.Entrypoint, img.Cmd
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

// containerEnv is the container's environment as the runtime builds it
// from the image's and the kubelet's: the image's ENV, then the Service
// links of the Pod's namespace (and the kubernetes Service's always), then
// the container's own env, whose values may refer to earlier ones.
func containerEnv(ctx context.Context, c client.Reader, pod *corev1.Pod, ctr corev1.Container, imageEnv []string) (map[string]string, []string, error) {
	env := map[string]string{}
	var order []string
	set := func(k, v string) {
		if _, ok := env[k]; !ok {
			order = append(order, k)
		}
		env[k] = v
	}
	set("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	for _, kv := range imageEnv {
		if k, v, ok := strings.Cut(kv, "="); ok {
			set(k, v)
		}
	}
	set("HOSTNAME", hostname(pod))
	links, err := serviceLinks(ctx, c, pod)
	if err != nil {
		return nil, nil, err
	}
	for _, k := range slices.Sorted(maps.Keys(links)) {
		set(k, links[k])
	}
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
