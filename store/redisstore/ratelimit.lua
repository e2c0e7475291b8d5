-- rampmeter rate limiting, Redis side.
--
-- This script is the Redis twin of the Go functions in package ratelimit's
-- algorithm.go: (*Limit).TakeAt, AdjustFrom and ExpiresAt for every
-- algorithm (token bucket, leaky bucket, GCRA, fixed window, sliding-window
-- counter, sliding log, concurrency cap). It must compute exactly the same integers; the
-- package tests compare the two step by step. Each Lua function below names
-- the Go function it mirrors.
--
-- Call (one FCALL of the library's function per Store.Take or Store.Adjust,
-- however many limits, or EVALSHA of this script where Redis has no
-- Functions; see the Entry section at the end):
--   KEYS[i]   state key of request i (the keys of one caller share a hash
--             tag; a key may repeat, and repeats apply in order)
--   ARGV[1]   "t" = Take (all or nothing), "a" = Adjust (no check)
--   ARGV[2]   now in microseconds since the Unix epoch, or "" to read the
--             Redis server clock (TIME)
--   ARGV[3]   milliseconds added to every key's expiry (WithExpiryMargin);
--             a state kept past its expiry decides like a key never seen,
--             so a margin changes no decision
--   then per request i, in order: Take two arguments (params, cost),
--   Adjust three (params, cost, at):
--     params  the limit's parameters, one string the Go side builds once
--             per Limit: "<algo><scale>:<drain>:<burst>:<quota>:<period>"
--             (parse_params), e.g. "t3:50:60:60:60000000"
--       algo           "t" token bucket, "l" leaky bucket, "g" GCRA, "f"
--                      fixed window, "F" fixed window aligned to the first
--                      hit, "s" sliding-window counter, "o" sliding log,
--                      "c" concurrency cap (quota = the cap, period =
--                      the maximum hold), "k" calendar window (its period
--                      boundaries appended, see Calendar window)
--       scale, drain   ratelimit.Limit.Params: one unit refills in
--                      scale/drain µs
--       burst, quota   units
--       period         µs
--             An algorithm that needs more parameters appends them as
--             ":<integer>" fields after period (per Limit, or per request
--             when they depend on the call); parse_params keeps them
--             unparsed in p.rest, and the algorithm reads them with
--             param_fields(p).
--     cost    Take: >= 0; Adjust: the delta, clamped by Go to +-2^53
--             (2^52+1 already saturates every rule)
--     at      Adjust only: when the settled usage was charged (µs), 0 = now
-- Reply: one string of space-separated integers: now (µs), then five per
-- request: allowed (0/1), remaining (units), reset (µs), retry (µs; 0 when
-- allowed, -1 = never), delay (µs, leaky bucket). A string, not an array:
-- one reply value to convert here and to parse in Go, and %d keeps every
-- integer exact.
-- Batch (WithPipelining on one server): ARGV[1] "b", ARGV[2] and ARGV[3]
-- as above, ARGV[4] the number of calls, then per call its mode ("t" or
-- "a"), its number of requests, and its requests' arguments as above; the
-- calls' keys follow each other in KEYS. ARGV[1] "B" is the compact form
-- of a batch whose every call is a Take of one request: per call only the
-- request's params and cost. The reply is now, then one line per call (see
-- the end of the script): the call's reply without its leading now.
--
-- Stored state (ratelimit.State), one Redis string per key:
--   token/leaky bucket   "<level>:<updated>"
--   GCRA                 "<tat>:<updated>" (or "<tat>", as written by
--                        versions before the last change was kept)
--   fixed window         "<count>:<window start>"
--   calendar window      "<count>:<period start>:<period end>"
--   sliding window       "<count>:<window start>:<previous count>"
--   sliding log          "<t>:<n>,<t>:<n>,..." the log run-length encoded:
--                        n admissions at µs t, oldest first
--   concurrency cap      the same: n held slots started at µs t
-- Every key expires (PX) when its state becomes equivalent to a key never
-- seen (ExpiresAt), rounded up to the millisecond; a state already there is
-- deleted instead of written. PX is passed as a string formatted here: Redis
-- converts a Lua number argument by a slower path (about 0.3 µs a SET).
--
-- Arithmetic. Lua numbers are IEEE-754 doubles, exact for integers below
-- 2^53. All values here are integers: microseconds (about 1.8e15 today) and
-- counts bounded by ratelimit's validation (bucket capacity <= 2^51, level
-- <= 2^52; window quota <= 2^49 and quota x period-ms <= 2^50), so every
-- sum and product below stays under 2^53 (comments argue it where it is not
-- obvious). Only '/' is inexact, so it appears only in floordiv. Redis
-- truncates returned numbers to integers; every value returned is already
-- an integer, so nothing is lost (a fraction would have to be returned as a
-- string).

-- Redis 3.2-4.x replicate scripts verbatim by default and then refuse writes
-- after a non-deterministic command such as TIME; effects replication (the
-- default since Redis 5, the only mode since 7) makes it safe. The function
-- is deprecated since Redis 7; the guard keeps the script working should a
-- later version drop it.
-- A Redis Function library (Redis 7+, effects replication only) must not
-- look it up at all: the Go side leaves this line out of the library.
if redis.replicate_commands then pcall(redis.replicate_commands) end

local MAX_LEVEL = 4503599627370496 -- 2^52, ratelimit.maxLevel

local floor, max, min = math.floor, math.max, math.min
local format, match, gmatch = string.format, string.match, string.gmatch

-- floordiv returns floor(a/b) exactly for integers 0 <= a, 0 < b with
-- a + b < 2^53 (every caller satisfies this). a/b is rounded to the nearest
-- double. It cannot round up to the next integer k: k - a/b is at least
-- 1/b, while the rounding error is at most (a/b)*2^-53 < 1/b. Nor down past
-- an integer, since rounding is monotonic and integers below 2^53 are
-- doubles. So math.floor is already exact here; the two checks guard that
-- argument for two multiplications, which are exact because q*b and (q+1)*b
-- lie within b of a.
local function floordiv(a, b)
  local q = floor(a / b)
  if q * b > a then
    q = q - 1
  elseif (q + 1) * b <= a then
    q = q + 1
  end
  return q
end

