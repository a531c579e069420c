package console_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"svc/modules/operator"
)

// signedIn is a client of ada's signed-in session, with the session's
// CSRF token.
func (e *env) signedIn(t *testing.T) *client {
	t.Helper()
	c := e.client(t)
	res, body := c.answer(c.assertion(e.Passkey, c.challenge("ada")))
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	_, body = c.do("GET", "/events", "", nil)
	m := csrfRE.FindStringSubmatch(body)
	require.NotNil(t, m, body)
	c.csrf = m[1]
	return c
}

// signAction does what console.js does with a confirmation's form: it
// posts form to path + "/challenge", has pk sign the answer's challenge
// and posts the assertion to path.
func (c *client) signAction(path string, form url.Values) (*http.Response, string) {
	c.t.Helper()
	res, body := c.do("POST", path+"/challenge", "application/x-www-form-urlencoded", strings.NewReader(form.Encode()))
	require.Equal(c.t, http.StatusOK, res.StatusCode, body)
	var ch struct {
		Challenge string `json:"challenge"`
	}
	require.NoError(c.t, json.Unmarshal([]byte(body), &ch))
	return c.do("POST", path, "application/json", strings.NewReader(c.assertion(c.e.Passkey, ch.Challenge)))
}

// TestActionNeedsItsRole: a confirmation whose action the operator's role
// does not allow says so before anything is signed.
func TestActionNeedsItsRole(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ev := e.deadEvent(t)
	c := e.signedIn(t)
	res, body := c.do("GET", "/api-keys/mint?label=x&scope=read_only", "", nil)
	require.Equal(t, http.StatusForbidden, res.StatusCode, body)
	require.Contains(t, body, "This needs the admin role; you are approver.")
	res, body = c.do("GET", "/events/"+ev.PublicID()+"/redeliver", "", nil)
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	require.Contains(t, body, `id="signed-action"`)
}

// TestMintedSecretLapses: a minted key's secret not read within 2 minutes
// of the mint is dropped: the result page no longer shows it.
func TestMintedSecretLapses(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.change(t, operator.Change{Action: operator.ActionSetRole, Name: "ada", Role: operator.Admin})
	c := e.signedIn(t)
	res, body := c.signAction("/api-keys/mint", url.Values{"label": {"late"}, "scope": {"read_only"}})
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	require.Contains(t, body, `"/result"`)
	e.Clock.Advance(2*time.Minute + time.Second)
	res, body = c.do("GET", "/result", "", nil)
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	require.Contains(t, body, "is minted")
	require.NotContains(t, body, `id="secret"`)
	require.NotContains(t, body, "svc_test_")
}

// TestMintFormRefusals: a mint whose label, scope, expiry or networks the
// key store would refuse is refused before any statement is made.
func TestMintFormRefusals(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.change(t, operator.Change{Action: operator.ActionSetRole, Name: "ada", Role: operator.Admin})
	c := e.signedIn(t)
	for _, tc := range []struct {
		form url.Values
		want string
	}{
		{url.Values{"label": {"  "}, "scope": {"read_only"}}, "label must be 1 to 200 characters"},
		{url.Values{"label": {strings.Repeat("x", 201)}, "scope": {"read_only"}}, "label must be 1 to 200 characters"},
		{url.Values{"label": {"ok"}, "scope": {"root"}}, "scope"},
		{url.Values{"label": {"ok"}, "scope": {"read_only"}, "expires_in": {"-1h"}}, "not a positive duration"},
		{url.Values{"label": {"ok"}, "scope": {"read_only"}, "allowed_cidrs": {"10.0.0.0/33"}}, "10.0.0.0/33"},
	} {
		res, body := c.do("GET", "/api-keys/mint?"+tc.form.Encode(), "", nil)
		require.Equal(t, http.StatusUnprocessableEntity, res.StatusCode, body)
		require.Contains(t, body, tc.want)
		res, body = c.do("POST", "/api-keys/mint/challenge", "application/x-www-form-urlencoded", strings.NewReader(tc.form.Encode()))
		require.Equal(t, http.StatusUnprocessableEntity, res.StatusCode, body)
	}
	keys, err := e.Keys.List(t.Context())
	require.NoError(t, err)
	require.Empty(t, keys)
}
