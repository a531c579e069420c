package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/uptrace/bun"

	"svc/modules/asset"
	"svc/modules/audit"
	"svc/modules/operator"
	"svc/platform/fault"
	"svc/platform/money"
)

// Audit actions of the operator bookings.
const (
	AuditCorrect  = "ledger.correct"
	AuditTransfer = "ledger.transfer"
)

// Reference prefixes of the operator bookings' source_refs.
const (
	CorrectionRefPrefix  = "correction:"
	TransferOutRefPrefix = "transfer-out:"
	TransferInRefPrefix  = "transfer-in:"
	// MaxReference is the longest reference an operator may give (the
	// source_ref adds its prefix).
	MaxReference = 200
)

// CorrectionAllowed reports whether an operator's correction may post to
// an account of kind k, and why not.
func CorrectionAllowed(k AccountKind) error {
	switch k {
	case Custody, NetworkFees, FeeIncome, Suspense, UserAvailable, PlatformAvailable:
		return nil
	case UserHold:
		return errors.New("user_hold belongs to the user's open withdrawals: reject or release the withdrawal instead")
	case PlatformHold:
		return errors.New("platform_hold belongs to the platform account's open withdrawals: reject or release the withdrawal instead")
	case UserEscrow:
		return errors.New("user_escrow belongs to the user's open escrow holds: void or capture the hold instead")
	case PlatformEscrow:
		return errors.New("platform_escrow belongs to the platform account's open escrow holds: void or capture the hold instead")
	case InFlight:
		return errors.New("in_flight follows broadcast payouts, one per withdrawal: release the withdrawal instead")
	case Transfer:
		return errors.New("transfer is posted only by a transfer between custodies (svc admin ledger transfer)")
	}
	return fmt.Errorf("unknown account kind %q", k)
}

// CorrectionAccounts lists the account kinds a correction may post to.
func CorrectionAccounts() []AccountKind {
	var out []AccountKind
	for _, k := range AccountKinds() {
		if CorrectionAllowed(k) == nil {
			out = append(out, k)
		}
	}
	return out
}

// OperatorCorrection is an operator's correction to book.
type OperatorCorrection struct {
	Asset string
	// Reference names the correction; its source_ref is "correction:" and
	// it. Booking the same reference again with the same lines changes
	// nothing (Booked.Posted.Replayed); with other lines it is refused. ""
	// gets a new one.
	Reference string
	Memo      string // why: required
	Lines     []Line
	// Actor is who books it, unsigned (the admin API key): required
	// without a Signature.
	Actor audit.Actor
	// Signature is the enrolled admin's signed statement of the booking
	// (CorrectionExpect); the admin is then who books it.
	Signature *operator.Envelope
}

// CorrectionExpect is what an admin signs to book correction c in an asset
// of decimals: the action ledger.correct on the asset, and as facts the
// asset, the memo, the reference when one is given, and each line in
// order as line.1, line.2, ...: "debit ACCOUNT=AMOUNT" or "credit
// ACCOUNT=AMOUNT", ACCOUNT the account kind (user_available:ID for a
// user's), AMOUNT in display units, as the booking's preview shows it.
func CorrectionExpect(c OperatorCorrection, decimals int) operator.Expect {
	facts := map[string]string{"asset": c.Asset, "memo": c.Memo}
	if c.Reference != "" {
		facts["reference"] = c.Reference
	}
	for i, l := range c.Lines {
		dir, n := "credit", l.Amount
		if n < 0 {
			dir, n = "debit", -n
		}
		acct := string(l.Account.Kind)
		if l.Account.Owner != "" {
			acct += ":" + l.Account.Owner
		}
		facts[fmt.Sprintf("line.%d", i+1)] = dir + " " + acct + "=" + money.Format(n, decimals)
	}
	return operator.Expect{Action: AuditCorrect, Resource: c.Asset, Facts: facts, Role: operator.Admin}
}

