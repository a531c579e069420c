package hold_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"svc/modules/hold"
	"svc/modules/ledger"
	"svc/modules/withdrawal"
)

// TestEscrowCheckFindsAForgedHold: a hold row written open by the runtime
// role with no escrow posting behind it is what "escrow vs open holds"
// reports, and the ledger check is then inconsistent.
func TestEscrowCheckFindsAForgedHold(t *testing.T) {
	t.Parallel()
	e := setup(t, forged())
	ctx := context.Background()
	e.fund(t, "ivy", "BTC", 10_000)
	real := e.holdOf(t, user("ivy"), "BTC", 2_000)
	found, err := hold.CheckEscrow(ctx, e.App.DB.Bun)
	require.NoError(t, err)
	require.Empty(t, found, "clean before the forgery")

	forgedID := uuid.New()
	now := time.Now().UTC()
	_, err = e.App.DB.Bun.NewInsert().Model(&hold.Hold{ID: forgedID, Payer: "ivy", Asset: "BTC", Status: hold.StatusOpen,
		Amount: 5_000, ExpiresAt: now.Add(time.Hour), CreatedAt: now, UpdatedAt: now}).Exec(ctx)
	require.NoError(t, err, "the runtime role may insert a row")

	found, err = hold.CheckEscrow(ctx, e.App.DB.Bun)
	require.NoError(t, err)
	require.Equal(t, []string{
		`BTC user_escrow of "ivy" is 2000 units, but its open holds reserve 7000`,
		"BTC hold " + forgedID.String() + " (open): 0 hold entries (amount right: false), 0 captures, 0 releases",
	}, found)
	for _, f := range found {
		require.True(t, hold.IsEscrowFinding(f), f)
	}
	rep, err := ledger.Check(ctx, e.App.DB.Bun, withdrawal.CheckHolds, hold.CheckEscrow)
	require.NoError(t, err)
	require.False(t, rep.LedgerConsistent)
	require.Equal(t, found, rep.HoldMismatches)
	require.Equal(t, hold.StatusOpen, e.get(t, real.HoldID).Status)

	// The reconciliation runs the same check: BTC is inconsistent by both
	// findings.
	recon, err := e.App.Reconcile.RunFull(ctx, "on_demand")
	require.NoError(t, err)
	require.False(t, recon.LedgerConsistent)
	var btc bool
	for _, l := range recon.Custody {
		if l.Asset == "BTC" {
			btc = true
			require.True(t, l.Inconsistent)
			require.Equal(t, int64(2), l.LedgerFindings)
		}
	}
	require.True(t, btc, "a BTC custody line: %+v", recon.Custody)
}

