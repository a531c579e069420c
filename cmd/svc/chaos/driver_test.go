package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/govalues/decimal"

	"svc/platform/btcpay/btcpaysim"
	"svc/platform/chain"
	"svc/platform/chain/chaintest"
	"svc/platform/money"
)

// The driver plays the platform (readwrite key), the operator (admin key),
// the payers and the processor's wallet. Each of its actors draws its
// operations from its own stream of the run's seed, so a seed replays the
// same sequence of operations per actor (their interleaving, and the
// faults' effect on them, vary with timing).
type driver struct {
	t    testing.TB
	c    *cluster
	v    *violations
	hc   *http.Client
	seed uint64

	mu         sync.Mutex
	deposits   []*dep
	wds        []*wd
	keys       int
	unanswered []request
	ops        map[string]int
	statuses   map[int]int
	// acks are the writes answered 2xx, in the order of their answers:
	// what must survive a failover.
	acks []ack
}

// ack is a write the API acknowledged (2xx): its request, key and answer.
type ack struct {
	method, path, key, idem string
	raw                     []byte
	first                   response
	at                      time.Time
}

type dep struct {
	id, asset string
	// address is what the service told the user to pay (an address or a
	// BOLT11 invoice).
	address string
	paid    bool
}

type wd struct{ id string }

// scale is the number of decimals of an asset's amounts (or of a
// processor payment method's).
func scale(asset string) int {
	if strings.HasPrefix(asset, "USDT") {
		return 6
	}
	return 8
}

var users = []string{"ana", "ben", "chloe", "dev", "eli", "fay", "gus", "hana"}

func newDriver(t testing.TB, c *cluster, v *violations, seed uint64) *driver {
	return &driver{t: t, c: c, v: v, seed: seed, ops: map[string]int{}, statuses: map[int]int{},
		hc: &http.Client{Timeout: 90 * time.Second}}
}

// run starts n actors until ctx ends.
func (d *driver) run(ctx context.Context, n int) *sync.WaitGroup {
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(d.seed, uint64(i+1)))
			for seq := 0; ctx.Err() == nil; seq++ {
				d.step(ctx, r, fmt.Sprintf("%d-%d-%d", d.seed, i, seq))
			}
		}(i)
	}
	return &wg
}

func (d *driver) count(op string) {
	d.mu.Lock()
	d.ops[op]++
	d.mu.Unlock()
}

// step runs one operation chosen by r; tag names it uniquely.
func (d *driver) step(ctx context.Context, r *rand.Rand, tag string) {
	switch n := r.IntN(100); {
	case n < 22:
		d.deposit(ctx, r)
	case n < 40:
		d.pay(r)
	case n < 50:
		d.confirm(r)
	case n < 64:
		d.withdraw(ctx, r, tag)
	case n < 70:
		d.decide(ctx, r)
	case n < 78:
		d.processor(r)
	case n < 81:
		d.release(ctx, r)
	case n < 85:
		d.usdt(ctx, r, tag)
	case n < 88:
		d.webhooks(r)
	default:
		d.read(ctx, r)
	}
}

// response is a definitive answer of the API.
type response struct {
	status int
	body   []byte
}

func (r response) decode(v any) error { return json.Unmarshal(r.body, v) }

// request is one API call; a POST carries its Idempotency-Key, kept for
// every retry.
type request struct {
	method, path string
	raw          []byte
	admin        bool
	idem         string
	then         func(response) // told the definitive answer
}

