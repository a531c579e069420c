// Package webhooksig owns the signature scheme of the service's outbound
// webhooks, for the sender and for receivers alike.
//
// A delivery carries the header
//
//	X-Service-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<raw body>">
//
// keyed with the shared signing secret. A receiver verifies the exact bytes it
// received (never a re-encoded copy), compares in constant time, and refuses a
// timestamp more than Tolerance away from its own clock, so a captured
// delivery cannot be replayed later. The package depends only on the standard
// library, so a receiver can copy or import it on its own.
package webhooksig

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"time"
)

// Header is the name of the signature header.
const Header = "X-Service-Signature"

// Tolerance is how far the signed timestamp may be from the receiver's clock
// (300 seconds by convention).
const Tolerance = 300 * time.Second

// Errors returned by Verify. They say why a delivery was refused; a
// receiver answers all of them with a 4xx and does not act on the body.
var (
	ErrMalformed = errors.New("webhooksig: malformed signature header")
	ErrTimestamp = errors.New("webhooksig: signature timestamp outside the tolerance")
	ErrMismatch  = errors.New("webhooksig: signature does not match the body")
)

// Sign returns the header value for body sent at t, with one v1 per
// secret: during a rotation the sender signs with the new and the previous
// secret, and a receiver holding either verifies (Verify accepts any v1).
func Sign(secret []byte, t time.Time, body []byte, more ...[]byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	var b strings.Builder
	b.WriteString("t=" + ts)
	for _, s := range append([][]byte{secret}, more...) {
		b.WriteString(",v1=" + hex.EncodeToString(mac(s, ts, body)))
	}
	return b.String()
}

// Verify checks a delivery: header is the X-Service-Signature value, body the
// raw request body, now the receiver's clock. It allows Tolerance of clock
// difference either way.
func Verify(secret []byte, header string, body []byte, now time.Time) error {
	return VerifyWithTolerance(secret, header, body, now, Tolerance)
}

// VerifyWithTolerance is Verify with another tolerance.
//
// Several v1 values are accepted (any one may match), so a sender can sign
// with an old and a new secret while a rotation is under way; unknown keys
// are ignored so that a later scheme can be added beside v1.
func VerifyWithTolerance(secret []byte, header string, body []byte, now time.Time, tolerance time.Duration) error {
	ts, sigs, err := parse(header)
	if err != nil {
		return err
	}
	t, _ := strconv.ParseInt(ts, 10, 64) // parse checked the digits and the range
	if d := now.Sub(time.Unix(t, 0)); d > tolerance || d < -tolerance {
		return ErrTimestamp
	}
	want := mac(secret, ts, body)
	for _, s := range sigs {
		if hmac.Equal(s, want) {
			return nil
		}
	}
	return ErrMismatch
}

func mac(secret []byte, ts string, body []byte) []byte {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte(ts))
	h.Write([]byte{'.'})
	h.Write(body)
	return h.Sum(nil)
}

// parse splits the header into its timestamp (as sent, so the MAC covers the
// same digits) and its decoded v1 signatures.
func parse(header string) (string, [][]byte, error) {
	var (
		ts   string
		sigs [][]byte
	)
	for part := range strings.SplitSeq(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return "", nil, ErrMalformed
		}
		switch k {
		case "t":
			if ts != "" || !digits(v) {
				return "", nil, ErrMalformed
			}
			if _, err := strconv.ParseInt(v, 10, 64); err != nil {
				return "", nil, ErrMalformed
			}
			ts = v
		case "v1":
			b, err := hex.DecodeString(v)
			if err != nil || len(b) != sha256.Size {
				return "", nil, ErrMalformed
			}
			sigs = append(sigs, b)
		}
	}
	if ts == "" || len(sigs) == 0 {
		return "", nil, ErrMalformed
	}
	return ts, sigs, nil
}

func digits(s string) bool {
	if s == "" || len(s) > 18 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
