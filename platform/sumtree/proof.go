package sumtree

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ProofVersion is the version of the encoding and of the proof document.
const ProofVersion = 1

// Proof is the inclusion proof of one user's balance, as the API returns it
// (GET /v1/users/{external_user_id}/liabilities-proof) and as svc ledger
// verify-proof reads it. Hashes and the salt are lowercase hex; amounts are
// integer strings in the asset's smallest unit.
type Proof struct {
	Version        int         `json:"version"`
	Asset          string      `json:"asset"`
	SnapshotID     int64       `json:"snapshot_id"`
	SnapshotAt     string      `json:"snapshot_at"`
	ExternalUserID string      `json:"external_user_id"`
	Salt           string      `json:"salt"`
	Leaf           ProofLeaf   `json:"leaf"`
	Path           []ProofStep `json:"path"`
	Root           ProofRoot   `json:"root"`
}

// ProofLeaf is the user's leaf.
type ProofLeaf struct {
	IDHash  string `json:"id_hash"`
	Balance string `json:"balance"`
	Hash    string `json:"hash"`
}

// ProofStep is one sibling on the path, from the leaf up.
type ProofStep struct {
	Side string `json:"side"`
	Hash string `json:"hash"`
	Sum  string `json:"sum"`
}

// ProofRoot is the published root.
type ProofRoot struct {
	Hash  string `json:"hash"`
	Total string `json:"total"`
}

// NewProof renders a proof.
func NewProof(asset string, snapshotID int64, snapshotAt, user string, salt [SaltSize]byte, idHash Hash, leaf Node, path []Step, root Node) Proof {
	p := Proof{Version: ProofVersion, Asset: asset, SnapshotID: snapshotID, SnapshotAt: snapshotAt, ExternalUserID: user,
		Salt: hex.EncodeToString(salt[:]),
		Leaf: ProofLeaf{IDHash: HexOf(idHash), Balance: strconv.FormatUint(leaf.Sum, 10), Hash: HexOf(leaf.Hash)},
		Path: make([]ProofStep, len(path)),
		Root: ProofRoot{Hash: HexOf(root.Hash), Total: strconv.FormatUint(root.Sum, 10)}}
	for i, s := range path {
		p.Path[i] = ProofStep{Side: string(s.Side), Hash: HexOf(s.Sibling.Hash), Sum: strconv.FormatUint(s.Sibling.Sum, 10)}
	}
	return p
}

// HexOf is a hash in lowercase hex.
func HexOf(h Hash) string { return hex.EncodeToString(h[:]) }

// Verified is what a valid proof shows.
type Verified struct {
	Asset          string
	ExternalUserID string
	Balance        uint64
	Root           Hash
	Total          uint64
	Steps          int
}

// ParseProof reads a proof document strictly: exactly the documented keys
// (case-sensitive), nothing after the object.
func ParseProof(data []byte) (Proof, error) {
	var raw any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		return Proof{}, fmt.Errorf("proof: not JSON: %w", err)
	}
	if dec.More() {
		return Proof{}, errors.New("proof: data after the JSON object")
	}
	if err := keysOf(raw, "", []string{"version", "asset", "snapshot_id", "snapshot_at", "external_user_id", "salt", "leaf", "path", "root"}); err != nil {
		return Proof{}, err
	}
	top := raw.(map[string]any)
	if err := keysOf(top["leaf"], "leaf", []string{"id_hash", "balance", "hash"}); err != nil {
		return Proof{}, err
	}
	if err := keysOf(top["root"], "root", []string{"hash", "total"}); err != nil {
		return Proof{}, err
	}
	steps, ok := top["path"].([]any)
	if !ok {
		return Proof{}, errors.New("proof: path is not an array")
	}
	for i, s := range steps {
		if err := keysOf(s, fmt.Sprintf("path[%d]", i), []string{"side", "hash", "sum"}); err != nil {
			return Proof{}, err
		}
	}
	var p Proof
	dec = json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return Proof{}, fmt.Errorf("proof: %w", err)
	}
	return p, nil
}

// keysOf checks that v is an object with exactly the keys want.
func keysOf(v any, where string, want []string) error {
	if where == "" {
		where = "the document"
	}
	m, ok := v.(map[string]any)
	if !ok {
		return fmt.Errorf("proof: %s is not an object", where)
	}
	for _, k := range want {
		if _, ok := m[k]; !ok {
			return fmt.Errorf("proof: %s has no %q", where, k)
		}
	}
	if len(m) != len(want) {
		var extra []string
		for k := range m {
			found := false
			for _, w := range want {
				found = found || k == w
			}
			if !found {
				extra = append(extra, strconv.Quote(k))
			}
		}
		return fmt.Errorf("proof: %s has unknown keys %s", where, strings.Join(extra, ", "))
	}
	return nil
}

