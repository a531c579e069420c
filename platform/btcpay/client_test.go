package btcpay_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"svc/platform/btcpay"
	"svc/platform/btcpay/btcpaysim"
)

func TestFailureClassification(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		status      int
		body        string
		unreachable bool
		code        string
	}{
		{name: "ServerError", status: 500, body: `{"code":"internal","message":"boom"}`, unreachable: true},
		{name: "BadGateway", status: 502, body: `<html>bad gateway</html>`, unreachable: true},
		{name: "Unavailable", status: 503, body: `{"code":"not-available","message":"wallet not ready"}`, unreachable: true, code: "not-available"},
		{name: "RequestTimeout", status: 408, unreachable: true},
		{name: "TooManyRequests", status: 429, unreachable: true},
		{name: "BadRequest", status: 400, body: `{"code":"duplicate-destination","message":"in use"}`, code: "duplicate-destination"},
		{name: "NotFound", status: 404, body: `{"code":"invoice-not-found","message":"nope"}`, code: "invoice-not-found"},
		{name: "Unauthorized", status: 401, body: `{"code":"unauthenticated","message":"who"}`, code: "unauthenticated"},
		{name: "Forbidden", status: 403, body: `{"code":"missing-permission","message":"no"}`, code: "missing-permission"},
		{name: "Validation", status: 422, body: `[{"path":"amount","message":"Amount should be greater than 0"}]`},
		{name: "SuccessThatDoesNotParse", status: 200, body: `<html>login</html>`, unreachable: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				require.Equal(t, "token key", r.Header.Get("Authorization"))
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(tc.body))
			}))
			defer srv.Close()
			c, err := btcpay.New(btcpay.Options{URL: srv.URL, APIKey: "key", StoreID: "store", Timeout: time.Second})
			require.NoError(t, err)
			_, err = c.GetInvoice(context.Background(), "inv")
			require.Error(t, err)
			require.Equal(t, tc.unreachable, errors.Is(err, btcpay.ErrUnreachable), "%v", err)
			require.Equal(t, !tc.unreachable, errors.Is(err, btcpay.ErrRefused), "%v", err)
			require.Equal(t, tc.status == 404, errors.Is(err, btcpay.ErrNotFound))
			if !tc.unreachable {
				var re *btcpay.RefusedError
				require.ErrorAs(t, err, &re)
				require.Equal(t, tc.status, re.Status)
				require.Equal(t, tc.code, re.Code)
				require.NotEmpty(t, re.Reason())
				if tc.status == 422 {
					require.Equal(t, []btcpay.FieldError{{Path: "amount", Message: "Amount should be greater than 0"}}, re.Fields)
				}
			}
			require.NotContains(t, err.Error(), "key", "errors never carry the API key")
		})
	}
}

// TestAmbiguousFailures drives the simulator's failure modes: whatever the
// mode, the client reports ErrUnreachable, and after drop-after the
// invoice exists and is found again by its order id.
func TestAmbiguousFailures(t *testing.T) {
	t.Parallel()
	for _, mode := range []btcpaysim.DownMode{btcpaysim.DownError, btcpaysim.DownDrop, btcpaysim.DownHang, btcpaysim.DownDropAfter} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			sim := btcpaysim.Start(t, btcpaysim.Options{})
			// Long enough for a fresh simulator's answers on a loaded
			// machine; a hanging processor costs the test this twice.
			c, err := btcpay.New(btcpay.Options{URL: sim.URL(), APIKey: sim.APIKey(), StoreID: sim.StoreID(), Timeout: 2 * time.Second})
			require.NoError(t, err)
			ctx := context.Background()
			order := uuid.NewString()
			amt := btcpay.MustAmount("0.01")
			sim.FailNext(1, mode)
			_, err = c.CreateInvoice(ctx, btcpay.CreateInvoiceParams{OrderID: order, Amount: &amt, Currency: "BTC", PaymentMethod: btcpay.MethodBTCChain})
			require.ErrorIs(t, err, btcpay.ErrUnreachable)
			require.NotErrorIs(t, err, btcpay.ErrRefused)

			found, err := c.InvoicesByOrderID(ctx, order)
			require.NoError(t, err)
			if mode == btcpaysim.DownDropAfter {
				require.Len(t, found, 1, "the request took effect although its answer was lost")
			} else {
				require.Empty(t, found)
			}

			sim.GoDown(mode)
			_, err = c.ServerInfo(ctx)
			require.ErrorIs(t, err, btcpay.ErrUnreachable)
			sim.Up()
			_, err = c.ServerInfo(ctx)
			require.NoError(t, err)
		})
	}
}

