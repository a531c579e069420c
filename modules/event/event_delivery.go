package event

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	neturl "net/url"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/google/uuid"
	"github.com/riverqueue/river"
	"github.com/uptrace/bun"

	"svc/modules/alert"
	"svc/platform/db"
	"svc/platform/logging"
	"svc/platform/queue"
	"svc/platform/webhooksig"
)

// retryDelays are the waits after failed attempts 1 to 5 (SPEC "Events");
// every later failure waits retryDelayAfter.
var retryDelays = [...]time.Duration{time.Minute, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour, 6 * time.Hour}

const retryDelayAfter = 12 * time.Hour

// RetryDelay is how long after failed attempt n (1-based) the next attempt
// is due: 1m, 5m, 30m, 2h, 6h, then 12h.
func RetryDelay(n int) time.Duration {
	if n < 1 {
		n = 1
	}
	if n <= len(retryDelays) {
		return retryDelays[n-1]
	}
	return retryDelayAfter
}

// maxResponseBytes caps how much of a receiver's response is read.
const maxResponseBytes = 4 << 10

// maxErrorRunes caps the response excerpt kept in last_error.
const maxErrorRunes = 300

// claimMargin is added to the HTTP timeout to bound a claim: a worker that
// died mid-attempt holds the event no longer than this.
const claimMargin = time.Minute

// UserAgent is sent with every delivery.
const UserAgent = "svc-webhooks/1"

// AlertRaiser raises operator alerts (alert.Service).
type AlertRaiser interface {
	Raise(ctx context.Context, idb bun.IDB, p alert.Params) (alert.Alert, bool, error)
}

// Deliverer sends events to the platform.
type Deliverer struct {
	DB       bun.IDB
	Inserter queue.Inserter
	Alerts   AlertRaiser
	Now      func() time.Time
	Log      *slog.Logger
	// URL receives the events (PLATFORM_WEBHOOK_URL); empty keeps them
	// pending without spending attempts.
	URL string
	// Secret keys the signature (PLATFORM_WEBHOOK_SECRET).
	Secret []byte
	// PreviousSecret, during a rotation, keys a second v1 signature
	// (PLATFORM_WEBHOOK_SECRET_PREVIOUS), so receivers still holding it
	// keep verifying until they switch.
	PreviousSecret []byte
	// Timeout bounds one attempt (PLATFORM_WEBHOOK_TIMEOUT); zero means
	// DefaultTimeout.
	Timeout time.Duration
	// Client sends the requests; nil uses NewHTTPClient(Timeout).
	Client *http.Client
	// Sealer opens the webhook endpoints' signing secrets; nil fails
	// every endpoint delivery (the failure is recorded and retried).
	Sealer *Sealer

	once sync.Once
}

