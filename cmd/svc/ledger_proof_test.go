package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"svc/modules/ledger"
	"svc/modules/liabilities"
	"svc/modules/reconcile"
	"svc/platform/db"
	"svc/platform/sumtree"
)

// TestAdminLiabilitiesAndVerifyProof: a snapshot from the command line, the
// published roots, then a user's proof checked by svc ledger verify-proof
// with no database at all; a changed proof, or one against another root,
// fails.
func TestAdminLiabilitiesAndVerifyProof(t *testing.T) {
	d := migratedDB(t)
	ctx := context.Background()
	for i, user := range []string{"alice", "bob", "carol"} {
		require.NoError(t, db.RunInTx(ctx, d.Bun, func(ctx context.Context, tx bun.Tx) error {
			_, err := ledger.CreditDeposit(ctx, tx, "BTC", ledger.UserHolder(user), int64(1000*(i+1)), "dep-"+user, "")
			return err
		}))
	}

	out, err := run(t, "admin", "liabilities")
	require.NoError(t, err, out)
	require.Contains(t, out, "no proof of liabilities yet")

	out, err = run(t, "admin", "liabilities", "snapshot", "--json")
	require.NoError(t, err, out)
	var list liabilities.PublishedList
	require.NoError(t, json.Unmarshal([]byte(out), &list))
	var btc liabilities.PublishedView
	for _, v := range list.Snapshots {
		if v.Asset == "BTC" {
			btc = v
		}
	}
	require.Equal(t, "6000", btc.TotalUnits)
	require.Equal(t, "0.00006000", btc.Total)
	require.EqualValues(t, 3, btc.Users)
	var by string
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT requested_by FROM liabilities_snapshots WHERE id = $1`, btc.SnapshotID).Scan(&by))
	me, err := loginActor()
	require.NoError(t, err)
	require.Equal(t, me.ID, by, "the login name, without --key")

	out, err = run(t, "admin", "liabilities")
	require.NoError(t, err, out)
	require.Contains(t, out, btc.Root)
	require.Contains(t, out, "on_demand")

	// The reconciliation report shows the root and the total beside what
	// the ledger owes its users, and they agree.
	out, err = run(t, "admin", "reconciliation", "--json")
	require.NoError(t, err, out)
	var rep reconcile.Report
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	for _, l := range rep.Custody {
		if l.Asset == "BTC" {
			require.Equal(t, btc.Root, *l.LiabilitiesRoot)
			require.Equal(t, l.UserObligations, *l.LiabilitiesTotal)
		}
	}
	out, err = run(t, "admin", "reconciliation")
	require.NoError(t, err, out)
	require.Contains(t, out, "LIABILITIES ROOT")
	require.Contains(t, out, btc.Root)

	proof, err := (&liabilities.Service{Pool: d.Pool}).Proof(ctx, "BTC", "bob")
	require.NoError(t, err)
	data, err := json.MarshalIndent(proof, "", "  ")
	require.NoError(t, err)
	dir := t.TempDir()
	file := filepath.Join(dir, "proof.json")
	require.NoError(t, os.WriteFile(file, data, 0o600))

	// No database from here on.
	t.Setenv("DATABASE_URL", "")
	t.Setenv("MIGRATE_DATABASE_URL", "")
	out, err = run(t, "ledger", "verify-proof", file, "--root", btc.Root, "--total", "6000", "--balance", "2000")
	require.NoError(t, err, out)
	require.Contains(t, out, "ok: 2000 of bob")

	// Without the published root and total, the verdict says so.
	out, err = run(t, "ledger", "verify-proof", file, "--balance", "2000")
	require.NoError(t, err, out)
	require.Contains(t, out, "NOT checked against a published root")
	require.NotContains(t, out, "ok:")

	_, err = run(t, "ledger", "verify-proof", file, "--balance", "2001")
	require.ErrorContains(t, err, "--balance")
	_, err = run(t, "ledger", "verify-proof", file, "--total", "5999")
	require.ErrorContains(t, err, "--total")
	_, err = run(t, "ledger", "verify-proof", file, "--root", strings.Repeat("0", 64))
	require.ErrorContains(t, err, "not the published")

	bad := strings.Replace(string(data), `"balance": "2000"`, `"balance": "2001"`, 1)
	require.NotEqual(t, string(data), bad)
	badFile := filepath.Join(dir, "bad.json")
	require.NoError(t, os.WriteFile(badFile, []byte(bad), 0o600))
	_, err = run(t, "ledger", "verify-proof", badFile)
	require.ErrorContains(t, err, "leaf.hash")

	// A sibling's sum made negative: refused as such.
	var p sumtree.Proof
	require.NoError(t, json.Unmarshal(data, &p))
	require.NotEmpty(t, p.Path)
	p.Path[0].Sum = "-" + p.Path[0].Sum
	neg, err := json.Marshal(p)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(badFile, neg, 0o600))
	_, err = run(t, "ledger", "verify-proof", badFile)
	require.ErrorContains(t, err, "negative")
}

// TestVerifyProofOfALoneLeaf: a "tree" of one user, made for that user
// alone, proves nothing: its root is the user's own leaf. verify-proof
// refuses it unless --root and --total show that the published tree is
// that one leaf; and any proof checked without them says that it was NOT
// checked against a published root.
func TestVerifyProofOfALoneLeaf(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	t.Setenv("MIGRATE_DATABASE_URL", "")
	var salt [sumtree.SaltSize]byte
	salt[0] = 7
	id, err := sumtree.IDHash(salt, "BTC", "dora")
	require.NoError(t, err)
	leaf, err := sumtree.Leaf(id, 5000)
	require.NoError(t, err)
	data, err := json.Marshal(sumtree.NewProof("BTC", 1, "2026-01-01T00:00:00Z", "dora", salt, id, leaf, nil, leaf))
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "alone.json")
	require.NoError(t, os.WriteFile(file, data, 0o600))

	out, err := run(t, "ledger", "verify-proof", file)
	require.ErrorContains(t, err, "not shown to be included", out)
	_, err = run(t, "ledger", "verify-proof", file, "--balance", "5000")
	require.ErrorContains(t, err, "a tree of this user alone")
	_, err = run(t, "ledger", "verify-proof", file, "--root", sumtree.HexOf(leaf.Hash))
	require.ErrorContains(t, err, "not shown to be included", "a root alone is not both")
	_, err = run(t, "ledger", "verify-proof", file, "--root", strings.Repeat("ab", 32), "--total", "5000")
	require.ErrorContains(t, err, "not the published")

	// Published, it is the whole tree: included.
	out, err = run(t, "ledger", "verify-proof", file, "--root", sumtree.HexOf(leaf.Hash), "--total", "5000")
	require.NoError(t, err, out)
	require.Contains(t, out, "ok: 5000 of dora")
}

// TestVerifyProofOfAPlatformAccount: a platform account's proof (its leaf
// beside the users', credited here by a transfer and holding an escrow
// hold) is checked by svc ledger verify-proof as a user's is, from the
// document that names it; the same leaf passed off as the user of that
// name, or as another platform account, does not verify.
func TestVerifyProofOfAPlatformAccount(t *testing.T) {
	d := migratedDB(t)
	ctx := context.Background()
	revenue := ledger.PlatformHolder("revenue")
	require.NoError(t, db.RunInTx(ctx, d.Bun, func(ctx context.Context, tx bun.Tx) error {
		for _, c := range []struct {
			to     ledger.Holder
			amount int64
		}{{ledger.UserHolder("alice"), 3000}, {ledger.UserHolder("revenue"), 100}, {revenue, 500}} {
			if _, err := ledger.CreditDeposit(ctx, tx, "BTC", c.to, c.amount, "dep-"+c.to.String(), ""); err != nil {
				return err
			}
		}
		if _, err := ledger.PostTransferLeg(ctx, tx, "BTC", ledger.UserHolder("alice"), revenue, 700, "tr-1:0", ""); err != nil {
			return err
		}
		_, err := ledger.PostEscrowHold(ctx, tx, "BTC", revenue, 200, "hold-1", "")
		return err
	}))
	out, err := run(t, "admin", "liabilities", "snapshot", "--json")
	require.NoError(t, err, out)
	var list liabilities.PublishedList
	require.NoError(t, json.Unmarshal([]byte(out), &list))
	var btc liabilities.PublishedView
	for _, v := range list.Snapshots {
		if v.Asset == "BTC" {
			btc = v
		}
	}
	require.Equal(t, "3600", btc.TotalUnits)
	require.EqualValues(t, 2, btc.Users)
	require.EqualValues(t, 1, btc.PlatformAccounts)

	proof, err := (&liabilities.Service{Pool: d.Pool}).PlatformProof(ctx, "BTC", "revenue")
	require.NoError(t, err)
	data, err := json.MarshalIndent(proof, "", "  ")
	require.NoError(t, err)
	dir := t.TempDir()
	file := filepath.Join(dir, "revenue.json")
	require.NoError(t, os.WriteFile(file, data, 0o600))

	t.Setenv("DATABASE_URL", "")
	t.Setenv("MIGRATE_DATABASE_URL", "")
	out, err = run(t, "ledger", "verify-proof", file, "--root", btc.Root, "--total", "3600", "--balance", "1200")
	require.NoError(t, err, out)
	require.Contains(t, out, "ok: 1200 of platform account revenue")
	out, err = run(t, "ledger", "verify-proof", file)
	require.NoError(t, err, out)
	require.Contains(t, out, "NOT checked against a published root: 1200 of platform account revenue")

	for name, text := range map[string]string{
		"as the user of that name": strings.Replace(string(data), `"platform_account"`, `"external_user_id"`, 1),
		"as another account":       strings.Replace(string(data), `"platform_account": "revenue"`, `"platform_account": "revenue2"`, 1),
		"naming both":              strings.Replace(string(data), `"platform_account": "revenue",`, `"platform_account": "revenue", "external_user_id": "revenue",`, 1),
	} {
		require.NotEqual(t, string(data), text, name)
		bad := filepath.Join(dir, "bad.json")
		require.NoError(t, os.WriteFile(bad, []byte(text), 0o600))
		_, err := run(t, "ledger", "verify-proof", bad, "--root", btc.Root, "--total", "3600")
		require.Error(t, err, name)
	}
}
