package withdrawal

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/uptrace/bun"

	"svc/modules/asset"
	"svc/modules/audit"
	"svc/modules/operator"
	"svc/platform/timefmt"
)

// DecisionExpect is what an operator signs to decide on a withdrawal, and
// what the service requires of the signature: action (audit.WithdrawalApprove,
// WithdrawalReject, WithdrawalRelease or WithdrawalMarkBroadcast) on the
// withdrawal's id, by an approver (or admin), with the facts of v, the
// withdrawal's admin view as the operator reads it and as the API renders
// it:
//
//	asset           the asset code
//	amount          the gross, in display units (amount_gross)
//	destination     the address, or the BOLT11 invoice (destination_address)
//	amount_to_send  USDT_TRC20 only, once fixed (at approval): the net the
//	                operator sends (amount_net)
//
// and the request's own parameter when given: approve's note, reject's
// reason, release's attestation, mark-broadcast's txid (trimmed). The
// service builds it from the withdrawal as locked by the decision's
// transaction, so a signature over another amount or destination is
// refused (403). The service, svc admin withdrawals and the tests build
// it here.
func DecisionExpect(action string, v AdminView, p DecideParams) operator.Expect {
	f := map[string]string{"asset": v.Asset, "amount": v.AmountGross, "destination": v.DestinationAddress}
	if v.Asset == asset.USDTTRC20 && v.AmountNet != nil {
		f["amount_to_send"] = *v.AmountNet
	}
	switch {
	case action == audit.WithdrawalApprove && p.Note != nil:
		f["note"] = *p.Note
	case action == audit.WithdrawalReject && p.Reason != nil:
		f["reason"] = *p.Reason
	case action == audit.WithdrawalRelease && p.Attestation != "":
		f["attestation"] = p.Attestation
	case action == audit.WithdrawalMarkBroadcast && p.Txid != "":
		f["txid"] = p.Txid
	}
	return operator.Expect{Action: action, Resource: v.WithdrawalID, Facts: f, Role: operator.Approver}
}

// authorize is the actor of decision p on w, locked by tx, of asset a:
// with a signature, the enrolled operator whose key signed exactly
// DecisionExpect of w as it is now, recently (operator.Service.Authorize),
// and a statement already used is refused (401) before the decision is
// checked any further (audit.Record's unique nonce refuses concurrent
// ones); without one, p's own actor, unless signatures are required
// (401). Without an operator service (Operators nil) a decision is
// unsigned.
func (s *Service) authorize(ctx context.Context, tx bun.Tx, p DecideParams, action string, w Withdrawal, a asset.Asset) (audit.Actor, error) {
	return s.Operators.Authorize(ctx, tx, p.Actor, p.Signature, DecisionExpect(action, renderAdmin(w, a.Decimals), p))
}

// refuseUnsigned refuses an unsigned decision when signatures are
// required, before a decision that asks the processor or the TRON node
// first does so (decideTx's authorize refuses it too).
func (s *Service) refuseUnsigned(p DecideParams) error {
	if s.Operators.SignaturesRequired() && p.Signature == nil {
		return operator.ErrUnsigned
	}
	return nil
}

// ApprovalView is one approval of a withdrawal, as its admin view lists
// them.
type ApprovalView struct {
	// Operator and KeyID name the enrolled operator and the key that
	// signed the approval; null for an unsigned one (an admin API key's,
	// which never counts toward four-eyes).
	Operator *string `json:"operator"`
	KeyID    *string `json:"key_id"`
	// Actor is who the audit trail records: "op:NAME", or the API key.
	Actor string `json:"actor"`
	// SignedAt is the signed statement's time; null when unsigned.
	SignedAt *string `json:"signed_at"`
	// ApprovedAt is when the approval was recorded.
	ApprovedAt string  `json:"approved_at"`
	Note       *string `json:"note"`
	// SignatureVerified: the stored statement verifies with the key the
	// enrollment chain enrolled under its key id (revoked since or not),
	// is an approval of this withdrawal by the approval's operator and key,
	// and states its asset, gross and destination as they are now and the
	// approval's note. False for an unsigned approval.
	SignatureVerified bool `json:"signature_verified"`
}

