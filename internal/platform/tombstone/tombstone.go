// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package tombstone unwraps the objects of informer delete notifications:
// when a watch misses a delete, client-go hands the last known state
// wrapped in a cache.DeletedFinalStateUnknown. Every delete handler in
// svcnet reads its object through here.
package tombstone

import (
	toolscache "k8s.io/client-go/tools/cache"
)

// Unwrap returns the object of a delete notification and whether it came
// in a tombstone (its final state is then unknown).
func Unwrap(obj any) (object any, stateUnknown bool) {
	if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		return tomb.Obj, true
	}
	return obj, false
}

// As returns the object of a delete notification as a T, unwrapping a
// tombstone; ok is false when it is not a T.
func As[T any](obj any) (object T, ok bool) {
	o, _ := Unwrap(obj)
	object, ok = o.(T)
	return object, ok
}
