package liabilities_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"svc/cmd/svc/app/apptest"
	"svc/modules/asset"
	"svc/modules/ledger"
	"svc/modules/liabilities"
	"svc/platform/db"
	"svc/platform/dbtest"
	"svc/platform/sumtree"
)

func credit(t *testing.T, d *bun.DB, code, user string, amount int64) {
	t.Helper()
	require.NoError(t, db.RunInTx(context.Background(), d, func(ctx context.Context, tx bun.Tx) error {
		_, err := ledger.CreditDeposit(ctx, tx, code, ledger.UserHolder(user), amount, fmt.Sprintf("dep-%s-%s-%d", code, user, amount), "")
		return err
	}))
}

func hold(t *testing.T, d *bun.DB, code, user string, amount int64) {
	t.Helper()
	require.NoError(t, db.RunInTx(context.Background(), d, func(ctx context.Context, tx bun.Tx) error {
		_, err := ledger.PlaceHold(ctx, tx, code, ledger.UserHolder(user), amount, fmt.Sprintf("w-%s-%s", code, user), "")
		return err
	}))
}

func proofPath(user, code string) string {
	return "/v1/users/" + url.PathEscape(user) + "/liabilities-proof?asset=" + url.QueryEscape(code)
}

// TestProofOfEveryUser: 37 BTC users (an odd count: paths with carried-up
// levels), some with part of their balance held, one at zero, and 5
// USDT_TRC20 users. Before the first snapshot there is nothing to prove;
// after it, every user's proof from the API verifies, shows available +
// held, and leads to the published root and total, which are the ledger's.
func TestProofOfEveryUser(t *testing.T) {
	t.Parallel()
	e := apptest.New(t)
	d := e.App.DB.Bun
	ctx := context.Background()

	r := e.Get(proofPath("u-0", asset.BTC))
	require.Equal(t, http.StatusNotFound, r.Status, "%s", r.Body)
	r = e.AdminGet("/v1/admin/liabilities")
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var list liabilities.PublishedList
	r.JSON(t, &list)
	require.Empty(t, list.Snapshots)

	want := map[string]map[string]int64{asset.BTC: {}, asset.USDTTRC20: {}}
	for i := range 37 {
		user := fmt.Sprintf("u-%d", i)
		amount := int64(1000 + i*7919)
		credit(t, d, asset.BTC, user, amount)
		if i%3 == 0 {
			hold(t, d, asset.BTC, user, amount/2)
		}
		want[asset.BTC][user] = amount
	}
	// A user whose whole balance is held, and one who has withdrawn
	// everything (an account at zero is a leaf of 0).
	hold(t, d, asset.BTC, "u-1", want[asset.BTC]["u-1"]-want[asset.BTC]["u-1"]/2)
	credit(t, d, asset.BTC, "zero ü/ser", 5000)
	hold(t, d, asset.BTC, "zero ü/ser", 5000)
	require.NoError(t, db.RunInTx(ctx, d, func(ctx context.Context, tx bun.Tx) error {
		_, err := ledger.Post(ctx, tx, ledger.Entry{Kind: ledger.Correction, Asset: asset.BTC, SourceRef: "zero-out", Memo: "test",
			Lines: []ledger.Line{{Account: ledger.User(ledger.UserHold, "zero ü/ser"), Amount: -5000}, {Account: ledger.System(ledger.Custody), Amount: 5000}}})
		return err
	}))
	want[asset.BTC]["zero ü/ser"] = 0
	for i := range 5 {
		user := fmt.Sprintf("t-%d", i)
		credit(t, d, asset.USDTTRC20, user, int64(i+1)*1_000_000)
		want[asset.USDTTRC20][user] = int64(i+1) * 1_000_000
	}

	pub, err := e.App.Liabilities.Snapshot(ctx, liabilities.TriggerOnDemand, "cli:test")
	require.NoError(t, err)
	roots := map[string]liabilities.Published{}
	for _, p := range pub {
		roots[p.Asset] = p
	}
	require.Contains(t, roots, asset.BTCLN, "every asset is published, with or without users")
	require.Equal(t, sumtree.Hash{}, roots[asset.BTCLN].Root)
	require.Zero(t, roots[asset.BTCLN].Total)

	r = e.AdminGet("/v1/admin/liabilities")
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	r.JSON(t, &list)
	require.Len(t, list.Snapshots, len(pub))
	ledgerTotals, err := ledger.AssetTotals(ctx, d)
	require.NoError(t, err)
	for _, v := range list.Snapshots {
		require.Equal(t, sumtree.HexOf(roots[v.Asset].Root), v.Root)
		require.Equal(t, int64(len(want[v.Asset])), v.Users)
		var sum int64
		for _, b := range want[v.Asset] {
			sum += b
		}
		require.Equal(t, strconv.FormatInt(sum, 10), v.TotalUnits, v.Asset)
		for _, lt := range ledgerTotals {
			if lt.Asset == v.Asset {
				require.Equal(t, lt.UserObligations(), sum, "the tree's total is the ledger's user obligations")
			}
		}
	}

	for code, users := range want {
		for user, balance := range users {
			r := e.Get(proofPath(user, code))
			require.Equal(t, http.StatusOK, r.Status, "%s %s: %s", code, user, r.Body)
			p, err := sumtree.ParseProof(r.Body)
			require.NoError(t, err)
			v, err := sumtree.Verify(p)
			require.NoError(t, err, "%s %s", code, user)
			require.Equal(t, uint64(balance), v.Balance, "%s %s", code, user)
			require.Equal(t, roots[code].Root, v.Root)
			require.Equal(t, uint64(roots[code].Total), v.Total)
			require.Equal(t, user, p.ExternalUserID)
			require.Equal(t, roots[code].ID, p.SnapshotID)
		}
	}

	// 404: a user with no account of the asset, an asset with no user, an
	// unknown asset; 422: no asset, an unknown parameter.
	for _, path := range []string{proofPath("nobody", asset.BTC), proofPath("t-1", asset.BTC), proofPath("u-1", asset.BTCLN), proofPath("u-1", "DOGE")} {
		r := e.Get(path)
		require.Equal(t, http.StatusNotFound, r.Status, "%s: %s", path, r.Body)
		require.Contains(t, r.Map(t), "detail")
	}
	r = e.Get("/v1/users/u-1/liabilities-proof")
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, "%s", r.Body)
	require.Equal(t, []any{"query", "asset"}, r.FieldErrors(t)[0]["loc"])
	r = e.Get("/v1/users/u-1/liabilities-proof?asset=BTC&user=u-2")
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, "%s", r.Body)
	// The admin list is admin only.
	r = e.Get("/v1/admin/liabilities")
	require.Equal(t, http.StatusForbidden, r.Status, "%s", r.Body)

	// A new snapshot: new salts, so a new root over the same balances, and
	// proofs from it.
	again, err := e.App.Liabilities.Snapshot(ctx, liabilities.TriggerOnDemand, "")
	require.NoError(t, err)
	for _, p := range again {
		if p.Asset == asset.BTC {
			require.NotEqual(t, roots[asset.BTC].Root, p.Root)
			require.Equal(t, roots[asset.BTC].Total, p.Total)
			var got sumtree.Proof
			r := e.Get(proofPath("u-3", asset.BTC))
			r.JSON(t, &got)
			require.Equal(t, p.ID, got.SnapshotID)
		}
	}
}

