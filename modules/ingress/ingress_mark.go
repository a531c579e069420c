package ingress

import (
	"context"
	"sync/atomic"
	"time"

	"svc/platform/db"
)

// handling is the processed mark of the deliveries a handler is handed
// (the one it acts on and the others of its subject that a batch marks
// with it), carried by the handler's context for the handler to write in
// the transaction that makes their effect (ProcessedWith).
type handling struct {
	ids    []int64
	at     time.Time
	marked atomic.Bool // a transaction that wrote the mark committed
}

type handlingKey struct{}

func withHandling(ctx context.Context, ids []int64, at time.Time) (context.Context, *handling) {
	h := &handling{ids: ids, at: at}
	return context.WithValue(ctx, handlingKey{}, h), h
}

// ProcessedWith returns the processed mark of the deliveries whose
// handling ctx carries, as a data-modifying WITH query of the caller's
// statement (its parameters numbered from first), and true; false when
// ctx carries none, when they are marked already, or when ctx is not that
// of a transaction of db.RunInTx or db.BatchTx (the batch marks them once the handler
// returns, as it marks the others). ctx must be that of the transaction
// the query is written in: the mark counts once it has committed, and a
// rolled back or retried attempt leaves the deliveries unprocessed, so
// that a delivery is marked processed in the very commit of its effect,
// never before it.
//
// This saves the batch's own statement and commit for the deliveries it
// covers (docs/performance.md, "Waking work in batches").
func ProcessedWith(ctx context.Context) (func(first int) (string, []any), bool) {
	h, ok := ctx.Value(handlingKey{}).(*handling)
	if !ok || h.marked.Load() || !db.AfterCommit(ctx, func() { h.marked.Store(true) }) {
		return nil, false
	}
	return func(first int) (string, []any) {
		return markProcessedSQL(first), []any{h.at, h.ids}
	}, true
}
