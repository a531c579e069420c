package httpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"

	"svc/platform/httpapi"
	"svc/platform/openapi"
)

// checkedApp serves the routes of openapi.json this test uses, each checked
// against spec; a handler answers 200 once its request passed.
func checkedApp(t testing.TB, spec []byte) *fiber.App {
	t.Helper()
	v, err := httpapi.NewValidator(context.Background(), spec)
	require.NoError(t, err)
	app := httpapi.New(httpapi.Options{Log: slog.New(slog.DiscardHandler)})
	platform, admin := v.Router(app.Group("/v1")), v.Router(app.Group("/v1/admin"))
	ok := func(c *fiber.Ctx) error { return c.SendString("ok") }
	bind := func(c *fiber.Ctx) error {
		var m map[string]any
		if err := httpapi.Bind(c, &m); err != nil {
			return err
		}
		return c.SendString("ok")
	}
	platform.Post("/deposits", bind)
	platform.Post("/withdrawals", bind)
	platform.Get("/users/:external_user_id/deposits", ok)
	platform.Get("/users/:external_user_id/balances", ok)
	platform.Get("/users/:external_user_id/transactions", ok)
	platform.Get("/deposits/:deposit_id", ok)
	admin.Get("/withdrawals", ok)
	admin.Post("/deposits/:deposit_id/resolve", bind)
	admin.Post("/withdrawals/:id/approve", bind)
	admin.Post("/withdrawals/:id/release", bind)
	httpapi.NotFound(app)
	return app
}