-- ceildiv returns ceil(a/b) for b > 0, and 0 for a <= 0 (Go's ceilDiv).
local function ceildiv(a, b)
  if a <= 0 then
    return 0
  end
  return floordiv(a - 1, b) + 1
end

-- gomod returns Go's a % b (b > 0): the sign follows a.
local function gomod(a, b)
  if a >= 0 then
    return a - floordiv(a, b) * b
  end
  return -((-a) - floordiv(-a, b) * b)
end

-- ---- Clock steps (ratelimit.ClockStepTolerance) ----
-- A state last changed at u > now (the clock stepped back, or another
-- writer's clock is ahead): within STEP_TOL the state stands still (decided
-- at u, the waits told lengthened by u - now); beyond it the state is
-- rebased by the step and marked st.stepped, which the write phase reads
-- (Limit.ClockStepped: a rebased state is written even when nothing is
-- charged).

local STEP_TOL = 128000 -- µs, ratelimit.ClockStepTolerance

-- stepBack: returns t (the time to decide at), lag, shift.
local function step_back(u, now)
  if now >= u then
    return now, 0, 0
  elseif u - now <= STEP_TOL then
    return u, u - now, 0
  end
  return now, 0, u - now
end

-- addLag: the waits of a decision made lag µs ahead of the clock.
local function add_lag(retry, reset, delay, lag)
  if lag > 0 then
    if retry > 0 then
      retry = retry + lag
    end
    if reset > 0 then
      reset = reset + lag
    end
    if delay > 0 then
      delay = delay + lag
    end
  end
  return retry, reset, delay
end

-- ---- Token bucket, leaky bucket and GCRA ----
-- State {level, updated}; GCRA keeps {tat} and converts (gcraBucket).

-- bucketStep: a rebase keeps the level, dated now.
local function bucket_step(st, now)
  local t, lag, shift = step_back(st[2], now)
  if shift > 0 then
    st[2] = now
    st.stepped = true
  end
  return t, lag
end

-- drainTo: bring a bucket forward to now. A clock that moved backwards
-- (now <= updated) leaves it as it is.
local function drain_to(st, now, p)
  if now <= st[2] then
    return
  end
  local elapsed = now - st[2]
  -- elapsed may be huge (a key idle for years); compare before multiplying.
  if elapsed >= ceildiv(st[1], p.drain) then
    st[1] = 0
  else
    -- elapsed < ceil(level/drain), so elapsed*drain < level + drain < 2^53.
    st[1] = st[1] - elapsed * p.drain
  end
  st[2] = now
end

-- describeBucket: remaining = floor((capacity - level)/scale) when
-- positive, reset = ceil(level/drain).
local function describe_bucket(st, p)
  local capacity = p.burst * p.scale
  local remaining = 0
  if st[1] < capacity then
    remaining = floordiv(capacity - st[1], p.scale)
  end
  return remaining, ceildiv(st[1], p.drain)
end

-- bucketTake. Returns allowed, retry, delay.
local function bucket_take(st, now, cost, p)
  drain_to(st, now, p)
  local capacity = p.burst * p.scale
  if cost > p.burst then
    return 0, -1, 0
  end
  -- cost <= burst, so cost*scale <= capacity <= 2^51, and level <= 2^52.
  local need = st[1] + cost * p.scale
  if need > capacity then
    return 0, ceildiv(need - capacity, p.drain), 0
  end
  local delay = 0
  if p.algo == 'l' then
    delay = ceildiv(st[1], p.drain) -- the queue ahead of this request
  end
  st[1] = need
  return 1, 0, delay
end

-- bucketAdjust. The comparisons come first so that delta*scale is only
-- formed when the result stays within [0, 2^52].
local function bucket_adjust(st, now, delta, p)
  drain_to(st, now, p)
  if delta > 0 then
    if delta > floordiv(MAX_LEVEL - st[1], p.scale) then
      st[1] = MAX_LEVEL
    else
      st[1] = st[1] + delta * p.scale
    end
  elseif delta < 0 then
    if delta <= -ceildiv(st[1], p.scale) then
      st[1] = 0
    else
      st[1] = st[1] + delta * p.scale
    end
  end
end

-- gcraStep: the state {tat, updated} (updated 0 in a state written before
-- it was kept: no step can be seen); a rebase moves both back by the step.
local function gcra_step(st, now)
  local t, lag, shift = step_back(st[2], now)
  if shift > 0 then
    st[1], st[2] = st[1] - shift, now
    st.stepped = true
  end
  return t, lag
end

-- gcraBucket / gcraState: the bucket level is max(0, tat - now), and a
-- bucket at level 0 is the zero state (tat 0, updated 0); otherwise the
-- state keeps the time of its last change. tat <= now + 2^52 < 2^53.
local function gcra_bucket(st, now)
  return {max(0, st[1] - now), now}
end

local function gcra_state(b, st, now)
  if b[1] == 0 then
    st[1], st[2] = 0, 0
  else
    st[1], st[2] = now + b[1], now
  end
end

-- ---- Fixed window and sliding-window counter ----
-- State {count, window start, previous count}.

local function is_fixed(p)
  return p.algo == 'f' or p.algo == 'F'
end

-- windowStart: the start of the window holding now; aligned to the epoch,
-- or for 'F' to the hit that opened it, while it counts anything (an empty
-- first-hit window is no window: the next hit opens one). A clock that
-- moved backwards stays in the stored window.
local function window_start(st, now, p)
  if p.algo == 'F' then
    if st[2] ~= 0 and st[1] > 0 and now < st[2] + p.period then
      return st[2]
    end
    return now
  end
  return max(now - gomod(now, p.period), st[2])
end

-- windowStep: a step back beyond STEP_TOL from the window's start moves
-- the window back: to now for 'F' (unless it counts nothing: no window),
-- by whole periods for an epoch-aligned window. Waits about a window are
-- absolute times, so standing still needs no lag.
local function window_step(st, now, p)
  if p.algo == 'F' and st[1] == 0 then
    return
  end
  local _, _, shift = step_back(st[2], now)
  if shift > 0 and p.algo ~= 'F' then
    -- shift < 2^53, period > 0: floordiv's precondition.
    shift = floordiv(shift, p.period) * p.period
  end
  if shift > 0 then
    st[2] = st[2] - shift
    st.stepped = true
  end
end

-- roll: move to the window starting at w; the count becomes the previous
-- count only if w is the very next window, and never for a fixed window.
local function roll(st, w, p)
  if w == st[2] then
    return
  end
  if w == st[2] + p.period and not is_fixed(p) then
    st[3] = st[1]
  else
    st[3] = 0
  end
  st[1], st[2] = 0, w
end

-- weightUnits: the sliding window's period in whole milliseconds (New
-- checks it divides), 1 for a fixed window.
local function weight_units(p)
  if p.algo == 's' then
    return floordiv(p.period, 1000)
  end
  return 1
end

-- windowUsed: usage at now including cost, in units x weightUnits. For the
-- sliding window prev x (pm - em) + (count + cost) x pm with em in [0, pm):
-- prev <= 2 quota and count + cost <= 3 quota, times pm, is below 5 x 2^50.
local function window_used(st, now, cost, p)
  if p.algo ~= 's' then
    return st[1] + cost
  end
  local pm = floordiv(p.period, 1000)
  local em = floordiv(max(0, now - st[2]), 1000)
  return st[3] * (pm - em) + (st[1] + cost) * pm
end

-- ExpiresAt for the windows: a count expires with its window, a previous
-- count one window later.
local function window_expires(st, p)
  if is_fixed(p) then
    if st[1] == 0 then
      return st[2]
    end
    return st[2] + p.period
  end
  if st[1] > 0 then
    return st[2] + 2 * p.period
  elseif st[3] > 0 then
    return st[2] + p.period
  end
  return st[2]
end

