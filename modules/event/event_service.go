package event

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/riverqueue/river"
	"github.com/uptrace/bun"

	"svc/modules/audit"
	"svc/modules/operator"
	"svc/platform/db"
	"svc/platform/fault"
	"svc/platform/queue"
	"svc/platform/timefmt"
)

// Service writes events into the outbox and lets operators read and
// redeliver them.
type Service struct {
	DB       bun.IDB
	Inserter queue.Inserter
	Now      func() time.Time
	// Replica serves the operators' list (GET /v1/admin/events), whose
	// answer may lag the primary by up to DATABASE_READ_MAX_LAG; nil reads
	// DB. The Events API (Feed) always reads DB: a consumer goes on from an
	// event id a webhook just gave it, and the stream's order rests on the
	// primary's snapshots (see listed).
	Replica *db.Replica
	// Operators authorizes a redelivery (RedeliverExpect); nil acts
	// unsigned, as the caller's actor.
	Operators *operator.Service
	// Waker, when set, wakes the delivery of an event that a transaction
	// of db.RunInTx or db.BatchTx commits, in place of a job of its own in
	// that transaction (event_wake.go); nil gives every event its job.
	Waker *Waker
}

// envelope is the body of a delivery. Its field order is the order on the
// wire.
type envelope struct {
	ID        string `json:"id"`
	Type      Type   `json:"type"`
	CreatedAt string `json:"created_at"`
	Data      Data   `json:"data"`
}

// Emit writes an event of type typ with data (the Data struct of that type,
// or a pointer to it) inside tx, the transaction of the state change it
// reports, and queues its delivery (QueueDelivery). If tx rolls back,
// neither the event nor its delivery exists.
func (s *Service) Emit(ctx context.Context, tx bun.Tx, typ Type, data any) (Event, error) {
	e, err := s.Prepare(typ, data)
	if err != nil {
		return Event{}, err
	}
	// Real parameters (db.Querier): every state change that reports
	// itself runs this.
	stmt, args := e.RowInsert(1)
	if _, err := db.Exec(ctx, tx, stmt, args...); err != nil {
		return Event{}, fmt.Errorf("emit %s: insert: %w", typ, err)
	}
	if err := s.QueueDelivery(ctx, tx.Tx, e); err != nil {
		return Event{}, err
	}
	return e, nil
}

// Emission is one event of EmitAll: its type and data.
type Emission struct {
	Type Type
	Data any
}