// TestSlowProcessor: a slow processor within the client's timeout answers
// late; beyond it, the work is done but the client sees ErrUnreachable (the
// ambiguous case the payout and deposit paths must survive). The timeout
// leaves the late answer 1.85 s of margin, so that a loaded machine's
// scheduling does not push it past the timeout.
func TestSlowProcessor(t *testing.T) {
	t.Parallel()
	sim := btcpaysim.Start(t, btcpaysim.Options{})
	c, err := btcpay.New(btcpay.Options{URL: sim.URL(), APIKey: sim.APIKey(), StoreID: sim.StoreID(), Timeout: 2 * time.Second})
	require.NoError(t, err)
	ctx := context.Background()
	sim.GoSlow(150 * time.Millisecond)
	start := time.Now()
	_, err = c.ServerInfo(ctx)
	require.NoError(t, err)
	require.GreaterOrEqual(t, time.Since(start), 150*time.Millisecond, "the answer came late")

	sim.GoSlow(3 * time.Second)
	order := uuid.NewString()
	amt := btcpay.MustAmount("0.01")
	_, err = c.CreateInvoice(ctx, btcpay.CreateInvoiceParams{OrderID: order, Amount: &amt, Currency: "BTC", PaymentMethod: btcpay.MethodBTCChain})
	require.ErrorIs(t, err, btcpay.ErrUnreachable)
	sim.Up()
	require.Eventually(t, func() bool {
		found, err := c.InvoicesByOrderID(ctx, order)
		return err == nil && len(found) == 1
	}, 10*time.Second, 50*time.Millisecond, "the slow request took effect although the client gave up")
}

func TestUnreachableServer(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // nothing listens there any more
	c, err := btcpay.New(btcpay.Options{URL: url, APIKey: "k", StoreID: "s", Timeout: time.Second})
	require.NoError(t, err)
	_, err = c.StorePaymentMethods(context.Background(), true)
	require.ErrorIs(t, err, btcpay.ErrUnreachable)
	require.NotContains(t, err.Error(), url+"/api", "the error names the call, not the URL")
}

func TestNewRefusesBadOptions(t *testing.T) {
	t.Parallel()
	for _, o := range []btcpay.Options{
		{URL: "ftp://x", APIKey: "k", StoreID: "s"},
		{URL: "http://", APIKey: "k", StoreID: "s"},
		{URL: "http://x", StoreID: "s"},
		{URL: "http://x", APIKey: "k"},
	} {
		_, err := btcpay.New(o)
		require.Error(t, err, "%+v", o)
	}
}

