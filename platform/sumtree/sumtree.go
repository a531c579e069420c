// Package sumtree is the Merkle sum tree of the proof of liabilities: each
// leaf commits to a salted hash of a user's id and the user's balance, each
// node to both of its children's hashes and sums, so that the root commits
// to the total. It builds trees, extracts inclusion proofs and verifies
// them; it needs no database. docs/provable-custody.md specifies the
// encoding byte by byte and the verification algorithm.
//
// # Encoding (version 1)
//
// All hashes are SHA-256 (32 bytes); every amount is an unsigned 64-bit
// big-endian integer in the asset's smallest unit, and must not exceed
// MaxSum (2^63-1, the ledger's bigint). || is concatenation.
//
//	id_hash   = SHA-256(0x00 || salt[32] || len(asset)[1] || asset || external_user_id)
//	leaf_hash = SHA-256(0x01 || id_hash[32] || balance[8])
//	node_hash = SHA-256(0x02 || left_hash[32] || left_sum[8] || right_hash[32] || right_sum[8])
//	node_sum  = left_sum + right_sum  (refused above MaxSum)
//
// Leaves are ordered by id_hash (bytewise ascending). Each level pairs
// nodes 2i and 2i+1; an odd last node is carried up to the next level
// unchanged. The root is the single node of the last level; an empty tree
// has the zero hash and the sum 0.
package sumtree

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
)

// Tag bytes that open every hashed message, so that no id hash, leaf and
// node can ever be taken for one another.
const (
	tagID   = 0x00
	tagLeaf = 0x01
	tagNode = 0x02
)

// MaxSum is the largest balance or sum a tree may hold.
const MaxSum = math.MaxInt64

// SaltSize is the size of a leaf's salt.
const SaltSize = 32

// Hash is a SHA-256 digest.
type Hash [32]byte

// Node is a hash with the sum it commits to.
type Node struct {
	Hash Hash
	Sum  uint64
}

// ErrOverflow is a sum above MaxSum.
var ErrOverflow = errors.New("sumtree: sum above 2^63-1")

// IDHash is the salted hash of a user's id in one asset's tree.
func IDHash(salt [SaltSize]byte, asset, externalUserID string) (Hash, error) {
	if len(asset) == 0 || len(asset) > 255 {
		return Hash{}, fmt.Errorf("sumtree: asset code of %d bytes: want 1 to 255", len(asset))
	}
	h := sha256.New()
	h.Write([]byte{tagID})
	h.Write(salt[:])
	h.Write([]byte{byte(len(asset))})
	h.Write([]byte(asset))
	h.Write([]byte(externalUserID))
	var out Hash
	h.Sum(out[:0])
	return out, nil
}

// Leaf is the leaf node of a user.
func Leaf(idHash Hash, balance uint64) (Node, error) {
	if balance > MaxSum {
		return Node{}, ErrOverflow
	}
	var buf [1 + 32 + 8]byte
	buf[0] = tagLeaf
	copy(buf[1:], idHash[:])
	binary.BigEndian.PutUint64(buf[33:], balance)
	return Node{Hash: sha256.Sum256(buf[:]), Sum: balance}, nil
}

// Parent is the node over left and right.
func Parent(left, right Node) (Node, error) {
	if left.Sum > MaxSum || right.Sum > MaxSum || left.Sum+right.Sum > MaxSum {
		return Node{}, ErrOverflow
	}
	var buf [1 + 2*(32+8)]byte
	buf[0] = tagNode
	copy(buf[1:], left.Hash[:])
	binary.BigEndian.PutUint64(buf[33:], left.Sum)
	copy(buf[41:], right.Hash[:])
	binary.BigEndian.PutUint64(buf[73:], right.Sum)
	return Node{Hash: sha256.Sum256(buf[:]), Sum: left.Sum + right.Sum}, nil
}

// Tree is a built tree: Levels[0] are the leaves in order, the last level
// holds the root alone.
type Tree struct {
	Levels [][]Node
}

