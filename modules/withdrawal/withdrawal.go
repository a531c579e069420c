// Package withdrawal owns withdrawals: the request (destination, fee
// estimate, dust and minimum, the hold and the approval gates in one
// transaction), the reads, the operators' decisions (approve, with
// four-eyes approval above a per-asset threshold; reject; release with an
// attestation), each recorded in the audit trail in its own transaction,
// the payout of BTC and BTC_LN through the processor exactly once, with
// its tracking to confirmed or failed and the Lightning deadlines
// (withdrawal_payout.go), and the whole USDT_TRC20 path (sent by an
// operator, reported with mark-broadcast, verified on the TRON node,
// confirmed once solidified: withdrawal_usdt.go).
//
// # Creation
//
// Everything that can refuse a request is checked before anything is
// reserved: the body (422 field errors), the asset (404 unknown, 503
// disabled), the minimum, the destination for the deployment's network
// (and never one of the service's own deposit or pool addresses), the fee
// estimate (503 when the processor cannot give a BTC fee rate), dust, and a
// BOLT11 invoice's life and amount. Then one transaction places the hold
// (402 when available is short; held money never counts), evaluates the
// gates, writes the row, the event and the idempotency key's response.
// Nothing here calls the network inside a transaction: the fee rate is read
// (and cached) before it. An auto-approved withdrawal, the common case,
// sends its transaction (the hold, the row, the key's response) as one
// pipelined round trip (insertApproved); when a copy of the asset's row
// kept from an earlier creation says it is auto-approved, the volume
// reservation goes in the same round trip, and the database refuses it
// when the copy is stale (createAuto, withdrawal_create_auto.go).
//
// # Gates
//
// A withdrawal waits for an operator (pending_approval, approval_mode null
// until decided, approval_reason naming every gate that fired) when it is
// USDT_TRC20 (always sent by an operator), when its gross is above the
// asset's withdrawal_auto_limit, when the asset's rolling 24-hour volume
// including it is above withdrawal_daily_cap, or when the user's rolling
// 24-hour total of the asset including it is above the asset's optional
// withdrawal_user_daily_cap. Otherwise it is approved with approval_mode
// auto.
//
// Both 24-hour totals count every withdrawal whose money has not been
// returned: every status except rejected and refunded, so pending ones
// count too and a burst cannot slip past the cap while the first ones wait
// for an operator. The asset's volume is kept per minute by the database
// (migration 0007). It is reserved before the withdrawal's transaction, in
// one statement that is a transaction of its own and locks the asset's
// window row only for that statement (escrow): concurrent requests of one
// asset are decided strictly one after the other, so requests that
// together cross the cap never auto-approve more than it allows, and yet
// none waits for another's commit. A reservation whose withdrawal does not
// commit is given back; one lost to a crash in between over-counts, which
// errs on the operator's side. The user's total is read inside the
// transaction after the hold, which locks the user's available balance
// row, so the same user's requests are serialized too.
//
// # Decisions
//
// approve, reject and release lock the withdrawal's row, check its status
// (409 otherwise) and commit the change, its ledger entry, the audit row
// and the idempotency key's response together. Reject returns the hold at
// once and the withdrawal reads refunded (the SPEC allows rejected or
// refunded; refunded says where the money is). Release is the only way to
// return a hold once a payout may exist; it stores the operator's
// attestation. Above the asset's four-eyes threshold, approval needs two
// different operators: the first approval is recorded and the withdrawal
// stays pending_approval.
//
// Every decision is an operator action (modules/operator): the operator
// signs DecisionExpect (the asset, the gross, the destination, for
// USDT_TRC20 the net to send once fixed, and the request's own parameter),
// and the decision's transaction, with the row locked, compares it with
// the withdrawal as it is then. Four-eyes counts people: above the
// threshold an approval counts only when signed, and two approvals need
// two different operators of the enrollment chain, whatever keys they
// signed with or API keys they called with.
package withdrawal

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/uptrace/bun"

	"svc/modules/event"
	"svc/modules/ledger"
	"svc/modules/operator"
	"svc/platform/btcpay"
	"svc/platform/chain"
	"svc/platform/db"
	"svc/platform/fault"
	"svc/platform/logging"
	"svc/platform/metadata"
)

// FeeRater gives the processor's live BTC fee-rate estimate in sat/vB
// (*btcpay.Client).
type FeeRater interface {
	FeeRate(ctx context.Context, blockTarget int) (btcpay.Amount, error)
}

// Emitter writes outbound events inside a state change's transaction
// (*event.Service).
type Emitter interface {
	Emit(ctx context.Context, tx bun.Tx, typ event.Type, data any) (event.Event, error)
	// EmitAll writes the events of one state change in one statement.
	EmitAll(ctx context.Context, tx bun.Tx, es ...event.Emission) ([]event.Event, error)
}

// Completer stores a request's final response inside the transaction of
// its effect (*idempotency.Record).
type Completer interface {
	CompleteTx(ctx context.Context, tx bun.IDB, status int, contentType string, body []byte) error
}

