package controllers

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/svcnet-io/svcnet/admission"
	"github.com/svcnet-io/svcnet/allocator/portrange"
	"github.com/svcnet-io/svcnet/controllers/ipaddress"
	"github.com/svcnet-io/svcnet/controllers/loadbalancer"
	"github.com/svcnet-io/svcnet/controllers/nodeport"
	"github.com/svcnet-io/svcnet/controllers/servicecidr"
	"github.com/svcnet-io/svcnet/internal/platform/scheme"
)

// Names of the controllers that allocate at admission, and of the
// ServiceCIDR and IPAddress controllers.
const (
	ClusterIPName   = "clusterip"
	NodePortName    = nodeport.ControllerName
	ServiceCIDRName = servicecidr.ControllerName
	IPAddressName   = ipaddress.ControllerName
	// LoadBalancerName gives LoadBalancer Services addresses from pools.
	LoadBalancerName = loadbalancer.ControllerName
)

// LoadBalancerOptions configures the loadbalancer controller; it shares
// the ipaddress audit's leak grace period and Event quiet period.
type LoadBalancerOptions struct {
	// Class is the spec.loadBalancerClass served, besides none.
	Class string
}

// ClusterIPOptions configures ClusterIP allocation at admission.
type ClusterIPOptions struct {
	// ReuseDelay is how long a released ClusterIP stays out of use.
	ReuseDelay time.Duration
}

// NodePortOptions configures nodePort allocation and its audit.
type NodePortOptions struct {
	// Range is kube-apiserver's --service-node-port-range.
	Range string
	// Exclude are sub-ranges never handed out dynamically.
	Exclude []string
	// ReuseDelay is how long a released nodePort stays out of use.
	ReuseDelay time.Duration
}

// Parse checks the options, naming the bad flag.
func (o NodePortOptions) Parse() (portrange.Options, error) {
	r, err := portrange.ParseRange(o.Range)
	if err != nil {
		return portrange.Options{}, fmt.Errorf("--service-node-port-range: %w", err)
	}
	ex, err := portrange.ParseRanges(o.Exclude)
	if err != nil {
		return portrange.Options{}, fmt.Errorf("--nodeport-exclude: %w", err)
	}
	if o.ReuseDelay < 0 {
		return portrange.Options{}, fmt.Errorf("--nodeport-reuse-delay must not be negative, got %v", o.ReuseDelay)
	}
	return portrange.Options{Range: r, Exclude: ex, ReuseDelay: o.ReuseDelay}, nil
}

// IPAddressOptions configures the ipaddress audit.
type IPAddressOptions = ipaddress.Options

// AddToScheme registers every type svcnet reads or writes.
func AddToScheme(s *runtime.Scheme) error { return scheme.AddToScheme(s) }

func setupServiceCIDR(mgr ctrl.Manager, _ Options) error {
	if err := servicecidr.New(mgr.GetClient()).SetupWithManager(mgr); err != nil {
		return err
	}
	return servicecidr.NewBinding(mgr.GetClient()).SetupWithManager(mgr)
}

func setupIPAddress(mgr ctrl.Manager, opts Options) error {
	return ipaddress.New(mgr.GetClient(), mgr.GetAPIReader(), mgr.GetEventRecorder(ipaddress.ReportingController), opts.IPAddress).SetupWithManager(mgr)
}

func setupNodePortAudit(mgr ctrl.Manager, opts Options) error {
	ports, err := opts.NodePort.Parse()
	if err != nil {
		return err
	}
	r, err := nodeport.New(mgr.GetClient(), mgr.GetAPIReader(), mgr.GetEventRecorder(nodeport.ReportingController), ports, opts.IPAddress.EventQuietPeriod)
	if err != nil {
		return err
	}
	return r.SetupWithManager(mgr)
}

func setupLoadBalancer(mgr ctrl.Manager, opts Options) error {
	lopts := loadbalancer.DefaultOptions()
	if opts.LoadBalancer.Class != "" {
		lopts.Class = opts.LoadBalancer.Class
	}
	if opts.IPAddress.LeakGracePeriod > 0 {
		lopts.LeakGracePeriod = opts.IPAddress.LeakGracePeriod
	}
	if opts.IPAddress.EventQuietPeriod > 0 {
		lopts.EventQuietPeriod = opts.IPAddress.EventQuietPeriod
	}
	return loadbalancer.New(mgr.GetClient(), mgr.GetAPIReader(), mgr.GetEventRecorder(loadbalancer.ReportingController), lopts).SetupWithManager(mgr)
}

// setupAdmission runs once for the controllers that allocate at admission.
func setupAdmission(mgr ctrl.Manager, opts Options, enabled map[string]bool) error {
	aopts := admission.Options{
		ClusterIP:           enabled[ClusterIPName],
		ClusterIPReuseDelay: opts.ClusterIP.ReuseDelay,
		NodePort:            enabled[NodePortName],
	}
	if aopts.NodePort {
		ports, err := opts.NodePort.Parse()
		if err != nil {
			return err
		}
		aopts.NodePorts = ports
	}
	return admission.Setup(mgr, aopts)
}

// NeedsWebhook reports whether the enabled controllers serve the admission
// webhook (and so need its certificates).
func NeedsWebhook(spec []string) bool {
	enabled, err := Enabled(spec)
	return err == nil && (enabled[ClusterIPName] || enabled[NodePortName])
}
