package app_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"svc/cmd/svc/app/apptest"
	"svc/modules/asset"
	"svc/modules/audit"
	"svc/modules/ledger"
	"svc/modules/withdrawal"
	"svc/platform/btcpay/btcpaysim"
	"svc/platform/chain"
	"svc/platform/chain/chaintest"
	"svc/platform/config"
	"svc/platform/db"
	"svc/platform/dbtest"
)

// applyDelay is the standby's recovery_min_apply_delay: it shows each
// commit this long after the primary made it.
const applyDelay = 3 * time.Second

// TestReplicaDelayedOnPurpose runs svc api with DATABASE_READ_URL on a
// streaming standby that replays every commit 3 s late. No money decision
// reads it: a credit is in the balance at once, a withdrawal that needs
// it is accepted at once, an operator approves and rejects withdrawals
// created a moment before, and the refund is in the balance at once. The
// history and the lists are served by the standby, and lag (which proves
// where they are read). With the staleness beyond DATABASE_READ_MAX_LAG
// the lists read the primary and are fresh; with the standby killed they
// read the primary too, and answer 200.
func TestReplicaDelayedOnPurpose(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a PostgreSQL primary and a standby of its own")
	}
	primary := dbtest.StartReplicatedServer(t)
	standby := primary.StartStandby(dbtest.StandbyOptions{Name: "lists", ApplyDelay: applyDelay})
	t.Setenv("DATABASE_URL", primary.URL) // the test's databases are made on the primary
	sim := btcpaysim.Start(t, btcpaysim.Options{TickEvery: -1})
	start := func(t *testing.T, maxLag time.Duration) *apptest.Env {
		e := apptest.New(t, apptest.WithConfig(func(c *config.Config) {
			c.BTCPay.URL, c.BTCPay.APIKey, c.BTCPay.StoreID, c.BTCPay.WebhookSecret = sim.URL(), sim.APIKey(), sim.StoreID(), "test-processor-webhook-secret"
			u, err := url.Parse(c.Database.URL)
			require.NoError(t, err)
			u.Host = "127.0.0.1:" + standby.Port() // the same database, on the standby
			c.Database.ReadURL, c.Database.ReadMaxLag = u.String(), maxLag
		}))
		// The new database reaches the standby after the delay.
		apptest.Eventually(t, 60*time.Second, func() bool { return e.App.Replica.State().Status == db.ReplicaOK }, "the standby in use")
		return e
	}
	ctx := context.Background()
	credit := func(t *testing.T, e *apptest.Env, user string, units int64) time.Time {
		t.Helper()
		_, err := ledger.CreditDeposit(ctx, e.App.DB.Bun, "BTC", ledger.UserHolder(user), units, fmt.Sprintf("deposit:test:%s:%d", user, time.Now().UnixNano()), "test")
		require.NoError(t, err)
		return time.Now()
	}
	available := func(t *testing.T, e *apptest.Env, user string) string {
		t.Helper()
		r := e.Get("/v1/users/" + user + "/balances")
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		var b struct {
			Balances []struct{ Asset, Available string }
		}
		r.JSON(t, &b)
		for _, x := range b.Balances {
			if x.Asset == "BTC" {
				return x.Available
			}
		}
		return "0"
	}
	dest := chaintest.P2WPKH(t, chain.Regtest, "replica")
	withdraw := func(t *testing.T, e *apptest.Env, user string, units int64) withdrawal.View {
		t.Helper()
		r := e.Post("/v1/withdrawals", map[string]string{"external_user_id": user, "asset": "BTC", "amount": fmt.Sprint(units), "destination_address": dest})
		require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
		var v withdrawal.View
		r.JSON(t, &v)
		return v
	}
	// history reads the user's history, and says whether the standby
	// answered it.
	history := func(t *testing.T, e *apptest.Env, user string) (body string, fromReplica bool) {
		t.Helper()
		before := e.App.Replica.Stats().Served
		r := e.Get("/v1/users/" + user + "/transactions")
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		return string(r.Body), e.App.Replica.Stats().Served > before
	}

	t.Run("money decisions read the primary, lists the standby", func(t *testing.T) {
		e := start(t, 10*time.Second)
		n := func(v int64) *int64 { return &v }
		// Above 10 000 sat an operator decides.
		_, err := e.App.Assets.SetLimits(ctx, asset.BTC, asset.Limits{AutoLimit: n(10_000)}, audit.CLI("test"))
		require.NoError(t, err)

		credited := credit(t, e, "carol", 100_000)
		require.Equal(t, "0.00100000", available(t, e, "carol"), "the balance is the primary's: the credit is there at once")
		body, fromReplica := history(t, e, "carol")
		if read := time.Since(credited); read < applyDelay {
			t.Logf("the history was read %s after the credit, within the standby's delay", read.Round(time.Millisecond))
			require.True(t, fromReplica, "the history is the standby's")
			require.NotContains(t, body, "deposit_credit", "the standby has not replayed the credit yet: the history lags")
		} else {
			t.Logf("the history was read %s after the credit, not within the standby's delay: its lag is not checked", time.Since(credited))
		}

		// A withdrawal that needs the new money is accepted: the hold reads
		// the primary's balance.
		credit(t, e, "dan", 10_000)
		w := withdraw(t, e, "dan", 10_000)
		require.Equal(t, "approved", string(w.Status))
		require.Equal(t, "0.00000000", available(t, e, "dan"))
		r := e.Get("/v1/withdrawals/" + w.WithdrawalID)
		require.Equal(t, http.StatusOK, r.Status, "a single withdrawal is read on the primary: %s", r.Body)

		// Decisions read the row they change on the primary, a moment after
		// it was written.
		w2 := withdraw(t, e, "carol", 20_000)
		require.Equal(t, "pending_approval", string(w2.Status))
		r = e.AdminPost("/v1/admin/withdrawals/"+w2.WithdrawalID+"/approve", map[string]any{})
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		require.Contains(t, string(r.Body), `"approved"`)
		w3 := withdraw(t, e, "carol", 30_000)
		r = e.AdminPost("/v1/admin/withdrawals/"+w3.WithdrawalID+"/reject", map[string]any{})
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		require.Equal(t, "0.00080000", available(t, e, "carol"), "the refund is in the balance at once")
		// A second decision on the rejected one is refused on the fresh
		// row, not judged on a stale pending one.
		r = e.AdminPost("/v1/admin/withdrawals/"+w3.WithdrawalID+"/approve", map[string]any{})
		require.Equal(t, http.StatusConflict, r.Status, string(r.Body))

		// The history and the lists catch up once the standby has replayed.
		apptest.Eventually(t, 30*time.Second, func() bool {
			body, fromReplica := history(t, e, "carol")
			return fromReplica && strings.Contains(body, "withdrawal_release") // the rejection's refund, the last commit
		}, "the history shows the rejection's refund")
		r = e.Get("/v1/users/carol/withdrawals")
		require.Contains(t, string(r.Body), w2.WithdrawalID)
		require.Contains(t, string(r.Body), w3.WithdrawalID)
		requireBooksClean(t, e)
	})

	t.Run("beyond the bound the lists read the primary", func(t *testing.T) {
		e := start(t, time.Second)
		// Commits on the primary, one every 100 ms: a standby 3 s late is
		// then 3 s stale, beyond the 1 s bound.
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				case <-time.After(100 * time.Millisecond):
				}
				_, _ = e.App.DB.Bun.NewRaw("INSERT INTO worker_heartbeats (worker_id, beat_at) VALUES ('replica-test', now()) ON CONFLICT (worker_id) DO UPDATE SET beat_at = excluded.beat_at").Exec(ctx)
			}
		}()
		stopWriting := sync.OnceFunc(func() { close(stop); wg.Wait() })
		defer stopWriting()
		apptest.Eventually(t, 30*time.Second, func() bool { return e.App.Replica.State().Status == db.ReplicaLagging }, "the standby beyond the bound")
		st := e.App.Replica.State()
		require.Greater(t, st.Staleness, time.Second)
		fallbacks := e.App.Replica.Stats().Fallbacks[db.FallbackLagging]

		credit(t, e, "erin", 5_000)
		body, fromReplica := history(t, e, "erin")
		require.False(t, fromReplica, "beyond the bound the history is the primary's")
		require.Contains(t, body, "deposit_credit", "and fresh")
		require.Greater(t, e.App.Replica.Stats().Fallbacks[db.FallbackLagging], fallbacks)
		rz := e.Get("/readyz")
		require.Contains(t, string(rz.Body), `{"name":"replica","status":"degraded","detail":"at least `)

		// Once the primary is quiet, the standby catches up and is used again.
		stopWriting()
		apptest.Eventually(t, 30*time.Second, func() bool { return e.App.Replica.State().Status == db.ReplicaOK }, "the standby within the bound again")
		_, fromReplica = history(t, e, "erin")
		require.True(t, fromReplica)
	})

	t.Run("a standby that dies is read around", func(t *testing.T) {
		e := start(t, 10*time.Second)
		credit(t, e, "fay", 5_000)
		standby.Kill()
		killed := time.Now()
		body, fromReplica := history(t, e, "fay")
		t.Logf("the first history read after the standby was killed took %s, answered by the primary", time.Since(killed).Round(time.Millisecond))
		require.False(t, fromReplica)
		require.Contains(t, body, "deposit_credit")
		readReplicaRoutes(t, e)
		require.Equal(t, db.ReplicaUnreachable, e.App.Replica.State().Status)
		require.Positive(t, e.App.Replica.Stats().Fallbacks[db.FallbackUnreachable])
	})
}

// requireBooksClean: the ledger check finds nothing, and the holds equal
// the open withdrawals.
func requireBooksClean(t *testing.T, e *apptest.Env) {
	t.Helper()
	rep, err := ledger.Check(context.Background(), e.App.DB.Bun, withdrawal.CheckHolds)
	require.NoError(t, err)
	require.True(t, rep.LedgerConsistent, "ledger check: %+v", rep)
	require.Empty(t, rep.HoldMismatches)
}
