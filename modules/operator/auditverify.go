package operator

import (
	"context"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/uptrace/bun"

	"svc/modules/audit"
	"svc/platform/timefmt"
)

// The audit trail's verification (svc admin audit verify) reads the whole
// trail and the enrollment chain into an AuditExport, from the database
// (ExportAudit) or from a file svc admin audit export wrote
// (ReadAuditExport), and checks it with one function, VerifyAudit: what a
// file is checked for is exactly what the database is checked for.

// ExportFormat and ExportVersion name the export's format.
const (
	ExportFormat  = "svc-audit-export"
	ExportVersion = 1
)

// AuditExport is the audit trail and the enrollment chain, read at one
// snapshot: every audit_log row with the text its hash covers, every
// operator_records record, the rows of the operators and operator_keys
// tables, and the relying party a passkey signature is verified for. It
// is one JSON document (svc admin audit export); nothing else is needed
// to verify it.
type AuditExport struct {
	Format          string        `json:"format"`
	Version         int           `json:"version"`
	ExportedAt      string        `json:"exported_at"`
	RelyingParty    ExportedRP    `json:"relying_party"`
	AuditLog        []audit.Row   `json:"audit_log"`
	OperatorRecords []RecordRow   `json:"operator_records"`
	Operators       []OperatorRow `json:"operators"`
	OperatorKeys    []KeyRow      `json:"operator_keys"`
}

// ExportedRP is the relying party of an export.
type ExportedRP struct {
	ID      string   `json:"id"`
	Origins []string `json:"origins"`
}

// RecordRow is one record of the enrollment chain as exported: the hashes
// in hex, the change, and the signatures (envelopes) that made it.
type RecordRow struct {
	Seq        int64      `json:"seq"`
	PrevHash   string     `json:"prev_hash"`
	Hash       string     `json:"hash"`
	Change     Change     `json:"change"`
	Signatures []Envelope `json:"signatures"`
	At         string     `json:"at"`
}

// OperatorRow is a row of the operators table.
type OperatorRow struct {
	Name        string `json:"name" bun:"name"`
	Role        string `json:"role" bun:"role"`
	EnrolledSeq int64  `json:"enrolled_seq" bun:"enrolled_seq"`
	RevokedSeq  *int64 `json:"revoked_seq" bun:"revoked_seq"`
}

// KeyRow is a row of the operator_keys table.
type KeyRow struct {
	KeyID      string `json:"key_id" bun:"key_id"`
	Operator   string `json:"operator" bun:"operator"`
	PublicKey  string `json:"public_key" bun:"public_key"`
	AddedSeq   int64  `json:"added_seq" bun:"added_seq"`
	RevokedSeq *int64 `json:"revoked_seq" bun:"revoked_seq"`
}

// ExportAudit reads the trail, the chain and the tables with idb in one
// read-only snapshot (REPEATABLE READ), so that they agree as they did at
// one instant.
func ExportAudit(ctx context.Context, idb bun.IDB, rp RelyingParty, now time.Time) (AuditExport, error) {
	x := AuditExport{Format: ExportFormat, Version: ExportVersion, ExportedAt: timefmt.Format(now),
		RelyingParty: ExportedRP{ID: rp.ID, Origins: append([]string{}, rp.Origins...)}}
	err := idb.RunInTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true}, func(ctx context.Context, tx bun.Tx) error {
		var err error
		if x.AuditLog, err = audit.Rows(ctx, tx); err != nil {
			return err
		}
		recs, err := Records(ctx, tx)
		if err != nil {
			return err
		}
		x.OperatorRecords = make([]RecordRow, len(recs))
		for i, r := range recs {
			x.OperatorRecords[i] = RecordRow{Seq: r.Seq, PrevHash: hex.EncodeToString(r.PrevHash), Hash: hex.EncodeToString(r.Hash),
				Change: r.Change, Signatures: r.Signatures, At: timefmt.Format(r.At)}
		}
		x.Operators, x.OperatorKeys, err = tableRows(ctx, tx)
		return err
	})
	if err != nil {
		return AuditExport{}, err
	}
	return x, nil
}

// ReadAuditExport reads an export svc admin audit export wrote.
func ReadAuditExport(r io.Reader) (AuditExport, error) {
	var x AuditExport
	d := json.NewDecoder(r)
	d.DisallowUnknownFields()
	if err := d.Decode(&x); err != nil {
		return AuditExport{}, fmt.Errorf("audit export: %w", err)
	}
	if x.Format != ExportFormat || x.Version != ExportVersion {
		return AuditExport{}, fmt.Errorf("audit export: format %q version %d; want %q version %d", x.Format, x.Version, ExportFormat, ExportVersion)
	}
	return x, nil
}

