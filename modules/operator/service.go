package operator

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/uptrace/bun"

	"svc/modules/audit"
	"svc/platform/db"
	"svc/platform/fault"
)

// Service verifies operators' signatures and changes the roster.
type Service struct {
	DB bun.IDB
	// RP is the console's WebAuthn identity (passkey signatures).
	RP RelyingParty
	// Required refuses the signed actions without a signature
	// (OPERATOR_SIGNATURES=required); otherwise an unsigned request acts as
	// its API key, and a signed one is verified all the same.
	Required bool
	Now      func() time.Time
}

func (s *Service) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// recordRow is operator_records.
type recordRow struct {
	bun.BaseModel `bun:"table:operator_records"`

	Seq        int64      `bun:"seq,pk"`
	PrevHash   []byte     `bun:"prev_hash"`
	Hash       []byte     `bun:"hash"`
	Change     Change     `bun:"change,type:jsonb"`
	Signatures []Envelope `bun:"signatures,type:jsonb"`
	At         time.Time  `bun:"at,nullzero"`
}

// Records reads the enrollment chain with idb, in order.
func Records(ctx context.Context, idb bun.IDB) ([]Record, error) {
	var rows []recordRow
	if err := idb.NewSelect().Model(&rows).OrderExpr("seq").Scan(ctx); err != nil {
		return nil, fmt.Errorf("operators: read the enrollment chain: %w", err)
	}
	out := make([]Record, len(rows))
	for i, r := range rows {
		out[i] = Record{Seq: r.Seq, PrevHash: r.PrevHash, Hash: r.Hash, Change: r.Change, Signatures: r.Signatures, At: r.At}
	}
	return out, nil
}

// Roster replays the enrollment chain read with idb.
func (s *Service) Roster(ctx context.Context, idb bun.IDB) (*Roster, error) {
	recs, err := Records(ctx, idb)
	if err != nil {
		return nil, err
	}
	return Replay(recs, s.RP)
}

// Authorize returns the actor of an action: with a signature (env), the
// enrolled operator whose key signed exactly x, recently; without one, the
// request's own actor (its API key), unless signatures are required. The
// returned actor's signature is stored by audit.Record, whose unique nonce
// refuses a replay.
//
// A statement whose nonce the trail already holds is refused here (401),
// before the action checks anything else, so that a replay is told it is
// one whatever the resource's state now. A nil service (one built by hand
// in a test) acts unsigned and refuses a signature it cannot verify.
func (s *Service) Authorize(ctx context.Context, idb bun.IDB, unsigned audit.Actor, env *Envelope, x Expect) (audit.Actor, error) {
	if s == nil {
		if env != nil {
			return audit.Actor{}, fmt.Errorf("%s: a signed action needs the operator service to verify it", x.Action)
		}
		return unsigned, nil
	}
	if env == nil {
		if s.Required {
			return audit.Actor{}, ErrUnsigned
		}
		return unsigned, nil
	}
	sig, err := s.Verify(ctx, idb, *env, x)
	if err != nil {
		return audit.Actor{}, err
	}
	used, err := idb.NewSelect().Table("audit_log").Where("nonce = ?", sig.Statement.Nonce).Exists(ctx)
	if err != nil {
		return audit.Actor{}, fmt.Errorf("%s: look up the statement's nonce: %w", x.Action, err)
	}
	if used {
		return audit.Actor{}, audit.ErrReplayed
	}
	return ActorOf(sig), nil
}

// SignaturesRequired reports whether an unsigned request is refused; false
// for a nil service.
func (s *Service) SignaturesRequired() bool { return s != nil && s.Required }

// Verify verifies env against the chain's roster for x.
func (s *Service) Verify(ctx context.Context, idb bun.IDB, env Envelope, x Expect) (Signed, error) {
	r, err := s.Roster(ctx, idb)
	if err != nil {
		return Signed{}, refuseChain(err)
	}
	return r.Verify(env, x, s.now(), s.RP)
}

// refuseChain turns a chain that does not verify into a 403 that says so.
func refuseChain(err error) error {
	if errors.Is(err, ErrChain) {
		return fault.Wrap(fault.Forbidden, err.Error()+"; no signed action is accepted until it verifies (svc admin audit verify)", err)
	}
	return err
}

// ActorOf is the audit actor of a verified signature.
func ActorOf(sig Signed) audit.Actor {
	raw, _ := json.Marshal(sig.Envelope) // []byte fields only: cannot fail
	return audit.Signed(audit.Signature{Operator: sig.Operator, KeyID: sig.KeyID, Nonce: sig.Statement.Nonce, Envelope: raw})
}

