package ledger

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/uptrace/bun"

	"svc/modules/asset"
	"svc/platform/db"
	"svc/platform/money"
)

// maxFindings caps each list of a Report; a longer list ends with a line
// saying how many more there are.
const maxFindings = 1000

// Report is the ledger half of the reconciliation report.
type Report struct {
	// LedgerConsistent is true when all four lists are empty.
	LedgerConsistent bool `json:"ledger_consistent"`
	// MaterializedVsDerivedDrifts: user accounts whose stored balance is
	// not the sum of their postings, or not the running balance
	// (balance_after) of their newest posting, user postings whose
	// balance_after does not continue their account's chain, postings
	// whose copies of their entry's kind, source_ref, memo and created_at
	// (what a user's history shows, migration 0025) are not the entry's,
	// or that carry copies on a system account, and (full check) system
	// accounts whose sums carried by the last consistent check are not the
	// sums of their postings.
	MaterializedVsDerivedDrifts []string `json:"materialized_vs_derived_drifts"`
	// UnbalancedEntries: entries whose postings do not sum to zero, that
	// have fewer than two postings, that post to a missing account or one
	// of another asset, and postings of no entry.
	UnbalancedEntries []string `json:"unbalanced_entries"`
	// NegativeBalances: owned accounts (users' and platform accounts')
	// below zero, stored or derived.
	NegativeBalances []string `json:"negative_balances"`
	// HoldMismatches: the findings of the module checks given to Check
	// (each a WithdrawalCheck): holds that differ from the gross of the
	// withdrawals holding money and withdrawals whose entries do not fit
	// their status (withdrawal.CheckHolds), escrow against the open escrow
	// holds (hold.CheckEscrow), transfer entries against their legs
	// (transfer.CheckLegs), shard_sweep entries against the platform
	// accounts' shards (CheckSweeps).
	HoldMismatches []string `json:"hold_mismatches"`
	// ByAsset counts the findings of the four lists (listed or not) by
	// the asset they concern; the key "" counts those whose asset cannot
	// be told (a posting of an entry that does not exist). A finding of a
	// WithdrawalCheck concerns the asset its text starts with (followed by
	// a space), else none that can be told.
	ByAsset map[string]int64 `json:"-"`

	// IgnoredRecords are recorded checks the check did not continue from
	// or verify against although they say they found the ledger
	// consistent: their boundary is beyond the check's snapshot, or their
	// time in the future. No check of the service records such a row
	// (migration 0033); one is a forgery to look into.
	IgnoredRecords []string `json:"ignored_records,omitempty"`

	// Coverage is what the check read: the whole ledger, or what was
	// committed since an earlier consistent check (CheckIncremental).
	Coverage Coverage `json:"coverage"`

	// Totals are every asset's balances from the same snapshot (for the
	// custody half of reconciliation).
	Totals []Totals `json:"-"`
	// Accounts is the number of user accounts whose balances were
	// checked: all of them in a full check, those written since the
	// boundary in an incremental one. Entries and Postings are the numbers
	// of entries and postings read: the whole ledger for a full check,
	// those of Coverage's range for an incremental one.
	Accounts int64         `json:"accounts"`
	Entries  int64         `json:"entries"`
	Postings int64         `json:"postings"`
	Took     time.Duration `json:"-"`

	// found counts the findings of the ledger's own checks (the first
	// three lists, before they are capped); lastPosting is the largest
	// posting id of the snapshot; systemSums are the system accounts'
	// sums below the check's boundary (check_totals.go). All three are
	// recorded (ledger_checks).
	found       int64
	lastPosting int64
	systemSums  map[int64]int64
	// users are the users' balances summed by the incremental check's
	// pass over the accounts, for Totals; nil when it did not make one.
	users totalsBuilder
}

// WithdrawalCheck compares the ledger's holds with the withdrawals that own
// them (withdrawal.CheckHolds) and lists the mismatches. The ledger cannot
// import the withdrawal module, so the caller hands it in.
type WithdrawalCheck func(ctx context.Context, idb bun.IDB) ([]string, error)