// tableRows reads the operators and operator_keys tables.
func tableRows(ctx context.Context, idb bun.IDB) ([]OperatorRow, []KeyRow, error) {
	ops := []OperatorRow{}
	if err := idb.NewRaw("SELECT name, role, enrolled_seq, revoked_seq FROM operators ORDER BY name").Scan(ctx, &ops); err != nil {
		return nil, nil, fmt.Errorf("operators: read operators: %w", err)
	}
	keys := []KeyRow{}
	if err := idb.NewRaw("SELECT key_id, operator, public_key, added_seq, revoked_seq FROM operator_keys ORDER BY key_id").Scan(ctx, &keys); err != nil {
		return nil, nil, fmt.Errorf("operators: read operator keys: %w", err)
	}
	return ops, keys, nil
}

// compareTables is Discrepancies over rows already read: every row the
// roster does not prove, or proves otherwise, and every proven operator or
// key missing from them.
func compareTables(r *Roster, ops []OperatorRow, keys []KeyRow) []string {
	var out []string
	seen := map[string]bool{}
	for _, o := range ops {
		seen[o.Name] = true
		revoked := o.RevokedSeq != nil
		p, ok := r.Operators[o.Name]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("operator %q is not enrolled by the chain (inserted by hand?)", o.Name))
		case string(p.Role) != o.Role || p.Revoked != revoked:
			out = append(out, fmt.Sprintf("operator %q reads role %s revoked %t; the chain says role %s revoked %t", o.Name, o.Role, revoked, p.Role, p.Revoked))
		}
	}
	for _, n := range r.Names() {
		if !seen[n] {
			out = append(out, fmt.Sprintf("operator %q of the chain is missing from the operators table", n))
		}
	}
	seenKey := map[string]bool{}
	for _, k := range keys {
		seenKey[k.KeyID] = true
		p, ok := r.Keys[k.KeyID]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("key %s of %q is not enrolled by the chain (inserted by hand?)", k.KeyID, k.Operator))
		case p.Operator != k.Operator || p.Public.String() != k.PublicKey || p.Revoked != (k.RevokedSeq != nil):
			out = append(out, fmt.Sprintf("key %s differs from the chain's (operator, public key or revocation)", k.KeyID))
		}
	}
	for id, k := range r.Keys {
		if !seenKey[id] {
			out = append(out, fmt.Sprintf("key %s of %q of the chain is missing from operator_keys", id, k.Operator))
		}
	}
	slices.Sort(out)
	return out
}

// AuditReport is what VerifyAudit found. OK is true when nothing failed;
// warnings (unsigned rows of signed actions, with allowUnsigned) do not
// fail it. The heads are the last audit row's seq and hash and the
// enrollment chain's head: compare them with the ones noted earlier (or
// the database's) to know that an export is the trail, not a trail.
type AuditReport struct {
	OK              bool            `json:"ok"`
	Rows            int             `json:"rows"`
	Signed          int             `json:"signed"`
	Unsigned        int             `json:"unsigned_signed_actions"`
	OperatorRecords int             `json:"operator_records"`
	HeadSeq         int64           `json:"head_seq"`
	HeadHash        string          `json:"head_hash"`
	ChainHead       string          `json:"chain_head"` // "" when the chain does not verify
	Failures        []audit.Finding `json:"failures"`
	Warnings        []audit.Finding `json:"warnings"`
}

// Unsigned is why an unsigned row of a signed action is reported.
const Unsigned = "unsigned: recorded while OPERATOR_SIGNATURES was off, or inserted by hand"

