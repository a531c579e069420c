package withdrawal_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// windowModel is what the rolling 24-hour volume means (migration 0007):
// one bucket per minute; a request at now first takes every bucket whose
// minute is before now's minute less 24 hours out of the total (at most
// once a minute), then counts its gross in its own minute's bucket; a
// returned withdrawal comes out of its bucket, and out of the total unless
// the bucket had left the window.
type windowModel struct {
	buckets map[time.Time]int64
	expired map[time.Time]bool
	swept   time.Time
	total   int64
}

func (m *windowModel) add(now time.Time, gross int64) int64 {
	cut := now.Add(-24 * time.Hour).Truncate(time.Minute)
	m.total += gross
	if m.swept.Before(cut) {
		for minute, g := range m.buckets {
			if !m.expired[minute] && minute.Before(cut) {
				m.expired[minute] = true
				m.total -= g
			}
		}
		m.swept = cut
	}
	m.buckets[now.Truncate(time.Minute)] += gross
	return m.total
}

func (m *windowModel) sub(minute time.Time, gross int64) {
	if _, ok := m.buckets[minute]; !ok {
		return
	}
	m.buckets[minute] -= gross
	if !m.expired[minute] {
		m.total -= gross
	}
}

// TestWindowMatchesItsMeaning drives the volume's functions (the window
// row with its open minute, withdrawal_volume behind it; migration 0027)
// through random requests and returns against windowModel: requests in
// the same minute, in later minutes, a day and more later, from clocks
// behind the latest, and returns of withdrawals in the open minute, in
// older buckets and in buckets that left the window. Every total the
// database answers is the model's.
func TestWindowMatchesItsMeaning(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	sqldb := e.App.DB.Bun
	for seed := range uint64(8) {
		code := fmt.Sprint("WINDOW_TEST_", seed)
		rng := rand.New(rand.NewPCG(seed, 27))
		m := &windowModel{buckets: map[time.Time]int64{}, expired: map[time.Time]bool{}}
		now := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
		type counted struct {
			minute time.Time
			gross  int64
		}
		var live []counted
		for step := range 400 {
			switch r := rng.IntN(100); {
			case r < 40: // the same minute
				now = now.Add(time.Duration(rng.IntN(3)) * time.Second)
			case r < 70: // a later minute
				now = now.Add(time.Duration(1+rng.IntN(5)) * time.Minute)
			case r < 78: // about a day later, across the edge of the window
				now = now.Add(24*time.Hour + time.Duration(rng.IntN(5)-2)*time.Minute)
			case r < 82: // much later: everything has left the window
				now = now.Add(time.Duration(25+rng.IntN(48)) * time.Hour)
			}
			at := now
			if rng.IntN(10) == 0 { // a clock up to 3 minutes behind
				at = now.Add(-time.Duration(rng.IntN(180)) * time.Second)
			}
			if len(live) > 0 && rng.IntN(4) == 0 {
				i := rng.IntN(len(live))
				c := live[i]
				live = append(live[:i], live[i+1:]...)
				_, err := sqldb.ExecContext(ctx, "SELECT withdrawal_window_sub(?, ?, ?)", code, c.minute, c.gross)
				require.NoError(t, err)
				m.sub(c.minute, c.gross)
				require.Equal(t, m.total, e.windowTotal(t, code), "seed %d step %d: return of %d from %s", seed, step, c.gross, c.minute)
				continue
			}
			gross := 1 + rng.Int64N(1_000_000)
			var total int64
			require.NoError(t, sqldb.QueryRowContext(ctx, "SELECT withdrawal_window_add(?, ?, ?)", code, gross, at).Scan(&total))
			want := m.add(at, gross)
			require.Equal(t, want, total, "seed %d step %d: %d at %s", seed, step, gross, at)
			require.Equal(t, want, e.windowTotal(t, code))
			live = append(live, counted{at.Truncate(time.Minute), gross})
		}
	}
}

// TestWindowReturnsACountFromBeforeTheOpenMinute: a withdrawal counted in
// withdrawal_volume before migration 0027, in the minute it ran, whose
// minute then became the open one with less in it, is still taken out of
// the volume when its money returns (migration 0030; not refused for
// making the open bucket negative), and the total stays the sum of what
// counts.
func TestWindowReturnsACountFromBeforeTheOpenMinute(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	sqldb := e.App.DB.Bun
	const code = "WINDOW_TEST_MIGRATED"
	minute := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	// As 0007 left it: 70,000 counted in the minute's row.
	_, err := sqldb.ExecContext(ctx, "INSERT INTO withdrawal_windows (asset, total, swept_before) VALUES (?, 70000, ?)",
		code, minute.Add(-24*time.Hour))
	require.NoError(t, err)
	_, err = sqldb.ExecContext(ctx, "INSERT INTO withdrawal_volume (asset, minute, gross) VALUES (?, ?, 70000)", code, minute)
	require.NoError(t, err)
	var total int64
	require.NoError(t, sqldb.QueryRowContext(ctx, "SELECT withdrawal_window_add(?, 1000, ?)", code, minute.Add(30*time.Second)).Scan(&total))
	require.EqualValues(t, 71_000, total, "the minute opens with 1,000 in it")

	_, err = sqldb.ExecContext(ctx, "SELECT withdrawal_window_sub(?, ?, 70000)", code, minute)
	require.NoError(t, err)
	require.EqualValues(t, 1_000, e.windowTotal(t, code))
	_, err = sqldb.ExecContext(ctx, "SELECT withdrawal_window_sub(?, ?, 1000)", code, minute)
	require.NoError(t, err)
	require.Zero(t, e.windowTotal(t, code))
}
