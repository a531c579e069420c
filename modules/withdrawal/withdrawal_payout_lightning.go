package withdrawal

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/uptrace/bun"

	"svc/modules/asset"
	"svc/platform/btcpay"
)

// # Lightning
//
// BTC_LN has no on-chain proof: a completed payment is broadcast (the
// payment hash as txid) and confirmed in one transaction, with no network
// fee booked (BTCPay does not report routing fees; they show in
// reconciliation). A payment not completed LNPayoutTimeout after
// submission is ended: the service cancels the payout when the processor
// has not sent it yet, and the withdrawal fails. The hold returns by
// itself (refunded, released by "system" with an attestation naming the
// expiry) once the invoice has expired and the payout is cancelled, since
// an expired invoice can no longer be paid; until then one
// withdrawal.hold_needs_attestation alert says, for the payout's state,
// what the service will do and what an operator can do
// (holdNeedsAttestationDetail). A payment in flight (InProgress, its
// outcome unknown: an HTLC is out, for up to its CLTV expiry, MaxHTLCLife)
// is never refunded by the service and cannot be released (payoutLive):
// the hold stays until the processor settles it (confirmed) or cancels it
// (then refunded once the invoice has expired).

func (s *Service) lnTimeout() time.Duration {
	if s.Config.LNPayoutTimeout > 0 {
		return s.Config.LNPayoutTimeout
	}
	return DefaultLNPayoutTimeout
}

func (s *Service) invoiceExpired(w Withdrawal) bool {
	return w.InvoiceExpiresAt != nil && !s.now().Before(*w.InvoiceExpiresAt)
}

// lightningDeadline ends a Lightning payout not completed within
// LNPayoutTimeout of its submission: it cancels the payout when the
// processor still allows it (not yet sent) and fails the withdrawal. The
// hold returns at once when the payout is cancelled and the invoice has
// expired (an expired invoice can no longer be paid); otherwise the
// hold-needs-attestation alert is raised, and the hold returns when both
// are true. A payment in flight (InProgress: its outcome unknown) keeps
// the hold even past the invoice's expiry, until the processor resolves
// it (completed: settled; cancelled: refunded); a release is refused
// meanwhile.
func (s *Service) lightningDeadline(ctx context.Context, w Withdrawal, p btcpay.Payout) error {
	if w.SubmittedAt == nil || s.now().Before(w.SubmittedAt.Add(s.lnTimeout())) {
		return nil
	}
	cancelled := false
	if p.State == btcpay.PayoutAwaitingApproval || p.State == btcpay.PayoutAwaitingPayment {
		if err := s.Processor.CancelPayout(ctx, p.ID); err != nil {
			s.log().WarnContext(ctx, "withdrawal: cancel stuck Lightning payout", "withdrawal_id", w.ID, "payout_id", p.ID, "error", err)
		} else {
			cancelled = true
		}
	}
	if w.Status == StatusSubmitted {
		reason := fmt.Sprintf("the Lightning payout %s did not complete within LN_PAYOUT_TIMEOUT_SECONDS (%d s)", p.ID, int64(s.lnTimeout().Seconds()))
		if err := s.fail(ctx, w.ID, reason); err != nil {
			return err
		}
	}
	if cancelled {
		if s.invoiceExpired(w) {
			return s.expire(ctx, w.ID, p.ID)
		}
		p.State = btcpay.PayoutCancelled
	}
	s.raiseHoldNeedsAttestation(ctx, w, p)
	return nil
}

// MaxHTLCLife is how long a Lightning payment can stay in flight: until
// the CLTV expiry of its HTLC, which the usual nodes (LND, Core
// Lightning) cap at 2016 blocks, about 14 days.
const MaxHTLCLife = 2016 * 10 * time.Minute