// ParseHash reads a hash: exactly 64 lowercase hex digits.
func ParseHash(s, what string) (Hash, error) {
	var h Hash
	if err := parseHex(s, h[:], what); err != nil {
		return Hash{}, err
	}
	return h, nil
}

func parseHex(s string, dst []byte, what string) error {
	if len(s) != 2*len(dst) {
		return fmt.Errorf("%s: %d hex digits, want %d", what, len(s), 2*len(dst))
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return fmt.Errorf("%s: %q is not a lowercase hex digit", what, c)
		}
	}
	_, err := hex.Decode(dst, []byte(s))
	return err
}

// ParseAmount reads an amount: a decimal integer without sign or leading
// zero, at most MaxSum. A negative amount is refused as such: it is the
// classic attack on sum trees (a negative node hides liabilities).
func ParseAmount(s, what string) (uint64, error) {
	if strings.HasPrefix(s, "-") {
		return 0, fmt.Errorf("%s: %s is negative: no balance or sum may be", what, s)
	}
	if s == "" || (len(s) > 1 && s[0] == '0') {
		return 0, fmt.Errorf("%s: %q is not a canonical decimal integer", what, s)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("%s: %q is not a decimal integer", what, s)
		}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n > MaxSum {
		return 0, fmt.Errorf("%s: %s is above 2^63-1 (a negative number in disguise, or an overflow)", what, s)
	}
	return n, nil
}

// Verify checks a proof: the id hash is the salted hash of the asset and
// the user's id, the leaf's hash is its id hash and balance, every sum on
// the path is in [0, 2^63-1] and their additions do not overflow, and
// folding the path over the leaf gives exactly the root's hash and total.
func Verify(p Proof) (Verified, error) {
	if p.Version != ProofVersion {
		return Verified{}, fmt.Errorf("proof: version %d, this verifier knows %d", p.Version, ProofVersion)
	}
	var salt [SaltSize]byte
	if err := parseHex(p.Salt, salt[:], "salt"); err != nil {
		return Verified{}, fmt.Errorf("proof: %w", err)
	}
	idHash, err := ParseHash(p.Leaf.IDHash, "leaf.id_hash")
	if err != nil {
		return Verified{}, fmt.Errorf("proof: %w", err)
	}
	want, err := IDHash(salt, p.Asset, p.ExternalUserID)
	if err != nil {
		return Verified{}, fmt.Errorf("proof: %w", err)
	}
	if want != idHash {
		return Verified{}, fmt.Errorf("proof: leaf.id_hash is not the salted hash of %q in %s (want %s)", p.ExternalUserID, p.Asset, HexOf(want))
	}
	balance, err := ParseAmount(p.Leaf.Balance, "leaf.balance")
	if err != nil {
		return Verified{}, fmt.Errorf("proof: %w", err)
	}
	leafHash, err := ParseHash(p.Leaf.Hash, "leaf.hash")
	if err != nil {
		return Verified{}, fmt.Errorf("proof: %w", err)
	}
	leaf, err := Leaf(idHash, balance)
	if err != nil {
		return Verified{}, fmt.Errorf("proof: leaf: %w", err)
	}
	if leaf.Hash != leafHash {
		return Verified{}, fmt.Errorf("proof: leaf.hash does not commit to the id hash and the balance (want %s)", HexOf(leaf.Hash))
	}
	steps := make([]Step, len(p.Path))
	for i, s := range p.Path {
		h, err := ParseHash(s.Hash, fmt.Sprintf("path[%d].hash", i))
		if err != nil {
			return Verified{}, fmt.Errorf("proof: %w", err)
		}
		sum, err := ParseAmount(s.Sum, fmt.Sprintf("path[%d].sum", i))
		if err != nil {
			return Verified{}, fmt.Errorf("proof: %w", err)
		}
		steps[i] = Step{Side: Side(s.Side), Sibling: Node{Hash: h, Sum: sum}}
	}
	root, err := RootOf(leaf, steps)
	if err != nil {
		return Verified{}, fmt.Errorf("proof: path: %w", err)
	}
	rootHash, err := ParseHash(p.Root.Hash, "root.hash")
	if err != nil {
		return Verified{}, fmt.Errorf("proof: %w", err)
	}
	total, err := ParseAmount(p.Root.Total, "root.total")
	if err != nil {
		return Verified{}, fmt.Errorf("proof: %w", err)
	}
	if root.Hash != rootHash {
		return Verified{}, fmt.Errorf("proof: the path leads to the root %s, not to root.hash %s", HexOf(root.Hash), p.Root.Hash)
	}
	if root.Sum != total {
		return Verified{}, fmt.Errorf("proof: the path adds up to %d, not to root.total %d", root.Sum, total)
	}
	return Verified{Asset: p.Asset, ExternalUserID: p.ExternalUserID, Balance: balance, Root: root.Hash, Total: total, Steps: len(steps)}, nil
}
