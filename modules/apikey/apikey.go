// Package apikey owns the platform's and operators' API keys: minting
// (the key is shown once and stored only as a SHA-256 hash), listing,
// revoking, and the bearer middleware that authenticates every /v1 call and
// enforces its scope (read_only, readwrite, admin) and its allowed networks.
//
// A key looks like <prefix>_live_<secret> or <prefix>_test_<secret>, where
// the secret is 43 base64url characters (32 random bytes). Because the
// secret has full entropy, a fast hash is as strong as a slow one and keeps
// authentication cheap; lookup is by hash, and the stored and computed hashes
// are compared in constant time.
//
// Minting and revoking are operator actions, signed by an enrolled admin
// (modules/operator; svc admin keys --key): each is recorded in the audit
// trail (modules/audit) in its own transaction, with the parameters and
// never the secret or its hash.
package apikey

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/uptrace/bun"

	"svc/modules/audit"
	"svc/modules/operator"
	"svc/platform/db"
	"svc/platform/fault"
	"svc/platform/httpapi"
	"svc/platform/timefmt"
)

// Scope is what a key may do.
type Scope string

// The scopes, each satisfying the ones before it: read_only calls the
// platform routes' GETs; readwrite every platform route; admin those and
// /v1/admin.
const (
	ScopeReadOnly  Scope = "read_only"
	ScopeReadWrite Scope = "readwrite"
	ScopeAdmin     Scope = "admin"
)

// rank orders the scopes: each satisfies what the lower ones may do.
var rank = map[Scope]int{ScopeReadOnly: 1, ScopeReadWrite: 2, ScopeAdmin: 3}

// Allows reports whether a key of scope s may call, with method, a route
// that needs need: a scope satisfies itself and the ones below it (admin ⊇
// readwrite ⊇ read_only), and read_only may also read (GET, and HEAD,
// which is GET without the body) what needs readwrite: the platform
// routes.
func (s Scope) Allows(need Scope, method string) bool {
	if rank[s] == 0 || rank[need] == 0 {
		return false
	}
	return rank[s] >= rank[need] || (s == ScopeReadOnly && need == ScopeReadWrite && reads(method))
}

func reads(method string) bool { return method == "GET" || method == "HEAD" }

// refusal is the 403 of a key of scope s on a route that needs need with
// method (Allows false): it names the rule.
func (s Scope) refusal(need Scope, method string) error {
	switch {
	case s == ScopeReadOnly && !reads(method):
		return fault.New(fault.Forbidden, "this key is read_only: it may only read (GET)")
	case s == ScopeReadOnly:
		return fault.New(fault.Forbidden, "this key is read_only: it may only read (GET) the platform routes; this route needs a key of scope "+string(need))
	}
	return fault.New(fault.Forbidden, "this key is "+string(s)+": this route needs a key of scope "+string(need))
}

// ParseScope validates a scope name.
func ParseScope(s string) (Scope, error) {
	switch Scope(s) {
	case ScopeReadOnly, ScopeReadWrite, ScopeAdmin:
		return Scope(s), nil
	}
	return "", fmt.Errorf("scope must be read_only, readwrite or admin, not %q", s)
}

// maxNetworks bounds a key's allow-list (the column's CHECK).
const maxNetworks = 64

// ParseNetworks validates an allow-list of client networks and returns it
// in canonical form, in the order given: each a CIDR ("10.0.0.0/8",
// "2001:db8::/32") without host bits, or an address, which is the network
// of that address alone ("203.0.113.9" is 203.0.113.9/32). None is nil: the
// key is accepted from anywhere.
func ParseNetworks(list []string) ([]string, error) {
	if len(list) > maxNetworks {
		return nil, fmt.Errorf("at most %d allowed networks, not %d", maxNetworks, len(list))
	}
	var out []string
	for _, raw := range list {
		raw = strings.TrimSpace(raw)
		p, err := httpapi.ParseNetwork(raw)
		if err != nil {
			return nil, fmt.Errorf("allowed network %w", err)
		}
		if p.Addr().Is4In6() {
			return nil, fmt.Errorf("allowed network %q: write an IPv4 network as IPv4 (10.0.0.0/8)", raw)
		}
		if p != p.Masked() {
			return nil, fmt.Errorf("allowed network %q has host bits set: did you mean %s?", raw, p.Masked())
		}
		if !slices.Contains(out, p.String()) {
			out = append(out, p.String())
		}
	}
	return out, nil
}