// VerifyAudit checks an export (of the database or of a file):
//
//   - the audit rows' hash chain (audit.Verify);
//   - the enrollment chain replays (Replay) and the operators tables'
//     rows are what it proves;
//   - every signature of every record has its audit row (its nonce);
//   - every signed row: its envelope verifies with the key the chain
//     enrolled (at any time: a key revoked since is fine), its statement's
//     action and resource are the row's action and target, and its
//     operator, key_id and nonce columns (and its actor, op:NAME) are the
//     statement's and its key's operator;
//   - an unsigned row of a signed action (audit.IsSignedAction) fails
//     unless allowUnsigned, which makes it a warning.
func VerifyAudit(x AuditExport, allowUnsigned bool) AuditReport {
	rep := AuditReport{Rows: len(x.AuditLog), OperatorRecords: len(x.OperatorRecords), Failures: []audit.Finding{}, Warnings: []audit.Finding{}}
	fail := func(f audit.Finding) { rep.Failures = append(rep.Failures, f) }
	if n := len(x.AuditLog); n > 0 {
		rep.HeadSeq, rep.HeadHash = x.AuditLog[n-1].Seq, x.AuditLog[n-1].Hash
	}
	for _, f := range audit.Verify(x.AuditLog) {
		fail(f)
	}
	rp := RelyingParty{ID: x.RelyingParty.ID, Origins: x.RelyingParty.Origins}
	roster, chainErr := replayExported(x.OperatorRecords, rp)
	if chainErr != nil {
		fail(audit.Finding{Why: fmt.Sprintf("operators: %v (the rows below are checked against the records before it)", chainErr)})
	} else {
		rep.ChainHead = hex.EncodeToString(roster.Head)
		for _, d := range compareTables(roster, x.Operators, x.OperatorKeys) {
			fail(audit.Finding{Why: "operators: " + d})
		}
	}
	nonces := map[string]bool{}
	for _, r := range x.AuditLog {
		if r.Nonce != nil {
			nonces[*r.Nonce] = true
		}
	}
	for _, rec := range x.OperatorRecords {
		for _, e := range rec.Signatures {
			if st, err := e.Parse(); err == nil && !nonces[st.Nonce] {
				fail(audit.Finding{Why: fmt.Sprintf("operators: record %d's signature by key %s (nonce %s) has no audit row", rec.Seq, st.KeyID, st.Nonce)})
			}
		}
	}
	for _, r := range x.AuditLog {
		switch {
		case r.Signed():
			rep.Signed++
			if why := verifySignedRow(r, roster, rp); why != "" {
				fail(audit.Finding{Seq: r.Seq, ID: r.ID, Why: why})
			}
		case audit.IsSignedAction(r.Action):
			rep.Unsigned++
			f := audit.Finding{Seq: r.Seq, ID: r.ID, Why: fmt.Sprintf("%s of %s by %s: %s", r.Action, r.Target, r.Actor, Unsigned)}
			if allowUnsigned {
				rep.Warnings = append(rep.Warnings, f)
			} else {
				fail(f)
			}
		}
	}
	rep.OK = len(rep.Failures) == 0
	return rep
}

// replayExported replays the exported records. When the chain does not
// verify it returns, with the error, the roster of the longest prefix
// that does, which the signed rows are then checked against.
func replayExported(rows []RecordRow, rp RelyingParty) (*Roster, error) {
	recs := make([]Record, len(rows))
	for i, r := range rows {
		prev, _ := hex.DecodeString(r.PrevHash) // a bad one does not link: Replay says so
		hash, _ := hex.DecodeString(r.Hash)
		at, _ := time.Parse(time.RFC3339Nano, r.At)
		recs[i] = Record{Seq: r.Seq, PrevHash: prev, Hash: hash, Change: r.Change, Signatures: r.Signatures, At: at}
	}
	r, err := Replay(recs, rp)
	if err == nil {
		return r, nil
	}
	for n := len(recs) - 1; n >= 0; n-- {
		if p, perr := Replay(recs[:n], rp); perr == nil {
			return p, err
		}
	}
	return newRoster(), err // Replay of no record cannot fail
}

// verifySignedRow checks one signed audit row against the roster, naming
// the first thing wrong ("" when it holds).
func verifySignedRow(r audit.Row, roster *Roster, rp RelyingParty) string {
	var env Envelope
	if err := json.Unmarshal(r.Signature, &env); err != nil || len(env.Statement) == 0 || len(env.Signature) == 0 {
		return "its signature column is not a signed statement's envelope"
	}
	st, err := env.Parse()
	if err != nil {
		return "its signed statement does not parse: " + err.Error()
	}
	k, ok := roster.Keys[st.KeyID]
	if !ok {
		return fmt.Sprintf("signed with key %s, which the enrollment chain never enrolled", st.KeyID)
	}
	if err := env.verifySignature(k.Public, rp); err != nil {
		return fmt.Sprintf("its signature does not verify with key %s of %s: %v", k.ID, k.Operator, err)
	}
	switch {
	case st.Action != r.Action:
		return fmt.Sprintf("the signed statement is for action %q, the row records %q", st.Action, r.Action)
	case st.Resource != r.Target:
		return fmt.Sprintf("the signed statement is for resource %q, the row records target %q", st.Resource, r.Target)
	case r.KeyID == nil || *r.KeyID != st.KeyID:
		return fmt.Sprintf("its key_id column is %s, the statement's key is %s", deref(r.KeyID), st.KeyID)
	case r.Nonce == nil || *r.Nonce != st.Nonce:
		return fmt.Sprintf("its nonce column is %s, the statement's nonce is %s", deref(r.Nonce), st.Nonce)
	case r.Operator == nil || *r.Operator != k.Operator:
		return fmt.Sprintf("its operator column is %s, key %s is %s's", deref(r.Operator), k.ID, k.Operator)
	case r.Actor != "op:"+k.Operator:
		return fmt.Sprintf("its actor is %s, the signer is op:%s", r.Actor, k.Operator)
	}
	return ""
}

func deref(s *string) string {
	if s == nil {
		return "null"
	}
	return *s
}
