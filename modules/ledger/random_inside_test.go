package ledger_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"svc/modules/ledger"
)

// The money that moves inside the platform in TestRandomOperations:
// transfers, escrow holds and their ends, and the checks of the books
// during and after the run.

// randomPlatforms are the platform accounts every worker pays and spends
// from.
var randomPlatforms = []string{"revenue", "pool:1", "commission"}

// checkpointEvery is how many operations a worker makes between two of its
// checkpoints.
const checkpointEvery = 100

// escrowHold is an escrow hold of this worker, open or closed.
type escrowHold struct {
	payer       ledger.Holder
	asset, ref  string
	amount      int64
	capturedTo  []ledger.CaptureLeg // once closed by a capture
	rest        int64               // released when closed
	closedAs    string              // "capture", "void" or "expiry" once closed
	releaseMemo string
}

// pickHolder returns one of the worker's own users, a shared user or a
// platform account.
func (r *runner) pickHolder() ledger.Holder {
	switch p := r.rng.IntN(100); {
	case p < 55:
		return ledger.UserHolder(fmt.Sprintf("w%d-u%d", r.w, r.rng.IntN(5)))
	case p < 75:
		return ledger.UserHolder(fmt.Sprintf("shared-%d", r.rng.IntN(3)))
	default:
		return ledger.PlatformHolder(randomPlatforms[r.rng.IntN(len(randomPlatforms))])
	}
}

// pickOther returns a holder that is none of not.
func (r *runner) pickOther(not ...ledger.Holder) ledger.Holder {
	for {
		h := r.pickHolder()
		taken := false
		for _, x := range not {
			taken = taken || x == h
		}
		if !taken {
			return h
		}
	}
}

// exact reports a holder only this worker touches: the model predicts its
// every outcome.
func (r *runner) exact(h ledger.Holder) bool {
	return !h.Platform && strings.HasPrefix(h.ID, fmt.Sprintf("w%d-", r.w))
}

// tryAmount picks an amount up to 30% more than avail, so that a good
// share does not fit. A shared holder's avail in the model can be behind
// the ledger, even below zero for a moment (another worker's credit is
// booked after its commit).
func (r *runner) tryAmount(avail int64) int64 {
	avail = max(avail, 0)
	return 1 + r.rng.Int64N(avail+avail*3/10+1)
}

func (r *runner) available(h ledger.Holder, asset string) int64 {
	r.m.mu.Lock()
	defer r.m.mu.Unlock()
	return r.m.user(holderKey{h, asset}).available
}

func (r *runner) asset() string { return randomAssets[r.rng.IntN(len(randomAssets))] }

// lockedTx runs fn, which starts with ledger.LockAccounts, in a
// transaction that is not retried: a deadlock, which LockAccounts is there
// to prevent, fails the test instead of being hidden by a retry.
func (r *runner) lockedTx(fn func(ctx context.Context, tx bun.Tx) error) error {
	return r.d.RunInTx(context.Background(), nil, fn)
}

// short checks that err is an *InsufficientFundsError naming account in
// asset, and returns "" if so.
func short(err error, asset string, account ledger.Account) string {
	var e *ledger.InsufficientFundsError
	if !errors.As(err, &e) {
		return fmt.Sprintf("want an insufficient funds error naming %s %s, got %v", asset, account, err)
	}
	if e.Asset != asset || e.Account != account {
		return fmt.Sprintf("the insufficient funds error names %s %s, not %s %s", e.Asset, e.Account, asset, account)
	}
	return ""
}

// transfer moves money from one holder's available to another's in one
// leg.
func (r *runner) transfer() string {
	from := r.pickHolder()
	to := r.pickOther(from)
	asset := r.asset()
	avail := r.available(from, asset)
	amount := r.tryAmount(avail)
	ref := r.ref("tr") + ":0"
	err := r.tx(func(ctx context.Context, tx bun.Tx) error {
		_, err := ledger.PostTransferLeg(ctx, tx, asset, from, to, amount, ref, "")
		return err
	})
	switch {
	case err == nil:
		if r.exact(from) && amount > avail {
			return fmt.Sprintf("transfer %s of %d from %s succeeded with only %d available", ref, amount, from, avail)
		}
		r.m.mu.Lock()
		r.m.user(holderKey{from, asset}).available -= amount
		r.m.user(holderKey{to, asset}).available += amount
		r.m.stats["transfer"]++
		r.m.mu.Unlock()
	case errors.Is(err, ledger.ErrInsufficientFunds):
		if r.exact(from) && amount <= avail {
			return fmt.Sprintf("transfer %s of %d from %s refused with %d available: %v", ref, amount, from, avail, err)
		}
		if msg := short(err, asset, from.Available()); msg != "" {
			return fmt.Sprintf("transfer %s: %s", ref, msg)
		}
		r.stat("transfer short")
		return r.requireExact(from, to)
	default:
		return fmt.Sprintf("transfer %s: %v", ref, err)
	}
	return ""
}

