// Package event owns the service's outbound events (SPEC "Events"): the
// eight event types and their data, the transactional outbox they are
// written to, their signed delivery to the platform's webhook URL with the
// SPEC's retry schedule, dead events and their redelivery, and the admin
// view of all of it.
//
// # Outbox
//
// A module that changes state calls Service.Emit inside the transaction of
// that change. Emit writes the event row (payload bytes fixed once and for
// all: {id, type, created_at, data}) on that transaction, so a change that
// rolls back leaves no event, and a change that commits cannot lose its
// event even if the process dies the next instant. Its first attempt is
// woken once the transaction has committed, by one River job for all the
// events the process committed within 20 ms (Waker, DeliverBatchArgs):
// not by a job per event inside each transaction, which cost more than the
// rest of the event's path (event_wake.go says why, and why nothing is lost
// when a wake is).
//
// # Delivery
//
// The row is the source of truth; River jobs only wake the Deliverer
// (a wake job's run claims its events together: AttemptBatch). An
// attempt first claims the row (status pending, due, not claimed by a live
// attempt), then POSTs the stored bytes outside any transaction, then
// records the outcome under its claim in one transaction: delivered on any
// 2xx (last_error, which describes the last attempt, is cleared); otherwise attempts+1, last_error, next_attempt_at from the schedule
// (1m, 5m, 30m, 2h, 6h, then every 12h) and the next job scheduled at that
// time; after the tenth failure the event is dead and one operator alert is
// raised. A job that runs early, twice, or for an event no longer pending
// does nothing. A periodic sweep enqueues any pending event that is due and
// has no live job, which is how the backlog drains once a URL is configured.
//
// Without a URL nothing is sent and no attempt is spent: events stay
// pending until a worker starts with PLATFORM_WEBHOOK_URL set.
//
// # Webhook endpoints
//
// Operators add further receivers (endpoint.go), each with its event
// filter and signing secret; an event's delivery to each is a row of its
// own, written with the event, delivered by the same jobs with the same
// schedule, and dead and redelivered on its own.
//
// # Events API
//
// The platform can also read the events it is sent (GET /v1/events, as
// Stripe's /v1/events), whatever their delivery status, as the very bytes
// a delivery sends: to catch up after an outage instead of waiting for
// retries. The list is one stream in which nothing can ever appear before
// an event already listed (Feed says how), so a platform goes on from the
// last id it read and misses nothing. Events are never deleted (a trigger
// refuses it); the API promises at least 30 days (docs/webhooks.md), which
// is what a platform may rely on if that ever changes.
package event

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/uptrace/bun"

	"svc/platform/fault"
)

// SchemaVersion is the version of the published payload schema
// (docs/events.schema.json), which is versioned separately from the API.
const SchemaVersion = "1.4.0"

// Type is an event type.
type Type string

// The eight event types of the SPEC.
const (
	DepositDetected           Type = "deposit.detected"
	DepositSettled            Type = "deposit.settled"
	DepositReviewRequired     Type = "deposit.review_required"
	DepositExpired            Type = "deposit.expired"
	WithdrawalPendingApproval Type = "withdrawal.pending_approval"
	WithdrawalBroadcast       Type = "withdrawal.broadcast"
	WithdrawalCompleted       Type = "withdrawal.completed"
	WithdrawalFailed          Type = "withdrawal.failed"
)

// The event types beyond the SPEC's eight.
const (
	TransferCompleted Type = "transfer.completed"
	// The escrow holds' (modules/hold): the hold ended.
	HoldCaptured Type = "hold.captured"
	HoldVoided   Type = "hold.voided"
	HoldExpired  Type = "hold.expired"
)

// Types returns every event type.
func Types() []Type {
	return []Type{DepositDetected, DepositSettled, DepositReviewRequired, DepositExpired,
		WithdrawalPendingApproval, WithdrawalBroadcast, WithdrawalCompleted, WithdrawalFailed,
		TransferCompleted, HoldCaptured, HoldVoided, HoldExpired}
}

// Status is where an event is in its delivery.
type Status string

// The statuses of an event.
const (
	StatusPending   Status = "pending"
	StatusDelivered Status = "delivered"
	StatusDead      Status = "dead"
)

// MaxAttempts is how many failed attempts make an event dead.
const MaxAttempts = 10

// AlertDead is the operator-alert type raised when an event goes dead.
const AlertDead = "event.dead"

// Errors.
var (
	ErrNotFound = fault.New(fault.NotFound, "event not found")
	// ErrNotDead refuses to redeliver an event that is not dead.
	ErrNotDead = fault.New(fault.Conflict, "event not dead")
	// ErrData reports data that does not match its event type or misses a
	// required value: a bug in the emitting code.
	ErrData = fault.New(fault.Internal, "invalid event data")
)

// Event is one outbound event.
type Event struct {
	bun.BaseModel `bun:"table:outbound_events"`

	// ID is the raw id (raw_id); PublicID is what receivers see.
	ID            uuid.UUID       `bun:"id,pk,type:uuid"`
	Type          Type            `bun:"type"`
	Status        Status          `bun:"status"`
	Attempts      int             `bun:"attempts"`
	NextAttemptAt time.Time       `bun:"next_attempt_at"`
	LastError     *string         `bun:"last_error"`
	Payload       json.RawMessage `bun:"payload,type:json"`
	CreatedAt     time.Time       `bun:"created_at"`
	DeliveredAt   *time.Time      `bun:"delivered_at"`
	DeadAt        *time.Time      `bun:"dead_at"`
	// Redeliveries counts operator redeliveries; each starts a fresh cycle
	// of MaxAttempts.
	Redeliveries int `bun:"redeliveries"`
}

// eventColumns are the columns of Event (the claim columns are the
// Deliverer's alone).
const eventColumns = "id, type, status, attempts, next_attempt_at, last_error, payload, created_at, delivered_at, dead_at, redeliveries"

// PublicID is the event's id as receivers see it and dedup on.
func (e Event) PublicID() string { return PublicID(e.ID) }

// PublicID returns "evt_" followed by the 32 hex digits of id.
func PublicID(id uuid.UUID) string { return "evt_" + hex.EncodeToString(id[:]) }

// ParseID accepts an event's raw uuid or its public evt_ id.
func ParseID(s string) (uuid.UUID, error) {
	if rest, ok := strings.CutPrefix(s, "evt_"); ok {
		b, err := hex.DecodeString(rest)
		if err != nil || len(b) != 16 {
			return uuid.Nil, fmt.Errorf("event id %q: want evt_ and 32 hex digits", s)
		}
		return uuid.UUID(b), nil
	}
	id, err := uuid.Parse(s)
	if err != nil {
		return uuid.Nil, fmt.Errorf("event id %q: %w", s, err)
	}
	return id, nil
}
