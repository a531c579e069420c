package deposit_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"svc/cmd/svc/app/apptest"
	"svc/modules/asset"
	"svc/modules/deposit"
	"svc/platform/btcpay/btcpaysim"
	"svc/platform/idempotency"
)

// countDeposits counts the user's deposits in the database.
func (e *env) countDeposits(t *testing.T, user string) int {
	t.Helper()
	n, err := e.App.DB.Bun.NewSelect().Table("deposits").Where("external_user_id = ?", user).Count(context.Background())
	require.NoError(t, err)
	return int(n)
}

func (e *env) invoicesFor(orderID string) int {
	n := 0
	for _, inv := range e.Sim.Invoices() {
		if inv.OrderID == orderID {
			n++
		}
	}
	return n
}

func detail(t *testing.T, r *apptest.Response) any {
	t.Helper()
	return r.Map(t)["detail"]
}

func TestCreateRefusesBadRequests(t *testing.T) {
	t.Parallel()
	e := setup(t)
	long := strings.Repeat("u", 256)
	tests := []struct {
		name   string
		body   any
		status int
		loc    string
	}{
		{"missing user", map[string]any{"asset": "BTC"}, http.StatusUnprocessableEntity, "external_user_id"},
		{"missing asset", map[string]any{"external_user_id": "u"}, http.StatusUnprocessableEntity, "asset"},
		{"empty user", map[string]any{"external_user_id": "", "asset": "BTC"}, http.StatusUnprocessableEntity, "external_user_id"},
		{"user too long", map[string]any{"external_user_id": long, "asset": "BTC"}, http.StatusUnprocessableEntity, "external_user_id"},
		{"asset too long", map[string]any{"external_user_id": "u", "asset": strings.Repeat("A", 33)}, http.StatusUnprocessableEntity, "asset"},
		{"amount not digits", map[string]any{"external_user_id": "u", "asset": "BTC", "expected_amount": "1.5"}, http.StatusUnprocessableEntity, "expected_amount"},
		{"amount zero", map[string]any{"external_user_id": "u", "asset": "BTC", "expected_amount": "0"}, http.StatusUnprocessableEntity, "expected_amount"},
		{"amount negative", map[string]any{"external_user_id": "u", "asset": "BTC", "expected_amount": "-5"}, http.StatusUnprocessableEntity, "expected_amount"},
		{"amount a number", map[string]any{"external_user_id": "u", "asset": "BTC", "expected_amount": 5}, http.StatusUnprocessableEntity, "expected_amount"},
		{"unknown asset", map[string]any{"external_user_id": "u", "asset": "DOGE"}, http.StatusNotFound, ""},
		{"NUL in the user", map[string]any{"external_user_id": "u\u0000v", "asset": "BTC"}, http.StatusUnprocessableEntity, "external_user_id"},
		{"NUL in the asset", map[string]any{"external_user_id": "u", "asset": "BT\u0000C"}, http.StatusUnprocessableEntity, "asset"},
	}
	for _, tt := range tests {
		r := e.Post("/v1/deposits", tt.body)
		require.Equal(t, tt.status, r.Status, "%s: %s", tt.name, r.Body)
		if tt.loc != "" {
			require.Contains(t, string(r.Body), `"`+tt.loc+`"`, tt.name)
		}
	}
	require.Equal(t, 0, e.countDeposits(t, "u"), "nothing was created")
	require.Empty(t, e.Sim.Invoices(), "the processor was not called")

	r := e.Do(apptest.Req{Method: "POST", Path: "/v1/deposits", Body: createBody{ExternalUserID: "u", Asset: "BTC"}, Idem: "-"})
	require.Equal(t, http.StatusBadRequest, r.Status, "no Idempotency-Key")
	r = e.Get("/v1/users/u%00v/deposits")
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, "a NUL in the path: %s", r.Body)
}

// Rule 5: USDT answers 503 until its payment method is discovered.
func TestCreateOfADisabledAssetIs503(t *testing.T) {
	t.Parallel()
	e := setup(t)
	_, err := e.App.Assets.SetEnabled(context.Background(), asset.USDTTRC20, false)
	require.NoError(t, err)
	r := e.Post("/v1/deposits", createBody{ExternalUserID: "u", Asset: "USDT_TRC20", ExpectedAmount: units("1000000")})
	require.Equal(t, http.StatusServiceUnavailable, r.Status)
	_, isString := detail(t, r).(string)
	require.True(t, isString, "a plain-string detail: %s", r.Body)
	require.Equal(t, 0, e.countDeposits(t, "u"))
}

