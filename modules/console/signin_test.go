package console_test

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"svc/modules/console"
	"svc/modules/operator"
	"svc/modules/operator/operatortest"
)

// client is a browser as the console sees it, without one: a cookie jar
// and the sign-in page's CSRF token. It answers challenges with a
// passkey as a browser would (operatortest.Passkey.Assert).
type client struct {
	t     *testing.T
	e     *env
	http  *http.Client
	csrf  string
	count uint32
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func (e *env) client(t *testing.T) *client {
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	c := &client{t: t, e: e, http: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	res, body := c.do("GET", "/sign-in", "", nil)
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	m := csrfRE.FindStringSubmatch(body)
	require.NotNil(t, m, body)
	c.csrf = m[1]
	return c
}

func (c *client) do(method, path, contentType string, body io.Reader) (*http.Response, string) {
	c.t.Helper()
	req, err := http.NewRequest(method, c.e.URL+path, body)
	require.NoError(c.t, err)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
		req.Header.Set("Accept", "application/json")
	}
	if c.csrf != "" && method == "POST" {
		req.Header.Set("X-CSRF-Token", c.csrf)
	}
	res, err := c.http.Do(req)
	require.NoError(c.t, err)
	b, err := io.ReadAll(res.Body)
	require.NoError(c.t, err)
	res.Body.Close()
	return res, string(b)
}

// challenge asks for the sign-in challenge of name.
func (c *client) challenge(name string) string {
	c.t.Helper()
	res, body := c.do("POST", "/sign-in/challenge", "application/x-www-form-urlencoded", strings.NewReader(url.Values{"name": {name}}.Encode()))
	require.Equal(c.t, http.StatusOK, res.StatusCode, body)
	var a struct {
		Challenge string `json:"challenge"`
		RPID      string `json:"rp_id"`
	}
	require.NoError(c.t, json.Unmarshal([]byte(body), &a))
	require.Equal(c.t, "localhost", a.RPID)
	return a.Challenge
}

// assertion is pk's answer to challenge, from the console's origin.
func (c *client) assertion(pk *operatortest.Passkey, challenge string) string {
	cd, err := json.Marshal(map[string]any{"type": "webauthn.get", "challenge": challenge, "origin": c.e.URL, "crossOrigin": false})
	require.NoError(c.t, err)
	c.count++
	rp := sha256.Sum256([]byte("localhost"))
	ad := binary.BigEndian.AppendUint32(append(rp[:], operatortest.FlagUP|operatortest.FlagUV), c.count)
	b64 := base64.RawURLEncoding.EncodeToString
	body, err := json.Marshal(map[string]string{"authenticator_data": b64(ad), "client_data_json": b64(cd), "signature": b64(pk.Assert(ad, cd))})
	require.NoError(c.t, err)
	return string(body)
}

// answer posts an assertion.
func (c *client) answer(assertion string) (*http.Response, string) {
	c.t.Helper()
	return c.do("POST", "/sign-in", "application/json", strings.NewReader(assertion))
}

// TestSignInChallengeIsAnsweredOnce: a sign-in's challenge takes one
// answer: after a wrong one, the right one is refused too, and a new
// challenge is needed; once signed in, the same answer again is refused.
func TestSignInChallengeIsAnsweredOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.client(t)

	ch := c.challenge("ada")
	res, body := c.answer(c.assertion(operatortest.NewPasskey("localhost"), ch))
	require.Equal(t, http.StatusUnauthorized, res.StatusCode, body)
	require.Contains(t, body, "signature does not verify")
	res, body = c.answer(c.assertion(e.Passkey, ch))
	require.Equal(t, http.StatusUnauthorized, res.StatusCode, body)
	require.Contains(t, body, "was used or has expired")

	ch = c.challenge("ada")
	good := c.assertion(e.Passkey, ch)
	res, body = c.answer(good)
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	res, body = c.answer(good)
	require.Equal(t, http.StatusUnauthorized, res.StatusCode, body)
	res, _ = c.do("GET", "/", "", nil)
	require.Equal(t, http.StatusOK, res.StatusCode, "signed in")
}

// TestSignInChallengeLapses: a challenge not answered within 2 minutes
// is refused.
func TestSignInChallengeLapses(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.client(t)
	answer := c.assertion(e.Passkey, c.challenge("ada"))
	e.Clock.Advance(2 * time.Minute)
	res, body := c.answer(answer)
	require.Equal(t, http.StatusUnauthorized, res.StatusCode, body)
	require.Contains(t, body, "has expired")
}

