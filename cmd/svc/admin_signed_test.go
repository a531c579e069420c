package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"svc/modules/audit"
	"svc/modules/event"
	"svc/modules/operator"
	"svc/modules/operator/operatortest"
	"svc/platform/db"
)

// operatorKeys enrolls members in d's enrollment chain (operatortest.Team:
// the first an admin) and writes each one's key to a file of its own
// (mode 0600), returning the files by name.
func operatorKeys(t *testing.T, d *db.DB, members ...operatortest.Member) map[string]string {
	t.Helper()
	dir := t.TempDir()
	out := map[string]string{}
	for name, s := range operatortest.Team(t, d.Bun, time.Now, members...) {
		path := filepath.Join(dir, name+".key")
		require.NoError(t, s.WriteFile(path))
		out[name] = path
	}
	return out
}

// auditRows lists the audit trail's actor and target of action, newest
// first.
func auditRows(t *testing.T, d *db.DB, action string) [][2]string {
	t.Helper()
	entries, _, err := audit.List(context.Background(), d.Bun, audit.ListParams{Action: action})
	require.NoError(t, err)
	out := [][2]string{}
	for _, e := range entries {
		out = append(out, [2]string{e.Actor, e.Target})
	}
	return out
}

// TestAdminSignedCommands: the commands that act on money, limits and keys
// always sign, with --key or $SVC_OPERATOR_KEY: without one they say so
// and do nothing; an operator whose role does not allow the action is
// refused (a viewer redelivering, an approver minting a key or setting
// limits); signed, the audit trail names op:NAME, with
// OPERATOR_SIGNATURES=required too.
func TestAdminSignedCommands(t *testing.T) {
	d := adminDB(t)
	ctx := context.Background()
	t.Setenv(KeyEnv, "")
	t.Setenv("OPERATOR_SIGNATURES", "required")
	keys := operatorKeys(t, d, operatortest.Member{Name: "ada", Role: operator.Admin},
		operatortest.Member{Name: "bob", Role: operator.Approver}, operatortest.Member{Name: "val", Role: operator.Viewer})
	evID := uuid.New()
	_, err := d.Pool.Exec(ctx, `INSERT INTO outbound_events (id, type, status, attempts, next_attempt_at, payload, created_at, dead_at)
		VALUES ($1, 'deposit.expired', 'dead', 10, now(), '{}', now(), now())`, evID)
	require.NoError(t, err)
	dep := uuid.NewString()

	for _, args := range [][]string{
		{"admin", "keys", "mint", "--scope", "admin", "--label", "ops"},
		{"admin", "keys", "revoke", "key_x"},
		{"admin", "assets", "set", "BTC", "--withdrawal-min", "1"},
		{"admin", "events", "redeliver", event.PublicID(evID)},
		{"admin", "deposits", "resolve", dep, "--action", "dismiss"},
		{"admin", "deposits", "credit-after-dismissal", dep, "--payment-id", "p", "--reason", "a reason of some length"},
		{"admin", "ledger", "correct", "--asset", "BTC", "--memo", "m", "--debit", "custody=1", "--credit", "fee_income=1", "--yes"},
		{"admin", "ledger", "transfer", "--from", "BTC", "--to", "BTC_LN", "--amount", "1", "--ref", "tx", "--memo", "m", "--yes"},
	} {
		_, err := run(t, args...)
		require.ErrorContains(t, err, "--key FILE (or SVC_OPERATOR_KEY) is required: this action is signed with the operator's key", "%v", args)
	}
	require.Empty(t, auditRows(t, d, audit.KeyMint))

	// A key file others may read is refused.
	loose := filepath.Join(t.TempDir(), "loose.key")
	b, err := os.ReadFile(keys["ada"])
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(loose, b, 0o644))
	_, err = run(t, "admin", "keys", "mint", "--scope", "admin", "--label", "ops", "--key", loose)
	require.ErrorContains(t, err, "chmod 600")

	_, err = run(t, "admin", "keys", "mint", "--scope", "admin", "--label", "ops", "--key", keys["bob"])
	require.ErrorContains(t, err, "operator bob is approver; apikey.mint needs admin")
	_, err = run(t, "admin", "assets", "set", "BTC", "--withdrawal-min", "1", "--key", keys["bob"])
	require.ErrorContains(t, err, "operator bob is approver; asset.set_limits needs admin")
	_, err = run(t, "admin", "events", "redeliver", event.PublicID(evID), "--key", keys["val"])
	require.ErrorContains(t, err, "operator val is viewer; event.redeliver needs approver")
	require.Empty(t, auditRows(t, d, audit.KeyMint))
	require.Empty(t, auditRows(t, d, audit.AssetSetLimits))
	require.Empty(t, auditRows(t, d, audit.EventRedeliver))

	// $SVC_OPERATOR_KEY names the key when --key does not.
	t.Setenv(KeyEnv, keys["ada"])
	out, err := run(t, "admin", "keys", "mint", "--scope", "admin", "--label", "ops", "--expires-in", "720h")
	require.NoError(t, err, out)
	require.Contains(t, out, "by op:ada")
	out, err = run(t, "admin", "assets", "set", "BTC", "--withdrawal-min", "20000", "--four-eyes-threshold", "off")
	require.NoError(t, err, out)
	require.Equal(t, [][2]string{{"op:ada", "BTC"}}, auditRows(t, d, audit.AssetSetLimits))
	out, err = run(t, "admin", "events", "redeliver", event.PublicID(evID), "--key", keys["bob"])
	require.NoError(t, err, out)
	require.Equal(t, [][2]string{{"op:bob", event.PublicID(evID)}}, auditRows(t, d, audit.EventRedeliver))
	minted := auditRows(t, d, audit.KeyMint)
	require.Len(t, minted, 1)
	require.Equal(t, "op:ada", minted[0][0])
	out, err = run(t, "admin", "keys", "revoke", minted[0][1])
	require.NoError(t, err, out)
	require.Contains(t, out, "by op:ada")
	require.Equal(t, [][2]string{{"op:ada", minted[0][1]}}, auditRows(t, d, audit.KeyRevoke))
}

