// Package storetest is the conformance suite for ratelimit.Store
// implementations: it is the definition of a store. A store is done when
// Run and RunProperties pass against it.
//
// Run drives the store through fixed scenarios for every algorithm (token
// bucket in depth; GCRA, the leaky bucket's queue delays, the fixed
// window's boundary burst with both alignments, the sliding-window
// counter's and the sliding log's exact numbers, settlement with
// Request.At, costs above the capacity) whose expected decisions are
// derived from first principles in comments next to each assertion, then
// through a few hundred pseudo-random steps per algorithm compared call by
// call against a model built on the pure functions (*ratelimit.Limit).TakeAt
// and AdjustFrom with all-or-nothing commit. RunProperties does the same
// with pgregory.net/rapid on random sequences (PropertyChecks per
// algorithm), comparing the rendered rate-limit headers too. Every scenario
// controls the store's clock through Harness.SetTime, so no test sleeps and
// every expected value is exact; every field of every Decision is compared,
// including Delay, At (which must be the store's clock) and the Limit
// pointer.
//
// The contract the suite holds every store to, beyond the Store interface
// documentation:
//
//   - Take evaluates its requests in order against a working copy of the
//     state, so a (key, limit) pair that appears twice is charged twice,
//     sequentially. Each Decision's Allowed, RetryAfter and Delay come from
//     that evaluation.
//   - If every Decision is Allowed, the working copy is committed. Otherwise
//     nothing is committed and every Decision's Remaining and Reset describe
//     the stored, uncharged state at the current time (what a peek with cost
//     0 would report), including those of the limits that had room.
//   - Decision.Limit is the pointer passed in the Request and Decision.At
//     the store's clock at the call, in µs. State is keyed by (Request.Key,
//     Limit.ID()), so two *Limit values with the same ID share state and a
//     Limit whose quota, period, burst, algorithm or name changes starts
//     fresh.
//   - Adjust settles usage charged at Request.At (0: now): window algorithms
//     credit the window charged and drop a refund for a window that no
//     longer counts.
//   - A state is indistinguishable from a key never seen from
//     (*Limit).ExpiresAt on, so stores may forget it then.
//   - A clock that moves backwards creates no capacity and tells true
//     waits (ratelimit.ClockStepTolerance): behind a state's last change by
//     at most the tolerance, the state stands still and its waits are told
//     by this clock; behind by more, the state is rebased by the step. A
//     store writes the state brought to now whenever
//     (*ratelimit.Limit).ClockStepped reports a step, even in a call that
//     charges nothing (the suite's model writes no other state that a
//     call leaves uncharged, as the built-in stores do not).
//   - Malformed calls fail with an error wrapping ratelimit.ErrInvalidRequest
//     (as ratelimit.CheckRequests reports them) and charge nothing; a call
//     whose context is already done returns the context's error and charges
//     nothing; a call with no requests succeeds and does nothing.
//   - Decisions are written only to out[:len(reqs)].
//
// Whether a store writes back the brought-up-to-date state after a peek or a
// refused call (with no step) is not observable while the clock moves
// forward; the clock-step scenarios are written so that it is not
// observable either.
//
// The package also has FuzzStoresAgree (in its tests), the same sequences
// decoded from fuzzer bytes, run against the memory store and the Redis
// store on miniredis.
//
// Usage, in the store's package:
//
//	func newHarness(t *testing.T) storetest.Harness {
//		clock := &fakeClock{}
//		s := newStore(clock.Now)
//		return storetest.Harness{Store: s, SetTime: clock.Set}
//	}
//
//	func TestConformance(t *testing.T) { storetest.Run(t, newHarness) }
//	func TestProperties(t *testing.T)  { storetest.RunProperties(t, newHarness) }
package storetest
