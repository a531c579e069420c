package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/uptrace/bun"

	"svc/platform/db"
)

// Post records e in db (the caller's transaction) and returns the stored
// entry. It is idempotent on (kind, source_ref): if that fact was posted
// before, the first entry is returned with Replayed set and nothing changes;
// if the earlier entry has other lines, the error is ErrReplayMismatch.
//
// Debits of user accounts are guarded updates: when one does not fit,
// nothing is written and the error is an *InsufficientFundsError.
//
// The whole posting is one SQL statement: the replay check, the guarded
// debits, the credits (creating user accounts on first use), the entry and
// its postings. User account rows are locked in a fixed order (owner, kind)
// so that two entries touching the same accounts cannot deadlock, unless
// e.Locked says LockAccounts locked them before; system accounts are never
// locked or updated.
func Post(ctx context.Context, idb bun.IDB, e Entry) (Posted, error) {
	if err := e.Validate(); err != nil {
		return Posted{}, err
	}
	q, err := sqlOf(idb)
	if err != nil {
		return Posted{}, err
	}
	stmt, args, debits := buildPost(e, false)
	rows, err := q.QueryContext(ctx, stmt, args...)
	if err != nil {
		return Posted{}, postError(e, err)
	}
	r, err := readPost(e, rows)
	if cerr := rows.Close(); err == nil && cerr != nil {
		err = postError(e, cerr)
	}
	if err != nil {
		return Posted{}, err
	}
	if r.existingID.Valid {
		return replay(ctx, q, e, r.existingID.Int64)
	}
	return r.posted(e, debits)
}

// QueuedPost is a posting queued on a pgx batch by QueuePost.
type QueuedPost struct {
	e      Entry
	debits int
}

// QueuePost queues on b the statement that posts e, for a caller that sends
// a posting and its own statements in one round trip, as one implicit
// transaction (db.Pipeline). Nothing can be inspected between the
// statements there, so the posting is strict: a debit that does not fit
// raises (an *InsufficientFundsError), and a fact posted before fails
// (ErrConcurrentPost) instead of being replayed; either error rolls back
// every statement of the batch. Read the result with Read, in queue order.
func QueuePost(b *pgx.Batch, e Entry) (*QueuedPost, error) {
	if err := e.Validate(); err != nil {
		return nil, err
	}
	stmt, args, debits := buildPost(e, true)
	b.Queue(stmt, args...)
	return &QueuedPost{e: e, debits: debits}, nil
}

// Read reads the queued posting's result from br.
func (q *QueuedPost) Read(br pgx.BatchResults) (Posted, error) {
	rows, err := br.Query()
	if err != nil {
		return Posted{}, postError(q.e, err)
	}
	r, err := readPost(q.e, rows)
	rows.Close()
	if err == nil && rows.Err() != nil {
		err = postError(q.e, rows.Err())
	}
	if err != nil {
		return Posted{}, err
	}
	return r.posted(q.e, q.debits) // a strict statement never replays
}

// postRows is what readPost needs of a result: database/sql's rows and
// pgx's both have it.
type postRows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// postResult is the row set of buildPost's statement.
type postResult struct {
	entryID, existingID sql.NullInt64
	createdAt           sql.NullTime
	failed              int
	postings            []Posting
}

// readPost reads the result of buildPost's statement.
func readPost(e Entry, rows postRows) (postResult, error) {
	var r postResult
	for rows.Next() {
		var pid, acct, amt sql.NullInt64
		if err := rows.Scan(&r.entryID, &r.createdAt, &r.existingID, &r.failed, &pid, &acct, &amt); err != nil {
			return postResult{}, fmt.Errorf("ledger: post %s %s: %w", e.Kind, e.SourceRef, err)
		}
		if pid.Valid {
			r.postings = append(r.postings, Posting{ID: pid.Int64, EntryID: r.entryID.Int64, Amount: amt.Int64})
		}
	}
	if err := rows.Err(); err != nil {
		return postResult{}, postError(e, err)
	}
	return r, nil
}

