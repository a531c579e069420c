package openapitest_test

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"svc/platform/openapi/openapitest"
)

const ts = "2025-01-31T12:34:56.789012+00:00"

const assetOK = `{"asset":"BTC","display_name":"Bitcoin","decimals":8,"unit_name":"sat","enabled":true,
	"withdrawal_min":"0.00010000","withdrawal_auto_limit":"0.01000000","withdrawal_daily_cap":"0.10000000",
	"withdrawal_flat_fee":"0.00000000"}`

func deposit(over map[string]string) string {
	f := map[string]string{
		"deposit_id": `"0b7c6f1e-4a55-4f6e-9d62-0c3c1f5b2a10"`, "external_user_id": `"u1"`, "asset": `"BTC"`,
		"status": `"pending"`, "address": `"bcrt1qexample"`, "checkout_link": `null`, "expires_at": `"` + ts + `"`,
		"address_reserved_until": `null`, "amount_expected": `null`, "amount_credited": `"0.00000000"`,
		"created_at": `"` + ts + `"`,
		"payments": `[{"payment_id":"p1","amount":"0.00100000","credited":true,"credited_at":"` + ts +
			`","after_expiration":false,"resolved_by":"auto"}]`,
		"metadata": `{}`, "client_reference": `null`, "platform_account": `null`,
	}
	for k, v := range over {
		f[k] = v
	}
	var b strings.Builder
	b.WriteString("{")
	first := true
	for k, v := range f {
		if v == "-" { // drop the field
			continue
		}
		if !first {
			b.WriteString(",")
		}
		first = false
		fmt.Fprintf(&b, "%q:%s", k, v)
	}
	b.WriteString("}")
	return b.String()
}

func withdrawal(over map[string]string) string {
	f := map[string]string{
		"withdrawal_id": `"9a1f7b8c-2d3e-4f50-8a6b-7c8d9e0f1a2b"`, "external_user_id": `"u1"`, "asset": `"BTC"`,
		"status": `"pending_approval"`, "destination_address": `"bcrt1qdest"`, "amount_gross": `"0.50000000"`,
		"fee": `null`, "amount_net": `null`, "approval_mode": `null`, "txid": `null`, "failure_reason": `null`,
		"created_at": `"` + ts + `"`, "updated_at": `"` + ts + `"`, "metadata": `{"order":"42"}`, "client_reference": `"order-42"`, "platform_account": `null`,
	}
	for k, v := range over {
		f[k] = v
	}
	var parts []string
	for k, v := range f {
		if v != "-" {
			parts = append(parts, fmt.Sprintf("%q:%s", k, v))
		}
	}
	return "{" + strings.Join(parts, ",") + "}"
}

type exchange struct {
	name         string
	method, path string
	status       int
	header       map[string]string // added to Cache-Control: no-store; "-" removes
	body         string
	ok           bool
}

