package ledger

import (
	"context"
	"crypto/ed25519"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/riverqueue/river"
	"github.com/uptrace/bun"

	"svc/modules/alert"
	"svc/platform/queue"
)

// # Scheduled verification
//
// The worker verifies the checkpoints every LEDGER_CHECKPOINT_INTERVAL, as svc admin ledger
// verify does on demand, a slice at a time: each run checks the chain of
// every checkpoint's header (cheap: no entry is read), then recomputes the
// entries of the checkpoints after the last one a run verified, up to
// VerifyEntriesPerRun entries, and records where it stopped
// (ledger_checkpoint_verifications, migration 0033). After the last
// checkpoint it starts again from the first, so every sealed entry is read
// again once per round, and a round's length grows with the ledger, not a
// run's.
//
// A mismatch raises the operator alert ledger.checkpoint_mismatch (one per
// checkpoint), and a checkpoint a reader ignores (beyond the snapshot, or
// in the future) ledger.checkpoint_ignored. The next run starts again from
// the last verified place, so a mismatch is found again until it is
// resolved.

// VerifyEntriesPerRun bounds the entries one scheduled run recomputes.
const VerifyEntriesPerRun = 200_000

// Alert types of the scheduled verification.
const (
	AlertCheckpointMismatch = "ledger.checkpoint_mismatch"
	AlertCheckpointIgnored  = "ledger.checkpoint_ignored"
)

// Verifier runs the scheduled verification.
type Verifier struct {
	DB     *bun.DB
	Pub    ed25519.PublicKey // checks signatures; nil: not checked
	Alerts *alert.Service
	Log    *slog.Logger
	// MaxEntries bounds a run (0: VerifyEntriesPerRun).
	MaxEntries int64
}

// Step verifies the next slice of checkpoints, records it and raises the
// alerts of what it found.
func (v *Verifier) Step(ctx context.Context) (VerifyReport, error) {
	var through sql.NullInt64
	err := v.DB.NewRaw(`SELECT to_seq FROM ledger_checkpoint_verifications WHERE ok ORDER BY id DESC LIMIT 1`).Scan(ctx, &through)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return VerifyReport{}, fmt.Errorf("verify checkpoints: %w", err)
	}
	limit := v.MaxEntries
	if limit <= 0 {
		limit = VerifyEntriesPerRun
	}
	from := through.Int64 + 1
	r, err := verifyCheckpoints(ctx, v.DB, from, limit, true, v.Pub)
	if err == nil && r.OK && r.Checkpoints == 0 && from > 1 {
		// Past the last checkpoint: the next round.
		r, err = verifyCheckpoints(ctx, v.DB, 1, limit, true, v.Pub)
	}
	if err != nil {
		return r, err
	}
	var mismatch *string
	if r.Mismatch != nil {
		s := r.Mismatch.String()
		mismatch = &s
	}
	if _, err := v.DB.ExecContext(ctx, `INSERT INTO ledger_checkpoint_verifications (from_seq, to_seq, entries, ok, mismatch) VALUES (?, ?, ?, ?, ?)`,
		r.From, r.Through, r.Entries, r.OK, mismatch); err != nil {
		return r, fmt.Errorf("verify checkpoints: record the run: %w", err)
	}
	if v.Alerts == nil {
		return r, nil
	}
	if r.Mismatch != nil {
		if _, _, err := v.Alerts.Raise(ctx, v.DB, alert.Params{
			Type:    AlertCheckpointMismatch,
			Subject: fmt.Sprintf("checkpoint %d", r.Mismatch.Checkpoint),
			Detail: fmt.Sprintf("The scheduled verification of the ledger's checkpoints found a mismatch: %s. "+
				"A sealed entry, its postings or the checkpoint's records were changed after sealing. "+
				"Run svc admin ledger verify --from %d for the details, and find out who changed the rows (docs/checkpoints.md).",
				r.Mismatch.String(), r.Mismatch.Checkpoint),
		}); err != nil {
			return r, fmt.Errorf("verify checkpoints: %w", err)
		}
	}
	for _, seq := range r.Ignored {
		if _, _, err := v.Alerts.Raise(ctx, v.DB, alert.Params{
			Type:    AlertCheckpointIgnored,
			Subject: fmt.Sprintf("checkpoint %d", seq),
			Detail: fmt.Sprintf("Checkpoint %d ends beyond the database's current snapshot or is dated in the future. "+
				"The service never writes such a checkpoint (the database computes every checkpoint's range and time): "+
				"it is ignored by sealing and verification. Find out who wrote it (docs/checkpoints.md).", seq),
		}); err != nil {
			return r, fmt.Errorf("verify checkpoints: %w", err)
		}
	}
	return r, nil
}

// VerifyArgs asks for a scheduled verification run.
type VerifyArgs struct{}

// Kind is the job kind.
func (VerifyArgs) Kind() string { return "ledger_checkpoint_verify" }

// VerifyWorker runs Verifier.Step.
type VerifyWorker struct {
	river.WorkerDefaults[VerifyArgs]
	Verifier *Verifier
}

// Work verifies the next slice.
func (w *VerifyWorker) Work(ctx context.Context, _ *river.Job[VerifyArgs]) error {
	r, err := w.Verifier.Step(ctx)
	if err == nil && w.Verifier.Log != nil {
		w.Verifier.Log.InfoContext(ctx, "ledger checkpoints verified", "from", r.From, "through", r.Through, "entries", r.Entries, "ok", r.OK)
	}
	return err
}

// Timeout allows a slice the longest any job may run (queue.LongestJobTimeout).
func (w *VerifyWorker) Timeout(*river.Job[VerifyArgs]) time.Duration {
	return queue.LongestJobTimeout
}
