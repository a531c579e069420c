package deposit

import (
	"context"

	"github.com/google/uuid"
	"github.com/uptrace/bun"

	"svc/modules/asset"
	"svc/platform/metadata"
	"svc/platform/money"
	"svc/platform/timefmt"
)

// View is the API's Deposit.
type View struct {
	DepositID            string        `json:"deposit_id"`
	ExternalUserID       *string       `json:"external_user_id"` // null for a platform account's
	PlatformAccount      *string       `json:"platform_account"` // null for a user's
	Asset                string        `json:"asset"`
	Status               Status        `json:"status"`
	Address              *string       `json:"address"`
	CheckoutLink         *string       `json:"checkout_link"`
	ExpiresAt            *string       `json:"expires_at"`
	AddressReservedUntil *string       `json:"address_reserved_until"`
	AmountExpected       *string       `json:"amount_expected"`
	AmountCredited       string        `json:"amount_credited"`
	CreatedAt            string        `json:"created_at"`
	Payments             []PaymentView `json:"payments"`
	// The platform's labels: {} and null when it gave none.
	Metadata        metadata.Metadata `json:"metadata"`
	ClientReference *string           `json:"client_reference"`
}

// PaymentView is the API's Deposit payment.
type PaymentView struct {
	PaymentID       string  `json:"payment_id"`
	Amount          string  `json:"amount"`
	Credited        bool    `json:"credited"`
	CreditedAt      *string `json:"credited_at"`
	AfterExpiration bool    `json:"after_expiration"`
	ResolvedBy      *string `json:"resolved_by"`
}

// AddressHistoryView is the API's Address history.
type AddressHistoryView struct {
	Address      *string           `json:"address"`
	Reservations []ReservationView `json:"reservations"`
}

// ReservationView is one deposit that held an address.
type ReservationView struct {
	DepositID       string  `json:"deposit_id"`
	ExternalUserID  *string `json:"external_user_id"`
	PlatformAccount *string `json:"platform_account"`
	Status          Status  `json:"status"`
	ReservedFrom    *string `json:"reserved_from"`
	ReservedUntil   *string `json:"reserved_until"`
}

// decimalsOf returns every asset's decimals by code.
func decimalsOf(ctx context.Context, idb bun.IDB) (map[string]int, error) {
	return asset.Decimals(ctx, idb)
}

// render builds the API view of d with its payments.
func render(d Deposit, ps []Payment, decimals int) View {
	v := View{
		DepositID: d.ID.String(), ExternalUserID: optional(d.ExternalUserID), PlatformAccount: optional(d.PlatformAccount),
		Asset: d.Asset, Status: d.Status,
		Address: d.Address, CheckoutLink: d.CheckoutLink, ExpiresAt: timefmt.Ptr(d.ExpiresAt),
		AmountCredited: money.Format(credited(ps), decimals), CreatedAt: timefmt.Format(d.CreatedAt),
		Payments: make([]PaymentView, 0, len(ps)), Metadata: d.Metadata, ClientReference: d.ClientReference,
	}
	if d.AddressReservedFrom != nil && d.Address != nil {
		// Pooled assets only, and only once the deposit has its address.
		v.AddressReservedUntil = timefmt.Ptr(d.AddressReservedUntil)
	}
	if d.AmountExpected != nil {
		s := money.Format(*d.AmountExpected, decimals)
		v.AmountExpected = &s
	}
	for _, p := range ps {
		amount := p.Amount
		if p.Units != nil {
			amount = money.Format(*p.Units, decimals)
		}
		v.Payments = append(v.Payments, PaymentView{PaymentID: p.PaymentID, Amount: amount, Credited: p.Credited,
			CreditedAt: timefmt.Ptr(p.CreditedAt), AfterExpiration: p.AfterExpiration, ResolvedBy: p.ResolvedBy})
	}
	return v
}

// Views renders deposits with their payments.
func (s *Service) Views(ctx context.Context, idb bun.IDB, ds []Deposit) ([]View, error) {
	dec, err := decimalsOf(ctx, idb)
	if err != nil {
		return nil, err
	}
	ids := make([]uuid.UUID, 0, len(ds))
	for _, d := range ds {
		ids = append(ids, d.ID)
	}
	ps, err := payments(ctx, idb, ids...)
	if err != nil {
		return nil, err
	}
	out := make([]View, 0, len(ds))
	for _, d := range ds {
		out = append(out, render(d, ps[d.ID], dec[d.Asset]))
	}
	return out, nil
}

// ViewOf renders one deposit.
func (s *Service) ViewOf(ctx context.Context, idb bun.IDB, d Deposit) (View, error) {
	vs, err := s.Views(ctx, idb, []Deposit{d})
	if err != nil {
		return View{}, err
	}
	return vs[0], nil
}

// HistoryView renders an address history.
func HistoryView(d Deposit, held []Deposit) AddressHistoryView {
	out := AddressHistoryView{Address: d.Address, Reservations: make([]ReservationView, 0, len(held))}
	for _, h := range held {
		r := ReservationView{DepositID: h.ID.String(), ExternalUserID: optional(h.ExternalUserID),
			PlatformAccount: optional(h.PlatformAccount), Status: h.Status}
		if h.AddressReservedFrom != nil {
			r.ReservedFrom = timefmt.Ptr(h.AddressReservedFrom)
			until := h.AddressReservedUntil
			if h.AddressReleasedAt != nil && h.AddressReleasedAt.Before(*until) {
				until = h.AddressReleasedAt
			}
			r.ReservedUntil = timefmt.Ptr(until)
		} else {
			r.ReservedFrom = timefmt.Ptr(&h.CreatedAt)
		}
		out.Reservations = append(out.Reservations, r)
	}
	return out
}
