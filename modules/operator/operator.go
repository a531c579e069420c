// Package operator owns the service's operators: enrolled people with a
// role and public keys, the statements they sign for every action that
// moves, releases or credits money or changes limits, keys or operators,
// and the enrollment chain that is the only source of who is an operator.
//
// A signed action travels as an Envelope (the Svc-Operator-Signature
// header over HTTP; the CLI signs with --key). The service derives the
// facts of the action from the resource and the request (Expect), and
// accepts the action only if an enrolled, unrevoked key of an operator with
// the role it needs signed exactly those facts, recently (MaxAge), once
// (the nonce is unique in the audit trail).
//
// The roster (Roster) is what replaying operator_records gives, verifying
// every record's signatures and links from the first admin's self-signed
// record on; the operators and operator_keys tables only mirror it for
// listing, and a row there the chain does not prove is reported
// (Discrepancies), never trusted.
package operator

import (
	"errors"
	"fmt"
	"regexp"

	"svc/platform/fault"
)

// Role is what an operator may do: a viewer reads, an approver also
// decides on withdrawals, deposits and events, an admin also changes
// limits, keys and operators.
type Role string

// The roles, least first.
const (
	Viewer   Role = "viewer"
	Approver Role = "approver"
	Admin    Role = "admin"
)

func (r Role) rank() int {
	switch r {
	case Viewer:
		return 1
	case Approver:
		return 2
	case Admin:
		return 3
	}
	return 0
}

// Valid reports a known role.
func (r Role) Valid() bool { return r.rank() > 0 }

// AtLeast reports whether r includes what o may do.
func (r Role) AtLeast(o Role) bool { return r.rank() >= o.rank() && r.Valid() }

// nameRE is an operator's name: what svc admin prints and audit rows name.
var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,63}$`)

// ValidName reports an operator name: 1 to 64 of [a-z0-9_.-], starting
// with a letter or digit.
func ValidName(s string) bool { return nameRE.MatchString(s) }

// RelyingParty is the console's WebAuthn identity: the RP ID a passkey is
// scoped to and the origins its pages are served from.
type RelyingParty struct {
	ID      string
	Origins []string
	// Recorded checks a signature the service accepted before (a record
	// of the enrollment chain, on replay): its origin and RP ID were
	// checked when it was accepted, and a later change of the console's
	// address must not unmake the chain, so only the signature itself, its
	// challenge and its flags are checked again.
	Recorded bool
}

// recorded is rp for checking signatures accepted before.
func (rp RelyingParty) recorded() RelyingParty {
	rp.Recorded = true
	return rp
}

// Errors. Authentication failures (no, bad, stale or replayed signature,
// unknown key) are 401; a valid signature over the wrong facts, or an
// operator whose role does not allow the action, 403.
var (
	// ErrUnsigned: OPERATOR_SIGNATURES=required and the request carries
	// no signature.
	ErrUnsigned = fault.New(fault.Unauthenticated, "this action needs an operator's signature: send the signed statement in the "+Header+" header (or use svc admin with --key)")
	// ErrChain: the enrollment chain does not verify; no signed action is
	// accepted until it does.
	ErrChain = errors.New("operator enrollment chain fails verification")
	// ErrSameOperator: a change already has this operator's signature.
	ErrSameOperator = fault.New(fault.Conflict, "this operator already signed the change; it needs another admin")
	// ErrInitDone: svc admin operators init runs only while no operator
	// exists.
	ErrInitDone = fault.New(fault.Conflict, "operators are already enrolled: init enrolls only the first admin; enroll others with an admin's signature")
)

func unauthenticated(msg string) error { return fault.New(fault.Unauthenticated, msg) }
func forbidden(msg string) error       { return fault.New(fault.Forbidden, msg) }

// chainError is ErrChain with the record it failed at.
func chainError(seq int64, format string, a ...any) error {
	return fmt.Errorf("%w: record %d: %s", ErrChain, seq, fmt.Sprintf(format, a...))
}
