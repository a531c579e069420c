package btcpay_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
)

// BTCPay's own OpenAPI templates (v2.4.1, MIT, testdata/btcpay-swagger)
// are the authority for every request the client sends and every response
// and webhook the simulator produces. BTCPay merges them into one document
// at run time; greenfield() does the same, then adjusts the document where
// the running server is known to differ from its templates. Each
// adjustment below says what the server does; everything else is checked
// as published.

var (
	specOnce sync.Once
	specDoc  *openapi3.T
	specErr  error
)

// greenfield returns the merged, adjusted Greenfield document.
func greenfield(t testing.TB) *openapi3.T {
	t.Helper()
	specOnce.Do(func() { specDoc, specErr = loadGreenfield() })
	if specErr != nil {
		t.Fatalf("load BTCPay templates: %v", specErr)
	}
	return specDoc
}

type obj = map[string]any

func loadGreenfield() (*openapi3.T, error) {
	files, err := filepath.Glob(filepath.Join("testdata", "btcpay-swagger", "swagger.template*.json"))
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("no templates in testdata/btcpay-swagger: %v", err)
	}
	sort.Strings(files)
	doc := obj{"paths": obj{}, "components": obj{"schemas": obj{}, "parameters": obj{}, "securitySchemes": obj{}}}
	hooks := obj{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var part obj
		if err := json.Unmarshal(b, &part); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		for k, v := range part {
			switch k {
			case "paths":
				merge(doc["paths"].(obj), v.(obj))
			case "components":
				for ck, cv := range v.(obj) {
					if doc["components"].(obj)[ck] == nil {
						doc["components"].(obj)[ck] = obj{}
					}
					merge(doc["components"].(obj)[ck].(obj), cv.(obj))
				}
			case "x-webhooks":
				merge(hooks, v.(obj))
			case "openapi", "info", "security":
				doc[k] = v
			}
		}
	}
	schemas := doc["components"].(obj)["schemas"].(obj)
	adjustForServer(doc, schemas)
	// Webhook bodies become named schemas so they can be checked too.
	for typ, h := range hooks {
		schemas["Webhook_"+typ] = dig(h, "post", "requestBody", "content", "application/json", "schema")
	}
	stubMissingRefs(doc)
	flattenAll(schemas)

	raw, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	loader := openapi3.NewLoader()
	d, err := loader.LoadFromData(raw)
	if err != nil {
		return nil, fmt.Errorf("load merged document: %w", err)
	}
	// The templates carry a few defaults and examples of the wrong type;
	// those are documentation, not shapes, so they are not checked.
	err = d.Validate(context.Background(), openapi3.DisableExamplesValidation(), openapi3.DisableSchemaDefaultsValidation())
	if err != nil {
		return nil, fmt.Errorf("merged document is not valid OpenAPI: %w", err)
	}
	return d, nil
}

func merge(dst, src obj) {
	for k, v := range src {
		dst[k] = v
	}
}

func dig(v any, keys ...string) obj {
	for _, k := range keys {
		m, ok := v.(obj)
		if !ok {
			return nil
		}
		v = m[k]
	}
	m, _ := v.(obj)
	return m
}

