package db_test

import (
	"context"
	"log/slog"
	"net"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"svc/platform/db"
	"svc/platform/dbtest"
)

// countingHandler counts the records logged at Warn and above.
type countingHandler struct{ warns atomic.Int64 }

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		h.warns.Add(1)
	}
	return nil
}
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }

// An unreachable replica: every read runs on the primary and is counted,
// and the condition is logged once, not per read or per probe.
func TestReplicaUnreachableLogsOnce(t *testing.T) {
	t.Parallel()
	primary := dbtest.New(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := ln.Addr().String()
	require.NoError(t, ln.Close())
	u, err := url.Parse(dbtest.AdminURL(t))
	require.NoError(t, err)
	u.Host = closed
	h := &countingHandler{}
	ctx := context.Background()
	r, err := db.OpenReplica(ctx, u.String(), primary, db.ReplicaOptions{MaxLag: 5 * time.Second, Log: slog.New(h)})
	require.NoError(t, err, "an unreachable replica does not stop the process")
	t.Cleanup(r.Close)
	for range 3 {
		r.Probe(ctx)
	}
	require.Equal(t, db.ReplicaUnreachable, r.State().Status)
	for range 20 {
		var one int
		require.NoError(t, r.Read(ctx, primary.Bun, func(_ context.Context, idb bun.IDB) error {
			require.Same(t, primary.Bun, idb, "the primary's handle")
			return idb.NewRaw("SELECT 1").Scan(ctx, &one)
		}))
	}
	s := r.Stats()
	require.Zero(t, s.Served)
	require.EqualValues(t, 20, s.Fallbacks[db.FallbackUnreachable])
	require.EqualValues(t, 1, h.warns.Load(), "logged once")
}

// A nil replica (DATABASE_READ_URL unset) reads the primary.
func TestNilReplicaReadsThePrimary(t *testing.T) {
	t.Parallel()
	var r *db.Replica
	sentinel := &bun.DB{}
	require.NoError(t, r.Read(context.Background(), sentinel, func(_ context.Context, idb bun.IDB) error {
		require.Same(t, sentinel, idb)
		return nil
	}))
}

// A replica that does not answer in time (a host gone without closing its
// connections) costs a read ReplicaReadTimeout, then the primary answers.
func TestReplicaSlowReadRunsOnThePrimary(t *testing.T) {
	t.Parallel()
	u := dbtest.NewURL(t)
	ctx := context.Background()
	primary, err := db.Open(ctx, u, 4)
	require.NoError(t, err)
	t.Cleanup(primary.Close)
	r, err := db.OpenReplica(ctx, u, primary, db.ReplicaOptions{MaxLag: 5 * time.Second, Log: slog.New(&countingHandler{})})
	require.NoError(t, err)
	t.Cleanup(r.Close)
	r.Probe(ctx)
	require.Equal(t, db.ReplicaOK, r.State().Status, "the primary itself, read through the read-only pool")
	start := time.Now()
	var ran []bool
	require.NoError(t, r.Read(ctx, primary.Bun, func(ctx context.Context, idb bun.IDB) error {
		onPrimary := idb == bun.IDB(primary.Bun)
		ran = append(ran, onPrimary)
		if onPrimary {
			return nil
		}
		_, err := idb.NewRaw("SELECT pg_sleep(60)").Exec(ctx) // the replica never answers
		return err
	}))
	took := time.Since(start)
	require.Equal(t, []bool{false, true}, ran, "tried on the replica, answered by the primary")
	require.GreaterOrEqual(t, took, db.ReplicaReadTimeout)
	require.Less(t, took, db.ReplicaReadTimeout+5*time.Second)
	require.Equal(t, db.ReplicaUnreachable, r.State().Status, "until a probe reaches it again")
	require.EqualValues(t, 1, r.Stats().Fallbacks[db.FallbackUnreachable])
}
