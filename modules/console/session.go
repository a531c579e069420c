package console

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/base64"
	"net/http"
	"strings"
	"sync"
	"time"

	"svc/modules/operator"
)

// The cookies: the session's, and the one a sign-in in progress is bound
// to. Both hold a random token; the store keeps only its SHA-256.
const (
	sessionCookie = "svc_console"
	signInCookie  = "svc_console_sign_in"
)

// signInTTL bounds a sign-in in progress (the page left open); its
// challenge lives challengeTTL, within operator.MaxAge (the statement's
// freshness).
const (
	signInTTL    = 15 * time.Minute
	challengeTTL = 2 * time.Minute
)

// maxSignIns bounds the sign-ins in progress held at once: the sign-in
// page needs no session, so whoever reaches it could otherwise fill the
// memory. Past it the oldest is dropped.
const maxSignIns = 10_000

// session is a signed-in operator's session.
type session struct {
	ID       string // public id (cs_...), named in the sign-in's statement and audit row
	Operator string
	KeyID    string // the passkey that signed in
	Role     operator.Role
	CSRF     string
	Created  time.Time
	LastSeen time.Time
	Action   *signedAction // the money action waiting for its signature (signed.go)
	Result   string        // what the last signed action did, shown once
}

// signIn is a sign-in in progress: its CSRF token and, once asked for,
// the one challenge it may answer.
type signIn struct {
	CSRF      string
	Created   time.Time
	Challenge *challenge
	// Creation is the challenge of a passkey being made (/passkeys/new),
	// answered once too.
	Creation *creation
}

// creation is the challenge of a passkey being made.
type creation struct {
	Challenge []byte
	Expires   time.Time
}

// challenge is a statement the console made for one sign-in, to be
// signed once.
type challenge struct {
	Statement []byte
	Facts     map[string]string
	Session   string // the public id the session will have
	Expires   time.Time
}

// store holds the sessions and sign-ins in progress, by the SHA-256 of
// their cookie's token.
type store struct {
	mu         sync.Mutex
	sessions   map[[32]byte]*session
	signIns    map[[32]byte]*signIn
	maxSignIns int
}

func newStore() *store {
	return &store{sessions: map[[32]byte]*session{}, signIns: map[[32]byte]*signIn{}, maxSignIns: maxSignIns}
}

// newToken is 32 random bytes, unpadded base64url.
func newToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand does not fail on supported platforms
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// newSessionID is a session's public id: "cs_" and 16 base32 characters.
func newSessionID() string {
	var b [10]byte
	_, _ = rand.Read(b[:])
	return "cs_" + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))
}

func digest(token string) [32]byte { return sha256.Sum256([]byte(token)) }

// expired says why a session ends at now ("" while it holds).
func (se *session) expired(now time.Time, idle time.Duration) string {
	switch {
	case now.Sub(se.LastSeen) >= idle:
		return "idle"
	case now.Sub(se.Created) >= MaxLifetime:
		return "lifetime"
	}
	return ""
}

// session returns the live session of token and marks it seen at now; an
// expired one is removed, and why is returned.
func (st *store) session(token string, now time.Time, idle time.Duration) (*session, string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	k := digest(token)
	se, ok := st.sessions[k]
	if !ok {
		return nil, ""
	}
	if why := se.expired(now, idle); why != "" {
		delete(st.sessions, k)
		return nil, why
	}
	se.LastSeen = now
	c := *se
	return &c, ""
}

// setRole records the role the enrollment chain now gives a session's
// operator.
func (st *store) setRole(token string, role operator.Role) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if se, ok := st.sessions[digest(token)]; ok {
		se.Role = role
	}
}

// create stores a new session and returns its token. Expired sessions are
// swept first.
func (st *store) create(se *session, now time.Time, idle time.Duration) string {
	st.mu.Lock()
	defer st.mu.Unlock()
	for k, o := range st.sessions {
		if o.expired(now, idle) != "" {
			delete(st.sessions, k)
		}
	}
	token := newToken()
	se.CSRF, se.Created, se.LastSeen = newToken(), now, now
	st.sessions[digest(token)] = se
	return token
}

// end removes the session of token.
func (st *store) end(token string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	delete(st.sessions, digest(token))
}

// signIn returns the sign-in in progress of token, nil when there is none
// or it is too old.
func (st *store) signIn(token string, now time.Time) *signIn {
	st.mu.Lock()
	defer st.mu.Unlock()
	k := digest(token)
	si, ok := st.signIns[k]
	if !ok {
		return nil
	}
	if now.Sub(si.Created) >= signInTTL {
		delete(st.signIns, k)
		return nil
	}
	c := *si
	return &c
}

