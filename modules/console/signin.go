package console

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/uptrace/bun"

	"svc/modules/audit"
	"svc/modules/operator"
	"svc/platform/db"
	"svc/platform/fault"
	"svc/platform/httpapi"
)

// Signing in, the WebAuthn way, with the operator's enrolled passkey:
//
//  1. GET /sign-in gives the browser a sign-in cookie (a random token) and
//     the page, whose form carries the sign-in's CSRF token.
//  2. The operator types their name; console.js posts it to
//     /sign-in/challenge, which makes the statement of this sign-in
//     (action console.sign_in, resource console, facts: the operator and
//     the public id the session will have; a fresh random nonce; the key
//     id of the operator's passkey) and keeps it with the sign-in. An
//     operator with several passkeys first picks one. Its answer is the
//     statement's challenge (operator.Challenge) and the RP ID.
//  3. The browser asks the passkey for an assertion over that challenge
//     (navigator.credentials.get, user verification required) and
//     console.js posts it to /sign-in. The console takes the sign-in's
//     challenge out of its store (it answers once, whatever the answer),
//     puts its own statement bytes with the assertion in an envelope, has
//     the operator service verify it as any signed action (Service.Verify)
//     and records it in the audit trail, in one transaction: the nonce is
//     unique there. Then a new session is made, with its own token, and the
//     sign-in's cookie is cleared.
//
// The passkey is found as a discoverable credential of the RP ID (the
// console knows no credential id: the chain enrolls the public key only);
// passkeys are discoverable.

// signInPage is the sign-in page's data.
type signInPage struct{}

func (s *Server) handleSignInPage(w http.ResponseWriter, r *http.Request) {
	if t := cookieValue(r, sessionCookie); t != "" {
		if se, _ := s.sessions.session(t, s.now(), s.opts.IdleTimeout); se != nil {
			http.Redirect(w, r, "/", http.StatusSeeOther)
			return
		}
	}
	token := cookieValue(r, signInCookie)
	si := s.sessions.signIn(token, s.now())
	if si == nil {
		token, si = s.sessions.startSignIn(s.now())
		http.SetCookie(w, s.cookie(signInCookie, token))
	}
	notice := ""
	if why := r.URL.Query().Get("why"); why != "" {
		notice = signedOutNotice(why)
	}
	s.render(w, r, http.StatusOK, "signin.html", page{Title: "Sign in", CSRF: si.CSRF, Notice: notice, Data: signInPage{}})
}

// signInOf returns the request's sign-in in progress and its token, after
// checking the request's CSRF token against it; otherwise it answers and
// returns nil.
func (s *Server) signInOf(w http.ResponseWriter, r *http.Request) (string, *signIn) {
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	token := cookieValue(r, signInCookie)
	si := s.sessions.signIn(token, s.now())
	if si == nil {
		s.fail(w, r, http.StatusUnauthorized, "This sign-in page has expired. Reload it and sign in again.")
		return "", nil
	}
	if !csrfOK(r, si.CSRF) {
		s.fail(w, r, http.StatusForbidden, csrfRefused)
		return "", nil
	}
	return token, si
}

// challengeAnswer is /sign-in/challenge's answer: the challenge to sign,
// or the passkeys to choose from.
type challengeAnswer struct {
	Challenge string   `json:"challenge,omitempty"` // unpadded base64url
	RPID      string   `json:"rp_id,omitempty"`
	TimeoutMS int64    `json:"timeout_ms,omitempty"`
	Choose    []string `json:"choose,omitempty"` // key ids
}

func (s *Server) handleChallenge(w http.ResponseWriter, r *http.Request) {
	token, si := s.signInOf(w, r)
	if si == nil {
		return
	}
	name := strings.TrimSpace(r.PostFormValue("name"))
	keyID := strings.TrimSpace(r.PostFormValue("key_id"))
	roster, err := s.opts.Operators.Roster(r.Context(), s.opts.DB)
	if err != nil {
		s.opts.Log.Error("console: read the enrollment chain", "error", err)
		s.fail(w, r, http.StatusServiceUnavailable, "The console cannot read the operators now; try again.")
		return
	}
	keys := passkeys(roster, name)
	if len(keys) == 0 {
		s.fail(w, r, http.StatusForbidden, fmt.Sprintf("No active operator named %q has an active passkey. An admin adds one with svc admin operators add-key.", name))
		return
	}
	if keyID == "" && len(keys) > 1 {
		writeJSON(w, http.StatusOK, challengeAnswer{Choose: keys})
		return
	}
	if keyID == "" {
		keyID = keys[0]
	}
	if !slices.Contains(keys, keyID) {
		s.fail(w, r, http.StatusForbidden, fmt.Sprintf("%s is not an active passkey of %s.", keyID, name))
		return
	}
	now := s.now()
	c := &challenge{Session: newSessionID(), Expires: now.Add(challengeTTL)}
	c.Facts = map[string]string{"operator": name, "session": c.Session}
	st := operator.NewStatement(ActionSignIn, signInResource, c.Facts, now)
	st.Nonce, st.KeyID = operator.NewNonce(), keyID
	if c.Statement, err = st.Encode(); err != nil {
		s.fail(w, r, http.StatusInternalServerError, "The sign-in statement could not be made.")
		return
	}
	if !s.sessions.setChallenge(token, c) {
		s.fail(w, r, http.StatusUnauthorized, "This sign-in page has expired. Reload it and sign in again.")
		return
	}
	writeJSON(w, http.StatusOK, challengeAnswer{Challenge: base64.RawURLEncoding.EncodeToString(operator.Challenge(c.Statement)),
		RPID: s.opts.Operators.RP.ID, TimeoutMS: challengeTTL.Milliseconds()})
}

