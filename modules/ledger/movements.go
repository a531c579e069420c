package ledger

import (
	"context"
	"fmt"

	"github.com/uptrace/bun"
)

// CreditDeposit credits a confirmed deposit payment to the holder's
// available balance (deposit_credit: user_available or platform_available
// +amount, custody -amount).
// sourceRef identifies the payment, so crediting it again returns the first
// entry.
func CreditDeposit(ctx context.Context, idb bun.IDB, asset string, to Holder, amount int64, sourceRef, memo string) (Posted, error) {
	if amount <= 0 {
		return Posted{}, fmt.Errorf("%w: deposit amount must be positive, got %d", ErrInvalidEntry, amount)
	}
	return Post(ctx, idb, Entry{Kind: DepositCredit, Asset: asset, SourceRef: sourceRef, Memo: memo, Lines: []Line{
		{Account: to.Available(), Amount: amount},
		{Account: System(Custody), Amount: -amount},
	}})
}

// PlaceHold moves a withdrawal's gross amount from the holder's available
// balance to its hold (withdrawal_hold). When available is short it
// writes nothing and returns an *InsufficientFundsError (HTTP 402).
// sourceRef is the withdrawal id; the release or settlement of this hold
// uses the same one.
func PlaceHold(ctx context.Context, idb bun.IDB, asset string, owner Holder, amount int64, sourceRef, memo string) (Posted, error) {
	e, err := HoldEntry(asset, owner, amount, sourceRef, memo)
	if err != nil {
		return Posted{}, err
	}
	return postDebiting(ctx, idb, owner, e)
}

// HoldEntry is the entry PlaceHold posts, for a caller that queues it with
// QueuePost.
func HoldEntry(asset string, owner Holder, amount int64, sourceRef, memo string) (Entry, error) {
	if amount <= 0 {
		return Entry{}, fmt.Errorf("%w: hold amount must be positive, got %d", ErrInvalidEntry, amount)
	}
	return Entry{Kind: WithdrawalHold, Asset: asset, SourceRef: sourceRef, Memo: memo, Lines: []Line{
		{Account: owner.Available(), Amount: -amount},
		{Account: owner.Hold(), Amount: amount},
	}}, nil
}

// ReleaseHold returns the hold placed under sourceRef to the user's
// available balance (withdrawal_release). asset, owner and amount
// must be the hold's; a hold that was settled cannot be released
// (ErrHoldSettled), and a missing or different hold is ErrNoHold.
func ReleaseHold(ctx context.Context, idb bun.IDB, asset string, owner Holder, amount int64, sourceRef, memo string) (Posted, error) {
	if amount <= 0 {
		return Posted{}, fmt.Errorf("%w: release amount must be positive, got %d", ErrInvalidEntry, amount)
	}
	e := Entry{Kind: WithdrawalRelease, Asset: asset, SourceRef: sourceRef, Memo: memo, Lines: []Line{
		{Account: owner.Hold(), Amount: -amount},
		{Account: owner.Available(), Amount: amount},
	}}
	if err := e.Validate(); err != nil {
		return Posted{}, err
	}
	return postOnHold(ctx, idb, sourceRef, func(st holdState) (Entry, error) {
		if st.released {
			return e, nil
		}
		if st.settled {
			return Entry{}, fmt.Errorf("ledger: release %s: %w", sourceRef, ErrHoldSettled)
		}
		if err := st.matches(asset, owner, amount); err != nil {
			return Entry{}, fmt.Errorf("ledger: release %s: %w", sourceRef, err)
		}
		return e, nil
	})
}

// RecordPayoutBroadcast records that the payout of the withdrawal sourceRef
// is on chain: amount (net plus the network fee sent) moves from custody to
// in-flight (payout_broadcast). It touches system accounts only: the user's
// money stays held until SettlePayout. The hold must exist and must not be
// settled yet.
func RecordPayoutBroadcast(ctx context.Context, idb bun.IDB, asset string, amount int64, sourceRef, memo string) (Posted, error) {
	entry, err := payoutBroadcast(asset, amount, sourceRef, memo)
	if err != nil {
		return Posted{}, err
	}
	return postOnHold(ctx, idb, sourceRef, entry)
}