// TestSignInIsBoundToItsBrowser: an answer to one browser's challenge
// does not sign in another browser (another sign-in cookie), whatever its
// CSRF token; the first browser's sign-in still takes it.
func TestSignInIsBoundToItsBrowser(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a, b := e.client(t), e.client(t)
	answer := a.assertion(e.Passkey, a.challenge("ada"))
	res, body := b.answer(answer)
	require.Equal(t, http.StatusUnauthorized, res.StatusCode, body)
	b.challenge("ada") // b's own challenge: a's answer is not for it
	res, body = b.answer(answer)
	require.Equal(t, http.StatusUnauthorized, res.StatusCode, body)
	require.Contains(t, body, "challenge")
	res, body = a.answer(answer)
	require.Equal(t, http.StatusOK, res.StatusCode, body)
}

// TestSignInNeedsCSRFToken: the sign-in's requests without the sign-in
// page's CSRF token are refused.
func TestSignInNeedsCSRFToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.client(t)
	c.csrf = ""
	res, body := c.do("POST", "/sign-in/challenge", "application/x-www-form-urlencoded", strings.NewReader("name=ada"))
	require.Equal(t, http.StatusForbidden, res.StatusCode, body)
	require.Contains(t, body, "security token")
}

// TestSessionCookie: the session cookie is HttpOnly, SameSite=Strict, on
// every path, with no lifetime of its own; Secure when the console says so
// (production, HTTPS).
func TestSessionCookie(t *testing.T) {
	t.Parallel()
	for _, secure := range []bool{false, true} {
		e := newEnv(t, func(o *console.Options) { o.Secure = secure })
		c := e.client(t)
		res, body := c.answer(c.assertion(e.Passkey, c.challenge("ada")))
		require.Equal(t, http.StatusOK, res.StatusCode, body)
		var session *http.Cookie
		for _, ck := range res.Cookies() {
			if ck.Name == "svc_console" {
				session = ck
			}
		}
		require.NotNil(t, session, res.Header.Values("Set-Cookie"))
		require.True(t, session.HttpOnly)
		require.Equal(t, http.SameSiteStrictMode, session.SameSite)
		require.Equal(t, "/", session.Path)
		require.Zero(t, session.MaxAge)
		require.True(t, session.Expires.IsZero())
		require.Equal(t, secure, session.Secure)
	}
}

// change applies a change of the roster signed by root.
func (e *env) change(t *testing.T, ch operator.Change) {
	t.Helper()
	ctx := t.Context()
	head, err := e.Ops.Head(ctx, e.DB.Bun)
	require.NoError(t, err)
	_, err = e.Ops.Submit(ctx, operatortest.Sign(t, e.Root, ch.Statement(head, e.Clock.Now())))
	require.NoError(t, err)
}

// TestRevokedPasskeyEndsTheSession: a change of role shows at the
// session's next request (and any role signs in); once the enrollment chain revokes the
// passkey a session signed in with, the session is over, and the passkey
// cannot sign in again.
func TestRevokedPasskeyEndsTheSession(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.client(t)
	res, body := c.answer(c.assertion(e.Passkey, c.challenge("ada")))
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	res, _ = c.do("GET", "/", "", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)

	// A change of role shows at the next request; a viewer signs in too.
	e.change(t, operator.Change{Action: operator.ActionSetRole, Name: "ada", Role: operator.Viewer})
	res, body = c.do("GET", "/", "", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, `<span class="role">viewer</span>`)
	c = e.client(t)
	res, body = c.answer(c.assertion(e.Passkey, c.challenge("ada")))
	require.Equal(t, http.StatusOK, res.StatusCode, body)

	e.change(t, operator.Change{Action: operator.ActionRevokeKey, Name: "ada", KeyID: e.Passkey.Public().ID()})

	res, _ = c.do("GET", "/", "", nil)
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.Equal(t, "/sign-in?why=revoked", res.Header.Get("Location"))
	c = e.client(t)
	res, body = c.do("POST", "/sign-in/challenge", "application/x-www-form-urlencoded", strings.NewReader("name=ada"))
	require.Equal(t, http.StatusForbidden, res.StatusCode, body)
	require.Contains(t, body, "has an active passkey")
}

// TestCrossSiteRequestIsRefused: a request that changes something from
// another site's page is refused before anything reads it, CSRF token or
// not.
func TestCrossSiteRequestIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.client(t)
	req, err := http.NewRequest("POST", e.URL+"/sign-in/challenge", strings.NewReader("name=ada"))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("X-CSRF-Token", c.csrf)
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	req.Header.Set("Origin", "https://elsewhere.example")
	res, err := c.http.Do(req)
	require.NoError(t, err)
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusForbidden, res.StatusCode)
	require.Contains(t, string(body), "A request from another site was refused")
}

