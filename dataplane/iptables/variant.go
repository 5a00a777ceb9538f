// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package iptables

import (
	"bufio"
	"bytes"
	"context"
	"os/exec"
	"regexp"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/svcnet-io/svcnet/internal/platform/netns"
)

// Variant is the kernel interface an iptables 1.8 binary programs: the
// nf_tables one (iptables-nft) or the legacy xtables one
// (iptables-legacy). Rules written through one are invisible to the
// other, so the agent must use the one the node's other programs use.
type Variant string

// The variants, as the binaries' names spell them.
const (
	VariantNFT    Variant = "nft"
	VariantLegacy Variant = "legacy"
)

// NewExecVariant is NewExec using the binaries of one variant
// (iptables-nft-restore, ip6tables-legacy-save, ...) instead of the
// system's default iptables-restore.
func NewExecVariant(family corev1.IPFamily, ns string, v Variant) *Exec {
	return &Exec{family: family, netns: ns, variant: v}
}

// kubeletChains are the chains kubelet (1.17 and later) creates in the
// mangle table with the variant the node uses.
var kubeletChains = regexp.MustCompile(`(?m)^:(KUBE-IPTABLES-HINT|KUBE-KUBELET-CANARY)\b`)

// Detection is what DetectVariant saw, for the agent's start-up log.
type Detection struct {
	Variant Variant
	// Reason says what decided: kubelet's chains, or the rule counts.
	Reason string
	// NFTRules and LegacyRules count the rules each variant sees over
	// both families, when the counts decided.
	NFTRules, LegacyRules int
}

// DetectVariant finds the variant the node's other programs use, the way
// kube-proxy's image wrapper (iptables-wrapper) does: kubelet's mangle
// chains in iptables-nft, then in iptables-legacy, decide first; without
// them, the variant that sees more rules (over IPv4 and IPv6) wins, and
// nft on a tie (a node with no rules yet). The legacy mangle table is
// not asked for by name: that would create it. The binaries run in the
// network namespace ns (empty: the caller's); one that fails counts as
// seeing nothing.
func DetectVariant(ctx context.Context, ns string) Detection {
	save := func(v Variant, family corev1.IPFamily, args ...string) []byte {
		e := NewExecVariant(family, ns, v)
		cmd := exec.CommandContext(ctx, e.binary("tables-save"), args...)
		var out bytes.Buffer
		cmd.Stdout = &out
		_ = netns.Run(ns, cmd)
		return out.Bytes()
	}
	families := []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
	for _, f := range families {
		if kubeletChains.Match(save(VariantNFT, f, "-t", "mangle")) {
			return Detection{Variant: VariantNFT, Reason: "kubelet's chains are in iptables-nft"}
		}
	}
	var legacy [][]byte
	for _, f := range families {
		out := save(VariantLegacy, f)
		if kubeletChains.Match(out) {
			return Detection{Variant: VariantLegacy, Reason: "kubelet's chains are in iptables-legacy"}
		}
		legacy = append(legacy, out)
	}
	d := Detection{Reason: "rules each variant sees"}
	for i, f := range families {
		d.LegacyRules += countRules(legacy[i])
		d.NFTRules += countRules(save(VariantNFT, f))
	}
	d.Variant = VariantNFT
	if d.LegacyRules > d.NFTRules {
		d.Variant = VariantLegacy
	}
	return d
}

// countRules counts the rule lines of iptables-save output.
func countRules(save []byte) int {
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(save))
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "-") {
			n++
		}
	}
	return n
}