// NewHTTPClient returns the client deliveries use: bounded by timeout, and
// never following a redirect (a 3xx is a failed attempt). It keeps as many
// idle connections to a host as a batch sends to it at once
// (batchSenders): with the transport's default of two, every batch of
// AttemptBatch dialled (and, to an https URL, handshook) all but two of
// its connections again and closed them after. In BenchmarkHTTPTransfers
// the dialling was a fifth of the worker's CPU (its profile,
// docs/performance.md).
func NewHTTPClient(timeout time.Duration) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = batchSenders
	return &http.Client{
		Timeout:   timeout,
		Transport: tr,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// DefaultTimeout bounds an attempt when Deliverer.Timeout is not set.
const DefaultTimeout = 10 * time.Second

func (d *Deliverer) timeout() time.Duration {
	if d.Timeout <= 0 {
		return DefaultTimeout
	}
	return d.Timeout
}

// Outcome is what one call of Attempt did.
type Outcome string

// The outcomes.
const (
	OutcomeNoURL     Outcome = "no_url"    // no URL configured: nothing sent, nothing spent
	OutcomeSkipped   Outcome = "skipped"   // not pending, not yet due, or another attempt holds it
	OutcomeDelivered Outcome = "delivered" // a 2xx
	OutcomeRetry     Outcome = "retry"     // failed; the next attempt is scheduled
	OutcomeDead      Outcome = "dead"      // the tenth failure
)

// Attempt makes one delivery attempt of the event if it is pending and due,
// and records its outcome. It is safe to call at any time and concurrently:
// only a caller that claims the event sends it.
func (d *Deliverer) Attempt(ctx context.Context, id uuid.UUID) (Outcome, error) {
	return d.AttemptAs(ctx, id, "")
}

// AttemptAs is Attempt by the worker whose River client ID is worker: its
// claim on the event names it, so that once the worker is found dead the
// claim is freed at once (ReleaseDeadClaims) instead of lapsing. An empty
// worker names none.
func (d *Deliverer) AttemptAs(ctx context.Context, id uuid.UUID, worker string) (Outcome, error) {
	if d.URL == "" {
		return OutcomeNoURL, nil
	}
	// Microseconds: what PostgreSQL keeps, so next_attempt_at is exactly
	// the attempt's start plus the delay.
	start := d.Now().UTC().Truncate(time.Microsecond)
	token := uuid.New()
	var e Event
	err := db.QueryModel(ctx, d.DB, &e, `UPDATE outbound_events
   SET claim_token = $1, claimed_until = $2, claimed_by = NULLIF($6, ''), claimed_at = $5
 WHERE id = $3 AND status = $4 AND next_attempt_at <= $5 AND (claimed_until IS NULL OR claimed_until <= $5)
RETURNING `+eventColumns, token, start.Add(d.timeout()+claimMargin), id, string(StatusPending), start, worker)
	if db.IsNoRows(err) {
		return OutcomeSkipped, nil
	}
	if err != nil {
		return "", fmt.Errorf("claim event %s: %w", id, err)
	}

	failure := d.post(ctx, e.Payload)
	if ctx.Err() != nil {
		// The worker is stopping: not the receiver's fault, so no attempt
		// is spent. Let the job's retry (or the sweep) try again at once.
		d.release(ctx, id, token)
		return "", fmt.Errorf("deliver event %s: %w", id, ctx.Err())
	}

	var (
		outcome Outcome
		next    time.Time
	)
	if failure == "" {
		outcome, err = d.recordDelivered(ctx, id, token)
	} else {
		outcome, next, err = d.recordFailure(ctx, e, token, start, failure)
	}
	if err != nil {
		// The outcome could not be recorded: the database went away
		// mid-attempt (a restart, a failover to a standby) or refused the
		// write. The claim would keep the event from every attempt until
		// it expires (timeout plus claimMargin, a minute and more): hand
		// it back, so the job's retry attempts again as soon as the
		// database answers. The platform may get the event twice, as after
		// any lost answer; it deduplicates on the event id.
		d.release(ctx, id, token)
		return "", fmt.Errorf("record delivery of event %s: %w", id, err)
	}
	d.logOutcome(ctx, e, outcome, failure, next)
	return outcome, nil
}

func (d *Deliverer) logOutcome(ctx context.Context, e Event, outcome Outcome, failure string, next time.Time) {
	log := d.log().With("event_id", e.PublicID(), "event_type", e.Type, "attempt", e.Attempts+1)
	switch outcome {
	case OutcomeDelivered:
		log.InfoContext(ctx, "event delivered")
	case OutcomeRetry:
		log.WarnContext(ctx, "event delivery failed", "error", failure, "next_attempt_at", next)
	case OutcomeDead:
		log.WarnContext(ctx, "event delivery failed for the last time: event is dead", "error", failure)
	}
}

// batchSenders bounds how many of a batch's requests are in flight at once.
const batchSenders = 16

// AttemptBatch makes one attempt for each event of ids that is pending,
// due and not held by another attempt, as AttemptAs does for one, with the
// statements shared: the claims in one statement (one token for the
// batch), the requests side by side (at most batchSenders at once), and
// the deliveries recorded in one statement; each failure is recorded as
// AttemptAs records it, with its next attempt's job, counted from its own
// send. An event that is not claimable is skipped. When ctx ends first
// (the job's timeout, the worker stopping), the sends already answered are
// recorded all the same and those cut short are handed back without
// spending an attempt, for the job's retry. It returns how many events had
// each outcome.
func (d *Deliverer) AttemptBatch(ctx context.Context, ids []uuid.UUID, worker string) (map[Outcome]int, error) {
	if d.URL == "" {
		return map[Outcome]int{OutcomeNoURL: len(ids)}, nil
	}
	if len(ids) == 0 {
		return map[Outcome]int{}, nil
	}
	start := d.Now().UTC().Truncate(time.Microsecond)
	token := uuid.New()
	var claimed []Event
	// The rows are taken in id order, and any that another claim is taking
	// is skipped (that claim sends it): two batches naming the same events
	// (a wake and a rescued or retried one) never wait on each other, so
	// they cannot deadlock (TestConcurrentBatchesSendOnce).
	err := d.DB.NewRaw(`UPDATE outbound_events
   SET claim_token = ?, claimed_until = ?, claimed_by = NULLIF(?, ''), claimed_at = ?
 WHERE id IN (SELECT id FROM outbound_events
               WHERE id IN (?) AND status = ? AND next_attempt_at <= ? AND (claimed_until IS NULL OR claimed_until <= ?)
               ORDER BY id FOR UPDATE SKIP LOCKED)
RETURNING `+eventColumns, token, start.Add(d.timeout()+claimMargin), worker, start,
		bun.In(ids), string(StatusPending), start, start).Scan(ctx, &claimed)
	if err != nil && !db.IsNoRows(err) {
		return nil, fmt.Errorf("claim %d events: %w", len(ids), err)
	}
	outcomes := map[Outcome]int{}
	if n := len(ids) - len(claimed); n > 0 {
		outcomes[OutcomeSkipped] = n
	}
	if len(claimed) == 0 {
		return outcomes, nil
	}

	// Each send keeps its own start (the retry schedule counts from it)
	// and whether it ended before ctx did: one cut short by the job's end
	// (its timeout, the worker stopping) spends no attempt.
	sends := d.sendAll(ctx, len(claimed), func(ctx context.Context, i int, _ time.Time) string {
		return d.post(ctx, claimed[i].Payload)
	})
	stopped := ctx.Err()
	if stopped != nil {
		// Record what was answered, on a context of its own, bounded.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), releaseWithin)
		defer cancel()
	}

	// The failures first, each with its next attempt (as AttemptAs), then
	// the deliveries in one statement; whatever the batch still holds
	// after that (sends cut short, outcomes not recorded) is handed back
	// at the end, so that the job's retry or the sweep attempts it again.
	var (
		delivered []uuid.UUID
		firstErr  error
		unheld    bool
	)
	for i, e := range claimed {
		sd := sends[i]
		switch {
		case !sd.done:
			unheld = true
		case sd.failure == "":
			delivered = append(delivered, e.ID)
		default:
			outcome, next, err := d.recordFailure(ctx, e, token, sd.start, sd.failure)
			if err != nil {
				unheld = true
				d.log().ErrorContext(ctx, "event delivery failed and the failure not recorded: its claim is handed back",
					"event_id", e.PublicID(), "error", err)
				if firstErr == nil {
					firstErr = fmt.Errorf("record delivery of event %s: %w", e.ID, err)
				}
				continue
			}
			outcomes[outcome]++
			d.logOutcome(ctx, e, outcome, sd.failure, next)
		}
	}
	if len(delivered) > 0 {
		var got []uuid.UUID
		err := d.DB.NewRaw(`UPDATE outbound_events
   SET status = ?, attempts = attempts + 1, delivered_at = ?, last_error = NULL,
       claim_token = NULL, claimed_until = NULL, claimed_by = NULL, claimed_at = NULL
 WHERE id IN (?) AND claim_token = ?
RETURNING id`, string(StatusDelivered), d.Now().UTC(), bun.In(delivered), token).Scan(ctx, &got)
		if err != nil && !db.IsNoRows(err) {
			unheld = true
			d.log().ErrorContext(ctx, "events delivered but their deliveries not recorded: their claims are handed back and they are sent again",
				"events", len(delivered), "error", err)
			if firstErr == nil {
				firstErr = fmt.Errorf("record delivery of %d events: %w", len(delivered), err)
			}
		} else {
			recorded := make(map[uuid.UUID]bool, len(got))
			for _, id := range got {
				recorded[id] = true
			}
			for i, e := range claimed {
				if sends[i].done && sends[i].failure == "" {
					outcome := OutcomeSkipped // the claim expired and another attempt took the event over
					if recorded[e.ID] {
						outcome = OutcomeDelivered
					}
					outcomes[outcome]++
					d.logOutcome(ctx, e, outcome, "", time.Time{})
				}
			}
		}
	}
	if unheld {
		d.release(ctx, uuid.Nil, token)
	}
	if stopped != nil {
		return outcomes, fmt.Errorf("deliver %d events: %w", len(claimed), stopped)
	}
	return outcomes, firstErr
}

// send is what came of one send of a batch: its start (the retry schedule
// counts from it), why it failed ("" for a 2xx), and whether it ended
// before ctx did (one cut short by the job's end spends no attempt).
type send struct {
	start   time.Time
	failure string
	done    bool
}

// sendAll runs post for the n sends of a batch side by side, at most
// batchSenders at once, each with its own start; those ctx ends before
// they start are not sent (done false).
func (d *Deliverer) sendAll(ctx context.Context, n int, post func(ctx context.Context, i int, start time.Time) string) []send {
	sends := make([]send, n)
	sem := make(chan struct{}, batchSenders)
	var wg sync.WaitGroup
	for i := range n {
		if ctx.Err() != nil {
			break // not sent: handed back by the caller
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			st := d.Now().UTC().Truncate(time.Microsecond)
			f := post(ctx, i, st)
			sends[i] = send{start: st, failure: f, done: ctx.Err() == nil}
		}()
	}
	wg.Wait()
	return sends
}

// recordDelivered records the delivery of event id by the attempt holding
// token, in one statement with real parameters (db.Exec): no transaction
// around it, which would cost two more round trips for every event
// delivered. OutcomeSkipped when the claim expired and another attempt
// took the event over.
func (d *Deliverer) recordDelivered(ctx context.Context, id, token uuid.UUID) (Outcome, error) {
	res, err := db.Exec(ctx, d.DB, `UPDATE outbound_events
   SET status = $1, attempts = attempts + 1, delivered_at = $2, last_error = NULL,
       claim_token = NULL, claimed_until = NULL, claimed_by = NULL, claimed_at = NULL
 WHERE id = $3 AND claim_token = $4`, string(StatusDelivered), d.Now().UTC(), id, token)
	if err != nil {
		return "", err
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return OutcomeSkipped, nil
	}
	return OutcomeDelivered, nil
}

// recordFailure records the failed attempt on event e (as claimed with
// token at start) and, in the same transaction, the job of the next
// attempt due at next, or the dead alert after the last one.
// OutcomeSkipped when the claim expired and another attempt took the
// event over.
func (d *Deliverer) recordFailure(ctx context.Context, e Event, token uuid.UUID, start time.Time, failure string) (outcome Outcome, next time.Time, err error) {
	err = db.RunInTx(ctx, d.DB, func(ctx context.Context, tx bun.Tx) error {
		outcome, next = OutcomeSkipped, time.Time{}
		attempts := e.Attempts + 1
		q := tx.NewUpdate().Model((*Event)(nil)).
			Set("attempts = ?, last_error = ?, claim_token = NULL, claimed_until = NULL, claimed_by = NULL, claimed_at = NULL", attempts, failure).
			Where("id = ? AND claim_token = ?", e.ID, token)
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
			return nil // the claim expired and another attempt took the event over
		}
		if attempts < MaxAttempts {
			outcome = OutcomeRetry
			_, err := d.Inserter.InsertTx(ctx, tx.Tx, DeliverArgs{EventID: e.ID, Attempt: attempts + 1, Cycle: e.Redeliveries},
				&river.InsertOpts{ScheduledAt: next})
			return err
		}
		outcome = OutcomeDead
		_, _, err = d.Alerts.Raise(ctx, tx, deadAlert(e, failure))
		return err
	})
	return outcome, next, err
}

