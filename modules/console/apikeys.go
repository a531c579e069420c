package console

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"svc/modules/apikey"
	"svc/modules/operator"
	"svc/platform/timefmt"
)

// The API keys page lists the keys as svc admin keys list does
// (apikey.Store.List: never a secret, none is stored), mints one and
// revokes one, each signed by the operator's passkey as svc admin keys
// mint|revoke --key signs it (apikey.MintExpect, apikey.RevokeExpect;
// the admin role). A minted key's secret is shown once, on the result
// page the mint leads to: the console keeps it in memory for that one
// reading, within challengeTTL.

// mintedKey is a minted key and its only copy of the secret.
type mintedKey struct {
	Key    keyRow
	Secret string
	at     time.Time
}

type keyRow struct {
	ID, Scope, Label, Mode, Created, Expires, LastUsed, Revoked string
	Networks                                                    string
	Active                                                      bool
}

func toKeyRow(k apikey.Key, now time.Time) keyRow {
	r := keyRow{ID: k.ID, Scope: string(k.Scope), Label: k.Label, Mode: k.Mode, Created: timefmt.Format(k.CreatedAt),
		Expires: "never", LastUsed: "never", Networks: "anywhere", Active: k.RevokedAt == nil}
	if k.ExpiresAt != nil {
		r.Expires = timefmt.Format(*k.ExpiresAt)
		r.Active = r.Active && now.Before(*k.ExpiresAt)
	}
	if k.LastUsedAt != nil {
		r.LastUsed = timefmt.Format(*k.LastUsedAt)
	}
	if k.RevokedAt != nil {
		r.Revoked = timefmt.Format(*k.RevokedAt)
	}
	if len(k.AllowedCIDRs) > 0 {
		r.Networks = strings.Join(k.AllowedCIDRs, ", ")
	}
	return r
}

type keysPage struct {
	Keys   []keyRow
	Mode   string
	Scopes []apikey.Scope
}

func (s *Server) handleAPIKeys(w http.ResponseWriter, r *http.Request) {
	keys, err := s.opts.Keys.List(r.Context())
	if err != nil {
		s.unreadable(w, r, "API keys", err)
		return
	}
	p := keysPage{Mode: s.opts.Keys.Mode, Scopes: []apikey.Scope{apikey.ScopeReadOnly, apikey.ScopeReadWrite, apikey.ScopeAdmin}}
	for _, k := range keys {
		p.Keys = append(p.Keys, toKeyRow(k, s.now()))
	}
	s.render(w, r, http.StatusOK, "apikeys.html", page{Title: "API keys", Data: p})
}

// mint is a mint of the key the request describes (label, scope,
// expires_in, allowed_cidrs; pages.go's action); its result page shows the
// secret, once.
func (s *Server) mint(w http.ResponseWriter, r *http.Request, get func(string) string) *signedPage {
	label := strings.TrimSpace(get("label"))
	scope, err := apikey.ParseScope(get("scope"))
	if err != nil {
		s.fail(w, r, http.StatusUnprocessableEntity, err.Error())
		return nil
	}
	var expiresIn time.Duration
	if v := strings.TrimSpace(get("expires_in")); v != "" {
		if expiresIn, err = time.ParseDuration(v); err != nil || expiresIn <= 0 {
			s.fail(w, r, http.StatusUnprocessableEntity, fmt.Sprintf("The expiry %q is not a positive duration (720h, say).", v))
			return nil
		}
	}
	nets, err := apikey.ParseNetworks(strings.FieldsFunc(get("allowed_cidrs"), func(c rune) bool { return c == ',' || c == ' ' || c == '\n' || c == '\r' }))
	if err != nil {
		s.fail(w, r, http.StatusUnprocessableEntity, err.Error())
		return nil
	}
	if err := apikey.CheckLabel(label); err != nil {
		s.fail(w, r, http.StatusUnprocessableEntity, err.Error())
		return nil
	}
	return &signedPage{Heading: fmt.Sprintf("Mint a %s key %q", scope, label), Button: "Mint with passkey", Back: "/api-keys",
		Hidden: []hidden{{"label", label}, {"scope", string(scope)}, {"expires_in", get("expires_in")}, {"allowed_cidrs", get("allowed_cidrs")}},
		Expect: apikey.MintExpect(label, scope, s.opts.Keys.Mode, expiresIn, nets...),
		Run: func(ctx context.Context, env *operator.Envelope) (string, error) {
			k, plain, err := s.opts.Keys.Mint(ctx, apikey.MintParams{Scope: scope, Label: label, ExpiresIn: expiresIn, AllowedCIDRs: nets, Signature: env})
			if err != nil {
				return "", err
			}
			s.minted.put(sessionFrom(ctx).ID, mintedKey{Key: toKeyRow(k, s.now()), Secret: plain}, s.now())
			return fmt.Sprintf("Key %s is minted.", k.ID), nil
		}}
}

// revocation is the revocation of the key the path names (pages.go's
// action).
func (s *Server) revocation(w http.ResponseWriter, r *http.Request, _ func(string) string) *signedPage {
	id := r.PathValue("id")
	return &signedPage{Heading: "Revoke key " + id, Button: "Revoke with passkey", Back: "/api-keys", Expect: apikey.RevokeExpect(id),
		Run: func(ctx context.Context, env *operator.Envelope) (string, error) {
			k, err := s.opts.Keys.RevokeSigned(ctx, id, zeroActor, env)
			return fmt.Sprintf("Key %s is revoked: it no longer authenticates.", k.ID), err
		}}
}

// mintedStore keeps the key a session minted, with its secret, for its
// result page: read once, within challengeTTL of the mint; an unread one
// is dropped then, by a timer, and any put or take sweeps the lapsed ones
// (a secret stays in memory no longer).
type mintedStore struct {
	mu   sync.Mutex
	keys map[string]mintedKey // by session id
}

func (m *mintedStore) put(session string, k mintedKey, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sweep(now)
	k.at = now
	m.keys[session] = k
	// Unread and with no put or take after it, it is dropped by the timer.
	time.AfterFunc(challengeTTL, func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if held, ok := m.keys[session]; ok && held.at.Equal(k.at) && held.Secret == k.Secret {
			delete(m.keys, session)
		}
	})
}

// sweep drops the keys minted more than challengeTTL before now, read or
// not; m.mu is held.
func (m *mintedStore) sweep(now time.Time) {
	for id, k := range m.keys {
		if now.Sub(k.at) > challengeTTL {
			delete(m.keys, id)
		}
	}
}

// held is how many minted keys m holds.
func (m *mintedStore) held() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.keys)
}

// take returns and forgets the key session minted, nil when there is none.
func (m *mintedStore) take(session string, now time.Time) *mintedKey {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sweep(now)
	k, ok := m.keys[session]
	delete(m.keys, session)
	if !ok {
		return nil
	}
	return &k
}