func TestCheckResponse(t *testing.T) {
	t.Parallel()
	tests := []exchange{
		// A right response passes; the same with one thing wrong fails.
		{name: "assets ok", method: "GET", path: "/v1/assets", status: 200, body: `{"assets":[` + assetOK + `]}`, ok: true},
		{name: "assets empty", method: "GET", path: "/v1/assets", status: 200, body: `{"assets":[]}`, ok: true},
		{name: "missing required field", method: "GET", path: "/v1/assets", status: 200,
			body: `{"assets":[` + strings.Replace(assetOK, `"decimals":8,`, ``, 1) + `]}`},
		{name: "wrong type", method: "GET", path: "/v1/assets", status: 200,
			body: `{"assets":[` + strings.Replace(assetOK, `"decimals":8`, `"decimals":"8"`, 1) + `]}`},
		{name: "null where not allowed", method: "GET", path: "/v1/assets", status: 200,
			body: `{"assets":[` + strings.Replace(assetOK, `"Bitcoin"`, `null`, 1) + `]}`},
		{name: "amount as a number", method: "GET", path: "/v1/assets", status: 200,
			body: `{"assets":[` + strings.Replace(assetOK, `"0.00010000"`, `0.0001`, 1) + `]}`},
		{name: "undocumented field", method: "GET", path: "/v1/assets", status: 200,
			body: `{"assets":[` + strings.Replace(assetOK, `"enabled":true`, `"enabled":true,"secret":"x"`, 1) + `]}`},
		{name: "undocumented top-level field", method: "GET", path: "/v1/assets", status: 200, body: `{"assets":[],"extra":1}`},
		{name: "undocumented status", method: "GET", path: "/v1/assets", status: 418, body: `{"detail":"teapot"}`},
		{name: "no Cache-Control", method: "GET", path: "/v1/assets", status: 200, body: `{"assets":[]}`,
			header: map[string]string{"Cache-Control": "-"}},
		{name: "cacheable", method: "GET", path: "/v1/assets", status: 200, body: `{"assets":[]}`,
			header: map[string]string{"Cache-Control": "max-age=60"}},
		{name: "not JSON", method: "GET", path: "/v1/assets", status: 200, body: `<html>`},
		{name: "wrong content type", method: "GET", path: "/v1/assets", status: 200, body: `{"assets":[]}`,
			header: map[string]string{"Content-Type": "text/plain"}},

		// Nullable fields are type arrays: null passes, another type fails.
		{name: "deposit ok", method: "GET", path: "/v1/deposits/0b7c6f1e-4a55-4f6e-9d62-0c3c1f5b2a10", status: 200,
			body: deposit(nil), ok: true},
		{name: "deposit nullable set", method: "GET", path: "/v1/deposits/x", status: 200,
			body: deposit(map[string]string{"checkout_link": `"https://pay.example/i/1"`, "amount_expected": `"0.00100000"`,
				"address_reserved_until": `"` + ts + `"`}), ok: true},
		{name: "deposit nullable wrong type", method: "GET", path: "/v1/deposits/x", status: 200,
			body: deposit(map[string]string{"address": `5`})},
		{name: "deposit nullable missing", method: "GET", path: "/v1/deposits/x", status: 200,
			body: deposit(map[string]string{"checkout_link": `-`})},
		{name: "deposit null not allowed", method: "GET", path: "/v1/deposits/x", status: 200,
			body: deposit(map[string]string{"amount_credited": `null`})},
		{name: "deposit bad status", method: "GET", path: "/v1/deposits/x", status: 200,
			body: deposit(map[string]string{"status": `"paid"`})},
		{name: "timestamp with Z", method: "GET", path: "/v1/deposits/x", status: 200,
			body: deposit(map[string]string{"created_at": `"2025-01-31T12:34:56Z"`})},
		{name: "nullable timestamp with Z", method: "GET", path: "/v1/deposits/x", status: 200,
			body: deposit(map[string]string{"expires_at": `"2025-01-31T12:34:56Z"`})},
		{name: "negative amount", method: "GET", path: "/v1/deposits/x", status: 200,
			body: deposit(map[string]string{"amount_credited": `"-1.00000000"`})},
		{name: "payment missing field", method: "GET", path: "/v1/deposits/x", status: 200,
			body: deposit(map[string]string{"payments": `[{"payment_id":"p1","amount":"1.0","credited":false,"credited_at":null,"after_expiration":false}]`})},
		{name: "payment credited null", method: "GET", path: "/v1/deposits/x", status: 200,
			body: deposit(map[string]string{"payments": `[{"payment_id":"p1","amount":"1.0","credited":null,"credited_at":null,"after_expiration":false,"resolved_by":null}]`})},

		// Enums with null (approval_mode) and optional fields (approval_reason).
		{name: "withdrawal ok", method: "GET", path: "/v1/withdrawals/x", status: 200, body: withdrawal(nil), ok: true},
		{name: "withdrawal approval_mode auto", method: "GET", path: "/v1/withdrawals/x", status: 200,
			body: withdrawal(map[string]string{"approval_mode": `"auto"`}), ok: true},
		{name: "withdrawal approval_mode bad", method: "GET", path: "/v1/withdrawals/x", status: 200,
			body: withdrawal(map[string]string{"approval_mode": `"later"`})},
		{name: "withdrawal approval_reason only on creation", method: "GET", path: "/v1/withdrawals/x", status: 200,
			body: withdrawal(map[string]string{"approval_reason": `"auto-approval limit"`})},
		{name: "created with approval_reason", method: "POST", path: "/v1/withdrawals", status: 201,
			body: withdrawal(map[string]string{"approval_reason": `"auto-approval limit"`}), ok: true},
		{name: "created without approval_reason", method: "POST", path: "/v1/withdrawals", status: 201,
			body: withdrawal(nil), ok: true},
		{name: "created replayed", method: "POST", path: "/v1/withdrawals", status: 201, body: withdrawal(nil),
			header: map[string]string{"Idempotent-Replayed": "true"}, ok: true},
		{name: "insufficient funds", method: "POST", path: "/v1/withdrawals", status: 402,
			body: `{"detail":"insufficient available balance"}`, ok: true},
		{name: "402 is not for deposits", method: "POST", path: "/v1/deposits", status: 402,
			body: `{"detail":"insufficient available balance"}`},

		// 422 has two shapes, and only those.
		{name: "422 string", method: "POST", path: "/v1/withdrawals", status: 422, body: `{"detail":"below the minimum"}`, ok: true},
		{name: "422 fields", method: "POST", path: "/v1/withdrawals", status: 422,
			body: `{"detail":[{"loc":["body","amount"],"msg":"Field required","type":"missing"}]}`, ok: true},
		{name: "422 fields with input and ctx", method: "POST", path: "/v1/withdrawals", status: 422,
			body: `{"detail":[{"loc":["body","items",0],"msg":"too short","type":"string_too_short","input":"","ctx":{"min_length":1}}]}`, ok: true},
		{name: "422 field without msg", method: "POST", path: "/v1/withdrawals", status: 422,
			body: `{"detail":[{"loc":["body","amount"],"type":"missing"}]}`},
		{name: "422 loc of objects", method: "POST", path: "/v1/withdrawals", status: 422,
			body: `{"detail":[{"loc":[{"a":1}],"msg":"m","type":"t"}]}`},
		{name: "422 detail number", method: "POST", path: "/v1/withdrawals", status: 422, body: `{"detail":42}`},
		{name: "422 detail null", method: "POST", path: "/v1/withdrawals", status: 422, body: `{"detail":null}`},
		{name: "422 no detail", method: "POST", path: "/v1/withdrawals", status: 422, body: `{}`},

		// 503 on deposit creation has two shapes; elsewhere only the string.
		{name: "503 pool exhausted", method: "POST", path: "/v1/deposits", status: 503,
			body:   `{"detail":{"code":"DEPOSIT_TEMPORARILY_UNAVAILABLE","message":"every address is reserved"}}`,
			header: map[string]string{"Retry-After": "30"}, ok: true},
		{name: "503 processor unreachable", method: "POST", path: "/v1/deposits", status: 503,
			body: `{"detail":"payment processor unreachable"}`, ok: true},
		{name: "503 other code", method: "POST", path: "/v1/deposits", status: 503,
			body: `{"detail":{"code":"SOMETHING_ELSE","message":"m"}}`},
		{name: "503 code without message", method: "POST", path: "/v1/deposits", status: 503,
			body: `{"detail":{"code":"DEPOSIT_TEMPORARILY_UNAVAILABLE"}}`},
		{name: "503 structured on withdrawals", method: "POST", path: "/v1/withdrawals", status: 503,
			body: `{"detail":{"code":"DEPOSIT_TEMPORARILY_UNAVAILABLE","message":"m"}}`},
		{name: "409 in flight", method: "POST", path: "/v1/deposits", status: 409,
			body: `{"detail":"in flight"}`, header: map[string]string{"Retry-After": "1"}, ok: true},
		{name: "409 Retry-After not a number", method: "POST", path: "/v1/deposits", status: 409,
			body: `{"detail":"in flight"}`, header: map[string]string{"Retry-After": "soon"}},
		{name: "400 missing key", method: "POST", path: "/v1/deposits", status: 400, body: `{"detail":"missing Idempotency-Key"}`, ok: true},

		// Integer-or-null cursor.
		{name: "transactions last page", method: "GET", path: "/v1/users/u1/transactions", status: 200,
			body: `{"transactions":[{"posting_id":7,"entry_id":3,"kind":"withdrawal_hold","asset":"BTC","account":"user_hold","amount":"0.10000000","direction":"credit","source_ref":null,"memo":null,"created_at":"` + ts + `"}],"next_cursor":null}`, ok: true},
		{name: "transactions cursor integer", method: "GET", path: "/v1/users/u1/transactions", status: 200,
			body: `{"transactions":[],"next_cursor":6}`, ok: true},
		{name: "transactions cursor string", method: "GET", path: "/v1/users/u1/transactions", status: 200,
			body: `{"transactions":[],"next_cursor":"6"}`},
		{name: "transactions unknown kind", method: "GET", path: "/v1/users/u1/transactions", status: 200,
			body: `{"transactions":[{"posting_id":7,"entry_id":3,"kind":"refund","asset":"BTC","account":"user_hold","amount":"0.1","direction":"credit","source_ref":null,"memo":null,"created_at":"` + ts + `"}],"next_cursor":null}`},
		{name: "user id percent-encoded", method: "GET", path: "/v1/users/a%2Fb/balances", status: 200,
			body: `{"external_user_id":"a/b","balances":[{"asset":"BTC","available":"0.00000000","held":"0.00000000","reserved":"0.00000000","total":"0.00000000"}]}`, ok: true},

		// Free-form objects stay open.
		{name: "event payload is free-form", method: "GET", path: "/v1/admin/events", status: 200,
			body: `{"events":[{"id":"evt_1","raw_id":"0b7c6f1e-4a55-4f6e-9d62-0c3c1f5b2a10","type":"deposit.settled","status":"dead","attempts":10,"next_attempt_at":"` + ts + `","last_error":"HTTP 500","created_at":"` + ts + `","payload":{"id":"evt_1","anything":{"goes":[1,2]}}}]}`, ok: true},
		{name: "event id without prefix", method: "GET", path: "/v1/admin/events", status: 200,
			body: `{"events":[{"id":"1","raw_id":"0b7c6f1e-4a55-4f6e-9d62-0c3c1f5b2a10","type":"deposit.settled","status":"dead","attempts":10,"next_attempt_at":"` + ts + `","last_error":null,"created_at":"` + ts + `","payload":{}}]}`},
		{name: "admin 403", method: "GET", path: "/v1/admin/events", status: 403, body: `{"detail":"scope"}`, ok: true},

		// Health bodies on 503.
		{name: "healthz unhealthy", method: "GET", path: "/healthz", status: 503,
			body: `{"status":"unhealthy","database":"unreachable","version":"dev"}`, ok: true},
		{name: "healthz 503 with error body", method: "GET", path: "/healthz", status: 503, body: `{"detail":"down"}`},
		{name: "readyz degraded", method: "GET", path: "/readyz", status: 503,
			body: `{"status":"degraded","components":[{"name":"database","status":"ok","detail":null},{"name":"worker","status":"degraded","detail":"no worker heartbeat yet"}]}`, ok: true},
		{name: "readyz component without detail", method: "GET", path: "/readyz", status: 200,
			body: `{"status":"ready","components":[{"name":"database","status":"ok"}]}`},
		{name: "webhook accepted", method: "POST", path: "/webhooks/processor", status: 200, body: `{"status":"accepted"}`, ok: true},
		{name: "webhook ignored", method: "POST", path: "/webhooks/processor", status: 200,
			body: `{"status":"ignored","reason":"unknown event type"}`, ok: true},
		{name: "webhook bad status", method: "POST", path: "/webhooks/processor", status: 200, body: `{"status":"ok"}`},
		{name: "webhook 403 is not documented", method: "POST", path: "/webhooks/processor", status: 403, body: `{"detail":"x"}`},

		// Routes the document does not have.
		{name: "undocumented route", method: "GET", path: "/v1/nope", status: 200, body: `{}`},
		{name: "undocumented method", method: "DELETE", path: "/v1/assets", status: 200, body: `{}`},
		{name: "unknown route 404", method: "GET", path: "/v1/nope", status: 404, body: `{"detail":"not found"}`, ok: true},
		{name: "unknown route 404 bad body", method: "GET", path: "/v1/nope", status: 404, body: `{"error":"not found"}`},
		{name: "unknown route 404 cacheable", method: "GET", path: "/v1/nope", status: 404, body: `{"detail":"not found"}`,
			header: map[string]string{"Cache-Control": "-"}},
		{name: "HEAD is not checked", method: "HEAD", path: "/v1/assets", status: 200, ok: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := openapitest.CheckResponse(request(t, tc.method, tc.path), tc.status, header(tc.header), []byte(tc.body))
			if tc.ok {
				require.NoError(t, err)
			} else {
				require.Error(t, err)
			}
		})
	}
}

