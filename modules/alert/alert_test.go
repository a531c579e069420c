package alert_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"svc/modules/alert"
	"svc/platform/clock"
	"svc/platform/db"
	"svc/platform/dbtest"
	"svc/platform/logtest"
)

func setup(t *testing.T) (*alert.Service, *logtest.Buffer, *clock.Fake) {
	t.Helper()
	d := dbtest.New(t)
	logs := &logtest.Buffer{}
	fake := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	return &alert.Service{DB: d.Bun, Log: slog.New(slog.NewTextHandler(logs, nil)), Now: fake.Now}, logs, fake
}

func TestRaiseIsOncePerTypeAndSubject(t *testing.T) {
	t.Parallel()
	s, logs, _ := setup(t)
	ctx := context.Background()
	p := alert.Params{Type: "event.dead", Subject: "evt_1", Detail: "gave up after ten attempts"}

	a, created, err := s.Raise(ctx, nil, p)
	require.NoError(t, err)
	require.True(t, created)
	require.NotZero(t, a.ID)
	require.Equal(t, 1, strings.Count(logs.String(), "level=ERROR msg=\"operator alert raised\""))
	require.Contains(t, logs.String(), "subject=evt_1")

	again, created, err := s.Raise(ctx, nil, alert.Params{Type: "event.dead", Subject: "evt_1", Detail: "other text"})
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, a.ID, again.ID)
	require.Equal(t, "gave up after ten attempts", again.Detail, "the first alert is kept as it was")
	require.Equal(t, 1, strings.Count(logs.String(), "operator alert raised"), "no second log line")

	// Another subject or another type is another alert.
	_, created, err = s.Raise(ctx, nil, alert.Params{Type: "event.dead", Subject: "evt_2", Detail: "x"})
	require.NoError(t, err)
	require.True(t, created)
	_, created, err = s.Raise(ctx, nil, alert.Params{Type: "withdrawal.hold_needs_attestation", Subject: "evt_1", Detail: "x"})
	require.NoError(t, err)
	require.True(t, created)

	all, err := s.List(ctx, alert.ListParams{})
	require.NoError(t, err)
	require.Len(t, all, 3)
}

func TestRaiseConcurrently(t *testing.T) {
	t.Parallel()
	s, logs, _ := setup(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	ids := make([]int64, 8)
	news := make([]bool, 8)
	for i := range ids {
		wg.Go(func() {
			a, created, err := s.Raise(ctx, nil, alert.Params{Type: "gas.low", Subject: "TRX", Detail: "below 200 TRX"})
			require.NoError(t, err)
			ids[i], news[i] = a.ID, created
		})
	}
	wg.Wait()
	created := 0
	for i := range ids {
		require.Equal(t, ids[0], ids[i])
		if news[i] {
			created++
		}
	}
	require.Equal(t, 1, created)
	require.Equal(t, 1, strings.Count(logs.String(), "operator alert raised"))
}

func TestRaiseInsideARolledBackTransaction(t *testing.T) {
	t.Parallel()
	s, _, _ := setup(t)
	ctx := context.Background()
	boom := errors.New("boom")
	err := db.RunInTx(ctx, s.DB, func(ctx context.Context, tx bun.Tx) error {
		if _, _, err := s.Raise(ctx, tx, alert.Params{Type: "event.dead", Subject: "evt_9", Detail: "x"}); err != nil {
			return err
		}
		return boom
	})
	require.ErrorIs(t, err, boom)
	all, err := s.List(ctx, alert.ListParams{})
	require.NoError(t, err)
	require.Empty(t, all)
}

func TestRaiseValidates(t *testing.T) {
	t.Parallel()
	s, _, _ := setup(t)
	for _, p := range []alert.Params{
		{Type: "", Subject: "x"},
		{Type: "Event.Dead", Subject: "x"},
		{Type: "event dead", Subject: "x"},
		{Type: "event.dead", Subject: ""},
		{Type: "event.dead", Subject: strings.Repeat("x", 501)},
	} {
		_, _, err := s.Raise(context.Background(), nil, p)
		require.ErrorIs(t, err, alert.ErrInvalid, "%+v", p)
	}
	// A long detail is shortened rather than refused: the alert matters more.
	a, created, err := s.Raise(context.Background(), nil, alert.Params{Type: "event.dead", Subject: "long", Detail: strings.Repeat("é", 5000)})
	require.NoError(t, err)
	require.True(t, created)
	require.Len(t, []rune(a.Detail), 4000)
}

func TestListAndAcknowledge(t *testing.T) {
	t.Parallel()
	s, _, fake := setup(t)
	ctx := context.Background()
	first, _, err := s.Raise(ctx, nil, alert.Params{Type: "event.dead", Subject: "evt_a", Detail: "a"})
	require.NoError(t, err)
	fake.Advance(time.Minute)
	second, _, err := s.Raise(ctx, nil, alert.Params{Type: "event.dead", Subject: "evt_b", Detail: "b"})
	require.NoError(t, err)

	all, err := s.List(ctx, alert.ListParams{})
	require.NoError(t, err)
	require.Equal(t, []int64{second.ID, first.ID}, []int64{all[0].ID, all[1].ID}, "newest first")

	fake.Advance(time.Minute)
	acked, err := s.Acknowledge(ctx, first.ID, "alice")
	require.NoError(t, err)
	require.True(t, acked.Acknowledged())
	require.Equal(t, "alice", *acked.AcknowledgedBy)
	require.True(t, acked.AcknowledgedAt.Equal(fake.Now()))

	fake.Advance(time.Minute)
	again, err := s.Acknowledge(ctx, first.ID, "bob")
	require.NoError(t, err)
	require.Equal(t, "alice", *again.AcknowledgedBy, "the first acknowledgement stands")

	open, err := s.List(ctx, alert.ListParams{Open: true})
	require.NoError(t, err)
	require.Len(t, open, 1)
	require.Equal(t, second.ID, open[0].ID)

	limited, err := s.List(ctx, alert.ListParams{Limit: 1})
	require.NoError(t, err)
	require.Len(t, limited, 1)

	_, err = s.Acknowledge(ctx, 999999, "alice")
	require.ErrorIs(t, err, alert.ErrNotFound)
	_, err = s.Acknowledge(ctx, second.ID, "")
	require.ErrorIs(t, err, alert.ErrInvalid)

	// Raising an acknowledged alert again does not reopen or duplicate it.
	re, created, err := s.Raise(ctx, nil, alert.Params{Type: "event.dead", Subject: "evt_a", Detail: "a"})
	require.NoError(t, err)
	require.False(t, created)
	require.True(t, re.Acknowledged())
}
