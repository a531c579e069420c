// Package hold owns escrow holds: a payer's money (a user's or a platform
// account's) reserved for a later payment, then captured to one or more
// accounts with the rest returned at once, voided, or expired by a
// periodic pass. It owns the holds and their captures (migration 0041),
// their HTTP API (POST /v1/holds, capture, void, the reads and lists), the
// expiry pass (hold_expire.go) and the check that every escrow account
// equals its payer's open holds (CheckEscrow).
//
// # Money
//
// Every step moves money with its ledger entries in the same transaction
// as the hold's row, its event (a capture, a void, an expiry; creation has
// none) and the Idempotency-Key's response: creation
// posts escrow_hold (payer available -> payer escrow: the balance's
// `reserved`), a capture escrow_capture (escrow -> each leg's available)
// and, when it pays less than the amount, escrow_release of the rest
// (escrow -> available), a void or an expiry escrow_release of all. Each
// entry is unique on (kind, hold id), so no step can post twice.
//
// # States
//
// A hold is open until exactly one of capture, void and expiry moves it to
// captured, voided or expired (hold_states.go). Each step locks the hold's
// row first, so concurrent steps run one after the other and every loser
// sees the winner's status and answers 409 naming it; the status update is
// guarded on open as well (platform/fsm), and the database refuses any
// other step (holds_guard).
package hold

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/uptrace/bun"

	"svc/modules/event"
	"svc/modules/ledger"
	"svc/platform/db"
	"svc/platform/fault"
	"svc/platform/logging"
	"svc/platform/metadata"
)

// Limits of a hold.
const (
	// DefaultExpiresIn is a hold's life when the request does not say.
	DefaultExpiresIn = 7 * 24 * time.Hour
	// MaxExpiresIn is the longest life a request may ask.
	MaxExpiresIn = 30 * 24 * time.Hour
	// MaxAmount bounds a hold's amount in smallest units: the ledger's
	// bound on a line, as a withdrawal's.
	MaxAmount = ledger.MaxBookingAmount
	// MaxCaptureLegs is the most accounts one capture pays.
	MaxCaptureLegs = 15
	// MaxDescription bounds the description, in characters.
	MaxDescription = 500
)

// Emitter writes outbound events inside a state change's transaction
// (*event.Service).
type Emitter interface {
	Emit(ctx context.Context, tx bun.Tx, typ event.Type, data any) (event.Event, error)
}

// Completer stores a request's final response inside the transaction of
// its effect (*idempotency.Record).
type Completer interface {
	CompleteTx(ctx context.Context, tx bun.IDB, status int, contentType string, body []byte) error
}

// Service is the hold module.
type Service struct {
	DB bun.IDB
	// Replica serves the lists, which may lag the primary; nil reads DB.
	Replica *db.Replica
	Events  Emitter
	Now     func() time.Time
	Log     *slog.Logger

	// decimalsOf are the assets' decimals by code (decimals).
	decimalsOf sync.Map
}

func (s *Service) log() *slog.Logger { return logging.Or(s.Log) }

func (s *Service) now() time.Time { return s.Now().UTC().Truncate(time.Microsecond) }

// Hold is one row of holds.
type Hold struct {
	bun.BaseModel `bun:"table:holds"`

	ID              uuid.UUID         `bun:"id,pk,type:uuid"`
	PayerPlatform   bool              `bun:"payer_platform"`
	Payer           string            `bun:"payer"`
	Asset           string            `bun:"asset"`
	Status          Status            `bun:"status"`
	Amount          int64             `bun:"amount"`
	CapturedAmount  int64             `bun:"captured_amount"`
	ReleasedAmount  int64             `bun:"released_amount"`
	ExpiresAt       time.Time         `bun:"expires_at"`
	Description     *string           `bun:"description"`
	Metadata        metadata.Metadata `bun:"metadata,type:jsonb,notnull"`
	ClientReference *string           `bun:"client_reference"`
	IdempotencyKey  *string           `bun:"idempotency_key"`
	CreatedAt       time.Time         `bun:"created_at"`
	UpdatedAt       time.Time         `bun:"updated_at"`
}

// CaptureRow is one row of hold_captures: one account a capture paid.
type CaptureRow struct {
	bun.BaseModel `bun:"table:hold_captures"`

	HoldID     uuid.UUID `bun:"hold_id,pk,type:uuid"`
	Seq        int       `bun:"seq,pk"`
	ToPlatform bool      `bun:"to_platform"`
	ToID       string    `bun:"to_id"`
	Amount     int64     `bun:"amount"`
}

// Errors. Their messages are what clients see.
var (
	ErrNotFound = fault.New(fault.NotFound, "hold not found")
	// ErrIllegalTransition: the step is not allowed from the hold's current
	// status (it was captured, voided or expired).
	ErrIllegalTransition = fault.New(fault.Conflict, "illegal transition from the hold's current status")
	// ErrKeyReused: an Idempotency-Key that already created a hold (possible
	// only after the key's record was pruned).
	ErrKeyReused = fault.New(fault.Conflict, "this Idempotency-Key already created a hold")
	// ErrTakenOver: the request's Idempotency-Key was taken over by a newer
	// attempt while this one ran (409, retry later).
	ErrTakenOver = fault.New(fault.Conflict, "a newer request with this Idempotency-Key took over").WithRetryAfter(time.Second)
)
