package db

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
)

func TestParseLSN(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]uint64{"0/0": 0, "0/16B3740": 0x16B3740, "16/B374D848": 0x16<<32 | 0xB374D848, "FFFFFFFF/FFFFFFFF": 1<<64 - 1} {
		got, err := parseLSN(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "16", "x/1", "1/x", "100000000/0"} {
		_, err := parseLSN(in)
		require.Error(t, err, in)
	}
}

// The staleness bound is the age of the newest primary position the
// replica has replayed; with none replayed it is beyond the bound.
func TestReplicaStaleness(t *testing.T) {
	t.Parallel()
	t0 := time.Now()
	fresh := func() *Replica {
		return &Replica{maxLag: 5 * time.Second, samples: []lsnSample{{t0, 100}, {t0.Add(time.Second), 200}, {t0.Add(2 * time.Second), 300}}}
	}
	now := t0.Add(3 * time.Second)

	r := fresh()
	require.Equal(t, 2*time.Second, r.staleness(now, 250), "holds everything up to the sample at t0+1s")
	require.Len(t, r.samples, 2, "the older samples are no longer needed")
	require.Equal(t, time.Second, r.staleness(now, 300))
	require.Equal(t, time.Second, r.staleness(now, 1000), "ahead of every sample: as fresh as the newest")

	r = fresh()
	got := r.staleness(now, 50)
	require.Greater(t, got, r.maxLag, "behind every sample: beyond the bound")
	require.Len(t, r.samples, 3)

	r = fresh()
	got = r.staleness(t0.Add(time.Hour), 50)
	require.Equal(t, time.Hour-2*time.Second, got, "at least the age of the oldest sample kept")
	require.Len(t, r.samples, 1, "the window is bounded")

	r = &Replica{maxLag: 5 * time.Second}
	require.Greater(t, r.staleness(now, 50), r.maxLag, "no sample of the primary: not known to be within the bound")
}

// Between probes the bound grows with the time since the probe.
func TestReplicaUnusableAsTheProbeAges(t *testing.T) {
	t.Parallel()
	r := &Replica{maxLag: 5 * time.Second}
	require.Equal(t, FallbackLagging, r.unusable(), "not probed yet")
	r.state = ReplicaState{Status: ReplicaOK, Staleness: time.Second, ProbedAt: time.Now()}
	require.Empty(t, r.unusable())
	r.state.ProbedAt = time.Now().Add(-4500 * time.Millisecond)
	require.Equal(t, FallbackLagging, r.unusable(), "1 s stale at a probe 4.5 s ago is 5.5 s stale now")
	r.state = ReplicaState{Status: ReplicaUnreachable, ProbedAt: time.Now()}
	require.Equal(t, FallbackUnreachable, r.unusable())
}

// BenchmarkReplicaRoute: what Read adds to a read to choose its handle,
// with no replica (DATABASE_READ_URL unset) and with one in use.
func BenchmarkReplicaRoute(b *testing.B) {
	ctx := context.Background()
	noop := func(context.Context, bun.IDB) error { return nil }
	b.Run("unset", func(b *testing.B) {
		var r *Replica
		for b.Loop() {
			_ = r.Read(ctx, nil, noop)
		}
	})
	b.Run("in_use", func(b *testing.B) {
		r := &Replica{maxLag: time.Minute, db: &DB{Bun: &bun.DB{}}, state: ReplicaState{Status: ReplicaOK, ProbedAt: time.Now()}}
		for b.Loop() {
			_ = r.Read(ctx, nil, noop)
		}
	})
}