// call sends a request through the balancer and retries it, with the same
// Idempotency-Key, until it gets a definitive answer (see do). A POST that
// got none within the time allowed is kept and sent again while settling,
// as a platform retries until it knows (a deposit left creating is left to
// its client's retry). then, if set, is told the definitive answer.
func (d *driver) call(ctx context.Context, method, path string, body any, admin bool, then ...func(response)) (response, bool) {
	req := request{method: method, path: path, admin: admin}
	if body != nil {
		req.raw, _ = json.Marshal(body)
	}
	if len(then) > 0 {
		req.then = then[0]
	}
	if method == http.MethodPost {
		d.mu.Lock()
		d.keys++
		req.idem = fmt.Sprintf("chaos-%d-%d", d.seed, d.keys)
		d.mu.Unlock()
	}
	resp, ok := d.do(ctx, req, 4*time.Minute)
	if !ok {
		d.count("unanswered")
		if method == http.MethodPost {
			d.mu.Lock()
			d.unanswered = append(d.unanswered, req)
			d.mu.Unlock()
		}
		return resp, false
	}
	if req.then != nil {
		req.then(resp)
	}
	return resp, true
}

// do sends req until a definitive answer or the time allowed is over:
// network errors and the balancer's own answers, 503 (a 503 with a code,
// the pool exhausted, is definitive), and 409 with Retry-After (an attempt
// in flight) are retried. A 5xx other than 503 is a violation.
func (d *driver) do(ctx context.Context, req request, within time.Duration) (response, bool) {
	key := d.c.rwKey
	if req.admin {
		key = d.c.admKey
	}
	deadline := time.Now().Add(within)
	for {
		if time.Now().After(deadline) || (ctx.Err() != nil && req.method == http.MethodGet) {
			return response{}, false
		}
		resp, err := d.send(req.method, req.path, req.raw, key, req.idem)
		if err != nil || resp.header.Get(balancerHeader) != "" {
			time.Sleep(200 * time.Millisecond)
			continue
		}
		d.mu.Lock()
		d.statuses[resp.status]++
		d.mu.Unlock()
		switch {
		case resp.status == http.StatusServiceUnavailable && !bytes.Contains(resp.body, []byte(`"code"`)):
			time.Sleep(retryAfter(resp.header, 500*time.Millisecond))
			continue
		case resp.status == http.StatusConflict && resp.header.Get("Retry-After") != "":
			time.Sleep(retryAfter(resp.header, time.Second))
			continue
		case resp.status >= 500 && resp.status != http.StatusServiceUnavailable:
			d.v.add("%s %s answered %d: %s", req.method, req.path, resp.status, excerpt(resp.body))
		}
		out := response{status: resp.status, body: resp.body}
		if req.idem != "" && resp.status >= 200 && resp.status < 300 {
			d.mu.Lock()
			d.acks = append(d.acks, ack{method: req.method, path: req.path, key: key, idem: req.idem, raw: req.raw, first: out, at: time.Now()})
			d.mu.Unlock()
		}
		if req.idem != "" && resp.status < 500 {
			d.replay(req.method, req.path, req.raw, key, req.idem, out)
		}
		return out, true
	}
}

// retryUnanswered sends every request that never got an answer again,
// with its key, and reports how many are still unanswered.
func (d *driver) retryUnanswered(ctx context.Context) int {
	d.mu.Lock()
	list := d.unanswered
	d.unanswered = nil
	d.mu.Unlock()
	var left []request
	for _, req := range list {
		resp, ok := d.do(ctx, req, 30*time.Second)
		if !ok {
			left = append(left, req)
			continue
		}
		d.count("answered late")
		if req.then != nil {
			req.then(resp)
		}
	}
	d.mu.Lock()
	d.unanswered = append(d.unanswered, left...)
	d.mu.Unlock()
	return len(left)
}

// replayDiffered counts the replays whose answer differed from the first.
const replayDiffered = "replay differed"

// replay sends the same request again with the same key and requires the
// stored answer, byte for byte (each key one effect, identical replays).
func (d *driver) replay(method, path string, raw []byte, key, idem string, first response) {
	for i := 0; i < 100; i++ {
		resp, err := d.send(method, path, raw, key, idem)
		if err != nil || resp.header.Get(balancerHeader) != "" || resp.status == http.StatusServiceUnavailable {
			time.Sleep(300 * time.Millisecond)
			continue
		}
		d.count("replay")
		if resp.status != first.status || !bytes.Equal(resp.body, first.body) {
			d.count(replayDiffered)
			d.v.add("replay of %s %s (key %s) answered %d %s, the first answer was %d %s", method, path, idem,
				resp.status, excerpt(resp.body), first.status, excerpt(first.body))
		}
		return
	}
}

