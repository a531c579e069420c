package liabilities

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"svc/modules/ledger"
	"svc/platform/sumtree"
)

// PlatformAccountProof is a platform account's proof, as GET
// /v1/platform-accounts/{platform_account}/liabilities-proof returns it
// and svc ledger verify-proof reads it: a user's proof document
// (sumtree.Proof) with platform_account, the account's name, in place of
// external_user_id. Its leaf's id hash is that of PlatformIdentity(name):
//
//	id_hash = SHA-256(0x00 || salt || u8(len(asset)) || asset || 0xFF || name)
type PlatformAccountProof struct {
	Version         int                 `json:"version"`
	Asset           string              `json:"asset"`
	SnapshotID      int64               `json:"snapshot_id"`
	SnapshotAt      string              `json:"snapshot_at"`
	PlatformAccount string              `json:"platform_account"`
	Salt            string              `json:"salt"`
	Leaf            sumtree.ProofLeaf   `json:"leaf"`
	Path            []sumtree.ProofStep `json:"path"`
	Root            sumtree.ProofRoot   `json:"root"`
}

func platformAccountProof(p sumtree.Proof, name string) PlatformAccountProof {
	return PlatformAccountProof{Version: p.Version, Asset: p.Asset, SnapshotID: p.SnapshotID, SnapshotAt: p.SnapshotAt,
		PlatformAccount: name, Salt: p.Salt, Leaf: p.Leaf, Path: p.Path, Root: p.Root}
}

// Proof is the proof as sumtree verifies it: its ExternalUserID is the
// account's PlatformIdentity.
func (p PlatformAccountProof) Proof() sumtree.Proof {
	return sumtree.Proof{Version: p.Version, Asset: p.Asset, SnapshotID: p.SnapshotID, SnapshotAt: p.SnapshotAt,
		ExternalUserID: PlatformIdentity(p.PlatformAccount), Salt: p.Salt, Leaf: p.Leaf, Path: p.Path, Root: p.Root}
}

// ParseProofDocument reads a proof document strictly (sumtree.ParseProof),
// a user's or a platform account's: exactly one of external_user_id and
// platform_account (a valid name), and exactly the other keys of the
// document. It returns the proof as sumtree.Verify checks it (for a
// platform account, ExternalUserID is its PlatformIdentity) and whose leaf
// it claims to be.
func ParseProofDocument(data []byte) (sumtree.Proof, ledger.Holder, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil || top == nil {
		// Not an object: sumtree says what is wrong with it.
		p, err := sumtree.ParseProof(data)
		if err == nil {
			err = errors.New("proof: the document is not an object")
		}
		return p, ledger.Holder{}, err
	}
	raw, platform := top["platform_account"]
	if !platform {
		p, err := sumtree.ParseProof(data)
		return p, ledger.UserHolder(p.ExternalUserID), err
	}
	if _, both := top["external_user_id"]; both {
		return sumtree.Proof{}, ledger.Holder{}, errors.New("proof: the document names both a user (external_user_id) and a platform account (platform_account)")
	}
	var name string
	if err := json.Unmarshal(raw, &name); err != nil || !ledger.ValidPlatformName(name) {
		return sumtree.Proof{}, ledger.Holder{}, fmt.Errorf("proof: platform_account is not a platform account's name (1 to %d characters of [a-z0-9_.:-]): %s", ledger.MaxPlatformName, raw)
	}
	// The same document with the name under external_user_id, for
	// sumtree's strict reading of every other key; then the identity the
	// name stands for, which no JSON string can carry.
	delete(top, "platform_account")
	top["external_user_id"] = raw
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(top); err != nil {
		return sumtree.Proof{}, ledger.Holder{}, fmt.Errorf("proof: %w", err)
	}
	p, err := sumtree.ParseProof(buf.Bytes())
	if err != nil {
		return sumtree.Proof{}, ledger.Holder{}, err
	}
	p.ExternalUserID = PlatformIdentity(name)
	return p, ledger.PlatformHolder(name), nil
}