// TransferExpect is what an admin signs to book transfer t: the action
// ledger.transfer on its reference, and as facts from, to, amount (in
// To's display units, toDecimals), network_fee (in From's, fromDecimals;
// zero, so formatted, when there is none), the reference and the memo.
func TransferExpect(t CustodyTransfer, fromDecimals, toDecimals int) operator.Expect {
	return operator.Expect{Action: AuditTransfer, Resource: t.Reference, Role: operator.Admin, Facts: map[string]string{
		"from": t.From, "to": t.To, "amount": money.Format(t.Amount, toDecimals), "network_fee": money.Format(t.NetworkFee, fromDecimals),
		"reference": t.Reference, "memo": t.Memo}}
}

// decimalsOf reads the decimals of the assets named by codes, with idb.
func decimalsOf(ctx context.Context, idb bun.IDB, codes ...string) ([]int, error) {
	out := make([]int, len(codes))
	for i, code := range codes {
		a, err := (&asset.Store{DB: idb}).Get(ctx, code)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", code, err)
		}
		out[i] = a.Decimals
	}
	return out, nil
}

// LineBalance is one line of a booking with its account's balance, in the
// account's own sense (AccountKind.Natural), before and after it.
type LineBalance struct {
	Asset   string
	Account Account
	Amount  int64 // + credit, - debit (a posting's sign)
	Before  int64
	After   int64
}

// Booked is an operator booking: the entries, each line with its balances,
// and, once posted, the stored entries and the audit record's id.
type Booked struct {
	Entries []Entry
	Lines   []LineBalance // every entry's lines, in order
	Posted  []Posted      // empty in a preview
	AuditID int64         // 0 in a preview or a replay
}

// Replayed reports a booking that had been posted before: nothing changed.
func (b Booked) Replayed() bool { return len(b.Posted) > 0 && b.Posted[0].Replayed }

// invalid is a 422 naming the request's field at loc (the HTTP body's
// fields; the command line shows msg, which names the line itself).
func invalid(typ, msg string, loc ...any) error {
	return fault.Validation(fault.FieldError{Loc: append([]any{"body"}, loc...), Type: typ, Msg: msg})
}

// entry checks c against the policy and returns its entry.
func (c OperatorCorrection) entry() (Entry, error) {
	var errs []error
	if strings.TrimSpace(c.Memo) == "" {
		errs = append(errs, invalid("missing", "a correction needs a memo saying why", "memo"))
	} else if utf8.RuneCountInString(c.Memo) > MaxMemo {
		errs = append(errs, invalid("string_too_long", fmt.Sprintf("the memo must have at most %d characters", MaxMemo), "memo"))
	}
	if n := utf8.RuneCountInString(c.Reference); n > MaxReference {
		errs = append(errs, invalid("string_too_long", fmt.Sprintf("the reference must have at most %d characters", MaxReference), "reference"))
	}
	if len(c.Lines) < 2 || len(c.Lines) > maxLines {
		errs = append(errs, invalid("lines", fmt.Sprintf("a correction needs 2 to %d lines, got %d", maxLines, len(c.Lines)), "lines"))
	}
	var sum int64
	seen := map[Account]bool{}
	for i, l := range c.Lines {
		if err := CorrectionAllowed(l.Account.Kind); err != nil {
			errs = append(errs, invalid("account_refused", fmt.Sprintf("line %d (%s): a correction may not post to it: %v", i+1, l.Account, err), "lines", i, "account"))
			continue
		}
		if err := l.Account.validate(); err != nil {
			errs = append(errs, invalid("account", fmt.Sprintf("line %d: %v", i+1, err), "lines", i, "external_user_id"))
			continue
		}
		if seen[l.Account] {
			errs = append(errs, invalid("account_twice", fmt.Sprintf("line %d (%s): the account appears twice", i+1, l.Account), "lines", i, "account"))
		}
		seen[l.Account] = true
		if l.Amount == 0 || l.Amount > MaxBookingAmount || l.Amount < -MaxBookingAmount {
			errs = append(errs, invalid("amount", fmt.Sprintf("line %d (%s): the amount must be 1 to %d smallest units", i+1, l.Account, int64(MaxBookingAmount)), "lines", i, "amount"))
			continue
		}
		sum += l.Amount
	}
	if err := fault.MergeValidation(errs...); err != nil {
		return Entry{}, err
	}
	if sum != 0 {
		return Entry{}, invalid("unbalanced", fmt.Sprintf("the lines do not balance: credits and debits differ by %d smallest units (credits %s debits)", abs(sum), moreOrLess(sum)), "lines")
	}
	ref := c.Reference
	if ref == "" {
		ref = uuid.NewString()
	}
	e := Entry{Kind: Correction, Asset: c.Asset, SourceRef: CorrectionRefPrefix + ref, Memo: c.Memo, Lines: c.Lines}
	if err := e.Validate(); err != nil {
		return Entry{}, invalid("entry", err.Error(), "lines")
	}
	return e, nil
}

