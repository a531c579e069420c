package liabilities_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"svc/cmd/svc/app/apptest"
	"svc/modules/asset"
	"svc/modules/ledger"
	"svc/modules/liabilities"
	"svc/platform/db"
	"svc/platform/sumtree"
)

func platformProofPath(name, code string) string {
	return "/v1/platform-accounts/" + url.PathEscape(name) + "/liabilities-proof?asset=" + url.QueryEscape(code)
}

func inTx(t *testing.T, d *bun.DB, fn func(ctx context.Context, tx bun.Tx) error) {
	t.Helper()
	require.NoError(t, db.RunInTx(context.Background(), d, fn))
}

// TestPlatformAccountsAreLeaves: users with money available, held (an
// open withdrawal) and reserved (an escrow hold), and two platform
// accounts (one credited by a transfer and a deposit, with a withdrawal
// hold; one with an escrow hold of its own). The snapshot succeeds (the
// database sums every owned balance), its total is the ledger's
// Obligations(), each user's proof shows their whole balance, each
// platform account's proof (GET
// /v1/platform-accounts/{platform_account}/liabilities-proof) verifies
// with its own, and a user named like a platform account is another leaf.
func TestPlatformAccountsAreLeaves(t *testing.T) {
	t.Parallel()
	e := apptest.New(t)
	d := e.App.DB.Bun
	ctx := context.Background()
	const code = asset.BTC
	revenue, pool := ledger.PlatformHolder("revenue"), ledger.PlatformHolder("prize.pool")
	inTx(t, d, func(ctx context.Context, tx bun.Tx) error {
		for _, c := range []struct {
			to     ledger.Holder
			amount int64
		}{{ledger.UserHolder("alice"), 10_000}, {ledger.UserHolder("bob"), 4_000}, {ledger.UserHolder("revenue"), 250},
			{revenue, 500}, {pool, 7_000}} {
			if _, err := ledger.CreditDeposit(ctx, tx, code, c.to, c.amount, "dep-"+c.to.String(), ""); err != nil {
				return err
			}
		}
		if _, err := ledger.PlaceHold(ctx, tx, code, ledger.UserHolder("alice"), 2_000, "w-alice", ""); err != nil {
			return err
		}
		if _, err := ledger.PostEscrowHold(ctx, tx, code, ledger.UserHolder("alice"), 3_000, "hold-alice", ""); err != nil {
			return err
		}
		if _, err := ledger.PostTransferLeg(ctx, tx, code, ledger.UserHolder("bob"), revenue, 1_000, "tr-1:0", ""); err != nil {
			return err
		}
		if _, err := ledger.PlaceHold(ctx, tx, code, revenue, 200, "w-revenue", ""); err != nil {
			return err
		}
		_, err := ledger.PostEscrowHold(ctx, tx, code, pool, 2_000, "hold-pool", "")
		return err
	})
	users := map[string]int64{"alice": 10_000, "bob": 3_000, "revenue": 250}
	platforms := map[string]int64{"revenue": 1_500, "prize.pool": 7_000}

	pub, err := e.App.Liabilities.Snapshot(ctx, liabilities.TriggerOnDemand, "")
	require.NoError(t, err, "the snapshot's total is every owned balance, as the database requires")
	var btc liabilities.Published
	for _, p := range pub {
		if p.Asset == code {
			btc = p
		}
	}
	totals, err := ledger.AssetTotals(ctx, d)
	require.NoError(t, err)
	var owed ledger.Totals
	for _, lt := range totals {
		if lt.Asset == code {
			owed = lt
		}
	}
	require.EqualValues(t, 21_750, owed.Obligations())
	require.Equal(t, owed.Obligations(), btc.Total, "the tree's total is the ledger's obligations")
	require.EqualValues(t, 3, btc.Users, "users counts the users alone")
	require.EqualValues(t, 2, btc.PlatformAccounts)
	at, err := e.App.Liabilities.ObligationsAt(ctx, []int64{btc.ID})
	require.NoError(t, err)
	require.Equal(t, btc.Total, at[btc.ID], "ObligationsAt counts what the snapshot counts")

	r := e.AdminGet("/v1/admin/liabilities")
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var list liabilities.PublishedList
	r.JSON(t, &list)
	for _, v := range list.Snapshots {
		if v.Asset == code {
			require.EqualValues(t, 3, v.Users)
			require.EqualValues(t, 2, v.PlatformAccounts)
			require.Equal(t, "21750", v.TotalUnits)
		}
	}

	for user, balance := range users {
		r := e.Get(proofPath(user, code))
		require.Equal(t, http.StatusOK, r.Status, "%s: %s", user, r.Body)
		p, err := sumtree.ParseProof(r.Body)
		require.NoError(t, err)
		v, err := sumtree.Verify(p)
		require.NoError(t, err, user)
		require.Equal(t, uint64(balance), v.Balance, "%s: available + held + reserved", user)
		require.Equal(t, btc.Root, v.Root)
	}

	leafOf := map[string]string{}
	for name, balance := range platforms {
		r := e.Get(platformProofPath(name, code))
		require.Equal(t, http.StatusOK, r.Status, "%s: %s", name, r.Body)
		var doc map[string]any
		r.JSON(t, &doc)
		require.Equal(t, name, doc["platform_account"])
		require.NotContains(t, doc, "external_user_id")

		p, holder, err := liabilities.ParseProofDocument(r.Body)
		require.NoError(t, err)
		require.Equal(t, ledger.PlatformHolder(name), holder)
		v, err := sumtree.Verify(p)
		require.NoError(t, err, name)
		require.Equal(t, uint64(balance), v.Balance, name)
		require.Equal(t, btc.Root, v.Root)
		require.Equal(t, uint64(btc.Total), v.Total)

		// The identity bytes, as an outside verifier hashes them.
		var got liabilities.PlatformAccountProof
		r.JSON(t, &got)
		salt, err := hex.DecodeString(got.Salt)
		require.NoError(t, err)
		msg := append([]byte{0x00}, salt...)
		msg = append(msg, byte(len(code)))
		msg = append(msg, code...)
		msg = append(msg, 0xFF)
		msg = append(msg, name...)
		sum := sha256.Sum256(msg)
		require.Equal(t, hex.EncodeToString(sum[:]), got.Leaf.IDHash, "id_hash = SHA-256(0x00 || salt || u8(len(asset)) || asset || 0xFF || name)")
		leafOf[name] = got.Leaf.IDHash

		// The same leaf claimed for the user of that name does not verify.
		as := got.Proof()
		as.ExternalUserID = name
		_, err = sumtree.Verify(as)
		require.ErrorContains(t, err, "leaf.id_hash")
	}

	// The user named "revenue" is a leaf of its own.
	var user sumtree.Proof
	e.Get(proofPath("revenue", code)).JSON(t, &user)
	require.NotEqual(t, leafOf["revenue"], user.Leaf.IDHash)
	require.Equal(t, "250", user.Leaf.Balance)

	// 404: a platform account with no account of the asset, or none at
	// all; an unknown asset. 422: a name that is not one, no asset.
	for _, path := range []string{platformProofPath("nobody", code), platformProofPath("revenue", asset.USDTTRC20), platformProofPath("revenue", "DOGE")} {
		r := e.Get(path)
		require.Equal(t, http.StatusNotFound, r.Status, "%s: %s", path, r.Body)
	}
	r = e.Get(platformProofPath("nobody", code))
	require.Contains(t, r.Map(t)["detail"], "platform account")
	for _, path := range []string{platformProofPath("Revenue", code), "/v1/platform-accounts/revenue/liabilities-proof"} {
		r := e.Get(path)
		require.Equal(t, http.StatusUnprocessableEntity, r.Status, "%s: %s", path, r.Body)
	}
}

