package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"svc/modules/ledger"
	"svc/platform/db"
	"svc/platform/randtest"
)

var randomFlags = randtest.NewFlags("ledger", 10_000,
	"operations of TestRandomOperations (more: go test ./modules/ledger -run TestRandomOperations -ledger.ops=200000)", "TestRandomOperations")

// randomAssets are the assets the random operations use (the ledger does
// not care whether an asset is enabled).
var randomAssets = []string{"BTC", "USDT_TRC20"}

// TestRandomOperations runs seeded random credits, holds, releases,
// broadcasts, settlements, transfers (one leg, several legs, two-asset
// trades), escrow holds with their captures, voids and expiries, replays
// and failing attempts from several goroutines, keeps a model of what
// each should do, and checks every money invariant against the model,
// during the run (checkpoint) and at its end. Each worker has users of its
// own, whose outcomes the model predicts exactly, and all workers share a
// few users, the platform accounts and every system account, whose
// outcomes depend on timing: the model takes the ledger's answer for those
// and still requires the sums to add up.
func TestRandomOperations(t *testing.T) {
	t.Parallel()
	seed := randomFlags.Seed(t, "modules/ledger")
	const workers = 8
	d := newDB(t, workers+4)
	m := newModel()
	createPlatformAccounts(t, d, randomAssets, randomPlatforms...)
	var wg sync.WaitGroup
	failures := make(chan string, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := &runner{t: t, d: d, m: m, w: w, rng: rand.New(rand.NewPCG(seed, uint64(w)))}
			if msg := r.run(randomFlags.Ops() / workers); msg != "" {
				failures <- msg
			}
		}()
	}
	wg.Wait()
	close(failures)
	for msg := range failures {
		t.Errorf("seed %d: %s", seed, msg)
	}
	if t.Failed() {
		return
	}

	requireInvariants(t, d)
	m.mu.Lock()
	defer m.mu.Unlock()
	t.Logf("seed %d: %v", seed, m.stats)
	m.requireBooks(t, d, seed)
	for _, s := range []string{"hold ok", "hold short", "settle", "release", "transfer", "transfer short", "multi-leg",
		"trade", "escrow hold", "escrow hold short", "capture", "capture with rest", "void", "expiry", "escrow replay"} {
		require.Greater(t, m.stats[s], 0, "seed %d: no %q", seed, s)
	}
}

// holderKey is one holder's accounts in one asset.
type holderKey struct {
	h     ledger.Holder
	asset string
}

func userKey(user, asset string) holderKey { return holderKey{ledger.UserHolder(user), asset} }

type openHold struct {
	asset, user string
	amount      int64
	broadcast   int64 // 0 until recorded as broadcast
}

type holderModel struct {
	available int64
	holds     map[string]openHold // withdrawal holds, by source_ref
	escrows   map[string]int64    // open escrow holds' amounts, by hold id
}

// held and reserved are what the holder's hold and escrow accounts must
// hold: the sums of its open withdrawal holds and of its open escrow holds.
func (u *holderModel) held() (n int64) {
	for _, h := range u.holds {
		n += h.amount
	}
	return n
}

func (u *holderModel) reserved() (n int64) {
	for _, x := range u.escrows {
		n += x
	}
	return n
}

type systemModel struct{ custody, inFlight, feeIncome, networkFees int64 }

// model is what the ledger should hold. Its lock also serializes the
// operations on shared users with their bookkeeping, not the database work.
type model struct {
	mu     sync.Mutex
	users  map[holderKey]*holderModel // users and platform accounts
	system map[string]*systemModel
	stats  map[string]int
}

func newModel() *model {
	m := &model{users: map[holderKey]*holderModel{}, system: map[string]*systemModel{}, stats: map[string]int{}}
	for _, a := range randomAssets {
		m.system[a] = &systemModel{}
	}
	return m
}

func (m *model) user(k holderKey) *holderModel {
	u := m.users[k]
	if u == nil {
		u = &holderModel{holds: map[string]openHold{}, escrows: map[string]int64{}}
		m.users[k] = u
	}
	return u
}

