package redisstore

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	_ "embed" // the Lua script
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"hash/maphash"
	"math/bits"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/redis/go-redis/v9"

	"github.com/rampmeter/ratelimit"
)

// ErrInvalidOption is wrapped by the errors New returns for a nil client or
// an invalid Option.
var ErrInvalidOption = errors.New("redisstore: invalid option")

// DefaultPrefix is the key prefix used unless WithPrefix says otherwise.
const DefaultPrefix = "rampmeter:"

// defaultKeySecret is the HMAC key used without WithKeySecret. It is public
// (it is in this source file), so it only keeps raw caller keys out of Redis;
// it does not stop someone who can read Redis from testing guesses.
var defaultKeySecret = []byte("rampmeter/redisstore/v1 public key-hash salt")

// tagLen is the length of the hash tag: 22 base64url characters carry 132
// bits of the HMAC, far beyond any birthday collision in practice.
const tagLen = 22

//go:embed ratelimit.lua
var luaSource string

// scriptHash is the script's SHA-1, for EVALSHA.
var scriptHash = redis.NewScript(luaSource).Hash()

// The bound on |cost| sent to Lua. Any |cost| above 2^52 already saturates
// every rule (an Adjust never stores more than 2^52 or less than 0, and a
// Take cost above 2^51 exceeds every burst and quota), so clamping to 2^53
// changes no result and keeps the number exact as a Lua double.
const maxLuaCost = int64(1) << 53

// Option configures a Store; see New.
type Option func(*config) error

type config struct {
	prefix        string
	margin        time.Duration
	now           func() time.Time
	secret        []byte
	ignoreCtxTime bool // AllowContextTimeoutDisabled
	keyCache      int  // WithKeyCache, rounded up to a power of two; 0: off
	pipelined     bool // WithPipelining
}

// WithPipelining makes concurrent calls share round trips, each call still
// decided exactly as without the option (atomic, all or nothing).
//
// On one server (a *redis.Client, standalone or Sentinel) the store
// coalesces the calls that arrive while a batch is on its way into one
// script call in batch mode, up to 128 calls: one round trip, one script
// invocation and one clock reading (Redis TIME, or the latest WithClock
// time its callers read) for all of them, each call decided as if alone, in
// arrival order (a call that fails fails alone). Within a batch each Redis
// key is read once and written once, after every call is decided, so many
// calls on one hot key cost one read and one write; nothing is written if
// the script fails part way. A call that finds no batch on its way is sent
// at once as an ordinary script call, so a lone caller waits as long as
// without the option. On a *redis.ClusterClient, whose callers live on
// different slots, each call stays its own script call and the client's
// asynchronous go-redis AutoPipeliner (Client.AsyncAutoPipeline, configured
// by Options.AutoPipelineOptions; go-redis marks it experimental) writes
// the calls bound for one master together.
//
// The caller's deadline still bounds every call: a call whose context ended
// before its batch was formed is never sent; one whose context ends later
// returns its error at once, and may or may not be decided by Redis (as
// after a timeout without pipelining); nothing is ever re-sent. New returns
// an error wrapping ErrInvalidOption for a client that cannot pipeline this
// way (a *redis.Ring).
func WithPipelining() Option {
	return func(c *config) error {
		c.pipelined = true
		return nil
	}
}

// DefaultKeyCache is the number of entries of the key cache unless
// WithKeyCache says otherwise.
const DefaultKeyCache = 8192

// WithKeyCache sets the number of (caller key, limit) pairs whose Redis key
// names the store keeps, so that a caller seen recently costs no HMAC and
// no allocation for its key names (default DefaultKeyCache, 8192; 0 turns
// the cache off). n is rounded up to a power of two; it must be between 0
// and 2^20. The cache is four-way set-associative: a pair hashes to a set
// of four slots (all n slots when n < 4), and a new pair takes the set's
// first slot, moving each entry of the set one slot down and evicting the
// last's. It holds at most one entry of about 200 bytes plus the caller key
// per slot, so about 2 MB when 8192 slots are full; caller keys longer
// than 256 bytes are never kept. Keys are kept in process memory only,
// never in Redis.
func WithKeyCache(n int) Option {
	return func(c *config) error {
		if n < 0 || n > 1<<20 {
			return fmt.Errorf("%w: key cache size %d out of [0, 2^20]", ErrInvalidOption, n)
		}
		c.keyCache = 0
		if n > 0 {
			c.keyCache = 1 << bits.Len(uint(n-1))
		}
		return nil
	}
}