func TestUndocumentedRouteIsNamed(t *testing.T) {
	t.Parallel()
	err := openapitest.CheckResponse(request(t, "GET", "/v1/nope"), 200, header(nil), []byte(`{}`))
	require.True(t, errors.Is(err, openapitest.ErrUndocumented), "%v", err)
}

// recorder is a testing.TB that keeps what ValidateResponse reports.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func TestValidateResponseReports(t *testing.T) {
	t.Parallel()
	rec := &recorder{TB: t}
	req := request(t, "GET", "/v1/assets")
	resp := &http.Response{StatusCode: 200, Header: header(nil)}
	openapitest.ValidateResponse(rec, req, nil, resp, []byte(`{"assets":[]}`))
	require.Empty(t, rec.errs)
	openapitest.ValidateResponse(rec, req, nil, resp, []byte(`{"assets":{}}`))
	require.Len(t, rec.errs, 1)
	require.Contains(t, rec.errs[0], "GET /v1/assets -> 200")
}

func request(t *testing.T, method, path string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, "http://127.0.0.1:41234"+path, nil)
	require.NoError(t, err)
	return req
}

func header(over map[string]string) http.Header {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("Svc-Interface-Version", "0.3.0")
	for k, v := range over {
		if v == "-" {
			h.Del(k)
		} else {
			h.Set(k, v)
		}
	}
	return h
}
