// Package audit owns the operator audit trail: one append-only row per
// operator action (who, what, on which resource, a digest of the request,
// when), written inside the action's own transaction so that the trail and
// the effect commit or roll back together. The database refuses any change
// or deletion of a row.
//
// Actors are an enrolled operator ("op:NAME") when the action carries the
// operator's signed statement (modules/operator), which the row stores
// with its nonce (unique: a statement is accepted once); otherwise an admin
// API key (its id, with its label), or "cli:NAME" for a command-line
// action that needs no signature.
//
// The rows form a hash chain (migration 0048): the database sets each
// row's seq, prev_hash and hash, whoever inserts it, and Verify finds a
// row changed afterwards.
package audit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/uptrace/bun"

	"svc/platform/fault"
)

// The actions recorded.
const (
	WithdrawalApprove       = "withdrawal.approve"
	WithdrawalReject        = "withdrawal.reject"
	WithdrawalRelease       = "withdrawal.release"
	WithdrawalMarkBroadcast = "withdrawal.mark_broadcast"
	DepositResolve          = "deposit.resolve"
	KeyMint                 = "apikey.mint"
	KeyRevoke               = "apikey.revoke"
	AssetSetLimits          = "asset.set_limits"
	EventRedeliver          = "event.redeliver"
	ReconciliationAck       = "reconciliation.ack"
	DepositCreditDismissed  = "deposit.credit_after_dismissal"
)

// Actor is who performed an action.
type Actor struct {
	// ID identifies the operator: an admin API key id ("key_...") or
	// "cli:NAME". Two actions by the same ID are by the same operator
	// (four-eyes approval compares IDs).
	ID string `json:"id"`
	// Label is the key's label, or the operator's name.
	Label string `json:"label"`
	// Signature is the operator's verified signature of the action, nil
	// for an unsigned one.
	Signature *Signature `json:"-"`
}

// Signature is a verified operator signature as the audit row stores it.
type Signature struct {
	Operator string
	KeyID    string
	Nonce    string
	// Envelope is the signed statement and signature, as received
	// (operator.Envelope's JSON).
	Envelope json.RawMessage
}

// Signed returns the actor of an enrolled operator's verified signature.
func Signed(sig Signature) Actor {
	return Actor{ID: "op:" + sig.Operator, Label: sig.Operator, Signature: &sig}
}

// CLI returns the actor of a command-line operator named name (--as).
func CLI(name string) Actor {
	name = strings.TrimSpace(name)
	return Actor{ID: "cli:" + name, Label: name}
}

// String names the actor for people: "key_abc (ops-alice)" or
// "cli:alice".
func (a Actor) String() string {
	if a.Label == "" || strings.HasPrefix(a.ID, "cli:") || strings.HasPrefix(a.ID, "op:") {
		return a.ID
	}
	return a.ID + " (" + a.Label + ")"
}

// Valid reports an actor that can be recorded.
func (a Actor) Valid() bool {
	return strings.TrimSpace(a.ID) != "" && len(a.ID) <= 255 && len(a.Label) <= 255 && a.ID != "cli:"
}

// Entry is one row of audit_log.
type Entry struct {
	bun.BaseModel `bun:"table:audit_log"`

	ID            int64           `bun:"id,pk,autoincrement" json:"id"`
	At            time.Time       `bun:"at" json:"at"`
	Actor         string          `bun:"actor" json:"actor"`
	ActorLabel    string          `bun:"actor_label" json:"actor_label"`
	Action        string          `bun:"action" json:"action"`
	Target        string          `bun:"target" json:"target"`
	RequestDigest string          `bun:"request_digest" json:"request_digest"`
	Detail        json.RawMessage `bun:"detail,type:jsonb" json:"detail"`
	// The operator's signature, when the action carried one.
	Operator  *string         `bun:"operator" json:"operator"`
	KeyID     *string         `bun:"key_id" json:"key_id"`
	Signature json.RawMessage `bun:"signature,type:jsonb,nullzero" json:"signature"`
	Nonce     *string         `bun:"nonce" json:"-"`
	// The hash chain, set by the database.
	Seq      int64  `bun:"seq,nullzero" json:"seq"`
	PrevHash []byte `bun:"prev_hash,nullzero" json:"-"`
	Hash     []byte `bun:"hash,nullzero" json:"-"`
}

// ErrReplayed: an operator statement's nonce is already in the trail.
var ErrReplayed = fault.New(fault.Unauthenticated, "this signed statement was already used: sign the action again")

// Digest returns the hex SHA-256 of params as JSON (Go's encoding sorts
// map keys and keeps struct field order, so equal parameters give equal
// digests).
func Digest(params any) (string, []byte, error) {
	b, err := json.Marshal(params)
	if err != nil {
		return "", nil, fmt.Errorf("audit: encode parameters: %w", err)
	}
	if string(b) == "null" {
		b = []byte("{}")
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), b, nil
}

// Record writes one audit row with idb, which must be the transaction of
// the action itself. params are the action's parameters (never a secret),
// a struct or a map: they are stored and digested.
func Record(ctx context.Context, idb bun.IDB, at time.Time, actor Actor, action, target string, params any) (Entry, error) {
	if !actor.Valid() {
		return Entry{}, fmt.Errorf("audit: %s of %s: no valid actor", action, target)
	}
	digest, raw, err := Digest(params)
	if err != nil {
		return Entry{}, err
	}
	if raw[0] != '{' { // the API's AuditEntry.detail is an object
		return Entry{}, fmt.Errorf("audit: %s of %s: parameters must encode as a JSON object, not %s", action, target, raw)
	}
	e := Entry{At: at.UTC(), Actor: actor.ID, ActorLabel: actor.Label, Action: action, Target: target,
		RequestDigest: digest, Detail: raw}
	if sig := actor.Signature; sig != nil {
		e.Operator, e.KeyID, e.Nonce, e.Signature = &sig.Operator, &sig.KeyID, &sig.Nonce, sig.Envelope
	}
	if _, err := idb.NewInsert().Model(&e).Returning("id, seq, prev_hash, hash").Exec(ctx); err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == pgerrcode.UniqueViolation && pe.ConstraintName == "audit_log_nonce_key" {
			return Entry{}, ErrReplayed
		}
		return Entry{}, fmt.Errorf("audit: record %s of %s: %w", action, target, err)
	}
	return e, nil
}