// TestParseProofDocument: a platform account's document names exactly
// one holder with a valid name; a user's reads as before.
func TestParseProofDocument(t *testing.T) {
	t.Parallel()
	var salt [sumtree.SaltSize]byte
	salt[0] = 9
	id, err := sumtree.IDHash(salt, "BTC", liabilities.PlatformIdentity("fees"))
	require.NoError(t, err)
	leaf, err := sumtree.Leaf(id, 42)
	require.NoError(t, err)
	user := sumtree.NewProof("BTC", 1, "2026-01-01T00:00:00Z", "fees", salt, id, leaf, nil, leaf)

	doc := func(edit func(m map[string]any)) []byte {
		b, err := json.Marshal(user)
		require.NoError(t, err)
		var m map[string]any
		require.NoError(t, json.Unmarshal(b, &m))
		edit(m)
		b, err = json.Marshal(m)
		require.NoError(t, err)
		return b
	}
	platform := doc(func(m map[string]any) { m["platform_account"] = m["external_user_id"]; delete(m, "external_user_id") })
	p, holder, err := liabilities.ParseProofDocument(platform)
	require.NoError(t, err)
	require.Equal(t, ledger.PlatformHolder("fees"), holder)
	v, err := sumtree.Verify(p)
	require.NoError(t, err)
	require.EqualValues(t, 42, v.Balance)

	// As a user's proof, the same leaf is not the user "fees".
	p, holder, err = liabilities.ParseProofDocument(doc(func(map[string]any) {}))
	require.NoError(t, err)
	require.Equal(t, ledger.UserHolder("fees"), holder)
	_, err = sumtree.Verify(p)
	require.ErrorContains(t, err, "leaf.id_hash")

	for name, bad := range map[string][]byte{
		"both":       doc(func(m map[string]any) { m["platform_account"] = "fees" }),
		"bad name":   doc(func(m map[string]any) { m["platform_account"] = "Fees!"; delete(m, "external_user_id") }),
		"not string": doc(func(m map[string]any) { m["platform_account"] = 7; delete(m, "external_user_id") }),
		"extra key":  doc(func(m map[string]any) { m["platform_account"] = "fees"; delete(m, "external_user_id"); m["x"] = 1 }),
		"no leaf": doc(func(m map[string]any) {
			m["platform_account"] = "fees"
			delete(m, "external_user_id")
			delete(m, "leaf")
		}),
		"trailing":   append(append([]byte(nil), platform...), []byte(" {}")...),
		"not object": []byte(`[1]`),
	} {
		_, _, err := liabilities.ParseProofDocument(bad)
		require.Error(t, err, name)
	}
}