// adjustForServer records where BTCPay Server 2.x differs from its own
// templates (reference: the server's C# models and controllers).
func adjustForServer(doc, schemas obj) {
	paths := doc["paths"].(obj)
	storeParam := obj{"$ref": "#/components/parameters/StoreId"}
	// 1. Since 2.4.0 the templates document only the store-less routes for
	// an invoice or payout addressed by id (/api/v1/invoices/{invoiceId});
	// the controllers still serve the store-scoped routes, the only ones
	// before 2.4, which the client uses for portability. The operations
	// move to the store-scoped form, with the storeId parameter.
	for p, item := range paths {
		for _, prefix := range []string{"/api/v1/invoices/", "/api/v1/payouts/"} {
			if !strings.HasPrefix(p, prefix) {
				continue
			}
			scoped := "/api/v1/stores/{storeId}/" + strings.TrimPrefix(p, "/api/v1/")
			cp := deepCopy(item).(obj)
			params, _ := cp["parameters"].([]any)
			cp["parameters"] = append([]any{storeParam}, params...)
			paths[scoped] = cp
			delete(paths, p)
		}
	}
	// 2. PayoutData: the server writes `date` as unix seconds (a number;
	// the template says string), and null for `pullPaymentId` of a store
	// payout and for `paymentProof` before there is one.
	payout := schemas["PayoutData"].(obj)["properties"].(obj)
	payout["date"] = obj{"$ref": "#/components/schemas/UnixTimestamp"}
	payout["pullPaymentId"].(obj)["nullable"] = true
	payout["paymentProof"] = obj{"nullable": true, "allOf": []any{obj{"$ref": "#/components/schemas/PayoutPaymentProof"}}}
	// 3. OnChainWalletTransactionData: blockHeight and confirmations are
	// numbers (long in the C# model; strings in the template), and labels
	// is a dictionary of label objects, not an array.
	tx := schemas["OnChainWalletTransactionData"].(obj)["properties"].(obj)
	tx["blockHeight"] = obj{"type": "integer", "nullable": true}
	tx["confirmations"] = obj{"type": "integer", "nullable": true}
	tx["labels"] = obj{"type": "object", "additionalProperties": obj{"$ref": "#/components/schemas/LabelData"}}
	// 4. OnChainWalletOverviewData also carries the wallet's `label`.
	schemas["OnChainWalletOverviewData"].(obj)["properties"].(obj)["label"] = obj{"type": "string", "nullable": true}
	// 5. Webhooks: `originalDeliveryId` is null on a first delivery.
	schemas["WebhookEvent"].(obj)["properties"].(obj)["originalDeliveryId"].(obj)["nullable"] = true
	// 6. The wallet's object graph has a template of its own
	// (swagger.template.stores-wallet.on-chain.objects.json), not among the
	// files kept here. The one operation the client uses, the object of a
	// transaction with its links (the payout processor links each payout
	// of a batch to the transaction it sent), is described from the
	// server's model (OnChainWalletObjectData: type, id, data, links of
	// type, id, linkData and objectData).
	link := obj{"type": "object", "additionalProperties": false, "required": []any{"type", "id"}, "properties": obj{
		"type": obj{"type": "string"}, "id": obj{"type": "string"},
		"linkData":   obj{"type": "object", "nullable": true},
		"objectData": obj{"type": "object", "nullable": true}}}
	schemas["OnChainWalletObjectData"] = obj{"type": "object", "additionalProperties": false, "required": []any{"type", "id"}, "properties": obj{
		"type": obj{"type": "string"}, "id": obj{"type": "string"},
		"data":  obj{"type": "object", "nullable": true},
		"links": obj{"type": "array", "nullable": true, "items": link}}}
	paths["/api/v1/stores/{storeId}/payment-methods/{paymentMethodId}/wallet/objects/{objectType}/{objectId}"] = obj{"get": obj{
		"operationId": "StoreOnChainWallets_GetOnChainWalletObject",
		"parameters": []any{storeParam, obj{"$ref": "#/components/parameters/PaymentMethodId"},
			obj{"name": "objectType", "in": "path", "required": true, "schema": obj{"type": "string"}},
			obj{"name": "objectId", "in": "path", "required": true, "schema": obj{"type": "string"}},
			obj{"name": "includeNeighbourData", "in": "query", "required": false, "schema": obj{"type": "boolean"}}},
		"responses": obj{
			"200": obj{"description": "the object and its links", "content": obj{"application/json": obj{"schema": obj{"$ref": "#/components/schemas/OnChainWalletObjectData"}}}},
			"404": obj{"description": "no such object"}},
		"security": []any{obj{"API_Key": []any{"btcpay.store.canmodifystoresettings"}, "Basic": []any{}}}}}
}