-- windowRetry: µs until cost (<= quota) fits.
local function window_retry(st, now, cost, p)
  if p.algo ~= 's' then
    return st[2] + p.period - now
  end
  local pm = floordiv(p.period, 1000)
  -- Later in this window: the previous count's weight falls as e grows;
  -- the first whole millisecond e with prev x (pm - e) <= (quota - count -
  -- cost) x pm. a x pm <= quota x pm <= 2^50.
  local a = p.quota - st[1] - cost
  if a >= 0 and st[3] > 0 then
    local e = pm - floordiv(a * pm, st[3])
    if e < pm then
      return st[2] + e * 1000 - now
    end
  end
  -- In the next window the current count becomes the previous one.
  local e = 0
  if st[1] > 0 then
    e = max(0, pm - floordiv((p.quota - cost) * pm, st[1]))
  end
  return st[2] + p.period + e * 1000 - now
end

-- describeWindow.
local function describe_window(st, now, p)
  local pm = weight_units(p)
  local used = window_used(st, now, 0, p)
  local remaining = 0
  if used < p.quota * pm then
    remaining = min(p.quota, floordiv(p.quota * pm - used, pm))
  end
  local reset = 0
  local exp = window_expires(st, p)
  if exp > now then
    reset = exp - now
  end
  return remaining, reset
end

-- windowTake. Returns allowed, retry, delay.
local function window_take(st, now, cost, p)
  window_step(st, now, p)
  roll(st, window_start(st, now, p), p)
  if cost > p.quota then
    return 0, -1, 0
  end
  if window_used(st, now, cost, p) > p.quota * weight_units(p) then
    return 0, window_retry(st, now, cost, p), 0
  end
  st[1] = st[1] + cost
  return 1, 0, 0
end

-- windowAdjust: credit delta to the window charged at chargedAt (the
-- current one or, sliding, the previous one); a refund for a window that
-- has passed is dropped, an overage goes to the current window. Counts stay
-- in [0, 2 quota]; |delta| <= 2^53 may round in the sum, but any such sum
-- is far outside that range and clamps to the same bound.
local function window_adjust(st, now, charged_at, delta, p)
  window_step(st, now, p)
  roll(st, window_start(st, now, p), p)
  local cw = charged_at - gomod(charged_at, p.period)
  if p.algo == 'F' then
    cw = st[2]
    if charged_at < st[2] then
      cw = st[2] - 1 -- a previous window
    end
  end
  local limit = 2 * p.quota
  if cw == st[2] then
    st[1] = min(max(st[1] + delta, 0), limit)
  elseif p.algo == 's' and cw == st[2] - p.period then
    st[3] = min(max(st[3] + delta, 0), limit)
  elseif delta > 0 then
    st[1] = min(max(st[1] + delta, 0), limit)
  end
end

-- ---- Sliding log ----
-- State {runs}: runs[i] = {t, n}, n admissions at µs t, t increasing.
-- ratelimit.State.Log is the same list with each run written out.

local function log_count(runs)
  local n = 0
  for i = 1, #runs do
    n = n + runs[i][2]
  end
  return n
end

