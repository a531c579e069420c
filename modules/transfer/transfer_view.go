package transfer

import (
	"context"

	"github.com/uptrace/bun"

	"svc/modules/asset"
	"svc/modules/event"
	"svc/modules/ledger"
	"svc/platform/metadata"
	"svc/platform/money"
	"svc/platform/timefmt"
)

// AccountRef is the API's AccountRef: exactly one of the two is set.
type AccountRef struct {
	ExternalUserID  string `json:"external_user_id,omitempty"`
	PlatformAccount string `json:"platform_account,omitempty"`
}

// Holder is the account the reference names.
func (r AccountRef) Holder() ledger.Holder {
	if r.PlatformAccount != "" {
		return ledger.PlatformHolder(r.PlatformAccount)
	}
	return ledger.UserHolder(r.ExternalUserID)
}

// RefOf is the reference of an account.
func RefOf(h ledger.Holder) AccountRef {
	if h.Platform {
		return AccountRef{PlatformAccount: h.ID}
	}
	return AccountRef{ExternalUserID: h.ID}
}

// LegView is one leg of the API's Transfer; its amount is a decimal
// string in the asset's display units, as every amount the API returns.
type LegView struct {
	From   AccountRef `json:"from"`
	To     AccountRef `json:"to"`
	Asset  string     `json:"asset"`
	Amount string     `json:"amount"`
}

// View is the API's Transfer.
type View struct {
	TransferID      string            `json:"transfer_id"`
	Status          string            `json:"status"`
	Legs            []LegView         `json:"legs"`
	Description     *string           `json:"description"`
	Metadata        metadata.Metadata `json:"metadata"`
	ClientReference *string           `json:"client_reference"`
	CreatedAt       string            `json:"created_at"`
}

// ListView is the API's transfer list.
type ListView struct {
	Transfers  []View  `json:"transfers"`
	NextCursor *string `json:"next_cursor"`
}

func render(t Transfer, decimals map[string]int) View {
	v := View{TransferID: t.ID.String(), Status: StatusCompleted, Legs: make([]LegView, len(t.Legs)),
		Description: t.Description, Metadata: t.Metadata, ClientReference: t.ClientReference,
		CreatedAt: timefmt.Format(t.CreatedAt)}
	if v.Metadata == nil {
		v.Metadata = metadata.Metadata{}
	}
	for i, l := range t.Legs {
		v.Legs[i] = LegView{From: RefOf(l.From()), To: RefOf(l.To()), Asset: l.Asset, Amount: money.Format(l.Amount, decimals[l.Asset])}
	}
	return v
}

// views renders transfers with their assets' decimals.
func views(ctx context.Context, idb bun.IDB, ts []Transfer) ([]View, error) {
	dec, err := asset.Decimals(ctx, idb)
	if err != nil {
		return nil, err
	}
	out := make([]View, len(ts))
	for i, t := range ts {
		out[i] = render(t, dec)
	}
	return out, nil
}

// eventData is the data of transfer.completed: the Transfer object.
func eventData(v View) event.TransferCompletedData {
	d := event.TransferCompletedData{TransferID: v.TransferID, Status: v.Status, Legs: make([]event.TransferLegData, len(v.Legs)),
		Description: v.Description, Metadata: v.Metadata, ClientReference: v.ClientReference, CreatedAt: v.CreatedAt}
	for i, l := range v.Legs {
		d.Legs[i] = event.TransferLegData{From: event.AccountRefData(l.From), To: event.AccountRefData(l.To), Asset: l.Asset, Amount: l.Amount}
	}
	return d
}