// Check is the full check: it recomputes every user balance from its
// postings and every entry's sum, and runs the withdrawal checks given,
// from one consistent snapshot (a read-only repeatable-read transaction
// when idb is a *bun.DB; the caller's snapshot when it is a transaction).
// It reports problems; it never repairs anything. When it took the
// snapshot itself it records its result (ledger_checks), and a consistent
// one is where the next CheckIncremental starts.
func Check(ctx context.Context, idb bun.IDB, withdrawals ...WithdrawalCheck) (Report, error) {
	return runCheck(ctx, idb, false, withdrawals)
}

// runCheck runs the full check, or the incremental one (check_incremental.go)
// when incremental is set and a consistent check was recorded before.
func runCheck(ctx context.Context, idb bun.IDB, incremental bool, withdrawals []WithdrawalCheck) (Report, error) {
	start := time.Now()
	var r Report
	run := func(ctx context.Context, tx bun.IDB, settings bool) error {
		q, err := sqlOf(tx)
		if err != nil {
			return err
		}
		// The first statement: it fixes the snapshot, and its xmin is the
		// check's boundary.
		to, last, err := snapshotBoundary(ctx, q)
		if err != nil {
			return err
		}
		if settings {
			// Grouping postings straight off their (entry_id) and
			// (account_id) indexes streams; hashing half a million
			// groups was twice as slow at a million postings. The
			// joins get room instead of spilling to disk. JIT compilation
			// is off: the withdrawal check's per-row EXISTS makes the
			// planner's estimate large enough to compile, which took 0.7 s
			// of that query's 1.0 s at 50,000 withdrawals, on every check.
			for _, set := range []string{"SET LOCAL enable_hashagg = off", "SET LOCAL work_mem = '64MB'", "SET LOCAL jit = off"} {
				if _, err := q.ExecContext(ctx, set); err != nil {
					return err
				}
			}
		}
		fmtr, err := newAmounts(ctx, tx)
		if err != nil {
			return err
		}
		// The latest consistent check: the incremental check continues it,
		// the full one verifies the sums it carried (check_totals.go).
		prior, ignored, err := lastConsistentCheck(ctx, q)
		if err != nil {
			return err
		}
		var since *recordedCheck
		if incremental {
			since = prior
		}
		if since != nil {
			r, err = checkSince(ctx, q, fmtr, *since, to)
		} else {
			r, err = check(ctx, q, fmtr)
		}
		if err != nil {
			return err
		}
		r.Coverage.ToXid, r.lastPosting, r.IgnoredRecords = to, last, ignored
		var holds findings
		for _, wc := range withdrawals {
			list, err := wc(ctx, tx)
			if err != nil {
				return err
			}
			for _, s := range list {
				holds.addAt(fmtr.assetOf(s), s)
			}
		}
		r.HoldMismatches = holds.strings()
		r.countByAsset(&holds)
		r.LedgerConsistent = r.LedgerConsistent && len(r.HoldMismatches) == 0
		if settings {
			// The users' totals group a million accounts into a handful
			// of sums: hashing them took 0.13 s where sorting them first
			// took 0.68 s.
			if _, err := q.ExecContext(ctx, "SET LOCAL enable_hashagg = on"); err != nil {
				return err
			}
		}
		var carried []string
		r.Totals, r.systemSums, carried, err = checkTotals(ctx, q, fmtr, since, prior, to, r.users)
		if len(carried) > 0 {
			r.MaterializedVsDerivedDrifts = append(r.MaterializedVsDerivedDrifts, carried...)
			r.found += int64(len(carried))
			var sums findings
			for _, s := range carried {
				sums.addAt(fmtr.assetOf(s), s)
			}
			r.countByAsset(&sums)
			r.LedgerConsistent = false
		}
		return err
	}
	var err, recordErr error
	d, own := idb.(*bun.DB)
	if own {
		// Recorded in the snapshot's own transaction, by the database
		// (ledger_record_check, migration 0033), which takes the boundary
		// from this snapshot and computes the sums itself. A check that
		// fails to record is still a check, but the caller hears of it,
		// since the next one would start earlier.
		err = d.RunInTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead},
			func(ctx context.Context, tx bun.Tx) error {
				if err := run(ctx, tx, true); err != nil {
					return err
				}
				r.Took = time.Since(start)
				recordErr = recordCheck(ctx, tx, &r)
				return recordErr
			})
		if recordErr != nil {
			r.Coverage.CheckID = nil
			return r, fmt.Errorf("ledger: check: %w", recordErr)
		}
	} else {
		err = run(ctx, idb, false)
		r.Took = time.Since(start)
	}
	if err != nil {
		return Report{}, fmt.Errorf("ledger: check: %w", err)
	}
	return r, nil
}

