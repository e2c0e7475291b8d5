// Package storetest is the conformance suite for ratelimit.Store
// implementations. A store is done when Run passes against it.
//
// Run drives the store through fixed scenarios whose expected decisions are
// derived from first principles in comments next to each assertion, then
// through a few hundred pseudo-random steps compared call by call against a
// model built on the pure functions (*ratelimit.Limit).TakeAt and AdjustAt.
// Every scenario controls the store's clock through Harness.SetTime, so no
// test sleeps and every expected value is exact.
//
// The contract the suite holds every store to, beyond the Store interface
// documentation:
//
//   - Take evaluates its requests in order against a working copy of the
//     state, so a (key, limit) pair that appears twice is charged twice,
//     sequentially. Each Decision's Allowed and RetryAfter come from that
//     evaluation.
//   - If every Decision is Allowed, the working copy is committed. Otherwise
//     nothing is committed and every Decision's Remaining and Reset describe
//     the stored, uncharged state at the current time (what a peek with cost
//     0 would report), including those of the limits that had room.
//   - Decision.Limit is the pointer passed in the Request. State is keyed by
//     (Request.Key, Limit.ID()), so two *Limit values with the same ID share
//     state and a Limit whose quota, period, burst or name changes starts
//     fresh.
//   - A state whose Reset has elapsed is indistinguishable from a key never
//     seen, so stores may forget it.
//   - A clock that moves backwards creates no capacity: the state stands
//     still until the clock passes the time it was last written.
//   - Malformed calls fail with an error wrapping ratelimit.ErrInvalidRequest
//     (as ratelimit.CheckRequests reports them) and charge nothing; a call
//     whose context is already done returns the context's error and charges
//     nothing; a call with no requests succeeds and does nothing.
//   - Decisions are written only to out[:len(reqs)].
//
// Whether a store writes back the brought-up-to-date state after a peek or a
// refused call is not observable while the clock moves forward, and the suite
// leaves it to the store.
//
// Usage, in the store's package:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) storetest.Harness {
//			clock := &fakeClock{}
//			s := newStore(clock.Now)
//			return storetest.Harness{Store: s, SetTime: clock.Set}
//		})
//	}
package storetest