// Config is the withdrawal settings.
type Config struct {
	Network chain.Network
	// FeeMode is deduct (the user pays the fee out of the gross) or absorb
	// (the user receives the whole gross).
	FeeMode ledger.FeeMode
	// AssumedTxVBytes is the assumed size of a BTC payout: the fee estimate
	// is the live fee rate times this.
	AssumedTxVBytes int64
	// FeeRateTTL is how long a fee rate read from the processor is reused.
	FeeRateTTL time.Duration
	// USDTPool are the processor's USDT deposit addresses, and HotWallet the
	// TRON address USDT withdrawals are sent from: none of them is a
	// destination.
	USDTPool  []string
	HotWallet string
	// ClaimTTL is how long a submitter's claim on a withdrawal lasts: more
	// than the processor calls it covers (withdrawal_payout.go).
	ClaimTTL time.Duration
	// LNPayoutTimeout ends a Lightning payout that has not completed
	// (LN_PAYOUT_TIMEOUT_SECONDS).
	LNPayoutTimeout time.Duration
	// SubmitBudget is how long a payout pass goes on taking batches of due
	// withdrawals (zero: DefaultSubmitBudget).
	SubmitBudget time.Duration
	// PayoutBatch is how many withdrawals a pass lists at a time (zero:
	// DefaultPayoutBatch); a test takes several lists with fewer rows.
	PayoutBatch int
}

// Service is the withdrawal module.
type Service struct {
	DB bun.IDB
	// Replica serves the two lists, whose answer may lag the primary by up
	// to DATABASE_READ_MAX_LAG; nil reads DB. Nothing else reads it: a
	// withdrawal's own GET, creation and every decision read DB.
	Replica *db.Replica
	// Fees is nil when no processor is configured: BTC withdrawals then
	// answer 503 (no fee rate).
	Fees FeeRater
	// Processor pays BTC and BTC_LN withdrawals (withdrawal_payout.go);
	// nil when no processor is configured: approved withdrawals then wait.
	Processor Processor
	// Tron reads USDT_TRC20 transfers for mark-broadcast and their
	// confirmation; nil when no TRON node is configured.
	Tron   TronNode
	Events Emitter
	Alerts Alerter
	// Operators verifies the operators' signed decisions (DecisionExpect);
	// nil (services built by hand in tests) decides unsigned, as the
	// request's own actor, and no approval then counts toward four-eyes.
	Operators *operator.Service
	Now       func() time.Time
	Log       *slog.Logger
	Config    Config

	rates rateCache
	// assets are the asset rows creations last read, and oneRoundTrip
	// counts the withdrawals created in one round trip (createAuto).
	assets       assetCopies
	oneRoundTrip atomic.Int64
	// batcher shares pipelines between concurrent createAuto creations;
	// shared counts the creations written in a shared one.
	batcher autoBatcher
	shared  atomic.Int64
	// failedMu guards failedAfter, where the next payout pass resumes its
	// walk over failed withdrawals.
	failedMu    sync.Mutex
	failedAfter uuid.UUID
	// refundAfter and usdtWatchAfter are where the next passes resume
	// their walks over watched released withdrawals (failedMu guards
	// them too).
	refundAfter, usdtWatchAfter uuid.UUID
}

func (s *Service) log() *slog.Logger { return logging.Or(s.Log) }

func (s *Service) now() time.Time { return s.Now().UTC().Truncate(time.Microsecond) }

