package webhooksig_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"svc/platform/webhooksig"
)

func ExampleVerify() {
	secret := []byte("whsec-shared-with-the-platform")
	body := []byte(`{"id":"evt_0190a6b2c3d47e8f9a0b1c2d3e4f5a6b","type":"deposit.settled","created_at":"2026-01-02T03:04:05.000000+00:00","data":{}}`)
	sent := time.Unix(1767323045, 0)
	header := webhooksig.Sign(secret, sent, body)
	fmt.Println(header)

	// The receiver's clock is a little ahead: still within 300 s. (The
	// signature above can be checked with any HMAC tool, e.g.
	// printf "%s" "1767323045.<body>" | openssl dgst -sha256 -hmac <secret>.)
	fmt.Println(webhooksig.Verify(secret, header, body, sent.Add(42*time.Second)))
	// One changed byte, or a replay ten minutes later, is refused.
	tampered := append([]byte(nil), body...)
	tampered[len(tampered)-2] = ' '
	fmt.Println(errors.Is(webhooksig.Verify(secret, header, tampered, sent), webhooksig.ErrMismatch))
	fmt.Println(errors.Is(webhooksig.Verify(secret, header, body, sent.Add(10*time.Minute)), webhooksig.ErrTimestamp))
	// Output:
	// t=1767323045,v1=a271fa60d7e7faffe8562daf21874470eced6c7cee736404eb27705cf443e7c4
	// <nil>
	// true
	// true
}

// A receiver reads the raw body, verifies it before parsing it, and only then
// looks at the event.
func Example_receiver() {
	secret := []byte("whsec-shared-with-the-platform")
	http.HandleFunc("POST /svc-events", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			http.Error(w, "unreadable body", http.StatusBadRequest)
			return
		}
		if err := webhooksig.Verify(secret, r.Header.Get(webhooksig.Header), body, time.Now()); err != nil {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		// Parse body, dedup on its id, re-read the resource (docs/webhooks.md).
		w.WriteHeader(http.StatusOK)
	})
}