// AllowsFrom reports whether k may be used from the client address ip:
// always when its allow-list is empty, else when ip is inside one of its
// networks (an IPv4-mapped IPv6 address counts as its IPv4 address; an
// unknown address, the zero Addr, is inside none).
func (k Key) AllowsFrom(ip netip.Addr) bool {
	if len(k.AllowedCIDRs) == 0 {
		return true
	}
	ip = ip.Unmap()
	for _, n := range k.AllowedCIDRs {
		if p, err := netip.ParsePrefix(n); err == nil && ip.IsValid() && p.Contains(ip) {
			return true
		}
	}
	return false
}

// notFrom is the 403 of a key used from ip outside its allow-list: it names
// the address and the networks, never the key.
func (k Key) notFrom(ip netip.Addr) error {
	who := "an unknown address"
	if ip.IsValid() {
		who = ip.Unmap().String()
	}
	return fault.New(fault.Forbidden, "this key is not allowed from "+who+": its allowed networks are "+strings.Join(k.AllowedCIDRs, ", "))
}

// Key is a stored key, without its secret.
type Key struct {
	bun.BaseModel `bun:"table:api_keys"`

	ID         string     `bun:"id,pk" json:"id"`
	Scope      Scope      `bun:"scope" json:"scope"`
	Label      string     `bun:"label" json:"label"`
	Mode       string     `bun:"mode" json:"mode"`
	SecretHash []byte     `bun:"secret_hash" json:"-"`
	CreatedAt  time.Time  `bun:"created_at" json:"created_at"`
	ExpiresAt  *time.Time `bun:"expires_at" json:"expires_at"`
	// AllowedCIDRs are the client networks the key is accepted from
	// (ParseNetworks); empty: anywhere.
	AllowedCIDRs []string   `bun:"allowed_cidrs,array" json:"allowed_cidrs"`
	RevokedAt    *time.Time `bun:"revoked_at" json:"revoked_at"`
	LastUsedAt   *time.Time `bun:"last_used_at" json:"last_used_at"`
}

// Errors of authentication. Their messages are what the client sees.
var (
	ErrMissing   = fault.New(fault.Unauthenticated, "missing API key: send Authorization: Bearer <key>")
	ErrMalformed = fault.New(fault.Unauthenticated, "malformed API key")
	ErrInvalid   = fault.New(fault.Unauthenticated, "invalid, revoked or expired API key")
	ErrNotFound  = fault.New(fault.NotFound, "no such API key")
	// ErrLiveDatabase: minting a test key where live keys exist (the CLI
	// run without API_KEY_MODE=live against a live database).
	ErrLiveDatabase = fault.New(fault.Invalid, "this database holds live keys: a test key is refused here; set API_KEY_MODE=live (and SVC_ENV=production) to mint a live one")
)

// Store mints, lists, revokes and authenticates keys.
type Store struct {
	DB     bun.IDB
	Prefix string // e.g. "svc"
	Mode   string // "live" or "test"
	Now    func() time.Time
	// CacheTTL is how long a key found active is trusted without reading
	// its row again (API_KEY_CACHE_TTL; zero: every request reads it). A
	// key revoked here is refused at once; one revoked through another
	// process (another api, the CLI) within CacheTTL.
	CacheTTL time.Duration

	cacheMu sync.Mutex
	cache   map[[sha256.Size]byte]cachedKey
	// forgets counts revocations here, so that a read that began before
	// one is not remembered after it.
	forgets uint64

	// Proxies say which client address a key's allow-list is checked
	// against (TRUSTED_PROXIES); the zero value: the TCP peer's.
	Proxies httpapi.Proxies

	// Operators authorizes minting and revoking (MintExpect,
	// RevokeExpect); nil acts unsigned, as the caller's actor.
	Operators *operator.Service
}

