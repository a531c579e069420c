package deposit_test

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"svc/cmd/svc/app/apptest"
	"svc/modules/deposit"
	"svc/platform/btcpay/btcpaysim"
	"svc/platform/timefmt"
)

func (e *env) history(t *testing.T, id string) deposit.AddressHistoryView {
	t.Helper()
	r := e.Get("/v1/deposits/" + id + "/address-history")
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	var h deposit.AddressHistoryView
	r.JSON(t, &h)
	return h
}

func (e *env) alerts(t *testing.T, typ string) []string {
	t.Helper()
	var subjects []string
	require.NoError(t, e.App.DB.Bun.NewSelect().Table("operator_alerts").Column("subject").Where("type = ?", typ).
		Scan(context.Background(), &subjects))
	return subjects
}

// Rule 2: with every pool address reserved, creation answers 503 with the
// SPEC's code and Retry-After before calling the processor; the release job
// returns an address once its reservation (60 minutes plus the grace) has
// passed, and the address history shows every holder.
func TestUSDTPoolExhaustionAndRelease(t *testing.T) {
	t.Parallel()
	pool := btcpaysim.DefaultTronPool(2)
	e := setup(t, withPools(pool, pool))
	a := e.create(t, "lena", "USDT_TRC20", units("10000000"))
	b := e.create(t, "mike", "USDT_TRC20", units("20000000"))
	require.ElementsMatch(t, pool, []string{*a.Address, *b.Address})
	exp, err := time.Parse(time.RFC3339, *a.ExpiresAt)
	require.NoError(t, err)
	require.WithinDuration(t, e.Clock.Now().Add(60*time.Minute), exp, time.Second, "USDT invoices expire after 60 minutes")
	require.Equal(t, timefmt.Format(exp.Add(30*time.Minute)), *a.AddressReservedUntil, "expiry plus USDT_POOL_GRACE")
	require.Equal(t, "10.000000", *a.AmountExpected)

	exhausted := func() {
		t.Helper()
		before := len(e.Sim.Invoices())
		r := e.Post("/v1/deposits", createBody{ExternalUserID: "nina", Asset: "USDT_TRC20", ExpectedAmount: units("5000000")})
		require.Equal(t, http.StatusServiceUnavailable, r.Status, string(r.Body))
		d, ok := detail(t, r).(map[string]any)
		require.True(t, ok, "structured detail: %s", r.Body)
		require.Equal(t, "DEPOSIT_TEMPORARILY_UNAVAILABLE", d["code"])
		require.NotEmpty(t, d["message"])
		secs, err := strconv.Atoi(r.Header.Get("Retry-After"))
		require.NoError(t, err, "Retry-After")
		require.Positive(t, secs)
		require.Len(t, e.Sim.Invoices(), before, "refused before calling the processor")
		require.Equal(t, 0, e.countDeposits(t, "nina"))
	}
	exhausted()

	// The invoices expire at the processor, which frees the addresses at
	// once; the service keeps them for the grace.
	e.advance(61 * time.Minute)
	n, err := e.Svc.ReleasePool(context.Background())
	require.NoError(t, err)
	require.Zero(t, n)
	exhausted()

	e.advance(30 * time.Minute)
	n, err = e.Svc.ReleasePool(context.Background())
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	c := e.create(t, "nina", "USDT_TRC20", units("5000000"))
	require.Contains(t, pool, *c.Address)

	h := e.history(t, c.DepositID)
	require.Equal(t, c.Address, h.Address)
	require.Len(t, h.Reservations, 2, "the earlier holder and this deposit")
	prev := a
	if *b.Address == *c.Address {
		prev = b
	}
	require.Equal(t, prev.DepositID, h.Reservations[0].DepositID)
	require.Equal(t, prev.ExternalUserID, h.Reservations[0].ExternalUserID)
	require.Equal(t, c.DepositID, h.Reservations[1].DepositID)
	require.Equal(t, deposit.StatusPending, h.Reservations[1].Status)
	require.NotNil(t, h.Reservations[0].ReservedUntil)
	require.Equal(t, *c.AddressReservedUntil, *h.Reservations[1].ReservedUntil)
}

// The processor's pool can be full while the service's is not (a smaller
// pool configured at the processor): its refusal is the same 503 with the
// code, the deposit stays creating, and the same key completes it later.
func TestProcessorPoolFullIsTheSame503(t *testing.T) {
	t.Parallel()
	simPool := btcpaysim.DefaultTronPool(1)
	e := setup(t, withPools(simPool, btcpaysim.DefaultTronPool(3)))
	first := e.create(t, "olga", "USDT_TRC20", units("1000000"))

	req := apptest.Req{Method: "POST", Path: "/v1/deposits", Idem: "usdt-later",
		Body: createBody{ExternalUserID: "pete", Asset: "USDT_TRC20", ExpectedAmount: units("1000000")}}
	r := e.Do(req)
	require.Equal(t, http.StatusServiceUnavailable, r.Status, string(r.Body))
	require.Equal(t, "DEPOSIT_TEMPORARILY_UNAVAILABLE", detail(t, r).(map[string]any)["code"])
	require.NotEmpty(t, r.Header.Get("Retry-After"))

	// The first deposit is paid in full and settles: the processor frees
	// its address.
	inv := e.invoice(t, first.DepositID)
	e.pay(t, inv.ID, btcpaysim.PayParams{Settled: true})
	e.reconcileTo(t, first.DepositID, deposit.StatusSettled)

	r = e.Do(req)
	v := viewOf(t, r, http.StatusCreated)
	require.Equal(t, simPool[0], *v.Address)
	require.Equal(t, 1, e.countDeposits(t, "pete"))
}