func TestAmount(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		scale   int
		units   int64
		inexact bool
		bad     bool
	}{
		{in: "0.00012345", scale: 8, units: 12345},
		{in: "5.00", scale: 2, units: 500},
		{in: "5", scale: 8, units: 500_000_000},
		{in: "0.00012345678", scale: 8, inexact: true},
		{in: "0.00012345678", scale: 11, units: 12_345_678},
		{in: "21000000.00000000000", scale: 11, units: 2_100_000_000_000_000_000},
		{in: "12.5", scale: 6, units: 12_500_000},
		{in: "-0.5", scale: 8, units: -50_000_000},
		{in: "0.10000000000000000000000000", scale: 8, units: 10_000_000},
		{in: "0.0000000000000000000001", bad: true},
		{in: "12345678901234567890", bad: true},
		{in: "1e-8", bad: true},
		{in: "", bad: true},
		{in: ".", bad: true},
		{in: "1.2.3", bad: true},
		{in: "abc", bad: true},
	}
	for _, tc := range tests {
		a, err := btcpay.ParseAmount(tc.in)
		if tc.bad {
			require.Error(t, err, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		u, err := a.Units(tc.scale)
		if tc.inexact {
			require.ErrorIs(t, err, btcpay.ErrInexact, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.units, u, tc.in)
	}
	// 19 significant digits fit; the 20th does not, and is not rounded.
	_, err := btcpay.MustAmount("9223372036854775807").Units(0)
	require.NoError(t, err)
	_, err = btcpay.MustAmount("92233720368547758.08").Units(2)
	require.Error(t, err)
}

func TestAmountJSON(t *testing.T) {
	t.Parallel()
	var v struct {
		A btcpay.Amount  `json:"a"`
		B btcpay.Amount  `json:"b"`
		C *btcpay.Amount `json:"c"`
	}
	require.NoError(t, json.Unmarshal([]byte(`{"a":"0.00035228","b":1.5,"c":null}`), &v))
	require.Equal(t, "0.00035228", v.A.String())
	require.Equal(t, "1.5", v.B.String())
	require.Nil(t, v.C)
	require.Error(t, json.Unmarshal([]byte(`{"a":1e-8}`), &v), "exponents are refused, not guessed")
	require.Error(t, json.Unmarshal([]byte(`{"a":"0.1234567890123456789012"}`), &v))
	out, err := json.Marshal(btcpay.MustAmount("0.00100000"))
	require.NoError(t, err)
	require.JSONEq(t, `"0.00100000"`, string(out))
}

func TestMulCeil(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		rate  string
		n     int64
		total int64
	}{{"4.107", 141, 580}, {"2", 141, 282}, {"1.001", 1000, 1001}, {"0", 141, 0}, {"0.0001", 141, 1}} {
		got, err := btcpay.MustAmount(tc.rate).MulCeil(tc.n)
		require.NoError(t, err)
		require.Equal(t, tc.total, got, "%s x %d", tc.rate, tc.n)
	}
}

func TestTimesAndFlexInts(t *testing.T) {
	t.Parallel()
	var v struct {
		T1 btcpay.UnixTime `json:"t1"`
		T2 btcpay.UnixTime `json:"t2"`
		T3 btcpay.UnixTime `json:"t3"`
		F1 btcpay.FlexInt  `json:"f1"`
		F2 btcpay.FlexInt  `json:"f2"`
		F3 btcpay.FlexInt  `json:"f3"`
	}
	require.NoError(t, json.Unmarshal([]byte(`{"t1":1720000000,"t2":"1720000001","t3":null,"f1":12,"f2":"250000000","f3":null}`), &v))
	require.Equal(t, time.Unix(1720000000, 0).UTC(), v.T1.Time)
	require.Equal(t, time.Unix(1720000001, 0).UTC(), v.T2.Time)
	require.True(t, v.T3.IsZero())
	require.Equal(t, btcpay.FlexInt{V: 12, Valid: true}, v.F1)
	require.Equal(t, btcpay.FlexInt{V: 250_000_000, Valid: true}, v.F2)
	require.False(t, v.F3.Valid)
	require.Error(t, json.Unmarshal([]byte(`{"f1":"1.5"}`), &v))
}

func TestPaymentProofKeysAnyCase(t *testing.T) {
	t.Parallel()
	for name, body := range map[string]string{
		"PascalCase": `{"TransactionId":"abc","Candidates":["abc"],"ProofType":"PayoutTransactionOnChainBlob","Accounted":true}`,
		"camelCase":  `{"transactionId":"abc","candidates":["abc"],"proofType":"PayoutTransactionOnChainBlob","accounted":true}`,
		"lowercase":  `{"transactionid":"abc","candidates":["abc"],"prooftype":"PayoutTransactionOnChainBlob","accounted":true}`,
	} {
		var p btcpay.Payout
		require.NoError(t, json.Unmarshal([]byte(`{"id":"p","state":"Completed","paymentProof":`+body+`}`), &p), name)
		require.NotNil(t, p.PaymentProof, name)
		require.Equal(t, "abc", p.PaymentProof.TransactionID, name)
		require.Equal(t, "abc", p.PaymentProof.TxID(), name)
		require.Equal(t, "PayoutTransactionOnChainBlob", p.PaymentProof.ProofType, name)
		require.Equal(t, []string{"abc"}, p.PaymentProof.Candidates, name)
		require.True(t, *p.PaymentProof.Accounted, name)
	}
	var p btcpay.Payout
	require.NoError(t, json.Unmarshal([]byte(`{"id":"p","paymentProof":null,"pullPaymentId":null,"date":1720000000}`), &p))
	require.Nil(t, p.PaymentProof)
	require.Empty(t, p.PaymentProof.TxID())
	var manual btcpay.Payout
	require.NoError(t, json.Unmarshal([]byte(`{"paymentProof":{"proofType":"manual","id":"txid-1","link":"https://x"}}`), &manual))
	require.Equal(t, "txid-1", manual.PaymentProof.TxID())
}

func TestNormalizeMethodID(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"BTC": "BTC-CHAIN", "btc-chain": "BTC-CHAIN", "BTC_OnChain": "BTC-CHAIN", "BTC-LightningNetwork": "BTC-LN",
		"BTC_LightningLike": "BTC-LN", "BTC-LN": "BTC-LN", "BTC-LNURLPAY": "BTC-LNURL", "USDT-TRON": "USDT-TRON",
		"usdt_tron": "USDT-TRON", "USDt-TRON": "USDT-TRON",
	} {
		require.Equal(t, want, btcpay.NormalizeMethodID(in), in)
	}
	require.True(t, btcpay.SameMethod("USDt-TRON", "USDT-TRON"))
	require.False(t, btcpay.SameMethod("BTC-LN", "BTC-CHAIN"))
}