// MaxBookingAmount bounds a booking's line (10^15 smallest units: ten
// million BTC), so that no sum of lines can overflow.
const MaxBookingAmount = 1_000_000_000_000_000

func abs(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}

func moreOrLess(sum int64) string {
	if sum > 0 {
		return "exceed"
	}
	return "fall short of"
}

// PreviewCorrection checks c and returns the entry it would post with each
// line's balances, reading idb; it writes nothing.
func PreviewCorrection(ctx context.Context, idb bun.IDB, c OperatorCorrection) (Booked, error) {
	e, err := c.entry()
	if err != nil {
		return Booked{}, err
	}
	if err := knownAsset(ctx, idb, c.Asset); err != nil {
		return Booked{}, err
	}
	return preview(ctx, idb, []Entry{e}, never)
}

// BookCorrection posts the correction c with its audit record in one transaction of
// db, after the same checks as PreviewCorrection against the balances read
// in that transaction. In it, ops authorizes the booking
// (CorrectionExpect): with c.Signature, the enrolled admin who signed it
// books it; without, c.Actor (refused when signatures are required); a nil
// ops acts unsigned. then, when not nil, runs last in the transaction (an
// Idempotency-Key's completion).
func BookCorrection(ctx context.Context, db bun.IDB, ops *operator.Service, now time.Time, c OperatorCorrection, then func(ctx context.Context, tx bun.IDB, b Booked) error) (Booked, error) {
	if c.Signature == nil && !c.Actor.Valid() {
		return Booked{}, ErrNoOperator
	}
	e, err := c.entry()
	if err != nil {
		return Booked{}, err
	}
	return book(ctx, db, []Entry{e}, never, func(ctx context.Context, tx bun.IDB) (audit.Actor, error) {
		d, err := decimalsOf(ctx, tx, c.Asset)
		if err != nil {
			return audit.Actor{}, err
		}
		return ops.Authorize(ctx, tx, c.Actor, c.Signature, CorrectionExpect(c, d[0]))
	}, func(ctx context.Context, tx bun.IDB, b Booked, who audit.Actor) (int64, error) {
		a, err := audit.Record(ctx, tx, now, who, AuditCorrect, e.SourceRef, bookingDetail(b, c.Memo))
		return a.ID, err
	}, then)
}

// never lets no account go below zero.
func never(Account) bool { return false }

