package audit

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/uptrace/bun"
)

// The signed actions: each one moves, releases or credits money or changes
// limits, keys or operators, and carries its operator's signature whenever
// OPERATOR_SIGNATURES is required. An unsigned row of one of them was
// recorded while signatures were off, or inserted by hand.
var signedActions = map[string]bool{
	WithdrawalApprove: true, WithdrawalReject: true, WithdrawalRelease: true, WithdrawalMarkBroadcast: true,
	DepositResolve: true, DepositCreditDismissed: true, EventRedeliver: true, AssetSetLimits: true,
	"ledger.correct": true, "ledger.transfer": true, KeyMint: true, KeyRevoke: true, ReconciliationAck: true,
}

// IsSignedAction reports an action that an operator signs: the actions
// above and every operator.* change of the roster.
func IsSignedAction(action string) bool {
	return signedActions[action] || strings.HasPrefix(action, "operator.")
}

// Row is one audit_log row as it is verified and exported: its columns,
// the hash chain's (prev_hash and hash in hex), and Canonical, the text its
// hash covers (audit_log_canonical, migration 0048), as the database
// computes it from the stored row.
type Row struct {
	Seq           int64           `json:"seq"`
	ID            int64           `json:"id"`
	At            string          `json:"at"` // UTC to the microsecond, as Canonical renders it
	Actor         string          `json:"actor"`
	ActorLabel    string          `json:"actor_label"`
	Action        string          `json:"action"`
	Target        string          `json:"target"`
	RequestDigest string          `json:"request_digest"`
	Detail        json.RawMessage `json:"detail"`
	Operator      *string         `json:"operator"`
	KeyID         *string         `json:"key_id"`
	Signature     json.RawMessage `json:"signature"` // the envelope as stored; null when unsigned
	Nonce         *string         `json:"nonce"`
	PrevHash      string          `json:"prev_hash"`
	Hash          string          `json:"hash"`
	Canonical     string          `json:"canonical"`
}

// Signed reports a row that carries an operator's signature.
func (r Row) Signed() bool {
	s := bytes.TrimSpace(r.Signature)
	return len(s) > 0 && !bytes.Equal(s, []byte("null"))
}

// Rows reads the whole trail with idb, in seq order, each row with the
// canonical text the database hashes.
func Rows(ctx context.Context, idb bun.IDB) ([]Row, error) {
	var raw []struct {
		Seq           int64   `bun:"seq"`
		ID            int64   `bun:"id"`
		At            string  `bun:"at"`
		Actor         string  `bun:"actor"`
		ActorLabel    string  `bun:"actor_label"`
		Action        string  `bun:"action"`
		Target        string  `bun:"target"`
		RequestDigest string  `bun:"request_digest"`
		Detail        string  `bun:"detail"`
		Operator      *string `bun:"operator"`
		KeyID         *string `bun:"key_id"`
		Signature     *string `bun:"signature"`
		Nonce         *string `bun:"nonce"`
		PrevHash      string  `bun:"prev_hash"`
		Hash          string  `bun:"hash"`
		Canonical     string  `bun:"canonical"`
	}
	if err := idb.NewRaw(`SELECT seq, id, to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS at,
       actor, actor_label, action, target, request_digest, detail::text AS detail, operator, key_id,
       signature::text AS signature, nonce, encode(prev_hash, 'hex') AS prev_hash, encode(hash, 'hex') AS hash,
       audit_log_canonical(a) AS canonical
  FROM audit_log a ORDER BY seq`).Scan(ctx, &raw); err != nil {
		return nil, fmt.Errorf("audit: read the trail: %w", err)
	}
	out := make([]Row, len(raw))
	for i, r := range raw {
		out[i] = Row{Seq: r.Seq, ID: r.ID, At: r.At, Actor: r.Actor, ActorLabel: r.ActorLabel, Action: r.Action, Target: r.Target,
			RequestDigest: r.RequestDigest, Detail: json.RawMessage(r.Detail), Operator: r.Operator, KeyID: r.KeyID, Nonce: r.Nonce,
			PrevHash: r.PrevHash, Hash: r.Hash, Canonical: r.Canonical}
		if r.Signature != nil {
			out[i].Signature = json.RawMessage(*r.Signature)
		}
	}
	return out, nil
}