func TestCreateWithoutAProcessorIs503(t *testing.T) {
	t.Parallel()
	e := apptest.New(t)
	r := e.Post("/v1/deposits", createBody{ExternalUserID: "u", Asset: "BTC"})
	require.Equal(t, http.StatusServiceUnavailable, r.Status, string(r.Body))
	_, isString := r.Map(t)["detail"].(string)
	require.True(t, isString)
}

// Rule 3: unreachable -> 503 with a string detail, the deposit stays
// creating; a retry with the same key while it is still down creates
// nothing more; once it is back the same key completes the same deposit,
// with one invoice.
func TestProcessorDownThenTheSameKeyCompletesTheDeposit(t *testing.T) {
	t.Parallel()
	for _, mode := range []btcpaysim.DownMode{btcpaysim.DownError, btcpaysim.DownDrop} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			e.Sim.GoDown(mode)
			req := apptest.Req{Method: "POST", Path: "/v1/deposits", Idem: "down-" + string(mode),
				Body: createBody{ExternalUserID: "gina", Asset: "BTC", ExpectedAmount: units("50000")}}
			for range 2 {
				r := e.Do(req)
				require.Equal(t, http.StatusServiceUnavailable, r.Status, string(r.Body))
				_, isString := detail(t, r).(string)
				require.True(t, isString, "{detail: string}: %s", r.Body)
			}
			require.Equal(t, 1, e.countDeposits(t, "gina"), "the intent was committed once")
			l := e.Get("/v1/users/gina/deposits")
			var page deposit.ListView
			l.JSON(t, &page)
			require.Len(t, page.Deposits, 1)
			require.Equal(t, deposit.StatusCreating, page.Deposits[0].Status)
			require.Nil(t, page.Deposits[0].Address)
			id := page.Deposits[0].DepositID

			e.Sim.Up()
			r := e.Do(req)
			v := viewOf(t, r, http.StatusCreated)
			require.Equal(t, id, v.DepositID, "the same deposit, not a second one")
			require.Equal(t, deposit.StatusPending, v.Status)
			require.Equal(t, 1, e.invoicesFor(id))

			again := e.Do(req)
			require.Equal(t, http.StatusCreated, again.Status)
			require.Equal(t, "true", again.Header.Get("Idempotent-Replayed"))
			require.JSONEq(t, string(r.Body), string(again.Body))
			require.Equal(t, 1, e.countDeposits(t, "gina"))
		})
	}
}

// The ambiguous case: the processor created the invoice and the answer was
// lost. The retry finds the invoice by orderId instead of creating another.
func TestAmbiguousCreationIsCompletedFromTheProcessorsInvoice(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.Sim.FailNext(1, btcpaysim.DownDropAfter)
	req := apptest.Req{Method: "POST", Path: "/v1/deposits", Idem: "ambiguous",
		Body: createBody{ExternalUserID: "hank", Asset: "BTC"}}
	r := e.Do(req)
	require.Equal(t, http.StatusServiceUnavailable, r.Status, string(r.Body))
	invs := e.Sim.Invoices()
	require.Len(t, invs, 1, "the invoice exists although the answer was lost")

	r = e.Do(req)
	v := viewOf(t, r, http.StatusCreated)
	require.Equal(t, invs[0].OrderID, v.DepositID)
	require.Equal(t, invs[0].Destination, *v.Address)
	require.Len(t, e.Sim.Invoices(), 1, "no second invoice")
}

// The poller completes a creating deposit whose invoice exists; the
// client's retry then gets that deposit.
func TestPollerAdoptsTheInvoiceOfACreatingDeposit(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.Sim.FailNext(1, btcpaysim.DownDropAfter)
	req := apptest.Req{Method: "POST", Path: "/v1/deposits", Idem: "adopt", Body: createBody{ExternalUserID: "ivy", Asset: "BTC"}}
	require.Equal(t, http.StatusServiceUnavailable, e.Do(req).Status)

	e.advance(time.Minute)
	res, err := e.Svc.Poll(context.Background())
	require.NoError(t, err)
	require.Equal(t, 1, res.Visited)
	require.Zero(t, res.Failed)
	l := e.Get("/v1/users/ivy/deposits")
	var page deposit.ListView
	l.JSON(t, &page)
	require.Len(t, page.Deposits, 1)
	require.Equal(t, deposit.StatusPending, page.Deposits[0].Status)

	r := e.Do(req)
	require.Equal(t, http.StatusCreated, r.Status)
	var v deposit.View
	r.JSON(t, &v)
	require.Equal(t, page.Deposits[0], v)
	require.Len(t, e.Sim.Invoices(), 1)
}