// snapshotBoundary reads the xmin of the transaction's snapshot and the
// largest posting id in it. Every transaction with an id below xmin had
// ended when the snapshot was taken, and every one that commits later has
// an id at or above it (checkpoint.go has the argument).
func snapshotBoundary(ctx context.Context, q db.Querier) (uint64, int64, error) {
	var xmin string
	var last int64
	if err := q.QueryRowContext(ctx, `SELECT pg_snapshot_xmin(pg_current_snapshot())::text,
       (SELECT coalesce(max(id), 0) FROM ledger_postings)`).Scan(&xmin, &last); err != nil {
		return 0, 0, fmt.Errorf("read the snapshot's boundary: %w", err)
	}
	to, err := strconv.ParseUint(xmin, 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("read the snapshot's boundary: %w", err)
	}
	return to, last, nil
}

// amounts formats amounts in their asset's display units.
type amounts map[string]int

func newAmounts(ctx context.Context, idb bun.IDB) (amounts, error) {
	all, err := (&asset.Store{DB: idb}).All(ctx)
	if err != nil {
		return nil, err
	}
	decimals := amounts{}
	for _, a := range all {
		decimals[a.Code] = a.Decimals
	}
	return decimals, nil
}

// assetOf is the asset a finding's text starts with ("BTC user_hold of
// ..."), "" when it starts with none.
func (a amounts) assetOf(s string) string {
	code, _, ok := strings.Cut(s, " ")
	if _, known := a[code]; ok && known {
		return code
	}
	return ""
}

func (a amounts) format(code string, units int64) string {
	if d, ok := a[code]; ok {
		return money.Format(units, d)
	}
	return strconv.FormatInt(units, 10) + " units"
}

// check is the full check of the ledger's rows, in q's snapshot.
func check(ctx context.Context, q db.Querier, amt amounts) (Report, error) {
	r := Report{Coverage: Coverage{Scope: ScopeFull}}
	var drifts, unbalanced, negative findings
	format := amt.format
	if err := q.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM ledger_accounts), (SELECT count(*) FROM ledger_entries),
       (SELECT count(*) FROM ledger_postings), (SELECT min(id) FROM ledger_entries), (SELECT max(id) FROM ledger_entries)`).
		Scan(&r.Accounts, &r.Entries, &r.Postings, &r.Coverage.FirstEntry, &r.Coverage.LastEntry); err != nil {
		return r, err
	}

	// Accounts: the materialized balance against the sum of the postings
	// and against the running balance of the newest posting (which the
	// next incremental check continues from), and any user account below
	// zero by either measure.
	rows, err := q.QueryContext(ctx, `
