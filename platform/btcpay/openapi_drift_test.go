package btcpay_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// errCatcher is a testing.TB that keeps the errors reported to it.
type errCatcher struct {
	testing.TB
	mu   sync.Mutex
	errs []string
}

func (e *errCatcher) Errorf(format string, args ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.errs = append(e.errs, fmt.Sprintf(format, args...))
}

func (e *errCatcher) Helper() {}

// TestTemplateCheckCatchesDrift proves the contract check can fail: a
// server that answers with shapes outside BTCPay's templates, and a client
// request outside them, are reported.
func TestTemplateCheckCatchesDrift(t *testing.T) {
	t.Parallel()
	const validInvoice = `{"id":"inv1","storeId":"st1","amount":"1","currency":"BTC","type":"Standard","checkoutLink":"x",` +
		`"createdTime":1,"expirationTime":2,"monitoringExpiration":3,"status":"New","additionalStatus":"None",` +
		`"availableStatusesForManualMarking":[],"archived":false,"metadata":{"orderId":"o"}}`
	tests := []struct {
		name   string
		body   string
		auth   string
		expect string // "" means no error
	}{
		{name: "ValidInvoice", body: validInvoice, auth: "token k"},
		{name: "UnknownField", body: strings.Replace(validInvoice, `"archived":false`, `"archived":false,"bogus":1`, 1), auth: "token k", expect: "bogus"},
		{name: "StatusOutsideEnum", body: strings.Replace(validInvoice, `"status":"New"`, `"status":"Paid"`, 1), auth: "token k", expect: "status"},
		{name: "AmountAsNumber", body: strings.Replace(validInvoice, `"amount":"1"`, `"amount":1`, 1), auth: "token k", expect: "amount"},
		{name: "BearerInsteadOfToken", body: validInvoice, auth: "Bearer k", expect: "Authorization"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write([]byte(tc.body))
			}))
			defer srv.Close()
			catcher := &errCatcher{TB: t}
			rec := newRecorder(t, srv.URL)
			rec.t = catcher
			req, err := http.NewRequest(http.MethodGet, srv.URL+"/api/v1/stores/st1/invoices/inv1", nil)
			require.NoError(t, err)
			req.Header.Set("Authorization", tc.auth)
			resp, err := rec.RoundTrip(req)
			require.NoError(t, err)
			_ = resp.Body.Close()
			if tc.expect == "" {
				require.Empty(t, catcher.errs)
				return
			}
			require.NotEmpty(t, catcher.errs)
			require.Contains(t, strings.Join(catcher.errs, "\n"), tc.expect)
		})
	}
}

// TestWebhookCheckCatchesDrift proves the webhook check can fail.
func TestWebhookCheckCatchesDrift(t *testing.T) {
	t.Parallel()
	const good = `{"deliveryId":"d","webhookId":"w","originalDeliveryId":null,"isRedelivery":false,"type":"InvoiceSettled",` +
		`"timestamp":1,"storeId":"s","invoiceId":"i","metadata":{},"manuallyMarked":false,"overPaid":false}`
	for name, tc := range map[string]struct {
		body   string
		expect bool
	}{
		"Valid":        {body: good},
		"UnknownField": {body: strings.Replace(good, `"overPaid":false`, `"overPaid":false,"bogus":true`, 1), expect: true},
		"WrongType":    {body: strings.Replace(good, `"manuallyMarked":false`, `"manuallyMarked":"no"`, 1), expect: true},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			catcher := &errCatcher{TB: t}
			checkWebhook(catcher, []byte(tc.body))
			require.Equal(t, tc.expect, len(catcher.errs) > 0, "errors: %v", catcher.errs)
		})
	}
}