type transferLeg struct {
	asset    string
	from, to ledger.Holder
	amount   int64
}

// multiLeg posts a transfer of two to four legs, or a two-asset trade (A
// pays B in one asset, B pays A in the other), in one transaction that
// locks its accounts first. Every leg commits or none does.
func (r *runner) multiLeg() string {
	var legs []transferLeg
	// sim is the available balances the legs see, leg after leg, if all
	// of them go through; fails is the first leg from a holder of this
	// worker that cannot pay, given the legs before it.
	sim := map[holderKey]int64{}
	fails := -1
	r.m.mu.Lock()
	bal := func(h ledger.Holder, asset string) int64 {
		k := holderKey{h, asset}
		if _, ok := sim[k]; !ok {
			sim[k] = r.m.user(k).available
		}
		return sim[k]
	}
	add := func(from, to ledger.Holder, asset string) {
		// Mostly what fits, so that most transfers commit.
		amount := 1 + r.rng.Int64N(max(bal(from, asset), 0)*11/10+1)
		if fails < 0 && r.exact(from) && bal(from, asset) < amount {
			fails = len(legs)
		}
		sim[holderKey{to, asset}] = bal(to, asset) + amount
		sim[holderKey{from, asset}] -= amount
		legs = append(legs, transferLeg{asset, from, to, amount})
	}
	trade := r.rng.IntN(3) == 0
	if trade {
		a := r.pickHolder()
		b := r.pickOther(a)
		first, second := randomAssets[0], randomAssets[1]
		if r.rng.IntN(2) == 0 {
			first, second = second, first
		}
		add(a, b, first)
		add(b, a, second)
	} else {
		for range 2 + r.rng.IntN(3) {
			from := r.pickHolder()
			add(from, r.pickOther(from), r.asset())
		}
	}
	r.m.mu.Unlock()
	ref := r.ref("tr")
	err := r.lockedTx(func(ctx context.Context, tx bun.Tx) error {
		var refs []ledger.AccountRef
		for _, l := range legs {
			refs = append(refs, ledger.AccountRef{Asset: l.asset, Account: l.from.Available()}, ledger.AccountRef{Asset: l.asset, Account: l.to.Available()})
		}
		if err := ledger.LockAccounts(ctx, tx, refs); err != nil {
			return err
		}
		for i, l := range legs {
			if _, err := ledger.PostTransferLeg(ctx, tx, l.asset, l.from, l.to, l.amount, fmt.Sprintf("%s:%d", ref, i), ""); err != nil {
				return err
			}
		}
		return nil
	})
	var e *ledger.InsufficientFundsError
	switch {
	case err == nil:
		if fails >= 0 {
			return fmt.Sprintf("transfer %s %+v succeeded, but leg %d cannot be paid", ref, legs, fails)
		}
		r.m.mu.Lock()
		for _, l := range legs {
			r.m.user(holderKey{l.from, l.asset}).available -= l.amount
			r.m.user(holderKey{l.to, l.asset}).available += l.amount
		}
		r.m.stats["multi-leg"]++
		if trade {
			r.m.stats["trade"]++
		}
		r.m.mu.Unlock()
		return ""
	case errors.As(err, &e):
		// The leg refused is the first that cannot pay: one from a holder
		// of this worker that the model says cannot, or one before it
		// from a shared holder.
		named := -1
		for i, l := range legs {
			if l.asset == e.Asset && l.from.Available() == e.Account {
				named = i
				break
			}
		}
		switch {
		case named < 0:
			return fmt.Sprintf("transfer %s %+v: the refusal names no leg's payer: %v", ref, legs, err)
		case fails < 0 && r.exact(legs[named].from):
			return fmt.Sprintf("transfer %s %+v refused, but every leg can be paid: %v", ref, legs, err)
		case fails >= 0 && (named > fails || r.exact(legs[named].from) && legs[named].from != legs[fails].from):
			return fmt.Sprintf("transfer %s %+v: leg %d cannot be paid first, but the refusal names %v", ref, legs, fails, err)
		}
		r.stat("multi-leg short")
		var hs []ledger.Holder
		for _, l := range legs {
			hs = append(hs, l.from, l.to)
		}
		return r.requireExact(hs...)
	default:
		return fmt.Sprintf("transfer %s %+v: %v", ref, legs, err)
	}
}