// AllowContextTimeoutDisabled lets New accept a client whose
// ContextTimeoutEnabled option is false, or a client whose options New
// cannot read (a UniversalClient other than *redis.Client,
// *redis.ClusterClient and *redis.Ring). Such a client ignores the
// caller's deadline once a command is on the wire: a call to a Redis that
// hangs lasts the client's ReadTimeout (5 s by default), whatever the
// deadline the rate limiter set. Use it only behind a deadline of your own
// that does not wait for the call (store/resilient's guard is one), or
// when a ReadTimeout shorter than that deadline bounds every call.
func AllowContextTimeoutDisabled() Option {
	return func(c *config) error {
		c.ignoreCtxTime = true
		return nil
	}
}

// WithPrefix sets the prefix of every Redis key the store writes (default
// DefaultPrefix, "rampmeter:"). Use distinct prefixes to keep applications
// or environments sharing one Redis apart. The prefix must be non-empty and
// must not contain '{' or '}': the store puts its own Cluster hash tag right
// after it, and Redis Cluster hashes the first {...} of a key.
func WithPrefix(prefix string) Option {
	return func(c *config) error {
		switch {
		case prefix == "":
			return fmt.Errorf("%w: empty key prefix", ErrInvalidOption)
		case strings.ContainsAny(prefix, "{}"):
			return fmt.Errorf("%w: key prefix %q contains '{' or '}' (the store adds its own Cluster hash tag)", ErrInvalidOption, prefix)
		}
		c.prefix = prefix
		return nil
	}
}

// WithExpiryMargin keeps every key d longer than the time until its state is
// equivalent to a key never seen (default 0). A state kept past that time
// decides exactly like a fresh key, so a margin changes no decision; it only
// costs memory. Use it with WithClock when the given clock may run behind
// the server's (a frozen test clock, skewed hosts): keys expire by the
// server's clock, and without a margin such a server can forget a key early.
// d must be between 0 and 24 hours; it is rounded up to whole milliseconds.
func WithExpiryMargin(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 || d > 24*time.Hour {
			return fmt.Errorf("%w: expiry margin %v out of [0, 24h]", ErrInvalidOption, d)
		}
		c.margin = d
		return nil
	}
}

// WithClock makes the store decide by now instead of the Redis server clock
// (TIME). By default every instance reads one clock, Redis's, so instances
// whose clocks disagree still agree on every decision. Use WithClock for
// tests with a fake clock, or when every instance runs NTP-disciplined
// clocks you trust. now must not be nil; its result is taken to microsecond
// precision.
//
// Keys still expire by the server's own clock (PEXPIRE), after the time
// until the limit is full again as the given clock measured it. With a fake
// clock that runs slower than real time (a frozen test clock), a real
// server may therefore forget a key before the fake clock says it is full,
// and admit more than the model would; miniredis, whose expiry follows its
// SetTime clock, and the memory store do not. Tests that drive a real server
// with a fake clock must keep the fake time ahead of, or close to, real time.
func WithClock(now func() time.Time) Option {
	return func(c *config) error {
		if now == nil {
			return fmt.Errorf("%w: nil clock", ErrInvalidOption)
		}
		c.now = now
		return nil
	}
}

// WithKeySecret sets the HMAC-SHA256 key with which caller keys (API keys,
// IP addresses) are hashed into Redis keys. Raw caller keys never reach
// Redis either way, but the default key is public: whoever can read Redis
// can hash guesses of low-entropy caller keys (IP addresses, short IDs) and
// recognise them. A secret of at least 32 random bytes, shared by every
// instance, stops that offline guessing. Changing the secret starts every
// caller afresh (their state is under new keys and the old keys expire).
// The secret must not be empty; it is copied.
func WithKeySecret(secret []byte) Option {
	return func(c *config) error {
		if len(secret) == 0 {
			return fmt.Errorf("%w: empty key secret", ErrInvalidOption)
		}
		c.secret = append([]byte(nil), secret...)
		return nil
	}
}