// EmitAll is Emit of several events of one state change: their rows in one
// statement (a multi-row INSERT) instead of one each, in the order given,
// and the delivery of each queued as Emit queues it.
func (s *Service) EmitAll(ctx context.Context, tx bun.Tx, es ...Emission) ([]Event, error) {
	out := make([]Event, len(es))
	var (
		stmt strings.Builder
		args []any
	)
	for i, em := range es {
		e, err := s.Prepare(em.Type, em.Data)
		if err != nil {
			return nil, err
		}
		out[i] = e
		if i == 0 {
			stmt.WriteString(rowInsertHead)
		} else {
			stmt.WriteString(",\n")
		}
		values, rowArgs := e.rowValues(len(args) + 1)
		stmt.WriteString(values)
		args = append(args, rowArgs...)
	}
	if len(out) == 0 {
		return out, nil
	}
	if _, err := db.Exec(ctx, tx, stmt.String(), args...); err != nil {
		return nil, fmt.Errorf("emit %d events: insert: %w", len(out), err)
	}
	for _, e := range out {
		if err := s.QueueDelivery(ctx, tx.Tx, e); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Prepare makes the event Emit would write, with its id, time and payload,
// and writes nothing: for a state change that writes the event's row in a
// statement of its own (RowInsert) and inserts its delivery job with
// QueueDelivery, both in its own transaction, which then holds the outbox's
// guarantee as Emit's does.
func (s *Service) Prepare(typ Type, data any) (Event, error) {
	d, err := checkData(typ, data)
	if err != nil {
		return Event{}, err
	}
	// Time-ordered ids keep the primary key's inserts local.
	id, err := uuid.NewV7()
	if err != nil {
		return Event{}, fmt.Errorf("emit %s: new id: %w", typ, err)
	}
	// Microseconds: what PostgreSQL keeps, so the row and the payload agree.
	now := s.Now().UTC().Truncate(time.Microsecond)
	payload, err := json.Marshal(envelope{ID: PublicID(id), Type: typ, CreatedAt: timefmt.Format(now), Data: d})
	if err != nil {
		return Event{}, fmt.Errorf("emit %s: encode: %w", typ, err)
	}
	return Event{ID: id, Type: typ, Status: StatusPending, NextAttemptAt: now, Payload: payload, CreatedAt: now}, nil
}

// RowInsert is the INSERT of e's outbound_events row, with its parameters
// numbered from $first, and their arguments: a statement of its own, or a
// data-modifying WITH query of a caller's statement.
func (e Event) RowInsert(first int) (string, []any) {
	values, args := e.rowValues(first)
	return rowInsertHead + values, args
}

// rowInsertHead is the INSERT of outbound_events rows up to its VALUES
// lists (rowValues).
const rowInsertHead = `INSERT INTO outbound_events (id, type, status, attempts, next_attempt_at, payload, created_at, redeliveries)
VALUES `

// rowValues is the VALUES list of e's row, with its parameters numbered
// from $first, and their arguments.
func (e Event) rowValues(first int) (string, []any) {
	return fmt.Sprintf(`($%d::uuid, $%d::text, $%d::text, 0, $%d::timestamptz, $%d::json, $%d::timestamptz, 0)`, first, first+1, first+2, first+3, first+4, first+5),
		[]any{e.ID, string(e.Type), string(e.Status), e.NextAttemptAt, []byte(e.Payload), e.CreatedAt}
}

// QueueDelivery queues the first attempt of e, an event of Prepare, whose
// row tx writes (RowInsert): once tx commits, through the Waker when ctx is
// that of a transaction of db.RunInTx or db.BatchTx (db.AfterCommit) and
// the service has one; else with e's own delivery job, inserted on tx.
// Either way the committed row is what guarantees the delivery: the Sweep
// queues a pending event whose wake was lost. (An event inside a sampled
// trace keeps its own job: queue.Waker.Takes.)
func (s *Service) QueueDelivery(ctx context.Context, tx *sql.Tx, e Event) error {
	if w := s.Waker; w.Takes(ctx) && db.AfterCommit(ctx, func() { w.Add(e.ID) }) {
		return nil
	}
	if _, err := s.Inserter.InsertTx(ctx, tx, DeliverArgs{EventID: e.ID, Attempt: 1}, nil); err != nil {
		return fmt.Errorf("emit %s: insert delivery job: %w", e.Type, err)
	}
	return nil
}

// WakeAfter is QueueDelivery for a caller that commits e's row in a
// pipeline of its own (db.Pipeline: one implicit transaction, neither
// RunInTx's nor BatchTx's, so no commit hooks): it returns the function
// that wakes e's first attempt through the Waker, to call only once that
// commit succeeded, and true. It returns false when e needs its own
// delivery job inside its transaction (no Waker, or a sampled trace:
// queue.Waker.Takes), which the caller then inserts with QueueDelivery in
// a transaction. As with QueueDelivery, the committed row is the
// guarantee: a wake lost between the commit and the call is the Sweep's.
func (s *Service) WakeAfter(ctx context.Context, e Event) (func(), bool) {
	w := s.Waker
	if !w.Takes(ctx) {
		return nil, false
	}
	return func() { w.Add(e.ID) }, true
}

// Get returns one event.
func (s *Service) Get(ctx context.Context, id uuid.UUID) (Event, error) {
	var e Event
	err := s.DB.NewSelect().Model(&e).Where("id = ?", id).Scan(ctx)
	if err := db.Found(err, ErrNotFound, "read event %s", id); err != nil {
		return Event{}, err
	}
	return e, nil
}

// ListParams filter List.
type ListParams struct {
	Status Status // empty: every status
	Limit  int    // 1 to 200; 0 means 50
}

// List returns events, newest first.
func (s *Service) List(ctx context.Context, p ListParams) ([]Event, error) {
	return list(ctx, s.DB, p)
}

func list(ctx context.Context, idb bun.IDB, p ListParams) ([]Event, error) {
	if p.Limit <= 0 {
		p.Limit = 50
	}
	out := []Event{}
	q := idb.NewSelect().Model(&out).OrderExpr("created_at DESC, id DESC").Limit(int64(p.Limit))
	if p.Status != "" {
		q = q.Where("status = ?", p.Status)
	}
	if err := q.Scan(ctx); err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	return out, nil
}

// deliveriesOf returns the endpoint deliveries of the events ids, by
// event, each event's in endpoint order.
func deliveriesOf(ctx context.Context, idb bun.IDB, ids []uuid.UUID) (map[uuid.UUID][]Delivery, error) {
	out := map[uuid.UUID][]Delivery{}
	if len(ids) == 0 {
		return out, nil
	}
	var all []Delivery
	if err := idb.NewSelect().Model(&all).Column(strings.Split(deliveryColumns, ", ")...).
		Where("event_id IN (?)", bun.In(ids)).OrderExpr("event_id, endpoint_id").Scan(ctx); err != nil {
		return nil, fmt.Errorf("list endpoint deliveries: %w", err)
	}
	for _, x := range all {
		out[x.EventID] = append(out[x.EventID], x)
	}
	return out, nil
}

// RedeliverEndpointExpect is what an approver signs to redeliver event e
// to one webhook endpoint: RedeliverExpect with the fact endpoint_id.
func RedeliverEndpointExpect(e Event, endpoint uuid.UUID) operator.Expect {
	x := RedeliverExpect(e)
	x.Facts["endpoint_id"] = endpoint.String()
	return x
}

// RedeliverEndpointTx is RedeliverTx for the event's delivery to one
// webhook endpoint: a dead delivery becomes pending, due now, with a fresh
// cycle of MaxAttempts attempts and its job; the event's own delivery and
// its other endpoints' are left as they are. No such delivery (an unknown
// event, or one the endpoint did not take) is ErrNotFound; one that is not
// dead is ErrNotDead. It returns the event and the delivery.
func (s *Service) RedeliverEndpointTx(ctx context.Context, tx bun.Tx, id, endpoint uuid.UUID, actor audit.Actor, sig *operator.Envelope) (Event, Delivery, error) {
	if sig == nil && !actor.Valid() {
		return Event{}, Delivery{}, fmt.Errorf("redeliver event %s: no audit actor", PublicID(id))
	}
	now := s.Now().UTC().Truncate(time.Microsecond)
	var x Delivery
	err := tx.NewUpdate().Model(&x).
		Set("status = ?, attempts = 0, next_attempt_at = ?, dead_at = NULL, redeliveries = redeliveries + 1", StatusPending, now).
		Where("event_id = ? AND endpoint_id = ? AND status = ?", id, endpoint, StatusDead).Returning(deliveryColumns).Scan(ctx)
	if db.IsNoRows(err) {
		var cur Delivery
		switch err := tx.NewSelect().Model(&cur).Column("status").Where("event_id = ? AND endpoint_id = ?", id, endpoint).Scan(ctx); {
		case db.IsNoRows(err):
			return Event{}, Delivery{}, ErrNotFound
		case err != nil:
			return Event{}, Delivery{}, fmt.Errorf("redeliver event %s: %w", id, err)
		}
		return Event{}, Delivery{}, fault.Wrap(fault.Conflict,
			fmt.Sprintf("the delivery of event %s to endpoint %s is %s: only a dead delivery can be redelivered", PublicID(id), endpoint, cur.Status), ErrNotDead)
	}
	if err != nil {
		return Event{}, Delivery{}, fmt.Errorf("redeliver event %s: %w", id, err)
	}
	var e Event
	if err := tx.NewSelect().Model(&e).Column("id", "type").Where("id = ?", id).Scan(ctx); err != nil {
		return Event{}, Delivery{}, fmt.Errorf("redeliver event %s: %w", id, err)
	}
	who, err := s.Operators.Authorize(ctx, tx, actor, sig, RedeliverEndpointExpect(e, endpoint))
	if err != nil {
		return Event{}, Delivery{}, err
	}
	if _, err := s.Inserter.InsertTx(ctx, tx.Tx, EndpointDeliverArgs{EventID: id, EndpointID: endpoint, Attempt: 1, Cycle: x.Redeliveries}, nil); err != nil {
		return Event{}, Delivery{}, fmt.Errorf("redeliver event %s: insert delivery job: %w", id, err)
	}
	if _, err := audit.Record(ctx, tx, now, who, audit.EventRedeliver, e.PublicID(),
		map[string]string{"event_id": e.PublicID(), "endpoint_id": endpoint.String()}); err != nil {
		return Event{}, Delivery{}, err
	}
	return e, x, nil
}

// RedeliverExpect is what an approver signs to redeliver event e: the
// action event.redeliver on the event's evt_ id, with the fact type (the
// event's type).
func RedeliverExpect(e Event) operator.Expect {
	return operator.Expect{Action: audit.EventRedeliver, Resource: e.PublicID(), Facts: map[string]string{"type": string(e.Type)},
		Role: operator.Approver}
}

// Redeliver puts the event back in the queue; see RedeliverTx.
func (s *Service) Redeliver(ctx context.Context, id uuid.UUID, actor audit.Actor, sig *operator.Envelope) (Event, error) {
	var e Event
	err := db.RunInTx(ctx, s.DB, func(ctx context.Context, tx bun.Tx) error {
		var err error
		e, err = s.RedeliverTx(ctx, tx, id, actor, sig)
		return err
	})
	return e, err
}

// RedeliverTx puts a dead event back in the queue inside tx: it becomes
// pending, due now, with a fresh cycle of MaxAttempts attempts and a fresh
// delivery job; last_error is kept until the next attempt replaces it. Only
// a dead event can be redelivered (SPEC "Outbound event"): a pending one is
// already queued and a delivered one was acknowledged, so both are
// ErrNotDead. Events are never deleted. With the event's row locked, the
// operator service authorizes the redelivery (RedeliverExpect): with sig,
// the enrolled operator who signed it is the actor; without, actor
// (refused when signatures are required). The redelivery is recorded in
// the audit trail as the actor's, inside tx; tx must roll back on an error.
func (s *Service) RedeliverTx(ctx context.Context, tx bun.Tx, id uuid.UUID, actor audit.Actor, sig *operator.Envelope) (Event, error) {
	if sig == nil && !actor.Valid() {
		return Event{}, fmt.Errorf("redeliver event %s: no audit actor", PublicID(id))
	}
	now := s.Now().UTC().Truncate(time.Microsecond)
	var e Event
	err := tx.NewUpdate().Model(&e).
		Set("status = ?, attempts = 0, next_attempt_at = ?, dead_at = NULL, redeliveries = redeliveries + 1", StatusPending, now).
		Where("id = ? AND status = ?", id, StatusDead).Returning(eventColumns).Scan(ctx)
	if db.IsNoRows(err) {
		var cur Event
		switch err := tx.NewSelect().Model(&cur).Column("status").Where("id = ?", id).Scan(ctx); {
		case db.IsNoRows(err):
			return Event{}, ErrNotFound
		case err != nil:
			return Event{}, fmt.Errorf("redeliver event %s: %w", id, err)
		}
		return Event{}, fault.Wrap(fault.Conflict,
			fmt.Sprintf("event %s is %s: only a dead event can be redelivered", PublicID(id), cur.Status), ErrNotDead)
	}
	if err != nil {
		return Event{}, fmt.Errorf("redeliver event %s: %w", id, err)
	}
	who, err := s.Operators.Authorize(ctx, tx, actor, sig, RedeliverExpect(e))
	if err != nil {
		return Event{}, err
	}
	if _, err := s.Inserter.InsertTx(ctx, tx.Tx, DeliverArgs{EventID: id, Attempt: 1, Cycle: e.Redeliveries}, nil); err != nil {
		return Event{}, fmt.Errorf("redeliver event %s: insert delivery job: %w", id, err)
	}
	if _, err := audit.Record(ctx, tx, now, who, audit.EventRedeliver, e.PublicID(),
		map[string]string{"event_id": e.PublicID()}); err != nil {
		return Event{}, err
	}
	return e, nil
}

// DeliverArgs wakes the Deliverer for one event. Attempt and Cycle are not
// state (the worker reads the row): they make the job unique per attempt,
// so the sweep never queues a second job for an attempt that already has a
// live one.
type DeliverArgs struct {
	EventID uuid.UUID `json:"event_id"`
	Attempt int       `json:"attempt"`
	Cycle   int       `json:"cycle"`
}

// Kind is the job kind.
func (DeliverArgs) Kind() string { return "event_deliver" }

// InsertOpts makes delivery jobs unique by their arguments among live jobs.
func (DeliverArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true, ByState: queue.LiveStates}}
}
