// Package transfer owns transfers: money moved inside the service between
// accounts (users and platform accounts), one or more legs committed
// atomically, each leg one ledger entry; their reads (one transfer, an
// account's list, the lookup by client_reference), the transfer.completed
// event, and the check that the legs and their ledger entries agree
// (CheckLegs).
//
// # A transfer
//
// A transfer is 1 to 100 legs, each {from, to, asset, amount}: from and to
// are accounts (a user, by external_user_id, or a platform account, by
// name), amount is in the asset's smallest units. It never touches
// custody: money only changes owner inside the books.
//
// One transaction does everything: it writes the transfer, its legs and
// its parties, emits transfer.completed and stores the Idempotency-Key's
// response; then it locks every account the legs post to (from's
// available account, and to's, or the platform account's shard the leg
// credits), creating those that do not exist yet, in one global order
// (ledger.LockAccounts), so two transfers over the same accounts in
// opposite directions (a trade and its reverse) queue instead of
// deadlocking (a one-leg transfer too: its posting alone would create a
// new payee's account outside that order, and deadlock with a transfer of
// several legs that had created it first); and last it posts each leg (ledger.PostTransferLeg, entry
// kind transfer), so that a busy account's balance row is locked only from
// its posting to the commit. A leg whose from is short (402, naming the
// leg) or any other failure rolls all of it back: no leg moves.
//
// A request whose Idempotency-Key is new takes a fast way to the same
// answer: the same transaction, which also claims the key, with no read
// before it and its statements in one round trip (transfer_fast.go).
//
// # Source references
//
// Leg i of transfer T is the ledger entry of kind transfer whose source_ref
// is "T:i" (SourceRef): an account's transaction history names the
// transfer and the leg of each of its transfer postings, and the entry is
// posted once (the ledger's (kind, source_ref) is unique).
package transfer

import (
	"context"
	"log/slog"
	"strconv"
	"sync/atomic"
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

// Service is the transfer module.
type Service struct {
	DB bun.IDB
	// Replica serves the lists, whose answer may lag the primary by up to
	// DATABASE_READ_MAX_LAG; nil reads DB. A transfer's own GET and the
	// lookup by client_reference read DB.
	Replica *db.Replica
	Events  Emitter
	Now     func() time.Time
	Log     *slog.Logger

	copies decimalsCopy // the assets' decimals, for the fast way
	fast   atomic.Int64 // transfers created the fast way
}

func (s *Service) log() *slog.Logger { return logging.Or(s.Log) }

func (s *Service) now() time.Time { return s.Now().UTC().Truncate(time.Microsecond) }

// Limits of a request.
const (
	MaxLegs        = 100
	MaxDescription = 500
	// MaxAmount bounds a leg's amount, in smallest units: the ledger's
	// bound on a line (10^15: ten million BTC, a billion USDT), so that
	// the sum of a transfer's legs cannot overflow.
	MaxAmount = ledger.MaxBookingAmount
)

// StatusCompleted is a transfer's only status: a transfer commits whole or
// not at all.
const StatusCompleted = "completed"

// Transfer is one row of transfers, with its legs.
type Transfer struct {
	bun.BaseModel `bun:"table:transfers"`

	ID              uuid.UUID         `bun:"id,pk,type:uuid"`
	IdempotencyKey  *string           `bun:"idempotency_key"`
	Description     *string           `bun:"description"`
	Metadata        metadata.Metadata `bun:"metadata,type:jsonb"`
	ClientReference *string           `bun:"client_reference"`
	LegCount        int               `bun:"leg_count"`
	CreatedAt       time.Time         `bun:"created_at"`

	Legs []Leg `bun:"-"`
}

// Leg is one row of transfer_legs: Index is its place in the request,
// from 0.
type Leg struct {
	bun.BaseModel `bun:"table:transfer_legs"`

	TransferID   uuid.UUID `bun:"transfer_id,pk,type:uuid"`
	Index        int       `bun:"leg,pk"`
	Asset        string    `bun:"asset"`
	FromPlatform bool      `bun:"from_platform"`
	FromOwner    string    `bun:"from_owner"`
	ToPlatform   bool      `bun:"to_platform"`
	ToOwner      string    `bun:"to_owner"`
	Amount       int64     `bun:"amount"`
}

// From is the account the leg debits.
func (l Leg) From() ledger.Holder { return ledger.Holder{Platform: l.FromPlatform, ID: l.FromOwner} }

// To is the account the leg credits.
func (l Leg) To() ledger.Holder { return ledger.Holder{Platform: l.ToPlatform, ID: l.ToOwner} }

// SourceRef is the source_ref of the ledger entry of leg i of transfer id:
// "<transfer_id>:<i>".
func SourceRef(id uuid.UUID, i int) string { return id.String() + ":" + strconv.Itoa(i) }

// Errors. Their messages are what clients see.
var (
	ErrNotFound = fault.New(fault.NotFound, "transfer not found")
	// ErrKeyReused: an Idempotency-Key that created a transfer with other
	// parameters (possible only after the key's record was pruned).
	ErrKeyReused = fault.New(fault.Invalid, "this Idempotency-Key created a transfer with other parameters")
	// ErrTakenOver: the request's Idempotency-Key was taken over by a newer
	// attempt, which completes the operation.
	ErrTakenOver = fault.New(fault.Conflict, "a newer request with this Idempotency-Key took over").WithRetryAfter(time.Second)
)
