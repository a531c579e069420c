package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/uptrace/bun"

	"svc/platform/db"
	"svc/platform/timefmt"
)

// # The incremental check
//
// The full check (Check) reads every posting twice, which at ten million
// postings takes a minute (docs/performance.md). The incremental check
// reads only the entries committed since the last consistent check, with
// their postings, and the accounts written since, and proves the same
// thing: every user balance is the sum of its postings, every entry
// balances on accounts of its asset, and no user balance is negative.
//
// The boundary. Each check records (ledger_checks, migration 0022) the
// xmin X of its snapshot: every transaction below X had ended when the
// snapshot was taken, so every entry with created_xact < X was in it, and
// every transaction that commits later has an id of at least X (the rule
// that seals checkpoints; checkpoint.go has the argument). An entry id
// cannot serve as the boundary: ids are drawn before commit, so entry 10
// may commit after entry 11 was checked. The next check reads the entries
// with created_xact >= X (the (created_xact, id) index of checkpoints) and
// nothing below, which is therefore exactly what an earlier check read.
// Entries at or above X that its own snapshot holds are checked too, and
// again by the next check, which starts at X, not at the snapshot's end.
//
// What it checks, in one repeatable-read snapshot, against the latest
// recorded consistent check C0 (boundary X0, largest posting id P0):
//
//  1. every entry with created_xact >= X0 has at least two postings
//     summing to zero, all on existing accounts of its asset;
//  2. every user posting of those entries continues its account's chain:
//     its balance_after is the balance_after of the account's posting just
//     before it by id (0 when none) plus its amount;
//  3. every user account written since the boundary (its row's xmin at
//     or above X0), or posted to by an entry of (1) or a posting of (4),
//     has as its materialized balance the balance_after of its newest
//     posting (0 with none), and neither is negative;
//  4. no posting above P0 belongs to no entry or to an entry below X0 (a
//     posting joins only an entry of its own transaction, and a
//     transaction below X0 had ended before C0's snapshot, whose largest
//     posting id was P0).
//
// Why that proves balance = sum of postings. C0 established it, and (3),
// for its snapshot S0: for each user account, the newest posting N0 of S0
// has balance_after = the sum of the account's postings in S0. Postings of
// one user account are serialized by the row lock of the balance update
// that every posting makes, and their ids are drawn while the lock is held
// (migration 0014), so the postings committed after S0 all come after N0
// by id, and their transactions, having committed after S0, are at or
// above X0: (2) checked every one of them. By induction along the chain,
// the newest posting's balance_after is N0's plus their amounts, i.e. the
// sum of all the account's postings; (3) makes the balance equal to it.
// An account (3) skips had no row written at or above X0, so it still has
// the balance S0 saw, which C0 found equal to N0's balance_after; and it
// has no posting after N0, since such a posting belongs to an entry of
// (1) or lies above P0, and either adds its account to (3).
// The first check, with nothing recorded before it, is the full check,
// which checks (3) too. A check that finds anything is recorded as
// inconsistent and never continued from: the next check starts from the
// last consistent one again, so a finding reappears until it is resolved.
//
// What it does not see: a change, made with the triggers off, to a row
// below the boundary (an old posting's amount, an entry moved below X0).
// Those are what checkpoints and svc admin ledger verify detect; the full
// check (svc admin ledger check, the default there) reads them all again.
//
// Cost: (1), (2) and (4) are index range reads of what came after the
// boundary, (2) one more index probe per new user posting; (3) is one
// sequential pass over the accounts' rows (their xmin), and one probe of
// the (account_id, id) index per account written. The system accounts'
// totals the report needs are carried from check to check
// (check_totals.go). Nothing reads the postings below the boundary, so
// the cost does not grow with the ledger's history; the pass over the
// accounts grows with their number (0.1 s per million to find those
// written, 0.27 s with the users' totals summed on the way).

// Scopes of a check.
const (
	ScopeFull        = "full"
	ScopeIncremental = "incremental"
)

