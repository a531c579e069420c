package operator

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Header is the HTTP header that carries a signed statement: the
// Envelope as JSON, in unpadded base64url.
const Header = "Svc-Operator-Signature"

// TimeLayout is a statement's time: UTC, to the second.
const TimeLayout = "2006-01-02T15:04:05Z"

// Freshness bounds a statement's time: at most MaxAge before the service's
// clock and MaxSkew after it.
const (
	MaxAge  = 5 * time.Minute
	MaxSkew = time.Minute
)

// domain prefixes what an Ed25519 key signs (and, hashed, a passkey's
// challenge), so that no signature made for another purpose verifies as a
// statement.
const domain = "svc-operator-statement-v1\n"

// Statement is what an operator signs: the action, the resource it acts
// on, the facts the operator saw (exact amounts and destinations, the
// request's own parameters), when, a nonce, and the signing key's id.
// Facts are strings, compared exactly with the facts the service derives
// from the resource and the request; any difference refuses the action.
type Statement struct {
	V        int               `json:"v"`
	Action   string            `json:"action"`
	Resource string            `json:"resource"`
	Facts    map[string]string `json:"facts"`
	At       string            `json:"at"`
	Nonce    string            `json:"nonce"`
	KeyID    string            `json:"key_id"`
}

// NewStatement is the statement of action on resource with facts, at t.
func NewStatement(action, resource string, facts map[string]string, t time.Time) Statement {
	return Statement{V: 1, Action: action, Resource: resource, Facts: facts, At: t.UTC().Format(TimeLayout)}
}

// Encode is the statement's JSON (keys in the struct's order, facts
// sorted). The service verifies the bytes it is sent, whatever their
// order; this is only the form the service's own tools produce.
func (s Statement) Encode() ([]byte, error) {
	if s.Facts == nil {
		s.Facts = map[string]string{}
	}
	return json.Marshal(s)
}

// NewNonce is 16 random bytes in hex.
func NewNonce() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return hex.EncodeToString(b[:])
}

// signedBytes is what an Ed25519 key signs for statement bytes b.
func signedBytes(b []byte) []byte { return append([]byte(domain), b...) }

// Challenge is the WebAuthn challenge for statement bytes b: the SHA-256
// of what an Ed25519 key would sign.
func Challenge(b []byte) []byte {
	sum := sha256.Sum256(signedBytes(b))
	return sum[:]
}

// Envelope is a signed statement as it travels and is stored: the
// statement's exact bytes and the signature over them; for a passkey,
// also the authenticator data and client data the signature covers.
type Envelope struct {
	Statement         []byte `json:"statement"`
	Signature         []byte `json:"signature"`
	AuthenticatorData []byte `json:"authenticator_data,omitempty"`
	ClientDataJSON    []byte `json:"client_data_json,omitempty"`
}

// Header is the envelope as the Svc-Operator-Signature header's value.
func (e Envelope) Header() string {
	b, _ := json.Marshal(e) // []byte fields only: cannot fail
	return base64.RawURLEncoding.EncodeToString(b)
}

// ParseHeader reads an Svc-Operator-Signature header.
func ParseHeader(h string) (Envelope, error) {
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimSpace(h))
	if err != nil {
		return Envelope{}, unauthenticated(Header + " is not unpadded base64url")
	}
	var e Envelope
	d := json.NewDecoder(bytes.NewReader(raw))
	d.DisallowUnknownFields()
	if err := d.Decode(&e); err != nil || len(e.Statement) == 0 || len(e.Signature) == 0 {
		return Envelope{}, unauthenticated(Header + " must be JSON {statement, signature[, authenticator_data, client_data_json]} with base64 byte strings")
	}
	return e, nil
}

// Parse reads the envelope's statement.
func (e Envelope) Parse() (Statement, error) {
	var s Statement
	d := json.NewDecoder(bytes.NewReader(e.Statement))
	d.DisallowUnknownFields()
	if err := d.Decode(&s); err != nil {
		return Statement{}, unauthenticated("the signed statement is not a statement: " + err.Error())
	}
	if s.V != 1 || s.Action == "" || s.Resource == "" || s.KeyID == "" || len(s.Nonce) < 16 || len(s.Nonce) > 128 {
		return Statement{}, unauthenticated("the signed statement needs v 1, action, resource, at, a nonce of 16 to 128 characters and key_id")
	}
	if _, err := time.Parse(TimeLayout, s.At); err != nil {
		return Statement{}, unauthenticated("the signed statement's at must be UTC to the second (" + TimeLayout + ")")
	}
	if s.Facts == nil {
		s.Facts = map[string]string{}
	}
	return s, nil
}

// verifySignature checks the envelope's signature with pub.
func (e Envelope) verifySignature(pub PublicKey, rp RelyingParty) error {
	switch pub.Kind {
	case KindEd25519:
		if len(e.AuthenticatorData) > 0 || len(e.ClientDataJSON) > 0 {
			return unauthenticated("an Ed25519 signature carries no authenticator data")
		}
		if !ed25519.Verify(ed25519.PublicKey(pub.Key), signedBytes(e.Statement), e.Signature) {
			return unauthenticated("the signature does not verify with key " + pub.ID())
		}
		return nil
	case KindWebAuthn:
		return verifyWebAuthn(pub.Key, e, rp)
	}
	return unauthenticated("unknown key kind " + pub.Kind)
}

// Expect is what the service requires of a statement for one action: the
// action, the resource, every fact exactly, and the least role.
type Expect struct {
	Action   string
	Resource string
	Facts    map[string]string
	Role     Role
}

// match compares a statement with what the service expects, naming the
// first difference.
func (x Expect) match(s Statement) error {
	if s.Action != x.Action {
		return forbidden(fmt.Sprintf("the signed statement is for %q, not %q", s.Action, x.Action))
	}
	if s.Resource != x.Resource {
		return forbidden(fmt.Sprintf("the signed statement is for %q, not %q", s.Resource, x.Resource))
	}
	for _, k := range slices.Sorted(maps.Keys(x.Facts)) {
		got, ok := s.Facts[k]
		if !ok {
			return forbidden(fmt.Sprintf("the signed statement lacks %s (the service has %q)", k, x.Facts[k]))
		}
		if got != x.Facts[k] {
			return forbidden(fmt.Sprintf("the signed statement's %s is %q, the service's is %q: sign what the service shows", k, got, x.Facts[k]))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(s.Facts)) {
		if _, ok := x.Facts[k]; !ok {
			return forbidden(fmt.Sprintf("the signed statement has %s, which this action does not take", k))
		}
	}
	return nil
}