type runner struct {
	t       *testing.T
	d       *bun.DB
	m       *model
	w       int
	rng     *rand.Rand
	seq     int
	credits []creditRef  // this worker's credits, for replays
	holds   []string     // this worker's open holds (refs)
	done    []closedHold // this worker's released or settled holds
	escrows []escrowHold // this worker's open escrow holds
	closed  []escrowHold // this worker's captured, voided or expired escrow holds
}

type creditRef struct {
	asset, user, ref string
	amount           int64
}

type closedHold struct {
	h       openHold
	ref     string
	settled bool
}

func (r *runner) ref(kind string) string {
	r.seq++
	return fmt.Sprintf("w%d-%s-%d", r.w, kind, r.seq)
}

// pickUser returns one of the worker's own users, or a shared one.
func (r *runner) pickUser() (string, bool) {
	if r.rng.IntN(4) == 0 {
		return fmt.Sprintf("shared-%d", r.rng.IntN(3)), true
	}
	return fmt.Sprintf("w%d-u%d", r.w, r.rng.IntN(5)), false
}

func (r *runner) tx(fn func(ctx context.Context, tx bun.Tx) error) error {
	return db.RunInTx(context.Background(), r.d, fn)
}

// run performs n operations and returns a description of the first
// surprise, or "".
func (r *runner) run(n int) string {
	for i := range n {
		var msg string
		switch p := r.rng.IntN(100); {
		case p < 18:
			msg = r.credit()
		case p < 32:
			msg = r.hold()
		case p < 39:
			msg = r.release()
		case p < 48:
			msg = r.settle()
		case p < 52:
			msg = r.broadcast()
		case p < 57:
			msg = r.failing()
		case p < 68:
			msg = r.transfer()
		case p < 74:
			msg = r.multiLeg()
		case p < 85:
			msg = r.escrowHold()
		case p < 90:
			msg = r.capture()
		case p < 93:
			msg = r.releaseEscrow(false)
		case p < 95:
			msg = r.releaseEscrow(true)
		default:
			msg = r.failingInside()
		}
		if msg == "" && (i+1)%checkpointEvery == 0 {
			msg = r.checkpoint()
		}
		if msg != "" {
			return fmt.Sprintf("worker %d, operation %d: %s", r.w, i, msg)
		}
	}
	return ""
}

func (r *runner) stat(s string) {
	r.m.mu.Lock()
	r.m.stats[s]++
	r.m.mu.Unlock()
}

func (r *runner) credit() string {
	if len(r.credits) > 0 && r.rng.IntN(20) == 0 {
		c := r.credits[r.rng.IntN(len(r.credits))]
		var p ledger.Posted
		err := r.tx(func(ctx context.Context, tx bun.Tx) error {
			var err error
			p, err = ledger.CreditDeposit(ctx, tx, c.asset, ledger.UserHolder(c.user), c.amount, c.ref, "")
			return err
		})
		if err != nil || !p.Replayed {
			return fmt.Sprintf("replayed credit %s: replayed=%v err=%v", c.ref, p.Replayed, err)
		}
		r.stat("credit replay")
		return ""
	}
	user, _ := r.pickUser()
	asset := randomAssets[r.rng.IntN(len(randomAssets))]
	amount := 1 + r.rng.Int64N(100_000)
	ref := r.ref("pay")
	err := r.tx(func(ctx context.Context, tx bun.Tx) error {
		_, err := ledger.CreditDeposit(ctx, tx, asset, ledger.UserHolder(user), amount, ref, "")
		return err
	})
	if err != nil {
		return fmt.Sprintf("credit %s: %v", ref, err)
	}
	r.m.mu.Lock()
	r.m.user(userKey(user, asset)).available += amount
	r.m.system[asset].custody += amount
	r.m.stats["credit"]++
	r.m.mu.Unlock()
	r.credits = append(r.credits, creditRef{asset, user, ref, amount})
	return ""
}

