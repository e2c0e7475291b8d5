package ratelimit

import (
	"net"
	"net/netip"
	"testing"
)

// FuzzPlainIPv4Host checks KeyByIP's fast path against its general one:
// whenever plainIPv4Host accepts a RemoteAddr, SplitHostPort and
// ParseAddr accept it too and ipKey makes the same key.
func FuzzPlainIPv4Host(f *testing.F) {
	for _, s := range []string{"203.0.113.7:443", "0.0.0.0:0", "255.255.255.255:65535", "01.2.3.4:1", "1.2.3.04:1",
		"256.1.1.1:1", "1.2.3:4", "1.2.3.4.5:6", "1.2.3.4:", "1.2.3.4", ":80", "1..2.3:4", "1.2.3.4:5:6", "[1.2.3.4]:5",
		"1.2.3.4:5]", "1.2.3.4:+5", "::1:80", "1.2.3.4 :5", "00.1.2.3:4", "0.1.2.3:4", "999.1.1.1:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, addr string) {
		host, ok := plainIPv4Host(addr)
		if !ok {
			return
		}
		h, _, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatalf("%q: fast path accepted, SplitHostPort: %v", addr, err)
		}
		ip, err := netip.ParseAddr(h)
		if err != nil {
			t.Fatalf("%q: fast path accepted, ParseAddr: %v", addr, err)
		}
		if got, want := "ip "+host, ipKey(ip, 32, 64); got != want {
			t.Fatalf("%q: fast key %q, general key %q", addr, got, want)
		}
	})
}

func TestPlainIPv4Host(t *testing.T) {
	for addr, want := range map[string]bool{
		"203.0.113.7:443": true, "0.0.0.0:0": true, "255.255.255.255:65535": true, "10.0.0.1:80": true,
		"01.2.3.4:1": false, "256.1.1.1:1": false, "1.2.3:4": false, "1.2.3.4.5:6": false, "1.2.3.4:": false,
		"1.2.3.4": false, "[::1]:80": false, "1.2.3.4:5]": false, "1..2.3:4": false, ".1.2.3:4": false, "1.2.3.:4": false,
	} {
		if _, ok := plainIPv4Host(addr); ok != want {
			t.Errorf("plainIPv4Host(%q) = %v, want %v", addr, ok, want)
		}
	}
}

// BenchmarkKeyByIPPath compares, in one process, KeyByIP's general path
// (SplitHostPort, ParseAddr, ipKey) with its fast path for a plain IPv4
// RemoteAddr (plainIPv4Host).
func BenchmarkKeyByIPPath(b *testing.B) {
	const addr = "198.18.39.250:40000"
	var sink string
	b.Run("general", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			host, _, _ := net.SplitHostPort(addr)
			ip, _ := netip.ParseAddr(host)
			sink = ipKey(ip, 32, 64)
		}
	})
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			host, _ := plainIPv4Host(addr)
			sink = "ip " + host
		}
	})
	_ = sink
}
