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
func (e *encoder) str(s string) { e.u32(uint32(len(s))); e.b = append(e.b, s...) }
func (e *encoder) raw(b []byte) { e.b = append(e.b, b...) }
func (e *encoder) bytes(b []byte) {
	e.u32(uint32(len(b)))
	e.b = append(e.b, b...)
}
func (e *encoder) time(t time.Time) {
	e.i64(t.UnixMicro())
}

// Encode is the entry's canonical encoding (docs/checkpoints.md).
func (s SealedEntry) Encode() []byte {
	e := encoder{b: make([]byte, 0, 128+96*len(s.Postings))}
	e.u8(entryTag)
	e.u8(encodingV1)
	e.i64(s.ID)
	e.u64(s.XactID)
	e.str(s.Kind)
	e.str(s.Asset)
	e.str(s.SourceRef)
	if s.Memo == nil {
		e.u8(0)
	} else {
		e.u8(1)
		e.str(*s.Memo)
	}
	e.time(s.CreatedAt)
	e.u32(uint32(len(s.Postings)))
	for _, p := range s.Postings {
		e.i64(p.ID)
		e.i64(p.AccountID)
		e.str(p.AccountAsset)
		e.str(p.AccountKind)
		e.str(p.AccountOwner)
		e.i64(p.Amount)
		if p.BalanceAfter == nil {
			e.u8(0)
		} else {
			e.u8(1)
			e.i64(*p.BalanceAfter)
		}
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