// startSignIn stores a new sign-in in progress and returns its token.
func (st *store) startSignIn(now time.Time) (string, *signIn) {
	st.mu.Lock()
	defer st.mu.Unlock()
	var oldest [32]byte
	var oldestAt time.Time
	for k, o := range st.signIns {
		if now.Sub(o.Created) >= signInTTL {
			delete(st.signIns, k)
		} else if oldestAt.IsZero() || o.Created.Before(oldestAt) {
			oldest, oldestAt = k, o.Created
		}
	}
	if len(st.signIns) >= st.maxSignIns {
		delete(st.signIns, oldest)
	}
	token := newToken()
	si := &signIn{CSRF: newToken(), Created: now}
	st.signIns[digest(token)] = si
	c := *si
	return token, &c
}

// update applies f to the sign-in of token, under the store's lock;
// false when the sign-in is gone.
func (st *store) update(token string, f func(*signIn)) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	si, ok := st.signIns[digest(token)]
	if ok {
		f(si)
	}
	return ok
}

// setChallenge gives the sign-in of token its challenge, replacing any
// earlier one; false when the sign-in is gone.
func (st *store) setChallenge(token string, c *challenge) bool {
	return st.update(token, func(si *signIn) { si.Challenge = c })
}

// takeChallenge removes and returns the sign-in's challenge: a challenge
// is answered once, whatever the answer.
func (st *store) takeChallenge(token string) (c *challenge) {
	st.update(token, func(si *signIn) { c, si.Challenge = si.Challenge, nil })
	return c
}

// setCreation gives the sign-in of token the challenge of a passkey being
// made, replacing any earlier one; false when the sign-in is gone.
func (st *store) setCreation(token string, c *creation) bool {
	return st.update(token, func(si *signIn) { si.Creation = c })
}

// takeCreation removes and returns the sign-in's passkey challenge.
func (st *store) takeCreation(token string) (c *creation) {
	st.update(token, func(si *signIn) { c, si.Creation = si.Creation, nil })
	return c
}

// endSignIn removes the sign-in of token.
func (st *store) endSignIn(token string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	delete(st.signIns, digest(token))
}

// cookie is a console cookie: HttpOnly, SameSite=Strict, on every path,
// Secure when the console says so; a session cookie of the browser (no
// Max-Age), since the server ends the session.
func (s *Server) cookie(name, value string) *http.Cookie {
	return &http.Cookie{Name: name, Value: value, Path: "/", HttpOnly: true, Secure: s.opts.Secure, SameSite: http.SameSiteStrictMode}
}

// clearCookie tells the browser to forget a cookie.
func (s *Server) clearCookie(w http.ResponseWriter, name string) {
	c := s.cookie(name, "")
	c.MaxAge = -1
	http.SetCookie(w, c)
}

func cookieValue(r *http.Request, name string) string {
	c, err := r.Cookie(name)
	if err != nil {
		return ""
	}
	return c.Value
}

// authed lets a request through with its live session (sessionFrom), whose
// operator and key the enrollment chain still holds active; otherwise a
// page goes to the sign-in page (saying why), a script's request is 401.
func (s *Server) authed(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token := cookieValue(r, sessionCookie)
		var se *session
		why := ""
		if token != "" {
			se, why = s.sessions.session(token, s.now(), s.opts.IdleTimeout)
		}
		if se != nil {
			role, err := s.active(r.Context(), se)
			if err != nil {
				s.opts.Log.Error("console: read the enrollment chain", "error", err)
				s.fail(w, r, http.StatusServiceUnavailable, "The console cannot read the operators now; try again.")
				return
			}
			if role == "" {
				s.sessions.end(token)
				se, why = nil, "revoked"
			} else if role != se.Role {
				s.sessions.setRole(token, role)
				se.Role = role
			}
		}
		if se == nil {
			if token != "" {
				s.clearCookie(w, sessionCookie)
			}
			to := "/sign-in"
			if why != "" {
				to += "?why=" + why
			}
			if r.Header.Get("HX-Request") == "true" {
				// htmx's request for a part of the page: the whole page
				// goes to the sign-in page.
				w.Header().Set("HX-Redirect", to)
				w.WriteHeader(http.StatusNoContent)
				return
			}
			if wantsJSON(r) || r.Method != http.MethodGet {
				s.fail(w, r, http.StatusUnauthorized, signedOutNotice(why))
				return
			}
			http.Redirect(w, r, to, http.StatusSeeOther)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, se)))
	})
}

// active is the role the enrollment chain gives the session's operator,
// "" when the operator or the passkey is revoked.
func (s *Server) active(ctx context.Context, se *session) (operator.Role, error) {
	r, err := s.opts.Operators.Roster(ctx, s.opts.DB)
	if err != nil {
		return "", err
	}
	k, op := r.Keys[se.KeyID], r.Operators[se.Operator]
	if k == nil || op == nil || k.Revoked || op.Revoked || k.Operator != op.Name {
		return "", nil
	}
	return op.Role, nil
}

// signedOutNotice says why the operator is signed out.
func signedOutNotice(why string) string {
	switch why {
	case "idle":
		return "Your session expired after a time without use. Sign in again."
	case "lifetime":
		return "Your session reached its longest lifetime. Sign in again."
	case "revoked":
		return "Your operator or passkey was revoked. Your session has ended."
	case "signed-out":
		return "You are signed out."
	}
	return "Sign in to continue."
}