// Result is what a signed change did: applied as record Seq, or pending
// with ApprovalsNeeded more admins' signatures.
type Result struct {
	Status          string   `json:"status"` // "applied" or "pending"
	Action          string   `json:"action"`
	Name            string   `json:"name"`
	Seq             *int64   `json:"seq"`
	ChainHead       string   `json:"chain_head"`
	SignedBy        []string `json:"signed_by"`
	ApprovalsNeeded int      `json:"approvals_needed"`
}

// proposalRow is operator_proposals.
type proposalRow struct {
	bun.BaseModel `bun:"table:operator_proposals"`

	ID           int64      `bun:"id,pk,autoincrement"`
	ChainHead    []byte     `bun:"chain_head"`
	ChangeDigest string     `bun:"change_digest"`
	Change       Change     `bun:"change,type:jsonb"`
	Signatures   []Envelope `bun:"signatures,type:jsonb"`
	CreatedAt    time.Time  `bun:"created_at,nullzero"`
}

// Head is the chain's head, read with idb: what a change's statement signs
// as chain_head.
func (s *Service) Head(ctx context.Context, idb bun.IDB) ([]byte, error) {
	r, err := s.Roster(ctx, idb)
	if err != nil {
		return nil, refuseChain(err)
	}
	return r.Head, nil
}

// Submit applies one signed change of the roster: init (the first admin's
// own key, while no operator exists) or an admin's signature of a change
// on top of the chain's head. A change that needs two admins waits as a
// proposal until a second admin signs the same change on the same head.
// Every accepted signature is an audit row; the record, the mirror tables
// and the audit row commit together.
func (s *Service) Submit(ctx context.Context, env Envelope) (Result, error) {
	st, err := env.Parse()
	if err != nil {
		return Result{}, err
	}
	c, err := changeOf(st)
	if err != nil {
		return Result{}, fault.New(fault.Invalid, err.Error())
	}
	var res Result
	err = db.RunInTx(ctx, s.DB, func(ctx context.Context, tx bun.Tx) error {
		// One change at a time: each binds the head the last one left.
		if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock(hashtext('operator_records'))"); err != nil {
			return err
		}
		r, err := s.Roster(ctx, tx)
		if err != nil {
			return refuseChain(err)
		}
		var signer Signed
		if c.Action == ActionInit {
			if len(r.Operators) > 0 {
				return ErrInitDone
			}
			st, err := selfSigned(c, env, r.Head, s.RP)
			if err != nil {
				return err
			}
			if err := fresh(st, s.now()); err != nil {
				return err
			}
			pub, _ := ParsePublicKey(c.PublicKey)
			signer = Signed{Operator: c.Name, Role: Admin, KeyID: pub.ID(), Statement: st, Envelope: env}
		} else {
			if signer, err = r.Verify(env, c.Expect(r.Head), s.now(), s.RP); err != nil {
				return err
			}
			if err := r.allows(c); err != nil {
				return err
			}
		}
		res = Result{Action: c.Action, Name: c.Name, ChainHead: hex.EncodeToString(r.Head)}
		sigs := []Envelope{env}
		digest := changeDigest(c)
		var prop proposalRow
		found := true
		if err := tx.NewSelect().Model(&prop).Where("chain_head = ? AND change_digest = ?", r.Head, digest).For("UPDATE").Scan(ctx); err != nil {
			if !errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("operators: read the proposal: %w", err)
			}
			found = false
		}
		signers := []string{signer.Operator}
		if found {
			for _, e := range prop.Signatures {
				pst, err := e.Parse()
				if err != nil {
					return err
				}
				k, ok := r.Keys[pst.KeyID]
				if !ok {
					// Not a key of the chain: a proposal written by hand.
					// The record would not verify; refuse rather than sign on.
					return fault.New(fault.Forbidden, fmt.Sprintf("the pending change carries a signature by %s, which is no enrolled key", pst.KeyID))
				}
				name := k.Operator
				if name == signer.Operator {
					return ErrSameOperator
				}
				signers = append(signers, name)
			}
			sigs = append(slices.Clone(prop.Signatures), env)
		}
		slices.Sort(signers)
		res.SignedBy = signers
		if c.Action == ActionInit || len(signers) >= r.Quorum() {
			rec := recordRow{Seq: r.Len + 1, PrevHash: r.Head, Hash: recordHash(r.Head, sigs), Change: c, Signatures: sigs}
			// Verify the record as the chain will: nothing is written that
			// a replay would refuse.
			if err := r.apply(Record{Seq: rec.Seq, PrevHash: rec.PrevHash, Hash: rec.Hash, Change: c, Signatures: sigs}, s.RP.recorded()); err != nil {
				return fault.New(fault.Forbidden, err.Error())
			}
			if _, err := tx.NewInsert().Model(&rec).Exec(ctx); err != nil {
				return fmt.Errorf("operators: append record %d: %w", rec.Seq, err)
			}
			if _, err := tx.NewDelete().Model((*proposalRow)(nil)).Where("chain_head = ?", rec.PrevHash).Exec(ctx); err != nil {
				return fmt.Errorf("operators: clear proposals: %w", err)
			}
			if err := mirror(ctx, tx, c, rec.Seq); err != nil {
				return err
			}
			res.Status, res.Seq = "applied", &rec.Seq
		} else {
			if found {
				_, err = tx.NewUpdate().Model(&prop).Set("signatures = ?", jsonOf(sigs)).WherePK().Exec(ctx)
			} else {
				_, err = tx.NewInsert().Model(&proposalRow{ChainHead: r.Head, ChangeDigest: digest, Change: c, Signatures: sigs}).Exec(ctx)
			}
			if err != nil {
				return fmt.Errorf("operators: record the proposal: %w", err)
			}
			res.Status, res.ApprovalsNeeded = "pending", r.Quorum()-len(signers)
		}
		_, err = audit.Record(ctx, tx, s.now(), ActorOf(signer), c.Action, c.Name, c)
		return err
	})
	if err != nil {
		return Result{}, err
	}
	return res, nil
}

