package app_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"svc/cmd/svc/app/apptest"
	"svc/modules/ledger"
	"svc/platform/config"
	"svc/platform/db"
)

// replicaRoutes is the routing table of docs/operations.md ("Reads from a
// replica"): which reads may be served by DATABASE_READ_URL (true) and
// which always read the primary (false).
var replicaRoutes = []replicaRoute{
	{"/v1/users/ann/balances", false, false},
	{"/v1/users/ann/transactions", false, true},
	{"/v1/users/ann/withdrawals", false, true},
	{"/v1/users/ann/deposits", false, true},
	{"/v1/withdrawals/0b6c2b9e-4f1e-4c9b-8f44-1a2b3c4d5e6f", false, false},
	{"/v1/deposits/0b6c2b9e-4f1e-4c9b-8f44-1a2b3c4d5e6f", false, false},
	{"/v1/events", false, false},
	{"/v1/assets", false, false},
	{"/v1/users/ann/liabilities-proof?asset=BTC", false, false},
	{"/v1/admin/withdrawals", true, true},
	{"/v1/admin/deposits/review", true, true},
	{"/v1/admin/wallet-alerts", true, true},
	{"/v1/admin/audit", true, true},
	{"/v1/admin/events", true, true},
	{"/v1/admin/reconciliation", true, false},
	{"/v1/admin/liabilities", true, false},
}

type replicaRoute struct {
	path    string
	admin   bool
	replica bool
}

// get reads the route with the scope it needs.
func (rt replicaRoute) get(e *apptest.Env) *apptest.Response {
	if rt.admin {
		return e.AdminGet(rt.path)
	}
	return e.Get(rt.path)
}

// readReplicaRoutes reads every route the replica may serve, requires 200
// of each and returns how many it read.
func readReplicaRoutes(t *testing.T, e *apptest.Env) int {
	t.Helper()
	n := 0
	for _, rt := range replicaRoutes {
		if !rt.replica {
			continue
		}
		n++
		resp := rt.get(e)
		require.Equal(t, http.StatusOK, resp.Status, "%s: %s", rt.path, resp.Body)
	}
	return n
}

// TestReplicaRouting: with DATABASE_READ_URL naming a server that is
// current (here the primary itself, through the read-only pool), exactly
// the lists and the history are answered by it; balances, single
// resources, the Events API and every money read are not. The read pool's
// sessions refuse writes.
func TestReplicaRouting(t *testing.T) {
	e := apptest.New(t, apptest.WithConfig(func(c *config.Config) { c.Database.ReadURL = c.Database.URL }))
	r := e.App.Replica
	require.NotNil(t, r)
	require.Equal(t, db.ReplicaOK, r.State().Status, "the primary itself is never stale")
	_, err := ledger.CreditDeposit(context.Background(), e.App.DB.Bun, "BTC", ledger.UserHolder("ann"), 5_000, "deposit:test:replica-routing", "test")
	require.NoError(t, err)
	for _, rt := range replicaRoutes {
		before := r.Stats()
		resp := rt.get(e)
		require.Contains(t, []int{http.StatusOK, http.StatusNotFound}, resp.Status, "%s: %s", rt.path, resp.Body)
		after := r.Stats()
		served := after.Served - before.Served
		if rt.replica {
			require.EqualValues(t, 1, served, "%s reads the replica", rt.path)
		} else {
			require.Zero(t, served, "%s reads the primary", rt.path)
		}
		require.Equal(t, before.Fallbacks, after.Fallbacks, "%s: no fallback", rt.path)
	}
	h := e.Get("/v1/users/ann/transactions")
	require.Contains(t, string(h.Body), `"deposit_credit"`)

	// A write given the replica's handle by mistake is refused, not applied,
	// and not retried on the primary.
	err = r.Read(context.Background(), e.App.DB.Bun, func(ctx context.Context, idb bun.IDB) error {
		_, err := idb.NewRaw("INSERT INTO worker_heartbeats (worker_id, beat_at) VALUES ('replica-write', now())").Exec(ctx)
		return err
	})
	require.Error(t, err)
	require.Contains(t, err.Error(), "read-only transaction")
	var n int
	require.NoError(t, e.App.DB.Bun.NewRaw("SELECT count(*) FROM worker_heartbeats WHERE worker_id = 'replica-write'").Scan(context.Background(), &n))
	require.Zero(t, n)

	rz := e.Get("/readyz")
	require.Contains(t, string(rz.Body), `{"name":"replica","status":"ok","detail":null}`)
}

// TestReplicaUnreachableReadsThePrimary: a DATABASE_READ_URL nothing
// answers at does not stop svc api from starting, and every list is
// answered from the primary (200, never 503), counted by reason;
// /readyz shows the replica degraded and stays 200; the metrics say so.
func TestReplicaUnreachableReadsThePrimary(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there now
	e := apptest.New(t, apptest.WithMetrics(), apptest.WithWorker(), apptest.WithConfig(func(c *config.Config) {
		u, err := url.Parse(c.Database.URL)
		require.NoError(t, err)
		u.Host = closed
		c.Database.ReadURL = u.String()
	}))
	r := e.App.Replica
	require.Equal(t, db.ReplicaUnreachable, r.State().Status)
	_, err = ledger.CreditDeposit(context.Background(), e.App.DB.Bun, "BTC", ledger.UserHolder("bob"), 7_000, "deposit:test:replica-unreachable", "test")
	require.NoError(t, err)
	lists := readReplicaRoutes(t, e)
	require.Contains(t, string(e.Get("/v1/users/bob/transactions").Body), `"deposit_credit"`, "the primary's answer, fresh")
	s := r.Stats()
	require.Zero(t, s.Served)
	require.GreaterOrEqual(t, s.Fallbacks[db.FallbackUnreachable], int64(lists+1))

	var rz *apptest.Response
	apptest.Eventually(t, 30*time.Second, func() bool { rz = e.Get("/readyz"); return rz.Status == http.StatusOK },
		"ready (the replica is advisory) once the worker has beaten")
	require.Contains(t, string(rz.Body), `{"name":"replica","status":"degraded","detail":"unreachable: lists read the primary (details in the service's logs)"}`)
	require.NotContains(t, string(rz.Body), closed, "no address for an anonymous caller")

	resp, err := http.Get(e.MetricsURL + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	m := string(body)
	require.Contains(t, m, "svc_db_replica_in_use 0")
	require.Contains(t, m, `svc_db_replica_fallbacks_total{reason="unreachable"}`)
	require.Contains(t, m, "svc_db_replica_reads_total 0")
	require.NotContains(t, m, "svc_db_replica_staleness_seconds ", "unknown while unreachable")
}
