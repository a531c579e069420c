package console

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"slices"
	"strings"

	"svc/modules/audit"
	"svc/modules/operator"
)

// The operators' pages beyond the overview: events, the audit trail,
// liabilities, API keys and assets. Each reads and acts through the
// module's service, the one the /v1/admin handlers and svc admin call;
// each change is a signed action, made as the money pages make theirs
// (signed.go): a confirmation page (GET), the statement's challenge
// (POST .../challenge), the passkey's answer (POST), the result page.

// zeroActor is the unsigned actor the console never acts as: every change
// it makes carries the operator's signature, whose signer is the actor.
var zeroActor = audit.Actor{}

// checkPages checks the options the pages need.
func (o Options) checkPages() error {
	if o.Events == nil || o.Endpoints == nil || o.Keys == nil || o.Assets == nil || o.Liabilities == nil {
		return errors.New("console: Events, Endpoints, Keys, Assets and Liabilities are required")
	}
	return nil
}

// pageRoutes adds the pages' routes:
//
//	GET  /events                       dead events and dead webhook deliveries
//	GET  /events/{id}/redeliver        a redelivery (?endpoint_id=: one endpoint's), signed (action)
//	GET  /audit                        the audit trail, each row's signature checked
//	GET  /liabilities                  the published proof-of-liabilities roots
//	GET  /api-keys                     the API keys, and the form that mints one
//	GET  /api-keys/mint                a mint, signed (action)
//	GET  /api-keys/{id}/revoke         a revocation, signed (action)
//	GET  /limits                       the assets and their limits
//	GET  /limits/{code}                the form that changes an asset's limits
//	GET  /limits/{code}/change         the change, signed (action)
func (s *Server) pageRoutes(mux *http.ServeMux) {
	get := func(pattern string, h http.HandlerFunc) { mux.Handle("GET "+pattern, s.authed(h)) }
	get("/events", s.handleEvents)
	s.action(mux, "/events/{id}/redeliver", s.redelivery)
	get("/audit", s.handleAudit)
	get("/liabilities", s.handleLiabilities)
	get("/api-keys", s.handleAPIKeys)
	s.action(mux, "/api-keys/mint", s.mint)
	s.action(mux, "/api-keys/{id}/revoke", s.revocation)
	get("/limits", s.handleAssets)
	get("/limits/{code}", s.handleAssetForm)
	s.action(mux, "/limits/{code}/change", s.limitsChange)
}

// signedPage is one of these pages' signed actions, as the request asks
// for it: what the confirmation shows, what is signed, what runs.
type signedPage struct {
	Heading, Button, Back string
	// Hidden are the request's parameters, carried by the confirmation's
	// form to the challenge.
	Hidden []hidden
	Expect operator.Expect
	Run    func(ctx context.Context, env *operator.Envelope) (string, error)
}

// action registers a signed action at path: GET, the confirmation of
// what read makes of the request's query; POST path/challenge, the
// statement of what read makes of the form (signed.go's offer); POST
// path, the passkey's answer (handleSigned). read answers and returns
// nil when the request cannot be done.
func (s *Server) action(mux *http.ServeMux, path string, read func(w http.ResponseWriter, r *http.Request, get func(string) string) *signedPage) {
	mux.Handle("GET "+path, s.authed(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := read(w, r, r.URL.Query().Get)
		if a == nil {
			return
		}
		se := sessionFrom(r.Context())
		if !se.Role.AtLeast(a.Expect.Role) {
			s.fail(w, r, http.StatusForbidden, "This needs the "+string(a.Expect.Role)+" role; you are "+string(se.Role)+".")
			return
		}
		c := confirmPage{Heading: a.Heading, Path: r.URL.Path, Button: a.Button, Back: a.Back, Hidden: a.Hidden, Facts: []fact{
			{"confirm-action", "Action", a.Expect.Action}, {"confirm-resource", "Resource", a.Expect.Resource}}}
		for _, k := range slices.Sorted(maps.Keys(a.Expect.Facts)) {
			c.Facts = append(c.Facts, fact{"confirm-" + k, k, a.Expect.Facts[k]})
		}
		s.render(w, r, http.StatusOK, "confirm.html", page{Title: a.Heading, Data: c})
	})))
	mux.Handle("POST "+path+"/challenge", s.authed(s.checkCSRF(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a := read(w, r, r.PostFormValue); a != nil {
			s.offer(w, r, strings.TrimSuffix(r.URL.Path, "/challenge"), a.Expect, a.Run)
		}
	}))))
	mux.Handle("POST "+path, s.authed(s.checkCSRF(http.HandlerFunc(s.handleSigned))))
}

// refused answers a service's refusal (refusal: its words, or an apology).
func (s *Server) refused(w http.ResponseWriter, r *http.Request, err error) {
	status, text := refusal(err)
	if status >= 500 {
		s.opts.Log.Error("console: page", "path", r.URL.Path, "error", err)
	}
	s.fail(w, r, status, text)
}