// passkeys are the ids of the active passkeys of the active operator name.
func passkeys(r *operator.Roster, name string) []string {
	op := r.Operators[name]
	if op == nil || op.Revoked {
		return nil
	}
	var out []string
	for _, id := range op.Keys {
		if k := r.Keys[id]; k != nil && !k.Revoked && k.Public.Kind == operator.KindWebAuthn {
			out = append(out, id)
		}
	}
	return out
}

// assertion is what console.js posts to /sign-in: the passkey's answer,
// each field unpadded base64url.
type assertion struct {
	AuthenticatorData string `json:"authenticator_data"`
	ClientDataJSON    string `json:"client_data_json"`
	Signature         string `json:"signature"`
}

func (s *Server) handleSignIn(w http.ResponseWriter, r *http.Request) {
	token, si := s.signInOf(w, r)
	if si == nil {
		return
	}
	c := s.sessions.takeChallenge(token)
	now := s.now()
	if c == nil || !now.Before(c.Expires) {
		s.fail(w, r, http.StatusUnauthorized, "This sign-in has no challenge, or it was used or has expired. Sign in again.")
		return
	}
	env, bad := envelopeOf(r, c.Statement)
	if bad != "" {
		s.fail(w, r, http.StatusBadRequest, bad+" Sign in again.")
		return
	}
	x := operator.Expect{Action: ActionSignIn, Resource: signInResource, Facts: c.Facts, Role: operator.Viewer}
	var signed operator.Signed
	err := db.RunInTx(r.Context(), s.opts.DB, func(ctx context.Context, tx bun.Tx) error {
		return s.verifySignIn(ctx, tx, env, x, c, &signed)
	})
	if err != nil {
		status := httpapi.Status(err)
		var fe *fault.Error
		msg := "The sign-in could not be completed; try again."
		if errors.As(err, &fe) && status < 500 {
			msg = "Sign-in refused: " + fe.Message
		} else {
			s.opts.Log.Error("console: sign-in", "error", err)
		}
		s.opts.Log.Info("console: sign-in refused", "operator", c.Facts["operator"], "session", c.Session, "error", err)
		s.fail(w, r, status, msg)
		return
	}
	s.sessions.endSignIn(token)
	s.clearCookie(w, signInCookie)
	st := s.sessions.create(&session{ID: c.Session, Operator: signed.Operator, KeyID: signed.KeyID, Role: signed.Role}, now, s.opts.IdleTimeout)
	http.SetCookie(w, s.cookie(sessionCookie, st))
	s.opts.Log.Info("console: signed in", "operator", signed.Operator, "key_id", signed.KeyID, "session", c.Session)
	writeJSON(w, http.StatusOK, map[string]string{"location": "/"})
}

// verifySignIn verifies a sign-in's envelope as the operator module
// verifies any signed action and records it in the audit trail, with tx.
func (s *Server) verifySignIn(ctx context.Context, tx bun.Tx, env operator.Envelope, x operator.Expect, c *challenge, out *operator.Signed) error {
	sig, err := s.opts.Operators.Verify(ctx, tx, env, x)
	if err != nil {
		return err
	}
	if _, err := audit.Record(ctx, tx, s.now(), operator.ActorOf(sig), ActionSignIn, signInResource, map[string]string{"session": c.Session}); err != nil {
		return err
	}
	*out = sig
	return nil
}

// envelopeOf is the envelope of statement with the passkey's answer the
// request's body carries (an assertion), or what is wrong with the answer.
func envelopeOf(r *http.Request, statement []byte) (operator.Envelope, string) {
	var a assertion
	if err := json.NewDecoder(r.Body).Decode(&a); err != nil {
		return operator.Envelope{}, "The passkey's answer did not arrive whole."
	}
	env := operator.Envelope{Statement: statement}
	if !decodeAll(map[*[]byte]string{&env.AuthenticatorData: a.AuthenticatorData, &env.ClientDataJSON: a.ClientDataJSON, &env.Signature: a.Signature}) {
		return operator.Envelope{}, "The passkey's answer is not in the form the console expects."
	}
	return env, ""
}

// decodeAll decodes each non-empty unpadded base64url string into its
// destination; false when one is empty or not base64url.
func decodeAll(fields map[*[]byte]string) bool {
	for dst, src := range fields {
		b, err := base64.RawURLEncoding.DecodeString(src)
		if err != nil || len(b) == 0 {
			return false
		}
		*dst = b
	}
	return true
}

func (s *Server) handleSignOut(w http.ResponseWriter, r *http.Request) {
	se := sessionFrom(r.Context())
	s.sessions.end(cookieValue(r, sessionCookie))
	s.clearCookie(w, sessionCookie)
	s.opts.Log.Info("console: signed out", "operator", se.Operator, "session", se.ID)
	http.Redirect(w, r, "/sign-in?why=signed-out", http.StatusSeeOther)
}
