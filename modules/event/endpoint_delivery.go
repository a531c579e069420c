package event

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/riverqueue/river"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"svc/modules/alert"
	"svc/platform/db"
	"svc/platform/queue"
)

// Delivery is one event's delivery to one webhook endpoint: the life the
// event's own delivery to PLATFORM_WEBHOOK_URL has (status, attempts,
// schedule, dead, redelivery), for that endpoint alone.
type Delivery struct {
	bun.BaseModel `bun:"table:webhook_deliveries"`

	EventID       uuid.UUID  `bun:"event_id,pk,type:uuid"`
	EndpointID    uuid.UUID  `bun:"endpoint_id,pk,type:uuid"`
	Status        Status     `bun:"status"`
	Attempts      int        `bun:"attempts"`
	NextAttemptAt time.Time  `bun:"next_attempt_at"`
	LastError     *string    `bun:"last_error"`
	CreatedAt     time.Time  `bun:"created_at"`
	DeliveredAt   *time.Time `bun:"delivered_at"`
	DeadAt        *time.Time `bun:"dead_at"`
	Redeliveries  int        `bun:"redeliveries"`
}

// deliveryColumns are the columns of Delivery (the claim columns are the
// Deliverer's alone).
const deliveryColumns = "event_id, endpoint_id, status, attempts, next_attempt_at, last_error, created_at, delivered_at, dead_at, redeliveries"

// claimedDelivery is a delivery an attempt holds, with what sending it
// needs: the event's bytes and the endpoint's URL and sealed secrets, as
// they are at the claim.
type claimedDelivery struct {
	EventID              uuid.UUID       `bun:"event_id"`
	EndpointID           uuid.UUID       `bun:"endpoint_id"`
	Attempts             int             `bun:"attempts"`
	Redeliveries         int             `bun:"redeliveries"`
	Type                 Type            `bun:"type"`
	Payload              json.RawMessage `bun:"payload"`
	URL                  string          `bun:"url"`
	SecretSealed         []byte          `bun:"secret_sealed"`
	PreviousSecretSealed []byte          `bun:"previous_secret_sealed"`
	PreviousSecretUntil  *time.Time      `bun:"previous_secret_until"`
}

func (c claimedDelivery) endpoint() Endpoint {
	return Endpoint{ID: c.EndpointID, URL: c.URL, SecretSealed: c.SecretSealed,
		PreviousSecretSealed: c.PreviousSecretSealed, PreviousSecretUntil: c.PreviousSecretUntil}
}

