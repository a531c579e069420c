package svcsdk_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	svcsdk "svc/sdk/go"
)

// attempt is what the server saw of one request.
type attempt struct {
	key, body string
}

// script serves answers in turn (a status and a Retry-After; status 0
// drops the connection, a network error) and records every request.
func script(t *testing.T, answers ...[2]string) (url string, seen func() []attempt) {
	var (
		mu  sync.Mutex
		got []attempt
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		n := len(got)
		got = append(got, attempt{r.Header.Get("Idempotency-Key"), string(b)})
		mu.Unlock()
		a := answers[min(n, len(answers)-1)]
		if a[0] == "drop" {
			conn, _, _ := w.(http.Hijacker).Hijack()
			_ = conn.Close()
			return
		}
		if a[1] != "" {
			w.Header().Set("Retry-After", a[1])
		}
		w.Header().Set("Content-Type", "application/json")
		switch a[0] {
		case "201":
			w.WriteHeader(http.StatusCreated)
			_ = json.NewEncoder(w).Encode(map[string]any{"deposit_id": "0190a6b2-c3d4-7e8f-9a0b-1c2d3e4f5a6b", "status": "pending"})
		case "409":
			w.WriteHeader(http.StatusConflict)
			_, _ = io.WriteString(w, `{"detail":"in flight"}`)
		case "402":
			w.WriteHeader(http.StatusPaymentRequired)
			_, _ = io.WriteString(w, `{"detail":"insufficient"}`)
		case "503":
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"detail":"processor unreachable"}`)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL, func() []attempt { mu.Lock(); defer mu.Unlock(); return append([]attempt(nil), got...) }
}

func create(t *testing.T, url string, r *svcsdk.Retrying) (*svcsdk.CreateDepositResponse, error) {
	c, err := svcsdk.New(url, "k", svcsdk.WithHTTPClient(r))
	require.NoError(t, err)
	user := "user-1"
	return c.CreateDepositWithResponse(context.Background(), &svcsdk.CreateDepositParams{IdempotencyKey: svcsdk.NewIdempotencyKey()},
		svcsdk.CreateDepositJSONRequestBody{Asset: "BTC", ExternalUserId: &user})
}

// TestRetryingKeepsTheKey: a dropped connection, a 409 in flight and a 503
// are retried with the same key and the same bytes, waiting Retry-After,
// until the 201.
func TestRetryingKeepsTheKey(t *testing.T) {
	t.Parallel()
	url, seen := script(t, [2]string{"drop"}, [2]string{"409", "1"}, [2]string{"503", ""}, [2]string{"201"})
	start := time.Now()
	res, err := create(t, url, &svcsdk.Retrying{BaseDelay: time.Millisecond})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, res.StatusCode())
	require.NotNil(t, res.JSON201)
	require.GreaterOrEqual(t, time.Since(start), time.Second, "Retry-After: 1 is waited")
	got := seen()
	require.Len(t, got, 4)
	for _, a := range got {
		require.NotEmpty(t, a.key)
		require.Equal(t, got[0], a)
	}
}

// TestRetryingStopsOnAnAnswer: a 402 and a 409 without Retry-After (an
// illegal transition) are answers, not retried; the attempts are bounded.
func TestRetryingStopsOnAnAnswer(t *testing.T) {
	t.Parallel()
	for _, status := range []string{"402", "409"} {
		url, seen := script(t, [2]string{status})
		res, err := create(t, url, &svcsdk.Retrying{BaseDelay: time.Millisecond})
		require.NoError(t, err)
		require.Equal(t, status, strconv.Itoa(res.StatusCode()))
		require.Len(t, seen(), 1)
	}
	url, seen := script(t, [2]string{"503", "0"})
	res, err := create(t, url, &svcsdk.Retrying{MaxAttempts: 3})
	require.NoError(t, err)
	require.Equal(t, http.StatusServiceUnavailable, res.StatusCode())
	require.NotNil(t, res.JSON503)
	require.Len(t, seen(), 3)
}
