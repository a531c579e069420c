package app_test

import (
	"net/http"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"svc/cmd/svc/app/apptest"
	"svc/platform/btcpay/btcpaysim"
	"svc/platform/config"
	"svc/platform/openapi/openapitest"
)

// notYetImplemented lists the operations of openapi.json that no route
// serves yet, as "METHOD /path" with the document's path. It may only
// shrink: an operation that is routed and still listed fails the test, so
// whoever adds a route removes its line here.
var notYetImplemented = []string{}

// shape reduces a path to its literal segments, so that fiber's
// "/v1/deposits/:id" and the document's "/v1/deposits/{deposit_id}" compare
// equal whatever the parameters are called.
func shape(path string) string {
	segs := strings.Split(path, "/")
	for i, s := range segs {
		if strings.HasPrefix(s, ":") || (strings.HasPrefix(s, "{") && strings.HasSuffix(s, "}")) {
			segs[i] = "{}"
		}
	}
	return strings.Join(segs, "/")
}

// TestRoutesMatchTheDocument holds the routes of the API and the
// operations of openapi.json together: every route is documented, and
// every documented operation is routed or listed in notYetImplemented.
func TestRoutesMatchTheDocument(t *testing.T) {
	t.Parallel()
	doc, err := openapitest.Document()
	require.NoError(t, err)
	documented := map[string]string{} // shape key -> document key
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			documented[method+" "+shape(path)] = method + " " + path
		}
	}

	// With a processor configured, as in every real deployment: the ingress
	// route exists only then.
	sim := btcpaysim.Start(t, btcpaysim.Options{})
	e := apptest.New(t, apptest.WithConfig(func(c *config.Config) {
		c.BTCPay.URL, c.BTCPay.APIKey, c.BTCPay.StoreID = sim.URL(), sim.APIKey(), sim.StoreID()
		c.BTCPay.WebhookSecret = "route-test-secret"
	}))
	routed := map[string]string{} // shape key -> fiber route
	for _, r := range e.App.HTTP().GetRoutes(true) {
		if r.Method == http.MethodHead { // fiber adds HEAD to every GET
			continue
		}
		require.NotContains(t, r.Path, "*", "%s %s: wildcard routes cannot be documented", r.Method, r.Path)
		require.NotContains(t, r.Path, "?", "%s %s: optional parameters cannot be documented", r.Method, r.Path)
		routed[r.Method+" "+shape(r.Path)] = r.Method + " " + r.Path
	}
	require.NotEmpty(t, routed)

	pending := map[string]bool{}
	for _, op := range notYetImplemented {
		method, path, ok := strings.Cut(op, " ")
		require.True(t, ok, "notYetImplemented entry %q is not \"METHOD /path\"", op)
		key := method + " " + shape(path)
		require.False(t, pending[key], "notYetImplemented lists %s twice", op)
		pending[key] = true
		got, ok := documented[key]
		require.True(t, ok, "notYetImplemented lists %s, which openapi.json does not have", op)
		require.Equal(t, got, op, "notYetImplemented must spell the document's path")
	}

	var problems []string
	for key, route := range routed {
		if _, ok := documented[key]; !ok {
			problems = append(problems, "route "+route+" is not in openapi.json")
		}
		if pending[key] {
			problems = append(problems, "route "+route+" is implemented: remove "+documented[key]+" from notYetImplemented")
		}
	}
	for key, op := range documented {
		if _, ok := routed[key]; !ok && !pending[key] {
			problems = append(problems, op+" is documented but not routed (route it, or list it in notYetImplemented)")
		}
	}
	sort.Strings(problems)
	require.Empty(t, problems)
}