// TestRuntimeRoleCannotRewriteAHold: the database refuses, even to the
// service's own role, what would let a hold disagree with its entries:
// changing its amount, payer or asset, moving it back to open or from one
// end to another, deleting it, changing or deleting a capture, recording a
// capture of an open hold or beyond what was captured.
func TestRuntimeRoleCannotRewriteAHold(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	e.fund(t, "jay", "BTC", 10_000)
	open := e.holdOf(t, user("jay"), "BTC", 1_000)
	done := e.holdOf(t, user("jay"), "BTC", 2_000)
	view(t, e.capture(done.HoldID, leg{To: user("kim"), Amount: "1500"}), 200)
	d := e.App.DB.Bun
	for name, stmt := range map[string]string{
		"amount":            "UPDATE holds SET amount = amount + 1 WHERE id = '" + open.HoldID + "'",
		"payer":             "UPDATE holds SET payer = 'mallory' WHERE id = '" + open.HoldID + "'",
		"asset":             "UPDATE holds SET asset = 'BTC_LN' WHERE id = '" + open.HoldID + "'",
		"expiry":            "UPDATE holds SET expires_at = expires_at + interval '1 day' WHERE id = '" + open.HoldID + "'",
		"open again":        "UPDATE holds SET status = 'open', captured_amount = 0, released_amount = 0 WHERE id = '" + done.HoldID + "'",
		"captured to void":  "UPDATE holds SET status = 'voided', captured_amount = 0, released_amount = amount WHERE id = '" + done.HoldID + "'",
		"captured amounts":  "UPDATE holds SET captured_amount = 2000, released_amount = 0 WHERE id = '" + done.HoldID + "'",
		"open to open":      "UPDATE holds SET updated_at = now() WHERE id = '" + open.HoldID + "'",
		"delete":            "DELETE FROM holds WHERE id = '" + open.HoldID + "'",
		"capture change":    "UPDATE hold_captures SET amount = 1 WHERE hold_id = '" + done.HoldID + "'",
		"capture delete":    "DELETE FROM hold_captures WHERE hold_id = '" + done.HoldID + "'",
		"capture of open":   "INSERT INTO hold_captures (hold_id, seq, to_platform, to_id, amount) VALUES ('" + open.HoldID + "', 1, false, 'kim', 1)",
		"capture beyond":    "INSERT INTO hold_captures (hold_id, seq, to_platform, to_id, amount) VALUES ('" + done.HoldID + "', 2, false, 'lee', 1)",
		"amounts when open": "UPDATE holds SET status = 'voided', released_amount = 1 WHERE id = '" + open.HoldID + "'",
		"born captured": `INSERT INTO holds (id, payer_platform, payer, asset, amount, status, captured_amount, released_amount, expires_at, created_at, updated_at)
VALUES (gen_random_uuid(), false, 'ann', 'BTC', 1000, 'captured', 1000, 0, now() + interval '1 day', now(), now())`,
	} {
		_, err := d.ExecContext(ctx, stmt)
		require.Error(t, err, name)
		if name == "born captured" {
			require.ErrorContains(t, err, "a hold is created open", "refused by holds_born_open, not by a missing column")
		}
	}
	require.Equal(t, hold.StatusOpen, e.get(t, open.HoldID).Status)
	require.Equal(t, "0.00001500", e.get(t, done.HoldID).CapturedAmount)
}

// TestEscrowCheckFindsForgedEscrowEntries: the runtime role posts escrow
// entries that keep every escrow balance equal to the open holds (a hold
// and its capture under a reference no hold has; a real hold's capture
// paid to an account its captures do not name): the check compares each
// escrow entry's lines with its hold and finds both.
func TestEscrowCheckFindsForgedEscrowEntries(t *testing.T) {
	t.Parallel()
	e := setup(t, forged())
	ctx := context.Background()
	e.fund(t, "bob", "BTC", 10_000)
	h := e.holdOf(t, user("bob"), "BTC", 1_000)
	found, err := hold.CheckEscrow(ctx, e.App.DB.Bun)
	require.NoError(t, err)
	require.Empty(t, found, "clean before the forgery")

	// (a) A hold and its capture to mallory under a reference of no hold.
	bob, mallory := ledger.UserHolder("bob"), ledger.UserHolder("mallory")
	ghost := uuid.NewString()
	_, err = ledger.PostEscrowHold(ctx, e.App.DB.Bun, "BTC", bob, 500, ghost, "")
	require.NoError(t, err)
	_, err = ledger.PostEscrowCapture(ctx, e.App.DB.Bun, "BTC", bob, []ledger.CaptureLeg{{To: mallory, Amount: 500}}, ghost, "")
	require.NoError(t, err)
	// (b) The real hold's capture paid to mallory, its rest released.
	_, err = ledger.PostEscrowCapture(ctx, e.App.DB.Bun, "BTC", bob, []ledger.CaptureLeg{{To: mallory, Amount: 900}}, h.HoldID, "")
	require.NoError(t, err)
	_, err = ledger.PostEscrowRelease(ctx, e.App.DB.Bun, "BTC", bob, 100, h.HoldID, "")
	require.NoError(t, err)

	found, err = hold.CheckEscrow(ctx, e.App.DB.Bun)
	require.NoError(t, err)
	all := strings.Join(found, "\n")
	require.Contains(t, all, "BTC hold "+ghost+" does not exist, but an escrow_hold entry under its reference posts user_available(bob)-500 user_escrow(bob)500")
	require.Contains(t, all, "BTC hold "+ghost+" does not exist, but an escrow_capture entry under its reference posts user_available(mallory)500 user_escrow(bob)-500")
	require.Contains(t, all, "BTC hold "+h.HoldID+": its escrow_capture entry posts user_available(mallory)900 user_escrow(bob)-900, not user_escrow(bob)0")
	for _, f := range found {
		require.True(t, hold.IsEscrowFinding(f), f)
	}
}
