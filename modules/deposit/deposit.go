// Package deposit owns deposits end to end: creating one against the
// payment processor (an invoice whose metadata.orderId is the deposit id),
// the USDT address pool, reconciling each deposit against the processor's
// invoice and payments (webhooks and a poller drive the same idempotent
// reconcile), crediting every confirmed payment to the ledger exactly once,
// the operator review queue and its resolution, and the scan of the BTC
// wallet for receives that match no deposit payment.
//
// # States
//
// A deposit moves through the SPEC's table (deposit_states.go holds it as
// one table, and every change goes through it): creating -> pending ->
// confirming -> settled; pending -> expired; creating -> failed; anything
// open -> review; review -> settled (credit) or dismissed. Each change is
// one transaction holding the guarded row update, the ledger entries, the
// outbound event and the idempotency key's completion.
//
// # Creation
//
// The intent (status creating) commits before the processor is called, so
// no network call happens inside a transaction and a crash leaves a row to
// find. A first attempt creates the invoice; a retry with the same
// Idempotency-Key, and the poller, first ask the processor for invoices
// whose orderId is the deposit id and adopt the one they find: an invoice is
// never created twice blindly. An ambiguous failure (unreachable, timeout,
// 5xx) answers 503 and leaves the deposit creating; a definitive refusal
// marks it failed and answers 502. The invoice's address is recorded
// (creating -> pending) together with the key's 201: for an asset without
// an address pool, in one statement that applies only while the deposit is
// still creating (issueAtOnce); otherwise, or when it did not apply, in a
// transaction that locks and reads the deposit first (issue).
//
// # Payments
//
// Every processor payment is one deposit_payments row, unique on the
// processor's payment id. A payment is credited when the processor says it
// is Settled, once: the ledger entry's source_ref names the payment
// ((kind, source_ref) is unique in the ledger), the row keeps the entry's
// id (unique), and a trigger refuses to change a credited row. What is
// credited is what the payment was worth per the processor: its value
// minus the method fee the processor attributes to it, in the asset's
// smallest units, never rounded.
//
// A payment goes to review instead (credited false, outside every balance)
// when it arrived after the invoice expired, when it is first seen after the
// deposit settled or expired (a later payment to the same address), when its
// amount does not convert to whole smallest units, when it is a USDT payment
// further than the tolerance from amount_expected, or when the deposit's
// pooled address clashed with another deposit's. The whole deposit goes to
// review when the invoice was marked settled (or invalid) by hand in the
// processor, possibly with no payment at all, and when payments failed to
// confirm before the processor stopped monitoring.
//
// # The USDT pool
//
// The processor's USDT plugin gives each invoice the first pool address no
// open invoice holds, and stops watching an address when the invoice
// expires. The service knows the same pool (USDT_POOL_ADDRESSES) and keeps
// each address reserved for the invoice's 60 minutes plus a grace
// (USDT_POOL_GRACE), so that a payment sent just before expiry is not
// attributed to the next user of the address. When every address is
// reserved, creation answers 503 DEPOSIT_TEMPORARILY_UNAVAILABLE before
// calling the processor. A reservation is released by a periodic job once
// its time has passed. The address each invoice actually got is recorded;
// one that another open reservation still holds is a clash, logged and
// raised as an operator alert, and that deposit's payments go to review.
package deposit

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/uptrace/bun"

	"svc/modules/alert"
	"svc/modules/asset"
	"svc/modules/event"
	"svc/modules/ledger"
	"svc/modules/operator"
	"svc/platform/btcpay"
	"svc/platform/db"
	"svc/platform/fault"
	"svc/platform/logging"
	"svc/platform/metadata"
)

// Processor is what the deposit module asks of the payment processor
// (*btcpay.Client).
type Processor interface {
	CreateInvoice(ctx context.Context, p btcpay.CreateInvoiceParams) (btcpay.Invoice, error)
	GetInvoice(ctx context.Context, id string) (btcpay.Invoice, error)
	InvoicesByOrderID(ctx context.Context, orderID string) ([]btcpay.Invoice, error)
	InvoicePaymentMethods(ctx context.Context, id string, onlyAccounted bool) ([]btcpay.InvoicePayMethod, error)
	WalletTransactions(ctx context.Context, p btcpay.WalletTransactionsParams) ([]btcpay.WalletTransaction, error)
}

