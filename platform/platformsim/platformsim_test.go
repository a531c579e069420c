package platformsim_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"svc/platform/platformsim"
	"svc/platform/webhooksig"
)

func TestReceiverVerifiesAndDeduplicates(t *testing.T) {
	t.Parallel()
	r := platformsim.New("s3cret")
	srv := httptest.NewServer(r)
	defer srv.Close()
	body := []byte(`{"id":"evt_1","type":"deposit.settled","created_at":"2026-01-01T00:00:00.000000+00:00","data":{"deposit_id":"d"}}`)
	post := func(sig string) int {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/webhooks", bytes.NewReader(body))
		req.Header.Set("X-Service-Signature", sig)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusUnauthorized, post(webhooksig.Sign([]byte("other"), time.Now(), body)))
	require.Equal(t, http.StatusUnauthorized, post(""))
	good := webhooksig.Sign([]byte("s3cret"), time.Now(), body)
	require.Equal(t, http.StatusOK, post(good))
	require.Equal(t, http.StatusOK, post(good))
	evs := r.Events()
	require.Len(t, evs, 1)
	require.Equal(t, "deposit.settled", evs[0].Type)
	require.Equal(t, 1, evs[0].Duplicates)
}
