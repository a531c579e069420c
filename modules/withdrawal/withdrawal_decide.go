package withdrawal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/uptrace/bun"

	"svc/modules/asset"
	"svc/modules/audit"
	"svc/modules/ledger"
	"svc/modules/operator"
	"svc/platform/db"
	"svc/platform/fault"
	"svc/platform/httpapi"
	"svc/platform/idempotency"
	"svc/platform/money"
)

// Attestation length limits (SPEC Limits).
const (
	MinAttestation = 10
	MaxAttestation = 2000
	// MaxNote bounds an approve note and a reject reason.
	MaxNote = 2000
)

// DecideParams name an operator decision.
type DecideParams struct {
	WithdrawalID uuid.UUID
	// Actor is the request's own actor (its admin API key): who decides
	// when the decision carries no signature and signatures are not
	// required. A signed decision (the command line's) may leave it empty.
	Actor audit.Actor
	// Signature is the operator's signed statement of the decision
	// (DecisionExpect), nil for an unsigned one.
	Signature *operator.Envelope
	// Note is approve's optional note, Reason reject's optional reason,
	// Attestation release's required statement and Txid mark-broadcast's
	// transaction id.
	Note, Reason *string
	Attestation  string
	Txid         string
}

// Approve records the actor's approval of a withdrawal pending approval.
// It moves the withdrawal to approved, unless the asset's four-eyes
// threshold needs another operator's approval first (ApprovalsNeeded > 0,
// status unchanged). Above the threshold only signed approvals count, one
// per operator of the enrollment chain: an unsigned one is refused
// (ErrFourEyesUnsigned), and the same operator approving again, with any
// key or API key, is ErrSameOperator. For USDT_TRC20 the fee and net are
// fixed here, and the answer carries the exact amount the operator sends
// and the wallet to send it from.
func (s *Service) Approve(ctx context.Context, p DecideParams, rec Completer) (ApprovedView, []byte, error) {
	if err := checkNote(p.Note, "note"); err != nil {
		return ApprovedView{}, nil, err
	}
	var out ApprovedView
	body, err := s.decideTx(ctx, p, audit.WithdrawalApprove, map[string]any{"note": p.Note}, rec,
		func(ctx context.Context, tx bun.Tx, w *Withdrawal, a asset.Asset, actor audit.Actor) (any, error) {
			if _, err := Next(w.Status, Approve); err != nil {
				return nil, err
			}
			if err := refuseHalted(a, "approval"); err != nil {
				return nil, err
			}
			required := requiredApprovals(a, *w)
			if required > 1 && actor.Signature == nil {
				return nil, ErrFourEyesUnsigned
			}
			var prior []Approval
			if err := tx.NewSelect().Model(&prior).Where("withdrawal_id = ?", w.ID).OrderExpr("created_at, actor").Scan(ctx); err != nil {
				return nil, fmt.Errorf("read approvals of withdrawal %s: %w", w.ID, err)
			}
			// counted are the earlier approvals that count: above the
			// threshold the signed ones only (each by another operator,
			// checked below and when they were recorded).
			var counted []Approval
			for _, ap := range prior {
				if ap.Actor == actor.ID || (actor.Signature != nil && ap.Operator != nil && *ap.Operator == actor.Signature.Operator) {
					return nil, ErrSameOperator
				}
				if required == 1 || ap.Operator != nil {
					counted = append(counted, ap)
				}
			}
			row := Approval{WithdrawalID: w.ID, Actor: actor.ID, ActorLabel: actor.Label, Note: p.Note, CreatedAt: s.now()}
			if sig := actor.Signature; sig != nil {
				row.Operator, row.KeyID, row.Signature = &sig.Operator, &sig.KeyID, sig.Envelope
			}
			if _, err := tx.NewInsert().Model(&row).Exec(ctx); err != nil {
				return nil, fmt.Errorf("record approval of withdrawal %s: %w", w.ID, err)
			}
			needed := required - len(counted) - 1
			if needed > 0 {
				v, err := s.adminViewTx(ctx, tx, *w, a)
				if err != nil {
					return nil, err
				}
				out = ApprovedView{AdminView: v, ApprovalsNeeded: needed}
				return out, nil
			}
			by := make([]string, 0, len(counted)+1)
			for _, ap := range counted {
				by = append(by, audit.Actor{ID: ap.Actor, Label: ap.ActorLabel}.String())
			}
			set := map[string]any{"approval_mode": ModeManual, "approved_by": strings.Join(append(by, actor.String()), ", ")}
			if a.Code == asset.USDTTRC20 {
				// Sent by the operator now: this is the USDT submission, so the
				// fee quoted at creation (the flat fee then) is fixed here.
				est, err := netOf(ledger.FeeMode(w.FeeMode), w.AmountGross, w.FeeEstimate)
				if err != nil {
					return nil, fmt.Errorf("withdrawal %s: fee %d is not below the gross %d", w.ID, w.FeeEstimate, w.AmountGross)
				}
				set["fee"], set["amount_net"] = est.Fee, est.Net
			}
			if err := s.transit(ctx, tx, w, Approve, set); err != nil {
				return nil, err
			}
			v, err := s.adminViewTx(ctx, tx, *w, a)
			if err != nil {
				return nil, err
			}
			out = ApprovedView{AdminView: v}
			if a.Code == asset.USDTTRC20 {
				out.AmountToSend = ptr(money.Format(*w.AmountNet, a.Decimals))
				if s.Config.HotWallet != "" {
					out.SendFrom = ptr(s.Config.HotWallet)
				}
			}
			return out, nil
		})
	if err != nil {
		return ApprovedView{}, nil, err
	}
	return out, body, nil
}