type sent struct {
	status int
	header http.Header
	body   []byte
}

func (d *driver) send(method, path string, raw []byte, key, idem string) (sent, error) {
	req, err := http.NewRequest(method, d.c.lb.url+path, bytes.NewReader(raw))
	if err != nil {
		return sent{}, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	if raw != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if idem != "" {
		req.Header.Set("Idempotency-Key", idem)
	}
	resp, err := d.hc.Do(req)
	if err != nil {
		return sent{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return sent{}, err
	}
	return sent{status: resp.StatusCode, header: resp.Header, body: b}, nil
}

func retryAfter(h http.Header, def time.Duration) time.Duration {
	if s, err := strconv.Atoi(h.Get("Retry-After")); err == nil && s > 0 {
		return min(time.Duration(s)*time.Second, 5*time.Second)
	}
	return def
}

func excerpt(b []byte) string {
	s := string(b)
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

func pick[T any](r *rand.Rand, list []T) (T, bool) {
	var zero T
	if len(list) == 0 {
		return zero, false
	}
	return list[r.IntN(len(list))], true
}

// deposit creates a deposit in a random asset for a random user.
func (d *driver) deposit(ctx context.Context, r *rand.Rand) {
	d.count("deposit")
	asset, _ := pick(r, []string{"BTC", "BTC", "BTC_LN", "USDT_TRC20"})
	var units int64
	switch asset {
	case "BTC":
		units = 200_000 + r.Int64N(2_000_000)
	case "BTC_LN":
		units = 20_000 + r.Int64N(200_000)
	default:
		units = 20_000_000 + r.Int64N(200_000_000)
	}
	user, _ := pick(r, users)
	d.call(ctx, http.MethodPost, "/v1/deposits",
		map[string]any{"external_user_id": user, "asset": asset, "expected_amount": strconv.FormatInt(units, 10)}, false,
		func(resp response) {
			if resp.status != http.StatusCreated {
				return
			}
			var body struct {
				ID      string  `json:"deposit_id"`
				Address *string `json:"address"`
			}
			if err := resp.decode(&body); err != nil || body.ID == "" {
				d.v.add("deposit creation answered 201 without an id: %s", excerpt(resp.body))
				return
			}
			x := &dep{id: body.ID, asset: asset}
			if body.Address != nil {
				x.address = *body.Address
			}
			d.mu.Lock()
			d.deposits = append(d.deposits, x)
			d.mu.Unlock()
		})
}

func (d *driver) unpaid(r *rand.Rand) (*dep, btcpaysim.InvoiceInfo, bool) {
	d.mu.Lock()
	var open []*dep
	for _, x := range d.deposits {
		if !x.paid {
			open = append(open, x)
		}
	}
	d.mu.Unlock()
	x, ok := pick(r, open)
	if !ok {
		return nil, btcpaysim.InvoiceInfo{}, false
	}
	inv, ok := d.invoiceOf(x)
	return x, inv, ok
}

// invoiceOf is the invoice a user pays for deposit x: the one whose
// address or BOLT11 the service gave (a creation retried while the
// processor was slow can leave a second invoice with the deposit's
// orderId, whose address nobody was shown), else the newest with its
// orderId.
func (d *driver) invoiceOf(x *dep) (btcpaysim.InvoiceInfo, bool) {
	list := d.c.sim.InvoicesByOrderID(x.id)
	for _, inv := range list {
		if x.address != "" && inv.Destination == x.address {
			return inv, true
		}
	}
	if len(list) == 0 {
		return btcpaysim.InvoiceInfo{}, false
	}
	return list[len(list)-1], true
}

// pay pays a deposit's invoice: in full (at once or in two parts), short,
// over, late (after its expiry), or lets it expire.
func (d *driver) pay(r *rand.Rand) {
	x, inv, ok := d.unpaid(r)
	if !ok || inv.Due == "" {
		return
	}
	due, err := decimal.Parse(inv.Due)
	if err != nil || !due.IsPos() {
		return
	}
	frac := func(num, den int64) string {
		q, _ := due.Mul(decimal.MustNew(num, 0))
		q, _ = q.Quo(decimal.MustNew(den, 0))
		return q.Trunc(scale(x.asset)).String()
	}
	kind, _ := pick(r, []string{"full", "full", "full", "split", "under", "over", "late", "expire"})
	if x.asset == "BTC_LN" && kind != "expire" && kind != "late" {
		kind = "full" // a BOLT11 is paid once, exactly
	}
	d.count("pay " + kind)
	var amounts []string
	switch kind {
	case "split":
		a := frac(2, 5)
		rest, _ := due.Sub(decimal.MustParse(a))
		amounts = []string{a, rest.String()}
	case "under":
		amounts = []string{frac(1, 2)}
	case "over":
		amounts = []string{frac(6, 5)}
	case "expire", "late":
		_ = d.c.sim.Expire(inv.ID)
		if kind == "expire" {
			d.markPaid(x)
			return
		}
		if x.asset == "BTC_LN" {
			d.markPaid(x) // an expired BOLT11 cannot be paid
			return
		}
	}
	if _, err := d.c.sim.Pay(inv.ID, btcpaysim.PayParams{Amounts: amounts}); err == nil || kind == "late" {
		d.markPaid(x)
	}
}

func (d *driver) markPaid(x *dep) {
	d.mu.Lock()
	x.paid = true
	d.mu.Unlock()
}

// confirm confirms a paid deposit's payments.
func (d *driver) confirm(r *rand.Rand) {
	d.mu.Lock()
	var paid []*dep
	for _, x := range d.deposits {
		if x.paid {
			paid = append(paid, x)
		}
	}
	d.mu.Unlock()
	x, ok := pick(r, paid)
	if !ok {
		return
	}
	d.count("confirm")
	if inv, ok := d.invoiceOf(x); ok {
		_ = d.c.sim.Confirm(inv.ID)
	}
}

// withdraw requests a withdrawal of part of a user's available balance,
// under or above the auto-approval limit.
func (d *driver) withdraw(ctx context.Context, r *rand.Rand, tag string) {
	user, _ := pick(r, users)
	asset, _ := pick(r, []string{"BTC", "BTC", "BTC_LN", "USDT_TRC20"})
	resp, ok := d.call(ctx, http.MethodGet, "/v1/users/"+user+"/balances", nil, false)
	if !ok || resp.status != http.StatusOK {
		return
	}
	available := available(resp, asset)
	var gross int64
	switch asset {
	case "BTC":
		gross = 20_000 + r.Int64N(160_000) // auto
		if r.IntN(3) == 0 {
			gross = 250_000 + r.Int64N(400_000) // above the auto limit
		}
	case "BTC_LN":
		gross = 2_000 + r.Int64N(40_000)
		if r.IntN(3) == 0 {
			gross = 60_000 + r.Int64N(100_000)
		}
	default:
		gross = 11_000_000 + r.Int64N(60_000_000)
	}
	if r.IntN(10) > 0 && gross > available { // mostly what the user has; sometimes a 402
		return
	}
	d.count("withdraw " + asset)
	var dest string
	switch asset {
	case "BTC":
		dest = chaintest.P2WPKH(d.t, chain.Regtest, "chaos-"+tag)
	case "BTC_LN":
		dest = chaintest.BOLT11(d.t, chain.Regtest, time.Now(), gross-10, 2*time.Hour)
	default:
		dest = chaintest.Tron("chaos-" + tag)
	}
	d.call(ctx, http.MethodPost, "/v1/withdrawals", map[string]any{"external_user_id": user, "asset": asset,
		"amount": strconv.FormatInt(gross, 10), "destination_address": dest}, false,
		func(resp response) {
			if resp.status != http.StatusCreated {
				return
			}
			var body struct {
				ID string `json:"withdrawal_id"`
			}
			if err := resp.decode(&body); err != nil || body.ID == "" {
				d.v.add("withdrawal creation answered 201 without an id: %s", excerpt(resp.body))
				return
			}
			d.mu.Lock()
			d.wds = append(d.wds, &wd{id: body.ID})
			d.mu.Unlock()
		})
}

func available(resp response, asset string) int64 {
	var b struct {
		Balances []struct {
			Asset     string `json:"asset"`
			Available string `json:"available"`
		} `json:"balances"`
	}
	if resp.decode(&b) != nil {
		return 0
	}
	for _, x := range b.Balances {
		if x.Asset == asset {
			units, _ := money.ParseDecimal(x.Available, scale(asset))
			return units
		}
	}
	return 0
}

// adminWD is a withdrawal as the admin list shows it.
type adminWD struct {
	ID            string  `json:"withdrawal_id"`
	Asset         string  `json:"asset"`
	Status        string  `json:"status"`
	Destination   string  `json:"destination_address"`
	AmountNet     *string `json:"amount_net"`
	FailureReason *string `json:"failure_reason"`
	TxID          *string `json:"txid"`
}

// adminList reads every withdrawal in a status (or all), newest first.
func (d *driver) adminList(ctx context.Context, status string) []adminWD {
	var out []adminWD
	cursor := ""
	for {
		q := "/v1/admin/withdrawals?limit=200"
		if status != "" {
			q += "&status=" + status
		}
		resp, ok := d.call(ctx, http.MethodGet, q+cursor, nil, true)
		if !ok || resp.status != http.StatusOK {
			return out
		}
		var page struct {
			Withdrawals []adminWD `json:"withdrawals"`
			NextCursor  *string   `json:"next_cursor"`
		}
		if resp.decode(&page) != nil {
			return out
		}
		out = append(out, page.Withdrawals...)
		if page.NextCursor == nil {
			return out
		}
		cursor = "&cursor=" + *page.NextCursor
	}
}

// decide approves (mostly) or rejects a withdrawal waiting for an operator.
func (d *driver) decide(ctx context.Context, r *rand.Rand) {
	w, ok := pick(r, d.adminList(ctx, "pending_approval"))
	if !ok {
		return
	}
	if r.IntN(10) < 7 {
		d.count("approve")
		d.call(ctx, http.MethodPost, "/v1/admin/withdrawals/"+w.ID+"/approve", map[string]any{"note": "chaos"}, true)
		return
	}
	d.count("reject")
	d.call(ctx, http.MethodPost, "/v1/admin/withdrawals/"+w.ID+"/reject", map[string]any{"reason": "chaos"}, true)
}

// processor moves a live payout: broadcast, completed or cancelled.
func (d *driver) processor(r *rand.Rand) {
	var live []btcpaysim.PayoutInfo
	for _, p := range d.c.sim.Payouts() {
		if p.State == "AwaitingPayment" || p.State == "InProgress" {
			live = append(live, p)
		}
	}
	p, ok := pick(r, live)
	if !ok {
		return
	}
	switch n := r.IntN(10); {
	case n < 6:
		d.count("payout complete")
		_, _ = d.c.sim.CompletePayout(p.ID, "")
	case n < 8 && p.State == "AwaitingPayment" && strings.HasPrefix(p.Method, "BTC-CHAIN"):
		d.count("payout broadcast")
		_, _ = d.c.sim.BroadcastPayout(p.ID, "")
	default:
		d.count("payout fail")
		_ = d.c.sim.FailPayout(p.ID)
	}
}

// release returns a failed withdrawal's hold (refused while its payout is
// live: a 409 is a right answer).
func (d *driver) release(ctx context.Context, r *rand.Rand) {
	w, ok := pick(r, d.adminList(ctx, "failed"))
	if !ok {
		return
	}
	d.count("release")
	d.call(ctx, http.MethodPost, "/v1/admin/withdrawals/"+w.ID+"/release",
		map[string]any{"attestation": "chaos: the processor cancelled the payout"}, true)
}

// usdt plays the operator of an approved USDT withdrawal: the transfer on
// the TRON node, the report (mark-broadcast), and the block's solidity.
func (d *driver) usdt(ctx context.Context, r *rand.Rand, tag string) {
	var approved []adminWD
	for _, w := range d.adminList(ctx, "approved") {
		if w.Asset == "USDT_TRC20" && w.AmountNet != nil {
			approved = append(approved, w)
		}
	}
	d.c.tron.MineBlocks(20)
	w, ok := pick(r, approved)
	if !ok {
		return
	}
	d.sendUSDT(ctx, w, tag)
}

func (d *driver) sendUSDT(ctx context.Context, w adminWD, tag string) {
	d.count("usdt send")
	units, err := money.ParseDecimal(*w.AmountNet, 6)
	if err != nil {
		return
	}
	to, err := chain.ParseTronAddress(w.Destination)
	if err != nil {
		return
	}
	txid := d.c.tron.AddUSDTTransfer(fmt.Sprintf("%x", chaintest.Hash("chaos usdt "+tag+w.ID)), d.c.hot, to, units, true)
	d.call(ctx, http.MethodPost, "/v1/admin/withdrawals/"+w.ID+"/mark-broadcast", map[string]any{"txid": txid}, true)
}

// webhooks makes the processor's webhooks arrive twice, or holds a few and
// delivers them in reverse order.
func (d *driver) webhooks(r *rand.Rand) {
	if r.IntN(2) == 0 {
		on := r.IntN(2) == 0
		d.count(fmt.Sprintf("webhooks duplicated %v", on))
		d.c.sim.DuplicateWebhooks(on)
		return
	}
	d.count("webhooks reordered")
	d.c.sim.HoldWebhooks()
	time.Sleep(time.Duration(500+r.IntN(2500)) * time.Millisecond)
	d.c.sim.ReleaseWebhooks(true)
}

// read reads what a platform shows its users.
func (d *driver) read(ctx context.Context, r *rand.Rand) {
	d.count("read")
	user, _ := pick(r, users)
	paths := []string{"/v1/users/" + user + "/balances", "/v1/users/" + user + "/transactions?limit=20",
		"/v1/users/" + user + "/deposits?limit=20", "/v1/users/" + user + "/withdrawals?limit=20", "/v1/assets"}
	d.mu.Lock()
	if x, ok := pick(r, d.deposits); ok {
		paths = append(paths, "/v1/deposits/"+x.id)
	}
	if w, ok := pick(r, d.wds); ok {
		paths = append(paths, "/v1/withdrawals/"+w.id)
	}
	d.mu.Unlock()
	p, _ := pick(r, paths)
	resp, ok := d.call(ctx, http.MethodGet, p, nil, false)
	if ok && resp.status != http.StatusOK {
		d.v.add("GET %s answered %d: %s", p, resp.status, excerpt(resp.body))
	}
}

// summary is the driver's counts, sorted.
func (d *driver) summary() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var ops []string
	for k, n := range d.ops {
		ops = append(ops, fmt.Sprintf("%s=%d", k, n))
	}
	slices.Sort(ops)
	var st []string
	for k, n := range d.statuses {
		st = append(st, fmt.Sprintf("%d=%d", k, n))
	}
	slices.Sort(st)
	return fmt.Sprintf("deposits %d, withdrawals %d, idempotency keys %d\n  operations: %s\n  answers: %s",
		len(d.deposits), len(d.wds), d.keys, strings.Join(ops, " "), strings.Join(st, " "))
}
