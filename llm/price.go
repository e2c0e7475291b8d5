package llm

import (
	"errors"
	"fmt"
	"math/bits"
	"net/http"

	"github.com/rampmeter/ratelimit"
)

// ErrUnknownModel is wrapped by the errors of Prices.Cost, and of
// EstimateOpenAICost's cost function, for a model the price table has no
// price for (and no "*" default).
var ErrUnknownModel = errors.New("llm: unknown model")

// Price is what one model's tokens cost, per kind, in integer micro-units
// of a currency (for US dollars, micro-dollars: 10⁻⁶ USD) per million
// tokens. A model at $2.50 per million input tokens, $1.25 per million
// cached input tokens and $10 per million output tokens is
//
//	llm.Price{Input: 2_500_000, CacheRead: 1_250_000, Output: 10_000_000}
//
// since one million tokens at $2.50 cost 2,500,000 micro-dollars; a token
// then costs Input/10⁶ micro-units (2.5 here), and a request's cost is
// rounded up to a whole micro-unit. Every price must be ≥ 0; a zero price
// makes that kind free.
type Price struct {
	Input      int64 // Usage.Input
	CacheRead  int64 // Usage.CacheRead
	CacheWrite int64 // Usage.CacheWrite
	Output     int64 // Usage.Output
}

// Prices is a validated price table: the Price of each model, for a
// budget in money stacked beside the token limits (a limit whose unit is
// a currency's micro-units), reserved on an estimate before the call
// (EstimateOpenAICost) and settled to the real cost after it (Cost), like
// tokens. It is immutable and safe for concurrent use.
type Prices struct {
	table map[string]Price
}

// NewPrices validates table and returns it as Prices. Keys are model
// names as clients send them in "model", matched exactly; the key "*",
// if present, prices every other model. Errors (wrapping
// ratelimit.ErrInvalidConfig): an empty table, or a negative price.
func NewPrices(table map[string]Price) (*Prices, error) {
	if len(table) == 0 {
		return nil, fmt.Errorf("%w: NewPrices: the price table is empty", ratelimit.ErrInvalidConfig)
	}
	p := &Prices{table: make(map[string]Price, len(table))}
	for model, price := range table {
		if price.Input < 0 || price.CacheRead < 0 || price.CacheWrite < 0 || price.Output < 0 {
			return nil, fmt.Errorf("%w: NewPrices: model %q: prices must be ≥ 0, got %+v", ratelimit.ErrInvalidConfig, model, price)
		}
		p.table[model] = price
	}
	return p, nil
}

// Price returns the price of model: its own, else the "*" default; ok is
// false when there is neither.
func (p *Prices) Price(model string) (price Price, ok bool) {
	if price, ok = p.table[model]; ok {
		return price, true
	}
	price, ok = p.table["*"]
	return price, ok
}

// Cost returns what usage u of model costs, in micro-units of the table's
// currency: Σ tokens × price / 10⁶ over the four kinds, computed exactly
// and rounded up to a whole micro-unit, saturating at 2⁵³ (beyond any
// limit's burst). Negative counts count as 0. The error wraps
// ErrUnknownModel when the table has no price for model.
func (p *Prices) Cost(model string, u Usage) (int64, error) {
	price, ok := p.Price(model)
	if !ok {
		return 0, unknownModel(model)
	}
	return price.cost(u.Input, u.CacheRead, u.CacheWrite, u.Output), nil
}

func unknownModel(model string) error {
	return fmt.Errorf("%w: the model %q has no price", ErrUnknownModel, model)
}

// cost returns ⌈(input×Input + cacheRead×CacheRead + cacheWrite×CacheWrite
// + output×Output) / 10⁶⌉, saturating at maxEstimate. The sum of four
// products of two values below 2⁶³ is below 2¹²⁸: it is added exactly in
// 128 bits.
func (p Price) cost(input, cacheRead, cacheWrite, output int64) int64 {
	var hi, lo uint64
	for _, t := range [...][2]int64{{input, p.Input}, {cacheRead, p.CacheRead}, {cacheWrite, p.CacheWrite}, {output, p.Output}} {
		ph, pl := bits.Mul64(uint64(max(0, t[0])), uint64(max(0, t[1])))
		var carry uint64
		lo, carry = bits.Add64(lo, pl, 0)
		hi, _ = bits.Add64(hi, ph, carry)
	}
	const perMillion = 1_000_000
	if hi >= perMillion {
		return maxEstimate // the quotient would not fit in 64 bits
	}
	q, r := bits.Div64(hi, lo, perMillion)
	if r > 0 {
		q++
	}
	return int64(min(q, uint64(maxEstimate)))
}

// EstimateOpenAICost returns a [ratelimit.CostFunc] that estimates what an
// OpenAI-style JSON request will cost, in micro-units of the currency of
// prices, before the model runs, for a budget:
//
//	prices, err := llm.NewPrices(map[string]llm.Price{
//		"gpt-4o-mini": {Input: 150_000, CacheRead: 75_000, Output: 600_000},
//	})
//	...
//	ratelimit.PerDay(5_000_000).Named("spend").                    // $5 a day, in micro-dollars
//		CostFrom(llm.EstimateOpenAICost(prices)).WithUnit("micro-usd")
//
// and after the call, with the real usage:
//
//	cost, err := prices.Cost(body.Model, usage)
//	... ratelimit.ReportUsage(ctx, "spend", cost)
//
// The estimate is the token estimate of EstimateOpenAITokens (same
// options, including Counting), priced by the request's "model": the
// prompt at the Input price (which tokens a cache serves is known only
// after the call) and the output cap × n at the Output price, rounded up.
// A model without a price is answered with 400 Bad Request (a
// *ratelimit.StatusError wrapping ErrUnknownModel), nothing charged; body
// errors are those of EstimateOpenAITokens. prices must not be nil (else
// every request fails with 500, as with an invalid option). Give the limit
// a unit of its own (WithUnit after CostFrom, which sets ratelimit.Tokens),
// so that it is not reported as a tokens limit.
func EstimateOpenAICost(prices *Prices, opts ...EstimateOption) ratelimit.CostFunc {
	c, err := newEstimateConfig("EstimateOpenAICost", opts)
	if err == nil && prices == nil {
		err = &ratelimit.StatusError{Code: http.StatusInternalServerError,
			Message: "The server's rate limiter is misconfigured; this is not a problem with your request.",
			Err:     fmt.Errorf("%w: EstimateOpenAICost(nil)", ratelimit.ErrInvalidConfig)}
	}
	if err != nil {
		return failingCost(err)
	}
	return func(r *http.Request) (int64, error) {
		b, err := ReadOpenAIBody(r, c.maxBody)
		if err != nil {
			return 0, err
		}
		price, ok := prices.Price(b.Model)
		if !ok {
			return 0, &ratelimit.StatusError{Code: http.StatusBadRequest,
				Message: fmt.Sprintf("The model %q is not available; use one of the models this API offers.", b.Model),
				Err:     unknownModel(b.Model)}
		}
		prompt, output := b.estimate(&c)
		return price.cost(prompt, 0, 0, output), nil
	}
}