// payoutBroadcast is the entry RecordPayoutBroadcast posts, made of the
// hold's state, or why it refuses.
func payoutBroadcast(asset string, amount int64, sourceRef, memo string) (func(holdState) (Entry, error), error) {
	e := Entry{Kind: PayoutBroadcast, Asset: asset, SourceRef: sourceRef, Memo: memo, Lines: []Line{
		{Account: System(Custody), Amount: amount},
		{Account: System(InFlight), Amount: -amount},
	}}
	if amount <= 0 {
		return nil, fmt.Errorf("%w: broadcast amount must be positive, got %d", ErrInvalidEntry, amount)
	}
	if err := e.Validate(); err != nil {
		return nil, err
	}
	return func(st holdState) (Entry, error) {
		if st.broadcast {
			return e, nil
		}
		if st.settled {
			return Entry{}, fmt.Errorf("ledger: broadcast %s: %w", sourceRef, ErrHoldSettled)
		}
		if !st.held || st.asset != asset {
			return Entry{}, fmt.Errorf("ledger: broadcast %s: %w (asset %s)", sourceRef, ErrNoHold, asset)
		}
		return e, nil
	}, nil
}

// SettleBroadcastPayout is RecordPayoutBroadcast of amount (with memo)
// and then SettlePayout of s, under one lock of the hold and one read of
// its state: for a payout seen completed before its broadcast was
// recorded. The same two entries, with the same checks, each idempotent as
// its function's is; two statements fewer than the two calls.
func SettleBroadcastPayout(ctx context.Context, idb bun.IDB, amount int64, memo string, s Settlement) (broadcast, settled Posted, err error) {
	broadcastEntry, err := payoutBroadcast(s.Asset, amount, s.SourceRef, memo)
	if err != nil {
		return Posted{}, Posted{}, err
	}
	if _, err := s.Lines(0); err != nil {
		return Posted{}, Posted{}, err
	}
	err = inTx(ctx, idb, func(ctx context.Context, tx bun.IDB) error {
		st, err := lockHold(ctx, tx, s.SourceRef)
		if err != nil {
			return err
		}
		e, err := broadcastEntry(st)
		if err != nil {
			return err
		}
		if broadcast, err = Post(ctx, tx, e); err != nil {
			return err
		}
		if !st.broadcast { // what the entry just posted, as lockHold would read it now
			st.broadcast, st.inFlight = true, amount
		}
		if e, err = settlement(s)(st); err != nil {
			return err
		}
		settled, err = Post(ctx, tx, e)
		return err
	})
	return broadcast, settled, err
}

// postOnHold posts, under the lock of the hold of the withdrawal
// sourceRef, the entry that entry makes of the hold's state, or refuses
// with its error: the shared step of the movements that follow a hold. A
// step already done is for entry to accept, so that the post replays
// idempotently.
func postOnHold(ctx context.Context, idb bun.IDB, sourceRef string, entry func(holdState) (Entry, error)) (Posted, error) {
	var out Posted
	err := inTx(ctx, idb, func(ctx context.Context, tx bun.IDB) error {
		st, err := lockHold(ctx, tx, sourceRef)
		if err != nil {
			return err
		}
		e, err := entry(st)
		if err != nil {
			return err
		}
		out, err = Post(ctx, tx, e)
		return err
	})
	return out, err
}

// ReverseBroadcast undoes the payout_broadcast of the withdrawal sourceRef
// when an operator attested that its transfer did not happen (it was
// released): what the broadcast moved from custody to in-flight goes back
// (a correction entry whose source_ref is "broadcast-reversal:" and the
// withdrawal's). It posts nothing, and returns a zero Posted, when there
// was no broadcast; a settled payout is ErrHoldSettled.
func ReverseBroadcast(ctx context.Context, idb bun.IDB, asset, sourceRef, memo string) (Posted, error) {
	var out Posted
	err := inTx(ctx, idb, func(ctx context.Context, tx bun.IDB) error {
		st, err := lockHold(ctx, tx, sourceRef)
		if err != nil {
			return err
		}
		if !st.broadcast || st.inFlight <= 0 {
			return nil
		}
		if st.settled {
			return fmt.Errorf("ledger: reverse broadcast %s: %w", sourceRef, ErrHoldSettled)
		}
		out, err = Correct(ctx, tx, asset, []Line{
			{Account: System(Custody), Amount: -st.inFlight},
			{Account: System(InFlight), Amount: st.inFlight},
		}, "broadcast-reversal:"+sourceRef, memo)
		return err
	})
	return out, err
}

// FeeMode says who bears a payout's fee.
type FeeMode string