// posted turns a result that is not a replay into the stored entry, or the
// debit that did not fit into an *InsufficientFundsError.
func (r postResult) posted(e Entry, debits int) (Posted, error) {
	switch {
	case r.entryID.Valid:
		// Postings come back in id order, which is the lines' order (the
		// statement inserts them sorted by line).
		if len(r.postings) != len(e.Lines) {
			return Posted{}, fmt.Errorf("ledger: post %s %s: %d postings stored for %d lines", e.Kind, e.SourceRef, len(r.postings), len(e.Lines))
		}
		for i := range r.postings {
			if r.postings[i].Amount != e.Lines[i].Amount {
				return Posted{}, fmt.Errorf("ledger: post %s %s: posting order does not match the lines", e.Kind, e.SourceRef)
			}
			r.postings[i].Account = e.Lines[i].Account
		}
		return Posted{ID: r.entryID.Int64, Kind: e.Kind, Asset: e.Asset, SourceRef: e.SourceRef, Memo: e.Memo,
			CreatedAt: r.createdAt.Time, Postings: r.postings}, nil
	case r.failed >= 0 && r.failed < len(e.Lines):
		l := e.Lines[r.failed]
		return Posted{}, &InsufficientFundsError{Asset: e.Asset, Account: l.Account, Amount: -l.Amount}
	default:
		return Posted{}, fmt.Errorf("ledger: post %s %s: nothing posted (%d debits)", e.Kind, e.SourceRef, debits)
	}
}

// postError translates what the database refused.
func postError(e Entry, err error) error {
	switch {
	case db.IsUniqueViolation(err, "ledger_entries_source"):
		return fmt.Errorf("ledger: post %s %s: %w (%v)", e.Kind, e.SourceRef, ErrConcurrentPost, err)
	case db.IsCheckViolation(err, "ledger_accounts_balance_nonneg"):
		// From ledger_refuse_partial_debit, whose DETAIL is the line.
		var pe *pgconn.PgError
		if errors.As(err, &pe) {
			if i, convErr := strconv.Atoi(pe.Detail); convErr == nil && i >= 0 && i < len(e.Lines) {
				l := e.Lines[i]
				return &InsufficientFundsError{Asset: e.Asset, Account: l.Account, Amount: -l.Amount}
			}
		}
		return fmt.Errorf("ledger: post %s %s: %w (%v)", e.Kind, e.SourceRef, ErrInsufficientFunds, err)
	case e.Locked && isMissingAccount(err):
		return fmt.Errorf("ledger: post %s %s: an account it credits does not exist, so LockAccounts did not cover it as Locked promises: %w",
			e.Kind, e.SourceRef, err)
	}
	return fmt.Errorf("ledger: post %s %s: %w", e.Kind, e.SourceRef, err)
}

// isMissingAccount: a posting without its account (a Locked credit that
// found no row).
func isMissingAccount(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23502" && pe.TableName == "ledger_postings" && pe.ColumnName == "account_id"
}

// replay returns the entry stored earlier under e's (kind, source_ref), or
// ErrReplayMismatch when its lines differ from e's.
func replay(ctx context.Context, q db.Querier, e Entry, id int64) (Posted, error) {
	p, err := loadEntry(ctx, q, id)
	if err != nil {
		return Posted{}, err
	}
	if p.Asset != e.Asset || !sameLines(p.Postings, e.Lines) {
		return Posted{}, fmt.Errorf("ledger: %w: %s %s is entry %d in %s with %s, not %s", ErrReplayMismatch,
			e.Kind, e.SourceRef, p.ID, p.Asset, describePostings(p.Postings), describeLines(e.Lines))
	}
	p.Replayed = true
	return p, nil
}

func sameLines(ps []Posting, ls []Line) bool {
	if len(ps) != len(ls) {
		return false
	}
	want := make(map[Line]int, len(ls))
	for _, l := range ls {
		want[l]++
	}
	for _, p := range ps {
		k := Line{Account: p.Account, Amount: p.Amount}
		if want[k] == 0 {
			return false
		}
		want[k]--
	}
	return true
}