func (r *runner) hold() string {
	user, shared := r.pickUser()
	asset := randomAssets[r.rng.IntN(len(randomAssets))]
	k := userKey(user, asset)
	r.m.mu.Lock()
	avail := r.m.user(k).available
	r.m.mu.Unlock()
	amount := r.tryAmount(avail)
	ref := r.ref("wd")
	err := r.tx(func(ctx context.Context, tx bun.Tx) error {
		_, err := ledger.PlaceHold(ctx, tx, asset, ledger.UserHolder(user), amount, ref, "")
		return err
	})
	switch {
	case err == nil:
		if !shared && amount > avail {
			return fmt.Sprintf("hold %s of %d succeeded with only %d available", ref, amount, avail)
		}
		r.m.mu.Lock()
		u := r.m.user(k)
		u.available -= amount
		u.holds[ref] = openHold{asset: asset, user: user, amount: amount}
		r.m.stats["hold ok"]++
		r.m.mu.Unlock()
		r.holds = append(r.holds, ref)
	case errors.Is(err, ledger.ErrInsufficientFunds):
		if !shared && amount <= avail {
			return fmt.Sprintf("hold %s of %d refused with %d available: %v", ref, amount, avail, err)
		}
		r.stat("hold short")
	default:
		return fmt.Sprintf("hold %s: %v", ref, err)
	}
	return ""
}

// takeHold removes and returns one of the worker's open holds.
func (r *runner) takeHold() (string, openHold, bool) {
	if len(r.holds) == 0 {
		return "", openHold{}, false
	}
	i := r.rng.IntN(len(r.holds))
	ref := r.holds[i]
	r.holds[i] = r.holds[len(r.holds)-1]
	r.holds = r.holds[:len(r.holds)-1]
	r.m.mu.Lock()
	defer r.m.mu.Unlock()
	for k, u := range r.m.users {
		if h, ok := u.holds[ref]; ok && k.h == ledger.UserHolder(h.user) {
			return ref, h, true
		}
	}
	return "", openHold{}, false
}

func (r *runner) release() string {
	ref, h, ok := r.takeHold()
	if !ok {
		return r.credit()
	}
	err := r.tx(func(ctx context.Context, tx bun.Tx) error {
		_, err := ledger.ReleaseHold(ctx, tx, h.asset, ledger.UserHolder(h.user), h.amount, ref, "rejected")
		return err
	})
	if err != nil {
		return fmt.Sprintf("release %s: %v", ref, err)
	}
	r.m.mu.Lock()
	u := r.m.user(userKey(h.user, h.asset))
	delete(u.holds, ref)
	u.available += h.amount
	// A release after a broadcast leaves the payout in flight: only a
	// correction could say where that money went.
	r.m.stats["release"]++
	r.m.mu.Unlock()
	r.done = append(r.done, closedHold{h: h, ref: ref})
	return ""
}

// settlement picks fees for settling h.
func (r *runner) settlement(ref string, h openHold) ledger.Settlement {
	s := ledger.Settlement{Asset: h.asset, ExternalUserID: h.user, SourceRef: ref, Gross: h.amount, Net: h.amount, Mode: ledger.FeeAbsorb}
	if h.amount > 1 && r.rng.IntN(2) == 0 {
		s.Mode = ledger.FeeDeduct
		s.ServiceFee = r.rng.Int64N(h.amount) // net stays >= 1
		s.Net = h.amount - s.ServiceFee
	}
	s.NetworkFee = r.rng.Int64N(1_000)
	return s
}

func (r *runner) broadcast() string {
	ref, h, ok := r.takeHold()
	if !ok || h.broadcast != 0 {
		if ok {
			r.holds = append(r.holds, ref)
		}
		return r.hold()
	}
	amount := 1 + r.rng.Int64N(h.amount+1_000)
	err := r.tx(func(ctx context.Context, tx bun.Tx) error {
		_, err := ledger.RecordPayoutBroadcast(ctx, tx, h.asset, amount, ref, "txid")
		return err
	})
	if err != nil {
		return fmt.Sprintf("broadcast %s: %v", ref, err)
	}
	r.m.mu.Lock()
	u := r.m.user(userKey(h.user, h.asset))
	h.broadcast = amount
	u.holds[ref] = h
	r.m.system[h.asset].custody -= amount
	r.m.system[h.asset].inFlight += amount
	r.m.stats["broadcast"]++
	r.m.mu.Unlock()
	r.holds = append(r.holds, ref)
	return ""
}