func TestWebhookSignature(t *testing.T) {
	t.Parallel()
	body := []byte("{\n  \"type\": \"InvoiceSettled\"\n}")
	sig := btcpay.Sign("secret", body)
	// Known answer, computed independently (openssl dgst -sha256 -hmac secret).
	require.Equal(t, "sha256=fb310ee17828ceef5d50ecfe1a9ebbc5797af7640c5628f22f31579843304beb", sig)
	require.True(t, btcpay.VerifySignature("secret", body, sig))
	require.True(t, btcpay.VerifySignature("secret", body, "SHA256="+strings.ToUpper(strings.TrimPrefix(sig, "sha256="))))
	for name, h := range map[string]string{
		"OtherSecret": btcpay.Sign("other", body), "Empty": "", "NoAlgorithm": strings.TrimPrefix(sig, "sha256="),
		"OtherAlgorithm": "sha1=" + strings.TrimPrefix(sig, "sha256="), "NotHex": "sha256=zz", "Short": sig[:20],
	} {
		require.False(t, btcpay.VerifySignature("secret", body, h), name)
	}
	require.False(t, btcpay.VerifySignature("secret", append(body, ' '), sig), "a changed body")
	require.False(t, btcpay.VerifySignature("", body, btcpay.Sign("", body)), "an empty secret verifies nothing")
}