// TestStoredTreeChangedIsAnErrorNotAProof: leaves and nodes are guarded by
// the published root, not by the database: a changed row makes the proof
// endpoint fail, never serve a proof that does not verify.
func TestStoredTreeChangedIsAnErrorNotAProof(t *testing.T) {
	t.Parallel()
	e := apptest.New(t)
	ctx := context.Background()
	for i := range 4 {
		credit(t, e.App.DB.Bun, asset.BTC, fmt.Sprintf("u-%d", i), 1000)
	}
	_, err := e.App.Liabilities.Snapshot(ctx, liabilities.TriggerOnDemand, "")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, e.Get(proofPath("u-1", asset.BTC)).Status)

	// Each user's position, from the sides of their path.
	position := map[string]int{}
	for i := range 4 {
		user := fmt.Sprintf("u-%d", i)
		var p sumtree.Proof
		e.Get(proofPath(user, asset.BTC)).JSON(t, &p)
		require.Len(t, p.Path, 2)
		position[user] = 0
		for k, step := range p.Path {
			if step.Side == "left" {
				position[user] += 1 << k
			}
		}
	}
	statuses := func() map[int]int {
		out := map[int]int{}
		for user, pos := range position {
			out[pos] = e.Get(proofPath(user, asset.BTC)).Status
		}
		return out
	}
	// The first leaf's balance changed: its own proof (its hash no longer
	// commits to it) and its sibling's (the path no longer leads to the
	// root) fail; the other two do not read it.
	_, err = e.App.DB.Pool.Exec(ctx, `UPDATE liabilities_nodes SET nodes = set_byte(nodes, 39, get_byte(nodes, 39) # 1) WHERE level = 0`)
	require.NoError(t, err)
	require.Equal(t, map[int]int{0: 500, 1: 500, 2: 200, 3: 200}, statuses())
	// The level-1 node over the first two leaves changed: a sibling on the
	// last two's paths.
	_, err = e.App.DB.Pool.Exec(ctx, `UPDATE liabilities_nodes SET nodes = set_byte(nodes, 0, get_byte(nodes, 0) # 1) WHERE level = 1`)
	require.NoError(t, err)
	require.Equal(t, map[int]int{0: 500, 1: 500, 2: 500, 3: 500}, statuses())
	// A leaf's id hash changed: its user is no longer found.
	_, err = e.App.DB.Pool.Exec(ctx, `UPDATE liabilities_leaves SET id_hashes = set_byte(id_hashes, 100, get_byte(id_hashes, 100) # 1)`)
	require.NoError(t, err)
	for user, pos := range position {
		if pos == 3 {
			require.Equal(t, http.StatusNotFound, e.Get(proofPath(user, asset.BTC)).Status)
		}
	}

	// The published history is append-only: the runtime role may not
	// change it (platform/db.GrantRuntime), and the triggers refuse the
	// owner too.
	_, err = e.App.DB.Pool.Exec(ctx, `UPDATE liabilities_snapshots SET total = total + 1`)
	require.ErrorContains(t, err, "permission denied")
	owner, err := pgx.Connect(ctx, dbtest.OwnerURL(e.DBURL))
	require.NoError(t, err)
	defer owner.Close(ctx)
	_, err = owner.Exec(ctx, `DELETE FROM liabilities_snapshots`)
	require.ErrorContains(t, err, "append-only")
	_, err = owner.Exec(ctx, `UPDATE liabilities_snapshots SET total = total + 1`)
	require.ErrorContains(t, err, "append-only")
}