// changeDigest identifies a change among the proposals of one head.
func changeDigest(c Change) string {
	b, _ := json.Marshal(c)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// mirror applies c, record seq, to the operators and operator_keys tables.
func mirror(ctx context.Context, tx bun.Tx, c Change, seq int64) error {
	var stmts []struct {
		q    string
		args []any
	}
	add := func(q string, args ...any) {
		stmts = append(stmts, struct {
			q    string
			args []any
		}{q, args})
	}
	addKey := func() {
		pub, _ := ParsePublicKey(c.PublicKey)
		add("INSERT INTO operator_keys (key_id, operator, public_key, added_seq) VALUES (?, ?, ?, ?)", pub.ID(), c.Name, c.PublicKey, seq)
	}
	switch c.Action {
	case ActionInit, ActionEnroll:
		add("INSERT INTO operators (name, role, enrolled_seq) VALUES (?, ?, ?)", c.Name, string(c.Role), seq)
		addKey()
	case ActionAddKey:
		addKey()
	case ActionRevokeKey:
		add("UPDATE operator_keys SET revoked_seq = ? WHERE key_id = ?", seq, c.KeyID)
	case ActionSetRole:
		add("UPDATE operators SET role = ?, updated_at = now() WHERE name = ?", string(c.Role), c.Name)
	case ActionRevoke:
		add("UPDATE operators SET revoked_seq = ?, updated_at = now() WHERE name = ?", seq, c.Name)
		add("UPDATE operator_keys SET revoked_seq = ? WHERE operator = ? AND revoked_seq IS NULL", seq, c.Name)
	}
	for _, st := range stmts {
		if _, err := tx.ExecContext(ctx, st.q, st.args...); err != nil {
			return fmt.Errorf("operators: mirror %s of %s: %w", c.Action, c.Name, err)
		}
	}
	return nil
}

// View is an operator as listed: the chain's word, with the keys.
type View struct {
	Name       string    `json:"name"`
	Role       Role      `json:"role"`
	Revoked    bool      `json:"revoked"`
	EnrolledAt int64     `json:"enrolled_seq"`
	Keys       []KeyView `json:"keys"`
}

// KeyView is an operator's key as listed.
type KeyView struct {
	KeyID     string `json:"key_id"`
	PublicKey string `json:"public_key"`
	Revoked   bool   `json:"revoked"`
}

// Views lists the roster's operators by name.
func (r *Roster) Views() []View {
	out := []View{}
	for _, n := range r.Names() {
		o := r.Operators[n]
		v := View{Name: o.Name, Role: o.Role, Revoked: o.Revoked, EnrolledAt: o.Seq, Keys: []KeyView{}}
		for _, id := range o.Keys {
			k := r.Keys[id]
			v.Keys = append(v.Keys, KeyView{KeyID: k.ID, PublicKey: k.Public.String(), Revoked: k.Revoked})
		}
		out = append(out, v)
	}
	return out
}

// Discrepancies compares the operators and operator_keys tables with the
// roster the chain proves, and names every row the chain does not prove
// (an operator or key inserted or changed by hand) and every proven one
// missing. Authorization never reads the tables; this is how a hand-made
// row is found (svc admin audit verify, the reconciliation's alert).
func Discrepancies(ctx context.Context, idb bun.IDB, r *Roster) ([]string, error) {
	ops, keys, err := tableRows(ctx, idb)
	if err != nil {
		return nil, err
	}
	return compareTables(r, ops, keys), nil
}
