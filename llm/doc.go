// Package llm adapts the rate limiter of package
// [github.com/rampmeter/ratelimit] to AI model APIs in the shapes of the
// OpenAI and Anthropic APIs: what a request will cost before the model runs,
// what it cost after, and the fields and error bodies clients written
// against those APIs expect.
//
//   - Before: [EstimateOpenAITokens] is a [ratelimit.CostFunc] that reads
//     an OpenAI-style JSON body (prompt text, output cap, n) and returns a
//     token estimate to reserve, of every token or, with [Counting], of
//     the prompt's or the output's only; [EstimateOpenAICost] prices the
//     same estimate from a price table ([Prices]) in micro-units of a
//     currency, for a spend budget; [ReadOpenAIBody] gives the handler
//     (and a [ratelimit.LimitsFunc]) the same parse.
//   - After: [ParseOpenAIUsage], [OpenAIUsage] and [AnthropicUsage] read
//     the real [Usage] — input, cache-read, cache-write and output tokens
//     — from a response or the events of a stream, for
//     [ratelimit.ReportUsage], which settles the reservation: each limit
//     gets its own count ([Usage.Count], [Prices.Cost]).
//   - Streams: [IncludeStreamUsage] asks an OpenAI upstream to end its
//     stream with the usage, and [CopyStream] passes the upstream's events
//     through to the client, reading the usage on the way and dropping the
//     usage chunk the client did not ask for.
//   - Fields and errors: [OpenAIHeaders] and [AnthropicHeaders] are
//     [ratelimit.HeaderWriter]s to pass to [ratelimit.WithHeaders] beside
//     (or instead of) the IETF fields (limits of unit [InputTokens] and
//     [OutputTokens] get Anthropic's input- and output-tokens fields);
//     [OpenAIErrors] is the [ratelimit.ErrorFormat] of the OpenAI API's
//     error body.
//
// The generic parts stay in package ratelimit: cost functions
// (Limit.CostFrom), reservations and their settlement (ReportUsage,
// Reserved), WithReserveClamp, WithChargeOnFailure and
// WithQuotaExhaustedStatus. This package only uses ratelimit's exported API.
package llm