// AttemptEndpoints makes one attempt for each delivery of the events ids
// (to endpoint only, unless it is uuid.Nil) that is pending, due, not held
// by another attempt, and whose endpoint is enabled, as AttemptBatch does
// for the events' own deliveries: the claims in one statement (rows taken
// in key order, any another claim is taking skipped, so two attempts never
// send the same delivery and never deadlock), the requests side by side,
// the deliveries recorded in one statement and each failure in a
// transaction with its next attempt's job (EndpointDeliverArgs) or, after
// the tenth, the dead alert. Sends cut short by ctx are handed back
// without spending an attempt. It returns how many deliveries had each
// outcome.
func (d *Deliverer) AttemptEndpoints(ctx context.Context, ids []uuid.UUID, endpoint uuid.UUID, worker string) (map[Outcome]int, error) {
	outcomes := map[Outcome]int{}
	if len(ids) == 0 {
		return outcomes, nil
	}
	start := d.Now().UTC().Truncate(time.Microsecond)
	token := uuid.New()
	only := bun.SafeQuery("true")
	if endpoint != uuid.Nil {
		only = bun.SafeQuery("x.endpoint_id = ?", endpoint)
	}
	var claimed []claimedDelivery
	err := d.DB.NewRaw(`WITH c AS (
  UPDATE public.webhook_deliveries d
     SET claim_token = ?, claimed_until = ?, claimed_by = NULLIF(?, ''), claimed_at = ?
   WHERE (d.event_id, d.endpoint_id) IN (
          SELECT x.event_id, x.endpoint_id
            FROM public.webhook_deliveries x JOIN public.webhook_endpoints w ON w.id = x.endpoint_id AND NOT w.disabled
           WHERE x.event_id IN (?) AND ? AND x.status = 'pending' AND x.next_attempt_at <= ?
             AND (x.claimed_until IS NULL OR x.claimed_until <= ?)
           ORDER BY x.event_id, x.endpoint_id FOR UPDATE OF x SKIP LOCKED)
  RETURNING d.event_id, d.endpoint_id, d.attempts, d.redeliveries)
SELECT c.event_id, c.endpoint_id, c.attempts, c.redeliveries, e.type, e.payload,
       w.url, w.secret_sealed, w.previous_secret_sealed, w.previous_secret_until
  FROM c JOIN public.outbound_events e ON e.id = c.event_id JOIN public.webhook_endpoints w ON w.id = c.endpoint_id`,
		token, start.Add(d.timeout()+claimMargin), worker, start, bun.In(ids), only, start, start).Scan(ctx, &claimed)
	if err != nil && !db.IsNoRows(err) {
		return nil, fmt.Errorf("claim the endpoint deliveries of %d events: %w", len(ids), err)
	}
	if len(claimed) == 0 {
		return outcomes, nil
	}

	sends := d.sendAll(ctx, len(claimed), func(ctx context.Context, i int, start time.Time) string {
		return d.postToEndpoint(ctx, claimed[i].endpoint(), claimed[i].Payload, start)
	})
	stopped := ctx.Err()
	if stopped != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), releaseWithin)
		defer cancel()
	}

	var (
		evs, eps []uuid.UUID
		firstErr error
		unheld   bool
	)
	for i, c := range claimed {
		sd := sends[i]
		switch {
		case !sd.done:
			unheld = true
		case sd.failure == "":
			evs, eps = append(evs, c.EventID), append(eps, c.EndpointID)
		default:
			outcome, next, err := d.recordEndpointFailure(ctx, c, token, sd.start, sd.failure)
			if err != nil {
				unheld = true
				if firstErr == nil {
					firstErr = fmt.Errorf("record the delivery of event %s to endpoint %s: %w", PublicID(c.EventID), c.EndpointID, err)
				}
				continue
			}
			outcomes[outcome]++
			d.logEndpointOutcome(ctx, c, outcome, sd.failure, next)
		}
	}
	if len(evs) > 0 {
		var got []claimedDelivery
		err := d.DB.NewRaw(`UPDATE public.webhook_deliveries
   SET status = 'delivered', attempts = attempts + 1, delivered_at = ?, last_error = NULL,
       claim_token = NULL, claimed_until = NULL, claimed_by = NULL, claimed_at = NULL
 WHERE claim_token = ? AND (event_id, endpoint_id) IN (SELECT * FROM unnest(?::uuid[], ?::uuid[]))
RETURNING event_id, endpoint_id`, d.Now().UTC(), token, pgdialect.Array(evs), pgdialect.Array(eps)).Scan(ctx, &got)
		if err != nil && !db.IsNoRows(err) {
			unheld = true
			if firstErr == nil {
				firstErr = fmt.Errorf("record %d endpoint deliveries: %w", len(evs), err)
			}
		} else {
			recorded := make(map[[2]uuid.UUID]bool, len(got))
			for _, g := range got {
				recorded[[2]uuid.UUID{g.EventID, g.EndpointID}] = true
			}
			for i, c := range claimed {
				if sends[i].done && sends[i].failure == "" {
					outcome := OutcomeSkipped // the claim expired and another attempt took it over
					if recorded[[2]uuid.UUID{c.EventID, c.EndpointID}] {
						outcome = OutcomeDelivered
					}
					outcomes[outcome]++
					d.logEndpointOutcome(ctx, c, outcome, "", time.Time{})
				}
			}
		}
	}
	if unheld {
		d.releaseEndpointClaims(ctx, token)
	}
	if stopped != nil {
		return outcomes, fmt.Errorf("deliver %d endpoint deliveries: %w", len(claimed), stopped)
	}
	return outcomes, firstErr
}

// postToEndpoint sends payload once to ep, signed with its secrets at now
// (endpointSecrets), and returns "" on a 2xx or why the attempt failed.
func (d *Deliverer) postToEndpoint(ctx context.Context, ep Endpoint, payload []byte, now time.Time) string {
	secrets, err := d.Sealer.endpointSecrets(ep, now)
	if err != nil {
		return err.Error()
	}
	return d.postTo(ctx, ep.URL, payload, secrets)
}

func (d *Deliverer) logEndpointOutcome(ctx context.Context, c claimedDelivery, outcome Outcome, failure string, next time.Time) {
	log := d.log().With("event_id", PublicID(c.EventID), "event_type", c.Type, "endpoint_id", c.EndpointID, "attempt", c.Attempts+1)
	switch outcome {
	case OutcomeDelivered:
		log.InfoContext(ctx, "event delivered to a webhook endpoint")
	case OutcomeRetry:
		log.WarnContext(ctx, "event delivery to a webhook endpoint failed", "error", failure, "next_attempt_at", next)
	case OutcomeDead:
		log.WarnContext(ctx, "event delivery to a webhook endpoint failed for the last time: the delivery is dead", "error", failure)
	}
}