// Store is a ratelimit.Store kept in Redis and shared by every process that
// uses the same Redis, key prefix and key secret. It is safe for concurrent
// use. See the package documentation for its keys, clock and failure
// behaviour.
type Store struct {
	client   redis.UniversalClient
	prefix   string
	now      func() time.Time // nil: Redis TIME
	marginMs int64            // WithExpiryMargin, in ms
	sharded  bool             // Cluster or Ring: one caller key per call
	hmacs    sync.Pool        // of *hasher, HMAC-SHA256 keyed with the secret

	// calSkew is the Redis clock minus this host's, in µs, as the last
	// calendar call that missed its bounds saw it (see calendarArgs).
	calSkew atomic.Int64

	marginArg any                            // marginMs, boxed once
	cache     []cacheSlot                    // WithKeyCache slots (a power of two), nil when off
	limits    [64]atomic.Pointer[limitEntry] // with the key cache: hash and params by limit ID's address
	limitsH   [64]atomic.Pointer[limitEntry] // the same by the ID's hash
	seed      maphash.Seed                   // of the cache's hashes
	ap        *redis.AutoPipeliner           // WithPipelining on a Cluster: the client's async autopipeliner
	batch     *batcher                       // WithPipelining on one server

	// noFunctions: the server cannot run the script as a Redis Function
	// (see fcallRefused), so every call is sent as a script (EVALSHA).
	noFunctions atomic.Bool
}

var _ ratelimit.Store = (*Store)(nil)

// New returns a Store on client, which may be a *redis.Client, a Sentinel
// failover client, a *redis.ClusterClient or a *redis.Ring. The client must
// have ContextTimeoutEnabled set, so that the caller's deadline ends a call
// to a hung Redis, unless AllowContextTimeoutDisabled is given; its
// MaxRetries does not matter to the store, whose scripts go-redis never
// re-sends (see the package documentation). New does not contact Redis. It
// returns an error wrapping ErrInvalidOption for a nil client, a client
// without ContextTimeoutEnabled, or an invalid option.
func New(client redis.UniversalClient, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: nil Redis client", ErrInvalidOption)
	}
	c := config{prefix: DefaultPrefix, secret: defaultKeySecret, keyCache: DefaultKeyCache}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: nil Option", ErrInvalidOption)
		}
		if err := o(&c); err != nil {
			return nil, err
		}
	}
	if !c.ignoreCtxTime {
		if err := checkClient(client); err != nil {
			return nil, err
		}
	}
	s := &Store{client: client, prefix: c.prefix, now: c.now, marginMs: (c.margin + time.Millisecond - 1).Milliseconds()}
	s.marginArg = s.marginMs
	switch client.(type) {
	case *redis.ClusterClient, *redis.Ring:
		s.sharded = true
	}
	switch _, ring := client.(*redis.Ring); {
	case !c.pipelined:
	case ring:
		return nil, fmt.Errorf("%w: WithPipelining does not support a *redis.Ring (its shards cannot share a batch, and it has no AutoPipeline)", ErrInvalidOption)
	case s.sharded:
		ap, err := client.AsyncAutoPipeline()
		if err != nil {
			return nil, fmt.Errorf("%w: WithPipelining: %T has no AutoPipeline: %w", ErrInvalidOption, client, err)
		}
		s.ap = ap
	default:
		s.batch = &batcher{s: s}
	}
	if c.keyCache > 0 {
		s.cache = make([]cacheSlot, c.keyCache)
		s.seed = maphash.MakeSeed()
	}
	secret := c.secret
	s.hmacs.New = func() any { return &hasher{mac: hmac.New(sha256.New, secret)} }
	return s, nil
}

// checkClient returns an error wrapping ErrInvalidOption unless client
// lets the context's deadline end a command (ContextTimeoutEnabled).
func checkClient(client redis.UniversalClient) error {
	var enabled bool
	switch c := client.(type) {
	case interface{ Options() *redis.Options }: // Client, Sentinel failover client
		enabled = c.Options().ContextTimeoutEnabled
	case interface{ Options() *redis.ClusterOptions }:
		enabled = c.Options().ContextTimeoutEnabled
	case interface{ Options() *redis.RingOptions }:
		enabled = c.Options().ContextTimeoutEnabled
	default:
		return fmt.Errorf("%w: cannot read the options of a %T to check that it honours deadlines; "+
			"pass AllowContextTimeoutDisabled() if it does, or if something else bounds every call", ErrInvalidOption, client)
	}
	if !enabled {
		return fmt.Errorf("%w: the Redis client has ContextTimeoutEnabled false, so a hung Redis would hold every "+
			"rate-limit decision for the client's ReadTimeout instead of the caller's deadline; set "+
			"ContextTimeoutEnabled: true in its options (or pass AllowContextTimeoutDisabled())", ErrInvalidOption)
	}
	return nil
}