// escrowHold reserves money of a holder's available for a new escrow hold.
func (r *runner) escrowHold() string {
	payer := r.pickHolder()
	asset := r.asset()
	avail := r.available(payer, asset)
	amount := r.tryAmount(avail)
	ref := r.ref("hold")
	err := r.tx(func(ctx context.Context, tx bun.Tx) error {
		_, err := ledger.PostEscrowHold(ctx, tx, asset, payer, amount, ref, "")
		return err
	})
	switch {
	case err == nil:
		if r.exact(payer) && amount > avail {
			return fmt.Sprintf("escrow hold %s of %d from %s succeeded with only %d available", ref, amount, payer, avail)
		}
		r.m.mu.Lock()
		u := r.m.user(holderKey{payer, asset})
		u.available -= amount
		u.escrows[ref] = amount
		r.m.stats["escrow hold"]++
		r.m.mu.Unlock()
		r.escrows = append(r.escrows, escrowHold{payer: payer, asset: asset, ref: ref, amount: amount})
	case errors.Is(err, ledger.ErrInsufficientFunds):
		if r.exact(payer) && amount <= avail {
			return fmt.Sprintf("escrow hold %s of %d from %s refused with %d available: %v", ref, amount, payer, avail, err)
		}
		if msg := short(err, asset, payer.Available()); msg != "" {
			return fmt.Sprintf("escrow hold %s: %s", ref, msg)
		}
		r.stat("escrow hold short")
		return r.requireExact(payer)
	default:
		return fmt.Sprintf("escrow hold %s: %v", ref, err)
	}
	return ""
}

// takeEscrow removes and returns one of the worker's open escrow holds.
func (r *runner) takeEscrow() (escrowHold, bool) {
	if len(r.escrows) == 0 {
		return escrowHold{}, false
	}
	i := r.rng.IntN(len(r.escrows))
	h := r.escrows[i]
	r.escrows[i] = r.escrows[len(r.escrows)-1]
	r.escrows = r.escrows[:len(r.escrows)-1]
	return h, true
}

// captureLegs picks one to three recipients of a capture of h, with a
// platform account among them when there are two or more (a seller and
// the commission), and how much of h each gets: all of h, or less with
// the rest to go back to the payer.
func (r *runner) captureLegs(h escrowHold) ([]ledger.CaptureLeg, int64) {
	n := int64(1 + r.rng.IntN(3))
	n = min(n, h.amount)
	captured := h.amount
	if r.rng.IntN(3) != 0 {
		captured = n + r.rng.Int64N(h.amount-n+1)
	}
	var legs []ledger.CaptureLeg
	taken := []ledger.Holder{h.payer}
	left := captured - n // shared out over the legs' 1 each
	for i := range n {
		var to ledger.Holder
		if i == 0 && n > 1 {
			to = ledger.PlatformHolder(randomPlatforms[r.rng.IntN(len(randomPlatforms))])
			if to == h.payer {
				to = r.pickOther(taken...)
			}
		} else {
			to = r.pickOther(taken...)
		}
		taken = append(taken, to)
		amount := int64(1)
		if i == n-1 {
			amount += left
		} else {
			x := r.rng.Int64N(left + 1)
			amount += x
			left -= x
		}
		legs = append(legs, ledger.CaptureLeg{To: to, Amount: amount})
	}
	return legs, h.amount - captured
}

// postCapture captures h to legs and releases the rest, in one
// transaction that locks its accounts first, as a hold's capture does.
func (r *runner) postCapture(h escrowHold, legs []ledger.CaptureLeg, rest int64) (capture, release ledger.Posted, err error) {
	err = r.lockedTx(func(ctx context.Context, tx bun.Tx) error {
		refs := []ledger.AccountRef{{Asset: h.asset, Account: h.payer.Escrow()}}
		if rest > 0 {
			refs = append(refs, ledger.AccountRef{Asset: h.asset, Account: h.payer.Available()})
		}
		for _, l := range legs {
			refs = append(refs, ledger.AccountRef{Asset: h.asset, Account: l.To.Available()})
		}
		if err := ledger.LockAccounts(ctx, tx, refs); err != nil {
			return err
		}
		var err error
		if capture, err = ledger.PostEscrowCapture(ctx, tx, h.asset, h.payer, legs, h.ref, "captured"); err != nil || rest == 0 {
			return err
		}
		release, err = ledger.PostEscrowRelease(ctx, tx, h.asset, h.payer, rest, h.ref, "rest of the capture")
		return err
	})
	return capture, release, err
}

