package webhooksig_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"svc/platform/webhooksig"
)

// independent computes v1 without the package, from the SPEC's wording.
func independent(secret string, ts int64, body string) string {
	m := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(m, "%d.%s", ts, body)
	return hex.EncodeToString(m.Sum(nil))
}

func TestSignMatchesTheSpec(t *testing.T) {
	t.Parallel()
	at := time.Unix(1700000000, 999_000_000)
	got := webhooksig.Sign([]byte("k"), at, []byte(`{"a":1}`))
	require.Equal(t, "t=1700000000,v1="+independent("k", 1700000000, `{"a":1}`), got)
}

// TestSignDuringRotation: with the previous secret too, the header carries
// one v1 per secret, and a receiver holding either verifies.
func TestSignDuringRotation(t *testing.T) {
	t.Parallel()
	at := time.Unix(1700000000, 0)
	body := []byte(`{"a":1}`)
	got := webhooksig.Sign([]byte("new"), at, body, []byte("old"))
	require.Equal(t, "t=1700000000,v1="+independent("new", 1700000000, `{"a":1}`)+",v1="+independent("old", 1700000000, `{"a":1}`), got)
	for _, secret := range []string{"new", "old"} {
		require.NoError(t, webhooksig.Verify([]byte(secret), got, body, at))
	}
	require.ErrorIs(t, webhooksig.Verify([]byte("other"), got, body, at), webhooksig.ErrMismatch)
}

func TestVerify(t *testing.T) {
	t.Parallel()
	secret := []byte("secret")
	body := []byte(`{"id":"evt_1","type":"deposit.settled"}`)
	at := time.Unix(1700000000, 0)
	good := webhooksig.Sign(secret, at, body)
	sig := independent("secret", 1700000000, string(body))
	other := independent("other", 1700000000, string(body))

	for _, tc := range []struct {
		name   string
		secret string
		header string
		body   string
		now    time.Time
		want   error
	}{
		{"Exact", "secret", good, string(body), at, nil},
		{"ClockAheadWithinTolerance", "secret", good, string(body), at.Add(300 * time.Second), nil},
		{"ClockBehindWithinTolerance", "secret", good, string(body), at.Add(-300 * time.Second), nil},
		{"TooOld", "secret", good, string(body), at.Add(301 * time.Second), webhooksig.ErrTimestamp},
		{"TooFarAhead", "secret", good, string(body), at.Add(-301 * time.Second), webhooksig.ErrTimestamp},
		{"BodyChanged", "secret", good, string(body) + " ", at, webhooksig.ErrMismatch},
		{"WrongSecret", "nope", good, string(body), at, webhooksig.ErrMismatch},
		{"TimestampChanged", "secret", "t=1700000001,v1=" + sig, string(body), at, webhooksig.ErrMismatch},
		{"SecondSignatureMatches", "secret", "t=1700000000,v1=" + other + ",v1=" + sig, string(body), at, nil},
		{"UnknownSchemeIgnored", "secret", "t=1700000000,v0=zz,v1=" + sig, string(body), at, nil},
		{"SpacesAllowed", "secret", "t=1700000000, v1=" + sig, string(body), at, nil},
		{"Empty", "secret", "", string(body), at, webhooksig.ErrMalformed},
		{"NoTimestamp", "secret", "v1=" + sig, string(body), at, webhooksig.ErrMalformed},
		{"NoSignature", "secret", "t=1700000000", string(body), at, webhooksig.ErrMalformed},
		{"TwoTimestamps", "secret", "t=1700000000,t=1700000000,v1=" + sig, string(body), at, webhooksig.ErrMalformed},
		{"SignedTimestamp", "secret", "t=+1700000000,v1=" + sig, string(body), at, webhooksig.ErrMalformed},
		{"ShortSignature", "secret", "t=1700000000,v1=" + sig[:62], string(body), at, webhooksig.ErrMalformed},
		{"NotHex", "secret", "t=1700000000,v1=" + "g" + sig[1:], string(body), at, webhooksig.ErrMalformed},
		{"NoEquals", "secret", "t=1700000000,v1", string(body), at, webhooksig.ErrMalformed},
		{"HugeTimestamp", "secret", "t=999999999999999999999,v1=" + sig, string(body), at, webhooksig.ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := webhooksig.Verify([]byte(tc.secret), tc.header, []byte(tc.body), tc.now)
			if tc.want == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tc.want)
		})
	}
}

func FuzzVerify(f *testing.F) {
	at := time.Unix(1700000000, 0)
	f.Add(webhooksig.Sign([]byte("s"), at, []byte("{}")), []byte("{}"))
	f.Add("t=1,v1=00", []byte("x"))
	f.Add("t=,v1=,,=", []byte(nil))
	f.Fuzz(func(t *testing.T, header string, body []byte) {
		// Never panics; accepts only what a signer with the secret produced.
		if err := webhooksig.Verify([]byte("s"), header, body, at); err == nil {
			require.Contains(t, header, independent("s", 1700000000, string(body))[:16])
		}
		require.NoError(t, webhooksig.Verify([]byte("s"), webhooksig.Sign([]byte("s"), at, body), body, at))
	})
}