// Take implements ratelimit.Store.Take in one Redis round trip: a Lua script
// decides every request, for every ratelimit.Algorithm, against the state
// it reads, and writes the charged states only when every request is
// allowed. Each Decision's At is the microsecond the script decided at (the
// Redis clock unless WithClock). On a Redis Cluster (or Ring)
// client all requests of one call must share one caller Key, which puts
// their Redis keys in one slot; otherwise Take returns an error wrapping
// ratelimit.ErrInvalidRequest without contacting Redis. Errors from Redis
// are wrapped ("redisstore: take: ..."); after a timeout or a dropped
// connection the script may or may not have run, and it is not re-sent.
func (s *Store) Take(ctx context.Context, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	if err := ratelimit.CheckRequests(reqs, out, true); err != nil {
		return err
	}
	if err := s.run(ctx, reqs, out, "t"); err != nil {
		return fmt.Errorf("redisstore: take: %w", err)
	}
	return nil
}

// Adjust implements ratelimit.Store.Adjust in one Redis round trip, with the
// same key rules and errors as Take ("redisstore: adjust: "). A Request's
// At (when the settled usage was charged, 0 for now) places a window
// algorithm's refund in the window that was charged.
func (s *Store) Adjust(ctx context.Context, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	if err := ratelimit.CheckRequests(reqs, out, false); err != nil {
		return err
	}
	if err := s.run(ctx, reqs, out, "a"); err != nil {
		return fmt.Errorf("redisstore: adjust: %w", err)
	}
	return nil
}

// Key returns the Redis key that holds the state of caller key under limit
// l: prefix + "{" + 22 base64url characters of HMAC-SHA256(secret, key) +
// "}:" + l.ID(). It is meant for operators and tests (to inspect or delete a
// caller's state). It returns "" when l is nil or invalid.
func (s *Store) Key(key string, l *ratelimit.Limit) string {
	if l == nil || l.Err() != nil {
		return ""
	}
	var tag [tagLen]byte
	s.hashTag(key, &tag)
	return s.redisKey(&tag, l)
}

// hasher is a pooled HMAC with buffers, so hashing a key allocates nothing.
type hasher struct {
	mac hash.Hash
	buf []byte
	sum [sha256.Size]byte
}

// hashTag writes the first tagLen base64url characters of the HMAC of key.
func (s *Store) hashTag(key string, tag *[tagLen]byte) {
	h := s.hmacs.Get().(*hasher)
	h.mac.Reset()
	h.buf = append(h.buf[:0], key...)
	_, _ = h.mac.Write(h.buf)
	h.mac.Sum(h.sum[:0])
	// 17 bytes encode to 23 characters; the first 22 hold 132 bits.
	var enc [24]byte
	base64.RawURLEncoding.Encode(enc[:], h.sum[:17])
	copy(tag[:], enc[:tagLen])
	if cap(h.buf) <= 1024 { // do not pin a huge key's buffer in the pool
		s.hmacs.Put(h)
	}
}

func (s *Store) redisKey(tag *[tagLen]byte, l *ratelimit.Limit) string {
	rkey, _ := s.redisKeyAnd(tag, l, "")
	return rkey
}

// redisKeyAnd returns the Redis key of tag and l, and a copy of key, both
// made in one allocation (a keyEntry keeps both).
func (s *Store) redisKeyAnd(tag *[tagLen]byte, l *ratelimit.Limit, key string) (rkey, keyCopy string) {
	id := l.ID()
	n := len(s.prefix) + tagLen + 3 + len(id)
	var b strings.Builder
	b.Grow(n + len(key))
	b.WriteString(s.prefix)
	b.WriteByte('{')
	b.Write(tag[:])
	b.WriteString("}:")
	b.WriteString(id)
	b.WriteString(key)
	all := b.String()
	return all[:n], all[n:]
}