// capture pays part or all of an open escrow hold to its recipients and
// returns the rest to the payer.
func (r *runner) capture() string {
	h, ok := r.takeEscrow()
	if !ok {
		return r.escrowHold()
	}
	legs, rest := r.captureLegs(h)
	if _, _, err := r.postCapture(h, legs, rest); err != nil {
		return fmt.Sprintf("capture %s of %d to %+v, rest %d: %v", h.ref, h.amount, legs, rest, err)
	}
	r.m.mu.Lock()
	u := r.m.user(holderKey{h.payer, h.asset})
	delete(u.escrows, h.ref)
	u.available += rest
	for _, l := range legs {
		r.m.user(holderKey{l.To, h.asset}).available += l.Amount
	}
	r.m.stats["capture"]++
	if rest > 0 {
		r.m.stats["capture with rest"]++
	}
	r.m.mu.Unlock()
	h.closedAs, h.capturedTo, h.rest, h.releaseMemo = "capture", legs, rest, "rest of the capture"
	r.closed = append(r.closed, h)
	return ""
}

// releaseEscrow returns all of an open escrow hold to its payer: a void,
// or an expiry as the hold module's job makes it.
func (r *runner) releaseEscrow(expiry bool) string {
	h, ok := r.takeEscrow()
	if !ok {
		return r.escrowHold()
	}
	kind, memo := "void", "voided"
	if expiry {
		kind, memo = "expiry", "expired"
	}
	err := r.tx(func(ctx context.Context, tx bun.Tx) error {
		_, err := ledger.PostEscrowRelease(ctx, tx, h.asset, h.payer, h.amount, h.ref, memo)
		return err
	})
	if err != nil {
		return fmt.Sprintf("%s of %s: %v", kind, h.ref, err)
	}
	r.m.mu.Lock()
	u := r.m.user(holderKey{h.payer, h.asset})
	delete(u.escrows, h.ref)
	u.available += h.amount
	r.m.stats[kind]++
	r.m.mu.Unlock()
	h.closedAs, h.rest, h.releaseMemo = kind, h.amount, memo
	r.closed = append(r.closed, h)
	return ""
}

