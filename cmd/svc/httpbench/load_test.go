package httpbench

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/btcsuite/btcd/btcutil"
	vegeta "github.com/tsenart/vegeta/v12/lib"

	"svc/platform/chain"
	"svc/platform/chain/chaintest"
)

// endpoint is one kind of request of the load.
type endpoint string

const (
	balances     endpoint = "balance reads"
	transactions endpoint = "transaction lists"
	deposits     endpoint = "deposit creations"
	withdrawals  endpoint = "withdrawal creations"
	transfers    endpoint = "transfers"
)

// endpoints are the kinds of the mix; transfers are measured alone.
var endpoints = []endpoint{balances, transactions, deposits, withdrawals}

// mixSlots is the mix, 60/15/15/10, as a repeating sequence of 20
// requests that interleaves the kinds.
var mixSlots = func() []endpoint {
	kinds := map[byte]endpoint{'B': balances, 'T': transactions, 'D': deposits, 'W': withdrawals}
	var s []endpoint
	for _, c := range []byte("BBDBTBBWBDBTBBDBWBTB") {
		s = append(s, kinds[c])
	}
	return s
}()

// endpointOf names the kind of a request from its method and URL.
func endpointOf(method, url string) endpoint {
	switch {
	case method == http.MethodPost && strings.HasSuffix(url, "/v1/deposits"):
		return deposits
	case method == http.MethodPost && strings.HasSuffix(url, "/v1/withdrawals"):
		return withdrawals
	case method == http.MethodPost && strings.HasSuffix(url, "/v1/transfers"):
		return transfers
	case strings.Contains(url, "/transactions"):
		return transactions
	default:
		return balances
	}
}

// targets makes the requests: a random funded user each, a fresh
// Idempotency-Key per mutating request, and for a withdrawal a fresh valid
// regtest destination above the minimum (the processor refuses a second
// open payout to one destination).
type targets struct {
	base, key string
	users     int
	run       string // distinguishes the keys of one run from another's
	seq       atomic.Int64
	header    http.Header
}

func newTargets(base, key string, users int) *targets {
	h := http.Header{}
	h.Set("Authorization", "Bearer "+key)
	h.Set("Content-Type", "application/json")
	return &targets{base: base, key: key, users: users, run: fmt.Sprint(time.Now().UnixNano()), header: h}
}

// targeter returns the requests of one endpoint, or of the mix when only
// is empty.
func (g *targets) targeter(only endpoint) vegeta.Targeter {
	return func(t *vegeta.Target) error {
		n := g.seq.Add(1)
		e := only
		if e == "" {
			e = mixSlots[n%int64(len(mixSlots))]
		}
		user := userID(rand.IntN(g.users))
		t.Header = g.header
		t.Body = nil
		switch e {
		case balances:
			t.Method, t.URL = http.MethodGet, g.base+"/v1/users/"+user+"/balances"
		case transactions:
			t.Method, t.URL = http.MethodGet, g.base+"/v1/users/"+user+"/transactions?limit=50"
		case deposits:
			t.Method, t.URL = http.MethodPost, g.base+"/v1/deposits"
			t.Body = fmt.Appendf(nil, `{"external_user_id":%q,"asset":"BTC","expected_amount":"100000"}`, user)
			t.Header = g.withKey(n)
		case withdrawals:
			t.Method, t.URL = http.MethodPost, g.base+"/v1/withdrawals"
			t.Body = fmt.Appendf(nil, `{"external_user_id":%q,"asset":"BTC","amount":"%d","destination_address":%q}`,
				user, 20_000+n%1000, destination(fmt.Sprint(g.run, "-", n)))
			t.Header = g.withKey(n)
		case transfers:
			// One leg between two random funded users (never the same).
			to := userID((rand.IntN(g.users-1) + 1 + mustAtoi(user[len("bench-"):])) % g.users)
			t.Method, t.URL = http.MethodPost, g.base+"/v1/transfers"
			t.Body = fmt.Appendf(nil, `{"legs":[{"from":{"external_user_id":%q},"to":{"external_user_id":%q},"asset":"BTC","amount":"%d"}]}`,
				user, to, 1+n%1000)
			t.Header = g.withKey(n)
		}
		return nil
	}
}

func mustAtoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		panic(err) // userID makes the ids
	}
	return n
}

func (g *targets) withKey(n int64) http.Header {
	h := g.header.Clone()
	h.Set("Idempotency-Key", fmt.Sprint("bench-", g.run, "-", n))
	return h
}

// destination is a valid regtest P2WPKH address derived from seed.
func destination(seed string) string {
	a, err := btcutil.NewAddressWitnessPubKeyHash(chaintest.Hash(seed)[:20], chain.Regtest.Params())
	if err != nil {
		panic(err) // 20 bytes always make an address
	}
	return a.EncodeAddress()
}