// requiredApprovals is 2 above the asset's four-eyes threshold, else 1.
// The threshold in force at approval counts, so lowering it also covers
// withdrawals already waiting.
func requiredApprovals(a asset.Asset, w Withdrawal) int {
	if a.WithdrawalFourEyesThreshold != nil && w.AmountGross > *a.WithdrawalFourEyesThreshold {
		return 2
	}
	return 1
}

// Reject rejects a withdrawal pending approval and returns its hold in the
// same transaction: the withdrawal reads refunded, with rejected_by and the
// reason as failure_reason.
func (s *Service) Reject(ctx context.Context, p DecideParams, rec Completer) (AdminView, []byte, error) {
	if err := checkNote(p.Reason, "reason"); err != nil {
		return AdminView{}, nil, err
	}
	reason := "rejected by an operator"
	if p.Reason != nil && strings.TrimSpace(*p.Reason) != "" {
		reason = "rejected by an operator: " + strings.TrimSpace(*p.Reason)
	}
	return s.refund(ctx, p, audit.WithdrawalReject, map[string]any{"reason": p.Reason}, Reject, "withdrawal rejected",
		func(actor audit.Actor) map[string]any {
			return map[string]any{"rejected_by": actor.String(), "failure_reason": reason, "approval_mode": ModeManual}
		}, rec)
}

// Release returns the hold of a withdrawal whose payout may exist, on the
// operator's attestation that it did not and will not complete; the
// attestation is stored on the withdrawal, which reads refunded. What the
// service can check it checks first, outside any transaction: a
// withdrawal still submitting only once no submitter's claim is live
// (claimLapsed), no payout of it that the processor has not cancelled
// (payoutLive), and a BTC transaction it recorded only once the wallet
// shows it replaced or does not know it (transactionGone).
func (s *Service) Release(ctx context.Context, p DecideParams, rec Completer) (AdminView, []byte, error) {
	if !storable(p.Attestation) {
		return AdminView{}, nil, fault.New(fault.Invalid, "attestation must be valid UTF-8 text without NUL characters")
	}
	if n := utf8.RuneCountInString(p.Attestation); n < MinAttestation || n > MaxAttestation {
		// The HTTP handler reports this as a field error before getting here.
		return AdminView{}, nil, fault.New(fault.Invalid, fmt.Sprintf("attestation must have %d to %d characters", MinAttestation, MaxAttestation))
	}
	if err := s.refuseUnsigned(p); err != nil {
		return AdminView{}, nil, err
	}
	// A payout the processor has not cancelled may still pay: ask it
	// first (no network call inside the transaction), and refuse if the
	// withdrawal changed in between.
	w, err := s.Get(ctx, p.WithdrawalID)
	if err != nil {
		return AdminView{}, nil, err
	}
	if _, err := Next(w.Status, Release); err != nil {
		return AdminView{}, nil, err
	}
	if err := s.claimLapsed(w); err != nil {
		return AdminView{}, nil, err
	}
	if err := s.payoutLive(ctx, w); err != nil {
		return AdminView{}, nil, err
	}
	if err := s.transactionGone(ctx, w); err != nil {
		return AdminView{}, nil, err
	}
	var out AdminView
	body, err := s.decideTx(ctx, p, audit.WithdrawalRelease, map[string]any{"attestation": p.Attestation}, rec,
		func(ctx context.Context, tx bun.Tx, cur *Withdrawal, a asset.Asset, actor audit.Actor) (any, error) {
			if cur.SubmitAttempts != w.SubmitAttempts || derefStr(cur.BackendRef) != derefStr(w.BackendRef) || derefStr(cur.Txid) != derefStr(w.Txid) {
				return nil, fault.Wrap(fault.Conflict, "the withdrawal's payout changed while the processor was asked about it; retry", ErrIllegalTransition)
			}
			if err := s.claimLapsed(*cur); err != nil {
				return nil, err
			}
			set := map[string]any{"released_by": actor.String(), "release_attestation": p.Attestation}
			if cur.Status == StatusSubmitting {
				set["claim_token"], set["next_attempt_at"] = nil, nil
			}
			done, err := s.returnHold(ctx, tx, cur, Release, "withdrawal hold released by an operator", set)
			if err != nil {
				return nil, err
			}
			out, err = s.adminViewTx(ctx, tx, done, a)
			return out, err
		})
	if err != nil {
		return AdminView{}, nil, err
	}
	return out, body, nil
}