// knownAsset refuses an asset without ledger accounts (404).
func knownAsset(ctx context.Context, idb bun.IDB, code string) error {
	q, err := sqlOf(idb)
	if err != nil {
		return err
	}
	var ok bool
	if err := q.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM public.ledger_accounts WHERE asset = $1::text AND owner = '' AND kind = 'custody')`, code).Scan(&ok); err != nil {
		return fmt.Errorf("ledger: read asset %s: %w", code, err)
	}
	if !ok {
		return ErrUnknownAsset
	}
	return nil
}

// ErrNoOperator: a booking without a valid operator to record.
var ErrNoOperator = errors.New("ledger: an operator booking needs the operator who makes it")

// ErrUnknownAsset: a booking in an asset the ledger has no accounts of.
var ErrUnknownAsset = fault.New(fault.NotFound, "unknown asset")

// ErrWouldBeNegative: a booking that would leave a balance below zero.
var ErrWouldBeNegative = errors.New("would leave a balance below zero")

// preview reads the balance of every line's account and refuses a line
// that would leave one negative, unless mayGoNegative says it may.
func preview(ctx context.Context, idb bun.IDB, entries []Entry, mayGoNegative func(Account) bool) (Booked, error) {
	q, err := sqlOf(idb)
	if err != nil {
		return Booked{}, err
	}
	var b Booked
	var errs []error
	for _, e := range entries {
		b.Entries = append(b.Entries, e)
		for i, l := range e.Lines {
			var sum int64
			if l.Account.Kind.Materialized() {
				err = q.QueryRowContext(ctx, `SELECT coalesce((SELECT balance FROM public.ledger_accounts
  WHERE owner = $1::text AND asset = $2::text AND kind = $3::text), 0)`, l.Account.Owner, e.Asset, string(l.Account.Kind)).Scan(&sum)
			} else {
				err = q.QueryRowContext(ctx, `SELECT coalesce(sum(p.amount), 0)::bigint FROM public.ledger_postings p
  WHERE p.account_id = (SELECT id FROM public.ledger_accounts WHERE owner = '' AND asset = $1::text AND kind = $2::text)`, e.Asset, string(l.Account.Kind)).Scan(&sum)
			}
			if err != nil {
				return Booked{}, fmt.Errorf("ledger: read the balance of %s %s: %w", e.Asset, l.Account, err)
			}
			before := l.Account.Kind.Natural(sum)
			after := l.Account.Kind.Natural(sum + l.Amount)
			b.Lines = append(b.Lines, LineBalance{Asset: e.Asset, Account: l.Account, Amount: l.Amount, Before: before, After: after})
			if after < 0 && after < before && !mayGoNegative(l.Account) {
				errs = append(errs, fault.Validation(fault.FieldError{Loc: []any{"body", "lines", i, "amount"}, Type: "negative_balance",
					Msg: fmt.Sprintf("line %d (%s %s): %v: %d now, %d after", i+1, e.Asset, l.Account, ErrWouldBeNegative, before, after)}))
			}
		}
	}
	if err := fault.MergeValidation(errs...); err != nil {
		return Booked{}, err
	}
	return b, nil
}

// book posts entries with their audit record (record, as the actor
// authorize returns) in one transaction, after preview's checks in it.
// authorize runs first, once the operator bookings are locked, for every
// booking, a replay too: a replay posts and records nothing, and a signed
// statement it carries must not have been accepted before.
func book(ctx context.Context, db bun.IDB, entries []Entry, mayGoNegative func(Account) bool,
	authorize func(ctx context.Context, tx bun.IDB) (audit.Actor, error),
	record func(ctx context.Context, tx bun.IDB, b Booked, who audit.Actor) (int64, error), then func(ctx context.Context, tx bun.IDB, b Booked) error) (Booked, error) {
	var out Booked
	err := inTx(ctx, db, func(ctx context.Context, tx bun.IDB) error {
		if err := knownAsset(ctx, tx, entries[0].Asset); err != nil {
			return err
		}
		// Operator bookings one at a time, so that two of them cannot both
		// pass the check against the same balance.
		if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtext('svc.ledger.operator_booking'))`); err != nil {
			return fmt.Errorf("ledger: lock operator bookings: %w", err)
		}
		who, err := authorize(ctx, tx)
		if err != nil {
			return err
		}
		// A replay of the same booking (same references) posts nothing and
		// records nothing.
		var replays []Posted
		for _, e := range entries {
			id, err := entryID(ctx, tx, e)
			if err != nil {
				return err
			}
			if id == 0 {
				break
			}
			q, err := sqlOf(tx)
			if err != nil {
				return err
			}
			p, err := replay(ctx, q, e, id)
			if err != nil {
				return err
			}
			replays = append(replays, p)
		}
		if len(replays) == len(entries) {
			// A replayed statement was refused by authorize (its nonce is
			// in the trail), so this is the same booking newly signed.
			out = Booked{Entries: entries, Posted: replays}
			for _, p := range replays {
				for _, ps := range p.Postings {
					out.Lines = append(out.Lines, LineBalance{Asset: p.Asset, Account: ps.Account, Amount: ps.Amount})
				}
			}
		} else {
			b, err := preview(ctx, tx, entries, mayGoNegative)
			if err != nil {
				return err
			}
			for _, e := range entries {
				p, err := Post(ctx, tx, e)
				if err != nil {
					return err
				}
				if p.Replayed { // one of a pair posted before, not the other
					return fmt.Errorf("ledger: %w: %s %s was posted before without the rest of its booking", ErrReplayMismatch, e.Kind, e.SourceRef)
				}
				b.Posted = append(b.Posted, p)
			}
			if b.AuditID, err = record(ctx, tx, b, who); err != nil {
				return err
			}
			out = b
		}
		if then != nil {
			return then(ctx, tx, out)
		}
		return nil
	})
	if err != nil {
		return Booked{}, err
	}
	return out, nil
}