// TestAdminSignedDeposits: svc admin deposits resolve and
// credit-after-dismissal sign what they read (the deposit, its asset and
// holder, the payment and its amount, the reason): an approver's key
// resolves and credits, as op:NAME in resolved_by and the audit trail; a
// viewer's is refused.
func TestAdminSignedDeposits(t *testing.T) {
	d := adminDB(t)
	ctx := context.Background()
	t.Setenv(KeyEnv, "")
	keys := operatorKeys(t, d, operatortest.Member{Name: "ada", Role: operator.Admin},
		operatortest.Member{Name: "bob", Role: operator.Approver}, operatortest.Member{Name: "val", Role: operator.Viewer})
	deposit := func(status string) string {
		id := uuid.NewString()
		_, err := d.Pool.Exec(ctx, `INSERT INTO deposits (id, external_user_id, asset, status, invoice_id, review_reason, review_at, created_at, updated_at)
			VALUES ($1, 'alice', 'BTC', $2, $3, 'a test', now(), now(), now())`, id, status, "inv-"+id)
		require.NoError(t, err)
		return id
	}

	review := deposit("review")
	_, err := run(t, "admin", "deposits", "resolve", review, "--action", "dismiss", "--key", keys["val"])
	require.ErrorContains(t, err, "operator val is viewer; deposit.resolve needs approver")
	out, err := run(t, "admin", "deposits", "resolve", review, "--action", "dismiss", "--key", keys["bob"])
	require.NoError(t, err, out)
	require.Contains(t, out, "is dismissed: credited 0.00000000 BTC by this resolution")
	require.Contains(t, out, "(resolved by op:bob)")
	require.Equal(t, [][2]string{{"op:bob", review}}, auditRows(t, d, audit.DepositResolve))

	// A payment settled after its deposit was dismissed.
	dismissed := deposit("dismissed")
	_, err = d.Pool.Exec(ctx, `INSERT INTO deposit_payments (deposit_id, payment_id, amount, units, processor_status, received_at, after_expiration, created_at, updated_at)
		VALUES ($1, 'late-1', '0.0003', 30000, 'Settled', now(), false, now(), now())`, dismissed)
	require.NoError(t, err)
	credit := []string{"admin", "deposits", "credit-after-dismissal", dismissed, "--payment-id", "late-1", "--reason", "the payer confirmed the top-up"}
	_, err = run(t, append(credit, "--key", keys["val"])...)
	require.ErrorContains(t, err, "operator val is viewer; deposit.credit_after_dismissal needs approver")
	_, err = run(t, "admin", "deposits", "credit-after-dismissal", dismissed, "--payment-id", "nope", "--reason", "the payer confirmed the top-up", "--key", keys["bob"])
	require.ErrorContains(t, err, "has no payment nope")
	out, err = run(t, append(credit, "--key", keys["bob"])...)
	require.NoError(t, err, out)
	require.Contains(t, out, "payment late-1 of deposit "+dismissed+" credited: 0.00030000 (resolved by op:bob)")
	require.Equal(t, [][2]string{{"op:bob", dismissed}}, auditRows(t, d, audit.DepositCreditDismissed))
	_, err = run(t, append(credit, "--key", keys["bob"])...)
	require.ErrorContains(t, err, "credited already")

	out, err = run(t, "admin", "ledger", "check")
	require.NoError(t, err, out)
}
