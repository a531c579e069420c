// Package merkle is the Merkle tree of RFC 6962 (Certificate Transparency,
// section 2.1) over SHA-256: the tree of the ledger's checkpoints
// (docs/checkpoints.md), with inclusion proofs that a verifier checks with
// nothing but the leaf, its index, the tree's size and its root.
//
//	leaf hash  = SHA-256(0x00 || data)
//	node hash  = SHA-256(0x01 || left || right)
//	MTH({})    = SHA-256("")
//	MTH(D[n])  = node(MTH(D[0:k]), MTH(D[k:n])), k the largest power of two smaller than n
//
// The prefixes keep a leaf from ever passing for a node (second-preimage
// attacks), and the split makes the tree of n leaves unique.
package merkle

import (
	"crypto/sha256"
	"errors"
	"math/bits"
)

// Size is the length of every hash.
const Size = sha256.Size

// Hash is a SHA-256 hash.
type Hash = [Size]byte

// LeafHash is SHA-256(0x00 || data).
func LeafHash(data []byte) Hash {
	h := sha256.New()
	h.Write([]byte{0x00})
	h.Write(data)
	var out Hash
	h.Sum(out[:0])
	return out
}

// NodeHash is SHA-256(0x01 || left || right).
func NodeHash(left, right Hash) Hash {
	var buf [1 + 2*Size]byte
	buf[0] = 0x01
	copy(buf[1:], left[:])
	copy(buf[1+Size:], right[:])
	return sha256.Sum256(buf[:])
}

// split is the largest power of two smaller than n (n >= 2).
func split(n int) int {
	return 1 << (bits.Len(uint(n-1)) - 1)
}

// Root is the tree head of the given leaf hashes (MTH). An empty tree's
// root is SHA-256 of nothing.
func Root(leaves []Hash) Hash {
	if len(leaves) == 0 {
		return sha256.Sum256(nil)
	}
	// Bottom-up, level by level: pairing neighbours left to right and
	// carrying an odd last node up unchanged builds exactly the tree of
	// the recursive definition, without recursion or per-node allocation.
	level := make([]Hash, len(leaves))
	copy(level, leaves)
	for len(level) > 1 {
		next := level[:0]
		for i := 0; i < len(level); i += 2 {
			if i+1 < len(level) {
				next = append(next, NodeHash(level[i], level[i+1]))
			} else {
				next = append(next, level[i])
			}
		}
		level = next
	}
	return level[0]
}

// Proof is the audit path of leaf index in a tree of leaves (RFC 6962
// 2.1.1): the sibling hashes from the leaf up to the root.
func Proof(leaves []Hash, index int) ([]Hash, error) {
	if index < 0 || index >= len(leaves) {
		return nil, errors.New("merkle: leaf index out of range")
	}
	return path(leaves, index), nil
}

func path(leaves []Hash, m int) []Hash {
	n := len(leaves)
	if n == 1 {
		return nil
	}
	k := split(n)
	if m < k {
		return append(path(leaves[:k], m), Root(leaves[k:]))
	}
	return append(path(leaves[k:], m-k), Root(leaves[:k]))
}

// Proofs returns the audit path of every leaf, computing each subtree once
// (the per-leaf Proof would rebuild the tree for each one).
func Proofs(leaves []Hash) [][]Hash {
	out := make([][]Hash, len(leaves))
	var build func(lo, hi int) Hash
	build = func(lo, hi int) Hash {
		if hi-lo == 1 {
			return leaves[lo]
		}
		k := split(hi - lo)
		l, r := build(lo, lo+k), build(lo+k, hi)
		for i := lo; i < lo+k; i++ {
			out[i] = append(out[i], r)
		}
		for i := lo + k; i < hi; i++ {
			out[i] = append(out[i], l)
		}
		return NodeHash(l, r)
	}
	if len(leaves) > 0 {
		build(0, len(leaves))
	}
	return out
}

// RootFromProof computes the root that leaf at index of a tree of size
// leaves has with the given audit path (RFC 9162 2.1.3.2). ok is false
// when the path cannot belong to such a tree (wrong length, index out of
// range).
func RootFromProof(leaf Hash, index, size int, proof []Hash) (root Hash, ok bool) {
	if index < 0 || index >= size {
		return Hash{}, false
	}
	fn, sn := uint64(index), uint64(size-1)
	r := leaf
	for _, p := range proof {
		if sn == 0 {
			return Hash{}, false
		}
		if fn&1 == 1 || fn == sn {
			r = NodeHash(p, r)
			if fn&1 == 0 {
				for fn&1 == 0 && fn != 0 {
					fn >>= 1
					sn >>= 1
				}
			}
		} else {
			r = NodeHash(r, p)
		}
		fn >>= 1
		sn >>= 1
	}
	if sn != 0 {
		return Hash{}, false
	}
	return r, true
}

// Verify reports that proof shows leaf at index in the tree of size
// leaves whose root is root.
func Verify(leaf Hash, index, size int, proof []Hash, root Hash) bool {
	got, ok := RootFromProof(leaf, index, size, proof)
	return ok && got == root
}
