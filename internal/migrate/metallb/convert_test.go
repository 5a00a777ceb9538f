// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package metallb_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/svcnet-io/svcnet/allocator/lbipam"
	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
	"github.com/svcnet-io/svcnet/internal/announcementpolicy"
	"github.com/svcnet-io/svcnet/internal/migrate/metallb"
)

// convertCases are MetalLB configurations as MetalLB's documentation
// shows them, and the svcnet objects they become. want is YAML without
// the metallb-source annotation; warnings are "Object Field" of each.
var convertCases = map[string]struct {
	metallb  string
	want     string
	warnings []string
	// nodes are the labels of nodes on which svcnet must accept every
	// converted announcement (none: one unlabelled node).
	nodes []map[string]string
}{
	"a simple L2 pool": {
		metallb: `
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: first-pool, namespace: metallb-system}
spec:
  addresses:
  - 192.168.1.240-192.168.1.250
---
apiVersion: metallb.io/v1beta1
kind: L2Advertisement
metadata: {name: example, namespace: metallb-system}
`,
		want: `
apiVersion: networking.svcnet.io/v1alpha1
kind: LoadBalancerIPPool
metadata: {name: first-pool, labels: {migrate.svcnet.io/metallb-pool: first-pool}}
spec:
  ranges: [{start: 192.168.1.240, end: 192.168.1.250}]
---
apiVersion: networking.svcnet.io/v1alpha1
kind: LoadBalancerAnnouncement
metadata: {name: example}
spec: {mode: L2, nodeElection: MetalLB}
`,
	},
	"pools with serviceAllocation priorities and namespaces": {
		metallb: `
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: shared, namespace: metallb-system}
spec:
  addresses: [192.168.10.0/24]
---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: team-a, namespace: metallb-system}
spec:
  addresses: [192.168.20.0/24]
  serviceAllocation:
    priority: 50
    namespaces: [team-a-prod, team-a-dev]
---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: team-b, namespace: metallb-system, labels: {zone: east}}
spec:
  addresses: [192.168.30.0/24]
  serviceAllocation:
    priority: 10
    namespaceSelectors:
    - matchLabels: {team: b}
---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: web, namespace: metallb-system}
spec:
  addresses: [192.168.40.0/24]
  avoidBuggyIPs: true
  serviceAllocation:
    serviceSelectors:
    - matchExpressions: [{key: app, operator: In, values: [web]}]
---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: reserved, namespace: metallb-system}
spec:
  addresses: [192.168.50.0/24]
  autoAssign: false
`,
		// MetalLB's order for a Service of team-a-prod labelled app=web:
		// team-b is not its, then team-a (50), web (0), then shared.
		want: `
apiVersion: networking.svcnet.io/v1alpha1
kind: LoadBalancerIPPool
metadata: {name: reserved, labels: {migrate.svcnet.io/metallb-pool: reserved}}
spec:
  cidrs: [192.168.50.0/24]
  assignment: OnRequest
---
apiVersion: networking.svcnet.io/v1alpha1
kind: LoadBalancerIPPool
metadata: {name: shared, labels: {migrate.svcnet.io/metallb-pool: shared}}
spec:
  cidrs: [192.168.10.0/24]
---
apiVersion: networking.svcnet.io/v1alpha1
kind: LoadBalancerIPPool
metadata: {name: team-a, labels: {migrate.svcnet.io/metallb-pool: team-a}}
spec:
  cidrs: [192.168.20.0/24]
  priority: 2
  namespaceSelector:
    matchExpressions: [{key: kubernetes.io/metadata.name, operator: In, values: [team-a-dev, team-a-prod]}]
---
apiVersion: networking.svcnet.io/v1alpha1
kind: LoadBalancerIPPool
metadata: {name: team-b, labels: {migrate.svcnet.io/metallb-pool: team-b, zone: east}}
spec:
  cidrs: [192.168.30.0/24]
  priority: 3
  namespaceSelector: {matchLabels: {team: b}}
---
apiVersion: networking.svcnet.io/v1alpha1
kind: LoadBalancerIPPool
metadata: {name: web, labels: {migrate.svcnet.io/metallb-pool: web}}
spec:
  cidrs: [192.168.40.0/24]
  avoidBuggyIPs: true
  priority: 1
  serviceSelector:
    matchExpressions: [{key: app, operator: In, values: [web]}]
`,
	},
	"BGP with two peers and per-advertisement peers": {
		metallb: `
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {name: tor-1, namespace: metallb-system}
spec:
  myASN: 64500
  peerASN: 64501
  peerAddress: 10.0.0.1
  peerPort: 179
  holdTime: 9s
  keepaliveTime: 3s
  enableGracefulRestart: true
---
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {name: tor-2, namespace: metallb-system}
spec:
  myASN: 64500
  peerASN: 64502
  peerAddress: 10.0.0.2
  peerPort: 1179
---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: internal, namespace: metallb-system}
spec: {addresses: [172.16.0.0/24]}
---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: public, namespace: metallb-system}
spec: {addresses: [203.0.113.0/28, "2001:db8:1::/64"]}
---
apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata: {name: internal-to-tor-1, namespace: metallb-system}
spec:
  ipAddressPools: [internal]
  peers: [tor-1]
  aggregationLength: 32
---
apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata: {name: public-local, namespace: metallb-system}
spec:
  ipAddressPools: [public]
  localPref: 100
  communities: [65535:65282]
---
apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata: {name: public-summary, namespace: metallb-system}
spec:
  ipAddressPools: [public]
  aggregationLength: 24
`,
		want: `
apiVersion: networking.svcnet.io/v1alpha1
kind: LoadBalancerIPPool
metadata: {name: internal, labels: {migrate.svcnet.io/metallb-pool: internal}}
spec: {cidrs: [172.16.0.0/24]}
---
apiVersion: networking.svcnet.io/v1alpha1
kind: LoadBalancerIPPool
metadata: {name: public, labels: {migrate.svcnet.io/metallb-pool: public}}
spec: {cidrs: [203.0.113.0/28, "2001:db8:1::/64"]}
---
apiVersion: networking.svcnet.io/v1alpha1
kind: LoadBalancerAnnouncement
metadata: {name: internal-to-tor-1}
spec:
  mode: BGP
  poolSelector:
    matchExpressions: [{key: migrate.svcnet.io/metallb-pool, operator: In, values: [internal]}]
  bgp:
    localASN: 64500
    peers:
    - {address: 10.0.0.1, asn: 64501, holdTime: 9s, keepaliveTime: 3s}
---
apiVersion: networking.svcnet.io/v1alpha1
kind: LoadBalancerAnnouncement
metadata: {name: public-local}
spec:
  mode: BGP
  poolSelector:
    matchExpressions: [{key: migrate.svcnet.io/metallb-pool, operator: In, values: [public]}]
  bgp:
    localASN: 64500
    communities: ["65535:65282"]
    localPreference: 100
    peers:
    - {address: 10.0.0.1, asn: 64501, holdTime: 9s, keepaliveTime: 3s}
    - {address: 10.0.0.2, asn: 64502, port: 1179, gracefulRestartTime: 0s}
`,
		warnings: []string{
			"BGPAdvertisement metallb-system/public-summary spec.aggregationLength",
		},
	},
	"aggregated routes": {
		metallb: `
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {name: tor, namespace: metallb-system}
spec: {myASN: 64500, peerASN: 64501, peerAddress: 10.0.0.1}
---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: public, namespace: metallb-system}
spec: {addresses: [203.0.113.0/24, "2001:db8:1::/64"]}
---
apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata: {name: summary, namespace: metallb-system}
spec: {ipAddressPools: [public], aggregationLength: 24, aggregationLengthV6: 64}
`,
		want: `
apiVersion: networking.svcnet.io/v1alpha1
kind: LoadBalancerIPPool
metadata: {name: public, labels: {migrate.svcnet.io/metallb-pool: public}}
spec: {cidrs: [203.0.113.0/24, "2001:db8:1::/64"]}
---
apiVersion: networking.svcnet.io/v1alpha1
kind: LoadBalancerAnnouncement
metadata: {name: summary}
spec:
  mode: BGP
  poolSelector:
    matchExpressions: [{key: migrate.svcnet.io/metallb-pool, operator: In, values: [public]}]
  bgp:
    localASN: 64500
    aggregationLength: 24
    aggregationLengthV6: 64
    peers:
    - {address: 10.0.0.1, asn: 64501, gracefulRestartTime: 0s}
`,
	},
	"peers on different nodes and an old BGPPeer": {
		metallb: `
apiVersion: metallb.io/v1beta1
kind: BGPPeer
metadata: {name: rack-a, namespace: metallb-system}
spec:
  myASN: 64500
  peerASN: 64510
  peerAddress: 10.1.0.1
  nodeSelectors:
  - matchExpressions: [{key: rack, operator: In, values: [a]}]
---
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {name: rack-b, namespace: metallb-system}
spec:
  myASN: 64500
  peerASN: 64520
  peerAddress: 10.2.0.1
  nodeSelectors:
  - matchLabels: {rack: b}
---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: pool, namespace: metallb-system}
spec: {addresses: [198.51.100.0/24]}
---
apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata: {name: all, namespace: metallb-system}
spec:
  nodeSelectors:
  - matchLabels: {bgp: "on"}
`,
		want: `
apiVersion: networking.svcnet.io/v1alpha1
kind: LoadBalancerIPPool
metadata: {name: pool, labels: {migrate.svcnet.io/metallb-pool: pool}}
spec: {cidrs: [198.51.100.0/24]}
---
apiVersion: networking.svcnet.io/v1alpha1
kind: LoadBalancerAnnouncement
metadata: {name: all}
spec:
  mode: BGP
  nodeSelector:
    matchLabels: {bgp: "on"}
  bgp:
    localASN: 64500
    peers:
    - address: 10.1.0.1
      asn: 64510
      gracefulRestartTime: 0s
      nodeSelector:
        matchExpressions: [{key: rack, operator: In, values: [a]}]
    - address: 10.2.0.1
      asn: 64520
      gracefulRestartTime: 0s
      nodeSelector: {matchLabels: {rack: b}}
`,
		nodes: []map[string]string{{"bgp": "on", "rack": "a"}, {"bgp": "on", "rack": "b"}, {}},
	},
	"fields without counterpart": {
		metallb: `
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: either, namespace: metallb-system}
spec:
  addresses: [192.0.2.0/26, not-an-address, "2001:db8::/48"]
  serviceAllocation:
    serviceSelectors:
    - matchLabels: {app: a}
    - matchLabels: {app: b}
---
apiVersion: metallb.io/v1beta1
kind: L2Advertisement
metadata: {name: either, namespace: metallb-system}
spec:
  ipAddressPools: [either]
  interfaces: [eth1, eth0]
  nodeSelectors:
  - matchLabels: {zone: a}
  - matchLabels: {zone: b}
---
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {name: secure, namespace: metallb-system}
spec:
  myASN: 64500
  localASN: 64600
  peerASN: 64501
  peerAddress: 10.0.0.1
  routerID: 10.0.0.100
  connectTime: 5s
  bfdProfile: fast
  vrf: red
  disableMP: false
---
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {name: dynamic, namespace: metallb-system}
spec:
  myASN: 64500
  dynamicASN: external
  peerAddress: 10.0.0.2
---
apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata: {name: either, namespace: metallb-system}
spec:
  ipAddressPools: [either]
  peers: [secure, dynamic]
---
apiVersion: metallb.io/v1beta1
kind: BFDProfile
metadata: {name: fast, namespace: metallb-system}
spec: {receiveInterval: 50}
---
apiVersion: metallb.io/v1beta1
kind: Community
metadata: {name: communities, namespace: metallb-system}
spec: {communities: [{name: no-advertise, value: "65535:65282"}]}
`,
		want: `
apiVersion: networking.svcnet.io/v1alpha1
kind: LoadBalancerIPPool
metadata: {name: either, labels: {migrate.svcnet.io/metallb-pool: either}}
spec: {cidrs: [192.0.2.0/26]}
---
apiVersion: networking.svcnet.io/v1alpha1
kind: LoadBalancerAnnouncement
metadata: {name: either}
spec:
  mode: L2
  nodeElection: MetalLB
  interfaces: [eth0, eth1]
  poolSelector:
    matchExpressions: [{key: migrate.svcnet.io/metallb-pool, operator: In, values: [either]}]
---
apiVersion: networking.svcnet.io/v1alpha1
kind: LoadBalancerAnnouncement
metadata: {name: either-bgp}
spec:
  mode: BGP
  poolSelector:
    matchExpressions: [{key: migrate.svcnet.io/metallb-pool, operator: In, values: [either]}]
  bgp:
    localASN: 64600
    peers: [{address: 10.0.0.1, asn: 64501, gracefulRestartTime: 0s, bfd: {receiveInterval: 50ms}}]
`,
		warnings: []string{
			"BGPAdvertisement metallb-system/either spec.peers",
			"BGPPeer metallb-system/dynamic spec.dynamicASN",
			"BGPPeer metallb-system/secure spec.connectTime",
			"BGPPeer metallb-system/secure spec.localASN",
			"BGPPeer metallb-system/secure spec.routerID",
			"BGPPeer metallb-system/secure spec.vrf",
			"IPAddressPool metallb-system/either spec.addresses[1]",
			"IPAddressPool metallb-system/either spec.addresses[2]",
			"IPAddressPool metallb-system/either spec.serviceAllocation.serviceSelectors",
			"L2Advertisement metallb-system/either spec.nodeSelectors",
		},
	},
	"BGP peers' BFD profiles": {
		metallb: `
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: pool, namespace: metallb-system}
spec: {addresses: [192.0.2.0/28]}
---
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {name: a-full, namespace: metallb-system}
spec: {myASN: 64500, peerASN: 64501, peerAddress: 10.0.0.1, enableGracefulRestart: true, bfdProfile: full}
---
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {name: b-defaults, namespace: metallb-system}
spec: {myASN: 64500, peerASN: 64501, peerAddress: 10.0.0.2, enableGracefulRestart: true, bfdProfile: defaults}
---
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {name: c-missing, namespace: metallb-system}
spec: {myASN: 64500, peerASN: 64501, peerAddress: 10.0.0.3, enableGracefulRestart: true, bfdProfile: no-such}
---
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {name: d-multihop, namespace: metallb-system}
spec: {myASN: 64500, peerASN: 64501, peerAddress: 10.0.0.4, enableGracefulRestart: true, ebgpMultiHop: true, bfdProfile: full}
---
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {name: e-out-of-range, namespace: metallb-system}
spec: {myASN: 64500, peerASN: 64501, peerAddress: 10.0.0.5, enableGracefulRestart: true, bfdProfile: odd}
---
apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata: {name: bgp, namespace: metallb-system}
spec: {ipAddressPools: [pool]}
---
apiVersion: metallb.io/v1beta1
kind: BFDProfile
metadata: {name: full, namespace: metallb-system}
spec: {receiveInterval: 100, transmitInterval: 150, detectMultiplier: 4, echoMode: true, echoInterval: 50, passiveMode: true, minimumTtl: 250}
---
apiVersion: metallb.io/v1beta1
kind: BFDProfile
metadata: {name: defaults, namespace: metallb-system}
spec: {minimumTtl: 254, echoMode: false, passiveMode: false}
---
apiVersion: metallb.io/v1beta1
kind: BFDProfile
metadata: {name: odd, namespace: metallb-system}
spec: {receiveInterval: 5, transmitInterval: 70000, detectMultiplier: 1}
`,
		want: `
apiVersion: networking.svcnet.io/v1alpha1
kind: LoadBalancerIPPool
metadata: {name: pool, labels: {migrate.svcnet.io/metallb-pool: pool}}
spec: {cidrs: [192.0.2.0/28]}
---
apiVersion: networking.svcnet.io/v1alpha1
kind: LoadBalancerAnnouncement
metadata: {name: bgp}
spec:
  mode: BGP
  poolSelector:
    matchExpressions: [{key: migrate.svcnet.io/metallb-pool, operator: In, values: [pool]}]
  bgp:
    localASN: 64500
    peers:
    - {address: 10.0.0.1, asn: 64501, bfd: {receiveInterval: 100ms, transmitInterval: 150ms, detectMultiplier: 4}}
    - {address: 10.0.0.2, asn: 64501, bfd: {}}
    - {address: 10.0.0.3, asn: 64501}
    - {address: 10.0.0.4, asn: 64501, ebgpMultiHop: 255}
    - {address: 10.0.0.5, asn: 64501, bfd: {}}
`,
		warnings: []string{
			"BFDProfile metallb-system/full spec.echoInterval",
			"BFDProfile metallb-system/full spec.echoMode",
			"BFDProfile metallb-system/full spec.minimumTtl",
			"BFDProfile metallb-system/full spec.passiveMode",
			"BGPPeer metallb-system/c-missing spec.bfdProfile",
			"BGPPeer metallb-system/d-multihop spec.bfdProfile",
			"BGPPeer metallb-system/e-out-of-range spec.bfdProfile (BFDProfile odd)",
			"BGPPeer metallb-system/e-out-of-range spec.bfdProfile (BFDProfile odd)",
			"BGPPeer metallb-system/e-out-of-range spec.bfdProfile (BFDProfile odd)",
		},
	},
	"BGP peers' passwords, multihop, source addresses and nodes": {
		metallb: `
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {name: plain-password, namespace: metallb-system}
spec:
  myASN: 64500
  peerASN: 64501
  peerAddress: 10.0.0.1
  password: s3cr3t-do-not-print
  ebgpMultiHop: true
  sourceAddress: 10.99.0.1
---
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {name: metallb-secret, namespace: metallb-system}
spec:
  myASN: 64500
  peerASN: 64502
  peerAddress: "2001:db8::2"
  passwordSecret: {name: tor-md5}
  sourceAddress: 10.99.0.1
  nodeSelectors:
  - matchLabels: {rack: a}
  - matchLabels: {rack: b}
---
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {name: svcnet-secret, namespace: metallb-system}
spec:
  myASN: 64500
  peerASN: 64500
  peerAddress: 10.0.0.3
  passwordSecret: {name: rr-md5, namespace: svcnet-system}
  ebgpMultiHop: true
  nodeSelectors:
  - matchLabels: {rack: a}
---
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {name: gateway-a, namespace: metallb-system}
spec:
  myASN: 64500
  peerASN: 64510
  peerAddress: 10.255.0.1
  nodeSelectors:
  - matchLabels: {rack: a}
---
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {name: gateway-b, namespace: metallb-system}
spec:
  myASN: 64500
  peerASN: 64510
  peerAddress: 10.255.0.1
  nodeSelectors:
  - matchLabels: {rack: b}
---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: pool, namespace: metallb-system}
spec: {addresses: [198.51.100.0/24]}
---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: routed, namespace: metallb-system}
spec: {addresses: [203.0.113.0/24]}
---
apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata: {name: routers, namespace: metallb-system}
spec:
  ipAddressPools: [routed]
  peers: [plain-password, metallb-secret, svcnet-secret]
---
apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata: {name: gateways, namespace: metallb-system}
spec:
  ipAddressPools: [pool]
  peers: [gateway-a, gateway-b]
`,
		// The gateways share an address, so each rack's gets an
		// announcement of its own, whose nodes do not overlap.
		want: `
apiVersion: networking.svcnet.io/v1alpha1
kind: LoadBalancerIPPool
metadata: {name: pool, labels: {migrate.svcnet.io/metallb-pool: pool}}
spec: {cidrs: [198.51.100.0/24]}
---
apiVersion: networking.svcnet.io/v1alpha1
kind: LoadBalancerIPPool
metadata: {name: routed, labels: {migrate.svcnet.io/metallb-pool: routed}}
spec: {cidrs: [203.0.113.0/24]}
---
apiVersion: networking.svcnet.io/v1alpha1
kind: LoadBalancerAnnouncement
metadata: {name: gateways-gateway-a}
spec:
  mode: BGP
  poolSelector:
    matchExpressions: [{key: migrate.svcnet.io/metallb-pool, operator: In, values: [pool]}]
  nodeSelector: {matchLabels: {rack: a}}
  bgp:
    localASN: 64500
    peers: [{address: 10.255.0.1, asn: 64510, gracefulRestartTime: 0s}]
---
apiVersion: networking.svcnet.io/v1alpha1
kind: LoadBalancerAnnouncement
metadata: {name: gateways-gateway-b}
spec:
  mode: BGP
  poolSelector:
    matchExpressions: [{key: migrate.svcnet.io/metallb-pool, operator: In, values: [pool]}]
  nodeSelector: {matchLabels: {rack: b}}
  bgp:
    localASN: 64500
    peers: [{address: 10.255.0.1, asn: 64510, gracefulRestartTime: 0s}]
---
apiVersion: networking.svcnet.io/v1alpha1
kind: LoadBalancerAnnouncement
metadata: {name: routers}
spec:
  mode: BGP
  poolSelector:
    matchExpressions: [{key: migrate.svcnet.io/metallb-pool, operator: In, values: [routed]}]
  bgp:
    localASN: 64500
    peers:
    - address: 10.0.0.1
      asn: 64501
      gracefulRestartTime: 0s
      passwordSecretRef: {name: plain-password-bgp-password, key: password}
      ebgpMultiHop: 255
      sourceAddress: 10.99.0.1
    - address: 10.0.0.3
      asn: 64500
      gracefulRestartTime: 0s
      passwordSecretRef: {name: rr-md5, key: password}
      nodeSelector: {matchLabels: {rack: a}}
    - address: "2001:db8::2"
      asn: 64502
      gracefulRestartTime: 0s
      passwordSecretRef: {name: tor-md5, key: password}
`,
		warnings: []string{
			"BGPPeer metallb-system/metallb-secret spec.nodeSelectors",
			"BGPPeer metallb-system/metallb-secret spec.passwordSecret",
			"BGPPeer metallb-system/metallb-secret spec.sourceAddress",
			"BGPPeer metallb-system/plain-password spec.password",
			"BGPPeer metallb-system/svcnet-secret spec.ebgpMultiHop",
		},
		nodes: []map[string]string{{"rack": "a"}, {"rack": "b"}, {}},
	},
	"BGP path attributes, Community aliases and joined advertisements": {
		metallb: `
apiVersion: metallb.io/v1beta1
kind: Community
metadata: {name: communities, namespace: metallb-system}
spec:
  communities:
  - {name: no-advertise, value: "65535:65282"}
  - {name: customer, value: "large:64500:1:2"}
  - {name: broken, value: "65536:1"}
---
apiVersion: metallb.io/v1beta1
kind: Community
metadata: {name: more, namespace: metallb-system}
spec:
  communities:
  - {name: no-advertise, value: "65535:65281"}
---
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {name: tor-1, namespace: metallb-system}
spec: {myASN: 64500, peerASN: 64501, peerAddress: 10.0.0.1, enableGracefulRestart: true}
---
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {name: tor-2, namespace: metallb-system}
spec: {myASN: 64500, peerASN: 64502, peerAddress: 10.0.0.2, enableGracefulRestart: true}
---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: a, namespace: metallb-system}
spec: {addresses: [198.51.100.0/26]}
---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: b, namespace: metallb-system}
spec: {addresses: [198.51.100.64/26]}
---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: c, namespace: metallb-system}
spec: {addresses: [198.51.100.128/26]}
---
apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata: {name: a-tagged, namespace: metallb-system}
spec:
  ipAddressPools: [a]
  communities: [no-advertise, customer, "64500:7", "large:1:2:3", broken, unknown-name]
  localPref: 200
---
apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata: {name: b-first, namespace: metallb-system}
spec:
  ipAddressPools: [b]
  peers: [tor-1]
  communities: ["64500:1"]
---
apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata: {name: b-second, namespace: metallb-system}
spec:
  ipAddressPools: [b]
  peers: [tor-2]
  communities: ["64500:2"]
  localPref: 50
---
apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata: {name: c-first, namespace: metallb-system}
spec:
  ipAddressPools: [c]
  localPref: 100
---
apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata: {name: c-second, namespace: metallb-system}
spec:
  ipAddressPools: [c]
  communities: ["64500:3"]
  localPref: 300
`,
		// b-second joins b-first for other peers, c-second joins c-first
		// for the same peers with another localPref: both warned about.
		want: `
apiVersion: networking.svcnet.io/v1alpha1
kind: LoadBalancerIPPool
metadata: {name: a, labels: {migrate.svcnet.io/metallb-pool: a}}
spec: {cidrs: [198.51.100.0/26]}
---
apiVersion: networking.svcnet.io/v1alpha1
kind: LoadBalancerIPPool
metadata: {name: b, labels: {migrate.svcnet.io/metallb-pool: b}}
spec: {cidrs: [198.51.100.64/26]}
---
apiVersion: networking.svcnet.io/v1alpha1
kind: LoadBalancerIPPool
metadata: {name: c, labels: {migrate.svcnet.io/metallb-pool: c}}
spec: {cidrs: [198.51.100.128/26]}
---
apiVersion: networking.svcnet.io/v1alpha1
kind: LoadBalancerAnnouncement
metadata: {name: a-tagged}
spec:
  mode: BGP
  poolSelector:
    matchExpressions: [{key: migrate.svcnet.io/metallb-pool, operator: In, values: [a]}]
  bgp:
    localASN: 64500
    peers: [{address: 10.0.0.1, asn: 64501}, {address: 10.0.0.2, asn: 64502}]
    communities: ["64500:7", "65535:65282"]
    largeCommunities: ["1:2:3", "64500:1:2"]
    localPreference: 200
---
apiVersion: networking.svcnet.io/v1alpha1
kind: LoadBalancerAnnouncement
metadata: {name: b-first}
spec:
  mode: BGP
  poolSelector:
    matchExpressions: [{key: migrate.svcnet.io/metallb-pool, operator: In, values: [b]}]
  bgp:
    localASN: 64500
    peers: [{address: 10.0.0.1, asn: 64501}, {address: 10.0.0.2, asn: 64502}]
    communities: ["64500:1", "64500:2"]
    localPreference: 50
---
apiVersion: networking.svcnet.io/v1alpha1
kind: LoadBalancerAnnouncement
metadata: {name: c-first}
spec:
  mode: BGP
  poolSelector:
    matchExpressions: [{key: migrate.svcnet.io/metallb-pool, operator: In, values: [c]}]
  bgp:
    localASN: 64500
    peers: [{address: 10.0.0.1, asn: 64501}, {address: 10.0.0.2, asn: 64502}]
    communities: ["64500:3"]
    localPreference: 100
`,
		warnings: []string{
			"BGPAdvertisement metallb-system/a-tagged spec.communities[4]",
			"BGPAdvertisement metallb-system/a-tagged spec.communities[5]",
			"BGPAdvertisement metallb-system/b-second spec",
			"BGPAdvertisement metallb-system/c-second spec.localPref",
			"Community metallb-system/communities spec.communities[2]",
			"Community metallb-system/more spec.communities[0]",
		},
	},
	"pools by several selectors": {
		metallb: `
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: blue, namespace: metallb-system, labels: {color: blue}}
spec: {addresses: [10.10.1.0/24]}
---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: green, namespace: metallb-system, labels: {color: green}}
spec: {addresses: [10.10.2.0/24]}
---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: red, namespace: metallb-system, labels: {color: red}}
spec: {addresses: [10.10.3.0/24]}
---
apiVersion: metallb.io/v1beta1
kind: L2Advertisement
metadata: {name: one-selector, namespace: metallb-system}
spec:
  ipAddressPoolSelectors:
  - matchLabels: {color: red}
---
apiVersion: metallb.io/v1beta1
kind: L2Advertisement
metadata: {name: two-selectors, namespace: metallb-system}
spec:
  ipAddressPoolSelectors:
  - matchLabels: {color: blue}
  - matchLabels: {color: green}
`,
		want: `
apiVersion: networking.svcnet.io/v1alpha1
kind: LoadBalancerIPPool
metadata: {name: blue, labels: {migrate.svcnet.io/metallb-pool: blue, color: blue}}
spec: {cidrs: [10.10.1.0/24]}
---
apiVersion: networking.svcnet.io/v1alpha1
kind: LoadBalancerIPPool
metadata: {name: green, labels: {migrate.svcnet.io/metallb-pool: green, color: green}}
spec: {cidrs: [10.10.2.0/24]}
---
apiVersion: networking.svcnet.io/v1alpha1
kind: LoadBalancerIPPool
metadata: {name: red, labels: {migrate.svcnet.io/metallb-pool: red, color: red}}
spec: {cidrs: [10.10.3.0/24]}
---
apiVersion: networking.svcnet.io/v1alpha1
kind: LoadBalancerAnnouncement
metadata: {name: one-selector}
spec:
  mode: L2
  nodeElection: MetalLB
  poolSelector: {matchLabels: {color: red}}
---
apiVersion: networking.svcnet.io/v1alpha1
kind: LoadBalancerAnnouncement
metadata: {name: two-selectors}
spec:
  mode: L2
  nodeElection: MetalLB
  poolSelector:
    matchExpressions: [{key: migrate.svcnet.io/metallb-pool, operator: In, values: [blue, green]}]
`,
		warnings: []string{"L2Advertisement metallb-system/two-selectors spec.ipAddressPoolSelectors"},
	},
}