SELECT a.id, a.asset, a.kind, a.owner, a.balance, coalesce(s.total, 0), n.id, n.balance_after
  FROM ledger_accounts a
  LEFT JOIN (SELECT account_id, sum(amount) AS total FROM ledger_postings GROUP BY account_id) s ON s.account_id = a.id
  LEFT JOIN LATERAL (SELECT p.id, p.balance_after FROM ledger_postings p WHERE p.account_id = a.id
                      ORDER BY p.id DESC LIMIT 1) n ON a.balance IS NOT NULL
 WHERE (a.balance IS NOT NULL AND (a.balance <> coalesce(s.total, 0) OR a.balance < 0
                                   OR a.balance IS DISTINCT FROM CASE WHEN n.id IS NULL THEN 0 ELSE n.balance_after END))
    OR (a.balance IS NOT NULL AND coalesce(s.total, 0) < 0)
 ORDER BY a.id`)
	if err != nil {
		return r, err
	}
	for rows.Next() {
		var (
			id           int64
			code, owner  string
			kind         AccountKind
			materialized sql.NullInt64
			derived      int64
			newest       sql.NullInt64
			after        sql.NullInt64
		)
		if err := rows.Scan(&id, &code, &kind, &owner, &materialized, &derived, &newest, &after); err != nil {
			rows.Close()
			return r, err
		}
		name := fmt.Sprintf("%s %s of %q (account %d)", code, kind, owner, id)
		if !materialized.Valid {
			materialized.Int64 = derived // cannot happen for user kinds (CHECK)
		}
		if materialized.Int64 != derived {
			drifts.addAt(code, fmt.Sprintf("%s: materialized %s, postings sum %s", name, format(code, materialized.Int64), format(code, derived)))
		} else if s, ok := newestDrift(amt, code, materialized.Int64, newest, after); !ok {
			drifts.addAt(code, fmt.Sprintf("%s: materialized %s, postings sum %s, %s", name, format(code, materialized.Int64), format(code, derived), s))
		}
		if materialized.Int64 < 0 || derived < 0 {
			negative.addAt(code, fmt.Sprintf("%s: balance %s, postings sum %s", name, format(code, materialized.Int64), format(code, derived)))
		}
	}
	if err := closeRows(rows); err != nil {
		return r, err
	}

	// Entries: at least two postings summing to zero, and no posting of a
	// missing entry. One pass over the (entry_id) index.
	rows, err = q.QueryContext(ctx, `
SELECT coalesce(e.id, x.entry_id), e.id IS NOT NULL, coalesce(e.kind, ''), coalesce(e.asset, ''), coalesce(e.source_ref, ''),
       coalesce(x.n, 0), coalesce(x.total, 0)
  FROM ledger_entries e
  FULL JOIN (SELECT entry_id, count(*) AS n, sum(amount) AS total FROM ledger_postings GROUP BY entry_id) x
    ON x.entry_id = e.id
 WHERE e.id IS NULL OR x.entry_id IS NULL OR x.n < 2 OR x.total <> 0
 ORDER BY 1`)
	if err != nil {
		return r, err
	}
	if err := scanEntrySums(rows, amt, &unbalanced); err != nil {
		return r, err
	}

	// Postings on an account that does not exist or belongs to another
	// asset than their entry: the entry does not balance in its asset.
	// The same pass compares the postings' copies of their entry
	// (check_copies.go): a second join of every posting with its entry
	// took longer than this one. In posting id order: ordered by entry,
	// the planner took a serial merge join over the (entry_id) index for
	// the wider filter (1.2 s at a million postings, against 0.75 s for
	// the parallel hash join).
	rows, err = q.QueryContext(ctx, `