// A clash: the processor hands out an address that a deposit the service
// still considers open holds (here its invoice expired at the processor
// before the service reconciled it). It is logged and raised, and the new
// deposit's payments go to review rather than to a balance: a payment to
// that address could be either user's.
func TestUSDTAddressClashSendsPaymentsToReview(t *testing.T) {
	t.Parallel()
	simPool := btcpaysim.DefaultTronPool(1)
	e := setup(t, withPools(simPool, btcpaysim.DefaultTronPool(2)))
	first := e.create(t, "quin", "USDT_TRC20", units("3000000"))
	require.NoError(t, e.Sim.Expire(e.invoice(t, first.DepositID).ID))

	second := e.create(t, "rita", "USDT_TRC20", units("3000000"))
	require.Equal(t, *first.Address, *second.Address, "the processor reused the address")
	require.Equal(t, []string{second.DepositID}, e.alerts(t, deposit.AlertAddressClash))

	e.payDeposit(t, second.DepositID, btcpaysim.PayParams{Settled: true})
	v := e.reconcileTo(t, second.DepositID, deposit.StatusReview)
	require.Equal(t, "0.000000", v.AmountCredited)
	require.Len(t, v.Payments, 1)
	require.False(t, v.Payments[0].Credited)
	review := e.events(t, "deposit.review_required", second.DepositID)
	require.Len(t, review, 1)
	require.Contains(t, review[0]["review_reason"], "another open deposit")

	h := e.history(t, second.DepositID)
	require.Len(t, h.Reservations, 2)
	require.Equal(t, first.DepositID, h.Reservations[0].DepositID)
	e.reconcileTo(t, first.DepositID, deposit.StatusExpired)
}

// The plugin reuses an address as soon as its invoice closes, while the
// service keeps it reserved for the grace after an expiry. A payment to the
// new deposit inside the expired deposit's grace may be the first user's
// late payment: it goes to review. After the grace it is the new
// deposit's.
func TestUSDTPaymentInsideAnExpiredDepositsGraceGoesToReview(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		wait   time.Duration // after the second deposit is created
		status deposit.Status
	}{
		{"inside the grace", 5 * time.Minute, deposit.StatusReview},
		{"after the grace", 35 * time.Minute, deposit.StatusSettled},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			pool := btcpaysim.DefaultTronPool(1)
			e := setup(t, withPools(pool, btcpaysim.DefaultTronPool(2)))
			first := e.create(t, "uma", "USDT_TRC20", units("3000000"))
			e.advance(61 * time.Minute)
			e.reconcileTo(t, first.DepositID, deposit.StatusExpired)

			second := e.create(t, "vic", "USDT_TRC20", units("3000000"))
			require.Equal(t, *first.Address, *second.Address)
			require.Empty(t, e.alerts(t, deposit.AlertAddressClash), "not a clash: the first deposit is closed")
			e.advance(tt.wait)
			e.payDeposit(t, second.DepositID, btcpaysim.PayParams{Settled: true})
			e.reconcileTo(t, second.DepositID, tt.status)
			if tt.status == deposit.StatusReview {
				e.requireReviewReason(t, second.DepositID, first.DepositID)
			}
		})
	}
}

// An address the processor gives that is not in USDT_POOL_ADDRESSES means
// the configured pool is wrong: the operator is told.
func TestUSDTAddressOutsideTheConfiguredPoolIsRaised(t *testing.T) {
	t.Parallel()
	sim := btcpaysim.DefaultTronPool(3)
	e := setup(t, withPools(sim[:1], sim[1:]))
	v := e.create(t, "sam", "USDT_TRC20", nil)
	require.Equal(t, sim[0], *v.Address)
	require.Equal(t, []string{sim[0]}, e.alerts(t, deposit.AlertAddressUnknown))
}

// USDT attribution: a payment within USDT_AMOUNT_TOLERANCE_PPM of
// amount_expected is credited, one further away goes to review.
func TestUSDTAmountTolerance(t *testing.T) {
	t.Parallel()
	e := setup(t) // 10000 ppm: 1%
	tests := []struct {
		paid   string
		status deposit.Status
	}{
		{"10", deposit.StatusSettled},
		{"9.9", deposit.StatusSettled},
		{"10.1", deposit.StatusSettled},
		{"9.899999", deposit.StatusReview},
		{"12", deposit.StatusReview},
	}
	for _, tt := range tests {
		v := e.create(t, "tess", "USDT_TRC20", units("10000000"))
		e.payDeposit(t, v.DepositID, btcpaysim.PayParams{Amounts: []string{tt.paid}, Settled: true})
		v = e.reconcileTo(t, v.DepositID, tt.status, "paid %s", tt.paid)
		if tt.status == deposit.StatusReview {
			require.False(t, v.Payments[0].Credited)
			e.requireReviewReason(t, v.DepositID, "ppm from amount_expected")
		}
	}
}

// A USDT deposit created without expected_amount cannot attribute a
// payment on a shared pool address (it may be the previous holder's late
// one): every payment to it waits for an operator, who can credit it.
func TestUSDTWithoutExpectedAmountGoesToReview(t *testing.T) {
	t.Parallel()
	e := setup(t)
	v := e.create(t, "una", "USDT_TRC20", nil)
	e.payDeposit(t, v.DepositID, btcpaysim.PayParams{Amounts: []string{"10"}, Settled: true})
	v = e.reconcileTo(t, v.DepositID, deposit.StatusReview)
	require.False(t, v.Payments[0].Credited)
	ev := e.reviewEvent(t, v.DepositID)
	require.Equal(t, deposit.ReasonNoExpectedAmount, ev["review_reason"])
	r := e.resolve(t, v.DepositID, resolveBody{Action: "credit"})
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	require.Equal(t, deposit.StatusSettled, e.deposit(t, v.DepositID).Status)
}