// recordEndpointFailure records a failed attempt of c (claimed with token,
// sent at start) and, in the same transaction, its next attempt's job or,
// after the tenth, the dead alert.
func (d *Deliverer) recordEndpointFailure(ctx context.Context, c claimedDelivery, token uuid.UUID, start time.Time, failure string) (outcome Outcome, next time.Time, err error) {
	err = db.RunInTx(ctx, d.DB, func(ctx context.Context, tx bun.Tx) error {
		outcome, next = OutcomeSkipped, time.Time{}
		attempts := c.Attempts + 1
		q := tx.NewUpdate().Model((*Delivery)(nil)).
			Set("attempts = ?, last_error = ?, claim_token = NULL, claimed_until = NULL, claimed_by = NULL, claimed_at = NULL", attempts, failure).
			Where("event_id = ? AND endpoint_id = ? AND claim_token = ?", c.EventID, c.EndpointID, token)
		if attempts >= MaxAttempts {
			q = q.Set("status = ?, dead_at = ?", StatusDead, d.Now().UTC())
		} else {
			next = start.Add(RetryDelay(attempts))
			q = q.Set("next_attempt_at = ?", next)
		}
		res, err := q.Exec(ctx)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return nil
		}
		if attempts < MaxAttempts {
			outcome = OutcomeRetry
			_, err := d.Inserter.InsertTx(ctx, tx.Tx, EndpointDeliverArgs{EventID: c.EventID, EndpointID: c.EndpointID,
				Attempt: attempts + 1, Cycle: c.Redeliveries}, &river.InsertOpts{ScheduledAt: next})
			return err
		}
		outcome = OutcomeDead
		_, _, err = d.Alerts.Raise(ctx, tx, endpointDeadAlert(c, failure))
		return err
	})
	return outcome, next, err
}

// endpointDeadAlert is the operator alert of a delivery to an endpoint
// gone dead: the event's alert type, one per delivery and redelivery
// cycle.
func endpointDeadAlert(c claimedDelivery, failure string) alert.Params {
	subject := fmt.Sprintf("%s endpoint %s", PublicID(c.EventID), c.EndpointID)
	if c.Redeliveries > 0 {
		subject = fmt.Sprintf("%s redelivery %d", subject, c.Redeliveries)
	}
	return alert.Params{
		Type:    AlertDead,
		Subject: subject,
		Detail: fmt.Sprintf("event %s (%s, raw id %s) was not delivered to webhook endpoint %s after %d attempts; last error: %s. "+
			"Fix the receiver, then redeliver it: POST /v1/admin/events/%s/redeliver {\"endpoint_id\": \"%s\"}",
			PublicID(c.EventID), c.Type, c.EventID, c.EndpointID, MaxAttempts, failure, c.EventID, c.EndpointID),
	}
}

// releaseEndpointClaims hands back every delivery claim token holds, as
// release does for events.
func (d *Deliverer) releaseEndpointClaims(ctx context.Context, token uuid.UUID) {
	d.releaseClaims(ctx, func(ctx context.Context) error {
		_, err := d.DB.NewUpdate().Model((*Delivery)(nil)).
			Set("claim_token = NULL, claimed_until = NULL, claimed_by = NULL, claimed_at = NULL").
			Where("claim_token = ?", token).Exec(ctx)
		return err
	}, func(err error) {
		d.log().WarnContext(ctx, "endpoint delivery claims not released; they expire by themselves", "error", err)
	})
}

// releaseDeadEndpointClaims is ReleaseDeadClaims for endpoint deliveries,
// inside its transaction: it frees the claims of workers found dead and
// queues the next attempt of each pending delivery it frees.
func (d *Deliverer) releaseDeadEndpointClaims(ctx context.Context, tx bun.Tx, grace time.Duration) (int, error) {
	var freed []Delivery
	err := tx.NewRaw(`UPDATE public.webhook_deliveries x
   SET claim_token = NULL, claimed_until = NULL, claimed_by = NULL, claimed_at = NULL
 WHERE x.claim_token IS NOT NULL AND x.claimed_by IS NOT NULL AND x.claimed_at < ?
   AND `+queue.WorkerDeadSQL("x.claimed_by")+`
RETURNING x.event_id, x.endpoint_id, x.status, x.attempts, x.redeliveries`, d.Now().UTC().Add(-grace)).Scan(ctx, &freed)
	if err != nil && !db.IsNoRows(err) {
		return 0, err
	}
	for _, x := range freed {
		if x.Status != StatusPending {
			continue
		}
		if _, err := d.Inserter.InsertTx(ctx, tx.Tx, EndpointDeliverArgs{EventID: x.EventID, EndpointID: x.EndpointID,
			Attempt: x.Attempts + 1, Cycle: x.Redeliveries}, nil); err != nil {
			return 0, err
		}
	}
	return len(freed), nil
}

