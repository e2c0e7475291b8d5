package ratelimit

import (
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
)

// ErrUnknownPlan is wrapped by the error Plans.Lookup returns for a plan
// (or a plan and model) that has no limits.
var ErrUnknownPlan = errors.New("ratelimit: unknown plan")

// PolicySet is an immutable, validated set of limits that a request is
// charged against together, atomically (see WithLimits). Build one with
// NewPolicySet, once, at startup; WithLimitsFunc then picks a set per
// request. Everything a request needs from the set is computed when it is
// built (validation, the RateLimit-Policy field), so choosing a set costs
// no allocation and no store round trip. A *PolicySet is safe for
// concurrent use.
type PolicySet struct {
	limits  []Limit // Decisions point into this slice
	policy  string  // the RateLimit-Policy value (HeadersIETF, no shadow limits)
	shadow  bool    // some limit is a shadow limit
	hasCost bool    // some limit has a cost function
	hasSlot bool    // some limit is a concurrency cap (holdsSlot)
}

// NewPolicySet validates limits and returns them as a set: there must be at
// least one, each must be valid (Limit.Err) and their names unique. Errors
// wrap ErrInvalidConfig (and ErrInvalidLimit for an invalid limit). The
// limits are copied.
func NewPolicySet(limits ...Limit) (*PolicySet, error) {
	if len(limits) == 0 {
		return nil, fmt.Errorf("%w: no limits (use WithLimits)", ErrInvalidConfig)
	}
	s := &PolicySet{limits: append([]Limit(nil), limits...)}
	for i := range s.limits {
		l := &s.limits[i]
		if err := l.Err(); err != nil {
			return nil, wrap(ErrInvalidConfig, fmt.Sprintf("limit %d", i), err)
		}
		for j := range i {
			if s.limits[j].Name() == l.Name() {
				return nil, fmt.Errorf("%w: limits %d and %d are both named %q (use Named)",
					ErrInvalidConfig, j, i, l.Name())
			}
		}
		s.shadow = s.shadow || l.shadow
		s.hasCost = s.hasCost || l.cost != nil
		s.hasSlot = s.hasSlot || holdsSlot(l)
	}
	s.policy = s.policyField(false)
	return s, nil
}

// policyField returns the RateLimit-Policy value of s's limits, shadow
// limits only when shadow is set.
func (s *PolicySet) policyField(shadow bool) string {
	ptrs := make([]*Limit, len(s.limits))
	for i := range s.limits {
		ptrs[i] = &s.limits[i]
	}
	return policyField(ptrs, shadow)
}

// Limits returns a copy of the set's limits, in order.
func (s *PolicySet) Limits() []Limit { return append([]Limit(nil), s.limits...) }

// index returns the position of the limit named name, or -1.
func (s *PolicySet) index(name string) int {
	for i := range s.limits {
		if s.limits[i].nameOf() == name {
			return i
		}
	}
	return -1
}

// LimitsFunc chooses the limits of one request from the request and its
// key (for example the key's plan, looked up in your own table, and the
// model named in the body). It runs after the key function and before the
// cost functions, on every request, so it must be fast: return one of a
// few *PolicySet values built at startup (Plans does the bookkeeping), not
// a new set per request.
//
// An error that implements interface{ StatusCode() int } (such as the
// *StatusError of Plans.Lookup, 403 Forbidden for an unknown plan, or of
// llm.ReadOpenAIBody for a malformed body) is answered with that status and
// its message; any other error with 500 Internal Server Error and a generic
// message, since it is a server-side fault. Nothing is charged either way.
// Returning a nil set without an error is answered with 500.
type LimitsFunc func(r *http.Request, key string) (*PolicySet, error)

// WithLimitsFunc makes the Limiter choose each request's limits with fn
// (plans, per-model limits) instead of, or in addition to, WithLimits. The
// limits given with WithLimits, if any, remain those of Limiter.Take,
// Limiter.Adjust and Limiter.Limits; with WithLimitsFunc alone those
// methods have no limits to charge and return an error wrapping
// ErrInvalidRequest. Requests refused because fn failed count in
// Stats.PlanErrors.
func WithLimitsFunc(fn LimitsFunc) Option {
	return func(c *config) error {
		if fn == nil {
			return errors.New("WithLimitsFunc(nil)")
		}
		c.limitsFunc = fn
		return nil
	}
}

