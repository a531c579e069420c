package ledger_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"svc/cmd/svc/app/apptest"
	"svc/modules/ledger"
)

// TestBookingEdges: what the operator bookings answer at the edges of their
// bodies, as openapi.json describes them: an empty asset is the entry's
// own refusal; an empty transfer reference is the transfer's own refusal; an
// asset code longer than 32 characters, an account kind the API does not
// name, a zero amount, or an amount past int64 is a 422 at its field.
func TestBookingEdges(t *testing.T) {
	t.Parallel()
	e := apptest.New(t)
	_, err := ledger.CreditDeposit(context.Background(), e.App.DB.Bun, "BTC", ledger.UserHolder("ann"), 10_000, "deposit:test:payment:1", "test")
	require.NoError(t, err)
	lines := []any{
		map[string]any{"account": "network_fees", "direction": "debit", "amount": "300"},
		map[string]any{"account": "custody", "direction": "credit", "amount": "300"},
	}
	fieldErr := func(r *apptest.Response) (any, any) {
		t.Helper()
		require.Equal(t, http.StatusUnprocessableEntity, r.Status, string(r.Body))
		fe := r.FieldErrors(t)
		return fe[0]["loc"], fe[0]["type"]
	}

	loc, typ := fieldErr(e.AdminPost("/v1/admin/ledger/corrections", map[string]any{"asset": "", "memo": "m", "lines": lines}))
	require.Equal(t, []any{"body", "lines"}, loc)
	require.Equal(t, "entry", typ, "the entry's own check")
	r := e.AdminPost("/v1/admin/ledger/corrections", map[string]any{"asset": "BTC", "memo": "m", "reference": "", "dry_run": true, "lines": lines})
	require.Equal(t, http.StatusOK, r.Status, "an empty reference is a new one: %s", r.Body)

	loc, typ = fieldErr(e.AdminPost("/v1/admin/ledger/corrections", map[string]any{"asset": "BTC", "memo": "m",
		"lines": []any{map[string]any{"account": "nope", "direction": "debit", "amount": "1"}, lines[1]}}))
	require.Equal(t, []any{"body", "lines", float64(0), "account"}, loc)
	require.NotEmpty(t, typ)
	loc, _ = fieldErr(e.AdminPost("/v1/admin/ledger/corrections", map[string]any{"asset": "BTC", "memo": "m",
		"lines": []any{map[string]any{"account": "custody", "direction": "debit", "amount": "12345678901234567890"}, lines[1]}}))
	require.Equal(t, []any{"body", "lines", float64(0), "amount"}, loc)

	transfer := func(change map[string]any) *apptest.Response {
		b := map[string]any{"from": "BTC", "to": "BTC_LN", "amount": "1", "reference": "tx", "memo": "m", "dry_run": true}
		for k, v := range change {
			b[k] = v
		}
		return e.AdminPost("/v1/admin/ledger/transfers", b)
	}
	loc, typ = fieldErr(transfer(map[string]any{"reference": ""}))
	require.Equal(t, []any{"body", "reference"}, loc)
	require.Equal(t, "reference", typ)
	loc, typ = fieldErr(transfer(map[string]any{"from": strings.Repeat("B", 33)}))
	require.Equal(t, []any{"body", "from"}, loc)
	require.Equal(t, "string_too_long", typ)
	loc, typ = fieldErr(transfer(map[string]any{"amount": "0"}))
	require.Equal(t, []any{"body", "amount"}, loc)
	require.Equal(t, "value_error", typ)
	loc, _ = fieldErr(transfer(map[string]any{"amount": "1.5"}))
	require.Equal(t, []any{"body", "amount"}, loc)
	loc, _ = fieldErr(transfer(map[string]any{"network_fee": "x"}))
	require.Equal(t, []any{"body", "network_fee"}, loc)
	require.Equal(t, http.StatusOK, transfer(map[string]any{"network_fee": nil}).Status)
}