// Withdrawal is one row of withdrawals.
type Withdrawal struct {
	bun.BaseModel `bun:"table:withdrawals"`

	ID uuid.UUID `bun:"id,pk,type:uuid"`
	// ExternalUserID is the user's, or PlatformAccount the platform
	// account's, whose balance the withdrawal holds and spends: exactly
	// one is set (migration 0042); "" is NULL.
	ExternalUserID     string     `bun:"external_user_id,nullzero"`
	PlatformAccount    string     `bun:"platform_account,nullzero"`
	Asset              string     `bun:"asset"`
	Status             Status     `bun:"status"`
	Destination        string     `bun:"destination"`
	AmountGross        int64      `bun:"amount_gross"`
	FeeMode            string     `bun:"fee_mode"`
	FeeEstimate        int64      `bun:"fee_estimate"`
	Fee                *int64     `bun:"fee"`
	AmountNet          *int64     `bun:"amount_net"`
	ApprovalMode       *string    `bun:"approval_mode"`
	ApprovalReason     *string    `bun:"approval_reason"`
	VolumeMinute       time.Time  `bun:"volume_minute"`
	PaymentHash        *string    `bun:"payment_hash"`
	InvoiceExpiresAt   *time.Time `bun:"invoice_expires_at"`
	Txid               *string    `bun:"txid"`
	FailureReason      *string    `bun:"failure_reason"`
	BackendRef         *string    `bun:"backend_ref"`
	ApprovedBy         *string    `bun:"approved_by"`
	RejectedBy         *string    `bun:"rejected_by"`
	ReleasedBy         *string    `bun:"released_by"`
	ReleaseAttestation *string    `bun:"release_attestation"`
	IdempotencyKey     *string    `bun:"idempotency_key"`
	SubmitAttempts     int        `bun:"submit_attempts"`
	ClaimToken         *uuid.UUID `bun:"claim_token,type:uuid"`
	NextAttemptAt      *time.Time `bun:"next_attempt_at"`
	SubmittedAt        *time.Time `bun:"submitted_at"`
	NetworkFee         *int64     `bun:"network_fee"`
	// TransferMissingSince and TransferMissingChecks count the consecutive
	// checks on which the TRON node did not show a broadcast USDT_TRC20
	// withdrawal's transfer (ConfirmUSDT).
	TransferMissingSince  *time.Time `bun:"transfer_missing_since"`
	TransferMissingChecks int        `bun:"transfer_missing_checks"`
	// RefundWatchUntil is, for a refunded withdrawal whose payout or
	// transaction was known or that had a submission attempt, the end of
	// the watch for its confirmation or a late payout
	// (withdrawal.paid_after_refund).
	RefundWatchUntil *time.Time `bun:"refund_watch_until"`
	// Metadata and ClientReference are the platform's labels, as it gave
	// them at creation (migration 0039); never changed afterwards.
	Metadata        metadata.Metadata `bun:"metadata,type:jsonb"`
	ClientReference *string           `bun:"client_reference"`
	CreatedAt       time.Time         `bun:"created_at"`
	UpdatedAt       time.Time         `bun:"updated_at"`
}

// Approval is one row of withdrawal_approvals.
type Approval struct {
	bun.BaseModel `bun:"table:withdrawal_approvals"`

	WithdrawalID uuid.UUID `bun:"withdrawal_id,pk,type:uuid"`
	Actor        string    `bun:"actor,pk"`
	ActorLabel   string    `bun:"actor_label"`
	Note         *string   `bun:"note"`
	CreatedAt    time.Time `bun:"created_at"`
	// Operator and KeyID name the enrolled operator and the key whose
	// signature the approval carries, and Signature is that signed
	// statement as received (operator.Envelope's JSON): all null for an
	// unsigned approval, which never counts toward four-eyes (migration
	// 0048).
	Operator  *string         `bun:"operator"`
	KeyID     *string         `bun:"key_id"`
	Signature json.RawMessage `bun:"signature,type:jsonb,nullzero"`
}

// Approval modes.
const (
	ModeAuto   = "auto"
	ModeManual = "manual"
)

// Errors. Their messages are what clients see.
var (
	ErrNotFound = fault.New(fault.NotFound, "withdrawal not found")
	// ErrFeeUnavailable: the processor could not give a BTC fee rate; nothing
	// was reserved.
	ErrFeeUnavailable = fault.New(fault.Unavailable,
		"the payment processor could not give a fee-rate estimate; nothing was reserved: retry with the same Idempotency-Key")
	// ErrIllegalTransition: the action is not allowed from the withdrawal's
	// current status.
	ErrIllegalTransition = fault.New(fault.Conflict, "illegal transition from the withdrawal's current status")
	// ErrSameOperator: four-eyes approval needs a second, different operator.
	ErrSameOperator = fault.New(fault.Conflict, "this operator already approved the withdrawal; four-eyes approval needs a different operator")
	// ErrFourEyesUnsigned: an approval above the asset's four-eyes
	// threshold without an operator's signature.
	ErrFourEyesUnsigned = fault.New(fault.Forbidden, "this withdrawal is above the asset's four-eyes threshold: its approval needs two operators' signatures "+
		"(the "+operator.Header+" header, or svc admin withdrawals approve --key); an unsigned approval does not count")
	// ErrKeyReused: an Idempotency-Key that created a withdrawal with other
	// parameters (possible only after the key's record was pruned).
	ErrKeyReused = fault.New(fault.Invalid, "this Idempotency-Key created a withdrawal with other parameters")
	// ErrTakenOver: the request's Idempotency-Key was taken over by a newer
	// attempt, which completes the operation.
	ErrTakenOver = fault.New(fault.Conflict, "a newer request with this Idempotency-Key took over").WithRetryAfter(time.Second)
)

// holder is whose money the withdrawal holds: its user's or its platform
// account's.
func (w Withdrawal) holder() ledger.Holder {
	if w.PlatformAccount != "" {
		return ledger.PlatformHolder(w.PlatformAccount)
	}
	return ledger.UserHolder(w.ExternalUserID)
}

// optional is s, or nil when it is empty: the API's null.
func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// clientReferenceUsed is the 409 of a creation whose client_reference
// another withdrawal already has: it names that withdrawal, which the
// platform reads instead of creating a second one.
func clientReferenceUsed(ref string, id uuid.UUID) error {
	return fault.New(fault.Conflict, fmt.Sprintf("client_reference %q is already used by withdrawal %s", ref, id))
}