// raiseHoldNeedsAttestation raises, once per withdrawal, the alert that a
// failed Lightning withdrawal keeps its hold, saying for the payout's
// state at the processor what the service will do and what the operator
// can do.
func (s *Service) raiseHoldNeedsAttestation(ctx context.Context, w Withdrawal, p btcpay.Payout) {
	s.raise(ctx, s.DB, AlertHoldNeedsAttestation, w, holdNeedsAttestationDetail(w, p, s.lnTimeout()))
}

// holdNeedsAttestationDetail is the alert's text (see
// raiseHoldNeedsAttestation).
func holdNeedsAttestationDetail(w Withdrawal, p btcpay.Payout, timeout time.Duration) string {
	head := fmt.Sprintf("Lightning withdrawal %s (payout %s, %s at the processor) failed or did not complete within LN_PAYOUT_TIMEOUT_SECONDS (%d s); its hold of %d sat stays. ",
		w.ID, p.ID, p.State, int64(timeout.Seconds()), w.AmountGross)
	// What happens to the hold once the payout is cancelled.
	onCancel := "the service does not return it by itself (the invoice's expiry is not known): an operator releases it with an attestation"
	if w.InvoiceExpiresAt != nil {
		onCancel = "the service returns it by itself once the invoice has expired (at " + w.InvoiceExpiresAt.UTC().Format(time.RFC3339) +
			"; an expired invoice cannot be paid), and the withdrawal then reads refunded, released by system"
	}
	release := "Operator: may release it before that (svc admin withdrawals release) with an attestation that the payment did not and cannot succeed."
	switch p.State {
	case btcpay.PayoutCancelled:
		return head + "The payout is cancelled, so it can no longer pay: " + onCancel + ". " + release
	case btcpay.PayoutInProgress:
		return head + fmt.Sprintf("The payment is in flight: an HTLC is out and its outcome is unknown; it can stay so until the HTLC's CLTV expiry, "+
			"at most 2016 blocks (about %d days) on the usual nodes, whatever the invoice's expiry. ", int(MaxHTLCLife/(24*time.Hour))) +
			"Service: keeps the hold until the processor settles the payment (the withdrawal is then confirmed and the hold spent) or cancels it; once cancelled, " +
			onCancel + ". Operator: a release is refused while the processor shows the payout in progress; check the payment on the Lightning node, " +
			"and if the node failed it for good, have the processor cancel the payout, then release it with an attestation."
	default:
		return head + "The payout was not sent yet and the service could not cancel it; it tries again on every payout pass (PAYOUT_POLL_INTERVAL). Once it is cancelled, " +
			onCancel + ". Operator: a release is refused while the payout is not cancelled; cancel it in the processor (or wait for the service to), " +
			"then, to return the hold before that, release it (svc admin withdrawals release) with an attestation that the payment did not and cannot succeed."
	}
}

// expire returns the hold of a Lightning withdrawal whose invoice expired
// unpaid (released by "system", with an attestation saying why); a
// withdrawal still submitted fails first, so the platform hears
// withdrawal.failed.
func (s *Service) expire(ctx context.Context, id uuid.UUID, payoutID string) error {
	return s.payoutTx(ctx, id, func(ctx context.Context, tx bun.Tx, w *Withdrawal, a asset.Asset) error {
		if w.Status != StatusSubmitted && w.Status != StatusFailed {
			return nil
		}
		if w.Status == StatusSubmitted {
			if err := s.failTx(ctx, tx, w, a, "the Lightning invoice expired before payout "+payoutID+" completed", nil); err != nil {
				return err
			}
		}
		att := fmt.Sprintf("system: the BOLT11 invoice expired at %s and can no longer be paid", w.InvoiceExpiresAt.UTC().Format(time.RFC3339))
		if payoutID != "" {
			att += "; payout " + payoutID + " did not complete"
		}
		_, err := s.returnHold(ctx, tx, w, Expire, "Lightning invoice expired unpaid: hold returned",
			map[string]any{"released_by": "system", "release_attestation": att})
		return err
	})
}
