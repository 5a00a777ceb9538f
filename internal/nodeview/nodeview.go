// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package nodeview is what a node's agent says it has programmed for one
// Service, read-only: the wire form of the agent's API (`svcnet agent
// --api-bind-address`) and a client for it. The agent authenticates and
// authorizes its callers as the kubelet does (internal/platform/nodeauth):
// reading it needs get on nodes/proxy of that node.
package nodeview

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
)

// DefaultPort is the agent API's port.
const DefaultPort = 10266

// ServicePath is the path of one Service's view.
func ServicePath(key types.NamespacedName) string {
	return "/services/" + url.PathEscape(key.Namespace) + "/" + url.PathEscape(key.Name)
}

// Service is one node's rules for a Service, as its agent holds them.
type Service struct {
	Node    string `json:"node"`
	Mode    string `json:"mode"`
	Service string `json:"service"`
	// Exists: the agent's cache holds the Service.
	Exists bool `json:"exists"`
	// Rendered: the agent has rendered rules for the Service.
	Rendered bool `json:"rendered"`
	// UpToDate: they were rendered from the objects the agent's cache
	// holds now (RenderedFrom equals CacheHolds); otherwise a change waits
	// for the next sync.
	UpToDate     bool   `json:"upToDate"`
	RenderedFrom string `json:"renderedFrom,omitempty"`
	CacheHolds   string `json:"cacheHolds,omitempty"`
	// Standby: the node is labelled for kube-proxy; the agent writes no
	// rules on it.
	Standby bool `json:"standby,omitempty"`
	// Ports are the rules' service ports, one per port and IP family, as
	// the agent renders them from what its cache holds.
	Ports []Port `json:"ports,omitempty"`
	Sync  Sync   `json:"sync"`
}

// Port is one service port of one IP family on the node.
type Port struct {
	Family              string     `json:"family"`
	Name                string     `json:"name"`
	Protocol            string     `json:"protocol"`
	ClusterIP           string     `json:"clusterIP,omitempty"`
	Port                int32      `json:"port"`
	NodePort            int32      `json:"nodePort,omitempty"`
	ExternalIPs         []string   `json:"externalIPs,omitempty"`
	LoadBalancerIPs     []string   `json:"loadBalancerIPs,omitempty"`
	SourceRanges        []string   `json:"sourceRanges,omitempty"`
	AffinitySeconds     int32      `json:"affinitySeconds,omitempty"`
	InternalPolicyLocal bool       `json:"internalPolicyLocal,omitempty"`
	ExternalPolicyLocal bool       `json:"externalPolicyLocal,omitempty"`
	HealthCheckNodePort int32      `json:"healthCheckNodePort,omitempty"`
	Internal            []Endpoint `json:"internal"`
	External            []Endpoint `json:"external,omitempty"`
	// HasEndpoints: some node has a usable endpoint; without one, the
	// node rejects connections, with some elsewhere but none usable here
	// under a Local policy it drops them.
	HasEndpoints bool `json:"hasEndpoints"`
}

// Endpoint is one endpoint a port's traffic is sent to.
type Endpoint struct {
	Address string `json:"address"` // ip:port
	Local   bool   `json:"local,omitempty"`
	// Ready false: a terminating endpoint, used only because no ready
	// one exists.
	Ready bool `json:"ready"`
}

// Sync is the state of the node's rules as a whole.
type Sync struct {
	// Healthy is false once a change has waited longer than the health
	// timeout: the node's rules are stale.
	Healthy    bool      `json:"healthy"`
	LastSynced time.Time `json:"lastSynced"`
	// OldestQueuedChange is when the oldest change still waiting for a
	// sync was queued.
	OldestQueuedChange *time.Time `json:"oldestQueuedChange,omitempty"`
	// Error is why the last sync failed, while none has succeeded since.
	Error string    `json:"error,omitempty"`
	Now   time.Time `json:"now"`
}

// StatusError is an agent's answer other than 200: 401 and 403 for a
// caller it does not admit, 503 when its sync loop does not answer.
type StatusError struct {
	Code    int
	Status  string
	Message string
}

func (e *StatusError) Error() string { return e.Status + ": " + e.Message }

// Client reads agents' views with a user's credentials.
type Client struct {
	http *http.Client
	port int
}

// NewClient reads views with cfg's credentials, at port (DefaultPort
// when 0). The agent's serving certificate is verified against cfg's CA
// bundle unless insecure: the agent's own, self-signed certificate is
// then accepted, as kube-apiserver accepts kubelets' by default.
func NewClient(cfg *rest.Config, port int, insecure bool) (*Client, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.ServerName = "" // the node's address, not the API server's name
	if insecure {
		cfg.Insecure, cfg.CAFile, cfg.CAData = true, "", nil
	}
	tr, err := rest.TransportFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("agent API client: %w", err)
	}
	if port == 0 {
		port = DefaultPort
	}
	return &Client{http: &http.Client{Transport: tr, Timeout: 10 * time.Second}, port: port}, nil
}

// Address is where the agent of the node at host serves its API.
func (c *Client) Address(host string) string {
	return net.JoinHostPort(host, strconv.Itoa(c.port))
}

// Service reads the view of key from the agent at host.
func (c *Client) Service(ctx context.Context, host string, key types.NamespacedName) (*Service, error) {
	u := "https://" + c.Address(host) + ServicePath(key)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, &StatusError{Code: resp.StatusCode, Status: resp.Status, Message: strings.TrimSpace(string(body))}
	}
	var v Service
	if err := json.Unmarshal(body, &v); err != nil {
		return nil, fmt.Errorf("reading the agent's answer: %w", err)
	}
	return &v, nil
}
