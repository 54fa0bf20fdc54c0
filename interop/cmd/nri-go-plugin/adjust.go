package main

import (
	"github.com/containerd/nri/pkg/api"
	"github.com/nri-rs/interop/peer"
)

// adjustment builds flavour f's adjustment with this module's NRI API, or
// nil for the no-op flavour.
func adjustment(f *peer.Flavour) *api.ContainerAdjustment {
	if f.Empty() {
		return nil
	}
	a := adjuster{&api.ContainerAdjustment{}}
	f.Apply(a)
	return a.ContainerAdjustment
}

// adjuster is an api.ContainerAdjustment with the two peer.Adjuster methods
// whose arguments are NRI types here.
type adjuster struct{ *api.ContainerAdjustment }

func (a adjuster) AddMountOf(destination, source, typ string, options []string) {
	a.AddMount(&api.Mount{Destination: destination, Source: source, Type: typ, Options: options})
}

func (a adjuster) AddDeviceOf(path, typ string, major, minor int64) {
	a.AddDevice(&api.LinuxDevice{Path: path, Type: typ, Major: major, Minor: minor})
}