// run sends reqs to the script in mode "t" (Take) or "a" (Adjust) and fills
// out from its reply. reqs have been checked.
func (s *Store) run(ctx context.Context, reqs []ratelimit.Request, out []ratelimit.Decision, mode string) error {
	if len(reqs) == 0 {
		return nil
	}
	// go-redis looks at the context mainly while it waits for a pooled
	// connection; check here so that a call already done never reaches Redis.
	if err := ctx.Err(); err != nil {
		return err
	}
	args, err := s.command(reqs, mode)
	if err != nil {
		return err
	}
	n := len(reqs)
	stride := 2
	if mode != "t" {
		stride = 3
	}
	eval := func() (string, int64, error) {
		if s.batch != nil {
			return s.batch.do(ctx, args, n)
		}
		reply, err := s.evalOne(ctx, args)
		return reply, -1, err
	}
	cal := s.calendarArgs(reqs, args, stride, 0)
	reply, at, err := eval()
	if rat, ok := calendarOutside(err); ok && cal {
		// The Redis clock is outside the calendar periods sent; the
		// script wrote nothing, so sending it again is no replay.
		s.calSkew.Store(rat - time.Now().UnixMicro())
		s.calendarArgs(reqs, args, stride, rat)
		if s.now != nil {
			// WithClock: the script decides at the time sent (ARGV[2]),
			// or a batch at its latest. Only a batch, decided at another
			// call's later reading, can be outside this call's bounds;
			// sent again, the call is decided at that time, the one its
			// new bounds are around, whether it is then sent alone or
			// in another batch.
			args[3+n+1] = rat
		}
		reply, at, err = eval()
	}
	if err != nil {
		return withContextErr(ctx, err)
	}
	return parseReply(reply, at, reqs, out)
}

// keyEntry is what a call needs of one (caller key, limit) pair: the Redis
// key and the limit's params string, both boxed once for the command's
// arguments. Both are functions of the caller key and the limit's ID (ID
// names every parameter a limit decides by, which is why two limits with
// one ID may share a Redis key). h is the pair's cache hash, which lets a
// lookup pass over the other entries of its set without comparing strings.
type keyEntry struct {
	key, id string
	h       uint64
	rkey    any // string: prefix{tag}:id
	params  any // string: see limitParams
}

// setWays is the number of slots of a key cache set.
const setWays = 4

// cacheSlot is a slot of the key cache: its entry and that entry's hash
// (keyEntry.h). The hashes of a set's four slots share its 64-byte line, so
// a lookup passes over the slots whose hash differs without loading their
// entries: a miss loads no entry, a hit only its own. The two words are
// stored one after the other, not together: a lookup may see a slot's hash
// with another entry, which the hit's check of the entry's own hash, key
// and ID rejects, and which costs only a miss.
type cacheSlot struct {
	h atomic.Uint64
	e atomic.Pointer[keyEntry]
}

// entry returns the keyEntry of (key, l), from the cache when it holds it,
// or nil if the script does not implement l's algorithm. The cache is a
// four-way set-associative table of atomic pointers and their hashes (see
// WithKeyCache, cacheSlot): lock-free, a hit costs one string hash, the
// loads of up to four slot hashes on one line and of its entry, and a miss (an HMAC and two allocations) puts its entry in the
// set's first slot, each entry there moving one slot down. Racing misses
// on one set may lose or duplicate an entry, which costs only a later
// miss: entries are immutable and every hit checks its key and ID.
func (s *Store) entry(key string, l *ratelimit.Limit) *keyEntry {
	id := l.ID()
	var set []cacheSlot // the pair's set
	var params any
	var h uint64
	if s.cache != nil {
		le := s.limit(l, id)
		if le == nil {
			return nil
		}
		params = le.params
		h = maphash.String(s.seed, key) ^ le.h*0x9E3779B97F4A7C15
		i := h & uint64(len(s.cache)-1) &^ (setWays - 1)
		set = s.cache[i:min(i+setWays, uint64(len(s.cache)))]
		for j := range set {
			if set[j].h.Load() != h {
				continue
			}
			if e := set[j].e.Load(); e != nil && e.h == h && e.key == key && e.id == id {
				return e
			}
		}
	} else if p := limitParams(l); p != "" {
		params = p
	} else {
		return nil
	}
	var tag [tagLen]byte
	s.hashTag(key, &tag)
	rkey, ckey := s.redisKeyAnd(&tag, l, key)
	e := &keyEntry{key: ckey, id: id, h: h, rkey: rkey, params: params}
	if set != nil && len(key) <= maxCachedKey {
		for j := len(set) - 1; j > 0; j-- {
			set[j].e.Store(set[j-1].e.Load())
			set[j].h.Store(set[j-1].h.Load())
		}
		set[0].e.Store(e)
		set[0].h.Store(h)
	}
	return e
}

