package operator

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"slices"
	"time"

	"svc/platform/fault"
)

// The enrollment actions: each is one record of the chain, and one audit
// row per signature.
const (
	ActionInit      = "operator.init"       // the first admin, self-signed
	ActionEnroll    = "operator.enroll"     // a new operator with a role and a key
	ActionAddKey    = "operator.add_key"    // another key for an operator (rotation, a passkey)
	ActionRevokeKey = "operator.revoke_key" // one key out
	ActionSetRole   = "operator.set_role"   // a new role
	ActionRevoke    = "operator.revoke"     // the operator and all their keys out
)

// Change is one change of the roster, as its statements sign it: the
// action, the operator's name (the statement's resource) and, as facts,
// the role, public key or key id it names and the chain head it applies
// to.
type Change struct {
	Action    string `json:"action"`
	Name      string `json:"name"`
	Role      Role   `json:"role,omitempty"`
	PublicKey string `json:"public_key,omitempty"`
	KeyID     string `json:"key_id,omitempty"`
}

// Facts are the change's facts on top of the chain head head.
func (c Change) Facts(head []byte) map[string]string {
	f := map[string]string{"chain_head": hex.EncodeToString(head)}
	if c.Role != "" {
		f["role"] = string(c.Role)
	}
	if c.PublicKey != "" {
		f["public_key"] = c.PublicKey
	}
	if c.KeyID != "" {
		f["key_id"] = c.KeyID
	}
	return f
}

// Expect is what a signature of the change on top of head must sign: an
// admin's, except init's (the new admin's own).
func (c Change) Expect(head []byte) Expect {
	return Expect{Action: c.Action, Resource: c.Name, Facts: c.Facts(head), Role: Admin}
}

// Statement is the change's statement on top of head, at t.
func (c Change) Statement(head []byte, t time.Time) Statement {
	return NewStatement(c.Action, c.Name, c.Facts(head), t)
}

// changeOf reads the change a statement signs.
func changeOf(s Statement) (Change, error) {
	c := Change{Action: s.Action, Name: s.Resource, Role: Role(s.Facts["role"]), PublicKey: s.Facts["public_key"], KeyID: s.Facts["key_id"]}
	return c, c.check()
}

// check validates the change's own fields.
func (c Change) check() error {
	if !ValidName(c.Name) {
		return fmt.Errorf("operator name %q: 1 to 64 of [a-z0-9_.-], starting with a letter or digit", c.Name)
	}
	need := map[string][3]bool{ // role, public_key, key_id
		ActionInit: {true, true, false}, ActionEnroll: {true, true, false}, ActionAddKey: {false, true, false},
		ActionRevokeKey: {false, false, true}, ActionSetRole: {true, false, false}, ActionRevoke: {false, false, false},
	}
	n, ok := need[c.Action]
	if !ok {
		return fmt.Errorf("unknown operator change %q", c.Action)
	}
	if n[0] != (c.Role != "") || n[1] != (c.PublicKey != "") || n[2] != (c.KeyID != "") {
		return fmt.Errorf("%s takes exactly %s", c.Action, map[string]string{
			ActionInit: "a public key (role admin)", ActionEnroll: "a role and a public key", ActionAddKey: "a public key",
			ActionRevokeKey: "a key id", ActionSetRole: "a role", ActionRevoke: "the name"}[c.Action])
	}
	if c.Role != "" && !c.Role.Valid() {
		return fmt.Errorf("role %q: viewer, approver or admin", c.Role)
	}
	if c.Action == ActionInit && c.Role != Admin {
		return fmt.Errorf("init enrolls an admin")
	}
	if c.PublicKey != "" {
		if _, err := ParsePublicKey(c.PublicKey); err != nil {
			return err
		}
	}
	return nil
}

// Record is one record of the enrollment chain (operator_records).
type Record struct {
	Seq        int64
	PrevHash   []byte
	Hash       []byte
	Change     Change
	Signatures []Envelope
	At         time.Time
}

