// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package metallb

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
	"github.com/svcnet-io/svcnet/internal/announcementpolicy"
)

// warnBFDProfiles warns, once per BFDProfile, about the fields svcnet's
// BFD has no counterpart for.
func warnBFDProfiles(profiles []source[bfdProfileSpec], warnings *[]Warning) {
	for _, s := range profiles {
		w := func(field, reason string) {
			*warnings = append(*warnings, Warning{Object: s.ref, Field: field, Reason: reason})
		}
		spec := s.spec
		if spec.EchoMode != nil && *spec.EchoMode {
			w("spec.echoMode", "svcnet's BFD has no echo mode: its peers' sessions use control packets only")
		}
		if spec.EchoInterval != nil {
			w("spec.echoInterval", "svcnet's BFD has no echo mode: left out")
		}
		if spec.PassiveMode != nil && *spec.PassiveMode {
			w("spec.passiveMode", "svcnet's BFD is always active: the nodes send first")
		}
		if spec.MinimumTTL != nil && *spec.MinimumTTL != 254 {
			w("spec.minimumTtl", "svcnet's BFD is single-hop and accepts TTL 255 only (RFC 5881)")
		}
	}
}

// convertBFD gives a peer the BFD of the BFDProfile its bfdProfile
// names, among profiles; a missing profile, or a multihop peer, gets
// none.
func convertBFD(spec bgpPeerSpec, profiles map[string]bfdProfileSpec, out *svcnetv1alpha1.BGPPeer, w func(field, reason string)) {
	if spec.BFDProfile == "" {
		return
	}
	profile, ok := profiles[spec.BFDProfile]
	switch {
	case !ok:
		w("spec.bfdProfile", fmt.Sprintf("BFDProfile %q is not among MetalLB's objects: the peer has no BFD", spec.BFDProfile))
		return
	case out.EBGPMultiHop != 0:
		w("spec.bfdProfile", "svcnet's BFD is single-hop (RFC 5881) and this peer is multihop: the peer has no BFD, and notices a dead node after holdTime")
		return
	}
	bfd := &svcnetv1alpha1.BGPPeerBFD{}
	field := "spec.bfdProfile (BFDProfile " + spec.BFDProfile + ")"
	interval := func(name string, ms *uint32) *metav1.Duration {
		if ms == nil {
			return nil
		}
		d := time.Duration(*ms) * time.Millisecond
		if d < announcementpolicy.MinBFDInterval || d > announcementpolicy.MaxBFDInterval {
			w(field, fmt.Sprintf("%s %dms is outside svcnet's %s-%s: left out (%s)", name, *ms,
				announcementpolicy.MinBFDInterval, announcementpolicy.MaxBFDInterval, announcementpolicy.DefaultBFDInterval))
			return nil
		}
		return &metav1.Duration{Duration: d}
	}
	bfd.ReceiveInterval = interval("receiveInterval", profile.ReceiveInterval)
	bfd.TransmitInterval = interval("transmitInterval", profile.TransmitInterval)
	if m := profile.DetectMultiplier; m != nil {
		if *m < 2 || *m > 255 {
			w(field, fmt.Sprintf("detectMultiplier %d is outside 2-255: left out (%d)", *m, announcementpolicy.DefaultBFDDetectMultiplier))
		} else {
			bfd.DetectMultiplier = int32(*m)
		}
	}
	out.BFD = bfd
}
