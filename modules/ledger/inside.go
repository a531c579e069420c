package ledger

import (
	"context"
	"fmt"
	"sort"

	"github.com/uptrace/bun"
)

// The movements of money inside the platform (docs/transfers.md): a
// transfer's legs between holders' available accounts, and escrow holds,
// which reserve a payer's money until it is captured to its recipients or
// released back. None of them touches custody: the money stays in the
// service's wallets and changes hands in the ledger only.

// MaxCaptureLegs is the most recipients one capture pays: with the payer's
// escrow line, an entry's limit of lines.
const MaxCaptureLegs = maxLines - 1

// PostTransferLeg posts one leg of a transfer (transfer): from's available
// -amount, to's available +amount. sourceRef names the transfer and the
// leg. A debit that does not fit is an *InsufficientFundsError naming
// from's account; nothing is written.
func PostTransferLeg(ctx context.Context, idb bun.IDB, asset string, from, to Holder, amount int64, sourceRef, memo string) (Posted, error) {
	if amount <= 0 {
		return Posted{}, fmt.Errorf("%w: transfer amount must be positive, got %d", ErrInvalidEntry, amount)
	}
	if from == to {
		return Posted{}, fmt.Errorf("%w: a transfer from %s to itself", ErrInvalidEntry, from)
	}
	return Post(ctx, idb, Entry{Kind: TransferEntry, Asset: asset, SourceRef: sourceRef, Memo: memo, Lines: []Line{
		{Account: from.Available(), Amount: -amount},
		{Account: to.Available(), Amount: amount},
	}})
}

// PostEscrowHold reserves amount of the payer's available balance for an
// escrow hold (escrow_hold): available -amount, escrow +amount. sourceRef
// is the hold's id; its capture and release use the same one.
func PostEscrowHold(ctx context.Context, idb bun.IDB, asset string, payer Holder, amount int64, sourceRef, memo string) (Posted, error) {
	if amount <= 0 {
		return Posted{}, fmt.Errorf("%w: hold amount must be positive, got %d", ErrInvalidEntry, amount)
	}
	return Post(ctx, idb, Entry{Kind: EscrowHold, Asset: asset, SourceRef: sourceRef, Memo: memo, Lines: []Line{
		{Account: payer.Available(), Amount: -amount},
		{Account: payer.Escrow(), Amount: amount},
	}})
}

// CaptureLeg is one recipient of a capture.
type CaptureLeg struct {
	To     Holder
	Amount int64
}

// PostEscrowCapture pays the captured part of the hold sourceRef from the
// payer's escrow to its recipients (escrow_capture): escrow -sum, each
// recipient's available +its amount. 1 to MaxCaptureLegs legs, each
// positive, to distinct recipients other than the payer.
//
// The ledger keeps one escrow account per holder and asset, shared by the
// holder's open holds; that a hold is captured or released once, and for
// no more than it reserved, is the hold's own rule (modules/hold takes the
// hold's row first), which (kind, source_ref) backs up: a second capture
// or release of one hold replays the first. The ledger check compares each
// escrow balance with its holder's open holds.
func PostEscrowCapture(ctx context.Context, idb bun.IDB, asset string, payer Holder, legs []CaptureLeg, sourceRef, memo string) (Posted, error) {
	if len(legs) < 1 || len(legs) > MaxCaptureLegs {
		return Posted{}, fmt.Errorf("%w: a capture pays 1 to %d recipients, got %d", ErrInvalidEntry, MaxCaptureLegs, len(legs))
	}
	lines := make([]Line, 0, len(legs)+1)
	lines = append(lines, Line{Account: payer.Escrow()})
	for i, l := range legs {
		if l.Amount <= 0 {
			return Posted{}, fmt.Errorf("%w: capture leg %d: amount must be positive, got %d", ErrInvalidEntry, i, l.Amount)
		}
		if l.To == payer {
			return Posted{}, fmt.Errorf("%w: capture leg %d pays the payer %s", ErrInvalidEntry, i, payer)
		}
		if lines[0].Amount < -(1<<63-1)+l.Amount {
			return Posted{}, fmt.Errorf("%w: capture amounts overflow", ErrInvalidEntry)
		}
		lines[0].Amount -= l.Amount
		lines = append(lines, Line{Account: l.To.Available(), Amount: l.Amount})
	}
	return Post(ctx, idb, Entry{Kind: EscrowCapture, Asset: asset, SourceRef: sourceRef, Memo: memo, Lines: lines})
}