// refund is a decision that returns the hold (reject): the withdrawal
// becomes refunded with the columns set gives for the deciding actor.
func (s *Service) refund(ctx context.Context, p DecideParams, action string, params map[string]any, t Trigger, memo string,
	set func(audit.Actor) map[string]any, rec Completer) (AdminView, []byte, error) {
	var out AdminView
	body, err := s.decideTx(ctx, p, action, params, rec,
		func(ctx context.Context, tx bun.Tx, w *Withdrawal, a asset.Asset, actor audit.Actor) (any, error) {
			cur, err := s.returnHold(ctx, tx, w, t, memo, set(actor))
			if err != nil {
				return nil, err
			}
			out, err = s.adminViewTx(ctx, tx, cur, a)
			return out, err
		})
	if err != nil {
		return AdminView{}, nil, err
	}
	return out, body, nil
}

// returnHold moves w to refunded by t, returning its hold to available and
// taking it out of the asset's 24-hour volume.
func (s *Service) returnHold(ctx context.Context, tx bun.Tx, w *Withdrawal, t Trigger, memo string, set map[string]any) (Withdrawal, error) {
	if _, err := Next(w.Status, t); err != nil {
		return Withdrawal{}, err
	}
	if _, err := ledger.ReleaseHold(ctx, tx, w.Asset, w.holder(), w.AmountGross, w.ID.String(), memo); err != nil {
		if errors.Is(err, ledger.ErrHoldSettled) {
			return Withdrawal{}, fault.Wrap(fault.Conflict, "the payout is confirmed and the money has left: its hold cannot be released", ErrIllegalTransition)
		}
		return Withdrawal{}, err
	}
	// A released broadcast: its transfer did not happen (the operator
	// attests it), so what the broadcast put in flight is back in custody.
	if _, err := ledger.ReverseBroadcast(ctx, tx, w.Asset, w.ID.String(), memo); err != nil {
		return Withdrawal{}, err
	}
	if err := windowSub(ctx, tx, w.Asset, w.VolumeMinute, w.AmountGross); err != nil {
		return Withdrawal{}, err
	}
	if w.Txid != nil || w.BackendRef != nil || w.SubmitAttempts > 0 {
		// Its payout or transaction may still confirm, or a create call
		// of an attempt may still make a payout: watched
		// (withdrawal.paid_after_refund).
		set["refund_watch_until"] = s.now().Add(RefundWatch)
	}
	if err := s.transit(ctx, tx, w, t, set); err != nil {
		return Withdrawal{}, err
	}
	return *w, nil
}

// decideTx runs one operator decision: it locks the withdrawal, reads its
// asset, authorizes the decision against the row as locked (authorize:
// the operator's signature of DecisionExpect, or the request's own actor),
// runs fn as that actor, records the audit row (with the signature) and
// completes the idempotency key with fn's answer (200), all in one
// transaction.
func (s *Service) decideTx(ctx context.Context, p DecideParams, action string, params map[string]any, rec Completer,
	fn func(ctx context.Context, tx bun.Tx, w *Withdrawal, a asset.Asset, actor audit.Actor) (any, error)) ([]byte, error) {
	if !p.Actor.Valid() && p.Signature == nil {
		return nil, fault.New(fault.Unauthenticated, "the operator is not known")
	}
	var body []byte
	err := db.RunInTx(ctx, s.DB, func(ctx context.Context, tx bun.Tx) error {
		w, err := lockWithdrawal(ctx, tx, p.WithdrawalID)
		if err != nil {
			return err
		}
		a, err := (&asset.Store{DB: tx}).Get(ctx, w.Asset)
		if err != nil {
			return err
		}
		actor, err := s.authorize(ctx, tx, p, action, w, a)
		if err != nil {
			return err
		}
		answer, err := fn(ctx, tx, &w, a, actor)
		if err != nil {
			return err
		}
		params["withdrawal_id"] = w.ID.String()
		if _, err := audit.Record(ctx, tx, s.now(), actor, action, w.ID.String(), params); err != nil {
			return err
		}
		if body, err = json.Marshal(answer); err != nil {
			return err
		}
		if rec == nil {
			return nil
		}
		return rec.CompleteTx(ctx, tx, http.StatusOK, "application/json", body)
	})
	if errors.Is(err, idempotency.ErrLost) {
		return nil, ErrTakenOver
	}
	if err != nil {
		return nil, err
	}
	idempotency.MarkCompleted(rec)
	return body, nil
}

func checkNote(v *string, field string) error {
	if v != nil && !storable(*v) {
		return fault.Validation(fault.FieldError{Loc: []any{"body", field}, Type: "string_type",
			Msg: "Input should be valid UTF-8 text without NUL characters"})
	}
	if v != nil && utf8.RuneCountInString(*v) > MaxNote {
		return fault.Validation(fault.FieldError{Loc: []any{"body", field}, Type: "string_too_long",
			Msg: fmt.Sprintf("String should have at most %d characters", MaxNote), Ctx: map[string]any{"max_length": MaxNote}})
	}
	return nil
}

// storable reports text PostgreSQL can store: valid UTF-8 without NUL.
func storable(s string) bool { return httpapi.IsStorable(s) }
