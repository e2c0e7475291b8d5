package main

import "syscall"

// childAttr makes the kernel send SIGTERM to a child when this process
// dies, so that no redis-server or HTTP server outlives a killed run.
func childAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM} }