// stubMissingRefs defines, as "any value", the few schemas that the
// templates reference from templates not published with them (Lightning
// and LNURL payment method configs, server roles).
func stubMissingRefs(doc obj) {
	comps := doc["components"].(obj)
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case obj:
			if ref, ok := x["$ref"].(string); ok && strings.HasPrefix(ref, "#/components/") {
				parts := strings.Split(strings.TrimPrefix(ref, "#/components/"), "/")
				sect, _ := comps[parts[0]].(obj)
				if sect != nil && sect[parts[1]] == nil {
					sect[parts[1]] = obj{}
				}
			}
			for _, e := range x {
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(doc)
}

// flattenAll rewrites every schema that combines allOf with a member
// declaring additionalProperties: false. In JSON Schema such a member
// rejects the properties the other members add (InvoiceData would reject
// its own metadata), which is not what the templates mean, so the members
// are merged into one object that keeps additionalProperties: false: an
// unknown field is still an error.
func flattenAll(schemas obj) {
	done := map[string]bool{}
	var resolve func(v any) obj
	var flatten func(s obj) obj
	resolve = func(v any) obj {
		s, _ := v.(obj)
		if ref, ok := s["$ref"].(string); ok {
			name := strings.TrimPrefix(ref, "#/components/schemas/")
			if !done[name] {
				done[name] = true
				if target, ok := schemas[name].(obj); ok {
					schemas[name] = flatten(target)
				}
			}
			r, _ := schemas[name].(obj)
			return r
		}
		return flatten(s)
	}
	flatten = func(s obj) obj {
		if s == nil {
			return nil
		}
		if props, ok := s["properties"].(obj); ok {
			for k, p := range props {
				if ps, ok := p.(obj); ok && ps["$ref"] == nil {
					props[k] = flatten(ps)
				}
			}
		}
		if items, ok := s["items"].(obj); ok && items["$ref"] == nil {
			s["items"] = flatten(items)
		}
		all, ok := s["allOf"].([]any)
		if !ok {
			return s
		}
		members := make([]obj, 0, len(all))
		closed := false
		for _, m := range all {
			r := resolve(m)
			if r == nil {
				return s
			}
			members = append(members, r)
			if ap, ok := r["additionalProperties"].(bool); ok && !ap {
				closed = true
			}
		}
		if !closed {
			return s
		}
		out := obj{}
		for k, v := range s {
			if k != "allOf" {
				out[k] = v
			}
		}
		props, required := obj{}, []any{}
		for _, m := range members {
			if _, nested := m["allOf"]; nested {
				return s // not flattenable; leave it as published
			}
			if p, ok := m["properties"].(obj); ok {
				merge(props, p)
			}
			if r, ok := m["required"].([]any); ok {
				required = append(required, r...)
			}
		}
		out["type"], out["properties"], out["additionalProperties"] = "object", props, false
		if len(required) > 0 {
			out["required"] = required
		}
		return out
	}
	names := make([]string, 0, len(schemas))
	for n := range schemas {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		resolve(obj{"$ref": "#/components/schemas/" + n})
	}
}

func deepCopy(v any) any {
	b, _ := json.Marshal(v)
	var out any
	_ = json.Unmarshal(b, &out)
	return out
}

// recorder is an http.RoundTripper that checks every exchange against the
// templates as it happens and counts the operations it saw.
type recorder struct {
	t      testing.TB
	next   http.RoundTripper
	router routers.Router
	mu     sync.Mutex
	ops    map[string]int
}

func newRecorder(t testing.TB, baseURL string) *recorder {
	doc := *greenfield(t) // a shallow copy: only the servers differ
	doc.Servers = openapi3.Servers{{URL: strings.TrimRight(baseURL, "/")}}
	r, err := gorillamux.NewRouter(&doc)
	if err != nil {
		t.Fatalf("router: %v", err)
	}
	return &recorder{t: t, next: http.DefaultTransport, router: r, ops: map[string]int{}}
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	var reqBody []byte
	if req.Body != nil {
		reqBody, _ = io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(reqBody))
	}
	resp, err := r.next.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	respBody, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(respBody))
	if err != nil {
		return resp, nil
	}
	r.check(req, reqBody, resp, respBody)
	return resp, nil
}

// tokenAuth accepts the API_Key scheme when the request carries
// "Authorization: token ..."; the client never uses Basic, which the
// templates list beside it.
func tokenAuth(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	if in.SecuritySchemeName != "API_Key" {
		return nil
	}
	if !strings.HasPrefix(in.RequestValidationInput.Request.Header.Get("Authorization"), "token ") {
		return errors.New("no `Authorization: token <key>` header")
	}
	return nil
}

func (r *recorder) check(req *http.Request, reqBody []byte, resp *http.Response, respBody []byte) {
	r.t.Helper()
	what := req.Method + " " + req.URL.Path
	route, params, err := r.router.FindRoute(req)
	if err != nil {
		r.t.Errorf("%s is not an operation of BTCPay's templates: %v", what, err)
		return
	}
	r.mu.Lock()
	r.ops[route.Operation.OperationID]++
	r.mu.Unlock()
	vreq := req.Clone(context.Background())
	vreq.Body = io.NopCloser(bytes.NewReader(reqBody))
	opts := &openapi3filter.Options{AuthenticationFunc: tokenAuth, MultiError: true}
	in := &openapi3filter.RequestValidationInput{Request: vreq, PathParams: params, Route: route, Options: opts}
	if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil {
		r.t.Errorf("request %s does not match the templates: %v\nbody: %s", what, err, reqBody)
	}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode,
		Header: resp.Header, Options: opts}
	out.SetBodyBytes(respBody)
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		r.t.Errorf("response %d to %s does not match the templates: %v\nbody: %s", resp.StatusCode, what, err, respBody)
	}
}

func (r *recorder) seen() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.ops)
}

// checkWebhook validates a webhook body against the template of its type.
// The 2.1.2+ types the templates do not list are checked as the base
// invoice event.
func checkWebhook(t testing.TB, body []byte) {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal(body, &v); err != nil {
		t.Errorf("webhook body is not JSON: %v", err)
		return
	}
	typ, _ := v["type"].(string)
	doc := greenfield(t)
	ref := doc.Components.Schemas["Webhook_"+typ]
	if ref == nil {
		ref = doc.Components.Schemas["WebhookInvoiceEvent"]
	}
	if err := ref.Value.VisitJSON(v, openapi3.MultiErrors()); err != nil {
		t.Errorf("webhook %s does not match the templates: %v\nbody: %s", typ, err, body)
	}
}
