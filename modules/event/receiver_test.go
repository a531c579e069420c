package event_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// receiver is the platform's side of the webhook: a real HTTP server on a
// loopback listener that checks every delivery's signature with its own
// HMAC code (not the service's), and answers as its mode says.
type receiver struct {
	t      testing.TB
	secret string
	now    func() time.Time
	srv    *httptest.Server

	mu           sync.Mutex
	mode         string // ok, 500, 400, timeout, redirect, big
	requests     []delivery
	badSignature []string
	redirectHits int
}

type delivery struct {
	Body        []byte
	ContentType string
	Signature   string
	At          time.Time // the receiver's clock
}

func newReceiver(t testing.TB, secret string, now func() time.Time) *receiver {
	t.Helper()
	r := &receiver{t: t, secret: secret, now: now, mode: "ok"}
	mux := http.NewServeMux()
	mux.HandleFunc("/hook", r.handle)
	mux.HandleFunc("/elsewhere", func(w http.ResponseWriter, _ *http.Request) {
		r.mu.Lock()
		r.redirectHits++
		r.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	})
	r.srv = httptest.NewServer(mux)
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) URL() string { return r.srv.URL + "/hook" }

func (r *receiver) setMode(m string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mode = m
}

func (r *receiver) handle(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	sig := req.Header.Get("X-Service-Signature")
	now := r.now()
	r.mu.Lock()
	if problem := checkSignature(r.secret, sig, body, now); problem != "" {
		r.badSignature = append(r.badSignature, problem)
	}
	r.requests = append(r.requests, delivery{Body: body, ContentType: req.Header.Get("Content-Type"), Signature: sig, At: now})
	mode := r.mode
	r.mu.Unlock()

	switch mode {
	case "ok":
		w.WriteHeader(http.StatusOK)
	case "204":
		w.WriteHeader(http.StatusNoContent)
	case "500":
		http.Error(w, "receiver broke", http.StatusInternalServerError)
	case "400":
		http.Error(w, "receiver refuses", http.StatusBadRequest)
	case "big":
		w.WriteHeader(http.StatusBadGateway)
		_, _ = w.Write([]byte("first\x00line\n\tsecond\xff "))
		_, _ = w.Write([]byte(strings.Repeat("x", 1<<20)))
	case "redirect":
		http.Redirect(w, req, "/elsewhere", http.StatusFound)
	case "timeout":
		select {
		case <-req.Context().Done():
		case <-time.After(10 * time.Second):
		}
	}
}

// checkSignature verifies X-Service-Signature as the SPEC words it, written
// independently of platform/webhooksig: v1 is the hex HMAC-SHA256, keyed
// with the secret, of t, ".", and the raw body; t within 300 s.
func checkSignature(secret, header string, body []byte, now time.Time) string {
	var ts, v1 string
	for _, part := range strings.Split(header, ",") {
		switch {
		case strings.HasPrefix(part, "t="):
			ts = part[2:]
		case strings.HasPrefix(part, "v1="):
			v1 = part[3:]
		}
	}
	unix, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || v1 == "" {
		return fmt.Sprintf("malformed header %q", header)
	}
	if d := now.Unix() - unix; d > 300 || d < -300 {
		return fmt.Sprintf("timestamp %d is %ds from the receiver's clock", unix, d)
	}
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts + "." + string(body)))
	if !hmac.Equal([]byte(hex.EncodeToString(m.Sum(nil))), []byte(v1)) {
		return fmt.Sprintf("signature %s does not match", v1)
	}
	return ""
}

func (r *receiver) snapshot() (reqs []delivery, bad []string, redirects int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]delivery(nil), r.requests...), append([]string(nil), r.badSignature...), r.redirectHits
}

func (r *receiver) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.requests)
}

// refusedURL returns a URL on which nothing listens.
func refusedURL(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return "http://" + addr + "/hook"
}
