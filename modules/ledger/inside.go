package ledger

import (
	"context"
	"fmt"
	"sort"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
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
// -amount, to's available +amount (to.CreditAccount(sourceRef): a
// platform account's shard). sourceRef names the transfer and the leg. A
// debit that does not fit is an *InsufficientFundsError naming from's
// account; nothing is written.
func PostTransferLeg(ctx context.Context, idb bun.IDB, asset string, from, to Holder, amount int64, sourceRef, memo string) (Posted, error) {
	e, err := TransferLegEntry(asset, from, to, amount, sourceRef, memo)
	if err != nil {
		return Posted{}, err
	}
	return postDebiting(ctx, idb, from, e)
}

// QueueTransferLeg queues on b the posting of one leg of a transfer, as
// PostTransferLeg posts it, strict (QueuePost) and Locked: for a caller
// that sends the leg with its other statements in one round trip, after
// QueueLockAccounts of the leg's accounts (from's available account and
// to.CreditAccount(sourceRef)). It never gathers a platform account's
// shards: a debit that shard 0 cannot cover raises, and the caller posts
// the leg the ordinary way (PostTransferLeg).
func QueueTransferLeg(b *pgx.Batch, asset string, from, to Holder, amount int64, sourceRef, memo string) (*QueuedPost, error) {
	e, err := TransferLegEntry(asset, from, to, amount, sourceRef, memo)
	if err != nil {
		return nil, err
	}
	e.Locked = true
	return QueuePost(b, e)
}

// TransferLegEntry is the entry PostTransferLeg posts, for a caller that
// posts it with Entry.Locked after LockAccounts of its accounts. Posted so,
// it never gathers a platform account's shards: a debit that shard 0
// cannot cover is refused (PostTransferLeg gathers them first).
func TransferLegEntry(asset string, from, to Holder, amount int64, sourceRef, memo string) (Entry, error) {
	if amount <= 0 {
		return Entry{}, fmt.Errorf("%w: transfer amount must be positive, got %d", ErrInvalidEntry, amount)
	}
	if from == to {
		return Entry{}, fmt.Errorf("%w: a transfer from %s to itself", ErrInvalidEntry, from)
	}
	return Entry{Kind: TransferEntry, Asset: asset, SourceRef: sourceRef, Memo: memo, Lines: []Line{
		{Account: from.Available(), Amount: -amount},
		{Account: to.CreditAccount(sourceRef), Amount: amount},
	}}, nil
}

// PostEscrowHold reserves amount of the payer's available balance for an
// escrow hold (escrow_hold): available -amount, escrow +amount. sourceRef
// is the hold's id; its capture and release use the same one.
func PostEscrowHold(ctx context.Context, idb bun.IDB, asset string, payer Holder, amount int64, sourceRef, memo string) (Posted, error) {
	if amount <= 0 {
		return Posted{}, fmt.Errorf("%w: hold amount must be positive, got %d", ErrInvalidEntry, amount)
	}
	return postDebiting(ctx, idb, payer, Entry{Kind: EscrowHold, Asset: asset, SourceRef: sourceRef, Memo: memo, Lines: []Line{
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
// recipient's available +its amount (CreditAccount(sourceRef): a platform
// account's shard). 1 to MaxCaptureLegs legs, each
// positive, to distinct recipients other than the payer.
//
// The ledger keeps one escrow account per holder and asset, shared by the
// holder's open holds; that a hold is captured or released once, and for
// no more than it reserved, is the hold's own rule (modules/hold takes the
// hold's row first), which (kind, source_ref) backs up: a second capture
// or release of one hold replays the first. The ledger check compares each
// escrow balance with its holder's open holds.
func PostEscrowCapture(ctx context.Context, idb bun.IDB, asset string, payer Holder, legs []CaptureLeg, sourceRef, memo string) (Posted, error) {
	e, err := captureEntry(asset, payer, legs, sourceRef, memo)
	if err != nil {
		return Posted{}, err
	}
	return Post(ctx, idb, e)
}

// captureEntry is the entry PostEscrowCapture posts.
func captureEntry(asset string, payer Holder, legs []CaptureLeg, sourceRef, memo string) (Entry, error) {
	if len(legs) < 1 || len(legs) > MaxCaptureLegs {
		return Entry{}, fmt.Errorf("%w: a capture pays 1 to %d recipients, got %d", ErrInvalidEntry, MaxCaptureLegs, len(legs))
	}
	lines := make([]Line, 0, len(legs)+1)
	lines = append(lines, Line{Account: payer.Escrow()})
	for i, l := range legs {
		if l.Amount <= 0 {
			return Entry{}, fmt.Errorf("%w: capture leg %d: amount must be positive, got %d", ErrInvalidEntry, i, l.Amount)
		}
		if l.To == payer {
			return Entry{}, fmt.Errorf("%w: capture leg %d pays the payer %s", ErrInvalidEntry, i, payer)
		}
		if lines[0].Amount < -(1<<63-1)+l.Amount {
			return Entry{}, fmt.Errorf("%w: capture amounts overflow", ErrInvalidEntry)
		}
		lines[0].Amount -= l.Amount
		lines = append(lines, Line{Account: l.To.CreditAccount(sourceRef), Amount: l.Amount})
	}
	return Entry{Kind: EscrowCapture, Asset: asset, SourceRef: sourceRef, Memo: memo, Lines: lines}, nil
}

// CaptureEscrow settles the hold sourceRef by a capture in the caller's
// transaction: the capture to legs (escrow_capture) and, when rest > 0,
// the release of rest to the payer (escrow_release). Every account the two
// entries move that exists (the payer's escrow and available accounts, and
// the account each leg credits) is locked first, in the one global order,
// so two captures on the same accounts queue instead of deadlocking. A
// user payer's capture (one statement, below) creates a recipient's
// missing account only after it has locked the rest: against a
// transaction that creates the same account in the global order
// (LockAccounts) and then waits for the payer's rows, it may deadlock once,
// which the caller's db.RunInTx retries. release is nil when rest is 0. An
// entry posted before replays (Post).
//
// A user payer's capture is one statement (buildCapture): the lock, both
// entries and their postings. Against LockAccounts and the two postings
// Locked, three statements, a hold and its capture cost the server
// 2.04-2.21 ms where they cost 2.78-2.89, and ran 41-86% more a second
// (BenchmarkInsideCapture, four rounds each way in two runs on 2026-11-29,
// other work running; docs/performance.md, "The capture in one
// statement"). A platform payer's, and a replay, take the three
// statements: a platform account's available account is locked with all
// its shards (LockAccounts), and Post replays each entry.
func CaptureEscrow(ctx context.Context, tx bun.Tx, asset string, payer Holder, legs []CaptureLeg, rest int64, sourceRef, captureMemo, releaseMemo string) (capture Posted, release *Posted, err error) {
	c, err := captureEntry(asset, payer, legs, sourceRef, captureMemo)
	if err != nil {
		return Posted{}, nil, err
	}
	var r Entry
	if rest > 0 {
		if r, err = releaseEntry(asset, payer, rest, sourceRef, releaseMemo); err != nil {
			return Posted{}, nil, err
		}
	}
	if !payer.Platform && !captureInSteps {
		if err := c.Validate(); err != nil {
			return Posted{}, nil, err
		}
		var rp *Entry
		if rest > 0 {
			if err := r.Validate(); err != nil {
				return Posted{}, nil, err
			}
			rp = &r
		}
		q, err := sqlOf(tx)
		if err != nil {
			return Posted{}, nil, err
		}
		capture, release, replayed, err := captureInOne(ctx, q, c, rp, payer)
		if err != nil || !replayed {
			return capture, release, err
		}
	}
	return captureSteps(ctx, tx, payer, c, r, rest)
}

// captureInSteps makes CaptureEscrow post a user payer's capture the
// platform payer's way (BenchmarkInsideCapture compares the two).
var captureInSteps = false

// captureSteps is CaptureEscrow in three statements: LockAccounts, then the
// capture and the release, both Locked: they lock nothing more.
func captureSteps(ctx context.Context, tx bun.Tx, payer Holder, c, r Entry, rest int64) (capture Posted, release *Posted, err error) {
	asset := c.Asset
	refs := []AccountRef{{Asset: asset, Account: payer.Escrow()}}
	if rest > 0 {
		refs = append(refs, AccountRef{Asset: asset, Account: payer.Available()})
	}
	for _, l := range c.Lines[1:] {
		refs = append(refs, AccountRef{Asset: asset, Account: l.Account})
	}
	if err := LockAccounts(ctx, tx, refs); err != nil {
		return Posted{}, nil, err
	}
	c.Locked = true
	if capture, err = Post(ctx, tx, c); err != nil {
		return Posted{}, nil, err
	}
	if rest > 0 {
		r.Locked = true
		p, err := Post(ctx, tx, r)
		if err != nil {
			return Posted{}, nil, err
		}
		release = &p
	}
	return capture, release, nil
}

// PostEscrowRelease returns amount of the hold sourceRef from the payer's
// escrow to its available balance (escrow_release): all of it on a void or
// an expiry, the part not captured after a capture.
func PostEscrowRelease(ctx context.Context, idb bun.IDB, asset string, payer Holder, amount int64, sourceRef, memo string) (Posted, error) {
	e, err := releaseEntry(asset, payer, amount, sourceRef, memo)
	if err != nil {
		return Posted{}, err
	}
	return Post(ctx, idb, e)
}

// releaseEntry is the entry PostEscrowRelease posts.
func releaseEntry(asset string, payer Holder, amount int64, sourceRef, memo string) (Entry, error) {
	if amount <= 0 {
		return Entry{}, fmt.Errorf("%w: release amount must be positive, got %d", ErrInvalidEntry, amount)
	}
	return Entry{Kind: EscrowRelease, Asset: asset, SourceRef: sourceRef, Memo: memo, Lines: []Line{
		{Account: payer.Escrow(), Amount: -amount},
		{Account: payer.Available(), Amount: amount},
	}}, nil
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
//
// A platform account's available account (shard 0) is locked with all its
// shards, so that a debit that gathers them (gather) waits for nothing
// more. A credit names the one shard it posts to (Holder.CreditAccount).
// Whenever one of a platform account's available rows is created, all
// PlatformShards are (here and in Post), so that no shard appears after a
// lock: the missing ones are created first. The rows a statement creates
// are its transaction's until it commits, taken out of the global order:
// two first credits of one account at once may deadlock there, once;
// db.RunInTx retries it.
func LockAccounts(ctx context.Context, idb bun.IDB, refs []AccountRef) error {
	if len(refs) == 0 {
		return nil
	}
	stmt, args, err := lockAccounts(refs)
	if err != nil {
		return err
	}
	q, err := sqlOf(idb)
	if err != nil {
		return err
	}
	if _, err := q.ExecContext(ctx, stmt, args...); err != nil {
		return fmt.Errorf("ledger: lock %d accounts: %w", len(args[0].([]string)), err)
	}
	return nil
}

// QueueLockAccounts queues on b the statement of LockAccounts, for a
// caller that sends it with its postings in one round trip (QueuePost),
// in a transaction. Read its result with br.Exec, in queue order.
func QueueLockAccounts(b *pgx.Batch, refs []AccountRef) error {
	if len(refs) == 0 {
		return nil
	}
	stmt, args, err := lockAccounts(refs)
	if err != nil {
		return err
	}
	b.Queue(stmt, args...)
	return nil
}

// lockAccounts is LockAccounts' statement and its arguments.
func lockAccounts(refs []AccountRef) (string, []any, error) {
	for _, r := range refs {
		if !r.Account.Kind.Materialized() {
			return "", nil, fmt.Errorf("%w: lock %s %s: only owned accounts are locked", ErrInvalidEntry, r.Asset, r.Account)
		}
		if err := r.Account.validate(); err != nil {
			return "", nil, fmt.Errorf("%w: lock %s: %v", ErrInvalidEntry, r.Asset, err)
		}
	}
	var (
		all  = make([]AccountRef, 0, len(refs))
		seen = make(map[AccountRef]bool, len(refs))
	)
	add := func(r AccountRef) {
		if !seen[r] {
			seen[r] = true
			all = append(all, r)
		}
	}
	for _, r := range refs {
		add(r)
		if r.Account.Kind == PlatformAvailable && PlatformName(r.Account.Owner) == r.Account.Owner {
			for _, o := range ShardOwners(r.Account.Owner)[1:] {
				add(AccountRef{Asset: r.Asset, Account: Account{Kind: PlatformAvailable, Owner: o}})
			}
		}
	}
	// The shards of a platform account of which a shard is named (not
	// shard 0), created first if the account does not exist yet: each
	// named shard probes its own row, and the family is every other shard.
	var famAssets, famOwners, famProbes []string
	probed := map[AccountRef]bool{}
	for _, r := range refs {
		if r.Account.Kind != PlatformAvailable {
			continue
		}
		name := PlatformName(r.Account.Owner)
		base := AccountRef{Asset: r.Asset, Account: Account{Kind: PlatformAvailable, Owner: name}}
		if seen[base] || probed[base] {
			continue // shard 0 named (every shard is locked), or done
		}
		probed[base] = true
		for _, o := range ShardOwners(name) {
			if ref := (AccountRef{Asset: r.Asset, Account: Account{Kind: PlatformAvailable, Owner: o}}); !seen[ref] {
				famAssets, famOwners, famProbes = append(famAssets, r.Asset), append(famOwners, o), append(famProbes, r.Account.Owner)
			}
		}
	}
	sort.Slice(all, func(i, j int) bool {
		a, b := all[i], all[j]
		if a.Asset != b.Asset {
			return a.Asset < b.Asset
		}
		if a.Account.Owner != b.Account.Owner {
			return a.Account.Owner < b.Account.Owner
		}
		return a.Account.Kind < b.Account.Kind
	})
	assets, kinds, owners := make([]string, len(all)), make([]string, len(all)), make([]string, len(all))
	for i, r := range all {
		assets[i], kinds[i], owners[i] = r.Asset, string(r.Account.Kind), r.Account.Owner
	}
	// The rows are inserted, or found and locked, in the order of the
	// database's own sort, the same collation the posting statement locks
	// in. DO UPDATE ... WHERE false locks the row it finds and writes
	// nothing (ON CONFLICT locks every conflicting row, updated or not): no
	// new row version, no trigger. An unknown asset fails the foreign key:
	// check assets before.
	if len(famOwners) == 0 {
		return lockSQL, []any{assets, kinds, owners}, nil
	}
	return lockWithShardsSQL, []any{assets, kinds, owners, famAssets, famOwners, famProbes}, nil
}

const lockSQL = `
INSERT INTO ledger_accounts (asset, kind, owner, balance)
SELECT v.asset, v.kind, v.owner, 0
  FROM unnest($1::text[], $2::text[], $3::text[]) AS v (asset, kind, owner)
 ORDER BY v.asset, v.owner, v.kind
ON CONFLICT (owner, asset, kind) DO UPDATE SET balance = ledger_accounts.balance WHERE false`

// lockWithShardsSQL is lockSQL that first creates the missing shards
// ($4, $5) of the platform accounts of the shards it locks, those it does
// not lock (the statement's own upsert creates those): each only when the
// shard named ($6) does not exist, one probe of the index. DO NOTHING
// locks no existing row; it waits only for a transaction that is creating
// the same row, and it runs before the first lock (the InitPlan that reads
// it). The rows it creates are held until commit, out of the global
// order: an account's first credits may deadlock once (db.RunInTx
// retries it).
const lockWithShardsSQL = `
WITH missing AS (
    SELECT p.asset, p.probe FROM (SELECT DISTINCT asset, probe FROM unnest($4::text[], $6::text[]) AS u (asset, probe)) p
     WHERE NOT EXISTS (SELECT 1 FROM ledger_accounts x WHERE x.owner = p.probe AND x.asset = p.asset AND x.kind = 'platform_available')),
family AS (
    INSERT INTO ledger_accounts (asset, kind, owner, balance)
    SELECT f.asset, 'platform_available', f.owner, 0
      FROM unnest($4::text[], $5::text[], $6::text[]) AS f (asset, owner, probe)
      JOIN missing m ON m.asset = f.asset AND m.probe = f.probe
     ORDER BY f.asset, f.owner
    ON CONFLICT (owner, asset, kind) DO NOTHING
    RETURNING 1)
INSERT INTO ledger_accounts (asset, kind, owner, balance)
SELECT v.asset, v.kind, v.owner, 0
  FROM unnest($1::text[], $2::text[], $3::text[]) AS v (asset, kind, owner)
 WHERE (SELECT count(*) FROM family) >= 0
 ORDER BY v.asset, v.owner, v.kind
ON CONFLICT (owner, asset, kind) DO UPDATE SET balance = ledger_accounts.balance WHERE false`

// postDebiting posts e, which debits payer's available account (shard 0).
// A platform account's debit first locks every account of the entry with
// LockAccounts (the payer's shards with them, in the one global order),
// then, when shard 0 cannot cover the debit, gathers the shards into it:
// the debit is refused only when the account's whole balance cannot cover
// it. Locking everything first keeps the order: a gather after the
// posting had locked the payee's account would lock the shards after it.
func postDebiting(ctx context.Context, idb bun.IDB, payer Holder, e Entry) (Posted, error) {
	if !payer.Platform {
		return Post(ctx, idb, e)
	}
	if err := e.Validate(); err != nil {
		return Posted{}, err
	}
	var (
		refs []AccountRef
		need int64
	)
	for _, l := range e.Lines {
		if l.Account.Kind.Materialized() {
			refs = append(refs, AccountRef{Asset: e.Asset, Account: l.Account})
		}
		if l.Account == payer.Available() && l.Amount < 0 {
			need = -l.Amount
		}
	}
	// In one transaction (inTx): the locks must hold from the gather to
	// the posting.
	var p Posted
	err := inTx(ctx, idb, func(ctx context.Context, tx bun.IDB) error {
		if err := LockAccounts(ctx, tx, refs); err != nil {
			return err
		}
		if err := gather(ctx, tx, e.Asset, payer.ID, need); err != nil {
			return err
		}
		var err error
		p, err = Post(ctx, tx, e)
		return err
	})
	return p, err
}

// gather moves the balances of the platform account name's shards of
// asset into shard 0, its own row (shard_sweep entries, at most
// MaxCaptureLegs shards each), when shard 0 holds less than need and all
// of them together hold need or more. It
// locks shard 0 and every shard in one statement, in the global order
// (postDebiting locked them already). The sweeps move nothing in or out
// of the account: its balance, the sum of its shards, is unchanged.
func gather(ctx context.Context, idb bun.IDB, asset, name string, need int64) error {
	q, err := sqlOf(idb)
	if err != nil {
		return err
	}
	rows, err := q.QueryContext(ctx, `
SELECT owner, balance FROM ledger_accounts
 WHERE asset = $1::text AND kind = 'platform_available' AND owner = ANY($2::text[])
 ORDER BY owner FOR UPDATE`, asset, ShardOwners(name))
	if err != nil {
		return fmt.Errorf("ledger: gather %s %s: %w", asset, name, err)
	}
	var (
		own  int64
		full []Line // the shards other than 0 with money
	)
	for rows.Next() {
		var (
			owner string
			bal   int64
		)
		if err := rows.Scan(&owner, &bal); err != nil {
			rows.Close()
			return fmt.Errorf("ledger: gather %s %s: %w", asset, name, err)
		}
		switch {
		case owner == name:
			own = bal
		case bal > 0:
			full = append(full, Line{Account: Account{Kind: PlatformAvailable, Owner: owner}, Amount: -bal})
		}
	}
	if err := rows.Close(); err != nil {
		return fmt.Errorf("ledger: gather %s %s: %w", asset, name, err)
	}
	total := own
	for _, l := range full {
		total -= l.Amount
	}
	if own >= need || total < need {
		return nil // nothing to gather, or not enough even gathered: the posting refuses
	}
	for len(full) > 0 {
		n := min(len(full), MaxCaptureLegs)
		lines := append([]Line(nil), full[:n]...)
		full = full[n:]
		var sum int64
		for _, l := range lines {
			sum -= l.Amount
		}
		id, err := uuid.NewV7()
		if err != nil {
			return fmt.Errorf("ledger: gather %s %s: %w", asset, name, err)
		}
		lines = append(lines, Line{Account: Account{Kind: PlatformAvailable, Owner: name}, Amount: sum})
		// Locked: every shard exists and is locked (postDebiting's
		// LockAccounts, and the statement above).
		if _, err := Post(ctx, idb, Entry{Kind: ShardSweep, Asset: asset, SourceRef: "sweep:" + id.String(),
			Memo: "the shards of " + name + " gathered for a debit", Lines: lines, Locked: true}); err != nil {
			return err
		}
	}
	return nil
}