// TestOldProofMaterialIsPruned: a snapshot older than ProofRetention that
// is no longer its asset's latest keeps its header and loses its leaves
// and nodes; the latest keeps everything, however old.
func TestOldProofMaterialIsPruned(t *testing.T) {
	t.Parallel()
	e := apptest.New(t)
	ctx := context.Background()
	credit(t, e.App.DB.Bun, asset.BTC, "u", 1000)
	first, err := e.App.Liabilities.Snapshot(ctx, liabilities.TriggerOnDemand, "")
	require.NoError(t, err)
	// Age the first snapshot (its header is append-only: as a superuser
	// with the triggers off).
	dbtest.ExecBehindTriggers(t, e.DBURL, `UPDATE liabilities_snapshots SET created_at = now() - interval '2 days', taken_at = taken_at - interval '2 days'`)
	count := func(table string, id int64) (n int) {
		require.NoError(t, e.App.DB.Pool.QueryRow(ctx, `SELECT count(*) FROM `+table+` WHERE snapshot_id = $1`, id).Scan(&n))
		return n
	}
	// Only snapshot: kept.
	_, err = e.App.Liabilities.Snapshot(ctx, liabilities.TriggerOnDemand, "")
	require.NoError(t, err)
	// The second snapshot made the first one not the latest; the third
	// prunes it.
	_, err = e.App.Liabilities.Snapshot(ctx, liabilities.TriggerOnDemand, "")
	require.NoError(t, err)
	for _, p := range first {
		if p.Asset == asset.BTC {
			require.Zero(t, count("liabilities_leaves", p.ID))
			require.Zero(t, count("liabilities_nodes", p.ID))
		}
	}
	latest, err := e.App.Liabilities.Latest(ctx)
	require.NoError(t, err)
	var headers int
	require.NoError(t, e.App.DB.Pool.QueryRow(ctx, `SELECT count(*) FROM liabilities_snapshots WHERE asset = 'BTC'`).Scan(&headers))
	require.Equal(t, 3, headers)
	for _, p := range latest {
		if p.Asset == asset.BTC {
			require.Equal(t, 1, count("liabilities_leaves", p.ID))
		}
	}
}
