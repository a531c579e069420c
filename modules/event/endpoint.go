package event

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	neturl "net/url"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/uptrace/bun"

	"svc/modules/audit"
	"svc/platform/db"
	"svc/platform/fault"
)

// # Webhook endpoints
//
// Besides PLATFORM_WEBHOOK_URL, whose delivery is the event row's own
// (status, attempts, claim on outbound_events, untouched by endpoints), an
// operator adds endpoints: a URL, the event types it wants (exact types,
// "prefix.*" or "*") and a signing secret of its own. Each event has one
// webhook_deliveries row per endpoint enabled and matching when the event
// was written, inserted by a trigger on outbound_events (migration 0050)
// in the event's own transaction, whatever statement writes the event
// (Emit, or a caller's WITH query: RowInsert). A row per (event, endpoint)
// rather than a counter or a list on the event: each delivery keeps its
// own attempts, schedule, claim, dead state and redelivery, claimed and
// recorded exactly as the event's (FOR UPDATE SKIP LOCKED, a claim token,
// at-least-once), and the default path pays nothing but the trigger's
// look at an empty table. The same wake jobs (DeliverBatchArgs) that send
// an event to the default URL send its endpoint deliveries; a failed one's
// next attempt has a job of its own (EndpointDeliverArgs), and the Sweep
// catches a lost wake.

// Endpoint is a webhook endpoint.
type Endpoint struct {
	bun.BaseModel `bun:"table:webhook_endpoints"`

	ID          uuid.UUID `bun:"id,pk,type:uuid"`
	URL         string    `bun:"url"`
	Events      []string  `bun:"events,array"`
	Description *string   `bun:"description"`
	Disabled    bool      `bun:"disabled"`
	// The signing secrets, sealed (Sealer): never readable from the row.
	SecretSealed         []byte     `bun:"secret_sealed"`
	PreviousSecretSealed []byte     `bun:"previous_secret_sealed"`
	PreviousSecretUntil  *time.Time `bun:"previous_secret_until"`
	CreatedAt            time.Time  `bun:"created_at"`
	UpdatedAt            time.Time  `bun:"updated_at"`
}

// Endpoint errors.
var (
	ErrEndpointNotFound = fault.New(fault.NotFound, "webhook endpoint not found")
	// ErrNoEndpointKey refuses to make a secret that could not be sealed.
	ErrNoEndpointKey = fault.New(fault.Unavailable, "webhook endpoints need WEBHOOK_ENDPOINT_KEY: the key that seals their signing secrets is not configured")
	errUnseal        = errors.New("the endpoint's signing secret cannot be unsealed with WEBHOOK_ENDPOINT_KEY")
)

// The audit actions of endpoints.
const (
	AuditEndpointCreate = "webhook_endpoint.create"
	AuditEndpointUpdate = "webhook_endpoint.update"
	AuditEndpointRotate = "webhook_endpoint.rotate_secret"
)

// MaxRotationOverlap bounds how long a rotated-out secret keeps signing.
const MaxRotationOverlap = 7 * 24 * time.Hour

// DefaultRotationOverlap is the overlap of a rotation that names none.
const DefaultRotationOverlap = 24 * time.Hour

// Sealer seals the endpoints' signing secrets with AES-256-GCM under a key
// the database never holds (WEBHOOK_ENDPOINT_KEY), bound to the endpoint's
// id (the additional data), so a row's sealed secret does not open under
// another row's id either.
type Sealer struct{ aead cipher.AEAD }

// NewSealer returns the Sealer of a 32-byte key.
func NewSealer(key []byte) (*Sealer, error) {
	if len(key) != 32 {
		return nil, errors.New("webhook endpoint key: want 32 bytes")
	}
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	g, err := cipher.NewGCM(b)
	if err != nil {
		return nil, err
	}
	return &Sealer{aead: g}, nil
}

// DevelopmentSealer is the Sealer of a deployment without
// WEBHOOK_ENDPOINT_KEY outside production: its key is public (derived from
// a fixed text), so it only keeps secrets out of casual sight.
func DevelopmentSealer() *Sealer {
	k := sha256.Sum256([]byte("svc development webhook endpoint key: not a secret"))
	s, _ := NewSealer(k[:])
	return s
}