func TestConvert(t *testing.T) {
	for name, tc := range convertCases {
		t.Run(name, func(t *testing.T) {
			got := convert(t, tc.metallb)
			wantPools, wantAnns := svcnetObjects(t, tc.want)
			gotPools, gotAnns := withoutSource(got)
			if diff := cmp.Diff(wantPools, gotPools); diff != "" {
				t.Errorf("pools (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(wantAnns, gotAnns); diff != "" {
				t.Errorf("announcements (-want +got):\n%s", diff)
			}
			var gotWarnings []string
			for _, w := range got.Warnings {
				gotWarnings = append(gotWarnings, w.Object+" "+w.Field)
			}
			if diff := cmp.Diff(tc.warnings, gotWarnings); diff != "" {
				t.Errorf("warnings (-want +got):\n%s\nall: %q", diff, got.Warnings)
			}
			usableBySvcnet(t, got, tc.nodes)
		})
	}
}

// TestConvertOverlap: advertisements of one pool whose nodes overlap
// give two announcements svcnet cannot accept both of; the converter
// says so.
func TestConvertOverlap(t *testing.T) {
	got := convert(t, `
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {name: tor, namespace: metallb-system}
spec: {myASN: 64500, peerASN: 64501, peerAddress: 10.0.0.1}
---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: pool, namespace: metallb-system}
spec: {addresses: [198.51.100.0/24]}
---
apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata: {name: everywhere, namespace: metallb-system}
---
apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata: {name: rack-a, namespace: metallb-system}
spec: {nodeSelectors: [{matchLabels: {rack: a}}]}
`)
	if len(got.Announcements) != 2 || len(got.Warnings) != 1 || !strings.Contains(got.Warnings[0].Reason, "Overlap") {
		t.Fatalf("want 2 announcements and an Overlap warning, got %d and %q", len(got.Announcements), got.Warnings)
	}
	verdicts := judge(got, []map[string]string{{"rack": "a"}})
	if v := verdicts[got.Announcements[1].Name]; v.Accepted || v.Reason != svcnetv1alpha1.ReasonAnnouncementOverlap {
		t.Errorf("svcnet's verdict on %s: %+v, want Overlap as the warning says", got.Announcements[1].Name, v)
	}
}

// TestConvertKeepsAdvertisementPeers: an advertisement's peers become
// its announcement's, and svcnet's agents send each address only to the
// peers of its announcement, as MetalLB's peers filter does: no warning,
// whichever nodes the announcements share.
func TestConvertKeepsAdvertisementPeers(t *testing.T) {
	const peers = `
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {name: inside, namespace: metallb-system}
spec: {myASN: 64500, peerASN: 64501, peerAddress: 10.0.0.1}
---
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {name: outside, namespace: metallb-system}
spec: {myASN: 64500, peerASN: 64502, peerAddress: %s}
---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: private, namespace: metallb-system}
spec: {addresses: [10.10.0.0/24]}
---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: public, namespace: metallb-system}
spec: {addresses: [198.51.100.0/24, "2001:db8:1::/64"]}
---
apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata: {name: private, namespace: metallb-system}
spec: {ipAddressPools: [private], peers: [inside], nodeSelectors: [{matchLabels: {zone: %s}}]}
---
apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata: {name: public, namespace: metallb-system}
spec: {ipAddressPools: [public], peers: [outside], nodeSelectors: [{matchLabels: {zone: edge}}]}
`
	for name, tc := range map[string]struct {
		outside, zone string
	}{
		"same nodes":     {outside: "192.0.2.1", zone: "edge"},
		"disjoint nodes": {outside: "192.0.2.1", zone: "core"},
		"an IPv6 outside peer, private IPv4 only": {outside: "2001:db8::1", zone: "edge"},
	} {
		t.Run(name, func(t *testing.T) {
			got := convert(t, fmt.Sprintf(peers, tc.outside, tc.zone))
			var warnings []string
			for _, w := range got.Warnings {
				warnings = append(warnings, w.String())
			}
			if len(warnings) != 0 {
				t.Errorf("warnings: %q", warnings)
			}
			peersOf := map[string][]string{}
			for _, a := range got.Announcements {
				for _, p := range a.Spec.BGP.Peers {
					peersOf[a.Name] = append(peersOf[a.Name], p.Address)
				}
			}
			if diff := cmp.Diff(map[string][]string{"private": {"10.0.0.1"}, "public": {tc.outside}}, peersOf); diff != "" {
				t.Errorf("peers by announcement (-want +got):\n%s", diff)
			}
		})
	}
}

// TestConvertPeersOfOneAddress: an announcement lists a router once, so
// a second BGPPeer of an address on the same nodes, or one that a joined
// advertisement brings, is left out with a warning.
func TestConvertPeersOfOneAddress(t *testing.T) {
	const peers = `
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {name: gw-a, namespace: metallb-system}
spec: {myASN: 64500, peerASN: 64510, peerAddress: 10.255.0.1, nodeSelectors: [{matchLabels: {rack: a}}]}
---
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {name: gw-b, namespace: metallb-system}
spec: {myASN: 64500, peerASN: 64510, peerAddress: 10.255.0.1, nodeSelectors: [{matchLabels: {rack: %s}}]}
---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: pool, namespace: metallb-system}
spec: {addresses: [198.51.100.0/24]}
---
`
	for name, tc := range map[string]struct {
		rackB, advertisements string
		want                  []string
	}{
		"the same nodes": {rackB: "a", advertisements: `
apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata: {name: gateways, namespace: metallb-system}
`, want: []string{"BGPPeer metallb-system/gw-b: spec.peerAddress: BGPAdvertisement gateways advertises to 10.255.0.1 through another BGPPeer on the same nodes already: left out of it"}},
		"joined advertisements": {rackB: "b", advertisements: `
apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata: {name: to-a, namespace: metallb-system}
spec: {peers: [gw-a]}
---
apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata: {name: to-b, namespace: metallb-system}
spec: {peers: [gw-b]}
`, want: []string{"BGPAdvertisement metallb-system/to-b: spec.peers: joined with to-a, which advertises to 10.255.0.1 through a BGPPeer of other settings or nodes; svcnet lists a router once per announcement, so this one's is left out"}},
	} {
		t.Run(name, func(t *testing.T) {
			got := convert(t, fmt.Sprintf(peers, tc.rackB)+tc.advertisements)
			var warnings []string
			for _, w := range got.Warnings {
				warnings = append(warnings, w.String())
			}
			if diff := cmp.Diff(tc.want, warnings); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
			if len(got.Announcements) != 1 || len(got.Announcements[0].Spec.BGP.Peers) != 1 {
				t.Fatalf("want one announcement with one peer, got %+v", got.Announcements)
			}
			// The peer's nodes, on the peer or, where BGPPeers share the
			// address, on the announcement.
			ann := got.Announcements[0].Spec
			sel := ann.BGP.Peers[0].NodeSelector
			if sel == nil {
				sel = ann.NodeSelector
			}
			if sel == nil || sel.MatchLabels["rack"] != "a" {
				t.Errorf("the peer kept is not gw-a: nodeSelector %v", sel)
			}
			usableBySvcnet(t, got, []map[string]string{{"rack": "a"}, {"rack": "b"}})
		})
	}
}

// TestConvertPasswordWarnings: the warnings about passwords give the
// commands that create the Secrets svcnet reads, and never a password.
func TestConvertPasswordWarnings(t *testing.T) {
	got := convert(t, `
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {name: plain, namespace: metallb-system}
spec: {myASN: 64500, peerASN: 64501, peerAddress: 10.0.0.1, password: s3cr3t-do-not-print}
---
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {name: elsewhere, namespace: metallb-system}
spec: {myASN: 64500, peerASN: 64502, peerAddress: 10.0.0.2, passwordSecret: {name: tor-md5, namespace: metallb-system}}
---
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {name: from-a-file}
spec: {myASN: 64500, peerASN: 64503, peerAddress: 10.0.0.3, passwordSecret: {name: rr-md5}}
---
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {name: ready, namespace: metallb-system}
spec: {myASN: 64500, peerASN: 64504, peerAddress: 10.0.0.4, passwordSecret: {name: ready-md5, namespace: svcnet-system}, password: s3cr3t-do-not-print}
`)
	want := []string{
		"BGPPeer from-a-file: spec.passwordSecret: svcnet reads Secrets from the agents' namespace (svcnet-system by default) only, and Secret metallb-system/rr-md5 is in metallb-system: passwordSecretRef names rr-md5; copy it before applying, with " +
			"`kubectl -n metallb-system get secret rr-md5 -o jsonpath='{.data.password}' | base64 -d | kubectl -n svcnet-system create secret generic rr-md5 --from-file=password=/dev/stdin`, or the nodes leave this peer out",
		"BGPPeer metallb-system/elsewhere: spec.passwordSecret: svcnet reads Secrets from the agents' namespace (svcnet-system by default) only, and Secret metallb-system/tor-md5 is in metallb-system: passwordSecretRef names tor-md5; copy it before applying, with " +
			"`kubectl -n metallb-system get secret tor-md5 -o jsonpath='{.data.password}' | base64 -d | kubectl -n svcnet-system create secret generic tor-md5 --from-file=password=/dev/stdin`, or the nodes leave this peer out",
		"BGPPeer metallb-system/plain: spec.password: svcnet takes passwords from Secrets only: passwordSecretRef names Secret svcnet-system/plain-bgp-password, which you create before applying with " +
			"`kubectl -n svcnet-system create secret generic plain-bgp-password --from-literal=password=...`, with the password of spec.password, or the nodes leave this peer out",
		"BGPPeer metallb-system/ready: spec.password: beside passwordSecret, which MetalLB refuses: left out, passwordSecret is used",
	}
	var warnings []string
	for _, w := range got.Warnings {
		warnings = append(warnings, w.String())
	}
	if diff := cmp.Diff(want, warnings); diff != "" {
		t.Errorf("warnings (-want +got):\n%s", diff)
	}
	var out strings.Builder
	if err := metallb.WriteYAML(&out, got); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "s3cr3t") {
		t.Errorf("the output holds spec.password:\n%s", out.String())
	}
}