// cachedKey is an active key as read at some time.
type cachedKey struct {
	key  Key
	read time.Time
}

// maxCachedKeys bounds the cache: a deployment has a handful of keys, and
// only keys found active are cached, so a flood of made-up keys cannot
// grow it.
const maxCachedKeys = 1024

// ActorOf is the audit actor of an action taken with key k.
func ActorOf(k Key) audit.Actor { return audit.Actor{ID: k.ID, Label: k.Label} }

// MintParams describes a new key.
type MintParams struct {
	Scope     Scope
	Label     string
	ExpiresIn time.Duration // zero: never expires
	// AllowedCIDRs are the client networks the key will be accepted from
	// (ParseNetworks); none: anywhere.
	AllowedCIDRs []string
	// Actor is who mints it, unsigned (every mint is audited): required
	// without a Signature.
	Actor audit.Actor
	// Signature is the enrolled admin's signed statement of the mint
	// (MintExpect); the admin is then the actor.
	Signature *operator.Envelope
}

// MintExpect is what an admin signs to mint a key: the action apikey.mint
// on the key's label (trimmed, as it is stored), and as facts the label,
// the scope, the mode of the deployment's keys (live or test), when the
// key expires its lifetime as a Go duration ("720h0m0s"), and when it has
// an allow-list its networks in canonical form, comma-separated
// ("10.0.0.0/8,2001:db8::/32"). Networks that do not parse are signed as
// given: Mint refuses them.
func MintExpect(label string, scope Scope, mode string, expiresIn time.Duration, allowedCIDRs ...string) operator.Expect {
	label = strings.TrimSpace(label)
	facts := map[string]string{"label": label, "scope": string(scope), "mode": mode}
	if expiresIn > 0 {
		facts["expires_in"] = expiresIn.String()
	}
	if nets, err := ParseNetworks(allowedCIDRs); err != nil {
		facts["allowed_cidrs"] = strings.Join(allowedCIDRs, ",")
	} else if len(nets) > 0 {
		facts["allowed_cidrs"] = strings.Join(nets, ",")
	}
	return operator.Expect{Action: audit.KeyMint, Resource: label, Facts: facts, Role: operator.Admin}
}

// RevokeExpect is what an admin signs to revoke key id: the action
// apikey.revoke on the key's id, with the fact key_id.
func RevokeExpect(id string) operator.Expect {
	return operator.Expect{Action: audit.KeyRevoke, Resource: id, Facts: map[string]string{"key_id": id}, Role: operator.Admin}
}

// mintDetail is what the audit trail keeps of a mint: never the secret or
// its hash.
type mintDetail struct {
	Scope     Scope   `json:"scope"`
	Label     string  `json:"label"`
	Mode      string  `json:"mode"`
	ExpiresAt *string `json:"expires_at"`
	// AllowedCIDRs: only when the key has an allow-list.
	AllowedCIDRs []string `json:"allowed_cidrs,omitempty"`
}

// CheckLabel checks a key's label, trimmed as Mint stores it: 1 to 200
// characters.
func CheckLabel(label string) error {
	if l := strings.TrimSpace(label); l == "" || len(l) > 200 {
		return fault.New(fault.Invalid, "label must be 1 to 200 characters")
	}
	return nil
}

