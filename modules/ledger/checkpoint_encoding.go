package ledger

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"time"

	"svc/platform/merkle"
)

// The canonical encodings of docs/checkpoints.md. Each starts with a tag
// byte and a version byte, so that an entry's encoding can never be taken
// for a checkpoint's. Integers are fixed-width big-endian (signed ones in
// two's complement), strings a 4-byte big-endian byte length and their
// UTF-8 bytes, optional values a byte 0 (absent) or 1 (present, the value
// follows), timestamps signed microseconds since 1970-01-01T00:00:00Z.
const (
	entryTag      = 'E'
	checkpointTag = 'C'
	encodingV1    = 1
)

// Hex is bytes shown as lowercase hex in JSON.
type Hex []byte

// MarshalText writes lowercase hex.
func (h Hex) MarshalText() ([]byte, error) { return []byte(hex.EncodeToString(h)), nil }

// UnmarshalText reads hex.
func (h *Hex) UnmarshalText(b []byte) error {
	v, err := hex.DecodeString(string(b))
	if err != nil {
		return fmt.Errorf("not hex: %w", err)
	}
	*h = v
	return nil
}

// SealedEntry is an entry as a checkpoint seals it: its fields, its
// transaction id and its postings in id order, each with its account.
type SealedEntry struct {
	ID        int64           `json:"id"`
	XactID    uint64          `json:"xact_id"`
	Kind      string          `json:"kind"`
	Asset     string          `json:"asset"`
	SourceRef string          `json:"source_ref"`
	Memo      *string         `json:"memo"`
	CreatedAt time.Time       `json:"created_at"`
	Postings  []SealedPosting `json:"postings"`
}

// SealedPosting is a posting of a SealedEntry.
type SealedPosting struct {
	ID           int64  `json:"id"`
	AccountID    int64  `json:"account_id"`
	AccountAsset string `json:"account_asset"`
	AccountKind  string `json:"account_kind"`
	AccountOwner string `json:"account_owner"`
	Amount       int64  `json:"amount"`
	BalanceAfter *int64 `json:"balance_after"`
}

type encoder struct{ b []byte }

func (e *encoder) u8(v byte)    { e.b = append(e.b, v) }
func (e *encoder) u64(v uint64) { e.b = binary.BigEndian.AppendUint64(e.b, v) }
func (e *encoder) i64(v int64)  { e.u64(uint64(v)) }
func (e *encoder) u32(v uint32) { e.b = binary.BigEndian.AppendUint32(e.b, v) }
func (e *encoder) raw(b []byte) { e.b = append(e.b, b...) }
func (e *encoder) time(t time.Time) {
	e.i64(t.UnixMicro())
}

// flag writes 1 when present, else 0, and returns present: the marker
// before an optional value, which follows only when it is present.
func (e *encoder) flag(present bool) bool {
	if present {
		e.u8(1)
	} else {
		e.u8(0)
	}
	return present
}

// text appends a length-prefixed string; the encoding of a string and of
// a []byte with the same content is the same.
func text[T string | []byte](e *encoder, s T) {
	e.u32(uint32(len(s)))
	e.b = append(e.b, s...)
}

// entryHead appends an entry's tag, version, fields and postings count:
// everything of its encoding before the postings. memo is written only
// when hasMemo (a NULL memo is a 0 marker).
func entryHead[T string | []byte](e *encoder, id int64, xact uint64, kind, asset, sourceRef, memo T, hasMemo bool, createdAtMicro int64, postings int) {
	e.u8(entryTag)
	e.u8(encodingV1)
	e.i64(id)
	e.u64(xact)
	text(e, kind)
	text(e, asset)
	text(e, sourceRef)
	if e.flag(hasMemo) {
		text(e, memo)
	}
	e.i64(createdAtMicro)
	e.u32(uint32(postings))
}

// posting appends one posting of an entry's encoding; balance_after is
// written only when hasAfter.
func (e *encoder) posting(id, accountID int64, asset, kind, owner string, amount, after int64, hasAfter bool) {
	e.i64(id)
	e.i64(accountID)
	text(e, asset)
	text(e, kind)
	text(e, owner)
	e.i64(amount)
	if e.flag(hasAfter) {
		e.i64(after)
	}
}

// Encode is the entry's canonical encoding (docs/checkpoints.md).
func (s SealedEntry) Encode() []byte {
	e := encoder{b: make([]byte, 0, 128+96*len(s.Postings))}
	var memo string
	if s.Memo != nil {
		memo = *s.Memo
	}
	entryHead(&e, s.ID, s.XactID, s.Kind, s.Asset, s.SourceRef, memo, s.Memo != nil, s.CreatedAt.UnixMicro(), len(s.Postings))
	for _, p := range s.Postings {
		var after int64
		if p.BalanceAfter != nil {
			after = *p.BalanceAfter
		}
		e.posting(p.ID, p.AccountID, p.AccountAsset, p.AccountKind, p.AccountOwner, p.Amount, after, p.BalanceAfter != nil)
	}
	return e.b
}

// Leaf is the entry's leaf hash in its checkpoint's tree.
func (s SealedEntry) Leaf() merkle.Hash { return merkle.LeafHash(s.Encode()) }

// Checkpoint is one sealed range of the ledger: the entries whose
// transaction id is in [XidFrom, XidTo), in (transaction id, id) order.
type Checkpoint struct {
	Seq        int64     `json:"seq"`
	XidFrom    uint64    `json:"xid_from"`
	XidTo      uint64    `json:"xid_to"`
	EntryCount int64     `json:"entry_count"`
	Root       Hex       `json:"root"`
	PrevHash   Hex       `json:"prev_hash"`
	Hash       Hex       `json:"hash"`
	Signature  Hex       `json:"signature,omitempty"`
	CreatedAt  time.Time `json:"created_at"`
}

// Encode is the canonical encoding of the checkpoint's fields that its
// hash is taken over (docs/checkpoints.md): everything but the hash and
// the signature.
func (c Checkpoint) Encode() []byte {
	e := encoder{b: make([]byte, 0, 2+8*4+2*merkle.Size+8)}
	e.u8(checkpointTag)
	e.u8(encodingV1)
	e.i64(c.Seq)
	e.u64(c.XidFrom)
	e.u64(c.XidTo)
	e.i64(c.EntryCount)
	e.raw(c.Root)     // 32 bytes (the table and the export check it)
	e.raw(c.PrevHash) // 32 bytes
	e.time(c.CreatedAt)
	return e.b
}

// ComputeHash is SHA-256 of Encode.
func (c Checkpoint) ComputeHash() merkle.Hash { return sha256Sum(c.Encode()) }

// VerifySignature reports that Signature is pub's Ed25519 signature of
// Hash.
func (c Checkpoint) VerifySignature(pub ed25519.PublicKey) bool {
	return len(pub) == ed25519.PublicKeySize && len(c.Signature) == ed25519.SignatureSize && ed25519.Verify(pub, c.Hash, c.Signature)
}

func sha256Sum(b []byte) merkle.Hash { return sha256.Sum256(b) }