// entryID is the id of the entry stored under e's (kind, source_ref), 0
// when there is none.
func entryID(ctx context.Context, tx bun.IDB, e Entry) (int64, error) {
	q, err := sqlOf(tx)
	if err != nil {
		return 0, err
	}
	var id int64
	err = q.QueryRowContext(ctx, `SELECT id FROM public.ledger_entries WHERE kind = $1::text AND source_ref = $2::text`, string(e.Kind), e.SourceRef).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("ledger: read %s %s: %w", e.Kind, e.SourceRef, err)
	}
	return id, nil
}

// bookingDetail is what the audit trail keeps of a booking: every line
// with its balances, and the entries' ids.
func bookingDetail(b Booked, memo string) map[string]any {
	lines := make([]map[string]any, len(b.Lines))
	for i, l := range b.Lines {
		lines[i] = map[string]any{"asset": l.Asset, "account": string(l.Account.Kind), "amount": l.Amount,
			"balance_before": l.Before, "balance_after": l.After}
		if l.Account.Owner != "" {
			lines[i]["external_user_id"] = l.Account.Owner
		}
	}
	ids := make([]int64, len(b.Posted))
	refs := make([]string, len(b.Posted))
	for i, p := range b.Posted {
		ids[i], refs[i] = p.ID, p.SourceRef
	}
	return map[string]any{"memo": memo, "lines": lines, "entry_ids": ids, "source_refs": refs}
}

// TransferPairs lists the assets between whose custodies money can be
// transferred: two custodies of the same coin, in the same unit.
var TransferPairs = [][2]string{{"BTC", "BTC_LN"}}

// CustodyTransfer is money the operator moved from one custody to another
// of the same coin: a Lightning channel opened from the on-chain wallet
// (BTC to BTC_LN: Amount is the channel's capacity on the service's side,
// NetworkFee the funding transaction's fee), or closed back to it (BTC_LN
// to BTC: Amount what reached the wallet, NetworkFee the closing fee).
type CustodyTransfer struct {
	From, To   string
	Amount     int64 // arrives in To's custody
	NetworkFee int64 // paid out of From's custody besides Amount
	// Reference names the move (the funding or closing transaction id):
	// the entries' source_refs are "transfer-out:" and "transfer-in:" and
	// it, so booking it twice changes nothing.
	Reference string
	Memo      string
	// Actor is who books it, unsigned (the admin API key): required
	// without a Signature.
	Actor audit.Actor
	// Signature is the enrolled admin's signed statement of the booking
	// (TransferExpect); the admin is then who books it.
	Signature *operator.Envelope
}