// recordHash is the hash of a record: SHA-256 of the previous record's
// hash and, per signature, each of its byte strings with its length.
func recordHash(prev []byte, sigs []Envelope) []byte {
	h := sha256.New()
	h.Write(prev)
	for _, e := range sigs {
		for _, b := range [][]byte{e.Statement, e.Signature, e.AuthenticatorData, e.ClientDataJSON} {
			_ = binary.Write(h, binary.BigEndian, uint32(len(b)))
			h.Write(b)
		}
	}
	return h.Sum(nil)
}

// genesis is the chain head before the first record.
var genesis = make([]byte, 32)

// Operator is an enrolled operator as the chain proves them.
type Operator struct {
	Name    string
	Role    Role
	Keys    []string // key ids, in enrollment order, revoked ones included
	Revoked bool
	Seq     int64 // the record that enrolled them
}

// Key is an enrolled key.
type Key struct {
	ID       string
	Operator string
	Public   PublicKey
	Revoked  bool
	Seq      int64 // the record that added it
}

// Roster is the operators and keys the chain proves, and its head.
type Roster struct {
	Head      []byte
	Len       int64
	Operators map[string]*Operator
	Keys      map[string]*Key
}

func newRoster() *Roster {
	return &Roster{Head: genesis, Operators: map[string]*Operator{}, Keys: map[string]*Key{}}
}

// Admins counts the active admins.
func (r *Roster) Admins() int {
	n := 0
	for _, o := range r.Operators {
		if !o.Revoked && o.Role == Admin {
			n++
		}
	}
	return n
}

// Quorum is how many admins must sign a change now: two once two admins
// exist, else one.
func (r *Roster) Quorum() int { return min(2, max(1, r.Admins())) }

