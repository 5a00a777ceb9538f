// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package scheme registers every type svcnet reads or writes. It depends on
// no controller, so that a controller's own tests can use it too.
package scheme

import (
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
)

// AddToScheme registers every type svcnet reads or writes.
func AddToScheme(s *runtime.Scheme) error {
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return err
	}
	return svcnetv1alpha1.AddToScheme(s)
}

// New returns a scheme with every type svcnet uses.
func New() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := AddToScheme(s); err != nil {
		panic(err) // static registrations only
	}
	return s
}
