package transfer_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"svc/cmd/svc/app/apptest"
	"svc/modules/asset"
	"svc/platform/tracing"
)

// TestFastWayInASampledTraceKeepsItsEventsJob: inside a sampled trace the
// fast way cannot leave its event to the Waker (a batch's job cannot carry
// every trace it wakes), so it inserts the event's own delivery job in
// its transaction (BEGIN, the job, the batch, COMMIT) and is still the
// fast way; the event's job commits with the transfer.
func TestFastWayInASampledTraceKeepsItsEventsJob(t *testing.T) {
	t.Parallel()
	tp := tracing.NewProvider() // samples every span
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	e := &env{Env: apptest.New(t, apptest.WithTracing(tp)), funded: map[string]int64{}}
	apptest.CheckAtEnd(t, e.requireBooks)
	e.fund(t, "a", asset.BTC, 1_000)

	r := e.Do(apptest.Req{Method: "POST", Path: "/v1/transfers", Body: body{Legs: []leg{l("a", "b", asset.BTC, 400)}}, Idem: "traced-1"})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	require.Equal(t, int64(1), e.App.Transfers.FastCreated(), "created the fast way")
	require.Equal(t, 1, count(t, e, `SELECT count(*) FROM river_job j JOIN outbound_events o ON j.args->>'event_id' = o.id::text
 WHERE j.kind = 'event_deliver' AND o.type = 'transfer.completed'`), "the event's own delivery job")
	require.Zero(t, count(t, e, `SELECT count(*) FROM river_job WHERE kind = 'event_deliver_batch'`), "no wake")
	require.Equal(t, int64(600), e.available(t, "a", asset.BTC))
}
