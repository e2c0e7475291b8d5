// Package llm adapts the rate limiter of package
// [github.com/rampmeter/ratelimit] to AI model APIs in the shapes of the
// OpenAI and Anthropic APIs: what a request will cost before the model runs,
// what it cost after, and the fields and error bodies clients written
// against those APIs expect.
//
//   - Before: [EstimateOpenAITokens] is a [ratelimit.CostFunc] that reads
//     an OpenAI-style JSON body (prompt text, output cap, n) and returns a
//     token estimate to reserve; [ReadOpenAIBody] gives the handler (and a
//     [ratelimit.LimitsFunc]) the same parse.
//   - After: [ParseOpenAIUsage] and [AnthropicUsage] read the real usage
//     from a response or the events of a stream, for
//     [ratelimit.ReportUsage], which settles the reservation;
//     [IncludeStreamUsage] asks an OpenAI upstream to end its stream with
//     the usage.
//   - Fields and errors: [OpenAIHeaders] and [AnthropicHeaders] are
//     [ratelimit.HeaderWriter]s to pass to [ratelimit.WithHeaders] beside
//     (or instead of) the IETF fields; [OpenAIErrors] is the
//     [ratelimit.ErrorFormat] of the OpenAI API's error body.
//
// The generic parts stay in package ratelimit: cost functions
// (Limit.CostFrom), reservations and their settlement (ReportUsage,
// Reserved), WithReserveClamp, WithChargeOnFailure and
// WithQuotaExhaustedStatus. This package only uses ratelimit's exported API.
package llm