// Mint creates a key and returns it with its only copy of the secret. The
// operator service authorizes it (MintExpect) in the transaction that
// stores the key and its audit entry.
func (s *Store) Mint(ctx context.Context, p MintParams) (Key, string, error) {
	if p.Signature == nil && !p.Actor.Valid() {
		return Key{}, "", fmt.Errorf("mint: name who mints the key (audit actor)")
	}
	if _, err := ParseScope(string(p.Scope)); err != nil {
		return Key{}, "", err
	}
	if s.Mode == "test" {
		// A test key minted into a database that holds live keys would be
		// a credential on a live deployment run without API_KEY_MODE.
		live, err := s.DB.NewSelect().Model((*Key)(nil)).Where("mode = 'live' AND revoked_at IS NULL").Exists(ctx)
		if err != nil {
			return Key{}, "", fmt.Errorf("mint: %w", err)
		}
		if live {
			return Key{}, "", ErrLiveDatabase
		}
	}
	p.Label = strings.TrimSpace(p.Label)
	if err := CheckLabel(p.Label); err != nil {
		return Key{}, "", err
	}
	if p.ExpiresIn < 0 {
		return Key{}, "", fmt.Errorf("expiry must be in the future")
	}
	nets, err := ParseNetworks(p.AllowedCIDRs)
	if err != nil {
		return Key{}, "", err
	}
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return Key{}, "", fmt.Errorf("random: %w", err)
	}
	id := make([]byte, 8)
	if _, err := rand.Read(id); err != nil {
		return Key{}, "", fmt.Errorf("random: %w", err)
	}
	plain := s.Prefix + "_" + s.Mode + "_" + base64.RawURLEncoding.EncodeToString(secret)
	now := s.Now().UTC()
	k := Key{ID: "key_" + hex.EncodeToString(id), Scope: p.Scope, Label: p.Label, Mode: s.Mode, SecretHash: hash(plain), CreatedAt: now,
		AllowedCIDRs: append([]string{}, nets...)}
	if p.ExpiresIn > 0 {
		exp := now.Add(p.ExpiresIn)
		k.ExpiresAt = &exp
	}
	err = db.RunInTx(ctx, s.DB, func(ctx context.Context, tx bun.Tx) error {
		who, err := s.Operators.Authorize(ctx, tx, p.Actor, p.Signature, MintExpect(p.Label, p.Scope, s.Mode, p.ExpiresIn, nets...))
		if err != nil {
			return err
		}
		if _, err := tx.NewInsert().Model(&k).Exec(ctx); err != nil {
			return fmt.Errorf("store key: %w", err)
		}
		_, err = audit.Record(ctx, tx, now, who, audit.KeyMint, k.ID,
			mintDetail{Scope: k.Scope, Label: k.Label, Mode: k.Mode, ExpiresAt: timefmt.Ptr(k.ExpiresAt), AllowedCIDRs: nets})
		return err
	})
	if err != nil {
		return Key{}, "", err
	}
	return k, plain, nil
}

// List returns every key, newest first. Secrets are not stored, so none can
// be shown.
func (s *Store) List(ctx context.Context) ([]Key, error) {
	var keys []Key
	err := s.DB.NewSelect().Model(&keys).OrderExpr("created_at DESC, id").Scan(ctx)
	for i := range keys {
		if keys[i].AllowedCIDRs == nil {
			keys[i].AllowedCIDRs = []string{}
		}
	}
	return keys, err
}

// Revoke is RevokeSigned without a signature: the revocation is actor's,
// unless signatures are required.
func (s *Store) Revoke(ctx context.Context, id string, actor audit.Actor) (Key, error) {
	return s.RevokeSigned(ctx, id, actor, nil)
}

// RevokeSigned revokes the key with id and records it in the audit trail
// in the same transaction, where, with the key's row locked, the operator
// service authorizes it (RevokeExpect): with sig, the enrolled admin who
// signed it is the actor; without, actor (refused when signatures are
// required). Revoking twice is harmless (the first revocation time stays;
// each call is recorded).
func (s *Store) RevokeSigned(ctx context.Context, id string, actor audit.Actor, sig *operator.Envelope) (Key, error) {
	if sig == nil && !actor.Valid() {
		return Key{}, fmt.Errorf("revoke %s: name who revokes the key (audit actor)", id)
	}
	var k Key
	err := db.RunInTx(ctx, s.DB, func(ctx context.Context, tx bun.Tx) error {
		now := s.Now().UTC()
		err := tx.NewUpdate().Model(&k).
			Set("revoked_at = coalesce(revoked_at, ?)", now).
			Where("id = ?", id).Returning("*").Scan(ctx)
		if db.IsNoRows(err) {
			return ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("revoke %s: %w", id, err)
		}
		who, err := s.Operators.Authorize(ctx, tx, actor, sig, RevokeExpect(k.ID))
		if err != nil {
			return err
		}
		_, err = audit.Record(ctx, tx, now, who, audit.KeyRevoke, k.ID, map[string]string{"key_id": k.ID})
		return err
	})
	if err != nil {
		return Key{}, err
	}
	s.forget(k.ID)
	return k, nil
}