// TestSecurityHeaders: every answer, a page, an asset or an error,
// carries the console's security headers, and Strict-Transport-Security
// when the console serves HTTPS.
func TestSecurityHeaders(t *testing.T) {
	t.Parallel()
	for _, hsts := range []bool{false, true} {
		e := newEnv(t, func(o *console.Options) { o.HSTS = hsts })
		c := e.client(t)
		for _, path := range []string{"/sign-in", "/assets/" + console.HTMX, "/nowhere", "/"} {
			res, _ := c.do("GET", path, "", nil)
			require.Equal(t, console.ContentSecurityPolicy, res.Header.Get("Content-Security-Policy"), path)
			require.Equal(t, "nosniff", res.Header.Get("X-Content-Type-Options"), path)
			require.Equal(t, "DENY", res.Header.Get("X-Frame-Options"), path)
			require.Equal(t, "no-referrer", res.Header.Get("Referrer-Policy"), path)
			require.Equal(t, "same-origin", res.Header.Get("Cross-Origin-Opener-Policy"), path)
			require.Equal(t, hsts, res.Header.Get("Strict-Transport-Security") != "", path)
			if path == "/sign-in" {
				require.Equal(t, "no-store", res.Header.Get("Cache-Control"), path)
			}
		}
	}
}

// TestMakePasskey: /passkeys answers the public key and key id of the
// passkey made for its challenge, once; the challenge is random for each
// passkey; the name must be an operator's name.
func TestMakePasskey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.client(t)
	ask := func(name string) (*http.Response, map[string]string) {
		res, body := c.do("POST", "/passkeys/challenge", "application/x-www-form-urlencoded", strings.NewReader(url.Values{"name": {name}}.Encode()))
		var m map[string]string
		_ = json.Unmarshal([]byte(body), &m)
		return res, m
	}
	res, bad := ask("Not A Name")
	require.Equal(t, http.StatusUnprocessableEntity, res.StatusCode, bad)
	res, first := ask("bea")
	require.Equal(t, http.StatusOK, res.StatusCode)
	_, second := ask("bea")
	require.NotEqual(t, first["challenge"], second["challenge"])
	require.Equal(t, "localhost", second["rp_id"])

	challenge, err := base64.RawURLEncoding.DecodeString(second["challenge"])
	require.NoError(t, err)
	pk := operatortest.NewPasskey("localhost")
	att, cd := pk.Create(challenge, e.URL)
	b64 := base64.RawURLEncoding.EncodeToString
	answer := `{"attestation_object":"` + b64(att) + `","client_data_json":"` + b64(cd) + `"}`
	res, body := c.do("POST", "/passkeys", "application/json", strings.NewReader(answer))
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	var made map[string]string
	require.NoError(t, json.Unmarshal([]byte(body), &made))
	require.Equal(t, map[string]string{"public_key": pk.Public().String(), "key_id": pk.Public().ID()}, made)
	res, body = c.do("POST", "/passkeys", "application/json", strings.NewReader(answer))
	require.Equal(t, http.StatusUnauthorized, res.StatusCode, body)
}

// TestSignInWithOneOfSeveralPasskeys: an operator with several passkeys
// is asked to choose one; the statement names the chosen one, which then
// signs in.
func TestSignInWithOneOfSeveralPasskeys(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	second := operatortest.NewPasskey("localhost")
	e.change(t, operator.Change{Action: operator.ActionAddKey, Name: "ada", PublicKey: second.Public().String()})
	c := e.client(t)
	ask := func(fields url.Values) map[string]any {
		res, body := c.do("POST", "/sign-in/challenge", "application/x-www-form-urlencoded", strings.NewReader(fields.Encode()))
		require.Equal(t, http.StatusOK, res.StatusCode, body)
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(body), &m))
		return m
	}
	got := ask(url.Values{"name": {"ada"}})
	require.ElementsMatch(t, []any{e.Passkey.Public().ID(), second.Public().ID()}, got["choose"])
	require.Nil(t, got["challenge"])

	got = ask(url.Values{"name": {"ada"}, "key_id": {second.Public().ID()}})
	res, body := c.answer(c.assertion(e.Passkey, got["challenge"].(string)))
	require.Equal(t, http.StatusUnauthorized, res.StatusCode, "the other passkey does not answer for the chosen one: %s", body)
	got = ask(url.Values{"name": {"ada"}, "key_id": {second.Public().ID()}})
	res, body = c.answer(c.assertion(second, got["challenge"].(string)))
	require.Equal(t, http.StatusOK, res.StatusCode, body)
}
