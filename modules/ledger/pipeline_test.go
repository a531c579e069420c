package ledger_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"svc/modules/ledger"
	"svc/platform/db"
)

// TestQueuePost: a posting pipelined with other statements (db.Pipeline)
// is strict. A hold that does not fit raises and takes every statement of
// the batch back with it, where Post would have reported it and let the
// transaction go on; a fact posted before fails instead of replaying.
func TestQueuePost(t *testing.T) {
	t.Parallel()
	d := newDB(t, 4)
	ctx := context.Background()
	credit(t, d, "BTC", "alice", 100, "pay-a")

	// send pipelines a credit to bob, then alice's hold.
	send := func(bobRef string, holdAmount int64, holdRef string) (ledger.Posted, error) {
		var b pgx.Batch
		bob, err := ledger.QueuePost(&b, ledger.Entry{Kind: ledger.DepositCredit, Asset: "BTC", SourceRef: bobRef, Lines: []ledger.Line{
			{Account: ledger.User(ledger.UserAvailable, "bob"), Amount: 7},
			{Account: ledger.System(ledger.Custody), Amount: -7},
		}})
		require.NoError(t, err)
		e, err := ledger.HoldEntry("BTC", ledger.UserHolder("alice"), holdAmount, holdRef, "")
		require.NoError(t, err)
		h, err := ledger.QueuePost(&b, e)
		require.NoError(t, err)
		var out ledger.Posted
		err = db.Pipeline(ctx, d, &b, func(br pgx.BatchResults) error {
			if _, err := bob.Read(br); err != nil {
				return err
			}
			out, err = h.Read(br)
			return err
		})
		return out, err
	}

	_, err := send("pay-b1", 101, "w-1")
	var ife *ledger.InsufficientFundsError
	require.ErrorAs(t, err, &ife)
	require.Equal(t, ledger.User(ledger.UserAvailable, "alice"), ife.Account)
	require.Equal(t, int64(101), ife.Amount)
	bobAvail, _ := balance(t, d, "BTC", "bob")
	require.Zero(t, bobAvail, "the credit before the refused hold is rolled back with it")
	require.Equal(t, int64(0), count(t, d, `SELECT count(*) FROM ledger_entries WHERE source_ref IN ('pay-b1', 'w-1')`))

	p, err := send("pay-b2", 60, "w-2")
	require.NoError(t, err)
	require.Equal(t, ledger.WithdrawalHold, p.Kind)
	require.Len(t, p.Postings, 2)
	require.Equal(t, int64(-60), p.Postings[0].Amount)
	avail, held := balance(t, d, "BTC", "alice")
	require.Equal(t, int64(40), avail)
	require.Equal(t, int64(60), held)
	bobAvail, _ = balance(t, d, "BTC", "bob")
	require.Equal(t, int64(7), bobAvail)

	_, err = send("pay-b3", 10, "w-2")
	require.ErrorIs(t, err, ledger.ErrConcurrentPost, "the same hold again is refused, not replayed")
	avail, held = balance(t, d, "BTC", "alice")
	require.Equal(t, int64(40), avail)
	require.Equal(t, int64(60), held)
	bobAvail, _ = balance(t, d, "BTC", "bob")
	require.Equal(t, int64(7), bobAvail, "nothing of the refused batch stays")
	requireInvariants(t, d)
}