// limitEntry is what the key cache needs of a limit, by its ID (which
// names every parameter it is made of): the ID's hash and its params
// string (see limitParams), boxed once.
type limitEntry struct {
	id     string
	h      uint64
	params any
}

// limit returns the limitEntry of l, whose ID is id (l.ID() copies the
// Limit), or nil if the script does not implement l's algorithm. The first
// table is direct-mapped by the address of the ID's bytes, not by its
// hash: a caller's Limits keep their ID strings, so a lookup is one load
// and a compare that Go answers from the pointers when they are equal,
// where hashing the ID would read all of it on every call. An ID in
// another string (a Limit built again for each call) is then found by its
// hash in the second table, so it costs what it did before the first
// table, not a new entry every call. Every entry is checked by its ID, so
// a collision costs only a recomputation.
func (s *Store) limit(l *ratelimit.Limit, id string) *limitEntry {
	slot := &s.limits[0]
	if len(id) > 0 {
		a := uint64(uintptr(unsafe.Pointer(unsafe.StringData(id))))
		slot = &s.limits[(a*0x9E3779B97F4A7C15)>>(64-6)]
	}
	if e := slot.Load(); e != nil && e.id == id {
		return e
	}
	h := maphash.String(s.seed, id)
	hslot := &s.limitsH[h>>(64-6)]
	if e := hslot.Load(); e != nil && e.id == id {
		slot.Store(e)
		return e
	}
	p := limitParams(l)
	if p == "" {
		return nil
	}
	e := &limitEntry{id: id, h: h, params: p}
	slot.Store(e)
	hslot.Store(e)
	return e
}

// maxCachedKey is the longest caller key the key cache keeps: longer keys
// (rare, and costly to keep) are hashed on every call.
const maxCachedKey = 256

// command builds the command of a call of reqs in mode "t" or "a": fcall,
// the function's name (or evalsha, the script's SHA-1), numkeys, the keys,
// then ARGV (see ratelimit.lua).
func (s *Store) command(reqs []ratelimit.Request, mode string) ([]any, error) {
	n := len(reqs)
	stride := 2 // arguments per request: params, cost (Take); params, cost, at (Adjust)
	if mode != "t" {
		stride = 3
	}
	// The whole command: fcall, name, numkeys, keys, then ARGV.
	args := make([]any, 3+n, 3+n+3+stride*n)
	args[0], args[1] = s.verb()
	args[2] = n
	args = append(args, mode, "", s.marginArg)
	if s.now != nil {
		args[3+n+1] = ratelimit.Micros(s.now())
	}
	for i := range reqs {
		r := &reqs[i]
		if s.sharded && i > 0 && r.Key != reqs[0].Key {
			return nil, fmt.Errorf("%w: request %d: caller key differs from request 0's; "+
				"on Redis Cluster a call's keys must share one slot (CROSSSLOT), "+
				"so stack limits of one caller key per call", ratelimit.ErrInvalidRequest, i)
		}
		e := s.entry(r.Key, r.Limit)
		if e == nil {
			return nil, fmt.Errorf("%w: request %d: algorithm %v is not supported by the Redis store",
				ratelimit.ErrInvalidRequest, i, r.Limit.Algorithm())
		}
		args[3+i] = e.rkey
		cost := min(max(r.Cost, -maxLuaCost), maxLuaCost)
		if stride == 2 {
			args = append(args, e.params, cost)
		} else {
			args = append(args, e.params, cost, max(r.At, 0))
		}
	}

	return args, nil
}

// parseReply fills out from the script's reply: space-separated integers,
// now and then five per request (see ratelimit.lua); at >= 0 is now, given
// once by a batch's reply, whose call lines leave it out.
func parseReply(reply string, at int64, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	var v [5]int64
	now, rest, ok := at, reply, true
	if at < 0 {
		now, rest, ok = nextInt(reply)
	}
	for i := 0; ok && i < len(reqs); i++ {
		for k := range v {
			if v[k], rest, ok = nextInt(rest); !ok {
				break
			}
		}
		if !ok {
			break
		}
		d := ratelimit.Decision{
			Limit:     reqs[i].Limit,
			Allowed:   v[0] == 1,
			Remaining: v[1],
			Reset:     time.Duration(v[2]) * time.Microsecond,
			Delay:     time.Duration(v[4]) * time.Microsecond,
			At:        now,
		}
		if v[3] < 0 {
			d.RetryAfter = ratelimit.RetryNever
		} else {
			d.RetryAfter = time.Duration(v[3]) * time.Microsecond
		}
		out[i] = d
	}
	if !ok || rest != "" {
		if at >= 0 {
			return fmt.Errorf("batch reply line %q is not %d integers for %d requests", reply, 5*len(reqs), len(reqs))
		}
		return fmt.Errorf("script reply %q is not %d integers for %d requests", reply, 1+5*len(reqs), len(reqs))
	}
	return nil
}