// Coverage is what a check read, and the boundary it was recorded with.
type Coverage struct {
	// Scope is "full" (every entry and posting) or "incremental" (the
	// entries of transactions from FromXid on with their postings, and
	// the accounts written since).
	Scope string `json:"scope"`
	// SinceCheck is the recorded consistent check an incremental check
	// continued, and SinceCheckedAt when that one ran; null for a full
	// check.
	SinceCheck     *int64  `json:"since_check"`
	SinceCheckedAt *string `json:"since_checked_at"`
	// FromXid is the transaction id from which entries were read (0 for a
	// full check: all of them); ToXid is this check's boundary, the
	// oldest transaction still running when its snapshot was taken. Every
	// entry of a transaction below ToXid was checked, now or before.
	FromXid uint64 `json:"from_xid"`
	ToXid   uint64 `json:"to_xid"`
	// FirstEntry and LastEntry are the smallest and largest ids of the
	// entries read; null when none was. Ids are drawn before commit, so
	// the entries read need not be every id between them, nor only those.
	FirstEntry *int64 `json:"first_entry"`
	LastEntry  *int64 `json:"last_entry"`
	// CheckID is the check's row in ledger_checks; null when it was not
	// recorded (a check in the caller's transaction).
	CheckID *int64 `json:"check_id"`
}

// String says what was covered, for an operator.
func (c Coverage) String() string {
	if c.Scope != ScopeIncremental {
		return "full: every entry and posting"
	}
	s := fmt.Sprintf("incremental: entries of transactions from %d on", c.FromXid)
	if c.FirstEntry != nil {
		s += fmt.Sprintf(" (ids %d to %d)", *c.FirstEntry, *c.LastEntry)
	} else {
		s += " (none)"
	}
	if c.SinceCheck != nil {
		s += fmt.Sprintf(", since check %d", *c.SinceCheck)
		if c.SinceCheckedAt != nil {
			s += " of " + *c.SinceCheckedAt
		}
	}
	return s + ", and the accounts written since"
}

// CheckIncremental is Check over what was committed since the last
// consistent check that was recorded (any full or incremental one that
// found nothing): the entries of later transactions with their postings,
// and the balance of every account written since against its newest
// posting. With none recorded it is the full check. It reads one snapshot
// of d, as Check does, runs the withdrawal checks given in it (in full:
// they are not incremental), and records its result. Report.Coverage says
// which it was.
func CheckIncremental(ctx context.Context, d *bun.DB, withdrawals ...WithdrawalCheck) (Report, error) {
	return runCheck(ctx, d, true, withdrawals)
}

// recordedCheck is the part of a ledger_checks row a check continues
// from.
type recordedCheck struct {
	id          int64
	checkedAt   time.Time
	xidTo       uint64
	lastPosting int64
	// systemSums are the sums it carried forward (check_totals.go); nil
	// for a check recorded before they were.
	systemSums map[int64]int64
}

// believable is the condition a reader puts on an integrity record
// (migration 0033): its bound is not beyond the reader's snapshot (a
// boundary is the xmin of the snapshot that recorded it, never above a
// later snapshot's xmax) and its time is not ahead of the database's clock
// (a minute of leeway for the clocks of older rows). A row that fails it
// was not written by the database's own functions: it is ignored, and
// reported.
const believable = `%[1]s <= pg_snapshot_xmax(pg_current_snapshot()) AND %[2]s <= now() + interval '1 minute'`

// lastConsistentCheck returns the recorded consistent check with the
// latest boundary in q's snapshot, or nil when there is none, and the
// consistent checks it ignored (their bound or time in the future).
func lastConsistentCheck(ctx context.Context, q db.Querier) (*recordedCheck, []string, error) {
	ignored, err := ignoredChecks(ctx, q)
	if err != nil {
		return nil, nil, err
	}
	var c recordedCheck
	var to string
	var sums *string
	// Ordered by the column, not by the text read out under the same name
	// (an unqualified ORDER BY name means the output column: "89274"
	// would sort above "154014").
	err = q.QueryRowContext(ctx, `SELECT c.id, c.checked_at, c.xid_to::text, c.last_posting, c.system_sums::text FROM ledger_checks c
 WHERE c.consistent AND `+fmt.Sprintf(believable, "c.xid_to", "c.checked_at")+`
 ORDER BY c.xid_to DESC, c.id DESC LIMIT 1`).Scan(&c.id, &c.checkedAt, &to, &c.lastPosting, &sums)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, ignored, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("read the last consistent check: %w", err)
	}
	if c.xidTo, err = strconv.ParseUint(to, 10, 64); err != nil {
		return nil, nil, fmt.Errorf("read the last consistent check: %w", err)
	}
	if c.systemSums, err = decodeSums(sums); err != nil {
		return nil, nil, err
	}
	return &c, ignored, nil
}

