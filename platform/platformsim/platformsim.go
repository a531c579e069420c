// Package platformsim stands in for the platform backend's webhook
// receiver in local runs: it verifies each delivery's X-Service-Signature,
// keeps the events it accepted (deduplicated on id, as a real receiver
// must), and lists them, so a developer can watch deposit.settled arrive.
package platformsim

import (
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"time"

	"svc/platform/webhooksig"
)

// Received is one accepted event.
type Received struct {
	ID         string          `json:"id"`
	Type       string          `json:"type"`
	CreatedAt  string          `json:"created_at"`
	Data       json.RawMessage `json:"data"`
	ReceivedAt time.Time       `json:"received_at"`
	Duplicates int             `json:"duplicates"` // redeliveries of the same id
}

// Receiver is an http.Handler with two routes: POST /webhooks (the
// delivery target) and GET /events (what arrived, oldest first).
type Receiver struct {
	secret []byte
	mu     sync.Mutex
	events []*Received
	byID   map[string]*Received
}

// New returns a receiver that accepts deliveries signed with secret.
func New(secret string) *Receiver {
	return &Receiver{secret: []byte(secret), byID: map[string]*Received{}}
}

// Events returns a copy of the accepted events, oldest first.
func (r *Receiver) Events() []Received {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Received, len(r.events))
	for i, e := range r.events {
		out[i] = *e
	}
	return out
}

func (r *Receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	switch {
	case req.Method == http.MethodPost && req.URL.Path == "/webhooks":
		r.receive(w, req)
	case req.Method == http.MethodGet && req.URL.Path == "/events":
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"events": r.Events()})
	default:
		http.NotFound(w, req)
	}
}

func (r *Receiver) receive(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	if err != nil {
		http.Error(w, "read body", http.StatusBadRequest)
		return
	}
	// The raw bytes, exactly as sent, are what the signature covers.
	if err := webhooksig.Verify(r.secret, req.Header.Get("X-Service-Signature"), body, time.Now()); err != nil {
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	var ev Received
	if err := json.Unmarshal(body, &ev); err != nil || ev.ID == "" {
		http.Error(w, "not an event", http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if prev, ok := r.byID[ev.ID]; ok { // a retry of something already handled
		prev.Duplicates++
		w.WriteHeader(http.StatusOK)
		return
	}
	ev.ReceivedAt = time.Now().UTC()
	r.events = append(r.events, &ev)
	r.byID[ev.ID] = &ev
	// Unknown types are acknowledged too: a receiver must not make the
	// sender retry what it will never understand.
	w.WriteHeader(http.StatusOK)
}
