// Package ingress owns the payment processor's inbound webhooks: POST
// /webhooks/processor verifies the HMAC-SHA256 signature over the raw body
// (Processor-Sig, or BTCPay's own BTCPay-Sig), decides whether the service
// acts on the event, stores each accepted delivery once, and wakes its
// processing once stored: one River job for the deliveries stored within
// 20 ms (queue.Waker), with a periodic sweep for one whose wake was lost
// (the process killed between the commit and the wake). The answer comes
// before any processing: BTCPay retries a delivery that fails with a 5xx
// and waits with later ones while it does, so the handler does nothing slow.
//
// Processing hands the parsed event to the InvoiceHandler (deposits) or the
// PayoutHandler (withdrawals) set on the Service. Webhooks are hints: the
// handlers re-read the invoice or payout from the processor, and the
// periodic polling covers any event that never arrives.
package ingress

import (
	"context"
	"log/slog"
	"time"

	"github.com/uptrace/bun"

	"svc/platform/btcpay"
	"svc/platform/logging"
	"svc/platform/queue"
)

// Headers that may carry the signature.
const (
	HeaderProcessorSig = "Processor-Sig"
	HeaderBTCPaySig    = btcpay.SignatureHeader
)

// subscribed are the event types the service acts on (SPEC "Deposit and
// withdrawal behaviours", item 2).
var subscribed = map[string]bool{
	btcpay.EventInvoiceReceivedPayment: true, btcpay.EventInvoiceProcessing: true,
	btcpay.EventInvoicePaymentSettled: true, btcpay.EventInvoiceSettled: true,
	btcpay.EventInvoiceExpired: true, btcpay.EventInvoiceInvalid: true,
	btcpay.EventPayoutCreated: true, btcpay.EventPayoutApproved: true, btcpay.EventPayoutUpdated: true,
}

// Subscribed reports whether the service acts on events of type typ.
func Subscribed(typ string) bool { return subscribed[typ] }

// recordOnly are the subscribed event types that are stored, for the
// record, as processed when they arrive, with no job and no handler call:
// nothing they could say is news. BTCPay sends PayoutCreated and
// PayoutApproved when a payout is created and approved (auto-approval at
// creation included), which the submitter learnt from the processor's
// answer when it recorded the payout, or, after an ambiguous call, finds
// by its lookup before any retry; every later state change (InProgress,
// Completed, Cancelled, AwaitingPayment again after a failed Lightning
// attempt) is a PayoutUpdated of its own, which is processed. Were one of
// those lost, the payout pass's poll of every open payout sees the change,
// as it does for any lost webhook. Processing them cost every withdrawal
// two jobs and two reads of its payout.
var recordOnly = map[string]bool{btcpay.EventPayoutCreated: true, btcpay.EventPayoutApproved: true}

// InvoiceEvent is an invoice event handed to the deposit work.
type InvoiceEvent struct {
	DeliveryKey     string // the stored delivery's identity
	Type            string // btcpay.EventInvoice*
	InvoiceID       string
	OrderID         string // metadata.orderId: our deposit id
	AfterExpiration bool
	PaymentMethodID string
	Payment         *btcpay.Payment // ReceivedPayment and PaymentSettled
	OverPaid        bool
	ManuallyMarked  bool
	PartiallyPaid   bool
	At              time.Time // when the processor created the delivery
}

// PayoutEvent is a payout event handed to the withdrawal work. BTCPay's
// payout events carry no amounts or proofs: read the payout.
type PayoutEvent struct {
	DeliveryKey string
	Type        string // btcpay.EventPayout*
	PayoutID    string
	State       btcpay.PayoutState
	At          time.Time
}

// InvoiceHandler acts on invoice events. It may be called more than once
// for one event and must be safe to run again. It acts on the invoice's
// state as it reads it from the processor, never on what the event says:
// of several deliveries about one invoice processed together, it is handed
// only the last (BatchWorker). A handler that writes its effect in one
// transaction writes the deliveries' processed mark in it too
// (ProcessedWith); otherwise they are marked once it has returned.
type InvoiceHandler interface {
	InvoiceEvent(ctx context.Context, e InvoiceEvent) error
}

// PayoutHandler acts on payout events, with the same contract: it reads the
// payout.
type PayoutHandler interface {
	PayoutEvent(ctx context.Context, e PayoutEvent) error
}

// Service receives and processes the processor's webhooks.
type Service struct {
	DB       bun.IDB
	Inserter queue.Inserter
	Secret   string // the ingress HMAC secret
	StoreID  string // the processor store this deployment uses
	Now      func() time.Time
	Log      *slog.Logger

	// Waker, when set, wakes the processing of each stored delivery once
	// its row has committed, many deliveries to a job (ProcessBatchArgs),
	// in place of a job of its own in the row's transaction; Sweep finds
	// a delivery whose wake was lost. nil gives each its job.
	Waker *queue.Waker[int64]

	// Invoices and Payouts receive the events; nil marks them processed
	// without acting (until the deposit and withdrawal work set them).
	// Set them before the worker starts.
	Invoices InvoiceHandler
	Payouts  PayoutHandler
}

func (s *Service) log() *slog.Logger { return logging.Or(s.Log) }