func TestParseWebhookEvent(t *testing.T) {
	t.Parallel()
	e, err := btcpay.ParseWebhookEvent([]byte(`{"deliveryId":"d1","webhookId":"w","originalDeliveryId":null,"isRedelivery":false,
		"type":"InvoiceReceivedPayment","timestamp":1720000000,"storeId":"s","invoiceId":"i","metadata":{"orderId":"o1"},
		"afterExpiration":true,"paymentMethodId":"BTC-CHAIN","payment":{"id":"tx-0","receivedDate":1720000000,"value":"0.001",
		"fee":"0","status":"Processing","destination":"bcrt1q"},"newField":{"x":1}}`))
	require.NoError(t, err)
	require.Equal(t, "d1", e.Identity())
	require.Equal(t, "o1", e.OrderID())
	require.True(t, e.AfterExpiration)
	require.True(t, e.IsInvoiceEvent())
	require.Equal(t, btcpay.PaymentProcessing, e.Payment.Status)

	re, err := btcpay.ParseWebhookEvent([]byte(`{"deliveryId":"d2","originalDeliveryId":"d1","isRedelivery":true,"type":"PayoutUpdated",
		"storeId":"s","payoutId":"p","pullPaymentId":null,"payoutState":"Completed"}`))
	require.NoError(t, err)
	require.Equal(t, "d1", re.Identity(), "a redelivery collapses to the first delivery")
	require.True(t, re.IsPayoutEvent())

	// An unknown type with an unexpected shape still parses its envelope.
	un, err := btcpay.ParseWebhookEvent([]byte(`{"deliveryId":"d3","type":"SubscriberCreated","storeId":"s","payment":"not an object"}`))
	require.NoError(t, err)
	require.Equal(t, "SubscriberCreated", un.Type)
	require.Equal(t, "s", un.StoreID)

	for name, body := range map[string]string{
		"Empty": ``, "Array": `[]`, "NoType": `{"deliveryId":"d"}`, "NullType": `{"type":null}`, "NumberType": `{"type":1}`,
		"Trailing": `{"type":"InvoiceSettled"} {}`, "KnownTypeBadShape": `{"type":"InvoiceReceivedPayment","payment":"x"}`,
		"NotJSON": `type=InvoiceSettled`,
	} {
		_, err := btcpay.ParseWebhookEvent([]byte(body))
		require.ErrorIs(t, err, btcpay.ErrBadWebhook, name)
	}
}