func describeLines(ls []Line) string {
	parts := make([]string, len(ls))
	for i, l := range ls {
		parts[i] = fmt.Sprintf("%s %+d", l.Account, l.Amount)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

func describePostings(ps []Posting) string {
	ls := make([]Line, len(ps))
	for i, p := range ps {
		ls[i] = Line{Account: p.Account, Amount: p.Amount}
	}
	return describeLines(ls)
}

// loadEntry reads one stored entry with its postings.
func loadEntry(ctx context.Context, q db.Querier, id int64) (Posted, error) {
	rows, err := q.QueryContext(ctx, `
SELECT e.kind, e.asset, e.source_ref, coalesce(e.memo, ''), e.created_at, p.id, a.kind, a.owner, p.amount
  FROM ledger_entries e
  JOIN ledger_postings p ON p.entry_id = e.id
  JOIN ledger_accounts a ON a.id = p.account_id
 WHERE e.id = $1
 ORDER BY p.id`, id)
	if err != nil {
		return Posted{}, fmt.Errorf("ledger: load entry %d: %w", id, err)
	}
	defer rows.Close()
	p := Posted{ID: id}
	for rows.Next() {
		var ps Posting
		if err := rows.Scan(&p.Kind, &p.Asset, &p.SourceRef, &p.Memo, &p.CreatedAt, &ps.ID, &ps.Account.Kind, &ps.Account.Owner, &ps.Amount); err != nil {
			return Posted{}, fmt.Errorf("ledger: load entry %d: %w", id, err)
		}
		ps.EntryID = id
		p.Postings = append(p.Postings, ps)
	}
	if err := rows.Err(); err != nil {
		return Posted{}, fmt.Errorf("ledger: load entry %d: %w", id, err)
	}
	if len(p.Postings) == 0 {
		return Posted{}, fmt.Errorf("ledger: load entry %d: %w", id, sql.ErrNoRows)
	}
	return p, nil
}

// buildPost writes the single statement that posts e (see Post) and returns
// it with its arguments and the number of guarded debits. A strict
// statement (QueuePost) raises where Post's reports: a debit that does not
// fit raises as a partial one does, and a fact posted before fails on the
// entries' unique (kind, source_ref) instead of being replayed.
//
// The statement's CTEs, in the order their data dependencies force:
//
//	existing  the entry already stored under (kind, source_ref), if any
//	fN        per credit of a platform account's available row that does
//	          not exist yet: the account's other shards, before any lock
//	lk        (two or more user accounts, not Locked) lock them in
//	          (owner, kind) order
//	aN        per user debit: the guarded UPDATE, skipped on replay
//	ok        no replay and every debit fitted; some but not all fitting
//	          raises, so a partial debit can never survive
//	aN        per user credit: upsert the account and add, only if ok
//	          (under Locked: update it, LockAccounts created it)
//	e         the entry, only if ok
//	p         the postings, in line order, only if e
//
// It returns one row per posting (or one row with null postings) carrying
// the new entry's id, the replayed entry's id, and the index of the first
// debit that did not fit.
func buildPost(e Entry, strict bool) (string, []any, int) {
	args := []any{string(e.Kind), e.Asset, e.SourceRef, nullString(e.Memo)}
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	var (
		ctes    []string
		debits  []int
		acctSQL = make([]string, len(e.Lines))
		owners  = make([]string, len(e.Lines)) // parameter of each user line's owner
		users   []int
	)
	ctes = append(ctes, `existing AS (SELECT id FROM ledger_entries WHERE kind = $1::text AND source_ref = $3::text)`)
	for i, l := range e.Lines {
		if l.Account.Kind.Materialized() {
			owners[i] = arg(l.Account.Owner)
			users = append(users, i)
		}
	}
	// A credit of a platform account's available row (its own or a
	// shard's) that does not exist yet creates the account's other shards
	// first (DO NOTHING: an existing row is neither locked nor changed),
	// so that once an account exists in an asset all its shards do and no
	// later statement creates one (PlatformShards): LockAccounts and lk
	// then lock only rows that exist, in the one order. It runs before
	// this statement locks anything (lk, the debits and the credits read
	// it: whichever runs first runs it). The rows it creates are this
	// transaction's until it commits, taken out of the global order: two
	// first credits of one account at once may deadlock, once, which the
	// service's transactions retry (db.RunInTx). The NOT EXISTS probe
	// makes it one index lookup once the account exists.
	named := make(map[Account]bool, len(e.Lines))
	for _, l := range e.Lines {
		named[l.Account] = true
	}
	famRefs := ""
	for _, i := range users {
		l := e.Lines[i]
		if l.Amount < 0 || l.Account.Kind != PlatformAvailable || e.Locked {
			continue // under Locked, LockAccounts created the shards
		}
		family := shardFamily(l.Account.Owner, func(o string) bool { return named[Account{Kind: PlatformAvailable, Owner: o}] })
		ctes = append(ctes, familyCTE(fmt.Sprintf("f%d", i), "$2", arg(family), owners[i]))
		famRefs += fmt.Sprintf(" AND (SELECT count(*) FROM f%d) >= 0", i)
	}
	lockRef := ""
	if len(users) >= 2 && !e.Locked {
		keys := make([]string, len(users))
		for j, i := range users {
			keys[j] = fmt.Sprintf("(%s::text, '%s'::text)", owners[i], e.Lines[i].Account.Kind)
		}
		// The rows are locked in the order the database sorts them, the
		// same for every posting, so two entries on the same accounts wait
		// for each other instead of deadlocking. (Under Locked,
		// LockAccounts took them in that order before.)
		//
		// One debit and one credit (a transfer leg, an escrow hold or
		// release) need lk only when the credit's account sorts first:
		// without lk the debit's UPDATE locks its row before the credit
		// touches its own, since the credit reads ok, which counts the
		// debit. When the debit's sorts first (the database compares them,
		// in the collation it sorts with), lk's one-time filter skips it,
		// and its index scans, sort and row locks, which would add nothing.
		skip := "false"
		if len(users) == 2 && (e.Lines[users[0]].Amount < 0) != (e.Lines[users[1]].Amount < 0) {
			d, c := keys[0], keys[1]
			if e.Lines[users[0]].Amount > 0 {
				d, c = c, d
			}
			skip = d + " < " + c
		}
		ctes = append(ctes, fmt.Sprintf(`lk AS (SELECT id FROM ledger_accounts WHERE NOT (%s) AND asset = $2::text AND (owner, kind) IN (%s)%s ORDER BY owner, kind FOR UPDATE)`,
			skip, strings.Join(keys, ", "), famRefs))
		lockRef = ` AND (SELECT count(*) FROM lk) >= 0`
	}
	notReplay := " AND NOT EXISTS (SELECT 1 FROM existing)"
	if strict {
		notReplay = ""
	}
	for _, i := range users {
		l := e.Lines[i]
		if l.Amount > 0 {
			continue
		}
		amt := arg(-l.Amount)
		name := fmt.Sprintf("a%d", i)
		ctes = append(ctes, fmt.Sprintf(`%s AS (UPDATE ledger_accounts SET balance = balance - %s::bigint
    WHERE owner = %s::text AND asset = $2::text AND kind = '%s' AND balance >= %s::bigint
      %s%s%s RETURNING id, balance)`, name, amt, owners[i], l.Account.Kind, amt, notReplay, lockRef, famRefs))
		acctSQL[i] = fmt.Sprintf("(SELECT id FROM %s)", name)
		debits = append(debits, i)
	}
	n := "0"
	if len(debits) > 0 {
		parts := make([]string, len(debits))
		for j, i := range debits {
			parts[j] = fmt.Sprintf("(SELECT count(*) FROM a%d)", i)
		}
		n = strings.Join(parts, " + ")
	}
	failed := "-1"
	if len(debits) > 0 {
		var b strings.Builder
		b.WriteString("CASE")
		for _, i := range debits {
			fmt.Fprintf(&b, " WHEN NOT EXISTS (SELECT 1 FROM a%d) THEN %d", i, i)
		}
		b.WriteString(" ELSE -1 END")
		failed = b.String()
	}
	// ok: whether the entry is written. Some but not all debits fitting
	// always raises; a strict statement raises when any did not fit.
	cond := fmt.Sprintf("s.n = 0 OR s.n = %d THEN s.n = %d AND NOT s.replay", len(debits), len(debits))
	if strict {
		cond = fmt.Sprintf("s.n = %d THEN true", len(debits))
	}
	locked, lockedWhere := "", ""
	if lockRef != "" {
		locked, lockedWhere = ", (SELECT count(*) FROM lk) AS locked", "\n   WHERE s.locked >= 0"
	}
	ctes = append(ctes, fmt.Sprintf(`ok AS (SELECT CASE WHEN %s
        ELSE ledger_refuse_partial_debit($1::text, $3::text, %s) END AS ok
    FROM (SELECT %s AS n, EXISTS (SELECT 1 FROM existing) AS replay%s) s%s)`, cond, failed, n, locked, lockedWhere))
	for _, i := range users {
		l := e.Lines[i]
		if l.Amount < 0 {
			continue
		}
		name := fmt.Sprintf("a%d", i)
		if e.Locked {
			// LockAccounts created the row, so a plain UPDATE credits it,
			// without the upsert's conflict check and ON CONFLICT path
			// (one buffer fewer per credit, the same WAL). An UPDATE
			// followed by an INSERT only for a row it did not find was
			// measured for every credit too: where lk had locked the row
			// it read no fewer buffers and wrote no fewer WAL records than
			// the upsert, and its extra INSERT costs executor setup, so
			// the other credits stay upserts. A row that is missing after
			// all (a broken promise) leaves the posting without its
			// account, which its NOT NULL refuses: nothing is written
			// (postError names the promise).
			ctes = append(ctes, fmt.Sprintf(`%s AS (UPDATE ledger_accounts SET balance = balance + %s::bigint
    WHERE owner = %s::text AND asset = $2::text AND kind = '%s' AND (SELECT ok FROM ok)%s RETURNING id, balance)`,
				name, arg(l.Amount), owners[i], l.Account.Kind, famRefs))
		} else {
			ctes = append(ctes, fmt.Sprintf(`%s AS (INSERT INTO ledger_accounts (asset, kind, owner, balance)
    SELECT $2::text, '%s', %s::text, %s::bigint FROM ok WHERE ok.ok%s
    ON CONFLICT (owner, asset, kind) DO UPDATE SET balance = ledger_accounts.balance + EXCLUDED.balance
    RETURNING id, balance)`, name, l.Account.Kind, owners[i], arg(l.Amount), famRefs))
		}
		acctSQL[i] = fmt.Sprintf("(SELECT id FROM %s)", name)
	}
	ctes = append(ctes, `e AS (INSERT INTO ledger_entries (kind, asset, source_ref, memo)
    SELECT $1::text, $2::text, $3::text, $4::text FROM ok WHERE ok.ok RETURNING id, created_at)`)
	// A user posting carries its account's balance after it, as the
	// account's own update returned it (migration 0014 checks the chain),
	// and copies of the entry's kind, source_ref, memo and created_at for
	// the user's history (migration 0025); a system posting carries none.
	values := make([]string, len(e.Lines))
	for i, l := range e.Lines {
		acct, after, user := acctSQL[i], "NULL::bigint", "false"
		if l.Account.Kind.Materialized() {
			after, user = fmt.Sprintf("(SELECT balance FROM a%d)", i), "true"
		} else {
			acct = fmt.Sprintf("(SELECT id FROM ledger_accounts WHERE owner = '' AND asset = $2::text AND kind = '%s')", l.Account.Kind)
		}
		values[i] = fmt.Sprintf("(%d, %s, %s::bigint, %s, %s)", i, acct, arg(l.Amount), after, user)
	}
	ctes = append(ctes, fmt.Sprintf(`p AS (INSERT INTO ledger_postings (entry_id, account_id, amount, balance_after, entry_kind, entry_ref, entry_memo, entry_at)
    SELECT e.id, v.account_id, v.amount, v.balance_after, CASE WHEN v.usr THEN $1::text END, CASE WHEN v.usr THEN $3::text END,
           CASE WHEN v.usr THEN $4::text END, CASE WHEN v.usr THEN e.created_at END
      FROM e, (VALUES %s) AS v (ord, account_id, amount, balance_after, usr)
    ORDER BY v.ord RETURNING id, account_id, amount)`, strings.Join(values, ", ")))

	stmt := "WITH " + strings.Join(ctes, ",\n") + fmt.Sprintf(`
SELECT s.entry_id, s.created_at, s.existing_id, s.failed, p.id, p.account_id, p.amount
  FROM (SELECT (SELECT id FROM e) AS entry_id, (SELECT created_at FROM e) AS created_at,
               (SELECT id FROM existing) AS existing_id, %s AS failed) s
  LEFT JOIN p ON true
 ORDER BY p.id`, failed)
	return stmt, args, len(debits)
}

// shardFamily is the shards of owner's platform account that a statement
// does not name itself (named reports one it names; nil: owner alone).
func shardFamily(owner string, named func(string) bool) []string {
	if named == nil {
		named = func(o string) bool { return o == owner }
	}
	var family []string
	for _, o := range ShardOwners(PlatformName(owner)) {
		if !named(o) {
			family = append(family, o)
		}
	}
	return family
}

// familyCTE is the CTE, called name, that creates a platform account's
// shards family (a text[] parameter) in asset when its shard probe (a text
// parameter) does not exist yet (see buildPost).
func familyCTE(name, asset, family, probe string) string {
	return fmt.Sprintf(`%s AS (INSERT INTO ledger_accounts (asset, kind, owner, balance)
    SELECT %s::text, 'platform_available', f.owner, 0 FROM unnest(%s::text[]) AS f (owner)
     WHERE NOT EXISTS (SELECT 1 FROM ledger_accounts x WHERE x.owner = %s::text AND x.asset = %s::text AND x.kind = 'platform_available')
     ORDER BY f.owner
    ON CONFLICT (owner, asset, kind) DO NOTHING RETURNING 1)`, name, asset, family, probe, asset)
}

func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}
