package hold

import (
	"context"
	"fmt"
	"maps"

	"github.com/google/uuid"
	"github.com/uptrace/bun"

	"svc/modules/asset"
	"svc/modules/event"
	"svc/platform/money"
	"svc/platform/timefmt"
)

// View is the API's Hold.
type View struct {
	HoldID          string            `json:"hold_id"`
	Status          Status            `json:"status"`
	From            AccountRef        `json:"from"`
	Asset           string            `json:"asset"`
	Amount          string            `json:"amount"`
	CapturedAmount  string            `json:"captured_amount"`
	ReleasedAmount  string            `json:"released_amount"`
	Captures        []CaptureView     `json:"captures"`
	ExpiresAt       string            `json:"expires_at"`
	Description     *string           `json:"description"`
	Metadata        map[string]string `json:"metadata"`
	ClientReference *string           `json:"client_reference"`
	CreatedAt       string            `json:"created_at"`
	UpdatedAt       string            `json:"updated_at"`
}

// CaptureView is one account a capture paid.
type CaptureView struct {
	To     AccountRef `json:"to"`
	Amount string     `json:"amount"`
}

// ListView is the API's hold list.
type ListView struct {
	Holds      []View  `json:"holds"`
	NextCursor *string `json:"next_cursor"`
}

func render(h Hold, cs []CaptureRow, decimals int) View {
	v := View{
		HoldID: h.ID.String(), Status: h.Status, From: RefOf(h.payer()), Asset: h.Asset,
		Amount: money.Format(h.Amount, decimals), CapturedAmount: money.Format(h.CapturedAmount, decimals),
		ReleasedAmount: money.Format(h.ReleasedAmount, decimals), Captures: make([]CaptureView, 0, len(cs)),
		ExpiresAt: timefmt.Format(h.ExpiresAt), Description: h.Description, Metadata: map[string]string{},
		ClientReference: h.ClientReference, CreatedAt: timefmt.Format(h.CreatedAt), UpdatedAt: timefmt.Format(h.UpdatedAt),
	}
	maps.Copy(v.Metadata, h.Metadata)
	for _, c := range cs {
		v.Captures = append(v.Captures, CaptureView{To: RefOf(c.to()), Amount: money.Format(c.Amount, decimals)})
	}
	return v
}

// views renders holds with their captures, each with its asset's decimals.
func views(ctx context.Context, idb bun.IDB, hs []Hold) ([]View, error) {
	dec, err := asset.Decimals(ctx, idb)
	if err != nil {
		return nil, err
	}
	ids := make([]uuid.UUID, 0, len(hs))
	for _, h := range hs {
		if h.Status == StatusCaptured {
			ids = append(ids, h.ID)
		}
	}
	cs, err := capturesOf(ctx, idb, ids)
	if err != nil {
		return nil, err
	}
	out := make([]View, 0, len(hs))
	for _, h := range hs {
		out = append(out, render(h, cs[h.ID], dec[h.Asset]))
	}
	return out, nil
}

// decimals returns the asset's decimals, which never change, read once per
// process.
func (s *Service) decimals(ctx context.Context, idb bun.IDB, code string) (int, error) {
	if d, ok := s.decimalsOf.Load(code); ok {
		return d.(int), nil
	}
	dec, err := asset.Decimals(ctx, idb)
	if err != nil {
		return 0, err
	}
	for c, d := range dec {
		s.decimalsOf.Store(c, d)
	}
	d, ok := dec[code]
	if !ok {
		return 0, fmt.Errorf("hold: asset %s has no decimals", code)
	}
	return d, nil
}

// View renders one hold as the API shows it.
func (s *Service) View(ctx context.Context, h Hold) (View, error) {
	vs, err := views(ctx, s.DB, []Hold{h})
	if err != nil {
		return View{}, err
	}
	return vs[0], nil
}

// eventData is the hold's data in its events: the same object as the API's.
func eventData(v View) event.HoldData {
	ref := func(r AccountRef) event.AccountRefData {
		var out event.AccountRefData
		if r.ExternalUserID != nil {
			out.ExternalUserID = *r.ExternalUserID
		}
		if r.PlatformAccount != nil {
			out.PlatformAccount = *r.PlatformAccount
		}
		return out
	}
	d := event.HoldData{HoldID: v.HoldID, Status: string(v.Status), From: ref(v.From), Asset: v.Asset, Amount: v.Amount,
		CapturedAmount: v.CapturedAmount, ReleasedAmount: v.ReleasedAmount, Captures: make([]event.HoldCapture, 0, len(v.Captures)),
		ExpiresAt: v.ExpiresAt, Description: v.Description, Metadata: v.Metadata, ClientReference: v.ClientReference,
		CreatedAt: v.CreatedAt, UpdatedAt: v.UpdatedAt}
	for _, c := range v.Captures {
		d.Captures = append(d.Captures, event.HoldCapture{To: ref(c.To), Amount: c.Amount})
	}
	return d
}
