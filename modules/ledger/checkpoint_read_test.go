package ledger

import (
	"bytes"
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"svc/platform/db"
	"svc/platform/dbtest"
)

// TestRangeEncodingIsSealedEncoding: the encoding the checkpoint writes
// straight from the server's binary values is, byte for byte, the
// documented one (SealedEntry.Encode) of the same entry, for a NULL, an
// empty and a non-ASCII memo, a posting without a balance, one whose
// account is gone, and an entry without postings; and a NULL memo stays
// absent where an empty one is present.
func TestRangeEncodingIsSealedEncoding(t *testing.T) {
	t.Parallel()
	u := dbtest.NewURL(t)
	ctx := context.Background()
	dbtest.ExecBehindTriggers(t, u, `INSERT INTO ledger_accounts (asset, kind, owner, balance) VALUES ('BTC', 'user_available', 'zoë', 0)`)
	dbtest.ExecBehindTriggers(t, u, `INSERT INTO ledger_entries (kind, asset, source_ref, memo, created_at)
VALUES ('correction', 'BTC', 'm-null', NULL, '2026-01-31 12:00:00.123456+00'), ('correction', 'BTC', 'm-empty', '', '1969-12-31 23:59:59.999999+00'),
       ('correction', 'BTC', 'm-text', 'réglé ✓', now()), ('correction', 'BTC', 'no-postings', 'x', now())`)
	dbtest.ExecBehindTriggers(t, u, `INSERT INTO ledger_postings (entry_id, account_id, amount, balance_after)
SELECT e.id, a.id, v.amount, v.after FROM ledger_entries e, ledger_accounts a,
       (VALUES (-9223372036854775807, NULL::bigint), (42, 42)) v (amount, after)
 WHERE e.source_ref <> 'no-postings' AND a.owner IN ('zoë', '') AND a.kind IN ('user_available', 'custody') AND a.asset = 'BTC'`)
	dbtest.ExecBehindTriggers(t, u, `INSERT INTO ledger_postings (entry_id, account_id, amount) SELECT id, 987654321, 7 FROM ledger_entries WHERE source_ref = 'm-text'`)
	d, err := db.Open(ctx, u, 2)
	require.NoError(t, err)
	defer d.Close()
	nulls := map[string]bool{}
	rows, err := d.Pool.Query(ctx, `SELECT source_ref, memo IS NULL FROM ledger_entries`)
	require.NoError(t, err)
	var ref string
	var isNull bool
	_, err = pgx.ForEachRow(rows, []any{&ref, &isNull}, func() error { nulls[ref] = isNull; return nil })
	require.NoError(t, err)

	seen := 0
	require.NoError(t, readOnly(ctx, d.Bun, func(tx pgx.Tx) error {
		return readRange(ctx, tx, 0, 1<<62, func(e *rangeEntry) error {
			s := e.sealed()
			require.Equal(t, nulls[s.SourceRef], s.Memo == nil, s.SourceRef)
			require.True(t, bytes.Equal(s.Encode(), e.appendEncoding(nil)), "entry %s: %x vs %x", s.SourceRef, s.Encode(), e.appendEncoding(nil))
			switch s.SourceRef {
			case "no-postings":
				require.Empty(t, s.Postings)
			case "m-text":
				require.Len(t, s.Postings, 5)
				require.Equal(t, "réglé ✓", *s.Memo)
			default:
				require.Len(t, s.Postings, 4)
			}
			seen++
			return nil
		})
	}))
	require.Equal(t, 4, seen)
}