// Emitter writes outbound events inside a state change's transaction
// (*event.Service): a change of a deposit prepares its events, writes
// their rows in its own statement (event.Event.RowInsert) and queues
// their deliveries.
type Emitter interface {
	Prepare(typ event.Type, data any) (event.Event, error)
	QueueDelivery(ctx context.Context, tx *sql.Tx, e event.Event) error
}

// Alerter raises operator alerts (*alert.Service).
type Alerter interface {
	Raise(ctx context.Context, idb bun.IDB, p alert.Params) (alert.Alert, bool, error)
}

// Config is the deposit settings (config.Deposits and the processor's
// speed policy).
type Config struct {
	ExpirationMinutes int    // invoice expiry for BTC and BTC_LN
	MonitoringMinutes int    // how long the processor watches an expired invoice
	SpeedPolicy       string // the invoices' speedPolicy
	// USDTPool is the processor's USDT address pool; empty means unknown,
	// and then only the processor's own refusal limits USDT deposits.
	USDTPool         []string
	USDTPoolGrace    time.Duration
	USDTTolerancePPM int64 // parts per million of amount_expected
}

// USDTExpirationMinutes is the SPEC's fixed USDT invoice expiry.
const USDTExpirationMinutes = 60

// Service is the deposit module.
type Service struct {
	DB bun.IDB
	// Replica serves the lists (a user's deposits, the review queue, the
	// wallet alerts), whose answer may lag the primary by up to
	// DATABASE_READ_MAX_LAG; nil reads DB. A deposit's own GET, its address
	// history and every state change read DB.
	Replica *db.Replica
	// Processor is nil when no processor is configured: creation then
	// answers 503 and nothing is reconciled.
	Processor Processor
	Events    Emitter
	Alerts    Alerter
	Now       func() time.Time
	Log       *slog.Logger
	Config    Config
	// Operators authorizes the operators' decisions (ResolveExpect,
	// CreditAfterDismissalExpect); nil acts unsigned, as the caller's
	// actor.
	Operators *operator.Service

	// webhooks folds the reconciliations that processor webhooks ask for
	// while one of the same deposit runs (deposit_coalesce.go).
	webhooks coalescer
}

func (s *Service) assets() *asset.Store { return &asset.Store{DB: s.DB, Now: s.Now} }

func (s *Service) log() *slog.Logger { return logging.Or(s.Log) }

func (s *Service) now() time.Time { return s.Now().UTC().Truncate(time.Microsecond) }

// Deposit is one row of deposits.
type Deposit struct {
	bun.BaseModel `bun:"table:deposits"`

	ID uuid.UUID `bun:"id,pk,type:uuid"`
	// ExternalUserID is the user's, or PlatformAccount the platform
	// account's, whose balance the deposit credits: exactly one is set
	// (migration 0042); "" is NULL.
	ExternalUserID       string     `bun:"external_user_id,nullzero"`
	PlatformAccount      string     `bun:"platform_account,nullzero"`
	Asset                string     `bun:"asset"`
	Status               Status     `bun:"status"`
	IdempotencyKey       *string    `bun:"idempotency_key"`
	AmountExpected       *int64     `bun:"amount_expected"`
	InvoiceID            *string    `bun:"invoice_id"`
	Address              *string    `bun:"address"`
	CheckoutLink         *string    `bun:"checkout_link"`
	ExpiresAt            *time.Time `bun:"expires_at"`
	MonitoringUntil      *time.Time `bun:"monitoring_until"`
	AddressReservedFrom  *time.Time `bun:"address_reserved_from"`
	AddressReservedUntil *time.Time `bun:"address_reserved_until"`
	AddressReleasedAt    *time.Time `bun:"address_released_at"`
	AddressClash         bool       `bun:"address_clash"`
	InvoiceReview        *string    `bun:"invoice_review"`
	ReviewReason         *string    `bun:"review_reason"`
	ReviewAt             *time.Time `bun:"review_at"`
	FailureReason        *string    `bun:"failure_reason"`
	ClosedAt             *time.Time `bun:"closed_at"`
	PolledAt             *time.Time `bun:"polled_at"`
	// Metadata and ClientReference are the platform's labels, as it gave
	// them at creation (migration 0039); never changed afterwards.
	Metadata        metadata.Metadata `bun:"metadata,type:jsonb"`
	ClientReference *string           `bun:"client_reference"`
	CreatedAt       time.Time         `bun:"created_at"`
	UpdatedAt       time.Time         `bun:"updated_at"`
}