// adminViewTx is w's admin view, read with tx (a decision's answer), its
// asset a.
func (s *Service) adminViewTx(ctx context.Context, tx bun.IDB, w Withdrawal, a asset.Asset) (AdminView, error) {
	vs, err := s.renderAdmins(ctx, tx, []Withdrawal{w}, map[string]int{a.Code: a.Decimals})
	if err != nil {
		return AdminView{}, err
	}
	return vs[0], nil
}

// renderAdmins renders ws (admin view), each with its asset's decimals dec
// and its approvals read with idb, oldest first, their signatures verified
// against the enrollment chain read with idb (replayed once, and only when
// an approval is signed).
func (s *Service) renderAdmins(ctx context.Context, idb bun.IDB, ws []Withdrawal, dec map[string]int) ([]AdminView, error) {
	out := make([]AdminView, 0, len(ws))
	if len(ws) == 0 {
		return out, nil
	}
	ids := make([]uuid.UUID, 0, len(ws))
	for _, w := range ws {
		ids = append(ids, w.ID)
	}
	var aps []Approval
	if err := idb.NewSelect().Model(&aps).Where("withdrawal_id IN (?)", bun.In(ids)).OrderExpr("created_at, actor").Scan(ctx); err != nil {
		return nil, fmt.Errorf("read approvals of withdrawals: %w", err)
	}
	by := map[uuid.UUID][]Approval{}
	signed := false
	for _, ap := range aps {
		by[ap.WithdrawalID] = append(by[ap.WithdrawalID], ap)
		signed = signed || len(ap.Signature) > 0
	}
	var roster *operator.Roster
	if signed && s.Operators != nil {
		r, err := s.Operators.Roster(ctx, idb)
		if err != nil {
			// The views still answer; no signature verifies.
			s.log().WarnContext(ctx, "withdrawal: the enrollment chain does not verify: approvals read unverified", "error", err)
		}
		roster = r
	}
	for _, w := range ws {
		v := renderAdmin(w, dec[w.Asset])
		for _, ap := range by[w.ID] {
			v.Approvals = append(v.Approvals, s.approvalView(roster, v, ap))
		}
		out = append(out, v)
	}
	return out, nil
}

// approvalView renders approval ap of the withdrawal whose admin view is v,
// verifying its signature with roster (nil: not verified).
func (s *Service) approvalView(roster *operator.Roster, v AdminView, ap Approval) ApprovalView {
	out := ApprovalView{Operator: ap.Operator, KeyID: ap.KeyID, Actor: audit.Actor{ID: ap.Actor, Label: ap.ActorLabel}.String(),
		ApprovedAt: timefmt.Format(ap.CreatedAt), Note: ap.Note}
	if len(ap.Signature) == 0 {
		return out
	}
	var env operator.Envelope
	if json.Unmarshal(ap.Signature, &env) != nil {
		return out
	}
	st, err := env.Parse()
	if err != nil {
		return out
	}
	at, _ := time.Parse(operator.TimeLayout, st.At) // Parse checked it
	out.SignedAt = ptr(timefmt.Format(at))
	if roster == nil {
		return out
	}
	// The facts that cannot change after an approval, and its note, as
	// they are now; the rest as signed.
	note, hasNote := st.Facts["note"]
	if st.Facts["asset"] != v.Asset || st.Facts["amount"] != v.AmountGross || st.Facts["destination"] != v.DestinationAddress ||
		hasNote != (ap.Note != nil) || (ap.Note != nil && note != *ap.Note) {
		return out
	}
	// By the key the chain enrolled, revoked since or not: its freshness
	// and the role it needed were checked when it was accepted.
	signer, err := roster.VerifyRecorded(env, audit.WithdrawalApprove, v.WithdrawalID, s.Operators.RP)
	out.SignatureVerified = err == nil && ap.Operator != nil && signer.Operator == *ap.Operator &&
		ap.KeyID != nil && signer.KeyID == *ap.KeyID
	return out
}