func (t CustodyTransfer) entries() ([]Entry, error) {
	var errs []error
	pair := false
	for _, p := range TransferPairs {
		if (t.From == p[0] && t.To == p[1]) || (t.From == p[1] && t.To == p[0]) {
			pair = true
		}
	}
	if !pair {
		errs = append(errs, invalid("transfer_pair", fmt.Sprintf("%s to %s is not a transfer between two custodies of the same coin (%s)", t.From, t.To, pairsText()), "to"))
	}
	if t.Amount < 1 || t.Amount > MaxBookingAmount {
		errs = append(errs, invalid("amount", fmt.Sprintf("the amount must be 1 to %d smallest units", int64(MaxBookingAmount)), "amount"))
	}
	if t.NetworkFee < 0 || t.NetworkFee > MaxBookingAmount {
		errs = append(errs, invalid("amount", fmt.Sprintf("the network fee must be 0 to %d smallest units", int64(MaxBookingAmount)), "network_fee"))
	}
	if n := utf8.RuneCountInString(t.Reference); n < 1 || n > MaxReference {
		errs = append(errs, invalid("reference", fmt.Sprintf("a transfer needs a reference (the funding or closing transaction id) of 1 to %d characters", MaxReference), "reference"))
	}
	if strings.TrimSpace(t.Memo) == "" {
		errs = append(errs, invalid("missing", "a transfer needs a memo saying what moved", "memo"))
	} else if utf8.RuneCountInString(t.Memo) > MaxMemo {
		errs = append(errs, invalid("string_too_long", fmt.Sprintf("the memo must have at most %d characters", MaxMemo), "memo"))
	}
	if err := fault.MergeValidation(errs...); err != nil {
		return nil, err
	}
	out := []Line{{Account: System(Custody), Amount: t.Amount + t.NetworkFee}, {Account: System(Transfer), Amount: -t.Amount}}
	if t.NetworkFee > 0 {
		out = append(out, Line{Account: System(NetworkFees), Amount: -t.NetworkFee})
	}
	entries := []Entry{
		{Kind: Correction, Asset: t.From, SourceRef: TransferOutRefPrefix + t.Reference, Memo: t.Memo, Lines: out},
		{Kind: Correction, Asset: t.To, SourceRef: TransferInRefPrefix + t.Reference, Memo: t.Memo, Lines: []Line{
			{Account: System(Custody), Amount: -t.Amount}, {Account: System(Transfer), Amount: t.Amount}}},
	}
	for _, e := range entries {
		if err := e.Validate(); err != nil {
			return nil, invalid("entry", err.Error())
		}
	}
	return entries, nil
}

func pairsText() string {
	parts := make([]string, len(TransferPairs))
	for i, p := range TransferPairs {
		parts[i] = p[0] + " and " + p[1]
	}
	return strings.Join(parts, "; ")
}

// transferMayGoNegative: a transfer account's balance is negative in the
// asset that received more than it sent.
func transferMayGoNegative(a Account) bool { return a.Kind == Transfer }

// PreviewTransfer checks t and returns the two entries it would post with
// each line's balances; it writes nothing.
func PreviewTransfer(ctx context.Context, idb bun.IDB, t CustodyTransfer) (Booked, error) {
	entries, err := t.entries()
	if err != nil {
		return Booked{}, err
	}
	for _, code := range []string{t.From, t.To} {
		if err := knownAsset(ctx, idb, code); err != nil {
			return Booked{}, fmt.Errorf("%s: %w", code, err)
		}
	}
	return preview(ctx, idb, entries, transferMayGoNegative)
}

// BookTransfer posts t's two entries (the sending custody's and the receiving
// one's) with their audit record in one transaction of db: in From,
// custody +(Amount+NetworkFee), network_fees -NetworkFee, transfer -Amount;
// in To, custody -Amount, transfer +Amount. From's custody may not go
// below zero. In the transaction, ops authorizes the booking
// (TransferExpect): with t.Signature, the enrolled admin who signed it
// books it; without, t.Actor (refused when signatures are required); a nil
// ops acts unsigned. then, when not nil, runs last in the transaction.
func BookTransfer(ctx context.Context, db bun.IDB, ops *operator.Service, now time.Time, t CustodyTransfer, then func(ctx context.Context, tx bun.IDB, b Booked) error) (Booked, error) {
	if t.Signature == nil && !t.Actor.Valid() {
		return Booked{}, ErrNoOperator
	}
	entries, err := t.entries()
	if err != nil {
		return Booked{}, err
	}
	if err := knownAsset(ctx, db, t.To); err != nil {
		return Booked{}, fmt.Errorf("%s: %w", t.To, err)
	}
	return book(ctx, db, entries, transferMayGoNegative, func(ctx context.Context, tx bun.IDB) (audit.Actor, error) {
		d, err := decimalsOf(ctx, tx, t.From, t.To)
		if err != nil {
			return audit.Actor{}, err
		}
		return ops.Authorize(ctx, tx, t.Actor, t.Signature, TransferExpect(t, d[0], d[1]))
	}, func(ctx context.Context, tx bun.IDB, b Booked, who audit.Actor) (int64, error) {
		d := bookingDetail(b, t.Memo)
		d["from"], d["to"], d["amount"], d["network_fee"], d["reference"] = t.From, t.To, t.Amount, t.NetworkFee, t.Reference
		a, err := audit.Record(ctx, tx, now, who, AuditTransfer, t.Reference, d)
		return a.ID, err
	}, then)
}