// nextInt parses the decimal integer at the start of s, up to the next
// space, and returns it with the rest of s after that space.
func nextInt(s string) (v int64, rest string, ok bool) {
	i, neg := 0, false
	if i < len(s) && s[0] == '-' {
		neg, i = true, 1
	}
	start := i
	for ; i < len(s) && s[i] != ' '; i++ {
		c := s[i]
		if c < '0' || c > '9' || v > (1<<62)/10 {
			return 0, "", false
		}
		v = v*10 + int64(c-'0')
	}
	if i == start {
		return 0, "", false
	}
	if neg {
		v = -v
	}
	if i < len(s) {
		i++ // the space
		if i == len(s) {
			return 0, "", false // a trailing space
		}
	}
	return v, s[i:], true
}

// onceCmd is a script command that go-redis must never send twice. go-redis
// re-sends a command after an error it deems retryable (a dropped
// connection, a socket timeout) up to Options.MaxRetries times, and a
// ClusterClient again on another node; for a script that writes, the first
// attempt may have run, so a replay could charge twice. Every retry loop of
// go-redis v9 (Client, ClusterClient, Ring, pipelines) consults
// Cmder.NoRetry and gives up instead, except for a failure it knows
// happened before the command was written (which is then its first send).
// MOVED and ASK redirects, which say the script did not run, are still
// followed. The TestNoReplay tests pin this.
type onceCmd struct{ *redis.StringCmd }

// NoRetry tells go-redis not to re-send the command.
func (onceCmd) NoRetry() bool { return true }

// verb returns the first two words of a call's command: fcall and the
// function's name, or evalsha and the script's SHA-1 once the server has
// shown that it cannot run Functions.
func (s *Store) verb() (verb, name any) {
	if s.noFunctions.Load() {
		return evalshaVerb, scriptHashArg
	}
	return fcallVerb, funcNameArg
}

// The command's first two arguments, boxed once: a string converted to an
// interface for each call would cost an allocation each.
var (
	fcallVerb, evalshaVerb     any = "fcall", "evalsha"
	funcNameArg, scriptHashArg any = funcName, scriptHash
)

// evalOne runs the script once. args is the whole command, as command
// builds it: FCALL of the store's function, or EVALSHA. A call that did
// not run is sent again, which is no replay: after "Function not found"
// the library is loaded (FUNCTION LOAD) and FCALL sent again; when the
// server refused FCALL (fcallRefused) the call is sent as EVALSHA; after
// NOSCRIPT it is sent as EVAL with the script's source. Each command is
// sent at most once.
func (s *Store) evalOne(ctx context.Context, args []any) (string, error) {
	run := func(args []any) *redis.StringCmd {
		cmd := redis.NewStringCmd(ctx, args...)
		cmd.SetFirstKeyPos(3) // routes the call to the keys' slot or shard
		_ = s.client.Process(ctx, onceCmd{cmd})
		return cmd
	}
	if s.ap != nil {
		run = func(args []any) *redis.StringCmd {
			cmd := redis.NewStringCmd(ctx, args...)
			cmd.SetFirstKeyPos(3)
			f := s.ap.Submit(ctx, onceCmd{cmd})
			if err := f.WaitContext(ctx); err != nil && err == ctx.Err() {
				// The context ended first: the command may still be queued or
				// running, and its fields belong to the pipeline until it is
				// done, so answer with a command of our own.
				done := redis.NewStringCmd(ctx)
				done.SetErr(err)
				return done
			}
			return cmd
		}
	}
	cmd := run(args)
	err := cmd.Err()
	if err != nil && args[0] == "fcall" {
		sticky, refused := fcallRefused(err)
		missing := !refused && functionMissing(err)
		if missing {
			if lerr := s.loadFunction(ctx); lerr != nil {
				if sticky, refused = fcallRefused(lerr); !refused {
					return "", fmt.Errorf("loading the Redis Function library: %w", lerr)
				}
			}
		}
		if sticky {
			s.noFunctions.Store(true)
		}
		if missing || refused {
			args = slices.Clone(args) // the first command's, which a hook may still hold
			if refused {
				args[0], args[1] = evalshaVerb, scriptHashArg
			}
			cmd = run(args)
			err = cmd.Err()
		}
	}
	if err != nil && args[0] == "evalsha" && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT")) {
		args = slices.Clone(args)
		args[0], args[1] = "eval", luaSource
		cmd = run(args)
	}
	return cmd.Result()
}