func (r *runner) settle() string {
	ref, h, ok := r.takeHold()
	if !ok {
		return r.hold()
	}
	s := r.settlement(ref, h)
	err := r.tx(func(ctx context.Context, tx bun.Tx) error {
		_, err := ledger.SettlePayout(ctx, tx, s)
		return err
	})
	if err != nil {
		return fmt.Sprintf("settle %s: %v", ref, err)
	}
	r.m.mu.Lock()
	u := r.m.user(userKey(h.user, h.asset))
	delete(u.holds, ref)
	sys := r.m.system[h.asset]
	// In flight is cleared; custody loses net + network fee in total,
	// part of which it already lost at the broadcast.
	sys.inFlight -= h.broadcast
	sys.custody -= s.Net + s.NetworkFee - h.broadcast
	sys.feeIncome += s.ServiceFee
	sys.networkFees += s.NetworkFee
	r.m.stats["settle"]++
	r.m.mu.Unlock()
	r.done = append(r.done, closedHold{h: h, ref: ref, settled: true})
	return ""
}

// failing attempts something the ledger must refuse and checks that it
// does, without changing anything.
func (r *runner) failing() string {
	ctx := context.Background()
	switch r.rng.IntN(4) {
	case 0: // release or settle a hold that is closed already
		if len(r.done) == 0 {
			break
		}
		c := r.done[r.rng.IntN(len(r.done))]
		if c.settled {
			_, err := ledger.ReleaseHold(ctx, r.d, c.h.asset, ledger.UserHolder(c.h.user), c.h.amount, c.ref, "")
			if !errors.Is(err, ledger.ErrHoldSettled) {
				return fmt.Sprintf("release of settled %s: %v", c.ref, err)
			}
		} else {
			s := r.settlement(c.ref, c.h)
			_, err := ledger.SettlePayout(ctx, r.d, s)
			if !errors.Is(err, ledger.ErrHoldReleased) {
				return fmt.Sprintf("settle of released %s: %v", c.ref, err)
			}
		}
		r.stat("refused closed")
		return ""
	case 1: // release a hold with the wrong amount
		if len(r.holds) == 0 {
			break
		}
		ref := r.holds[r.rng.IntN(len(r.holds))]
		r.m.mu.Lock()
		var h openHold
		for _, u := range r.m.users {
			if x, ok := u.holds[ref]; ok {
				h = x
			}
		}
		r.m.mu.Unlock()
		_, err := ledger.ReleaseHold(ctx, r.d, h.asset, ledger.UserHolder(h.user), h.amount+1, ref, "")
		if !errors.Is(err, ledger.ErrNoHold) {
			return fmt.Sprintf("release of %s with a wrong amount: %v", ref, err)
		}
		r.stat("refused wrong amount")
		return ""
	case 2: // credit the same payment with another amount
		if len(r.credits) == 0 {
			break
		}
		c := r.credits[r.rng.IntN(len(r.credits))]
		_, err := ledger.CreditDeposit(ctx, r.d, c.asset, ledger.UserHolder(c.user), c.amount+1, c.ref, "")
		if !errors.Is(err, ledger.ErrReplayMismatch) {
			return fmt.Sprintf("credit %s with another amount: %v", c.ref, err)
		}
		r.stat("refused replay mismatch")
		return ""
	}
	// a hold far beyond anything a user of this worker has
	user := fmt.Sprintf("w%d-u%d", r.w, r.rng.IntN(5))
	_, err := ledger.PlaceHold(ctx, r.d, randomAssets[0], ledger.UserHolder(user), 1<<60, r.ref("wd-huge"), "")
	if !errors.Is(err, ledger.ErrInsufficientFunds) {
		return fmt.Sprintf("huge hold: %v", err)
	}
	r.stat("refused huge hold")
	return ""
}