// The fee modes of the SPEC.
const (
	FeeDeduct FeeMode = "deduct" // the user pays: net = gross - service fee
	FeeAbsorb FeeMode = "absorb" // the service pays: net = gross
)

// Settlement describes a confirmed payout.
type Settlement struct {
	Asset          string
	ExternalUserID string // the user, or the platform account's name when Platform
	Platform       bool   // the withdrawal is a platform account's
	SourceRef      string // the withdrawal id, as for its hold
	Mode           FeeMode
	Gross          int64 // the hold; leaves user_hold
	Net            int64 // what the destination received
	ServiceFee     int64 // charged to the user (deduct: gross - net; absorb: 0)
	NetworkFee     int64 // the actual network fee paid, 0 or more
	Memo           string
}

func (s Settlement) owner() Holder { return Holder{Platform: s.Platform, ID: s.ExternalUserID} }

// Lines returns the settlement's lines given the amount its broadcast moved
// to in-flight (0 when the payout was never recorded as broadcast). The
// package doc has the postings.
func (s Settlement) Lines(broadcast int64) ([]Line, error) {
	bad := func(format string, args ...any) ([]Line, error) {
		return nil, fmt.Errorf("%w: settle %s: %s", ErrInvalidEntry, s.SourceRef, fmt.Sprintf(format, args...))
	}
	switch {
	case s.Gross <= 0 || s.Net <= 0:
		return bad("gross and net must be positive (gross %d, net %d)", s.Gross, s.Net)
	case s.ServiceFee < 0 || s.NetworkFee < 0 || broadcast < 0:
		return bad("fees and the broadcast amount must not be negative")
	}
	switch s.Mode {
	case FeeDeduct:
		if s.Net > s.Gross || s.Gross-s.Net != s.ServiceFee {
			return bad("deduct: gross %d must be net %d plus service fee %d", s.Gross, s.Net, s.ServiceFee)
		}
	case FeeAbsorb:
		if s.Net != s.Gross || s.ServiceFee != 0 {
			return bad("absorb: net %d must equal gross %d and the service fee %d must be 0", s.Net, s.Gross, s.ServiceFee)
		}
	default:
		return bad("unknown fee mode %q", s.Mode)
	}
	const maxInt64 = 1<<63 - 1
	if s.Net > maxInt64-s.NetworkFee {
		return bad("net plus network fee overflows")
	}
	out := s.Net + s.NetworkFee // both >= 0, so no overflow past the check
	custody := out - broadcast  // out >= 0 and broadcast >= 0: cannot overflow
	lines := []Line{{Account: s.owner().Hold(), Amount: -s.Gross}}
	if s.ServiceFee > 0 {
		lines = append(lines, Line{Account: System(FeeIncome), Amount: s.ServiceFee})
	}
	if s.NetworkFee > 0 {
		lines = append(lines, Line{Account: System(NetworkFees), Amount: -s.NetworkFee})
	}
	if broadcast > 0 {
		lines = append(lines, Line{Account: System(InFlight), Amount: broadcast})
	}
	if custody != 0 {
		lines = append(lines, Line{Account: System(Custody), Amount: custody})
	}
	// The lines balance by construction; Validate also refuses sums that
	// would overflow on the way (absurd amounts).
	e := Entry{Kind: PayoutSettle, Asset: "x", SourceRef: "x", Lines: lines}
	if err := e.Validate(); err != nil {
		return nil, fmt.Errorf("settle %s: %w", s.SourceRef, err)
	}
	return lines, nil
}

// SettlePayout spends the hold of a confirmed payout (payout_settle): the
// gross leaves user_hold, the service fee becomes fee income, the network
// fee is an expense, and what the payout's broadcast put in flight is
// cleared, the rest leaving custody now. The hold must match (ErrNoHold)
// and must not have been released (ErrHoldReleased).
func SettlePayout(ctx context.Context, idb bun.IDB, s Settlement) (Posted, error) {
	if _, err := s.Lines(0); err != nil {
		return Posted{}, err
	}
	return postOnHold(ctx, idb, s.SourceRef, settlement(s))
}

