package console

import (
	"crypto/subtle"
	"encoding/json"
	"net/http"
	"strings"
)

// ContentSecurityPolicy is the console's policy: everything from its own
// origin only, nothing inline, no eval, no plugins, no framing, forms
// posted to itself only.
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// headers sets the security headers of every answer: the policy, no
// sniffing of types, no referrer, no framing, a browsing context of its
// own, no caching (pages show balances and names), and with HTTPS,
// Strict-Transport-Security.
func (s *Server) headers(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", ContentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Cross-Origin-Resource-Policy", "same-origin")
		h.Set("Permissions-Policy", "camera=(), microphone=(), geolocation=(), payment=()")
		h.Set("Cache-Control", "no-store")
		if s.opts.HSTS {
			h.Set("Strict-Transport-Security", "max-age=31536000")
		}
		next.ServeHTTP(w, r)
	})
}

// csrfField is the hidden field of every form that changes something;
// csrfHeader is the header a script (console.js, htmx) sends it in.
const (
	csrfField  = "csrf"
	csrfHeader = "X-CSRF-Token"
)

// maxForm bounds a form's or a script's body.
const maxForm = 64 << 10

// csrfOK reports whether the request carries want as its CSRF token, in
// the header or the form.
func csrfOK(r *http.Request, want string) bool {
	got := r.Header.Get(csrfHeader)
	if got == "" && strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-www-form-urlencoded") {
		got = r.PostFormValue(csrfField)
	}
	return want != "" && got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// checkCSRF refuses a request of a signed-in session without the
// session's CSRF token (403).
func (s *Server) checkCSRF(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, maxForm)
		if !csrfOK(r, sessionFrom(r.Context()).CSRF) {
			s.fail(w, r, http.StatusForbidden, csrfRefused)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// csrfRefused is the answer to a request without its form's token.
const csrfRefused = "The form's security token is missing or wrong, so nothing was done. Reload the page and try again."

// wantsJSON reports a request of console.js, which asks for JSON.
func wantsJSON(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "application/json")
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
