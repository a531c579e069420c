package main

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"svc/modules/hold"
	"svc/modules/ledger"
)

// TestAdminLedgerCheckPrintsEscrow: svc admin ledger check prints "escrow
// vs open holds", clean after a hold and its capture, and names a hold row
// that no escrow posting explains.
func TestAdminLedgerCheckPrintsEscrow(t *testing.T) {
	d := migratedDB(t)
	ctx := context.Background()
	creditAlice(t, d, 10_000, 1)
	s := &hold.Service{DB: d.Bun, Now: time.Now}
	v, _, err := s.Create(ctx, hold.CreateParams{From: ledger.UserHolder("alice"), Asset: "BTC", Amount: 4_000}, nil)
	require.NoError(t, err)
	_, _, err = s.Create(ctx, hold.CreateParams{From: ledger.UserHolder("alice"), Asset: "BTC", Amount: 1_000}, nil)
	require.NoError(t, err)
	id, err := uuid.Parse(v.HoldID)
	require.NoError(t, err)
	_, _, err = s.Capture(ctx, id, []hold.CaptureLeg{{To: ledger.PlatformHolder("commission"), Amount: 3_000}}, nil)
	require.NoError(t, err)

	out, err := run(t, "admin", "ledger", "check")
	require.NoError(t, err, out)
	require.Contains(t, out, "holds vs open withdrawals: 0")
	require.Contains(t, out, "escrow vs open holds: 0")

	now := time.Now().UTC()
	_, err = d.Bun.NewInsert().Model(&hold.Hold{ID: uuid.New(), Payer: "alice", Asset: "BTC", Status: hold.StatusOpen,
		Amount: 500, ExpiresAt: now.Add(time.Hour), CreatedAt: now, UpdatedAt: now}).Exec(ctx)
	require.NoError(t, err)
	out, err = run(t, "admin", "ledger", "check")
	require.ErrorIs(t, err, errLedgerInconsistent)
	require.Contains(t, out, "holds vs open withdrawals: 0")
	require.Contains(t, out, "escrow vs open holds: 2")
	require.Contains(t, out, `BTC user_escrow of "alice" is 1000 units, but its open holds reserve 1500`)
}