// settlement is the entry SettlePayout posts, made of the hold's state,
// or why it refuses.
func settlement(s Settlement) func(holdState) (Entry, error) {
	return func(st holdState) (Entry, error) {
		if !st.settled {
			if st.released {
				return Entry{}, fmt.Errorf("ledger: settle %s: %w", s.SourceRef, ErrHoldReleased)
			}
			if err := st.matches(s.Asset, s.owner(), s.Gross); err != nil {
				return Entry{}, fmt.Errorf("ledger: settle %s: %w", s.SourceRef, err)
			}
		}
		lines, err := s.Lines(st.inFlight)
		if err != nil {
			return Entry{}, err
		}
		return Entry{Kind: PayoutSettle, Asset: s.Asset, SourceRef: s.SourceRef, Memo: s.Memo, Lines: lines}, nil
	}
}

// Correct posts a correction: any balanced lines, with a memo saying why.
// It never edits an earlier entry. A debit that does not fit a user
// account is an *InsufficientFundsError, as everywhere.
func Correct(ctx context.Context, idb bun.IDB, asset string, lines []Line, sourceRef, memo string) (Posted, error) {
	return Post(ctx, idb, Entry{Kind: Correction, Asset: asset, SourceRef: sourceRef, Memo: memo, Lines: lines})
}

// holdState is what the ledger knows about one withdrawal's hold.
type holdState struct {
	held, released, settled, broadcast bool
	asset                              string
	owner                              Holder
	amount                             int64 // the hold
	inFlight                           int64 // what the broadcast moved to in-flight
}

func (st holdState) matches(asset string, owner Holder, amount int64) error {
	if !st.held {
		return ErrNoHold
	}
	if st.asset != asset || st.owner != owner || st.amount != amount {
		return fmt.Errorf("%w: the hold is %d %s of %s, not %d %s of %s", ErrNoHold, st.amount, st.asset, st.owner, amount, asset, owner)
	}
	return nil
}

// lockHold serializes every ledger step of one withdrawal (an advisory lock
// until the transaction ends) and then reads its entries, so a release and
// a settlement of the same hold can never both pass their checks.
func lockHold(ctx context.Context, idb bun.IDB, sourceRef string) (holdState, error) {
	q, err := sqlOf(idb)
	if err != nil {
		return holdState{}, err
	}
	if _, err := q.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1::text, 0))`, "svc.ledger.withdrawal:"+sourceRef); err != nil {
		return holdState{}, fmt.Errorf("ledger: lock withdrawal %s: %w", sourceRef, err)
	}
	// LATERAL pins the plan to index lookups: the statement is prepared
	// once per connection, and a generic plan that guessed "a few entries"
	// once chose to hash-join a sequential scan of every posting.
	rows, err := q.QueryContext(ctx, `
SELECT e.kind, e.asset, x.kind, x.owner, x.amount
  FROM ledger_entries e
 CROSS JOIN LATERAL (
        SELECT a.kind, a.owner, p.amount
          FROM ledger_postings p
          JOIN ledger_accounts a ON a.id = p.account_id
         WHERE p.entry_id = e.id) x
 WHERE e.source_ref = $1::text AND e.kind IN ('withdrawal_hold', 'withdrawal_release', 'payout_broadcast', 'payout_settle')`, sourceRef)
	if err != nil {
		return holdState{}, fmt.Errorf("ledger: read withdrawal %s: %w", sourceRef, err)
	}
	defer rows.Close()
	var st holdState
	for rows.Next() {
		var (
			kind  EntryKind
			acct  AccountKind
			asset string
			owner string
			amt   int64
		)
		if err := rows.Scan(&kind, &asset, &acct, &owner, &amt); err != nil {
			return holdState{}, fmt.Errorf("ledger: read withdrawal %s: %w", sourceRef, err)
		}
		switch kind {
		case WithdrawalHold:
			st.held = true
			st.asset = asset
			if acct == UserHold || acct == PlatformHold {
				st.owner, st.amount = HolderOf(Account{Kind: acct, Owner: owner}), amt
			}
		case WithdrawalRelease:
			st.released = true
		case PayoutSettle:
			st.settled = true
		case PayoutBroadcast:
			st.broadcast = true
			if acct == InFlight {
				st.inFlight = -amt
			}
		}
	}
	return st, rows.Err()
}

// inTx runs fn in idb when it is a transaction already, or in a new one.
func inTx(ctx context.Context, idb bun.IDB, fn func(ctx context.Context, tx bun.IDB) error) error {
	if d, ok := idb.(*bun.DB); ok {
		return d.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error { return fn(ctx, tx) })
	}
	return fn(ctx, idb)
}
