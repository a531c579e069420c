package console

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"svc/modules/operator"
)

// Making a passkey (/passkeys/new): a person about to be enrolled, or an
// operator adding a key, has the browser make a passkey for the console's
// RP ID, and the console shows its public key as the chain enrolls it
// ("webauthn:" and its COSE key, operator.PasskeyOf) with its key id, to
// give to the admins (svc admin operators enroll or add-key). Nothing is
// stored and nothing changes: the passkey is an operator's once the
// admins have signed its enrollment. The page needs no session (whoever
// makes their first passkey has none) and is bound, like the sign-in, to
// the browser's sign-in cookie and its CSRF token; its challenge is
// random, answered once, within challengeTTL.

// creationAnswer is /passkeys/challenge's answer.
type creationAnswer struct {
	Challenge string `json:"challenge"` // unpadded base64url
	RPID      string `json:"rp_id"`
	UserID    string `json:"user_id"` // unpadded base64url: random, the passkey's user handle
	TimeoutMS int64  `json:"timeout_ms"`
}

// madePasskey is /passkeys's answer.
type madePasskey struct {
	PublicKey string `json:"public_key"`
	KeyID     string `json:"key_id"`
}

func (s *Server) handlePasskeyPage(w http.ResponseWriter, r *http.Request) {
	token := cookieValue(r, signInCookie)
	si := s.sessions.signIn(token, s.now())
	if si == nil {
		token, si = s.sessions.startSignIn(s.now())
		http.SetCookie(w, s.cookie(signInCookie, token))
	}
	s.render(w, r, http.StatusOK, "passkey_new.html", page{Title: "Make a passkey", CSRF: si.CSRF})
}

func (s *Server) handleCreationChallenge(w http.ResponseWriter, r *http.Request) {
	token, si := s.signInOf(w, r)
	if si == nil {
		return
	}
	if name := strings.TrimSpace(r.PostFormValue("name")); !operator.ValidName(name) {
		s.fail(w, r, http.StatusUnprocessableEntity, fmt.Sprintf("%q is not an operator name: 1 to 64 of a-z, 0-9, _ . -, starting with a letter or digit.", name))
		return
	}
	c := &creation{Challenge: make([]byte, 32), Expires: s.now().Add(challengeTTL)}
	user := make([]byte, 16)
	_, _ = rand.Read(c.Challenge)
	_, _ = rand.Read(user)
	if !s.sessions.setCreation(token, c) {
		s.fail(w, r, http.StatusUnauthorized, "This page has expired. Reload it and try again.")
		return
	}
	b64 := base64.RawURLEncoding.EncodeToString
	writeJSON(w, http.StatusOK, creationAnswer{Challenge: b64(c.Challenge), RPID: s.opts.Operators.RP.ID, UserID: b64(user),
		TimeoutMS: challengeTTL.Milliseconds()})
}

// created is what console.js posts to /passkeys: the new passkey's
// answer, each field unpadded base64url.
type created struct {
	AttestationObject string `json:"attestation_object"`
	ClientDataJSON    string `json:"client_data_json"`
}

func (s *Server) handlePasskeyCreated(w http.ResponseWriter, r *http.Request) {
	token, si := s.signInOf(w, r)
	if si == nil {
		return
	}
	c := s.sessions.takeCreation(token)
	if c == nil || !s.now().Before(c.Expires) {
		s.fail(w, r, http.StatusUnauthorized, "This passkey has no challenge, or it was used or has expired. Try again.")
		return
	}
	var in created
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		s.fail(w, r, http.StatusBadRequest, "The passkey's answer did not arrive whole. Try again.")
		return
	}
	var att, cd []byte
	if !decodeAll(map[*[]byte]string{&att: in.AttestationObject, &cd: in.ClientDataJSON}) {
		s.fail(w, r, http.StatusBadRequest, "The passkey's answer is not in the form the console expects. Try again.")
		return
	}
	pub, err := operator.PasskeyOf(att, cd, c.Challenge, s.opts.Operators.RP)
	if err != nil {
		s.fail(w, r, http.StatusUnprocessableEntity, "This passkey cannot be enrolled: "+err.Error())
		return
	}
	writeJSON(w, http.StatusOK, madePasskey{PublicKey: pub.String(), KeyID: pub.ID()})
}
