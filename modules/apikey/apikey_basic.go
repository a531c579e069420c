package apikey

import (
	"context"
	"net/http"
	"strconv"

	"svc/platform/fault"
)

type keyCtx struct{}

// KeyFromContext returns the key BasicAuth authenticated the request with.
func KeyFromContext(ctx context.Context) (Key, bool) {
	k, ok := ctx.Value(keyCtx{}).(Key)
	return k, ok
}

// BasicAuth guards a web page that is not part of the API (the River UI):
// a request reaches next only with HTTP basic credentials whose password is
// an active key of a scope that allows need; the user name is not checked
// (a browser asks for one). Without credentials, or with a key that does
// not authenticate, it answers 401 with a Basic challenge for realm, so a
// browser prompts for them; a valid key without the scope, or used from
// outside its allowed networks, gets 403. The key
// goes on to next in the request's context (KeyFromContext). The check is
// Authenticate's, as for the bearer keys of the API.
func (s *Store) BasicAuth(need Scope, realm string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		_, presented, ok := r.BasicAuth()
		if !ok || presented == "" {
			challenge(w, realm, "sign in")
			return
		}
		k, err := s.Authenticate(r.Context(), presented)
		switch {
		case fault.KindOf(err) == fault.Unauthenticated:
			challenge(w, realm, err.Error())
			return
		case err != nil:
			http.Error(w, "the key could not be checked; try again", http.StatusServiceUnavailable)
			return
		}
		if ip := s.Proxies.ClientIPOf(r.RemoteAddr, r.Header.Values); !k.AllowsFrom(ip) {
			http.Error(w, k.notFrom(ip).Error(), http.StatusForbidden)
			return
		}
		if !k.Scope.Allows(need, r.Method) {
			http.Error(w, k.Scope.refusal(need, r.Method).Error(), http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), keyCtx{}, k)))
	})
}

// challenge answers 401 with a Basic challenge (RFC 7617).
func challenge(w http.ResponseWriter, realm, why string) {
	w.Header().Set("WWW-Authenticate", "Basic realm="+strconv.Quote(realm)+`, charset="UTF-8"`)
	http.Error(w, why+": any user name, and an API key as the password", http.StatusUnauthorized)
}