func FuzzParseWebhookEvent(f *testing.F) {
	f.Add([]byte(`{"type":"InvoiceSettled","deliveryId":"d","storeId":"s","invoiceId":"i","metadata":{"orderId":"o"}}`))
	f.Add([]byte(`{"type":"PayoutUpdated","payoutState":"Completed"}`))
	f.Add([]byte(`{"type":"X","payment":1}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		e, err := btcpay.ParseWebhookEvent(body)
		if err == nil && strings.TrimSpace(e.Type) == "" {
			t.Fatalf("parsed an event without a type from %q", body)
		}
	})
}

func FuzzVerifySignature(f *testing.F) {
	f.Add([]byte("{}"), "sha256=00")
	f.Fuzz(func(t *testing.T, body []byte, header string) {
		if btcpay.VerifySignature("secret", body, header) && header != btcpay.Sign("secret", body) &&
			!strings.EqualFold(header, btcpay.Sign("secret", body)) {
			t.Fatalf("accepted %q for %q", header, body)
		}
	})
}

func FuzzParseAmount(f *testing.F) {
	for _, s := range []string{"0.00012345", "-1", "21000000.00000000000", "1e5", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := btcpay.ParseAmount(s)
		if err != nil {
			return
		}
		// Exact: the value prints back to a string that parses to itself.
		b, err := btcpay.ParseAmount(a.String())
		if err != nil || a.Cmp(b) != 0 {
			t.Fatalf("%q -> %s does not round-trip", s, a)
		}
	})
}

// TestPayoutListIsStreamed: BTCPay neither pages nor filters the payout
// list, so it is read as a stream: a store with more payouts than the
// body cap of other calls (8 MiB) is still searched, and an answer cut
// short is ambiguous, not an empty list.
func TestPayoutListIsStreamed(t *testing.T) {
	t.Parallel()
	const n = 3_000 // about 13 MiB: few payouts, long metadata, cheap to decode under -race
	filler := strings.Repeat("x", 4_000)
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set("Content-Type", "application/json")
		w := bufio.NewWriter(rw)
		defer w.Flush()
		_, _ = w.Write([]byte("["))
		for i := range n {
			if i > 0 {
				_, _ = w.Write([]byte(","))
			}
			wid := "other"
			if i == n-1 {
				wid = "wanted"
			}
			_, _ = fmt.Fprintf(w, `{"id":"p%d","revision":0,"date":1700000000,"destination":"bcrt1q","originalCurrency":"BTC","originalAmount":"0.001","payoutCurrency":"BTC","payoutAmount":"0.001","payoutMethodId":"BTC-CHAIN","state":"Completed","paymentProof":{"TransactionId":"tx%d"},"metadata":{"withdrawalId":%q,"note":%q}}`,
				i, i, wid, filler)
		}
		if r.URL.Query().Get("includeCancelled") == "true" {
			_, _ = w.Write([]byte("]"))
		} // else: the answer stops short
	}))
	defer srv.Close()
	c, err := btcpay.New(btcpay.Options{URL: srv.URL, APIKey: "k", StoreID: "s", Timeout: time.Minute})
	require.NoError(t, err)
	ps, err := c.PayoutsByWithdrawalID(context.Background(), "wanted", time.Time{})
	require.NoError(t, err)
	require.Len(t, ps, 1)
	require.Equal(t, fmt.Sprintf("p%d", n-1), ps[0].ID)
	_, err = c.PayoutsInTransaction(context.Background(), "tx3")
	require.ErrorIs(t, err, btcpay.ErrUnreachable, "a list cut short is no answer")
}

// The lookups by transaction and by withdrawal decode only the payouts
// that name what they look for: the rest of an ever-growing list is
// scanned, not decoded (an undecodable payout that does not name it
// changes nothing), and a near miss ("tx3" in "tx30") is decoded and
// left out.
func TestPayoutLookupsDecodeOnlyMatches(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
		rw.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(rw, `[
{"id":"p1","payoutAmount":"0.001","state":"InProgress","paymentProof":{"TransactionId":"tx3"},"metadata":{"withdrawalId":"w-1"}},
{"id":"p2","payoutAmount":{"not":"a decimal"},"state":"Completed","paymentProof":{"TransactionId":"tx9"},"metadata":{"withdrawalId":"w-9"}},
{"id":"p3","payoutAmount":"0.002","state":"InProgress","paymentProof":{"TransactionId":"tx30"},"metadata":{"withdrawalId":"w-10"}},
{"id":"p4","payoutAmount":"0.003","state":"InProgress","paymentProof":{"TransactionId":"tx3"},"metadata":{"withdrawalId":"w-2"}}]`)
	}))
	defer srv.Close()
	c, err := btcpay.New(btcpay.Options{URL: srv.URL, APIKey: "k", StoreID: "s", Timeout: time.Minute})
	require.NoError(t, err)
	ctx := context.Background()

	ps, err := c.PayoutsInTransaction(ctx, "tx3")
	require.NoError(t, err)
	require.Equal(t, []string{"p1", "p4"}, []string{ps[0].ID, ps[len(ps)-1].ID})
	require.Len(t, ps, 2)
	ps, err = c.PayoutsByWithdrawalID(ctx, "w-1", time.Time{})
	require.NoError(t, err)
	require.Len(t, ps, 1)
	require.Equal(t, "p1", ps[0].ID)

	_, err = c.PayoutsInTransaction(ctx, "tx9") // the undecodable one itself
	require.ErrorIs(t, err, btcpay.ErrUnreachable)
}

// BenchmarkPayoutsInTransaction looks up the payouts of one transaction in
// a store that has made 2,000 payouts (make bench; docs/performance.md).
func BenchmarkPayoutsInTransaction(b *testing.B) {
	var body bytes.Buffer
	body.WriteString("[")
	for i := range 2_000 {
		if i > 0 {
			body.WriteString(",")
		}
		fmt.Fprintf(&body, `{"id":"p%d","revision":0,"date":1700000000,"destination":"bcrt1qw508d6qejxtdg4y5r3zarvary0c5xw7kygt080","originalCurrency":"BTC","originalAmount":"0.001","payoutCurrency":"BTC","payoutAmount":"0.00020%03d","payoutMethodId":"BTC-CHAIN","state":"Completed","paymentProof":{"TransactionId":"%064x","ProofType":"PayoutTransactionOnChainBlob","Accounted":true},"metadata":{"withdrawalId":"%08x-0000-4000-8000-000000000000"}}`,
			i, i%1000, i, i)
	}
	body.WriteString("]")
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
		rw.Header().Set("Content-Type", "application/json")
		_, _ = rw.Write(body.Bytes())
	}))
	defer srv.Close()
	c, err := btcpay.New(btcpay.Options{URL: srv.URL, APIKey: "k", StoreID: "s", Timeout: time.Minute})
	require.NoError(b, err)
	txid := fmt.Sprintf("%064x", 1_234)
	b.ReportAllocs()
	for b.Loop() {
		ps, err := c.PayoutsInTransaction(context.Background(), txid)
		if err != nil || len(ps) != 1 {
			b.Fatalf("%v %d", err, len(ps))
		}
	}
}

// The lookup by withdrawal id with a date to go back to stops at the
// first payout older than it, when the list reads newest first: what lies
// beyond is never read (here a payout that names the withdrawal but
// cannot be decoded, which fails a lookup that reads it). A list in any
// other order, or a lookup without a date, is read to the end.
func TestPayoutLookupStopsAtTheFirstOlderPayout(t *testing.T) {
	t.Parallel()
	const since = 1_700_000_000
	item := func(id string, date int64, wid string) string {
		return fmt.Sprintf(`{"id":%q,"date":%d,"payoutAmount":"0.001","state":"Completed","metadata":{"withdrawalId":%q}}`, id, date, wid)
	}
	bad := `{"id":"old","date":1600000000,"payoutAmount":{"not":"a decimal"},"metadata":{"withdrawalId":"w-1"}}`
	newestFirst := "[" + strings.Join([]string{
		item("p4", since+300, "w-2"), item("p3", since+200, "w-1"), item("p2", since+100, "w-3"),
		item("p1", since-1, "w-4"), bad}, ",") + "]"
	// Oldest first: the first payout is already older than the date, but
	// the list does not read newest first, so it is read on.
	oldestFirst := "[" + strings.Join([]string{
		item("p0", since-5, "w-4"), strings.Replace(bad, "1600000000", fmt.Sprint(since-1), 1), item("p3", since+200, "w-1")}, ",") + "]"
	var body string
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
		rw.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(rw, body)
	}))
	defer srv.Close()
	c, err := btcpay.New(btcpay.Options{URL: srv.URL, APIKey: "k", StoreID: "s", Timeout: time.Minute})
	require.NoError(t, err)
	ctx := context.Background()

	body = newestFirst
	ps, err := c.PayoutsByWithdrawalID(ctx, "w-1", time.Unix(since, 0))
	require.NoError(t, err)
	require.Len(t, ps, 1)
	require.Equal(t, "p3", ps[0].ID)
	_, err = c.PayoutsByWithdrawalID(ctx, "w-1", time.Time{})
	require.ErrorIs(t, err, btcpay.ErrUnreachable, "read to the end")

	body = oldestFirst
	_, err = c.PayoutsByWithdrawalID(ctx, "w-1", time.Unix(since, 0))
	require.ErrorIs(t, err, btcpay.ErrUnreachable, "another order is read to the end")
}

// TestConcurrentCallsKeepTheirConnections: calls made at once, a wave
// after a wave, reuse the first wave's connections (NewTransport keeps
// 32 of them), where the transport's default keeps two and dials
// the rest again.
func TestConcurrentCallsKeepTheirConnections(t *testing.T) {
	t.Parallel()
	var opened atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(20 * time.Millisecond) // the wave's calls overlap
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"inv-1","status":"New","amount":"1","currency":"BTC"}`)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			opened.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	c, err := btcpay.New(btcpay.Options{URL: srv.URL, APIKey: "k", StoreID: "s"})
	require.NoError(t, err)
	const width = 16
	for wave := 0; wave < 3; wave++ {
		var wg sync.WaitGroup
		errs := make(chan error, width)
		for i := 0; i < width; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := c.GetInvoice(context.Background(), "inv-1")
				errs <- err
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
	}
	require.LessOrEqual(t, opened.Load(), int64(width), "connections opened over three waves of %d calls", width)
}