// failingInside replays what was posted, or attempts what the ledger must
// refuse, and checks that nothing changed.
func (r *runner) failingInside() string {
	switch r.rng.IntN(4) {
	case 0: // a capture, void or expiry again
		if len(r.closed) == 0 {
			break
		}
		h := r.closed[r.rng.IntN(len(r.closed))]
		var capture, release ledger.Posted
		var err error
		if h.closedAs == "capture" {
			capture, release, err = r.postCapture(h, h.capturedTo, h.rest)
			if err == nil && !capture.Replayed {
				return fmt.Sprintf("replayed capture %s posted again: %+v", h.ref, capture)
			}
		} else {
			err = r.tx(func(ctx context.Context, tx bun.Tx) error {
				var err error
				release, err = ledger.PostEscrowRelease(ctx, tx, h.asset, h.payer, h.rest, h.ref, h.releaseMemo)
				return err
			})
		}
		if err != nil || h.rest > 0 && !release.Replayed {
			return fmt.Sprintf("replayed %s of %s: release replayed=%v, err=%v", h.closedAs, h.ref, release.Replayed, err)
		}
		// Other amounts under the same hold id: releasing more than was
		// released, or capturing more than was captured.
		if h.rest > 0 {
			_, err = ledger.PostEscrowRelease(context.Background(), r.d, h.asset, h.payer, h.rest+1, h.ref, "")
		} else {
			legs := append([]ledger.CaptureLeg(nil), h.capturedTo...)
			legs[0].Amount++
			_, err = ledger.PostEscrowCapture(context.Background(), r.d, h.asset, h.payer, legs, h.ref, "")
		}
		if !errors.Is(err, ledger.ErrReplayMismatch) {
			return fmt.Sprintf("%s of %s again with another amount: %v", h.closedAs, h.ref, err)
		}
		r.stat("escrow replay")
		hs := []ledger.Holder{h.payer}
		for _, l := range h.capturedTo {
			hs = append(hs, l.To)
		}
		return r.requireExact(hs...)
	case 1: // an open escrow hold placed again
		if len(r.escrows) == 0 {
			break
		}
		h := r.escrows[r.rng.IntN(len(r.escrows))]
		p, err := ledger.PostEscrowHold(context.Background(), r.d, h.asset, h.payer, h.amount, h.ref, "")
		if err != nil || !p.Replayed {
			return fmt.Sprintf("replayed escrow hold %s: replayed=%v err=%v", h.ref, p.Replayed, err)
		}
		r.stat("escrow hold replay")
		return r.requireExact(h.payer)
	case 2: // a capture of more than a user of this worker has in escrow
		payer := ledger.UserHolder(fmt.Sprintf("w%d-u%d", r.w, r.rng.IntN(5)))
		asset := r.asset()
		r.m.mu.Lock()
		reserved := r.m.user(holderKey{payer, asset}).reserved()
		r.m.mu.Unlock()
		h := escrowHold{payer: payer, asset: asset, ref: r.ref("hold-none")}
		_, _, err := r.postCapture(h, []ledger.CaptureLeg{{To: ledger.PlatformHolder(randomPlatforms[0]), Amount: reserved + 1}}, 0)
		if msg := short(err, asset, payer.Escrow()); msg != "" {
			return fmt.Sprintf("capture of %d from %s's escrow of %d: %s", reserved+1, payer, reserved, msg)
		}
		r.stat("refused over-capture")
		return r.requireExact(payer)
	}
	// a transfer of more than a user of this worker has
	from := ledger.UserHolder(fmt.Sprintf("w%d-u%d", r.w, r.rng.IntN(5)))
	to := r.pickOther(from)
	asset := r.asset()
	amount := r.available(from, asset) + 1 + r.rng.Int64N(1_000)
	err := r.tx(func(ctx context.Context, tx bun.Tx) error {
		_, err := ledger.PostTransferLeg(ctx, tx, asset, from, to, amount, r.ref("tr-short")+":0", "")
		return err
	})
	if msg := short(err, asset, from.Available()); msg != "" {
		return fmt.Sprintf("transfer of %d from %s: %s", amount, from, msg)
	}
	r.stat("refused transfer")
	return r.requireExact(from, to)
}

// requireExact compares the balances of those of hs that only this worker
// touches with the model: available, held (the open withdrawal holds) and
// reserved (the open escrow holds), in every asset.
func (r *runner) requireExact(hs ...ledger.Holder) string {
	for _, h := range hs {
		if !r.exact(h) {
			continue
		}
		list, err := ledger.HolderBalances(context.Background(), r.d, h)
		if err != nil {
			return fmt.Sprintf("balances of %s: %v", h, err)
		}
		r.m.mu.Lock()
		msg := r.m.compare(h, list)
		r.m.mu.Unlock()
		if msg != "" {
			return msg
		}
	}
	return ""
}

// compare compares a holder's balances with the model. The caller holds
// m.mu.
func (m *model) compare(h ledger.Holder, list []ledger.Balance) string {
	for _, a := range randomAssets {
		var got ledger.Balance
		for _, b := range list {
			if b.Asset == a {
				got = b
			}
		}
		if got.Available < 0 || got.Held < 0 || got.Reserved < 0 {
			return fmt.Sprintf("%s has a negative balance in %s: %+v", h, a, got)
		}
		u := m.user(holderKey{h, a})
		want := ledger.Balance{Available: u.available, Held: u.held(), Reserved: u.reserved()}
		if got.Available != want.Available || got.Held != want.Held || got.Reserved != want.Reserved {
			return fmt.Sprintf("%s in %s: available/held/reserved %d/%d/%d, the model (held: open withdrawal holds, reserved: open escrow holds) says %d/%d/%d",
				h, a, got.Available, got.Held, got.Reserved, want.Available, want.Held, want.Reserved)
		}
	}
	return ""
}

