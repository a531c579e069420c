package httpapi_test

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/require"

	"svc/platform/fault"
	"svc/platform/httpapi"
)

func TestErrorShapes(t *testing.T) {
	t.Parallel()
	app := httpapi.New(httpapi.Options{Log: slog.New(slog.DiscardHandler)})
	app.Get("/panic", func(*fiber.Ctx) error { panic("boom: secret detail") })
	app.Get("/plain", func(*fiber.Ctx) error { return fault.New(fault.Conflict, "illegal transition").WithRetryAfter(2500e6) })
	app.Get("/coded", func(*fiber.Ctx) error {
		return &fault.Error{Kind: fault.Unavailable, Code: "DEPOSIT_TEMPORARILY_UNAVAILABLE", Message: "pool exhausted"}
	})
	app.Get("/fields", func(c *fiber.Ctx) error {
		_, err := httpapi.QueryInt(c, "limit", 50, 1, 200)
		return err
	})
	app.Get("/bug", func(*fiber.Ctx) error { return errors.New("a bug: nil map") })
	httpapi.NotFound(app)

	for _, tc := range []struct {
		path   string
		status int
		body   string
		retry  string
	}{
		{"/panic", 500, `{"detail":"internal error"}`, ""},
		{"/bug", 500, `{"detail":"internal error"}`, ""},
		{"/plain", 409, `{"detail":"illegal transition"}`, "3"},
		{"/coded", 503, `{"detail":{"code":"DEPOSIT_TEMPORARILY_UNAVAILABLE","message":"pool exhausted"}}`, ""},
		{"/fields?limit=0", 422, `{"detail":[{"loc":["query","limit"],"msg":"Input should be greater than or equal to 1","type":"greater_than_equal","input":"0","ctx":{"ge":1}}]}`, ""},
		{"/fields?limit=x", 422, `{"detail":[{"loc":["query","limit"],"msg":"Input should be a valid integer","type":"int_parsing","input":"x"}]}`, ""},
		{"/nowhere", 404, `{"detail":"not found"}`, ""},
	} {
		resp, err := app.Test(httptest.NewRequest("GET", tc.path, nil))
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		require.Equal(t, tc.status, resp.StatusCode, tc.path)
		require.JSONEq(t, tc.body, string(b), tc.path)
		require.True(t, json.Valid(b))
		require.Equal(t, "no-store", resp.Header.Get("Cache-Control"), tc.path)
		require.Equal(t, tc.retry, resp.Header.Get("Retry-After"), tc.path)
		require.NotEmpty(t, resp.Header.Get(httpapi.RequestIDHeader), tc.path)
	}
}

// TestDecodeBodyIsStrictAboutKeys: a key given twice, or a field's name in
// another case, is a 422 field error naming it; unknown fields are still
// ignored.
func TestDecodeBodyIsStrictAboutKeys(t *testing.T) {
	t.Parallel()
	app := httpapi.New(httpapi.Options{Log: slog.New(slog.DiscardHandler)})
	app.Post("/", func(c *fiber.Ctx) error {
		var req struct {
			User  *string `json:"external_user_id"`
			Asset *string `json:"asset"`
			Kind  *string `json:"kind"`
		}
		if err := httpapi.DecodeBody(c, &req); err != nil {
			return err
		}
		if req.Kind != nil {
			return c.JSON(fiber.Map{"user": req.User, "asset": req.Asset, "kind": req.Kind})
		}
		return c.JSON(fiber.Map{"user": req.User, "asset": req.Asset})
	})
	for _, tc := range []struct {
		body, want string
		status     int
	}{
		{`{"external_user_id":"alice","asset":"BTC"}`, `{"user":"alice","asset":"BTC"}`, 200},
		{`{"external_user_id":"alice","asset":"BTC","extra":1}`, `{"user":"alice","asset":"BTC"}`, 200},
		{`{"external_user_id":"alice","external_user_id":"mallory"}`,
			`{"detail":[{"loc":["body","external_user_id"],"msg":"Key given more than once: send each field once","type":"duplicate_key"}]}`, 422},
		{`["alice"]`, `{"detail":[{"loc":["body"],"msg":"Body must be a JSON object, not array","type":"model_type"}]}`, 422},
		{`{"External_User_Id":"mallory","asset":"BTC"}`,
			`{"detail":[{"loc":["body","External_User_Id"],"msg":"Field names are case-sensitive: this field is external_user_id","type":"field_name"}]}`, 422},
		// encoding/json folds with Unicode simple folding: "ſ" (U+017F) is
		// an "s" and the Kelvin sign "K" (U+212A) a "k" to it, so these name
		// the fields too, and the last of them would win.
		{`{"external_user_id":"alice","external_uſer_id":"mallory"}`,
			`{"detail":[{"loc":["body","external_uſer_id"],"msg":"Field names are case-sensitive: this field is external_user_id","type":"field_name"}]}`, 422},
		{`{"external_user_id":"alice","external_u\u017fer_id":"mallory"}`,
			`{"detail":[{"loc":["body","external_uſer_id"],"msg":"Field names are case-sensitive: this field is external_user_id","type":"field_name"}]}`, 422},
		{`{"aſſet":"BTC"}`,
			`{"detail":[{"loc":["body","aſſet"],"msg":"Field names are case-sensitive: this field is asset","type":"field_name"}]}`, 422},
		{`{"kind":"a","Kind":"b"}`,
			`{"detail":[{"loc":["body","Kind"],"msg":"Field names are case-sensitive: this field is kind","type":"field_name"}]}`, 422},
		{`{"KIND":"b"}`,
			`{"detail":[{"loc":["body","KIND"],"msg":"Field names are case-sensitive: this field is kind","type":"field_name"}]}`, 422},
		{`{"kind":"a","asset":"BTC"}`, `{"user":null,"asset":"BTC","kind":"a"}`, 200},
	} {
		req := httptest.NewRequest("POST", "/", strings.NewReader(tc.body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := app.Test(req)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		require.Equal(t, tc.status, resp.StatusCode, tc.body)
		require.JSONEq(t, tc.want, string(b), tc.body)
	}
}

// TestDecodeBodyWantsJSON: a body sent as a form, text or XML is 415; JSON
// with parameters, a +json type, or no Content-Type is read.
func TestDecodeBodyWantsJSON(t *testing.T) {
	t.Parallel()
	app := httpapi.New(httpapi.Options{Log: slog.New(slog.DiscardHandler)})
	app.Post("/", func(c *fiber.Ctx) error {
		var req struct {
			User *string `json:"external_user_id"`
		}
		if err := httpapi.DecodeBody(c, &req); err != nil {
			return err
		}
		return c.JSON(fiber.Map{"user": req.User})
	})
	for ct, want := range map[string]int{
		"application/json": 200, "application/json; charset=utf-8": 200, "application/vnd.api+json": 200, "": 200,
		"text/plain": 415, "application/x-www-form-urlencoded": 415, "application/xml": 415,
	} {
		req := httptest.NewRequest("POST", "/", strings.NewReader(`{"external_user_id":"alice"}`))
		if ct != "" {
			req.Header.Set("Content-Type", ct)
		}
		resp, err := app.Test(req)
		require.NoError(t, err)
		require.Equal(t, want, resp.StatusCode, ct)
	}
}