// withContextErr makes err, the error of a call made with ctx, wrap the
// context's error when the context ended or its deadline passed. With
// ContextTimeoutEnabled the socket deadline is the context's, and the read
// may time out (a net.Error) a moment before the context itself reports
// DeadlineExceeded: callers should see the deadline either way.
func withContextErr(ctx context.Context, err error) error {
	cerr := ctx.Err()
	if cerr == nil {
		var ne net.Error
		if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) && errors.As(err, &ne) && ne.Timeout() {
			cerr = context.DeadlineExceeded
		}
	}
	if cerr != nil && !errors.Is(err, cerr) {
		err = fmt.Errorf("%w: %w", err, cerr)
	}
	return err
}

// limitParams returns the script's params string of l (see ratelimit.lua):
// "<algo><scale>:<drain>:<burst>:<quota>:<period µs>", or "" if the script
// does not implement l's algorithm.
func limitParams(l *ratelimit.Limit) string {
	algo := algoCode(l)
	if algo == "" {
		return ""
	}
	scale, drain, _ := l.Params()
	b := make([]byte, 0, 96)
	b = append(b, algo...)
	b = strconv.AppendInt(b, scale, 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, drain, 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, l.Burst(), 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, l.Quota(), 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, l.Period().Microseconds(), 10)
	return string(b)
}

// algoCode names l's algorithm for the script, or "" if the script does not
// implement it.
func algoCode(l *ratelimit.Limit) string {
	switch l.Algorithm() {
	case ratelimit.TokenBucket:
		return "t"
	case ratelimit.LeakyBucket:
		return "l"
	case ratelimit.GCRA:
		return "g"
	case ratelimit.FixedWindow:
		if l.AlignsToFirstHit() {
			return "F"
		}
		return "f"
	case ratelimit.SlidingWindow:
		return "s"
	case ratelimit.SlidingLog:
		return "o"
	case ratelimit.Concurrency:
		return "c"
	case ratelimit.CalendarWindow:
		return "k"
	}
	return ""
}

// calendarArgs appends to the params of every CalendarWindow request in
// args (the command run builds, stride arguments per request) the starts
// of four consecutive calendar periods around at (µs; 0: the time the
// script will decide at, as this process knows it: the WithClock time
// sent, or this host's clock corrected by the skew last seen), which is
// how the script, which has no time zones, finds its period (see
// ratelimit.lua, "Calendar window"). It reports whether there was any.
func (s *Store) calendarArgs(reqs []ratelimit.Request, args []any, stride int, at int64) bool {
	n := len(reqs)
	cal := false
	for i := range reqs {
		l := reqs[i].Limit
		if l.Algorithm() != ratelimit.CalendarWindow {
			continue
		}
		if at == 0 {
			switch now := args[3+n+1].(type) { // ARGV[2]: the WithClock time, or ""
			case int64:
				at = now
			case string:
				at, _ = strconv.ParseInt(now, 10, 64)
			}
			if at <= 0 {
				at = time.Now().UnixMicro() + s.calSkew.Load()
			}
		}
		b := l.CalendarBounds(at)
		p := []byte(limitParams(l))
		for _, v := range b {
			p = append(p, ':')
			p = strconv.AppendInt(p, v, 10)
		}
		args[3+n+3+stride*i] = string(p)
		cal = true
	}
	return cal
}

// calendarOutside reports whether err is the script's answer to a
// calendar call whose Redis clock is outside the periods sent, and the
// Redis time it gave.
func calendarOutside(err error) (at int64, ok bool) {
	const msg = "rampmeter: clock outside calendar bounds at "
	if err == nil {
		return 0, false
	}
	e := err.Error()
	i := strings.Index(e, msg)
	if i < 0 {
		return 0, false
	}
	at, perr := strconv.ParseInt(strings.TrimSpace(e[i+len(msg):]), 10, 64)
	return at, perr == nil && at > 0
}
