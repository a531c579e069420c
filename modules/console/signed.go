package console

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"time"

	"svc/modules/operator"
	"svc/platform/fault"
	"svc/platform/httpapi"
)

// A money action (approve, reject or release a withdrawal; credit or
// dismiss a deposit in review) is signed by the operator's passkey, as the
// signed admin API takes it, in three steps:
//
//  1. GET of the action's page: the confirmation, read now from the
//     service (the exact amount in display units, the destination or the
//     holder), with the action's own field (a note, a reason, the
//     attestation).
//  2. console.js posts the form to the page's path + "/challenge": the
//     console reads the resource again and builds the statement the
//     service will require (withdrawal.DecisionExpect,
//     deposit.ResolveExpect) with the request's fields, a fresh nonce and
//     the key id of the passkey the session signed in with, keeps it with
//     the session (one at a time, for challengeTTL) and answers its
//     WebAuthn challenge.
//  3. The browser asks the passkey for its assertion over it and
//     console.js posts the assertion to the page's path: the console takes
//     the statement out of the session (one answer, whatever it is), puts
//     the assertion with it in an envelope and runs the service's decision
//     with that signature and nothing else (no actor of its own): the
//     service verifies it against the resource as its transaction locked
//     it and records it in the audit trail, as for POST /v1/admin/... with
//     the Svc-Operator-Signature header. Its refusal is shown in its own
//     words; its result on the result page.

// signedAction is a statement made for one session's action, waiting for
// its passkey's signature.
type signedAction struct {
	Path      string // the action's page: the signature is posted there only
	Statement []byte
	Expires   time.Time
	// Run runs the decision with the signed envelope and says what was
	// done, in a sentence.
	Run func(ctx context.Context, env *operator.Envelope) (string, error)
}

// setAction gives the session of token its action to sign, replacing any
// earlier one.
func (st *store) setAction(token string, a *signedAction) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if se, ok := st.sessions[digest(token)]; ok {
		se.Action = a
	}
}

// takeAction removes and returns the session's action to sign.
func (st *store) takeAction(token string) (a *signedAction) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if se, ok := st.sessions[digest(token)]; ok {
		a, se.Action = se.Action, nil
	}
	return a
}

// setResult keeps what the session's last action did, for the result
// page; takeResult reads it once.
func (st *store) setResult(token, msg string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if se, ok := st.sessions[digest(token)]; ok {
		se.Result = msg
	}
}

func (st *store) takeResult(token string) (msg string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if se, ok := st.sessions[digest(token)]; ok {
		msg, se.Result = se.Result, ""
	}
	return msg
}

// offer makes the statement of x for the session's passkey, keeps it with
// run for the action's page path, and answers its challenge (step 2).
func (s *Server) offer(w http.ResponseWriter, r *http.Request, path string, x operator.Expect,
	run func(ctx context.Context, env *operator.Envelope) (string, error)) {
	se := sessionFrom(r.Context())
	now := s.now()
	st := operator.NewStatement(x.Action, x.Resource, x.Facts, now)
	st.Nonce, st.KeyID = operator.NewNonce(), se.KeyID
	b, err := st.Encode()
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, "The statement to sign could not be made.")
		return
	}
	s.sessions.setAction(cookieValue(r, sessionCookie), &signedAction{Path: path, Statement: b, Expires: now.Add(challengeTTL), Run: run})
	writeJSON(w, http.StatusOK, challengeAnswer{Challenge: base64.RawURLEncoding.EncodeToString(operator.Challenge(b)),
		RPID: s.opts.Operators.RP.ID, TimeoutMS: challengeTTL.Milliseconds()})
}

// handleSigned takes the passkey's assertion of the session's action at
// the request's path and runs it (step 3).
func (s *Server) handleSigned(w http.ResponseWriter, r *http.Request) {
	token := cookieValue(r, sessionCookie)
	a := s.sessions.takeAction(token)
	if a == nil || a.Path != r.URL.Path || !s.now().Before(a.Expires) {
		s.fail(w, r, http.StatusConflict, "This action has no statement to sign, or it was used or has expired. Nothing was done: confirm it again.")
		return
	}
	env, bad := envelopeOf(r, a.Statement)
	if bad != "" {
		s.fail(w, r, http.StatusBadRequest, bad+" Nothing was done: confirm it again.")
		return
	}
	se := sessionFrom(r.Context())
	msg, err := a.Run(r.Context(), &env)
	if err != nil {
		status, text := refusal(err)
		if status >= 500 {
			s.opts.Log.Error("console: signed action", "path", r.URL.Path, "operator", se.Operator, "error", err)
		}
		s.opts.Log.Info("console: signed action refused", "path", r.URL.Path, "operator", se.Operator, "error", err)
		s.fail(w, r, status, text)
		return
	}
	s.opts.Log.Info("console: signed action", "path", r.URL.Path, "operator", se.Operator, "result", msg)
	s.sessions.setResult(token, msg)
	writeJSON(w, http.StatusOK, map[string]string{"location": "/result"})
}

// refusal is the status and the words of a service's error: its own
// message (with its field errors) when it refuses, a plain apology when it
// fails.
func refusal(err error) (int, string) {
	status := httpapi.Status(err)
	var fe *fault.Error
	if errors.As(err, &fe) && status < 500 {
		return status, "Refused, nothing was done: " + fe.Error()
	}
	if status < 500 {
		status = http.StatusInternalServerError
	}
	return status, "The service could not complete the action; nothing is known to have changed. Read the page again and retry."
}

// resultPage is the result page's data.
type resultPage struct {
	Message string
	Minted  *mintedKey // a key the action minted, its secret shown this once (apikeys.go)
}

// handleResult shows what the session's last signed action did, once.
func (s *Server) handleResult(w http.ResponseWriter, r *http.Request) {
	msg := s.sessions.takeResult(cookieValue(r, sessionCookie))
	if msg == "" {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	minted := s.minted.take(sessionFrom(r.Context()).ID, s.now())
	s.render(w, r, http.StatusOK, "result.html", page{Title: "Done", Data: resultPage{Message: msg, Minted: minted}})
}

// moneyRoutes registers the pages of the money work: withdrawals and the
// deposit review queue (withdrawals.go, review.go), and the result page.
func (s *Server) moneyRoutes(mux *http.ServeMux) {
	page := func(h http.HandlerFunc) http.Handler { return s.authed(h) }
	post := func(h http.HandlerFunc) http.Handler { return s.authed(s.checkCSRF(h)) }
	mux.Handle("GET /withdrawals", page(s.handleWithdrawals))
	mux.Handle("GET /withdrawals/{id}/{action}", page(s.handleWithdrawalConfirm))
	mux.Handle("POST /withdrawals/{id}/{action}/challenge", post(s.handleWithdrawalChallenge))
	mux.Handle("POST /withdrawals/{id}/{action}", post(s.handleSigned))
	mux.Handle("GET /review", page(s.handleReview))
	mux.Handle("GET /deposits/{id}/{action}", page(s.handleResolveConfirm))
	mux.Handle("POST /deposits/{id}/{action}/challenge", post(s.handleResolveChallenge))
	mux.Handle("POST /deposits/{id}/{action}", post(s.handleSigned))
	mux.Handle("GET /result", page(s.handleResult))
}