// Payment is one row of deposit_payments.
type Payment struct {
	bun.BaseModel `bun:"table:deposit_payments"`

	ID              int64      `bun:"id,pk,autoincrement"`
	DepositID       uuid.UUID  `bun:"deposit_id,type:uuid"`
	PaymentID       string     `bun:"payment_id"`
	Txid            *string    `bun:"txid"`
	Amount          string     `bun:"amount"`
	Units           *int64     `bun:"units"`
	ProcessorStatus string     `bun:"processor_status"`
	ReceivedAt      time.Time  `bun:"received_at"`
	AfterExpiration bool       `bun:"after_expiration"`
	ReviewReason    *string    `bun:"review_reason"`
	Credited        bool       `bun:"credited"`
	CreditedAt      *time.Time `bun:"credited_at"`
	ResolvedBy      *string    `bun:"resolved_by"`
	LedgerEntryID   *int64     `bun:"ledger_entry_id"`
	CreatedAt       time.Time  `bun:"created_at"`
	UpdatedAt       time.Time  `bun:"updated_at"`
}

// ReasonNoExpectedAmount: a payment to a pooled (USDT) deposit created
// without expected_amount. The pool's addresses are shared over time, so
// only the amount tells this user's payment from a late one of the
// address's previous holder; without it an operator decides.
const ReasonNoExpectedAmount = "the deposit has no expected_amount: on a shared USDT pool address only the amount attributes a payment, so an operator decides"

// markedStatus is the processor_status of the row that records the value
// of an invoice marked settled by hand, credited by an operator.
const markedStatus = "Marked"

// ResolvedAuto is resolved_by of a payment the service credited itself.
const ResolvedAuto = "auto"

// openForReview is true for a payment waiting for an operator.
func (p Payment) openForReview() bool {
	return p.ReviewReason != nil && !p.Credited && p.ResolvedBy == nil && p.ProcessorStatus != string(btcpay.PaymentInvalid)
}

// Errors. Their messages are what clients see.
var (
	ErrNotFound = fault.New(fault.NotFound, "deposit not found")
	// ErrPoolExhausted is the SPEC's only error with a code.
	ErrPoolExhausted = &fault.Error{Kind: fault.Unavailable, Code: "DEPOSIT_TEMPORARILY_UNAVAILABLE",
		Message: "every USDT_TRC20 deposit address is reserved; retry later with the same Idempotency-Key"}
	// ErrNoProcessor: the deployment has no payment processor configured.
	ErrNoProcessor = fault.New(fault.Unavailable, "the payment processor is not configured")
	// ErrProcessorUnavailable: unreachable or ambiguous; retry with the
	// same Idempotency-Key.
	ErrProcessorUnavailable = fault.New(fault.Unavailable,
		"the payment processor is unreachable or its answer was ambiguous; retry with the same Idempotency-Key")
	// ErrKeyReused: an Idempotency-Key that created a deposit with other
	// parameters (possible only after the key's record was pruned).
	ErrKeyReused = fault.New(fault.Invalid, "this Idempotency-Key created a deposit with other parameters")
	// ErrIllegalTransition: the action is not allowed from the deposit's
	// current status.
	ErrIllegalTransition = fault.New(fault.Conflict, "illegal transition from the deposit's current status")
	// ErrNothingToCredit: resolve credit found no value to credit.
	ErrNothingToCredit = fault.New(fault.Invalid, "nothing to credit")
	// ErrCannotCredit: the processor's value cannot be credited as is.
	ErrCannotCredit = fault.New(fault.Invalid, "the payment cannot be credited")
	// ErrTakenOver: the request's Idempotency-Key was taken over by a
	// newer attempt, which completes the operation.
	ErrTakenOver = fault.New(fault.Conflict, "a newer request with this Idempotency-Key took over").WithRetryAfter(time.Second)
)

// holder is who the deposit credits: its user or its platform account.
func (d Deposit) holder() ledger.Holder {
	if d.PlatformAccount != "" {
		return ledger.PlatformHolder(d.PlatformAccount)
	}
	return ledger.UserHolder(d.ExternalUserID)
}

// optional is s, or nil when it is empty: the API's null.
func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// clientReferenceUsed is the 409 of a creation whose client_reference
// another deposit already has: it names that deposit, which the platform
// reads instead of creating a second one.
func clientReferenceUsed(ref string, id uuid.UUID) error {
	return fault.New(fault.Conflict, fmt.Sprintf("client_reference %q is already used by deposit %s", ref, id))
}