func deadAlert(e Event, failure string) alert.Params {
	subject := e.PublicID()
	if e.Redeliveries > 0 {
		// Each redelivery cycle that dies is its own alert.
		subject = fmt.Sprintf("%s redelivery %d", subject, e.Redeliveries)
	}
	return alert.Params{
		Type:    AlertDead,
		Subject: subject,
		Detail: fmt.Sprintf("event %s (%s, raw id %s) was not delivered after %d attempts; last error: %s. "+
			"Fix the receiver, then redeliver it: svc admin events redeliver %s",
			e.PublicID(), e.Type, e.ID, MaxAttempts, failure, e.ID),
	}
}

// post sends payload once to the platform's URL and returns "" on a 2xx
// or why the attempt failed.
func (d *Deliverer) post(ctx context.Context, payload []byte) string {
	secrets := [][]byte{d.Secret}
	if len(d.PreviousSecret) > 0 {
		secrets = append(secrets, d.PreviousSecret)
	}
	return d.postTo(ctx, d.URL, payload, secrets)
}

// postTo sends payload once to url, signed with each of secrets (one v1
// each, the first the current one), and returns "" on a 2xx or why the
// attempt failed.
func (d *Deliverer) postTo(ctx context.Context, url string, payload []byte, secrets [][]byte) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(payload))
	if err != nil {
		return "cannot build the request: " + err.Error()
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", UserAgent)
	req.Header.Set(webhooksig.Header, webhooksig.Sign(secrets[0], d.Now(), payload, secrets[1:]...))
	d.once.Do(func() {
		if d.Client == nil {
			d.Client = NewHTTPClient(d.timeout())
		}
	})
	resp, err := d.Client.Do(req)
	if err != nil {
		var ue *neturl.Error
		if errors.As(err, &ue) {
			if ue.Timeout() {
				return fmt.Sprintf("timeout: no answer within %s", d.timeout())
			}
			err = ue.Err // the URL may carry credentials: keep it out of last_error
		}
		return "request failed: " + err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	switch c := resp.StatusCode; {
	case c >= 200 && c < 300:
		return ""
	case c >= 300 && c < 400:
		return fmt.Sprintf("HTTP %d: redirect to %q not followed", c, excerpt([]byte(resp.Header.Get("Location"))))
	default:
		return fmt.Sprintf("HTTP %d: %s", c, excerpt(body))
	}
}

// excerpt makes b safe and short enough to keep in last_error.
func excerpt(b []byte) string {
	s := strings.Map(func(r rune) rune {
		if r == 0 || (unicode.IsControl(r) && r != ' ') {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(string(b), "\uFFFD"))
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > maxErrorRunes {
		s = string(r[:maxErrorRunes]) + "…"
	}
	return s
}

// releaseWithin bounds how long release keeps trying while the database
// does not answer: long enough for a failover tool to promote a standby,
// short of the delivery job's own timeout.
const releaseWithin = 15 * time.Second

// release hands back the claim token holds on the event id (uuid.Nil:
// every event token holds, a batch's), trying again
// every releaseEvery for up to releaseWithin (5 s when ctx is done: the
// worker is stopping) while the database does not take it. A claim it
// cannot release expires by itself.
func (d *Deliverer) release(ctx context.Context, id, token uuid.UUID) {
	d.releaseClaims(ctx, func(ctx context.Context) error {
		q := d.DB.NewUpdate().Model((*Event)(nil)).Set("claim_token = NULL, claimed_until = NULL, claimed_by = NULL, claimed_at = NULL").
			Where("claim_token = ?", token)
		if id != uuid.Nil {
			q = q.Where("id = ?", id)
		}
		_, err := q.Exec(ctx)
		return err
	}, func(err error) {
		if id == uuid.Nil {
			d.log().WarnContext(ctx, "a batch's event claims not released; they expire by themselves", "error", err)
		} else {
			d.log().WarnContext(ctx, "event claim not released; it expires by itself", "event_id", PublicID(id), "error", err)
		}
	})
}

// releaseClaims runs free, the statement that hands claims back, again
// every releaseEvery for up to releaseWithin (5 s when ctx is done) while
// the database does not take it, and then tells gaveUp the last error.
func (d *Deliverer) releaseClaims(ctx context.Context, free func(context.Context) error, gaveUp func(error)) {
	within := releaseWithin
	if ctx.Err() != nil {
		within = 5 * time.Second
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), within)
	defer cancel()
	for {
		err := free(rctx)
		if err == nil {
			return
		}
		select {
		case <-rctx.Done():
			gaveUp(err)
			return
		case <-time.After(releaseEvery):
		}
	}
}

const releaseEvery = 250 * time.Millisecond

// ReleaseDeadClaims frees the claims on events held by workers found dead
// (queue.WorkerDeadSQL: the worker's liveness lock is gone) and taken more
// than grace ago, and queues a delivery job for each pending event it
// frees, in one transaction. It runs on every pass of a live worker's
// queue.DeadWorkerRescue, before the dead worker's jobs are handed back:
// an event whose delivery was in flight when its worker died is sent again
// within seconds, by the job handed back, rather than once its claim
// lapses (the HTTP timeout plus a minute) and the next Sweep finds it. The
// receiver may get the event twice, as after any attempt whose answer was
// lost; it deduplicates on the event id. It returns how many claims it
// freed.
func (d *Deliverer) ReleaseDeadClaims(ctx context.Context, grace time.Duration) (int64, error) {
	var (
		freed    []Event
		freedEps int
	)
	err := db.RunInTx(ctx, d.DB, func(ctx context.Context, tx bun.Tx) error {
		freed = nil
		var err error
		// The endpoint deliveries' claims too (webhook_deliveries).
		if freedEps, err = d.releaseDeadEndpointClaims(ctx, tx, grace); err != nil {
			return err
		}
		err = tx.NewRaw(`UPDATE public.outbound_events e
   SET claim_token = NULL, claimed_until = NULL, claimed_by = NULL, claimed_at = NULL
 WHERE e.claim_token IS NOT NULL AND e.claimed_by IS NOT NULL AND e.claimed_at < ?
   AND `+queue.WorkerDeadSQL("e.claimed_by")+`
RETURNING e.id, e.status, e.attempts, e.redeliveries`, d.Now().UTC().Add(-grace)).Scan(ctx, &freed)
		if err != nil && !db.IsNoRows(err) {
			return err
		}
		if d.URL == "" {
			return nil
		}
		for _, e := range freed {
			if e.Status != StatusPending {
				continue
			}
			if _, err := d.Inserter.InsertTx(ctx, tx.Tx, DeliverArgs{EventID: e.ID, Attempt: e.Attempts + 1, Cycle: e.Redeliveries}, nil); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("release dead workers' event claims: %w", err)
	}
	for _, e := range freed {
		d.log().WarnContext(ctx, "event claim of a dead worker released: its delivery is sent again", "event_id", e.PublicID())
	}
	if freedEps > 0 {
		d.log().WarnContext(ctx, "endpoint delivery claims of a dead worker released: they are sent again", "count", freedEps)
	}
	return int64(len(freed) + freedEps), nil
}

// sweepBatch is how many due events one sweep transaction enqueues.
const sweepBatch = 500

// Sweep queues a delivery job for every pending event that is due and not
// held by an attempt, unless it already has a live job or a live wake job
// names it. It is how the backlog of events written while no URL was
// configured drains, and how an
// event whose job was lost (an attempt that died, a database error after
// the claim) is picked up again. It returns how many jobs it queued. The
// endpoint deliveries and the platform URL's are swept independently: an
// error in one does not keep the other from running (the errors are
// joined).
func (d *Deliverer) Sweep(ctx context.Context) (int, error) {
	now := d.Now().UTC()
	// The endpoint deliveries, whatever the platform's URL.
	queued, epErr := d.sweepEndpoints(ctx, now)
	if d.URL == "" {
		return queued, epErr
	}
	n, err := d.sweepPlatform(ctx, now)
	return queued + n, errors.Join(epErr, err)
}

// sweepPlatform queues a delivery job to the platform URL for every due
// pending event (Sweep).
func (d *Deliverer) sweepPlatform(ctx context.Context, now time.Time) (int, error) {
	queued := 0
	var (
		afterAt time.Time
		afterID uuid.UUID
	)
	for {
		var due []Event
		q := d.DB.NewSelect().Model(&due).Column("id", "attempts", "redeliveries", "next_attempt_at").
			Where("status = ? AND next_attempt_at <= ?", StatusPending, now).
			Where("(claimed_until IS NULL OR claimed_until <= ?)", now).
			// Not one a live wake job names: behind a backlog of wake
			// jobs, a job of its own would only be a second job for it
			// (the claim lets one send). The live jobs are read once,
			// through River's index on state: completed ones, kept a
			// day, are never scanned. A job whose event_ids is no array
			// names nothing.
			Where(`"event"."id" NOT IN (SELECT x.id::uuid FROM river_job j,
     jsonb_array_elements_text(CASE jsonb_typeof(j.args->'event_ids') WHEN 'array' THEN j.args->'event_ids' END) AS x (id)
   WHERE j.state IN (?) AND j.kind = ? AND x.id IS NOT NULL)`, bun.In(queue.LiveStates), DeliverBatchArgs{}.Kind()).
			OrderExpr("next_attempt_at, id").Limit(sweepBatch)
		if !afterAt.IsZero() {
			q = q.Where("(next_attempt_at, id) > (?, ?)", afterAt, afterID)
		}
		if err := q.Scan(ctx); err != nil {
			return queued, fmt.Errorf("sweep events: %w", err)
		}
		if len(due) == 0 {
			return queued, nil
		}
		jobs := make([]river.JobArgs, len(due))
		for i, e := range due {
			jobs[i] = DeliverArgs{EventID: e.ID, Attempt: e.Attempts + 1, Cycle: e.Redeliveries}
		}
		n, err := d.queueJobs(ctx, jobs)
		if err != nil {
			return queued, fmt.Errorf("sweep events: queue jobs: %w", err)
		}
		queued += n
		last := due[len(due)-1]
		afterAt, afterID = last.NextAttemptAt, last.ID
		if len(due) < sweepBatch {
			return queued, nil
		}
	}
}

// queueJobs inserts a sweep's jobs in one transaction and returns how
// many were new (a job unique by its arguments that is already live is
// not queued twice).
func (d *Deliverer) queueJobs(ctx context.Context, jobs []river.JobArgs) (int, error) {
	n := 0
	err := db.RunInTx(ctx, d.DB, func(ctx context.Context, tx bun.Tx) error {
		n = 0
		for _, j := range jobs {
			res, err := d.Inserter.InsertTx(ctx, tx.Tx, j, nil)
			if err != nil {
				return err
			}
			if !res.UniqueSkippedAsDuplicate {
				n++
			}
		}
		return nil
	})
	return n, err
}

func (d *Deliverer) log() *slog.Logger { return logging.Or(d.Log) }

// DeliverWorker runs delivery jobs.
type DeliverWorker struct {
	river.WorkerDefaults[DeliverArgs]
	Deliverer *Deliverer
}

// Work makes one attempt for the job's event, and for its endpoint
// deliveries that are due (AttemptEndpoints).
func (w *DeliverWorker) Work(ctx context.Context, job *river.Job[DeliverArgs]) error {
	worker := lastAttempter(job.AttemptedBy)
	return w.Deliverer.attemptAll(ctx, []uuid.UUID{job.Args.EventID}, worker, func(ctx context.Context) error {
		_, err := w.Deliverer.AttemptAs(ctx, job.Args.EventID, worker)
		return err
	})
}

// lastAttempter is the River client that runs a job's current attempt
// (this process's), the last of its AttemptedBy: what a claim names.
func lastAttempter(attemptedBy []string) string {
	if n := len(attemptedBy); n > 0 {
		return attemptedBy[n-1]
	}
	return ""
}

// Timeout leaves the HTTP timeout room to expire first.
func (w *DeliverWorker) Timeout(*river.Job[DeliverArgs]) time.Duration {
	return w.Deliverer.timeout() + claimMargin
}

// SweepEvery is how often the sweep runs (and once when a worker starts).
const SweepEvery = time.Minute

// SweepArgs asks for a sweep.
type SweepArgs struct{}

// Kind is the job kind.
func (SweepArgs) Kind() string { return "event_sweep" }

// SweepWorker runs sweeps.
type SweepWorker struct {
	river.WorkerDefaults[SweepArgs]
	Deliverer *Deliverer
}

// Work sweeps.
func (w *SweepWorker) Work(ctx context.Context, _ *river.Job[SweepArgs]) error {
	n, err := w.Deliverer.Sweep(ctx)
	if n > 0 {
		w.Deliverer.log().InfoContext(ctx, "queued due events for delivery", "count", n)
	}
	return err
}