// sweepEndpoints is Sweep for endpoint deliveries: a job for every pending
// delivery that is due, not held, whose endpoint is enabled, and whose
// event no live wake job names (that job attempts it).
func (d *Deliverer) sweepEndpoints(ctx context.Context, now time.Time) (int, error) {
	queued := 0
	var (
		afterAt        time.Time
		afterE, afterW uuid.UUID
	)
	for {
		var due []Delivery
		q := d.DB.NewSelect().Model(&due).Column("event_id", "endpoint_id", "attempts", "redeliveries", "next_attempt_at").
			Where("status = ? AND next_attempt_at <= ?", StatusPending, now).
			Where("(claimed_until IS NULL OR claimed_until <= ?)", now).
			Where("endpoint_id IN (SELECT id FROM public.webhook_endpoints WHERE NOT disabled)").
			Where(`event_id NOT IN (SELECT x.id::uuid FROM river_job j,
     jsonb_array_elements_text(CASE jsonb_typeof(j.args->'event_ids') WHEN 'array' THEN j.args->'event_ids' END) AS x (id)
   WHERE j.state IN (?) AND j.kind = ? AND x.id IS NOT NULL)`, bun.In(queue.LiveStates), DeliverBatchArgs{}.Kind()).
			OrderExpr("next_attempt_at, event_id, endpoint_id").Limit(sweepBatch)
		if !afterAt.IsZero() {
			q = q.Where("(next_attempt_at, event_id, endpoint_id) > (?, ?, ?)", afterAt, afterE, afterW)
		}
		if err := q.Scan(ctx); err != nil {
			return queued, fmt.Errorf("sweep endpoint deliveries: %w", err)
		}
		if len(due) == 0 {
			return queued, nil
		}
		jobs := make([]river.JobArgs, len(due))
		for i, x := range due {
			jobs[i] = EndpointDeliverArgs{EventID: x.EventID, EndpointID: x.EndpointID, Attempt: x.Attempts + 1, Cycle: x.Redeliveries}
		}
		n, err := d.queueJobs(ctx, jobs)
		if err != nil {
			return queued, fmt.Errorf("sweep endpoint deliveries: queue jobs: %w", err)
		}
		queued += n
		last := due[len(due)-1]
		afterAt, afterE, afterW = last.NextAttemptAt, last.EventID, last.EndpointID
		if len(due) < sweepBatch {
			return queued, nil
		}
	}
}

// EndpointDeliverArgs wakes one attempt of one event's delivery to one
// endpoint. Attempt and Cycle are not state (the worker reads the row):
// they make the job unique per attempt.
type EndpointDeliverArgs struct {
	EventID    uuid.UUID `json:"event_id"`
	EndpointID uuid.UUID `json:"endpoint_id"`
	Attempt    int       `json:"attempt"`
	Cycle      int       `json:"cycle"`
}

// Kind is the job kind.
func (EndpointDeliverArgs) Kind() string { return "webhook_delivery" }

// InsertOpts makes the jobs unique by their arguments among live jobs.
func (EndpointDeliverArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true, ByState: queue.LiveStates}}
}

// EndpointDeliverWorker runs the endpoint delivery jobs.
type EndpointDeliverWorker struct {
	river.WorkerDefaults[EndpointDeliverArgs]
	Deliverer *Deliverer
}

// Work makes one attempt of the job's delivery.
func (w *EndpointDeliverWorker) Work(ctx context.Context, job *river.Job[EndpointDeliverArgs]) error {
	_, err := w.Deliverer.AttemptEndpoints(ctx, []uuid.UUID{job.Args.EventID}, job.Args.EndpointID, lastAttempter(job.AttemptedBy))
	return err
}

// Timeout leaves the HTTP timeout room to expire first.
func (w *EndpointDeliverWorker) Timeout(*river.Job[EndpointDeliverArgs]) time.Duration {
	return w.Deliverer.timeout() + claimMargin
}

// attemptAll makes the attempts a wake or an event's job stands for: the
// events' own (def) and their endpoint deliveries, side by side, so that
// the job ends within one HTTP timeout.
func (d *Deliverer) attemptAll(ctx context.Context, ids []uuid.UUID, worker string, def func(context.Context) error) error {
	var (
		wg     sync.WaitGroup
		epsErr error
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, epsErr = d.AttemptEndpoints(ctx, ids, uuid.Nil, worker)
	}()
	err := def(ctx)
	wg.Wait()
	if err != nil {
		return err
	}
	return epsErr
}