// Finding is one thing a verification found about a row (Seq and ID set)
// or about the trail as a whole (both zero).
type Finding struct {
	Seq int64  `json:"seq,omitempty"`
	ID  int64  `json:"id,omitempty"`
	Why string `json:"why"`
}

// String is the finding for people: "seq 7 (id 7): why".
func (f Finding) String() string {
	if f.Seq == 0 && f.ID == 0 {
		return f.Why
	}
	return fmt.Sprintf("seq %d (id %d): %s", f.Seq, f.ID, f.Why)
}

// genesis is the prev_hash of the first row.
var genesis = make([]byte, 32)

// canonicalFields are the columns audit_log_canonical puts in its array,
// in its order.
var canonicalFields = []string{"seq", "id", "at", "actor", "actor_label", "action", "target", "request_digest", "detail",
	"operator", "key_id", "signature", "nonce"}

// Verify checks rows, given in seq order, as the hash chain the database
// made: seq 1, 2, ... without a gap, each prev_hash the hash of the row
// before (32 zero bytes for the first), each hash sha256(prev_hash ||
// canonical), and each element of canonical (a JSON array) equal to the
// row's own field. It returns one finding per row that fails, naming why:
// a row changed after it was recorded no longer hashes to its hash (or,
// with its hash recomputed, the next row no longer links to it). Rows
// removed from the end of the trail leave no trace here.
func Verify(rows []Row) []Finding {
	var out []Finding
	prev := genesis
	var want int64 = 1
	for _, r := range rows {
		var whys []string
		if r.Seq != want {
			whys = append(whys, fmt.Sprintf("seq %d where %d was expected: rows are missing, repeated or out of order", r.Seq, want))
		}
		want = r.Seq + 1
		ph, err1 := hex.DecodeString(r.PrevHash)
		h, err2 := hex.DecodeString(r.Hash)
		switch {
		case err1 != nil || len(ph) != 32 || err2 != nil || len(h) != 32:
			whys = append(whys, "prev_hash and hash must be 32 bytes in hex")
		default:
			if !bytes.Equal(ph, prev) {
				whys = append(whys, "its prev_hash is not the hash of the row before it: a row before it was changed, removed or inserted")
			}
			sum := sha256.Sum256(append(append([]byte{}, ph...), r.Canonical...))
			if !bytes.Equal(sum[:], h) {
				whys = append(whys, "its hash does not match its contents: the row was changed after it was recorded")
			}
		}
		if why := r.checkCanonical(); why != "" {
			whys = append(whys, why)
		}
		if len(whys) > 0 {
			out = append(out, Finding{Seq: r.Seq, ID: r.ID, Why: strings.Join(whys, "; ")})
		}
		prev = h
	}
	return out
}

// checkCanonical compares the elements of the row's canonical text with
// its fields, naming the first that differs ("" when all agree).
func (r Row) checkCanonical() string {
	d := json.NewDecoder(strings.NewReader(r.Canonical))
	d.UseNumber()
	var elems []any
	if err := d.Decode(&elems); err != nil || len(elems) != len(canonicalFields) {
		return fmt.Sprintf("its canonical text is not the array of its %d hashed columns", len(canonicalFields))
	}
	fields := []any{json.Number(strconv.FormatInt(r.Seq, 10)), json.Number(strconv.FormatInt(r.ID, 10)), r.At, r.Actor, r.ActorLabel,
		r.Action, r.Target, r.RequestDigest, jsonValue(r.Detail), strOrNil(r.Operator), strOrNil(r.KeyID), jsonValue(r.Signature), strOrNil(r.Nonce)}
	for i, name := range canonicalFields {
		if !reflect.DeepEqual(elems[i], fields[i]) {
			return fmt.Sprintf("its %s is not the %s its hash covers", name, name)
		}
	}
	return ""
}

// jsonValue decodes raw JSON, numbers kept as they are written; absent is
// null.
func jsonValue(raw json.RawMessage) any {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return fmt.Sprintf("<not JSON: %v>", err) // never equal to a decoded element
	}
	return v
}

func strOrNil(s *string) any {
	if s == nil {
		return nil
	}
	return *s
}