SELECT p.entry_id, e.kind, e.asset, e.source_ref, p.id, p.account_id, a.id IS NOT NULL, coalesce(a.asset, ''),
       a.id IS NULL OR a.asset <> e.asset, `+copyColumns+`
  FROM ledger_postings p
  JOIN ledger_entries e ON e.id = p.entry_id
  LEFT JOIN ledger_accounts a ON a.id = p.account_id
 WHERE a.id IS NULL OR a.asset <> e.asset OR `+copyDrifts+`
 ORDER BY p.id`)
	if err != nil {
		return r, err
	}
	if err := scanPostingFindings(rows, &unbalanced, &drifts); err != nil {
		return r, err
	}
	r.setFindings(&drifts, &unbalanced, &negative)
	return r, nil
}

// newestDrift says, when a materialized balance is not the running
// balance its newest posting left (0 with no posting), what that posting
// says; ok when they agree.
func newestDrift(amt amounts, code string, materialized int64, newest, after sql.NullInt64) (string, bool) {
	switch {
	case !newest.Valid && materialized == 0:
		return "", true
	case !newest.Valid:
		return "but it has no postings", false
	case !after.Valid:
		return fmt.Sprintf("its newest posting %d carries no running balance", newest.Int64), false
	case after.Int64 != materialized:
		return fmt.Sprintf("its newest posting %d left %s", newest.Int64, amt.format(code, after.Int64)), false
	}
	return "", true
}

// scanEntrySums lists the entries of rows (id, exists, kind, asset, ref,
// postings, sum) that do not balance, and closes rows.
func scanEntrySums(rows *sql.Rows, amt amounts, unbalanced *findings) error {
	for rows.Next() {
		var (
			id, n           int64
			total           string // numeric: a sum may exceed int64
			exists          bool
			kind, code, ref string
		)
		if err := rows.Scan(&id, &exists, &kind, &code, &ref, &n, &total); err != nil {
			rows.Close()
			return err
		}
		switch {
		case !exists:
			unbalanced.add(fmt.Sprintf("entry %d does not exist but has %d postings summing to %s units", id, n, total))
		case n == 0:
			unbalanced.addAt(code, fmt.Sprintf("entry %d (%s %s, %s) has no postings", id, kind, ref, code))
		default:
			unbalanced.addAt(code, fmt.Sprintf("entry %d (%s %s, %s): %d postings sum to %s", id, kind, ref, code, n, formatNumeric(amt.format, code, total)))
		}
	}
	return closeRows(rows)
}

// foreignPosting says what is wrong with a posting on a missing account
// or one of another asset than its entry.
func foreignPosting(entry int64, kind, code, ref string, posting, account int64, exists bool, other string) string {
	if !exists {
		return fmt.Sprintf("entry %d (%s %s, %s): posting %d is on account %d, which does not exist", entry, kind, ref, code, posting, account)
	}
	return fmt.Sprintf("entry %d (%s %s, %s): posting %d is on account %d of asset %s", entry, kind, ref, code, posting, account, other)
}

// setFindings fills the report's lists and consistency from the findings.
func (r *Report) setFindings(drifts, unbalanced, negative *findings) {
	r.MaterializedVsDerivedDrifts, r.UnbalancedEntries, r.NegativeBalances = drifts.strings(), unbalanced.strings(), negative.strings()
	r.found = drifts.count() + unbalanced.count() + negative.count()
	r.ByAsset = nil
	r.countByAsset(drifts)
	r.countByAsset(unbalanced)
	r.countByAsset(negative)
	r.LedgerConsistent = r.found == 0
}

func formatNumeric(format func(string, int64) string, code, total string) string {
	if v, err := strconv.ParseInt(total, 10, 64); err == nil {
		return format(code, v)
	}
	return total + " units"
}

// countByAsset adds f's findings to r.ByAsset.
func (r *Report) countByAsset(f *findings) {
	for code, n := range f.assets {
		if r.ByAsset == nil {
			r.ByAsset = map[string]int64{}
		}
		r.ByAsset[code] += n
	}
}

// findings collects up to maxFindings messages and counts the rest, and
// all of them by the asset they concern.
type findings struct {
	list   []string
	more   int
	assets map[string]int64
}

// add adds a finding whose asset cannot be told.
func (f *findings) add(s string) { f.addAt("", s) }

// addAt adds a finding of the asset code ("": cannot be told).
func (f *findings) addAt(code, s string) {
	if f.assets == nil {
		f.assets = map[string]int64{}
	}
	f.assets[code]++
	if len(f.list) < maxFindings {
		f.list = append(f.list, s)
		return
	}
	f.more++
}

// count is the number of findings, listed or not.
func (f *findings) count() int64 { return int64(len(f.list) + f.more) }

func (f *findings) strings() []string {
	out := append([]string{}, f.list...)
	if f.more > 0 {
		out = append(out, fmt.Sprintf("and %d more", f.more))
	}
	return out
}

type rowsCloser interface {
	Err() error
	Close() error
}

func closeRows(rows rowsCloser) error {
	if err := rows.Err(); err != nil {
		rows.Close()
		return err
	}
	return rows.Close()
}