func (s *Sealer) seal(secret string, id uuid.UUID) ([]byte, error) {
	if s == nil {
		return nil, ErrNoEndpointKey
	}
	nonce := make([]byte, s.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return s.aead.Seal(nonce, nonce, []byte(secret), id[:]), nil
}

func (s *Sealer) open(sealed []byte, id uuid.UUID) ([]byte, error) {
	if s == nil || len(sealed) < s.aead.NonceSize() {
		return nil, errUnseal
	}
	n := s.aead.NonceSize()
	b, err := s.aead.Open(nil, sealed[:n], sealed[n:], id[:])
	if err != nil {
		return nil, errUnseal
	}
	return b, nil
}

// newSecret makes a fresh signing secret for the endpoint id, "whsec_"
// and 64 hex digits (the HMAC key is the whole string's bytes, as
// PLATFORM_WEBHOOK_SECRET's is), and returns it and its sealed form.
func (s *Sealer) newSecret(id uuid.UUID) (string, []byte, error) {
	if s == nil {
		return "", nil, ErrNoEndpointKey
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", nil, err
	}
	secret := "whsec_" + hex.EncodeToString(b)
	sealed, err := s.seal(secret, id)
	if err != nil {
		return "", nil, err
	}
	return secret, sealed, nil
}

// endpointSecrets are the secrets a delivery to ep is signed with at now:
// the current one, and the rotated-out one until its overlap ends.
func (s *Sealer) endpointSecrets(ep Endpoint, now time.Time) ([][]byte, error) {
	cur, err := s.open(ep.SecretSealed, ep.ID)
	if err != nil {
		return nil, err
	}
	out := [][]byte{cur}
	if ep.PreviousSecretUntil != nil && now.Before(*ep.PreviousSecretUntil) {
		prev, err := s.open(ep.PreviousSecretSealed, ep.ID)
		if err != nil {
			return nil, err
		}
		out = append(out, prev)
	}
	return out, nil
}

// checkFilters returns the field errors of an endpoint's event filters at
// loc: each is a known type, "prefix.*" of at least one, or "*".
func checkFilters(filters []string, loc string) []fault.FieldError {
	var errs []fault.FieldError
	if len(filters) == 0 {
		return []fault.FieldError{{Loc: []any{"body", loc}, Msg: "List should have at least 1 item", Type: "too_short"}}
	}
	if len(filters) > 64 {
		return []fault.FieldError{{Loc: []any{"body", loc}, Msg: "List should have at most 64 items", Type: "too_long"}}
	}
	for i, f := range filters {
		if !knownFilter(f) {
			errs = append(errs, fault.FieldError{Loc: []any{"body", loc, i}, Input: f, Type: "value_error",
				Msg: "Value error, not an event type, a prefix of one followed by .* (deposit.*), or *"})
		}
	}
	return errs
}

func knownFilter(f string) bool {
	if f == "*" {
		return true
	}
	prefix, wild := strings.CutSuffix(f, "*")
	for _, t := range Types() {
		if string(t) == f || (wild && strings.HasSuffix(prefix, ".") && strings.HasPrefix(string(t), prefix)) {
			return true
		}
	}
	return false
}

// Matches reports whether the endpoint's filters take type t (as the
// database's webhook_filter_matches does).
func (ep Endpoint) Matches(t Type) bool {
	for _, f := range ep.Events {
		if f == "*" || f == string(t) {
			return true
		}
		if p, ok := strings.CutSuffix(f, "*"); ok && strings.HasSuffix(p, ".") && strings.HasPrefix(string(t), p) {
			return true
		}
	}
	return false
}

// EndpointParams are an endpoint's settings; nil leaves one as it is (an
// update) or at its default (a creation: description none, enabled).
type EndpointParams struct {
	URL         *string   `json:"url"`
	Events      *[]string `json:"events"`
	Description *string   `json:"description"`
	Disabled    *bool     `json:"disabled"`
}

// check returns the 422 of p's fields; create requires url and events.
func (p EndpointParams) check(create bool, urlProblem func(string) string) error {
	var errs []fault.FieldError
	if p.URL == nil {
		if create {
			errs = append(errs, fault.FieldError{Loc: []any{"body", "url"}, Msg: "Field required", Type: "missing"})
		}
	} else if problem := urlProblem(*p.URL); problem != "" {
		errs = append(errs, fault.FieldError{Loc: []any{"body", "url"}, Msg: "Value error, " + problem, Type: "value_error", Input: *p.URL})
	}
	if p.Events == nil {
		if create {
			errs = append(errs, fault.FieldError{Loc: []any{"body", "events"}, Msg: "Field required", Type: "missing"})
		}
	} else {
		errs = append(errs, checkFilters(*p.Events, "events")...)
	}
	if p.Description != nil && len([]rune(*p.Description)) > 500 {
		errs = append(errs, fault.FieldError{Loc: []any{"body", "description"}, Msg: "String should have at most 500 characters", Type: "string_too_long"})
	}
	if len(errs) > 0 {
		return fault.Validation(errs...)
	}
	return nil
}

// EndpointService keeps the webhook endpoints.
type EndpointService struct {
	DB  bun.IDB
	Now func() time.Time
	// Sealer seals the secrets; nil refuses to make one (ErrNoEndpointKey).
	Sealer *Sealer
	// Production requires https:// URLs (http:// only to a loopback
	// address), as for PLATFORM_WEBHOOK_URL.
	Production bool
	// URLProblem checks a URL (config.WebhookURLProblem).
	URLProblem func(u string, production bool) string
}

func (s *EndpointService) now() time.Time { return s.Now().UTC().Truncate(time.Microsecond) }

func (s *EndpointService) checkParams(p EndpointParams, create bool) error {
	return p.check(create, func(u string) string {
		if s.URLProblem == nil {
			if x, err := neturl.Parse(u); err != nil || (x.Scheme != "http" && x.Scheme != "https") || x.Host == "" {
				return "must be an http:// or https:// URL"
			}
			return ""
		}
		return s.URLProblem(u, s.Production)
	})
}

// Create adds an endpoint and returns it with its signing secret, which is
// never shown again. It is recorded in the audit trail as actor's.
func (s *EndpointService) Create(ctx context.Context, tx bun.Tx, p EndpointParams, actor audit.Actor) (Endpoint, string, error) {
	if err := s.checkParams(p, true); err != nil {
		return Endpoint{}, "", err
	}
	id, err := uuid.NewV7()
	if err != nil {
		return Endpoint{}, "", err
	}
	secret, sealed, err := s.Sealer.newSecret(id)
	if err != nil {
		return Endpoint{}, "", err
	}
	now := s.now()
	ep := Endpoint{ID: id, URL: *p.URL, Events: slices.Clone(*p.Events), Description: p.Description,
		SecretSealed: sealed, CreatedAt: now, UpdatedAt: now}
	if p.Disabled != nil {
		ep.Disabled = *p.Disabled
	}
	if _, err := tx.NewInsert().Model(&ep).Exec(ctx); err != nil {
		return Endpoint{}, "", fmt.Errorf("create webhook endpoint: %w", err)
	}
	if _, err := audit.Record(ctx, tx, now, actor, AuditEndpointCreate, id.String(), endpointAudit(ep)); err != nil {
		return Endpoint{}, "", err
	}
	return ep, secret, nil
}

// endpointAudit is what the audit trail keeps of an endpoint: never its
// secret.
func endpointAudit(ep Endpoint) map[string]any {
	return map[string]any{"url": ep.URL, "events": ep.Events, "description": ep.Description, "disabled": ep.Disabled}
}

// lockEndpoint reads the endpoint id and locks it until tx ends.
func lockEndpoint(ctx context.Context, tx bun.Tx, id uuid.UUID) (Endpoint, error) {
	var ep Endpoint
	err := tx.NewSelect().Model(&ep).Where("id = ?", id).For("UPDATE").Scan(ctx)
	if err := db.Found(err, ErrEndpointNotFound, "read webhook endpoint %s", id); err != nil {
		return Endpoint{}, err
	}
	return ep, nil
}

// GetEndpoint returns one endpoint.
func (s *EndpointService) GetEndpoint(ctx context.Context, idb bun.IDB, id uuid.UUID) (Endpoint, error) {
	var ep Endpoint
	err := idb.NewSelect().Model(&ep).Where("id = ?", id).Scan(ctx)
	if err := db.Found(err, ErrEndpointNotFound, "read webhook endpoint %s", id); err != nil {
		return Endpoint{}, err
	}
	return ep, nil
}

// ListEndpoints returns every endpoint, oldest first.
func (s *EndpointService) ListEndpoints(ctx context.Context) ([]Endpoint, error) {
	out := []Endpoint{}
	if err := s.DB.NewSelect().Model(&out).OrderExpr("created_at, id").Scan(ctx); err != nil {
		return nil, fmt.Errorf("list webhook endpoints: %w", err)
	}
	return out, nil
}

// Update changes the fields p sets. Filters and the enabled state apply to
// events written from its commit on: an event's deliveries are those made
// when it was written. A new URL applies to every delivery not yet made
// (the claim reads it). A disabled endpoint's pending deliveries wait,
// with no attempt spent, and resume once it is enabled again.
func (s *EndpointService) Update(ctx context.Context, tx bun.Tx, id uuid.UUID, p EndpointParams, actor audit.Actor) (Endpoint, error) {
	if err := s.checkParams(p, false); err != nil {
		return Endpoint{}, err
	}
	ep, err := lockEndpoint(ctx, tx, id)
	if err != nil {
		return Endpoint{}, err
	}
	if p.URL != nil {
		ep.URL = *p.URL
	}
	if p.Events != nil {
		ep.Events = slices.Clone(*p.Events)
	}
	if p.Description != nil {
		ep.Description = p.Description
	}
	if p.Disabled != nil {
		ep.Disabled = *p.Disabled
	}
	ep.UpdatedAt = s.now()
	if _, err := tx.NewUpdate().Model(&ep).Column("url", "events", "description", "disabled", "updated_at").WherePK().Exec(ctx); err != nil {
		return Endpoint{}, fmt.Errorf("update webhook endpoint %s: %w", id, err)
	}
	if _, err := audit.Record(ctx, tx, ep.UpdatedAt, actor, AuditEndpointUpdate, id.String(), endpointAudit(ep)); err != nil {
		return Endpoint{}, err
	}
	return ep, nil
}

// RotateSecret gives the endpoint a new secret and returns it (shown once).
// The secret it replaces keeps signing, beside the new one, for overlap
// (0: at once no longer); a rotation during another's overlap retires the
// older secret at once.
func (s *EndpointService) RotateSecret(ctx context.Context, tx bun.Tx, id uuid.UUID, overlap time.Duration, actor audit.Actor) (Endpoint, string, error) {
	ep, err := lockEndpoint(ctx, tx, id)
	if err != nil {
		return Endpoint{}, "", err
	}
	secret, sealed, err := s.Sealer.newSecret(id)
	if err != nil {
		return Endpoint{}, "", err
	}
	now := s.now()
	ep.PreviousSecretSealed, ep.PreviousSecretUntil = nil, nil
	if overlap > 0 {
		until := now.Add(overlap)
		ep.PreviousSecretSealed, ep.PreviousSecretUntil = ep.SecretSealed, &until
	}
	ep.SecretSealed, ep.UpdatedAt = sealed, now
	if _, err := tx.NewUpdate().Model(&ep).Column("secret_sealed", "previous_secret_sealed", "previous_secret_until", "updated_at").
		WherePK().Exec(ctx); err != nil {
		return Endpoint{}, "", fmt.Errorf("rotate the secret of webhook endpoint %s: %w", id, err)
	}
	if _, err := audit.Record(ctx, tx, now, actor, AuditEndpointRotate, id.String(),
		map[string]any{"overlap_seconds": int64(overlap / time.Second)}); err != nil {
		return Endpoint{}, "", err
	}
	return ep, secret, nil
}