// Rule 4: a definitive refusal answers 502 and the deposit is failed; a
// retry with the same key answers 502 again without calling the processor
// to create anything.
func TestRefusedCreationFailsTheDeposit(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.Sim.SetPaymentMethods("BTC-CHAIN", "USDT-TRON") // the store has no Lightning: the invoice is refused
	req := apptest.Req{Method: "POST", Path: "/v1/deposits", Idem: "refused", Body: createBody{ExternalUserID: "jack", Asset: "BTC_LN"}}
	for range 2 {
		r := e.Do(req)
		require.Equal(t, http.StatusBadGateway, r.Status, string(r.Body))
		_, isString := detail(t, r).(string)
		require.True(t, isString)
	}
	require.Equal(t, 1, e.countDeposits(t, "jack"))
	var page deposit.ListView
	e.Get("/v1/users/jack/deposits").JSON(t, &page)
	require.Len(t, page.Deposits, 1)
	require.Equal(t, deposit.StatusFailed, page.Deposits[0].Status)
	require.Nil(t, page.Deposits[0].Address)
	require.Empty(t, e.Sim.Invoices())
}

func TestCreateIsIdempotent(t *testing.T) {
	t.Parallel()
	e := setup(t)
	body := createBody{ExternalUserID: "kim", Asset: "BTC", ExpectedAmount: units("1000")}
	first := e.Do(apptest.Req{Method: "POST", Path: "/v1/deposits", Idem: "same", Body: body})
	require.Equal(t, http.StatusCreated, first.Status)
	second := e.Do(apptest.Req{Method: "POST", Path: "/v1/deposits", Idem: "same", Body: body})
	require.Equal(t, http.StatusCreated, second.Status)
	require.Equal(t, "true", second.Header.Get("Idempotent-Replayed"))
	require.Equal(t, string(first.Body), string(second.Body))
	other := e.Do(apptest.Req{Method: "POST", Path: "/v1/deposits", Idem: "same",
		Body: createBody{ExternalUserID: "kim", Asset: "BTC", ExpectedAmount: units("2000")}})
	require.Equal(t, http.StatusUnprocessableEntity, other.Status)
	require.Equal(t, 1, e.countDeposits(t, "kim"))
	require.Len(t, e.Sim.Invoices(), 1)
}

// TestIssuedInOneStatementAnswersAsRead: a creation's 201, issued and
// stored with its key in one statement from the deposit as the request
// created it, is the deposit as read back, and the row holds the invoice.
func TestIssuedInOneStatementAnswersAsRead(t *testing.T) {
	t.Parallel()
	e := setup(t)
	for i, body := range []createBody{
		{ExternalUserID: "ivy", Asset: "BTC", ExpectedAmount: units("12345")},
		{ExternalUserID: "ivy", Asset: "BTC"},
		{ExternalUserID: "ivy", Asset: "BTC_LN", ExpectedAmount: units("1000")},
	} {
		r := e.Do(apptest.Req{Method: "POST", Path: "/v1/deposits", Idem: fmt.Sprint("at-once-", i), Body: body})
		v := viewOf(t, r, http.StatusCreated)
		require.Equal(t, deposit.StatusPending, v.Status)
		require.NotNil(t, v.Address)
		got := e.Get("/v1/deposits/" + v.DepositID)
		require.Equal(t, http.StatusOK, got.Status)
		require.JSONEq(t, string(got.Body), string(r.Body))
		var row struct {
			Status    string  `bun:"status"`
			InvoiceID *string `bun:"invoice_id"`
			Address   *string `bun:"address"`
		}
		require.NoError(t, e.App.DB.Bun.NewSelect().Table("deposits").Column("status", "invoice_id", "address").
			Where("id = ?", v.DepositID).Scan(context.Background(), &row))
		require.Equal(t, "pending", row.Status)
		require.NotNil(t, row.InvoiceID)
		require.Equal(t, *v.Address, *row.Address)
	}
}