// Plans is a validated table of policy sets by plan name and, optionally,
// by model within a plan, for WithLimitsFunc:
//
//	plans, err := ratelimit.NewPlans(map[string][]ratelimit.Limit{
//		"free":        {ratelimit.PerMinute(60).Named("requests"), ratelimit.PerDay(100_000).Named("tokens").CostFrom(est)},
//		"pro":         {ratelimit.PerMinute(600).Named("requests"), ratelimit.PerDay(5_000_000).Named("tokens").CostFrom(est)},
//		"pro/gpt-4o":  {ratelimit.PerMinute(100).Named("requests"), ratelimit.PerDay(1_000_000).Named("tokens").CostFrom(est)},
//	})
//
// Every set is validated once, by NewPlans; Lookup is two map reads and
// allocates nothing when the plan exists. A *Plans is immutable and safe
// for concurrent use.
type Plans struct {
	plans map[string]*planEntry
}

type planEntry struct {
	base   *PolicySet            // nil: only per-model limits
	models map[string]*PolicySet // nil when none
}

// NewPlans validates plans and returns the table. Each map key is a plan
// name, or a plan name, a slash and a model name ("pro/gpt-4o") for the
// limits of that model within that plan; a model without its own entry
// gets the plan's. Plan names are 1 to 64 characters from [A-Za-z0-9_.-];
// model names are any non-empty string (they may contain slashes: the
// first slash separates plan from model). Each entry's limits are
// validated as by NewPolicySet. Errors wrap ErrInvalidConfig and name the
// offending entry.
func NewPlans(plans map[string][]Limit) (*Plans, error) {
	if len(plans) == 0 {
		return nil, fmt.Errorf("%w: NewPlans: no plans", ErrInvalidConfig)
	}
	p := &Plans{plans: make(map[string]*planEntry, len(plans))}
	// Sorted, so that the error for several bad entries is always the same.
	names := make([]string, 0, len(plans))
	for name := range plans {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		plan, model, perModel := strings.Cut(name, "/")
		switch {
		case !validName(plan):
			return nil, fmt.Errorf("%w: NewPlans: plan %q: the plan name must be 1 to 64 characters from [A-Za-z0-9_.-]", ErrInvalidConfig, name)
		case perModel && model == "":
			return nil, fmt.Errorf("%w: NewPlans: plan %q: empty model name after the slash", ErrInvalidConfig, name)
		}
		set, err := NewPolicySet(plans[name]...)
		if err != nil {
			return nil, within(err, ErrInvalidConfig, fmt.Sprintf("NewPlans: plan %q", name))
		}
		e := p.plans[plan]
		if e == nil {
			e = &planEntry{}
			p.plans[plan] = e
		}
		if !perModel {
			e.base = set
			continue
		}
		if e.models == nil {
			e.models = make(map[string]*PolicySet)
		}
		e.models[model] = set
	}
	return p, nil
}

// Lookup returns the policy set of model within plan: the plan's entry for
// that model if it has one, else the plan's own (model may be "" when the
// request names none). When there is neither, the error is a *StatusError
// with 403 Forbidden wrapping ErrUnknownPlan: the key is known but may not
// use this API (or this model), and retrying will not help. The client is
// told so in plain words (Message: "Your API key's plan does not include
// this API." or "… this model; use another model."), without the plan's
// name; the error's message, for developers, names the plan and model.
// When an unknown plan means an unknown key, return a 401 of your own
// instead (the demo in _example does).
func (p *Plans) Lookup(plan, model string) (*PolicySet, error) {
	if e := p.plans[plan]; e != nil {
		if set := e.models[model]; set != nil && model != "" {
			return set, nil
		}
		if e.base != nil {
			return e.base, nil
		}
		return nil, &StatusError{Code: http.StatusForbidden, Message: "Your API key's plan does not include this model; use another model.",
			Err: fmt.Errorf("%w: plan %q has no limits for model %q", ErrUnknownPlan, plan, model)}
	}
	return nil, &StatusError{Code: http.StatusForbidden, Message: "Your API key's plan does not include this API.",
		Err: fmt.Errorf("%w: %q", ErrUnknownPlan, plan)}
}

// Names returns the table's entries as given to NewPlans ("free",
// "pro/gpt-4o"), sorted.
func (p *Plans) Names() []string {
	var names []string
	for plan, e := range p.plans {
		if e.base != nil {
			names = append(names, plan)
		}
		for model := range e.models {
			names = append(names, plan+"/"+model)
		}
	}
	sort.Strings(names)
	return names
}