func send(t testing.TB, app *fiber.App, method, path, body string) (int, string) {
	t.Helper()
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	if body != "" {
		r.Header.Set("Content-Type", "application/json")
	}
	resp, err := app.Test(r)
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// TestValidatorErrorShapes pins how the validator's findings become the
// SPEC's 422 field errors: the loc, type and message of each kind.
func TestValidatorErrorShapes(t *testing.T) {
	t.Parallel()
	app := checkedApp(t, openapi.Spec)
	long := strings.Repeat("u", 256)
	for _, tc := range []struct{ method, path, body, want string }{
		{"POST", "/v1/deposits", `{"external_user_id":"u"}`,
			`[{"loc":["body","asset"],"msg":"Field required","type":"missing"}]`},
		{"POST", "/v1/deposits", `{"external_user_id":"","asset":"BTC"}`,
			`[{"loc":["body","external_user_id"],"msg":"String should have at least 1 characters","type":"string_too_short","input":"","ctx":{"min_length":1}}]`},
		{"POST", "/v1/deposits", `{"external_user_id":"` + long + `","asset":"BTC"}`,
			`[{"loc":["body","external_user_id"],"msg":"String should have at most 255 characters","type":"string_too_long","input":"` + long + `","ctx":{"max_length":255}}]`},
		{"POST", "/v1/deposits", `{"external_user_id":"u","asset":"BTC","expected_amount":5}`,
			`[{"loc":["body","expected_amount"],"msg":"Input should be a valid string","type":"string_type"}]`},
		{"POST", "/v1/deposits", `{"external_user_id":"u","asset":"BTC","expected_amount":"1.5"}`,
			`[{"loc":["body","expected_amount"],"msg":"String should match pattern '^0*[1-9][0-9]*$'","type":"string_pattern_mismatch","input":"1.5","ctx":{"pattern":"^0*[1-9][0-9]*$"}}]`},
		{"POST", "/v1/deposits", `{"external_user_id":"u\u0000v","asset":"BTC"}`,
			`[{"loc":["body","external_user_id"],"msg":"Input should be valid UTF-8 text without NUL characters","type":"string_type"}]`},
		{"POST", "/v1/deposits", `{"external_user_id":"u","asset":"BTC","external_user_id":"v"}`,
			`[{"loc":["body","external_user_id"],"msg":"Key given more than once: send each field once","type":"duplicate_key"}]`},
		{"POST", "/v1/deposits", `{"External_User_Id":"u","asset":"BTC"}`,
			`[{"loc":["body","External_User_Id"],"msg":"Field names are case-sensitive: this field is external_user_id","type":"field_name"}]`},
		{"POST", "/v1/deposits", `["u"]`, `[{"loc":["body"],"msg":"Body must be a JSON object, not array","type":"model_type"}]`},
		{"POST", "/v1/deposits", `{`, `[{"loc":["body"],"msg":"Body is not a valid JSON object: unexpected EOF","type":"json_invalid"}]`},
		{"POST", "/v1/deposits", `{} {}`, `[{"loc":["body"],"msg":"Body has data after the JSON object","type":"json_invalid"}]`},
		{"POST", "/v1/deposits", ``, `[{"loc":["body"],"msg":"Field required","type":"missing"}]`},
		{"POST", "/v1/withdrawals", `{"external_user_id":"u","asset":"BTC","amount":"0","destination_address":"d"}`,
			`[{"loc":["body","amount"],"msg":"String should match pattern '^0*[1-9][0-9]*$'","type":"string_pattern_mismatch","input":"0","ctx":{"pattern":"^0*[1-9][0-9]*$"}}]`},
		{"GET", "/v1/users/u%00v/deposits?limit=0&cursor=nope", ``,
			`[{"loc":["path","external_user_id"],"msg":"Input should be valid UTF-8 text without NUL characters","type":"string_type"},` +
				`{"loc":["query","limit"],"msg":"Input should be greater than or equal to 1","type":"greater_than_equal","input":"0","ctx":{"ge":1}},` +
				`{"loc":["query","cursor"],"msg":"Input should be a valid UUID","type":"uuid_parsing","input":"nope"}]`},
		{"GET", "/v1/users/u%FF/deposits?limit=x", ``,
			`[{"loc":["path","external_user_id"],"msg":"Input should be valid UTF-8 text without NUL characters","type":"string_type"},` +
				`{"loc":["query","limit"],"msg":"Input should be a valid integer","type":"int_parsing","input":"x"}]`},
		{"GET", "/v1/users/u/deposits?limit=5;x", ``, // the value fiber reads, not the one net/url would drop
			`[{"loc":["query","limit"],"msg":"Input should be a valid integer","type":"int_parsing","input":"5;x"}]`},
		{"GET", "/v1/admin/withdrawals?status=lost&limit=201", ``,
			`[{"loc":["query","status"],"msg":"Input should be 'requested', 'pending_approval', 'approved', 'rejected', 'submitting', 'submitted', 'broadcast', 'confirmed', 'failed' or 'refunded'","type":"enum","input":"lost","ctx":{"expected":"'requested', 'pending_approval', 'approved', 'rejected', 'submitting', 'submitted', 'broadcast', 'confirmed', 'failed' or 'refunded'"}},` +
				`{"loc":["query","limit"],"msg":"Input should be less than or equal to 200","type":"less_than_equal","input":"201","ctx":{"le":200}}]`},
		{"POST", "/v1/admin/deposits/x/resolve", `{"action":"refund"}`,
			`[{"loc":["body","action"],"msg":"Input should be 'credit' or 'dismiss'","type":"enum","input":"refund","ctx":{"expected":"'credit' or 'dismiss'"}}]`},
		{"POST", "/v1/admin/withdrawals/x/release", ``, `[{"loc":["body"],"msg":"Field required","type":"missing"}]`},
		{"POST", "/v1/admin/withdrawals/x/release", `{"attestation":"short"}`,
			`[{"loc":["body","attestation"],"msg":"String should have at least 10 characters","type":"string_too_short","input":"short","ctx":{"min_length":10}}]`},
	} {
		status, body := send(t, app, tc.method, tc.path, tc.body)
		require.Equal(t, 422, status, "%s %s %s: %s", tc.method, tc.path, tc.body, body)
		require.JSONEq(t, `{"detail":`+tc.want+`}`, body, "%s %s %s", tc.method, tc.path, tc.body)
	}
	for _, tc := range []struct{ method, path, body string }{
		{"POST", "/v1/deposits", `{"external_user_id":"u","asset":"BTC","expected_amount":null,"unknown":1}`},
		{"POST", "/v1/withdrawals", `{"external_user_id":"u","asset":"BTC","amount":"007","destination_address":"d"}`},
		{"GET", "/v1/users/u/deposits?limit=100&cursor=0b7c6f1e-4a55-4f6e-9d62-0c3c1f5b2a10", ``},
		{"GET", "/v1/deposits/not-an-id", ``}, // the handler's 404
		{"GET", "/v1/admin/withdrawals?status=", ``},
		{"POST", "/v1/admin/withdrawals/x/approve", ``},
		{"POST", "/v1/admin/withdrawals/x/approve", `{"note":null}`},
	} {
		status, body := send(t, app, tc.method, tc.path, tc.body)
		require.Equal(t, 200, status, "%s %s %s: %s", tc.method, tc.path, tc.body, body)
	}
	status, body := send(t, app, "POST", "/v1/deposits", `{"external_user_id":"u","asset":"BTC"}`+"\n")
	require.Equal(t, 200, status, body)
	r := httptest.NewRequest("POST", "/v1/deposits", strings.NewReader(`external_user_id=u`))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := app.Test(r)
	require.NoError(t, err)
	require.Equal(t, 415, resp.StatusCode)
}

// TestValidatorFollowsTheDocument: the limits are the document's. A copy of
// openapi.json with another maxLength makes the validator refuse what the
// committed one admits, with the copy's bound.
func TestValidatorFollowsTheDocument(t *testing.T) {
	t.Parallel()
	var doc map[string]any
	require.NoError(t, json.Unmarshal(openapi.Spec, &doc))
	doc["components"].(map[string]any)["schemas"].(map[string]any)["AssetCode"].(map[string]any)["maxLength"] = 2
	spec, err := json.Marshal(doc)
	require.NoError(t, err)

	body := `{"external_user_id":"u","asset":"BTC"}`
	status, got := send(t, checkedApp(t, spec), "POST", "/v1/deposits", body)
	require.Equal(t, 422, status, got)
	require.JSONEq(t, `{"detail":[{"loc":["body","asset"],"msg":"String should have at most 2 characters","type":"string_too_long","input":"BTC","ctx":{"max_length":2}}]}`, got)
	status, got = send(t, checkedApp(t, openapi.Spec), "POST", "/v1/deposits", body)
	require.Equal(t, 200, status, got)
}

// TestValidatorRefusesUndocumentedRoutes: a route the document does not
// describe cannot be registered on a checked router.
func TestValidatorRefusesUndocumentedRoutes(t *testing.T) {
	t.Parallel()
	v, err := httpapi.NewValidator(context.Background(), openapi.Spec)
	require.NoError(t, err)
	app := fiber.New()
	require.Panics(t, func() { v.Router(app.Group("/v1")).Get("/nowhere", func(*fiber.Ctx) error { return nil }) })
	_, err = httpapi.NewValidator(context.Background(), []byte(`{"openapi":"3.1.0"}`))
	require.Error(t, err, "an invalid document is refused at startup")
}

// BenchmarkValidate measures the validation step of the requests of the
// HTTP benchmark's mix (cmd/svc/httpbench: 60% balance reads, 15%
// transaction lists, 15% deposit creations, 10% withdrawal creations): each
// request runs through fiber on a route checked against openapi.json
// ("checked") and on the same route unchecked ("bare"); the difference is
// the validation's cost. docs/performance.md ("Request validation") has the
// figures.
func BenchmarkValidate(b *testing.B) {
	checked := checkedApp(b, openapi.Spec).Handler()
	bareApp := httpapi.New(httpapi.Options{Log: slog.New(slog.DiscardHandler)})
	bind := func(c *fiber.Ctx) error {
		var m map[string]any
		if err := json.Unmarshal(c.BodyRaw(), &m); err != nil {
			return err
		}
		return c.SendString("ok")
	}
	ok := func(c *fiber.Ctx) error { return c.SendString("ok") }
	bareApp.Post("/v1/deposits", bind)
	bareApp.Post("/v1/withdrawals", bind)
	bareApp.Get("/v1/users/:external_user_id/balances", ok)
	bareApp.Get("/v1/users/:external_user_id/transactions", ok)
	bare := bareApp.Handler()
	for _, rq := range []struct{ name, method, uri, body string }{
		{"balances", "GET", "/v1/users/user-4242/balances", ""},
		{"transactions", "GET", "/v1/users/user-4242/transactions?limit=20", ""},
		{"deposit", "POST", "/v1/deposits", `{"external_user_id":"user-4242","asset":"BTC","expected_amount":"150000"}`},
		{"withdrawal", "POST", "/v1/withdrawals",
			`{"external_user_id":"user-4242","asset":"BTC","amount":"20000","destination_address":"bcrt1qw508d6qejxtdg4y5r3zarvary0c5xw7kygt080"}`},
	} {
		for _, h := range []struct {
			name string
			h    fasthttp.RequestHandler
		}{{"checked", checked}, {"bare", bare}} {
			b.Run(rq.name+"/"+h.name, func(b *testing.B) {
				var ctx fasthttp.RequestCtx
				b.ReportAllocs()
				for i := 0; i < b.N; i++ {
					ctx.Request.Reset()
					ctx.Response.Reset()
					ctx.Request.Header.SetMethod(rq.method)
					ctx.Request.SetRequestURI(rq.uri)
					if rq.body != "" {
						ctx.Request.Header.SetContentType("application/json")
						ctx.Request.SetBodyString(rq.body)
					}
					h.h(&ctx)
					if ctx.Response.StatusCode() != 200 {
						b.Fatalf("%d %s", ctx.Response.StatusCode(), ctx.Response.Body())
					}
				}
			})
		}
	}
}
