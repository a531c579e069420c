package withdrawal

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"svc/modules/asset"
	"svc/platform/db"
	"svc/platform/idempotency"
)

// An auto-approved withdrawal is the common case, and the ordinary way
// creates it in two round trips to the database: a first statement whose
// answer (the asset's row, whether the destination was issued, the rolling
// volume) the gates need, then the transaction. createAuto creates it in
// one. It decides from a copy of the asset's row kept from an earlier
// creation, and sends in one batch:
//
//  1. BEGIN; withdrawal_reserve_auto (migration 0026): the key's claim, the
//     checks the copy cannot make (the row still at the copy's version,
//     the destination never issued for a deposit, the volume including
//     this withdrawal within the daily cap) and the volume reservation;
//     COMMIT, without waiting for the WAL flush, so that the asset's
//     volume row is locked for this transaction only, as in the ordinary
//     way (withdrawal_window_reserve);
//  2. the hold, the row and the key's response, as one implicit
//     transaction (queueApproved), as insertApproved sends them.
//
// When the first transaction refuses (SV002), it undid itself and the
// server skipped the second: nothing was written, and the ordinary way
// runs and gives the exact answer, a withdrawal waiting for an operator or
// a refusal. So the copy decides only how fast an answer comes, never
// what it is. Under load, concurrent creations share one batch, and one
// transaction for their second parts (withdrawal_create_batch.go).
// docs/performance.md has the figures.

// codeNotAuto is withdrawal_reserve_auto's refusal.
const codeNotAuto = "SV002"

// assetCopies are the asset rows the ordinary way last read, by code.
type assetCopies struct {
	mu sync.Mutex
	m  map[string]asset.Asset
}

func (c *assetCopies) get(code string) (asset.Asset, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	a, ok := c.m[code]
	return a, ok
}

// put keeps a, unless the copy kept is of a later version.
func (c *assetCopies) put(a asset.Asset) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.m[a.Code]; ok && old.Version > a.Version {
		return
	}
	if c.m == nil {
		c.m = map[string]asset.Asset{}
	}
	c.m[a.Code] = a
}

// CreatedInOneRoundTrip is how many withdrawals this service created in
// one round trip to the database since it started (the rest took the
// ordinary way).
func (s *Service) CreatedInOneRoundTrip() int64 { return s.oneRoundTrip.Load() }

// CreatedInSharedPipeline is how many of those shared their pipeline and
// their transaction with other creations (withdrawal_create_batch.go).
func (s *Service) CreatedInSharedPipeline() int64 { return s.shared.Load() }

// oneTripCompleter is a Completer whose key the creation's own
// transaction claims together with the response (*idempotency.Record).
type oneTripCompleter interface {
	Unclaimed() (string, bool)
	QueueClaimComplete(b *pgx.Batch, status int, contentType string, body []byte)
	ReadClaimComplete(br pgx.BatchResults) error
	completedMarker
}

// claimCompleting is a oneTripCompleter as the pipelineCompleter
// queueApproved takes.
type claimCompleting struct{ oneTripCompleter }

func (c claimCompleting) QueueComplete(b *pgx.Batch, status int, contentType string, body []byte) {
	c.QueueClaimComplete(b, status, contentType, body)
}

func (c claimCompleting) ReadComplete(br pgx.BatchResults) error { return c.ReadClaimComplete(br) }