// stats are one endpoint's results in one step.
type stats struct {
	metrics vegeta.Metrics
	codes   map[int]int    // answers by status
	samples map[int]string // one body per status that is not a 2xx
	errors  map[string]int // transport errors
}

func (s *stats) add(r *vegeta.Result) {
	s.metrics.Add(r)
	if s.codes == nil {
		s.codes, s.samples, s.errors = map[int]int{}, map[int]string{}, map[string]int{}
	}
	if r.Code == 0 {
		// Counted by kind: the request's URL (a user's, a withdrawal's)
		// would make each error one of its own.
		s.errors[requestURL.ReplaceAllString(r.Error, `"URL"`)]++
		return
	}
	s.codes[int(r.Code)]++
	if (r.Code < 200 || r.Code >= 300) && s.samples[int(r.Code)] == "" {
		s.samples[int(r.Code)] = string(r.Body)
	}
}

var requestURL = regexp.MustCompile(`"https?://[^"]*"`)

func (s *stats) requests() int { return int(s.metrics.Requests) }

// failed counts every request that got no 2xx.
func (s *stats) failed() int {
	n := 0
	for c, k := range s.codes {
		if c < 200 || c >= 300 {
			n += k
		}
	}
	for _, k := range s.errors {
		n += k
	}
	return n
}

func (s *stats) quantile(q float64) time.Duration { return s.metrics.Latencies.Quantile(q) }