// ignoredChecks names the recorded consistent checks a reader does not
// believe (believable), the latest first.
func ignoredChecks(ctx context.Context, q db.Querier) ([]string, error) {
	rows, err := q.QueryContext(ctx, `SELECT c.id, c.xid_to::text, c.checked_at, pg_snapshot_xmax(pg_current_snapshot())::text FROM ledger_checks c
 WHERE c.consistent AND NOT (`+fmt.Sprintf(believable, "c.xid_to", "c.checked_at")+`)
 ORDER BY c.xid_to DESC, c.id DESC LIMIT 100`)
	if err != nil {
		return nil, fmt.Errorf("read the checks recorded beyond the snapshot: %w", err)
	}
	var out []string
	for rows.Next() {
		var (
			id       int64
			to, xmax string
			at       time.Time
		)
		if err := rows.Scan(&id, &to, &at, &xmax); err != nil {
			rows.Close()
			return nil, err
		}
		out = append(out, fmt.Sprintf("ledger check %d (boundary %s, checked at %s) is beyond this snapshot (next transaction %s) or the database's clock: ignored; no check of the service writes such a row",
			id, to, timefmt.Format(at), xmax))
	}
	return out, closeRows(rows)
}

// checkSince is the incremental check of q's snapshot from since's
// boundary on (1 to 4 above); to is the snapshot's own boundary.
func checkSince(ctx context.Context, q db.Querier, amt amounts, since recordedCheck, to uint64) (Report, error) {
	at := timefmt.Format(since.checkedAt)
	r := Report{Coverage: Coverage{Scope: ScopeIncremental, SinceCheck: &since.id, SinceCheckedAt: &at, FromXid: since.xidTo}}
	var drifts, unbalanced, negative findings
	from := strconv.FormatUint(since.xidTo, 10)

	// What is read: the entries from the boundary on with their postings.
	if err := q.QueryRowContext(ctx, `SELECT count(*), min(x.id), max(x.id), coalesce(sum(x.n), 0)::bigint
  FROM (SELECT e.id, (SELECT count(*) FROM ledger_postings p WHERE p.entry_id = e.id) AS n
          FROM ledger_entries e WHERE e.created_xact >= $1::text::xid8) x`, from).
		Scan(&r.Entries, &r.Coverage.FirstEntry, &r.Coverage.LastEntry, &r.Postings); err != nil {
		return r, err
	}

	// (3) Every user account written since the boundary against its
	// newest posting: one probe of the (account_id, id) index each. A
	// join with the newest posting of every account (DISTINCT ON over the
	// postings) reads every posting: 0.59 s against 0.16 s for the probes
	// at a million postings and 100,015 accounts (BenchmarkCheck,
	// NewestJoin and NewestLateral).
	//
	// Which accounts: a user account's row is rewritten by every posting
	// to it (its balance moves in the same statement), so an account
	// whose row no transaction at or above the boundary wrote still has
	// the balance the last check found equal to its newest posting, and
	// no posting joined it since: a later posting would have moved the
	// balance, and a posting written around the triggers without moving
	// it belongs to a new entry or lies above the last check's largest
	// posting id, both of which add its account here. A row's xmin is the
	// transaction that wrote it; age() compares it with the boundary
	// modulo 2^32, which is exact while the boundary is less than 2^31
	// transactions old. Past 2^30 every account is checked. A row written
	// more than 2^31 transactions ago can look new (checked once more,
	// never missed). One sequential pass over the accounts finds them
	// (0.1 s for a million here, against 4.4 s for a probe each); each
	// is then one probe of the accounts' primary key (LATERAL with a
	// LIMIT, so that the planner cannot turn it into a hash join, which
	// read the million rows again: 0.85 s against 0.30 s).
	//
	// The same pass sums the users' balances by asset and kind for the
	// report's totals (check_totals.go), which would otherwise read the
	// accounts once more. It groups a handful of sums: hashed, not sorted
	// (the full check streams its groups instead; CheckIncremental always
	// runs in a transaction of its own, so the setting stays in it).
	every := to-since.xidTo > 1<<30
	if _, err := q.ExecContext(ctx, "SET LOCAL enable_hashagg = on"); err != nil {
		return r, err
	}
	written, err := scanUserAccounts(ctx, q, from, every, &r.users)
	if err != nil {
		return r, err
	}
	rows, err := q.QueryContext(ctx, `
WITH written AS MATERIALIZED (
       SELECT unnest($3::text::bigint[]) AS id
        UNION
       SELECT p.account_id FROM ledger_entries e JOIN ledger_postings p ON p.entry_id = e.id
        WHERE e.created_xact >= $1::text::xid8
        UNION
       SELECT p.account_id FROM ledger_postings p WHERE p.id > $2),
checked AS MATERIALIZED (
       SELECT a.id, a.asset, a.kind, a.owner, a.balance, n.id AS newest, n.balance_after AS newest_after
         FROM written w
        CROSS JOIN LATERAL (SELECT a.* FROM ledger_accounts a WHERE a.id = w.id AND a.balance IS NOT NULL LIMIT 1) a
         LEFT JOIN LATERAL (SELECT p.id, p.balance_after FROM ledger_postings p WHERE p.account_id = a.id
                             ORDER BY p.id DESC LIMIT 1) n ON true)
SELECT c.n, m.id, m.asset, m.kind, m.owner, m.balance, m.newest, m.newest_after
  FROM (SELECT count(*) AS n FROM checked) c
  LEFT JOIN (SELECT * FROM checked
              WHERE balance < 0 OR newest_after < 0
                 OR balance IS DISTINCT FROM CASE WHEN newest IS NULL THEN 0 ELSE newest_after END) m ON true
 ORDER BY m.id`, from, since.lastPosting, written)
	if err != nil {
		return r, err
	}
	for rows.Next() {
		var (
			id            sql.NullInt64
			code, owner   sql.NullString
			kind          sql.NullString
			materialized  sql.NullInt64
			newest, after sql.NullInt64
		)
		if err := rows.Scan(&r.Accounts, &id, &code, &kind, &owner, &materialized, &newest, &after); err != nil {
			rows.Close()
			return r, err
		}
		if !id.Valid {
			continue // no account differs: the row that carries the count
		}
		name := fmt.Sprintf("%s %s of %q (account %d)", code.String, kind.String, owner.String, id.Int64)
		if s, ok := newestDrift(amt, code.String, materialized.Int64, newest, after); !ok {
			drifts.addAt(code.String, fmt.Sprintf("%s: materialized %s, %s", name, amt.format(code.String, materialized.Int64), s))
		}
		if materialized.Int64 < 0 || (after.Valid && after.Int64 < 0) {
			derived := "none"
			if after.Valid {
				derived = amt.format(code.String, after.Int64)
			}
			negative.addAt(code.String, fmt.Sprintf("%s: balance %s, running balance of its newest posting %s", name, amt.format(code.String, materialized.Int64), derived))
		}
	}
	if err := closeRows(rows); err != nil {
		return r, err
	}

	// (1) The new entries: at least two postings summing to zero...
	rows, err = q.QueryContext(ctx, `
SELECT e.id, true, e.kind, e.asset, e.source_ref, count(p.id), coalesce(sum(p.amount), 0)
  FROM ledger_entries e
  LEFT JOIN ledger_postings p ON p.entry_id = e.id
 WHERE e.created_xact >= $1::text::xid8
 GROUP BY e.id
HAVING count(p.id) < 2 OR coalesce(sum(p.amount), 0) <> 0
 ORDER BY e.id`, from)
	if err != nil {
		return r, err
	}
	if err := scanEntrySums(rows, amt, &unbalanced); err != nil {
		return r, err
	}

	// ... on existing accounts of their asset (1), (2) the chain of every
	// user posting of the new entries, and their copies of their entry's
	// display fields (check_copies.go), in one pass over their postings:
	// each is one probe of the accounts' primary key, and a user posting
	// one more of the (account_id, id) index for the posting before it on
	// its account.
	rows, err = q.QueryContext(ctx, `
SELECT `+copyColumns+`,
       e.asset, p.account_id, p.amount, p.balance_after, prev.id, prev.balance_after,
       a.id IS NULL OR a.asset <> e.asset AS foreign_account,
       a.id IS NOT NULL
       AND ((a.balance IS NULL) <> (p.balance_after IS NULL)
            OR (a.balance IS NOT NULL
                AND p.balance_after IS DISTINCT FROM CASE WHEN prev.id IS NULL THEN 0 ELSE prev.balance_after END + p.amount)) AS broken_chain,
       a.id IS NOT NULL AND `+copyDrifts+` AS copy_drift
  FROM ledger_entries e
  JOIN ledger_postings p ON p.entry_id = e.id
  LEFT JOIN ledger_accounts a ON a.id = p.account_id
  LEFT JOIN LATERAL (SELECT q.id, q.balance_after FROM ledger_postings q WHERE q.account_id = p.account_id AND q.id < p.id
                      ORDER BY q.id DESC LIMIT 1) prev ON a.balance IS NOT NULL
 WHERE e.created_xact >= $1::text::xid8
   AND (a.id IS NULL OR a.asset <> e.asset
        OR (a.balance IS NULL) <> (p.balance_after IS NULL)
        OR (a.balance IS NOT NULL
            AND p.balance_after IS DISTINCT FROM CASE WHEN prev.id IS NULL THEN 0 ELSE prev.balance_after END + p.amount)
        OR `+copyDrifts+`)
 ORDER BY p.id`, from)
	if err != nil {
		return r, err
	}
	for rows.Next() {
		var (
			c                      copyRow
			entryAsset             string
			postedTo, amount       int64
			after, prev, prevAfter sql.NullInt64
			foreign, broken, drift bool
		)
		if err := rows.Scan(append(c.dest(), &entryAsset, &postedTo, &amount, &after, &prev, &prevAfter, &foreign, &broken, &drift)...); err != nil {
			rows.Close()
			return r, err
		}
		posting, entry, account, code, materialized := c.posting, c.entry, c.account, c.code, c.user
		if foreign { // copyColumns gives account 0 for a missing one
			unbalanced.addAt(entryAsset, foreignPosting(entry, c.entryKind, entryAsset, c.entryRef, posting, postedTo, c.account != 0, code))
		}
		if drift {
			drifts.addAt(code, c.finding())
		}
		if !broken {
			continue
		}
		name := fmt.Sprintf("%s %s of %q (account %d)", code, c.kind, c.owner, account)
		switch {
		case !materialized:
			drifts.addAt(code, fmt.Sprintf("%s: posting %d (entry %d) carries a running balance, but the account has no materialized balance", name, posting, entry))
		case !after.Valid:
			drifts.addAt(code, fmt.Sprintf("%s: posting %d (entry %d) carries no running balance", name, posting, entry))
		case !prev.Valid:
			drifts.addAt(code, fmt.Sprintf("%s: posting %d (entry %d) of %s is the account's first, but left %s", name, posting, entry,
				amt.format(code, amount), amt.format(code, after.Int64)))
		case !prevAfter.Valid:
			drifts.addAt(code, fmt.Sprintf("%s: posting %d (entry %d) follows posting %d, which carries no running balance", name, posting, entry, prev.Int64))
		default:
			drifts.addAt(code, fmt.Sprintf("%s: posting %d (entry %d) of %s left %s, but posting %d before it left %s", name, posting, entry,
				amt.format(code, amount), amt.format(code, after.Int64), prev.Int64, amt.format(code, prevAfter.Int64)))
		}
	}
	if err := closeRows(rows); err != nil {
		return r, err
	}

	// (4) Postings written since the last check's snapshot that belong to
	// no entry, or to an entry the last check had read: a primary-key
	// range read from its largest posting id.
	rows, err = q.QueryContext(ctx, `
SELECT p.id, p.entry_id, p.account_id, p.amount, e.id IS NOT NULL, coalesce(e.kind, ''), coalesce(e.asset, ''), coalesce(e.source_ref, '')
  FROM ledger_postings p
  LEFT JOIN ledger_entries e ON e.id = p.entry_id
 WHERE p.id > $1 AND (e.id IS NULL OR e.created_xact < $2::text::xid8)
 ORDER BY p.id`, since.lastPosting, from)
	if err != nil {
		return r, err
	}
	for rows.Next() {
		var (
			posting, entry, account, amount int64
			exists                          bool
			kind, code, ref                 string
		)
		if err := rows.Scan(&posting, &entry, &account, &amount, &exists, &kind, &code, &ref); err != nil {
			rows.Close()
			return r, err
		}
		if !exists {
			unbalanced.add(fmt.Sprintf("entry %d does not exist but has posting %d of %d units on account %d", entry, posting, amount, account))
		} else {
			unbalanced.addAt(code, fmt.Sprintf("entry %d (%s %s, %s): posting %d of %s on account %d was added after check %d had read the entry",
				entry, kind, ref, code, posting, amt.format(code, amount), account, since.id))
		}
	}
	if err := closeRows(rows); err != nil {
		return r, err
	}
	r.setFindings(&drifts, &unbalanced, &negative)
	return r, nil
}