// createAuto creates an auto-approved withdrawal in one round trip. It
// reports handled false, having written nothing, when the ordinary way
// must decide: no copy of the asset, a copy that is not auto-approvable or
// that refuses the request, a refusal from withdrawal_reserve_auto, or a
// key another attempt holds.
func (s *Service) createAuto(ctx context.Context, p CreateParams, rec Completer, dest Destination, spellings []string, now time.Time) (_ CreatedView, _ []byte, handled bool, _ error) {
	a, ok := s.assets.get(p.Asset)
	if !ok || p.PlatformAccount != "" || !a.Enabled || p.Amount < a.WithdrawalMin || a.WithdrawalUserDailyCap != nil ||
		len(gates(a, p.Amount, 0, "")) > 0 { // the daily cap: in withdrawal_reserve_auto
		return CreatedView{}, nil, false, nil
	}
	var (
		key       any // the key withdrawal_reserve_auto checks; nil: none
		unclaimed bool
		pc        pipelineCompleter
	)
	if rec != nil {
		oc, ok := rec.(oneTripCompleter)
		if !ok {
			return CreatedView{}, nil, false, nil
		}
		var stored string
		if stored, unclaimed = oc.Unclaimed(); unclaimed {
			key = stored
		}
		pc = claimCompleting{oc}
	}
	// The refusals the estimate can give come after the checks of the
	// database in the SPEC's order: the ordinary way gives them.
	est, err := s.estimate(ctx, a, p.Amount)
	if err != nil || (a.Code == asset.BTC && est.Net <= DustLimit) ||
		(dest.Invoice != nil && dest.Invoice.CheckAmount(est.Net) != nil) {
		return CreatedView{}, nil, false, nil
	}
	w, err := s.newIntent(p, a.Code, dest, est, now)
	if err != nil {
		return CreatedView{}, nil, true, err
	}

	var b1, b2 pgx.Batch
	b1.Queue("BEGIN")
	b1.Queue("SELECT withdrawal_reserve_auto($1, $2, $3, $4, $5, $6)", key, a.Code, a.Version, p.Amount, spellings, now)
	b1.Queue("COMMIT")
	t, err := s.queueApproved(&b2, w, a, pc)
	if err != nil {
		return CreatedView{}, nil, true, err
	}
	it := &autoItem{user: w.ExternalUserID, reserve: b1.QueuedQueries, approve: b2.QueuedQueries, read: t.read}
	s.sendAuto(ctx, it)
	// reserved is set once the first transaction committed: the volume
	// counts the withdrawal.
	reserved, err := it.reserved, it.err
	if !reserved {
		var pe *pgconn.PgError
		switch {
		case err == nil:
			return CreatedView{}, nil, true, errors.New("withdrawal: one-round-trip creation read no reservation")
		case rolledBack(err):
			// Refused (SV002) or failed before its commit: nothing was
			// written, and the ordinary way decides.
			if errors.As(err, &pe) && pe.Code != codeNotAuto {
				s.log().WarnContext(ctx, "withdrawal: one-round-trip creation failed; creating it the ordinary way", "error", err)
			}
			return CreatedView{}, nil, false, nil
		default:
			// The connection was lost: the reservation may have committed,
			// and it stays (as for the ordinary way's first statement).
			s.reservationStays(ctx, w, err)
			return CreatedView{}, nil, true, fmt.Errorf("create withdrawal: %w", err)
		}
	}
	alone := false // written again alone, after the shared transaction failed
	if err != nil && rolledBack(err) && (it.shared || db.IsTransient(err)) {
		alone = true
		// The second transaction met a deadlock or a serialization
		// failure, or it was shared and another creation in it may have
		// failed it: send it again alone, with insertApproved's retries.
		t.view, t.body, err = s.insertApproved(ctx, w, a, pc)
	}
	switch {
	case err == nil:
		idempotency.MarkCompleted(rec)
		s.oneRoundTrip.Add(1)
		if it.shared && !alone {
			s.shared.Add(1)
		}
		return t.view, t.body, true, nil
	case rolledBack(err):
		s.giveBack(ctx, w)
		if unclaimed && (db.IsUniqueViolation(err, "idempotency_keys_pkey") || db.IsUniqueViolation(err, "withdrawals_idempotency_key_key")) {
			// Another attempt with the key came first: the ordinary way
			// finds it (a replay, or 409 while it runs).
			return CreatedView{}, nil, false, nil
		}
	default:
		s.reservationStays(ctx, w, err)
	}
	if errors.Is(err, idempotency.ErrLost) {
		return CreatedView{}, nil, true, ErrTakenOver
	}
	return CreatedView{}, nil, true, err
}