-- logStep: a step back beyond STEP_TOL from the newest entry moves every
-- entry back by the step; within it, entries expire as at the newest one.
-- Returns the time to expire entries at.
local function log_step(st, now)
  local runs = st[1]
  if #runs == 0 then
    return now
  end
  local t, _, shift = step_back(runs[#runs][1], now)
  if shift > 0 then
    for i = 1, #runs do
      runs[i][1] = runs[i][1] - shift
    end
    st.stepped = true
  end
  return t
end

-- logLive: drop the entries that left the window (t + period <= now).
local function log_live(runs, now, p)
  local i = 1
  while i <= #runs and runs[i][1] + p.period <= now do
    i = i + 1
  end
  if i > 1 then
    local live = {}
    for j = i, #runs do
      live[#live + 1] = runs[j]
    end
    return live
  end
  return runs
end

-- logAppend: n entries at now, kept in order if the clock moved back.
local function log_append(runs, now, n)
  if n <= 0 then
    return
  end
  local last = runs[#runs]
  if last then
    now = max(now, last[1])
    if last[1] == now then
      last[2] = last[2] + n
      return
    end
  end
  runs[#runs + 1] = {now, n}
end

-- describeLog, and describeSlots of the concurrency cap (remaining = cap
-- - held, reset = until the newest slot's hold ends), which is the same.
local function describe_log(runs, now, p)
  local remaining = max(0, p.quota - log_count(runs))
  local reset = 0
  if #runs > 0 then
    reset = runs[#runs][1] + p.period - now
  end
  return remaining, reset
end

-- logTake. Returns allowed, retry, delay.
local function log_take(st, now, cost, p)
  st[1] = log_live(st[1], log_step(st, now), p)
  local runs = st[1]
  local n = log_count(runs)
  if cost > p.quota then
    return 0, -1, 0
  end
  if n + cost > p.quota then
    -- The oldest k entries must expire before cost fits: wait for the
    -- k-th (1-based).
    local k = n + cost - p.quota
    for i = 1, #runs do
      k = k - runs[i][2]
      if k <= 0 then
        return 0, runs[i][1] + p.period - now, 0
      end
    end
  end
  log_append(runs, now, cost)
  return 1, 0, 0
end

-- logAdjust: a charge appends (the log holds at most 2 quota entries); a
-- refund removes the newest entries charged at or after chargedAt.
local function log_adjust(st, now, charged_at, delta, p)
  st[1] = log_live(st[1], log_step(st, now), p)
  local runs = st[1]
  if delta > 0 then
    log_append(runs, now, min(delta, 2 * p.quota - log_count(runs)))
  elseif delta < 0 then
    while #runs > 0 and delta < 0 and runs[#runs][1] >= charged_at do
      local last = runs[#runs]
      local k = min(last[2], -delta)
      last[2] = last[2] - k
      delta = delta + k
      if last[2] == 0 then
        runs[#runs] = nil
      end
    end
  end
end

-- ---- Concurrency cap ----
-- State {runs}, as for the sliding log: runs[i] = {t, n}, n slots that
-- started at µs t, t increasing. A slot is held while t + period (the
-- maximum hold) > now; p.quota is the cap.

-- ratelimit.ConcurrencyRetryAfter in µs: the most a refusal asks to wait.
local CONCURRENCY_RETRY = 1000000

-- slotsHeld: drop the slots whose maximum hold has ended.
local function slots_held(runs, now, p)
  local i = 1
  while i <= #runs and runs[i][1] + p.period <= now do
    i = i + 1
  end
  if i > 1 then
    local held = {}
    for j = i, #runs do
      held[#held + 1] = runs[j]
    end
    return held
  end
  return runs
end

-- slotsInsert: n slots started at now, after every slot started at or
-- before now (in order even if the clock moved back, so that each slot
-- keeps the start time that releases it).
local function slots_insert(runs, now, n)
  if n <= 0 then
    return
  end
  local i = #runs
  while i >= 1 and runs[i][1] > now do
    i = i - 1
  end
  if i >= 1 and runs[i][1] == now then
    runs[i][2] = runs[i][2] + n
  else
    table.insert(runs, i + 1, {now, n})
  end
end

-- slotsTake. Returns allowed, retry, delay.
local function slots_take(st, now, cost, p)
  st[1] = slots_held(st[1], now, p)
  local runs = st[1]
  local n = log_count(runs)
  if cost > p.quota then
    return 0, -1, 0
  end
  if n + cost > p.quota then
    -- The oldest k slots must return: the k-th (1-based) ends its hold
    -- first, capped at CONCURRENCY_RETRY.
    local k = n + cost - p.quota
    for i = 1, #runs do
      k = k - runs[i][2]
      if k <= 0 then
        return 0, min(runs[i][1] + p.period - now, CONCURRENCY_RETRY), 0
      end
    end
  end
  slots_insert(runs, now, cost)
  return 1, 0, 0
end

-- slotsAdjust: a release (delta < 0) removes up to -delta slots started
-- at charged_at exactly (the Take's At, not normalised), or with
-- charged_at <= 0 the newest; a charge takes slots at now, at most 2 cap
-- held in all.
local function slots_adjust(st, now, charged_at, delta, p)
  st[1] = slots_held(st[1], now, p)
  local runs = st[1]
  if delta > 0 then
    slots_insert(runs, now, min(delta, 2 * p.quota - log_count(runs)))
  elseif delta < 0 and charged_at <= 0 then
    while #runs > 0 and delta < 0 do
      local last = runs[#runs]
      local k = min(last[2], -delta)
      last[2] = last[2] - k
      delta = delta + k
      if last[2] == 0 then
        runs[#runs] = nil
      end
    end
  elseif delta < 0 then
    for i = #runs, 1, -1 do
      local r = runs[i]
      if r[1] == charged_at then
        r[2] = r[2] - min(r[2], -delta)
        if r[2] == 0 then
          table.remove(runs, i)
        end
        break
      elseif r[1] < charged_at then
        break
      end
    end
  end
end

-- ---- Dispatch, storage ----

-- decode parses a stored string into the working state of algorithm p.
local function decode(v, p)
  local a = p.algo
  if not v then
    if a == 'o' or a == 'c' then
      return {{}}
    end
    return {0, 0, 0}
  end
  local st
  if a == 't' or a == 'l' or a == 'f' or a == 'F' then
    local l, u = match(v, '^(%d+):(%-?%d+)$')
    if l then
      st = {tonumber(l), tonumber(u), 0}
    end
  elseif a == 'g' then
    -- "<tat>:<updated>", or "<tat>" as written before the last change
    -- was kept (updated 0: no step can be seen).
    local t, u = match(v, '^(%-?%d+):(%-?%d+)$')
    if not t then
      t, u = match(v, '^(%-?%d+)$'), '0'
    end
    if t then
      st = {tonumber(t), tonumber(u), 0}
    end
  elseif a == 's' or a == 'k' then
    local l, u, pr = match(v, '^(%d+):(%-?%d+):(%d+)$')
    if l then
      st = {tonumber(l), tonumber(u), tonumber(pr)}
    end
  elseif a == 'o' or a == 'c' then
    local runs = {}
    for t, n in gmatch(v, '(%-?%d+):(%d+)') do
      runs[#runs + 1] = {tonumber(t), tonumber(n)}
    end
    if #runs > 0 then
      st = {runs}
    end
  end
  return st -- nil if v is malformed
end

-- encode formats a state for storage. %d goes through a C long (64 bits on
-- every Redis platform); tostring would print large doubles with 14
-- significant digits.
local function encode(st, p)
  local a = p.algo
  if a == 'g' then
    return format('%d:%d', st[1], st[2])
  elseif a == 's' or a == 'k' then
    return format('%d:%d:%d', st[1], st[2], st[3])
  elseif a == 'o' or a == 'c' then
    local parts = {}
    for i, r in ipairs(st[1]) do
      parts[i] = format('%d:%d', r[1], r[2])
    end
    return table.concat(parts, ',')
  end
  return format('%d:%d', st[1], st[2])
end

-- ---- Calendar window ----
-- State {count, period start, period end}, "<count>:<start>:<end>" (the
-- end is ratelimit.State.Prev: a period's length varies). Lua has no
-- time zones: the Go side appends to the params string the starts of four
-- consecutive calendar periods around its clock (ratelimit's
-- Limit.CalendarBounds), ":<b1>:<b2>:<b3>:<b4>", so [b1, b4) covers the
-- period holding the client's now and one whole period on either side
-- (at least 23 hours, for a day). A Redis clock within that range finds its
-- period among them, exactly as (*Limit).calSpan computes it; a stored
-- period later than it (the clock moved back) carries its own end. A time
-- outside it sets calendar_outside: the main section then answers with
-- the error 'rampmeter: clock outside calendar bounds at <now>' before
-- writing anything, and the Go side sends the call again with bounds
-- around that now.

local calendar_outside = false

-- cal_bounds returns the four period starts of p, parsed once from its
-- extra fields (what param_fields, defined further down, reads).
local function cal_bounds(p)
  if not p.bounds then
    local b = {}
    for v in gmatch(p.rest or '', ':(%-?%d+)') do
      b[#b + 1] = tonumber(v)
    end
    for i = #b + 1, 4 do
      b[i] = 0 -- malformed: every time is outside
    end
    p.bounds = b
  end
  return p.bounds
end

-- cal_span returns the period holding t, [start, next), or nil outside
-- the bounds.
local function cal_span(t, p)
  local b = cal_bounds(p)
  for i = 1, 3 do
    if b[i] <= t and t < b[i + 1] then
      return b[i], b[i + 1]
    end
  end
  return nil
end

-- cal_next returns the start of the period after the one starting at s (a
-- bound), or nil.
local function cal_next(s, p)
  local b = cal_bounds(p)
  for i = 1, 3 do
    if b[i] == s then
      return b[i + 1]
    end
  end
  return nil
end

-- calWindow: the period holding now, or the stored one when it is later
-- (a clock that moved backwards stays in the stored window, whose end the
-- state holds). Returns nil, and sets calendar_outside, when now is not
-- within the bounds.
local function cal_window(st, now, p)
  local start, stop = cal_span(now, p)
  if start and st[2] > start then
    start, stop = st[2], st[3]
    if stop <= start then -- a state without its end
      stop = cal_next(start, p)
    end
  end
  if not stop then
    calendar_outside = true
    return nil
  end
  return start, stop
end

-- calRoll: move to the window [w, stop).
local function cal_roll(st, w, stop)
  if w ~= st[2] then
    st[1], st[2] = 0, w
  end
  st[3] = stop
end

-- describeCalendar: remaining = quota - count when positive, reset = the
-- time to the period's end while it counts anything.
local function describe_calendar(st, now, stop, p)
  local remaining, reset = 0, 0
  if st[1] < p.quota then
    remaining = p.quota - st[1]
  end
  if st[1] > 0 and stop > now then
    reset = stop - now
  end
  return remaining, reset
end

-- calendarTake. Returns allowed, remaining, reset, retry, delay.
local function calendar_take(st, now, cost, p)
  local start, stop = cal_window(st, now, p)
  if not start then
    return 0, 0, 0, 0, 0
  end
  cal_roll(st, start, stop)
  local allowed, retry = 0, 0
  if cost > p.quota then
    retry = -1
  elseif st[1] + cost > p.quota then
    retry = stop - now
  else
    allowed = 1
    st[1] = st[1] + cost
  end
  local remaining, reset = describe_calendar(st, now, stop, p)
  return allowed, remaining, reset, retry, 0
end

-- calendarAdjust: credited to the current period when charged in it (a
-- charge time before the bounds is an earlier period); a refund for an
-- earlier period is dropped, an overage charged to the current one.
-- Counts stay in [0, 2 quota], as windowAdjust's. Returns remaining, reset.
local function calendar_adjust(st, now, charged_at, delta, p)
  local start, stop = cal_window(st, now, p)
  if not start then
    return 0, 0
  end
  cal_roll(st, start, stop)
  local limit = 2 * p.quota
  local cw = cal_span(charged_at, p) -- nil: before the bounds
  if cw == st[2] or delta > 0 then
    st[1] = min(max(st[1] + delta, 0), limit)
  end
  return describe_calendar(st, now, stop, p)
end

-- calendarExpires: a count expires with its period (a decided state
-- always holds its end).
local function calendar_expires(st, p)
  if st[1] == 0 then
    return st[2]
  elseif st[3] > st[2] then
    return st[3]
  end
  return cal_next(st[2], p) or st[2]
end

-- expires_at mirrors (*Limit).ExpiresAt.
local function expires_at(st, p)
  local a = p.algo
  if a == 'g' then
    return st[1]
  elseif a == 'o' or a == 'c' then
    local runs = st[1]
    if #runs == 0 then
      return 0
    end
    return runs[#runs][1] + p.period
  elseif a == 't' or a == 'l' then
    return st[2] + ceildiv(st[1], p.drain)
  elseif a == 'k' then
    return calendar_expires(st, p)
  end
  return window_expires(st, p)
end

-- take mirrors TakeAt; it updates st and returns allowed, remaining,
-- reset, retry, delay.
local function take(st, now, cost, p)
  local a = p.algo
  if a == 't' or a == 'l' then
    local t, lag = bucket_step(st, now)
    local allowed, retry, delay = bucket_take(st, t, cost, p)
    local remaining, reset = describe_bucket(st, p)
    retry, reset, delay = add_lag(retry, reset, delay, lag)
    return allowed, remaining, reset, retry, delay
  elseif a == 'g' then
    local t, lag = gcra_step(st, now)
    local b = gcra_bucket(st, t)
    local allowed, retry, delay = bucket_take(b, t, cost, p)
    local remaining, reset = describe_bucket(b, p)
    gcra_state(b, st, t)
    retry, reset, delay = add_lag(retry, reset, delay, lag)
    return allowed, remaining, reset, retry, delay
  elseif a == 'k' then
    return calendar_take(st, now, cost, p)
  end
  local allowed, retry, delay
  if a == 'o' then
    allowed, retry, delay = log_take(st, now, cost, p)
  elseif a == 'c' then
    allowed, retry, delay = slots_take(st, now, cost, p)
  else
    allowed, retry, delay = window_take(st, now, cost, p)
    local remaining, reset = describe_window(st, now, p)
    return allowed, remaining, reset, retry, delay
  end
  local remaining, reset = describe_log(st[1], now, p)
  return allowed, remaining, reset, retry, delay
end

-- adjust mirrors AdjustFrom; it updates st and returns remaining, reset.
local function adjust(st, now, charged_at, delta, p)
  if p.algo == 'c' then -- charged_at names a slot: used as given
    slots_adjust(st, now, charged_at, delta, p)
    return describe_log(st[1], now, p)
  end
  if charged_at <= 0 or charged_at > now then
    charged_at = now
  end
  local a = p.algo
  if a == 'g' then
    local t, lag = gcra_step(st, now)
    local b = gcra_bucket(st, t)
    bucket_adjust(b, t, delta, p)
    gcra_state(b, st, t)
    local remaining, reset = describe_bucket(b, p)
    local _, r = add_lag(0, reset, 0, lag)
    return remaining, r
  elseif a == 'o' then
    log_adjust(st, now, charged_at, delta, p)
    return describe_log(st[1], now, p)
  elseif a == 't' or a == 'l' then
    local t, lag = bucket_step(st, now)
    bucket_adjust(st, t, delta, p)
    local remaining, reset = describe_bucket(st, p)
    local _, r = add_lag(0, reset, 0, lag)
    return remaining, r
  elseif a == 'k' then
    return calendar_adjust(st, now, charged_at, delta, p)
  end
  window_adjust(st, now, charged_at, delta, p)
  return describe_window(st, now, p)
end

-- ---- Call shape: parameters, reply ----

-- parse_params decodes a request's params string (see the header) into the
-- table the algorithm functions read, or nil if it is malformed.
local function parse_params(s)
  local a, sc, dr, bu, qu, pe, rest = match(s, '^(%a)(%d+):(%d+):(%d+):(%d+):(%d+)(.*)$')
  if not a then
    return nil
  end
  return {algo = a, scale = tonumber(sc), drain = tonumber(dr), burst = tonumber(bu),
    quota = tonumber(qu), period = tonumber(pe), rest = rest}
end

-- param_fields returns the extra ":<integer>" fields of p (after period)
-- as a list of numbers, for algorithms that need more parameters.
local function param_fields(p)
  local f = {}
  for v in gmatch(p.rest, ':(%-?%d+)') do
    f[#f + 1] = tonumber(v)
  end
  return f
end

-- reply_of formats the five results of one request for the reply string.
-- An admission without wait (allowed 1, retry 0, delay 0: most calls)
-- writes its three constant fields as text: each %d is a C sprintf, about
-- a thousand instructions of Redis time, and the text is the same.
local function reply_of(allowed, remaining, reset, retry, delay)
  if allowed == 1 and retry == 0 and delay == 0 then
    return format('1 %d %d 0 0', remaining, reset)
  end
  return format('%d %d %d %d %d', allowed, remaining, reset, retry, delay)
end

-- The batch's view of its keys (WithPipelining; see the batch section of
-- run), nil outside a batch. Within a batch, get and store go through it:
-- a key is read from Redis once, on its first request, and what its
-- requests store is kept here, so a later request on the key reads what
-- the earlier one stored, exactly as it would have read it back from
-- Redis, and only the last value of each key is written, at the end
-- (view_flush). view.val[key]: the key's value for the requests to come
-- (a string, false: no key, or true: a bucket state bucket_one keeps
-- decoded, level view.lv[key] and updated view.up[key], formatted as
-- encode would when read by get or written); view.had[key]: whether Redis held it;
-- view.px[key]: the expiry (ms) of the value stored last; view.order: the
-- keys stored, in the order of their first store.
local view

-- view_put records that key now holds v (false: no key) with expiry px ms.
local function view_put(key, v, px)
  local w = view
  if w.px[key] == nil then
    w.order[#w.order + 1] = key
  end
  w.val[key], w.px[key] = v, px
end

-- store writes st, the charged state of key under p, with its expiry, or
-- deletes the key when st is equivalent to a key never seen; existed says
-- whether the key held a state before the call. It returns an error
-- message if Redis refused the write (OOM), nil otherwise. In a batch it
-- writes to the view, which never fails.
local function store(key, st, p, existed, now, margin)
  local ttl = expires_at(st, p) - now
  if view then
    if ttl <= 0 then
      if existed then
        view_put(key, false, 0)
      end
    else
      view_put(key, encode(st, p), ceildiv(ttl, 1000) + margin)
    end
    return nil
  end
  local r
  if ttl <= 0 then
    -- Equivalent to a key never seen: forget it.
    if not existed then
      return nil
    end
    r = redis.pcall('DEL', key)
  else
    -- Whole milliseconds, rounded up: the key must outlive its state.
    r = redis.pcall('SET', key, encode(st, p), 'PX', format('%d', ceildiv(ttl, 1000) + margin))
  end
  if type(r) == 'table' and r.err then
    return r.err
  end
  return nil
end

-- view_flush writes the view's keys to Redis, in order; it returns nil,
-- or the position in view.order of the key whose write Redis refused,
-- Redis's error, and whether any key before it was written (the keys
-- after it are not). Redis refuses only a script's first write (OOM under
-- maxmemory is checked until the script has written something), so a
-- refusal comes when nothing has been written.
local function view_flush(w)
  local wrote = false
  for i, key in ipairs(w.order) do
    local v, r = w.val[key], nil
    if v == true then
      v = format('%d:%d', w.lv[key], w.up[key])
    end
    if v then
      r = redis.pcall('SET', key, v, 'PX', format('%d', w.px[key]))
    elseif w.had[key] then
      r = redis.pcall('DEL', key)
    end
    if type(r) == 'table' and r.err then
      return i, r.err, wrote
    end
    wrote = wrote or r ~= nil
  end
  return nil
end

-- ---- Main ----

-- The call being decided: its clock (µs), its expiry margin (ms), its
-- KEYS and ARGV. run sets them first; Redis runs one call at a time.
local now, margin, KEYS_, ARGV_

-- line_now: a call's reply starts with now (a lone call); in a batch the
-- reply's first line gives now once for all its calls, and each call's
-- line holds only its requests' results.
local line_now = true

-- Parsed params by params string: the algorithm functions only read p
-- (cal_bounds adds p.bounds, a function of the string). As a Redis Function
-- the table outlives the call, so a limit's params are parsed once per
-- server, not once per call; it is emptied when it holds MAX_PARSED
-- strings (calendar params change every period).
local MAX_PARSED = 512
local parsed, nparsed = {}, 0
local function params_of(s)
  local p = parsed[s]
  if not p then
    p = parse_params(s)
    if p then
      if nparsed >= MAX_PARSED then
        parsed, nparsed = {}, 0
      end
      parsed[s], nparsed = p, nparsed + 1
    end
  end
  return p
end

-- get reads key's stored string (false when absent), or returns nil and
-- Redis's error (a key of another type).
local function get(key)
  local w = view
  if w then
    local v = w.val[key]
    if v == true then -- kept decoded by bucket_one
      return format('%d:%d', w.lv[key], w.up[key])
    elseif v ~= nil then
      return v
    end
  end
  local v = redis.pcall('GET', key)
  if type(v) == 'table' and v.err then
    return nil, v.err
  end
  if w then
    w.val[key], w.had[key] = v, v and true
  end
  return v
end

local function malformed_params(i)
  return 'ERR rampmeter: malformed limit parameters for request ' .. i
end

-- calendar_outside_error: the Redis clock is outside the calendar bounds
-- the Go side sent (see the calendar window). Nothing has been written for
-- the call. The flag is cleared for the next call of a batch.
local function calendar_outside_error()
  calendar_outside = false
  return format('ERR rampmeter: clock outside calendar bounds at %d', now)
end

local function malformed_state(key)
  -- Not written by this script (or by another version of it): refuse to
  -- guess. Nothing has been written yet.
  return 'ERR rampmeter: malformed rate-limit state at key ' .. key
end

-- The inlined bucket Takes (bucket_one, bucket_stack): a Take of token-
-- or leaky-bucket requests on distinct keys, the common call, decided on
-- plain numbers, without the generic dispatch and its tables. They compute
-- exactly what decide's generic path computes with decode, take ('t',
-- 'l') and store: the same steps, the same integers (a test holds them to
-- it). In a batch the view keeps such a key's state decoded (w.lv and w.up:
-- level and updated), so a key's later calls in the batch neither parse
-- nor format it (see view).

-- one_line is the reply line of a single request's decision: now first
-- when the call is alone (line_now), since a batch's reply gives now once.
-- An admission without wait formats only its variable fields (reply_of).
local function one_line(allowed, remaining, reset, retry, delay)
  if not line_now then
    return reply_of(allowed, remaining, reset, retry, delay)
  elseif allowed == 1 and retry == 0 and delay == 0 then
    return format('%d 1 %d %d 0 0', now, remaining, reset)
  end
  return format('%d %d %d %d %d %d', now, allowed, remaining, reset, retry, delay)
end

-- bucket_read returns key's bucket state (level, updated; 0, 0 when
-- absent) and its stored value (v: the existed of store), or nil and an
-- error.
local function bucket_read(key)
  local w = view
  local v
  if w then
    v = w.val[key]
    if v == true then
      return w.lv[key], w.up[key], true
    end
  end
  if v == nil then
    v = redis.pcall('GET', key)
    if type(v) == 'table' and v.err then
      return nil, v.err
    end
    if w then
      w.val[key], w.had[key] = v, v and true
    end
  end
  if not v then
    return 0, 0, v
  end
  local l, u = match(v, '^(%d+):(%-?%d+)$')
  -- A number beyond what the Lua engine converts (gopher-lua's tonumber
  -- gives nil past int64) is as malformed as a state that does not match.
  local ln, un = l and tonumber(l), u and tonumber(u)
  if not ln or not un then
    return nil, malformed_state(key)
  end
  return ln, un, v
end

-- bucket_eval is take() of a bucket on the state (level, upd) at now:
-- bucketStep, bucketTake, describeBucket, addLag. It returns allowed,
-- remaining, reset, retry, delay (the waits lengthened by the lag), then
-- the state after the Take (level, updated), whether the clock stepped
-- back from it (rebased), and its time to full (ExpiresAt - updated).
local function bucket_eval(level, upd, p, cost)
  -- bucketStep: within STEP_TOL of a later updated, decide at it (lag);
  -- beyond, rebase to now (stepped).
  local t, lag, stepped = now, 0, false
  if now < upd then
    if upd - now <= STEP_TOL then
      t, lag = upd, upd - now
    else
      upd, stepped = now, true
    end
  end
  local drain, scale = p.drain, p.scale
  -- drainTo(t)
  if t > upd then
    local elapsed = t - upd
    if elapsed >= ceildiv(level, drain) then
      level = 0
    else
      level = level - elapsed * drain
    end
    upd = t
  end
  -- bucketTake
  local capacity = p.burst * scale
  local allowed, retry, delay = 1, 0, 0
  if cost > p.burst then
    allowed, retry = 0, -1
  else
    local need = level + cost * scale
    if need > capacity then
      allowed, retry = 0, ceildiv(need - capacity, drain)
    else
      if p.algo == 'l' then
        delay = ceildiv(level, drain)
      end
      level = need
    end
  end
  -- describeBucket
  local remaining = 0
  if level < capacity then
    remaining = floordiv(capacity - level, scale)
  end
  local full = ceildiv(level, drain)
  local reset = full
  if lag > 0 then -- the call only after a clock step back
    retry, reset, delay = add_lag(retry, reset, delay, lag)
  end
  return allowed, remaining, reset, retry, delay, level, upd, stepped, full
end

-- bucket_write is store() of the bucket state (level, upd), full µs from
-- full, on key, which held v before the call. It returns an error message
-- if Redis refused the write, nil otherwise.
local function bucket_write(key, level, upd, full, v)
  local ttl = upd + full - now
  local w = view
  if w then
    if ttl > 0 then
      if w.px[key] == nil then
        w.order[#w.order + 1] = key
      end
      w.val[key], w.lv[key], w.up[key], w.px[key] = true, level, upd, ceildiv(ttl, 1000) + margin
    elseif v then
      view_put(key, false, 0)
    end
    return nil
  end
  local r
  if ttl > 0 then
    r = redis.pcall('SET', key, format('%d:%d', level, upd), 'PX', format('%d', ceildiv(ttl, 1000) + margin))
  elseif v then
    r = redis.pcall('DEL', key)
  end
  if type(r) == 'table' and r.err then
    return r.err
  end
  return nil
end

-- bucket_one decides a Take of one bucket request on key under p.
-- Returns the reply, or nil and an error.
local function bucket_one(key, p, cost)
  local level, upd, v = bucket_read(key)
  if not level then
    return nil, upd
  end
  local allowed, remaining, reset, retry, delay, l, u, stepped, full = bucket_eval(level, upd, p, cost)
  if (allowed == 1 and cost ~= 0) or stepped then
    local err = bucket_write(key, l, u, full, v)
    if err then
      return nil, err
    end
  end
  return one_line(allowed, remaining, reset, retry, delay)
end

-- bucket_stack decides a Take of n bucket requests on distinct keys, all
-- or nothing, as decide's generic path does: each request decided in
-- order on its key; if one is refused nothing is charged, and every
-- request reports the remaining and reset of its uncharged state at now
-- (a state the clock stepped back from is written rebased), with the
-- allowed, retry and delay decided in order. ps[i], costs[i]: request
-- i's params and cost. Returns the reply, or nil and an error.
local function bucket_stack(kb, n, ps, costs)
  -- f: per request, 10 fields: the state read (level, updated, value),
  -- then allowed, remaining, reset, retry, delay, and the state after.
  local f = {}
  local refused = false
  for i = 1, n do
    local key = KEYS_[kb + i]
    local level, upd, v = bucket_read(key)
    if not level then
      return nil, upd
    end
    local allowed, remaining, reset, retry, delay, l, u, stepped, full = bucket_eval(level, upd, ps[i], costs[i])
    if allowed == 0 then
      refused = true
    end
    local o = 12 * (i - 1)
    f[o + 1], f[o + 2], f[o + 3] = level, upd, v
    f[o + 4], f[o + 5], f[o + 6], f[o + 7], f[o + 8] = allowed, remaining, reset, retry, delay
    f[o + 9], f[o + 10], f[o + 11], f[o + 12] = l, u, stepped, full
  end
  local out = {}
  if line_now then
    out[1] = format('%d', now)
  end
  for i = 1, n do
    local o = 12 * (i - 1)
    local key = KEYS_[kb + i]
    local remaining, reset = f[o + 5], f[o + 6]
    if refused then
      local _, rem, res, _, _, l, u, stepped, full = bucket_eval(f[o + 1], f[o + 2], ps[i], 0)
      remaining, reset = rem, res
      if stepped then
        local err = bucket_write(key, l, u, full, f[o + 3])
        if err then
          return nil, err
        end
      end
    elseif costs[i] ~= 0 or f[o + 11] then
      local err = bucket_write(key, f[o + 9], f[o + 10], f[o + 12], f[o + 3])
      if err then
        return nil, err
      end
    end
    out[#out + 1] = reply_of(f[o + 4], remaining, reset, f[o + 7], f[o + 8])
  end
  return table.concat(out, ' ')
end

-- decide decides one Store call of n requests, a Take (all or nothing)
-- when is_take, else an Adjust: request i has the key KEYS_[kb + i] and its
-- arguments from ARGV_[ab + 1 + stride (i - 1)]. It returns the call's reply
-- string, or nil and an error message.
local function decide(kb, ab, n, is_take)
  local stride = 3 -- arguments per request
  if is_take then
    stride = 2
  end
  if n == 1 then
    -- One request, the common case: no bookkeeping of repeated keys. A
    -- refused Take leaves st uncharged, so its remaining and reset are
    -- already those of the stored state at now.
    local key = KEYS_[kb + 1]
    local p = params_of(ARGV_[ab + 1])
    if not p then
      return nil, malformed_params(1)
    end
    local cost = tonumber(ARGV_[ab + 2])
    if is_take and (p.algo == 't' or p.algo == 'l') then
      return bucket_one(key, p, cost)
    end
    local v, err = get(key)
    if err then
      return nil, err
    end
    local st = decode(v, p)
    if not st then
      return nil, malformed_state(key)
    end
    local allowed, remaining, reset, retry, delay = 1, 0, 0, 0, 0
    if is_take then
      allowed, remaining, reset, retry, delay = take(st, now, cost, p)
    else
      remaining, reset = adjust(st, now, tonumber(ARGV_[ab + 3]), cost, p)
    end
    if calendar_outside then
      return nil, calendar_outside_error()
    end
    -- A refused Take's st is the stored state brought to now: written
    -- only if the clock stepped back from it (Limit.ClockStepped).
    if (allowed == 1 and cost ~= 0) or st.stepped then
      err = store(key, st, p, v, now, margin)
      if err then
        return nil, err
      end
    end
    return one_line(allowed, remaining, reset, retry, delay)
  end

  if is_take then
    -- Buckets on distinct keys (a stack of limits, each its own ID): the
    -- inlined path.
    local ps, costs = {}, {}
    local inline = true
    for i = 1, n do
      local p = params_of(ARGV_[ab + 1 + 2 * (i - 1)])
      if not p or (p.algo ~= 't' and p.algo ~= 'l') then
        inline = false
        break
      end
      local key = KEYS_[kb + i]
      for j = 1, i - 1 do
        if KEYS_[kb + j] == key then
          inline = false
          break
        end
      end
      if not inline then
        break
      end
      ps[i], costs[i] = p, tonumber(ARGV_[ab + 2 + 2 * (i - 1)])
    end
    if inline then
      return bucket_stack(kb, n, ps, costs)
    end
  end

  -- Per request: its params; per distinct key (by the first request on it):
  -- the stored string (for peeks after a refusal), the working state, and
  -- whether a request changed it (the params to write it with).
  local params, first = {}, {}
  local raw, work, dirty = {}, {}, {}
  local results = {}
  local refused = false

  for i = 1, n do
    local key = KEYS_[kb + i]
    local b = ab + 1 + stride * (i - 1)
    local p = params_of(ARGV_[b])
    if not p then
      return nil, malformed_params(i)
    end
    local cost = tonumber(ARGV_[b + 1])
    params[i] = p

    -- The first request on this key: calls stack a handful of limits, for
    -- which a look-back beats a table keyed by key name.
    local f = i
    for j = 1, i - 1 do
      if KEYS_[kb + j] == key then
        f = first[j]
        break
      end
    end
    first[i] = f
    local st = work[f]
    if f == i then
      local v, err = get(key)
      if err then
        return nil, err
      end
      raw[i] = v
      st = decode(v, p)
      if not st then
        return nil, malformed_state(key)
      end
      work[i] = st
    end

    local allowed, remaining, reset, retry, delay = 1, 0, 0, 0, 0
    if is_take then
      allowed, remaining, reset, retry, delay = take(st, now, cost, p)
      if allowed == 0 then
        refused = true
      end
    else
      remaining, reset = adjust(st, now, tonumber(ARGV_[b + 2]), cost, p)
    end
    if calendar_outside then
      return nil, calendar_outside_error()
    end
    if cost ~= 0 or st.stepped then
      dirty[f] = p
    end
    results[i] = {allowed, remaining, reset, retry, delay}
  end

  if refused then
    -- All or nothing: charge nothing. Allowed, retry and delay stay as
    -- evaluated in order, but every request reports the stored, uncharged
    -- state of its key at now (what a peek would see): the charges of
    -- earlier requests in this call were not made. A stored state that
    -- the clock stepped back from is written rebased (Limit.ClockStepped),
    -- or the wait told would not hold.
    for i = 1, n do
      local p = params[i]
      local v = raw[first[i]]
      local peek = decode(v or nil, p)
      local _, remaining, reset = take(peek, now, 0, p)
      if peek.stepped and first[i] == i then
        local err = store(KEYS_[kb + i], peek, p, v, now, margin)
        if err then
          return nil, err
        end
      end
      results[i][2] = remaining
      results[i][3] = reset
    end
  else
    for i = 1, n do
      local p = dirty[i]
      if p then
        local err = store(KEYS_[kb + i], work[i], p, raw[i], now, margin)
        if err then
          return nil, err
        end
      end
    end
  end

  local out, o = {}, 0
  if line_now then
    out[1], o = format('%d', now), 1
  end
  for i = 1, n do
    local r = results[i]
    out[i + o] = reply_of(r[1], r[2], r[3], r[4], r[5])
  end
  return table.concat(out, ' ')
end

-- decide_batch decides the calls of a batch (see run) in order and
-- returns their replies (a call's reply, or "!" and its error message) and
-- where each call's keys start in KEYS and how many it has. In the compact
-- form ("B") every call is a Take of one request, given by its params and
-- cost alone.
local function decide_batch(argv, compact)
  local replies, kbs, ns = {}, {}, {}
  local kb, ab = 0, 4
  for c = 1, tonumber(argv[4]) do
    local is_take, n = true, 1
    if not compact then
      is_take = argv[ab + 1] == 't'
      n = tonumber(argv[ab + 2])
      ab = ab + 2
    end
    local r, err = decide(kb, ab, n, is_take)
    replies[c] = r or ('!' .. err)
    kbs[c], ns[c] = kb, n
    kb = kb + n
    if is_take then
      ab = ab + 2 * n
    else
      ab = ab + 3 * n
    end
  end
  return replies, kbs, ns
end

-- run decides one script call (a Store call, or a batch) of keys and argv
-- (the KEYS and ARGV of the header) and returns its reply.
local function run(keys, argv)
  KEYS_, ARGV_ = keys, argv
  calendar_outside = false
  view = nil
  if argv[2] == '' then
    local t = redis.call('TIME')
    -- seconds x 1e6 + microseconds: about 1.8e15 today, exact until the
    -- year 2255 (2^53 µs).
    now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  else
    now = tonumber(argv[2])
  end
  margin = tonumber(argv[3])

  local mode = argv[1]
  line_now = mode ~= 'b' and mode ~= 'B'
  if line_now then
    local r, err = decide(0, 3, #keys, mode == 't')
    if not r then
      return redis.error_reply(err)
    end
    return r
  end

  -- A batch (WithPipelining): ARGV[4] calls, each given by its mode ("t" or
  -- "a") and its number of requests n, then its requests' arguments; its
  -- keys follow the previous call's in KEYS. In the compact form ("B")
  -- every call is a Take of one request, given by its two arguments alone.
  -- The calls are decided in order, each as if alone, at one now: a call
  -- that fails (a malformed state, a key of another type) fails alone, as
  -- a lone call would. The reply is a line with now (µs), then one line per
  -- call: the call's reply without now (line_now), or "!" and the error
  -- message.
  --
  -- The calls read and write through the view (see view): each key is read
  -- once and written once, after the last call, with the value and expiry
  -- the last call on it stored. Every call reads what the calls before it
  -- stored, so each decides exactly as if the calls had run one by one.
  -- Nothing is written before every call is decided, so an error that ends
  -- the script leaves no call applied, and none half-applied. Should Redis
  -- refuse the first write (OOM under maxmemory: it refuses only a script's
  -- first write), nothing has been written, and the batch is decided again
  -- without the view, each call writing as it goes, as one by one: each
  -- call that writes then fails alone, as it would alone.
  view = {val = {}, had = {}, px = {}, order = {}, lv = {}, up = {}}
  local replies, kbs, ns = decide_batch(argv, mode == 'B')
  local w = view
  view = nil
  local bad, err, wrote = view_flush(w)
  if bad and not wrote then
    calendar_outside = false
    replies = decide_batch(argv, mode == 'B')
  elseif bad then
    -- Not reached with Redis (see view_flush): the calls on a key not
    -- written fail with Redis's error.
    local unwritten = {}
    for i = bad, #w.order do
      unwritten[w.order[i]] = true
    end
    for c = 1, #replies do
      for i = kbs[c] + 1, kbs[c] + ns[c] do
        if unwritten[keys[i]] then
          replies[c] = '!' .. err
          break
        end
      end
    end
  end
  return format('%d\n', now) .. table.concat(replies, '\n')
end

-- ---- Entry ----
-- As a script (EVALSHA, EVAL) the call's KEYS and ARGV are globals and the
-- last line runs it. As a Redis Function (FCALL, Redis 7+) the Go side loads
-- this file as a library: it adds the "#!lua name=..." line and puts
-- redis.register_function in place of the last line, so every definition
-- above runs once, at FUNCTION LOAD, instead of once per call.
return run(KEYS, ARGV)
