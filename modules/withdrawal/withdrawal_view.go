package withdrawal

import (
	"context"

	"github.com/uptrace/bun"

	"svc/modules/asset"
	"svc/platform/metadata"
	"svc/platform/money"
	"svc/platform/timefmt"
)

// View is the API's Withdrawal (platform view).
type View struct {
	WithdrawalID       string  `json:"withdrawal_id"`
	ExternalUserID     *string `json:"external_user_id"` // null for a platform account's
	PlatformAccount    *string `json:"platform_account"` // null for a user's
	Asset              string  `json:"asset"`
	Status             Status  `json:"status"`
	DestinationAddress string  `json:"destination_address"`
	AmountGross        string  `json:"amount_gross"`
	Fee                *string `json:"fee"`
	AmountNet          *string `json:"amount_net"`
	ApprovalMode       *string `json:"approval_mode"`
	Txid               *string `json:"txid"`
	FailureReason      *string `json:"failure_reason"`
	CreatedAt          string  `json:"created_at"`
	UpdatedAt          string  `json:"updated_at"`
	// The platform's labels: {} and null when it gave none.
	Metadata        metadata.Metadata `json:"metadata"`
	ClientReference *string           `json:"client_reference"`
}

// CreatedView is the 201 body of creation: approval_reason is present only
// when a gate sent the withdrawal to an operator.
type CreatedView struct {
	View
	ApprovalReason *string `json:"approval_reason,omitempty"`
}

// AdminView is the API's admin Withdrawal.
type AdminView struct {
	View
	ApprovedBy         *string `json:"approved_by"`
	RejectedBy         *string `json:"rejected_by"`
	ReleasedBy         *string `json:"released_by"`
	ReleaseAttestation *string `json:"release_attestation"`
	BackendRef         *string `json:"backend_ref"`
	// ApprovalReason is beyond the SPEC's admin view: why it waited for an
	// operator.
	ApprovalReason *string `json:"approval_reason"`
	// Approvals are its operators' approvals, oldest first, each with its
	// signature verified again (beyond the SPEC: four-eyes).
	Approvals []ApprovalView `json:"approvals"`
}

// ApprovedView answers approve.
type ApprovedView struct {
	AdminView
	// AmountToSend is, for USDT_TRC20, the exact net the operator sends
	// off-service; null for other assets, which the service pays itself.
	AmountToSend *string `json:"amount_to_send"`
	// SendFrom is, for USDT_TRC20, the hot wallet to send from.
	SendFrom *string `json:"send_from"`
	// ApprovalsNeeded is how many more operators must approve (four-eyes);
	// 0 once approved.
	ApprovalsNeeded int `json:"approvals_needed"`
}

func fmtPtr(v *int64, decimals int) *string {
	if v == nil {
		return nil
	}
	s := money.Format(*v, decimals)
	return &s
}

func render(w Withdrawal, decimals int) View {
	return View{
		WithdrawalID: w.ID.String(), ExternalUserID: optional(w.ExternalUserID), PlatformAccount: optional(w.PlatformAccount),
		Asset: w.Asset, Status: w.Status,
		DestinationAddress: w.Destination, AmountGross: money.Format(w.AmountGross, decimals),
		Fee: fmtPtr(w.Fee, decimals), AmountNet: fmtPtr(w.AmountNet, decimals), ApprovalMode: w.ApprovalMode,
		Txid: w.Txid, FailureReason: w.FailureReason,
		CreatedAt: timefmt.Format(w.CreatedAt), UpdatedAt: timefmt.Format(w.UpdatedAt),
		Metadata: w.Metadata, ClientReference: w.ClientReference,
	}
}

// renderAdmin is w's admin view without its approvals (renderAdmins
// adds them).
func renderAdmin(w Withdrawal, decimals int) AdminView {
	return AdminView{View: render(w, decimals), ApprovedBy: w.ApprovedBy, RejectedBy: w.RejectedBy,
		ReleasedBy: w.ReleasedBy, ReleaseAttestation: w.ReleaseAttestation, BackendRef: w.BackendRef,
		ApprovalReason: w.ApprovalReason, Approvals: []ApprovalView{}}
}

func renderCreated(w Withdrawal, decimals int) CreatedView {
	return CreatedView{View: render(w, decimals), ApprovalReason: w.ApprovalReason}
}

// decimals returns every asset's decimals by code.
func decimals(ctx context.Context, idb bun.IDB) (map[string]int, error) {
	return asset.Decimals(ctx, idb)
}

// Views renders withdrawals (platform view).
func (s *Service) Views(ctx context.Context, ws []Withdrawal) ([]View, error) {
	return views(ctx, s.DB, ws)
}

func views(ctx context.Context, idb bun.IDB, ws []Withdrawal) ([]View, error) {
	return renderAll(ctx, idb, ws, render)
}

// AdminViews renders withdrawals (admin view), with their approvals.
func (s *Service) AdminViews(ctx context.Context, ws []Withdrawal) ([]AdminView, error) {
	return s.adminViews(ctx, s.DB, ws)
}

// adminViews renders withdrawals (admin view) with what idb reads: the
// assets' decimals, the approvals and the enrollment chain.
func (s *Service) adminViews(ctx context.Context, idb bun.IDB, ws []Withdrawal) ([]AdminView, error) {
	dec, err := decimals(ctx, idb)
	if err != nil {
		return nil, err
	}
	return s.renderAdmins(ctx, idb, ws, dec)
}

// renderAll renders withdrawals, each with its asset's decimals.
func renderAll[V any](ctx context.Context, idb bun.IDB, ws []Withdrawal, render func(Withdrawal, int) V) ([]V, error) {
	dec, err := decimals(ctx, idb)
	if err != nil {
		return nil, err
	}
	out := make([]V, 0, len(ws))
	for _, w := range ws {
		out = append(out, render(w, dec[w.Asset]))
	}
	return out, nil
}