// Build builds the tree over leaves, which must already be in id_hash
// order (SortLeaves).
func Build(leaves []Node) (*Tree, error) {
	t := &Tree{Levels: [][]Node{leaves}}
	for cur := leaves; len(cur) > 1; {
		next := make([]Node, (len(cur)+1)/2)
		for i := 0; i+1 < len(cur); i += 2 {
			p, err := Parent(cur[i], cur[i+1])
			if err != nil {
				return nil, err
			}
			next[i/2] = p
		}
		if len(cur)%2 == 1 {
			next[len(next)-1] = cur[len(cur)-1]
		}
		t.Levels = append(t.Levels, next)
		cur = next
	}
	return t, nil
}

// Root is the tree's root: the zero hash and 0 for an empty tree.
func (t *Tree) Root() Node {
	top := t.Levels[len(t.Levels)-1]
	if len(top) == 0 {
		return Node{}
	}
	return top[0]
}

// Side says where a step's sibling is.
type Side string

// Sides.
const (
	SiblingLeft  Side = "left"
	SiblingRight Side = "right"
)

// Step is one sibling on the path from a leaf to the root.
type Step struct {
	Side    Side
	Sibling Node
}

// PathOf returns the steps from leaf index i to the root, reading the
// levels' node counts from counts (counts[0] = number of leaves) and the
// nodes through at(level, index). A level where the node is carried up
// has no step.
func PathOf(i int, counts []int, at func(level, index int) (Node, error)) ([]Step, error) {
	if len(counts) == 0 || i < 0 || i >= counts[0] {
		return nil, fmt.Errorf("sumtree: leaf %d out of range", i)
	}
	var path []Step
	for level := 0; level+1 < len(counts); level++ {
		sib := i ^ 1
		if sib < counts[level] {
			n, err := at(level, sib)
			if err != nil {
				return nil, err
			}
			side := SiblingRight
			if sib < i {
				side = SiblingLeft
			}
			path = append(path, Step{Side: side, Sibling: n})
		}
		i /= 2
	}
	return path, nil
}

// Counts are the node counts of every level of a tree over n leaves.
func Counts(n int) []int {
	c := []int{n}
	for n > 1 {
		n = (n + 1) / 2
		c = append(c, n)
	}
	return c
}

// Path returns the steps from leaf i to the root of t.
func (t *Tree) Path(i int) ([]Step, error) {
	counts := make([]int, len(t.Levels))
	for l, nodes := range t.Levels {
		counts[l] = len(nodes)
	}
	return PathOf(i, counts, func(level, index int) (Node, error) { return t.Levels[level][index], nil })
}

// RootOf folds a path over a leaf: the root it leads to. It refuses a sum
// above MaxSum anywhere, so no sibling can be negative in two's
// complement and no addition can wrap.
func RootOf(leaf Node, path []Step) (Node, error) {
	cur := leaf
	if cur.Sum > MaxSum {
		return Node{}, ErrOverflow
	}
	for k, s := range path {
		var err error
		switch s.Side {
		case SiblingLeft:
			cur, err = Parent(s.Sibling, cur)
		case SiblingRight:
			cur, err = Parent(cur, s.Sibling)
		default:
			return Node{}, fmt.Errorf("sumtree: step %d: side %q is neither left nor right", k, s.Side)
		}
		if err != nil {
			return Node{}, fmt.Errorf("sumtree: step %d: %w", k, err)
		}
	}
	return cur, nil
}

// SortLeaves orders leaves and their ids (any per-leaf payload, permuted
// alike) by id hash.
func SortLeaves[T any](ids []Hash, payload []T) {
	idx := make([]int, len(ids))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return bytes.Compare(ids[a][:], ids[b][:]) })
	sortedIDs := make([]Hash, len(ids))
	sortedP := make([]T, len(payload))
	for to, from := range idx {
		sortedIDs[to] = ids[from]
		sortedP[to] = payload[from]
	}
	copy(ids, sortedIDs)
	copy(payload, sortedP)
}