// checkpoint checks, while the other workers run, this worker's users
// against the model (their escrow is their open escrow holds), and the
// books in one snapshot: no negative balance, and custody, in flight and
// network fees explained by what is owed to users and platform accounts,
// fee income and suspense.
func (r *runner) checkpoint() string {
	var own []ledger.Holder
	for i := range 5 {
		own = append(own, ledger.UserHolder(fmt.Sprintf("w%d-u%d", r.w, i)))
	}
	if msg := r.requireExact(own...); msg != "" {
		return "checkpoint: " + msg
	}
	ctx := context.Background()
	tx, err := r.d.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true})
	if err != nil {
		return fmt.Sprintf("checkpoint: %v", err)
	}
	defer func() { _ = tx.Rollback() }()
	list, err := ledger.AssetTotals(ctx, tx)
	if err != nil {
		return fmt.Sprintf("checkpoint: %v", err)
	}
	var negative int64
	if err := tx.NewRaw(`SELECT count(*) FROM ledger_accounts WHERE balance < 0`).Scan(ctx, &negative); err != nil {
		return fmt.Sprintf("checkpoint: %v", err)
	}
	if negative != 0 {
		return fmt.Sprintf("checkpoint: %d negative balances", negative)
	}
	for _, t := range list {
		if msg := booksBalance(t); msg != "" {
			return "checkpoint: " + msg
		}
	}
	r.stat("checkpoint")
	return ""
}

// booksBalance checks one asset's totals: every owned balance at least
// zero, and what the service holds (custody, in flight, and the network
// fees it paid out of custody; transfer, what custody sent to the pair's
// other custody) equal to what it owes (users and platform accounts) plus
// what is its own or unattributed (fee income, suspense).
func booksBalance(t ledger.Totals) string {
	for _, x := range []int64{t.UserAvailable, t.UserHold, t.UserEscrow, t.PlatformAvailable, t.PlatformHold, t.PlatformEscrow} {
		if x < 0 {
			return fmt.Sprintf("%s: a negative total: %+v", t.Asset, t)
		}
	}
	if held, owed := t.Custody+t.InFlight+t.NetworkFees+t.Transfer, t.Obligations()+t.FeeIncome+t.Suspense; held != owed {
		return fmt.Sprintf("%s: custody %d + in flight %d + network fees %d + transfer %d = %d, but obligations %d (users %d, platform accounts %d) + fee income %d + suspense %d = %d",
			t.Asset, t.Custody, t.InFlight, t.NetworkFees, t.Transfer, held, t.Obligations(), t.UserObligations(), t.PlatformObligations(), t.FeeIncome, t.Suspense, owed)
	}
	return ""
}

// requireBooks compares, after the run, every holder's balances and every
// asset's totals with the model: each holder's escrow is its open escrow
// holds, its hold its open withdrawal holds. The caller holds m.mu.
func (m *model) requireBooks(t *testing.T, d *bun.DB, seed uint64) {
	t.Helper()
	type sums struct{ users, platforms, userEscrow, platformEscrow int64 }
	want := map[string]*sums{}
	for _, a := range randomAssets {
		want[a] = &sums{}
	}
	seen := map[ledger.Holder]bool{}
	for k, u := range m.users {
		s := want[k.asset]
		if k.h.Platform {
			s.platforms += u.available + u.held() + u.reserved()
			s.platformEscrow += u.reserved()
		} else {
			s.users += u.available + u.held() + u.reserved()
			s.userEscrow += u.reserved()
		}
		if seen[k.h] {
			continue
		}
		seen[k.h] = true
		list, err := ledger.HolderBalances(context.Background(), d, k.h)
		require.NoError(t, err)
		if msg := m.compare(k.h, list); msg != "" {
			t.Fatalf("seed %d: %s", seed, msg)
		}
	}
	tot := totals(t, d)
	for _, a := range randomAssets {
		sys, s, got := m.system[a], want[a], tot[a]
		require.Empty(t, booksBalance(got), "seed %d", seed)
		require.Equal(t, sys.custody, got.Custody, "seed %d: %s custody", seed, a)
		require.Equal(t, sys.inFlight, got.InFlight, "seed %d: %s in flight", seed, a)
		require.Equal(t, sys.feeIncome, got.FeeIncome, "seed %d: %s fee income", seed, a)
		require.Equal(t, sys.networkFees, got.NetworkFees, "seed %d: %s network fees", seed, a)
		require.Equal(t, s.users, got.UserObligations(), "seed %d: %s user obligations", seed, a)
		require.Equal(t, s.platforms, got.PlatformObligations(), "seed %d: %s platform obligations", seed, a)
		require.Equal(t, s.userEscrow, got.UserEscrow, "seed %d: %s user escrow must equal the users' open escrow holds", seed, a)
		require.Equal(t, s.platformEscrow, got.PlatformEscrow, "seed %d: %s platform escrow must equal the platform accounts' open escrow holds", seed, a)
		require.Zero(t, got.PlatformHold, "seed %d: %s platform hold", seed, a)
	}
}