// TestTakenOverKeyIssuesNothing: an attempt whose key a newer attempt took
// over gets ErrTakenOver from its issuing statement, which then applies
// nothing: the deposit stays creating, for the newer attempt to finish.
func TestTakenOverKeyIssuesNothing(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	store := &idempotency.Store{DB: e.App.DB.Bun, Now: time.Now}
	rec, stored, err := store.Begin(ctx, "taken-over", "POST", "/v1/deposits", []byte("hash"))
	require.NoError(t, err)
	require.Nil(t, stored)
	// A newer attempt takes the key over while this one calls the processor.
	_, err = e.App.DB.Bun.NewRaw("UPDATE idempotency_keys SET lock_token = gen_random_uuid() WHERE key LIKE '%taken-over'").Exec(ctx)
	require.NoError(t, err)
	_, _, err = e.Svc.Create(ctx, deposit.CreateParams{ExternalUserID: "jo", Asset: asset.BTC, IdempotencyKey: "taken-over"}, rec)
	require.ErrorIs(t, err, deposit.ErrTakenOver)
	var status string
	require.NoError(t, e.App.DB.Bun.NewSelect().Table("deposits").Column("status").
		Where("external_user_id = 'jo'").Scan(ctx, &status))
	require.Equal(t, "creating", status)
	n, err := e.App.DB.Bun.NewSelect().Table("idempotency_keys").Where("key LIKE '%taken-over' AND state = 'in_flight'").Count(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "the key still in flight, the newer attempt's")
}

// TestCreateRefusesKeysThatFoldToAField: encoding/json matches a key to a
// field under Unicode case folding, where "ſ" (U+017F) is an "s": a key
// such as "external_uſer_id" would set external_user_id, after the exact
// one. Such a key is a 422 naming it, and nothing is created.
func TestCreateRefusesKeysThatFoldToAField(t *testing.T) {
	t.Parallel()
	e := setup(t)
	for _, tc := range []struct{ body, key, field string }{
		{`{"external_user_id":"alice","asset":"BTC","external_uſer_id":"mallory"}`, "external_uſer_id", "external_user_id"},
		{`{"external_user_id":"alice","asset":"BTC","external_u\u017fer_id":"mallory"}`, "external_uſer_id", "external_user_id"},
		{`{"external_user_id":"alice","aſſet":"BTC"}`, "aſſet", "asset"},
	} {
		e.RequireFieldNameRefused(t, "/v1/deposits", tc.body, tc.key, tc.field)
	}
	require.Zero(t, e.countDeposits(t, "alice"))
	require.Zero(t, e.countDeposits(t, "mallory"))
	require.Empty(t, e.Sim.Invoices(), "the processor was not called")
}

// TestCreateExpectedAmountHasAnUpperBound: expected_amount is at most the
// asset's bound (bitcoin's total supply for BTC and BTC_LN, one billion
// USDT for USDT_TRC20); above it is a 422 field error and nothing is
// created. At the bound the deposit is created.
func TestCreateExpectedAmountHasAnUpperBound(t *testing.T) {
	t.Parallel()
	e := setup(t)
	for code, max := range map[string]string{
		asset.BTC: "2100000000000000", asset.BTCLN: "2100000000000000", asset.USDTTRC20: "1000000000000000",
	} {
		bound, err := strconv.ParseInt(max, 10, 64)
		require.NoError(t, err)
		for _, above := range []string{fmt.Sprint(bound + 1), "9223372036854775807"} {
			r := e.Post("/v1/deposits", createBody{ExternalUserID: "big", Asset: code, ExpectedAmount: units(above)})
			require.Equal(t, http.StatusUnprocessableEntity, r.Status, "%s %s: %s", code, above, r.Body)
			fe := r.FieldErrors(t)
			require.Len(t, fe, 1, string(r.Body))
			require.Equal(t, []any{"body", "expected_amount"}, fe[0]["loc"])
			require.Equal(t, "less_than_equal", fe[0]["type"])
			require.Equal(t, above, fe[0]["input"])
			require.Contains(t, fe[0]["msg"], max)
		}
	}
	require.Zero(t, e.countDeposits(t, "big"))
	require.Empty(t, e.Sim.Invoices(), "the processor was not called")

	v := e.create(t, "big", asset.BTC, units("2100000000000000"))
	require.Equal(t, "21000000.00000000", *v.AmountExpected)
}