// scanUserAccounts reads every user account once: it adds their balances
// to users, by asset and kind, and returns the ids of those whose rows a
// transaction at or above the boundary from wrote (all of them when every
// is set), as an array literal.
func scanUserAccounts(ctx context.Context, q db.Querier, from string, every bool, users *totalsBuilder) (string, error) {
	rows, err := q.QueryContext(ctx, `
SELECT asset, kind, sum(balance)::bigint,
       coalesce(array_agg(id) FILTER (WHERE $2 OR age(xmin) <= age(xid($1::text::xid8))), '{}')::text
  FROM ledger_accounts WHERE balance IS NOT NULL GROUP BY asset, kind`, from, every)
	if err != nil {
		return "", err
	}
	var ids []string
	for rows.Next() {
		var (
			code, list string
			kind       AccountKind
			sum        int64
		)
		if err := rows.Scan(&code, &kind, &sum, &list); err != nil {
			rows.Close()
			return "", err
		}
		users.add(code, kind, sum)
		if list = strings.Trim(list, "{}"); list != "" {
			ids = append(ids, list)
		}
	}
	if err := closeRows(rows); err != nil {
		return "", err
	}
	if *users == nil {
		*users = totalsBuilder{} // no user account: nothing to add later either
	}
	return "{" + strings.Join(ids, ",") + "}", nil
}