// PostEscrowRelease returns amount of the hold sourceRef from the payer's
// escrow to its available balance (escrow_release): all of it on a void or
// an expiry, the part not captured after a capture.
func PostEscrowRelease(ctx context.Context, idb bun.IDB, asset string, payer Holder, amount int64, sourceRef, memo string) (Posted, error) {
	if amount <= 0 {
		return Posted{}, fmt.Errorf("%w: release amount must be positive, got %d", ErrInvalidEntry, amount)
	}
	return Post(ctx, idb, Entry{Kind: EscrowRelease, Asset: asset, SourceRef: sourceRef, Memo: memo, Lines: []Line{
		{Account: payer.Escrow(), Amount: -amount},
		{Account: payer.Available(), Amount: amount},
	}})
}

// AccountRef names an account of an asset.
type AccountRef struct {
	Asset   string
	Account Account
}

// LockAccounts creates the accounts of refs that do not exist yet (balance
// 0) and locks every one until the transaction ends, in one statement and
// in one global order (asset, owner, kind). A transaction that posts
// several entries (a transfer's legs, a two-asset trade) calls it first
// with every owned account it will post to: its postings then wait for
// nothing more, so two such transactions on the same accounts queue
// instead of deadlocking, whichever order their legs name the accounts in.
// (A single Post needs none of this: it locks its own accounts in the same
// order.) System accounts are never locked; refs naming one are refused.
func LockAccounts(ctx context.Context, idb bun.IDB, refs []AccountRef) error {
	if len(refs) == 0 {
		return nil
	}
	sorted := append([]AccountRef(nil), refs...)
	for _, r := range sorted {
		if !r.Account.Kind.Materialized() {
			return fmt.Errorf("%w: lock %s %s: only owned accounts are locked", ErrInvalidEntry, r.Asset, r.Account)
		}
		if err := r.Account.validate(); err != nil {
			return fmt.Errorf("%w: lock %s: %v", ErrInvalidEntry, r.Asset, err)
		}
	}
	sort.Slice(sorted, func(i, j int) bool {
		a, b := sorted[i], sorted[j]
		if a.Asset != b.Asset {
			return a.Asset < b.Asset
		}
		if a.Account.Owner != b.Account.Owner {
			return a.Account.Owner < b.Account.Owner
		}
		return a.Account.Kind < b.Account.Kind
	})
	assets, kinds, owners := make([]string, 0, len(sorted)), make([]string, 0, len(sorted)), make([]string, 0, len(sorted))
	for i, r := range sorted {
		if i > 0 && r == sorted[i-1] {
			continue
		}
		assets, kinds, owners = append(assets, r.Asset), append(kinds, string(r.Account.Kind)), append(owners, r.Account.Owner)
	}
	q, err := sqlOf(idb)
	if err != nil {
		return err
	}
	// The rows are inserted, or found and locked (DO UPDATE locks the row
	// it finds; setting the balance to itself changes nothing, so no
	// trigger fires), in the order of the database's own sort, the same
	// collation the posting statement locks in. An unknown asset fails
	// the foreign key: check assets before.
	_, err = q.ExecContext(ctx, `
INSERT INTO ledger_accounts (asset, kind, owner, balance)
SELECT v.asset, v.kind, v.owner, 0
  FROM unnest($1::text[], $2::text[], $3::text[]) AS v (asset, kind, owner)
 ORDER BY v.asset, v.owner, v.kind
ON CONFLICT (owner, asset, kind) DO UPDATE SET balance = ledger_accounts.balance`, assets, kinds, owners)
	if err != nil {
		return fmt.Errorf("ledger: lock %d accounts: %w", len(assets), err)
	}
	return nil
}
