package controllers

import (
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/svcnet-io/svcnet/admission"
	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
	"github.com/svcnet-io/svcnet/controllers/ipaddress"
	"github.com/svcnet-io/svcnet/controllers/servicecidr"
)

// Names of the controllers that allocate at admission, and of the
// ServiceCIDR and IPAddress controllers.
const (
	ClusterIPName   = "clusterip"
	ServiceCIDRName = servicecidr.ControllerName
	IPAddressName   = ipaddress.ControllerName
)

// ClusterIPOptions configures ClusterIP allocation at admission.
type ClusterIPOptions struct {
	// ReuseDelay is how long a released ClusterIP stays out of use.
	ReuseDelay time.Duration
}

// IPAddressOptions configures the ipaddress audit.
type IPAddressOptions = ipaddress.Options

// AddToScheme registers every type svcnet reads or writes.
func AddToScheme(s *runtime.Scheme) error {
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return err
	}
	return svcnetv1alpha1.AddToScheme(s)
}

// NewScheme returns a scheme with every type svcnet uses.
func NewScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := AddToScheme(s); err != nil {
		panic(err) // static registrations only
	}
	return s
}

func setupServiceCIDR(mgr ctrl.Manager, _ Options) error {
	if err := servicecidr.New(mgr.GetClient()).SetupWithManager(mgr); err != nil {
		return err
	}
	return servicecidr.NewBinding(mgr.GetClient()).SetupWithManager(mgr)
}

func setupIPAddress(mgr ctrl.Manager, opts Options) error {
	return ipaddress.New(mgr.GetClient(), mgr.GetAPIReader(), mgr.GetEventRecorder("svcnet-"+ipaddress.ControllerName), opts.IPAddress).SetupWithManager(mgr)
}

// setupAdmission runs once for the controllers that allocate at admission.
func setupAdmission(mgr ctrl.Manager, opts Options, enabled map[string]bool) error {
	return admission.Setup(mgr, admission.Options{
		ClusterIP:           enabled[ClusterIPName],
		ClusterIPReuseDelay: opts.ClusterIP.ReuseDelay,
	})
}

// NeedsWebhook reports whether the enabled controllers serve the admission
// webhook (and so need its certificates).
func NeedsWebhook(spec []string) bool {
	enabled, err := Enabled(spec)
	return err == nil && enabled[ClusterIPName]
}
