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
// broadcasts, settlements and failing attempts from several goroutines,
// keeps a model of what each should do, and afterwards checks every money
// invariant against the model. Each worker has users of its own, whose
// outcomes the model predicts exactly, and all workers share a few users
// (and every system account), whose outcomes depend on timing: the model
// takes the ledger's answer for those and still requires the sums to add
// up.
func TestRandomOperations(t *testing.T) {
	t.Parallel()
	seed := randomFlags.Seed(t, "modules/ledger")
	const workers = 8
	d := newDB(t, workers+4)
	m := newModel()
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
	for k, want := range m.users {
		avail, held := balance(t, d, k.asset, k.user)
		require.Equal(t, want.available, avail, "seed %d: available of %s in %s", seed, k.user, k.asset)
		var open int64
		for _, h := range want.holds {
			open += h.amount
		}
		require.Equal(t, open, held, "seed %d: held of %s in %s must equal the open holds", seed, k.user, k.asset)
	}
	tot := totals(t, d)
	for _, a := range randomAssets {
		want := m.system[a]
		got := tot[a]
		require.Equal(t, want.custody, got.Custody, "seed %d: %s custody", seed, a)
		require.Equal(t, want.inFlight, got.InFlight, "seed %d: %s in flight", seed, a)
		require.Equal(t, want.feeIncome, got.FeeIncome, "seed %d: %s fee income", seed, a)
		require.Equal(t, want.networkFees, got.NetworkFees, "seed %d: %s network fees", seed, a)
	}
	require.Greater(t, m.stats["hold ok"], 0)
	require.Greater(t, m.stats["hold short"], 0)
	require.Greater(t, m.stats["settle"], 0)
	require.Greater(t, m.stats["release"], 0)
}

type userKey struct{ user, asset string }

type openHold struct {
	asset, user string
	amount      int64
	broadcast   int64 // 0 until recorded as broadcast
}

type userModel struct {
	available int64
	holds     map[string]openHold // by source_ref
}

type systemModel struct{ custody, inFlight, feeIncome, networkFees int64 }

// model is what the ledger should hold. Its lock also serializes the
// operations on shared users with their bookkeeping, not the database work.
type model struct {
	mu     sync.Mutex
	users  map[userKey]*userModel
	system map[string]*systemModel
	stats  map[string]int
}

func newModel() *model {
	m := &model{users: map[userKey]*userModel{}, system: map[string]*systemModel{}, stats: map[string]int{}}
	for _, a := range randomAssets {
		m.system[a] = &systemModel{}
	}
	return m
}

func (m *model) user(k userKey) *userModel {
	u := m.users[k]
	if u == nil {
		u = &userModel{holds: map[string]openHold{}}
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
		case p < 30:
			msg = r.credit()
		case p < 55:
			msg = r.hold()
		case p < 68:
			msg = r.release()
		case p < 83:
			msg = r.settle()
		case p < 90:
			msg = r.broadcast()
		default:
			msg = r.failing()
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
	r.m.user(userKey{user, asset}).available += amount
	r.m.system[asset].custody += amount
	r.m.stats["credit"]++
	r.m.mu.Unlock()
	r.credits = append(r.credits, creditRef{asset, user, ref, amount})
	return ""
}

func (r *runner) hold() string {
	user, shared := r.pickUser()
	asset := randomAssets[r.rng.IntN(len(randomAssets))]
	k := userKey{user, asset}
	r.m.mu.Lock()
	avail := r.m.user(k).available
	r.m.mu.Unlock()
	// Up to 30% more than available, so a good share does not fit.
	amount := 1 + r.rng.Int64N(avail+avail*3/10+1)
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
		if h, ok := u.holds[ref]; ok && k.user == h.user {
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
	u := r.m.user(userKey{h.user, h.asset})
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
	u := r.m.user(userKey{h.user, h.asset})
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
	u := r.m.user(userKey{h.user, h.asset})
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