// failures describes the requests that got no 2xx, or "".
func (s *stats) failures() string {
	var parts []string
	codes := make([]int, 0, len(s.codes))
	for c := range s.codes {
		codes = append(codes, c)
	}
	sort.Ints(codes)
	for _, c := range codes {
		if c < 200 || c >= 300 {
			parts = append(parts, fmt.Sprintf("%d x%d (%s)", c, s.codes[c], strings.TrimSpace(truncate(s.samples[c], 160))))
		}
	}
	for e, k := range s.errors {
		parts = append(parts, fmt.Sprintf("%s x%d", truncate(e, 160), k))
	}
	return strings.Join(parts, "; ")
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// step is one run at a fixed arrival rate.
type step struct {
	rate     int
	duration time.Duration
	all      stats
	by       map[endpoint]*stats
}

// achieved is the rate the requests were sent at.
func (s *step) achieved() float64 {
	s.all.metrics.Close()
	return s.all.metrics.Rate
}

// attack sends the requests of only (the mix when empty) at rate per second
// for d, open loop: vegeta starts a new worker whenever all are busy, so a
// slow answer never delays the next request. onResult, when set, sees every
// result.
func attack(g *targets, only endpoint, rate int, d time.Duration, onResult func(endpoint, *vegeta.Result)) *step {
	atk := vegeta.NewAttacker(vegeta.Timeout(30*time.Second), vegeta.KeepAlive(true), vegeta.Workers(32),
		vegeta.MaxBody(4096), vegeta.Redirects(vegeta.NoFollow))
	return run(g, only, atk, vegeta.Rate{Freq: rate, Per: time.Second}, d, onResult)
}

// closedLoop sends the requests of only from clients workers for d, each
// sending its next request when its last is answered: the load pgbench
// puts on a server with -c clients, so that a rate at 32 clients compares
// with TPC-B at 32 clients. The step's rate is the one achieved.
func closedLoop(g *targets, only endpoint, clients int, d time.Duration) *step {
	n := uint64(clients)
	atk := vegeta.NewAttacker(vegeta.Timeout(30*time.Second), vegeta.KeepAlive(true), vegeta.Workers(n), vegeta.MaxWorkers(n),
		vegeta.MaxBody(4096), vegeta.Redirects(vegeta.NoFollow))
	s := run(g, only, atk, vegeta.Rate{}, d, nil) // a zero rate: as fast as the workers go
	s.rate = int(s.all.metrics.Rate)
	return s
}

// run sends the requests of only (the mix when empty) with atk at rate
// for d.
func run(g *targets, only endpoint, atk *vegeta.Attacker, rate vegeta.Rate, d time.Duration, onResult func(endpoint, *vegeta.Result)) *step {
	s := &step{rate: rate.Freq, duration: d, by: map[endpoint]*stats{}}
	for _, e := range append(endpoints, only) {
		s.by[e] = &stats{}
	}
	for r := range atk.Attack(g.targeter(only), rate, d, string(only)) {
		e := endpointOf(r.Method, r.URL)
		s.all.add(r)
		s.by[e].add(r)
		if onResult != nil {
			onResult(e, r)
		}
	}
	s.all.metrics.Close()
	for _, st := range s.by {
		st.metrics.Close()
	}
	return s
}

// search finds the highest rate whose p99 stays at or below limit with
// every answer a 2xx: from start it doubles the rate until a step misses
// (or reaches ceiling), or, when start already misses, halves it until one
// meets the limit; then it halves the gap between the best rate and the
// lowest miss bisect times. A rate that misses narrowly is tried twice. It returns every step, in order, and the best
// one (nil when none met the limit).
func search(g *targets, only endpoint, start, ceiling, bisect int, d, pause, limit time.Duration, logf func(string, ...any)) (steps []*step, best *step) {
	ok := func(s *step) bool {
		// A step that could not even send at its rate (the load generator
		// itself saturated) does not count as met.
		return s.all.failed() == 0 && s.all.quantile(0.99) <= limit && s.achieved() >= 0.95*float64(s.rate)
	}
	try := func(rate int) *step {
		s := attack(g, only, rate, d, nil)
		steps = append(steps, s)
		logf("  %-22s %6d/s: sent %7.1f/s, p50 %6.2f ms, p99 %7.2f ms, p99.9 %7.2f ms, not 2xx %d %s",
			name(only), rate, s.achieved(), ms(s.all.quantile(0.5)), ms(s.all.quantile(0.99)), ms(s.all.quantile(0.999)),
			s.all.failed(), s.all.failures())
		time.Sleep(pause) // let the worker catch up before the next step
		return s
	}
	// A rate that misses is tried once more, unless even its median missed
	// (overloaded): on a shared machine a burst of other work must not end
	// the search. It is met if either run met it.
	meets := func(rate int) (*step, bool) {
		s := try(rate)
		if ok(s) {
			return s, true
		}
		if s.all.quantile(0.5) > limit {
			return s, false // overloaded, not a burst
		}
		if s2 := try(rate); ok(s2) {
			return s2, true
		}
		return s, false
	}
	missed := 0
	if s, met := meets(start); met {
		best = s
		for rate := start * 2; best.rate < ceiling; rate *= 2 {
			rate = min(rate, ceiling)
			s, met := meets(rate)
			if !met {
				missed = rate
				break
			}
			best = s
		}
		if missed == 0 {
			return steps, best
		}
	} else {
		missed = start
		for rate := start / 2; rate >= max(1, start/8); rate /= 2 {
			if s, met := meets(rate); met {
				best = s
				break
			}
			missed = rate
		}
		if best == nil {
			return steps, nil
		}
	}
	for range bisect {
		mid := (best.rate + missed) / 2
		if mid <= best.rate || mid >= missed {
			break
		}
		if s, met := meets(mid); met {
			best = s
		} else {
			missed = mid
		}
	}
	return steps, best
}

func name(e endpoint) string {
	if e == "" {
		return "mix"
	}
	return string(e)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// payer pays deposits at the simulator as they are created, up to a rate:
// each payment settles at once, and the simulator sends its webhooks to the
// service, which settles the deposit and emits deposit.settled.
type payer struct {
	sim     string
	every   time.Duration
	mu      sync.Mutex
	next    time.Time
	queue   chan string
	wg      sync.WaitGroup
	paid    atomic.Int64
	failed  atomic.Int64
	lastErr atomic.Value
}

func newPayer(sim string, perSecond int) *payer {
	p := &payer{sim: sim, every: time.Second / time.Duration(max(perSecond, 1)), queue: make(chan string, 4096)}
	client := &http.Client{Timeout: 10 * time.Second}
	for range 4 {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			for id := range p.queue {
				resp, err := client.Post(p.sim+"/_sim/invoices/"+id+"/pay", "application/json", strings.NewReader(`{"settled":true}`))
				if err == nil {
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						err = fmt.Errorf("pay %s: %s", id, resp.Status)
					}
				}
				if err != nil {
					p.failed.Add(1)
					p.lastErr.Store(err.Error())
					continue
				}
				p.paid.Add(1)
			}
		}()
	}
	return p
}

// offer pays the deposit of a 201 answer if the rate allows it.
func (p *payer) offer(r *vegeta.Result) {
	if r.Code != http.StatusCreated {
		return
	}
	p.mu.Lock()
	now := time.Now()
	if now.Before(p.next) {
		p.mu.Unlock()
		return
	}
	p.next = now.Add(p.every)
	p.mu.Unlock()
	var d struct {
		CheckoutLink *string `json:"checkout_link"`
	}
	if json.Unmarshal(r.Body, &d) != nil || d.CheckoutLink == nil {
		return
	}
	// The simulator's checkout link ends with the invoice id.
	id := (*d.CheckoutLink)[strings.LastIndexByte(*d.CheckoutLink, '/')+1:]
	select {
	case p.queue <- id:
	default:
	}
}

func (p *payer) close() {
	close(p.queue)
	p.wg.Wait()
}