// Authenticate returns the active key for a presented plaintext key.
func (s *Store) Authenticate(ctx context.Context, presented string) (Key, error) {
	if !s.wellFormed(presented) {
		return Key{}, ErrMalformed
	}
	h := hash(presented)
	now := s.Now().UTC()
	k, ok, gen := s.cached(h, now)
	if ok {
		return k, nil
	}
	err := s.DB.NewSelect().Model(&k).Where("secret_hash = ?", h).Scan(ctx)
	if db.IsNoRows(err) {
		return Key{}, ErrInvalid
	}
	if err != nil {
		return Key{}, fmt.Errorf("look up API key: %w", err)
	}
	if subtle.ConstantTimeCompare(k.SecretHash, h) != 1 {
		return Key{}, ErrInvalid
	}
	if !s.active(k, now) {
		return Key{}, ErrInvalid
	}
	// last_used_at is advisory: refresh it at most once a minute so a busy
	// key does not turn every request into a write on one row.
	if k.LastUsedAt == nil || now.Sub(*k.LastUsedAt) > time.Minute {
		_, _ = s.DB.NewUpdate().Model((*Key)(nil)).Set("last_used_at = ?", now).Where("id = ?", k.ID).Exec(ctx)
		k.LastUsedAt = &now
	}
	s.remember(h, k, now, gen)
	return k, nil
}

// active reports whether k authenticates at now: not revoked, not expired,
// and of this deployment's mode (a test key from a restored staging dump on
// a live deployment, or the reverse, is not a credential here).
func (s *Store) active(k Key, now time.Time) bool {
	if k.RevokedAt != nil || (k.ExpiresAt != nil && !now.Before(*k.ExpiresAt)) {
		return false
	}
	return s.Mode == "" || k.Mode == s.Mode
}

// cached returns the key of hash h if it was read active less than
// CacheTTL ago and is still active at now (its expiry is checked again),
// and otherwise the revocation count to give remember.
func (s *Store) cached(h []byte, now time.Time) (k Key, ok bool, gen uint64) {
	if s.CacheTTL <= 0 {
		return Key{}, false, 0
	}
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	c, ok := s.cache[[sha256.Size]byte(h)]
	if !ok || now.Sub(c.read) >= s.CacheTTL || now.Before(c.read) || !s.active(c.key, now) {
		return Key{}, false, s.forgets
	}
	return c.key, true, 0
}

// remember caches k, read active at now, unless a key was revoked here
// since the read began (gen from cached).
func (s *Store) remember(h []byte, k Key, now time.Time, gen uint64) {
	if s.CacheTTL <= 0 {
		return
	}
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	if s.forgets != gen {
		return
	}
	if s.cache == nil || len(s.cache) >= maxCachedKeys {
		s.cache = make(map[[sha256.Size]byte]cachedKey)
	}
	s.cache[[sha256.Size]byte(h)] = cachedKey{key: k, read: now}
}

// forget drops key id from the cache.
func (s *Store) forget(id string) {
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	s.forgets++
	for h, c := range s.cache {
		if c.key.ID == id {
			delete(s.cache, h)
		}
	}
}

// wellFormed checks the shape <prefix>_(live|test)_<43 base64url chars>.
func (s *Store) wellFormed(k string) bool {
	rest, ok := strings.CutPrefix(k, s.Prefix+"_")
	if !ok {
		return false
	}
	mode, secret, ok := strings.Cut(rest, "_")
	if !ok || (mode != "live" && mode != "test") || len(secret) != 43 {
		return false
	}
	_, err := base64.RawURLEncoding.DecodeString(secret)
	return err == nil
}

func hash(k string) []byte {
	h := sha256.Sum256([]byte(k))
	return h[:]
}