// Names lists the operators by name.
func (r *Roster) Names() []string {
	out := make([]string, 0, len(r.Operators))
	for n := range r.Operators {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// Signed is a verified signature: who signed what.
type Signed struct {
	Operator  string
	Role      Role
	KeyID     string
	Statement Statement
	Envelope  Envelope
}

// Verify checks env against the roster for x at now: an active key of an
// active operator signed it, recently, with a role that allows x, and it
// states exactly x's action, resource and facts.
func (r *Roster) Verify(env Envelope, x Expect, now time.Time, rp RelyingParty) (Signed, error) {
	st, err := env.Parse()
	if err != nil {
		return Signed{}, err
	}
	k, ok := r.Keys[st.KeyID]
	if !ok {
		return Signed{}, unauthenticated(fmt.Sprintf("key %s is not an enrolled operator key", st.KeyID))
	}
	op := r.Operators[k.Operator]
	if k.Revoked || op == nil || op.Revoked {
		return Signed{}, unauthenticated(fmt.Sprintf("key %s is revoked", st.KeyID))
	}
	if err := env.verifySignature(k.Public, rp); err != nil {
		return Signed{}, err
	}
	if err := fresh(st, now); err != nil {
		return Signed{}, err
	}
	if err := x.match(st); err != nil {
		return Signed{}, err
	}
	if !op.Role.AtLeast(x.Role) {
		return Signed{}, forbidden(fmt.Sprintf("operator %s is %s; %s needs %s", op.Name, op.Role, x.Action, x.Role))
	}
	return Signed{Operator: op.Name, Role: op.Role, KeyID: k.ID, Statement: st, Envelope: env}, nil
}

// VerifyRecorded checks a signature the service accepted before (a stored
// approval or audit row): a key the chain enrolled signed env, for action
// on resource, whether the key or its operator has been revoked since.
// Its freshness and the signer's role were checked when it was accepted,
// and the console's origin then too (rp.Recorded).
func (r *Roster) VerifyRecorded(env Envelope, action, resource string, rp RelyingParty) (Signed, error) {
	st, err := env.Parse()
	if err != nil {
		return Signed{}, err
	}
	k, ok := r.Keys[st.KeyID]
	if !ok {
		return Signed{}, unauthenticated(fmt.Sprintf("key %s was never enrolled", st.KeyID))
	}
	if err := env.verifySignature(k.Public, rp.recorded()); err != nil {
		return Signed{}, err
	}
	if st.Action != action || st.Resource != resource {
		return Signed{}, forbidden(fmt.Sprintf("the signed statement is for %s of %s, not %s of %s", st.Action, st.Resource, action, resource))
	}
	op := r.Operators[k.Operator]
	return Signed{Operator: op.Name, Role: op.Role, KeyID: k.ID, Statement: st, Envelope: env}, nil
}

// fresh refuses a statement older than MaxAge or more than MaxSkew ahead.
func fresh(st Statement, now time.Time) error {
	t, _ := time.Parse(TimeLayout, st.At) // Parse checked it
	switch {
	case now.Sub(t) > MaxAge:
		return unauthenticated(fmt.Sprintf("the signed statement is stale: signed at %s, more than %s ago; sign again", st.At, MaxAge))
	case t.Sub(now) > MaxSkew:
		return unauthenticated(fmt.Sprintf("the signed statement is dated %s, ahead of the service's clock (%s); check the signer's clock", st.At, now.UTC().Format(TimeLayout)))
	}
	return nil
}

// Replay verifies records in order from the first and returns the roster
// they prove. Any record that does not verify fails the whole chain
// (ErrChain), naming it.
func Replay(records []Record, rp RelyingParty) (*Roster, error) {
	r := newRoster()
	rp = rp.recorded()
	for i, rec := range records {
		if rec.Seq != int64(i)+1 {
			return nil, chainError(rec.Seq, "out of sequence (expected %d)", i+1)
		}
		if err := r.apply(rec, rp); err != nil {
			return nil, chainError(rec.Seq, "%v", err)
		}
	}
	return r, nil
}

// apply verifies one record on top of the roster and applies it.
func (r *Roster) apply(rec Record, rp RelyingParty) error {
	if !bytes.Equal(rec.PrevHash, r.Head) {
		return fmt.Errorf("does not link to the record before it")
	}
	if !bytes.Equal(recordHash(rec.PrevHash, rec.Signatures), rec.Hash) {
		return fmt.Errorf("its hash does not match its contents")
	}
	if len(rec.Signatures) == 0 {
		return fmt.Errorf("no signature")
	}
	first, err := rec.Signatures[0].Parse()
	if err != nil {
		return err
	}
	c, err := changeOf(first)
	if err != nil {
		return err
	}
	if c != rec.Change {
		return fmt.Errorf("its change column differs from what its statements sign")
	}
	if err := r.sigsFor(c, rec.Signatures, rp); err != nil {
		return err
	}
	if err := r.allows(c); err != nil {
		return err
	}
	r.change(c, rec.Seq)
	r.Head, r.Len = rec.Hash, rec.Seq
	return nil
}

// sigsFor checks that sigs make c on top of the roster: init's one
// signature by its own key on an empty roster; otherwise one by each of
// Quorum distinct active admins (their freshness was checked when they
// were accepted).
func (r *Roster) sigsFor(c Change, sigs []Envelope, rp RelyingParty) error {
	x := c.Expect(r.Head)
	if c.Action == ActionInit {
		if len(r.Operators) > 0 {
			return fmt.Errorf("init after the first operator")
		}
		if len(sigs) != 1 {
			return fmt.Errorf("init carries one signature, its own")
		}
		_, err := selfSigned(c, sigs[0], r.Head, rp)
		return err
	}
	seen := map[string]bool{}
	for _, e := range sigs {
		st, err := e.Parse()
		if err != nil {
			return err
		}
		if err := x.match(st); err != nil {
			return err
		}
		k, ok := r.Keys[st.KeyID]
		if !ok || k.Revoked {
			return fmt.Errorf("signed by %s, not an active key", st.KeyID)
		}
		op := r.Operators[k.Operator]
		if op == nil || op.Revoked || op.Role != Admin {
			return fmt.Errorf("signed by %s, not an active admin", k.Operator)
		}
		if err := e.verifySignature(k.Public, rp); err != nil {
			return err
		}
		if seen[op.Name] {
			return fmt.Errorf("two signatures of %s", op.Name)
		}
		seen[op.Name] = true
	}
	if len(seen) < r.Quorum() {
		return fmt.Errorf("%d admin signature(s) where %d are needed", len(seen), r.Quorum())
	}
	return nil
}

// selfSigned checks init's signature: by the key it enrolls, over the
// change on top of head.
func selfSigned(c Change, e Envelope, head []byte, rp RelyingParty) (Statement, error) {
	st, err := e.Parse()
	if err != nil {
		return Statement{}, err
	}
	if err := c.Expect(head).match(st); err != nil {
		return Statement{}, err
	}
	pub, err := ParsePublicKey(c.PublicKey)
	if err != nil {
		return Statement{}, err
	}
	if st.KeyID != pub.ID() {
		return Statement{}, unauthenticated("init is signed by the key it enrolls")
	}
	return st, e.verifySignature(pub, rp)
}

// allows checks c against the roster's state: names and keys are never
// reused, and the last admin is never removed.
func (r *Roster) allows(c Change) error {
	op := r.Operators[c.Name]
	switch c.Action {
	case ActionInit, ActionEnroll:
		if op != nil {
			return forbidden(fmt.Sprintf("operator %s exists (names are never reused)", c.Name))
		}
	default:
		if op == nil || op.Revoked {
			return fault.New(fault.NotFound, "no active operator "+c.Name)
		}
	}
	if c.PublicKey != "" {
		pub, _ := ParsePublicKey(c.PublicKey) // check() parsed it
		if k, ok := r.Keys[pub.ID()]; ok {
			return forbidden(fmt.Sprintf("key %s is already enrolled for %s; a key belongs to one operator", k.ID, k.Operator))
		}
	}
	lastAdmin := op != nil && op.Role == Admin && r.Admins() == 1
	switch c.Action {
	case ActionRevokeKey:
		k, ok := r.Keys[c.KeyID]
		if !ok || k.Operator != c.Name || k.Revoked {
			return forbidden(fmt.Sprintf("key %s is not an active key of %s", c.KeyID, c.Name))
		}
		if active := r.activeKeys(c.Name); active == 1 && lastAdmin {
			return forbidden("this is the last admin's last key; add another key first")
		}
	case ActionSetRole:
		if lastAdmin && c.Role != Admin {
			return forbidden(fmt.Sprintf("%s is the last admin; enroll another admin first", c.Name))
		}
	case ActionRevoke:
		if lastAdmin {
			return forbidden(fmt.Sprintf("%s is the last admin; enroll another admin first", c.Name))
		}
	}
	return nil
}

func (r *Roster) activeKeys(name string) int {
	n := 0
	for _, id := range r.Operators[name].Keys {
		if !r.Keys[id].Revoked {
			n++
		}
	}
	return n
}

// change applies c, recorded as record seq.
func (r *Roster) change(c Change, seq int64) {
	addKey := func() {
		pub, _ := ParsePublicKey(c.PublicKey)
		id := pub.ID()
		r.Keys[id] = &Key{ID: id, Operator: c.Name, Public: pub, Seq: seq}
		r.Operators[c.Name].Keys = append(r.Operators[c.Name].Keys, id)
	}
	switch c.Action {
	case ActionInit, ActionEnroll:
		r.Operators[c.Name] = &Operator{Name: c.Name, Role: c.Role, Seq: seq}
		addKey()
	case ActionAddKey:
		addKey()
	case ActionRevokeKey:
		r.Keys[c.KeyID].Revoked = true
	case ActionSetRole:
		r.Operators[c.Name].Role = c.Role
	case ActionRevoke:
		op := r.Operators[c.Name]
		op.Revoked = true
		for _, id := range op.Keys {
			r.Keys[id].Revoked = true
		}
	}
}
