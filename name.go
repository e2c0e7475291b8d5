package ratelimit

import (
	"fmt"
	"reflect"
	"runtime"
	"sync"
	"sync/atomic"
	"weak"
)

// Names and namespaces: what keeps Limiters that share a store from
// sharing state, or field members, by accident.

// WithName names the Limiter: 1 to 64 characters from [A-Za-z0-9_.-]. The
// name is the Limiter's namespace, so that Limiters sharing one store
// never share state or header members by accident:
//
//   - State: every limit's ID (Limit.ID), and so every storage key, starts
//     with "name/". Two Limiters with different names never touch each
//     other's state, whatever their limits and keys, even on one store.
//   - Fields: the limit's member in RateLimit-Policy and RateLimit, and
//     its entry in a problem's "violated-policies", is "name/" + its
//     Name: "ip/requests". Nested Limiters (a per-IP one in front of a
//     per-key one) then list distinct members (see HeaderStyle).
//
// Limit names, and so ReportUsage, are unchanged.
//
// Without WithName a Limiter is unnamed: its IDs and members are the bare
// limit names, as N processes running one configuration need to share
// state without naming anything. In one process, two unnamed Limiters on
// the same store (the same Store value, or stores wrapping it through
// Unwrap() Store) must not have a limit name in common: New refuses the
// second, because they would share that limit's state for equal keys (a
// per-route Limiter copied for two routes would share one budget; a
// Limiter nested in front of another with the same limits would charge
// every request twice) and announce the same member twice. Name them
// apart with WithName. Two Limiters given the same name with WithName may
// share a store and limit names: that states on purpose that they are one
// limiter (as the processes of one deployment are), for example the old
// and the new Limiter of a configuration reload, or the instances of a
// demo that runs several in one process. The check cannot see two
// processes, nor two store values that reach the same server (two Redis
// stores on one client): name Limiters that share a server with
// differently configured Limiters elsewhere. The built-in key functions
// also keep different kinds of keys apart (see KeyFunc), so that a
// per-IP and a per-key Limiter with equal limits never share a budget
// between the IP "10.0.0.1" and the API key "10.0.0.1".
//
// A store's claims last as long as the store: a Limiter that is rebuilt
// on a long-lived store needs WithName.
func WithName(name string) Option {
	return func(c *config) error {
		if !validName(name) {
			return fmt.Errorf("WithName(%q): the name must be 1 to 64 characters from [A-Za-z0-9_.-]", name)
		}
		c.name = name
		return nil
	}
}

// Name returns the Limiter's name (WithName), or "" when it is unnamed.
func (l *Limiter) Name() string { return l.name }

// maxBoundSets bounds the policy sets of WithLimitsFunc that a named
// Limiter (or one with HeadersShadow) keeps its own copy of. A function
// that returns more distinct sets (it should return a few, built at
// startup) gets a fresh copy per request beyond it, at the cost of its
// allocations.
const maxBoundSets = 1024

// bind returns set as l charges it: set itself when l is unnamed and
// lists no shadow limits (the set's limits and RateLimit-Policy value are
// then l's own), else a copy with l's namespace and RateLimit-Policy
// value, made on first use of set (boundSet) and kept.
func (l *Limiter) bind(set *PolicySet) *PolicySet {
	if !l.rebind || set == l.set {
		return set
	}
	if v, ok := l.bound.Load(set); ok {
		return v.(*PolicySet)
	}
	b := l.boundSet(set)
	if l.boundN.Load() >= maxBoundSets {
		return b
	}
	if v, loaded := l.bound.LoadOrStore(set, b); loaded {
		return v.(*PolicySet)
	}
	l.boundN.Add(1)
	return b
}

// boundSet returns a copy of set with l's namespace (WithName) and the
// RateLimit-Policy value of l's header style.
func (l *Limiter) boundSet(set *PolicySet) *PolicySet {
	b := &PolicySet{limits: make([]Limit, len(set.limits)), shadow: set.shadow, hasCost: set.hasCost, hasSlot: set.hasSlot}
	for i := range set.limits {
		b.limits[i] = set.limits[i].inNamespace(l.name)
	}
	b.policy = b.policyField(l.headers.style&HeadersShadow != 0)
	return b
}

// claims records, per store, the policy names (Limit.policyName) of the
// Limiters built on it in this process, and whether the Limiter that
// claimed each was named (WithName). The store is held weakly: a claim
// lasts as long as its store, and its entry is removed once the store is
// garbage.
var claims struct {
	mu     sync.Mutex
	stores map[weak.Pointer[byte]]map[string]bool
}

// claim records that a Limiter (named when named is set) charges limits
// on store, or returns the error that makes New fail when an unnamed
// Limiter on the same store already has one of their policy names, or
// this one is unnamed and any Limiter has (see WithName).
func claim(store Store, limits []Limit, named bool) error {
	p := storeIdentity(store)
	if p == nil || len(limits) == 0 {
		return nil
	}
	wp := weak.Make(p)
	claims.mu.Lock()
	defer claims.mu.Unlock()
	names := claims.stores[wp]
	for i := range limits {
		name := limits[i].policyName()
		if wasNamed, ok := names[name]; ok && !(wasNamed && named) {
			if named {
				return fmt.Errorf("a Limiter on this store without WithName already has a limit named %q, "+
					"and would share its state: name both Limiters (the same name only to share state on purpose)", limits[i].Name())
			}
			return fmt.Errorf("another Limiter on this store already has a limit named %q, and would share its state "+
				"for equal keys and its RateLimit member: give each Limiter its own WithName (the same name only to share state on purpose)",
				limits[i].Name())
		}
	}
	if names == nil {
		if claims.stores == nil {
			claims.stores = make(map[weak.Pointer[byte]]map[string]bool)
		}
		names = make(map[string]bool, len(limits))
		claims.stores[wp] = names
		runtime.AddCleanup(p, forgetStore, wp)
	}
	for i := range limits {
		name := limits[i].policyName()
		names[name] = names[name] || named
	}
	return nil
}

// forgetStore drops the claims on a store that is garbage.
func forgetStore(wp weak.Pointer[byte]) {
	claims.mu.Lock()
	delete(claims.stores, wp)
	claims.mu.Unlock()
}

// storeIdentity returns a pointer that identifies the state behind store:
// the innermost of the stores it wraps (Unwrap() Store), when that is a
// non-nil pointer to a value of nonzero size; otherwise nil (such a store
// cannot be told apart from another, and is not checked).
func storeIdentity(store Store) *byte {
	for range 16 { // a bound, in case of a wrapping cycle
		u, ok := store.(interface{ Unwrap() Store })
		if !ok {
			break
		}
		inner := u.Unwrap()
		if inner == nil {
			break
		}
		store = inner
	}
	v := reflect.ValueOf(store)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Type().Elem().Size() == 0 {
		return nil
	}
	return (*byte)(v.UnsafePointer())
}

// namespaceState is what a Limiter keeps for bind.
type namespaceState struct {
	name   string
	rebind bool     // bind copies the sets of WithLimitsFunc
	bound  sync.Map // *PolicySet → its copy (boundSet)
	boundN atomic.Int32
}