func TestConvertSplitsIPv6(t *testing.T) {
	got := convert(t, `
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: v6, namespace: metallb-system}
spec:
  addresses: ["2001:db8::/63", "2001:db8:0:10::ff - 2001:db8:0:11::5"]
`)
	want := svcnetv1alpha1.LoadBalancerIPPoolSpec{
		CIDRs: []string{"2001:db8::/64", "2001:db8:0:1::/64"},
		Ranges: []svcnetv1alpha1.IPRange{
			{Start: "2001:db8:0:10::ff", End: "2001:db8:0:10:ffff:ffff:ffff:ffff"},
			{Start: "2001:db8:0:11::", End: "2001:db8:0:11::5"},
		},
	}
	if len(got.Pools) != 1 || len(got.Warnings) != 0 {
		t.Fatalf("got %d pools, warnings %q; want one pool and none", len(got.Pools), got.Warnings)
	}
	if diff := cmp.Diff(want, got.Pools[0].Spec); diff != "" {
		t.Errorf("spec (-want +got):\n%s", diff)
	}
	usableBySvcnet(t, got, nil)
}

func TestConvertRefusesMistypedFields(t *testing.T) {
	objs, err := metallb.Decode(strings.NewReader(`
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: bad, namespace: metallb-system}
spec: {addresses: 10.0.0.0/24}
`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := metallb.Convert(objs); err == nil || !strings.Contains(err.Error(), "IPAddressPool metallb-system/bad") {
		t.Errorf("Convert of addresses that are not a list: error %v, want one naming the pool", err)
	}
}

func convert(t *testing.T, yaml string) metallb.Result {
	t.Helper()
	objs, err := metallb.Decode(strings.NewReader(yaml))
	if err != nil {
		t.Fatal(err)
	}
	res, err := metallb.Convert(objs)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// svcnetObjects decodes the wanted objects.
func svcnetObjects(t *testing.T, yaml string) ([]svcnetv1alpha1.LoadBalancerIPPool, []svcnetv1alpha1.LoadBalancerAnnouncement) {
	t.Helper()
	objs, err := metallb.Decode(strings.NewReader(yaml))
	if err != nil {
		t.Fatal(err)
	}
	var pools []svcnetv1alpha1.LoadBalancerIPPool
	var anns []svcnetv1alpha1.LoadBalancerAnnouncement
	for _, o := range objs {
		switch o.GetKind() {
		case "LoadBalancerIPPool":
			var p svcnetv1alpha1.LoadBalancerIPPool
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &p); err != nil {
				t.Fatal(err)
			}
			pools = append(pools, p)
		case "LoadBalancerAnnouncement":
			var a svcnetv1alpha1.LoadBalancerAnnouncement
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &a); err != nil {
				t.Fatal(err)
			}
			anns = append(anns, a)
		}
	}
	return pools, anns
}

// withoutSource returns copies of the result's objects without the
// metallb-source annotation, after checking that each has it.
func withoutSource(res metallb.Result) ([]svcnetv1alpha1.LoadBalancerIPPool, []svcnetv1alpha1.LoadBalancerAnnouncement) {
	var pools []svcnetv1alpha1.LoadBalancerIPPool
	var anns []svcnetv1alpha1.LoadBalancerAnnouncement
	strip := func(m *metav1.ObjectMeta) {
		if m.Annotations[metallb.SourceAnnotation] == "" {
			return // and the diff shows the annotations left
		}
		delete(m.Annotations, metallb.SourceAnnotation)
		if len(m.Annotations) == 0 {
			m.Annotations = nil
		}
	}
	for _, p := range res.Pools {
		p = *p.DeepCopy()
		strip(&p.ObjectMeta)
		pools = append(pools, p)
	}
	for _, a := range res.Announcements {
		a = *a.DeepCopy()
		strip(&a.ObjectMeta)
		anns = append(anns, a)
	}
	return pools, anns
}

// usableBySvcnet checks the converted objects as svcnet's controllers
// will: every pool's addresses parse, and every announcement is accepted
// on the given nodes.
func usableBySvcnet(t *testing.T, res metallb.Result, nodes []map[string]string) {
	t.Helper()
	for _, p := range res.Pools {
		pairs := make([][2]string, 0, len(p.Spec.Ranges))
		for _, r := range p.Spec.Ranges {
			pairs = append(pairs, [2]string{r.Start, r.End})
		}
		if _, err := lbipam.ParseRanges(p.Spec.CIDRs, pairs); err != nil {
			t.Errorf("svcnet refuses pool %s: %v", p.Name, err)
		}
	}
	if nodes == nil {
		nodes = []map[string]string{{}}
	}
	for name, v := range judge(res, nodes) {
		if !v.Accepted {
			t.Errorf("svcnet refuses announcement %s: %s: %s", name, v.Reason, v.Message)
		}
	}
}

func judge(res metallb.Result, nodeLabels []map[string]string) map[string]announcementpolicy.Verdict {
	var anns []*svcnetv1alpha1.LoadBalancerAnnouncement
	for i := range res.Announcements {
		anns = append(anns, &res.Announcements[i])
	}
	var pools []*svcnetv1alpha1.LoadBalancerIPPool
	for i := range res.Pools {
		pools = append(pools, &res.Pools[i])
	}
	var nodes []*corev1.Node
	for _, l := range nodeLabels {
		nodes = append(nodes, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-" + strings.Repeat("x", len(nodes)), Labels: l}})
	}
	return announcementpolicy.Judge(anns, pools, nodes)
}