// recordCheck records r through ledger_record_check (migration 0033), in
// tx, the repeatable-read transaction r was read in, and stores its id in
// r. The function takes the boundary, the largest posting id and the time
// from the snapshot itself and computes the system accounts' sums; they
// must be the sums the check carried.
func recordCheck(ctx context.Context, tx bun.Tx, r *Report) error {
	var (
		id, last int64
		to, sums string
	)
	if err := tx.Tx.QueryRowContext(ctx, `SELECT id, xid_to::text, last_posting, coalesce(system_sums::text, '{}')
  FROM ledger_record_check($1, $2, $3, $4, $5, $6, $7, $8)`,
		r.Coverage.Scope, r.Coverage.SinceCheck, r.found == 0, r.Accounts, r.Entries, r.Postings, r.found, r.Took.Milliseconds()).
		Scan(&id, &to, &last, &sums); err != nil {
		return fmt.Errorf("record the check: %w", err)
	}
	recorded, err := decodeSums(&sums)
	if err != nil {
		return fmt.Errorf("record the check: %w", err)
	}
	if to != strconv.FormatUint(r.Coverage.ToXid, 10) || last != r.lastPosting || !maps.Equal(recorded, r.systemSums) {
		return fmt.Errorf("record the check: the database recorded boundary %s, posting %d and sums %s, but the check read boundary %d, posting %d and sums %v",
			to, last, sums, r.Coverage.ToXid, r.lastPosting, r.systemSums)
	}
	r.Coverage.CheckID = &id
	return nil
}
