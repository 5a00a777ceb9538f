package testenv

import (
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/config"
)

// ctrlConfigSkipNameValidation lets a suite start a manager more than once
// in one process (restart tests) despite controller-runtime's check that
// controller names are unique.
func ctrlConfigSkipNameValidation() config.Controller {
	return config.Controller{SkipNameValidation: ptr.To(true)}
}
