//go:build !linux

package main

import "syscall"

// childAttr: only Linux has Pdeathsig; elsewhere children are stopped by
// PID when the run ends or is interrupted, and httpserve exits by itself
// after its -lifetime.
func childAttr() *syscall.SysProcAttr { return nil }
