package sumtree_test

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"svc/platform/sumtree"
)

type user struct {
	id      string
	salt    [sumtree.SaltSize]byte
	balance uint64
}

// build makes a tree over n users with distinct balances and returns it
// with its users in leaf order.
func build(t *testing.T, asset string, n int) (*sumtree.Tree, []user) {
	t.Helper()
	users := make([]user, n)
	ids := make([]sumtree.Hash, n)
	for i := range users {
		users[i] = user{id: fmt.Sprintf("user-%d", i), balance: uint64(i*1000 + 7)}
		users[i].salt = sha256.Sum256([]byte(fmt.Sprintf("salt-%d", i)))
		h, err := sumtree.IDHash(users[i].salt, asset, users[i].id)
		require.NoError(t, err)
		ids[i] = h
	}
	sumtree.SortLeaves(ids, users)
	leaves := make([]sumtree.Node, n)
	for i := range users {
		l, err := sumtree.Leaf(ids[i], users[i].balance)
		require.NoError(t, err)
		leaves[i] = l
	}
	tree, err := sumtree.Build(leaves)
	require.NoError(t, err)
	return tree, users
}

func proofOf(t *testing.T, tree *sumtree.Tree, asset string, users []user, i int) sumtree.Proof {
	t.Helper()
	path, err := tree.Path(i)
	require.NoError(t, err)
	id, err := sumtree.IDHash(users[i].salt, asset, users[i].id)
	require.NoError(t, err)
	return sumtree.NewProof(asset, 1, "2026-01-01T00:00:00+00:00", users[i].id, users[i].salt, id, tree.Levels[0][i], path, tree.Root())
}

func TestEveryUserVerifiesAndTheRootCommitsToTheTotal(t *testing.T) {
	t.Parallel()
	for n := 1; n <= 40; n++ {
		tree, users := build(t, "BTC", n)
		var total uint64
		for _, u := range users {
			total += u.balance
		}
		require.Equal(t, total, tree.Root().Sum, "n=%d", n)
		require.Equal(t, sumtree.Counts(n)[len(sumtree.Counts(n))-1], 1)
		for i := range users {
			p := proofOf(t, tree, "BTC", users, i)
			data, err := json.Marshal(p)
			require.NoError(t, err)
			parsed, err := sumtree.ParseProof(data)
			require.NoError(t, err)
			v, err := sumtree.Verify(parsed)
			require.NoError(t, err, "n=%d user %d", n, i)
			require.Equal(t, users[i].balance, v.Balance)
			require.Equal(t, total, v.Total)
			require.Equal(t, tree.Root().Hash, v.Root)
		}
	}
}

func TestEmptyTree(t *testing.T) {
	t.Parallel()
	tree, err := sumtree.Build(nil)
	require.NoError(t, err)
	require.Equal(t, sumtree.Node{}, tree.Root())
}

// TestAnyChangedByteFails flips every byte of the leaf, the path and the
// root of proofs in a 13-leaf tree (paths with and without carried-up
// levels) and checks that parsing or verification fails every time.
func TestAnyChangedByteFails(t *testing.T) {
	t.Parallel()
	tree, users := build(t, "USDT_TRC20", 13)
	for _, i := range []int{0, 5, 12} {
		p := proofOf(t, tree, "USDT_TRC20", users, i)
		data, err := json.Marshal(p)
		require.NoError(t, err)
		s := string(data)
		start := strings.Index(s, `"leaf":`)
		require.Positive(t, start)
		require.True(t, strings.HasSuffix(s, "}}"))
		// from "leaf": to the end: the leaf, the path and the root (the
		// document's keys are in that order)
		checked := 0
		for pos := start; pos < len(data); pos++ {
			for _, flip := range []byte{0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40} {
				mutated := append([]byte(nil), data...)
				mutated[pos] ^= flip
				q, err := sumtree.ParseProof(mutated)
				if err == nil {
					_, err = sumtree.Verify(q)
				}
				require.Error(t, err, "byte %d (%q) xor %#x still verifies: %s", pos, data[pos], flip, mutated)
				checked++
			}
		}
		require.Greater(t, checked, 1000)
		// Every field on its own, with a valid but different value.
		mut := func(f func(q *sumtree.Proof)) error {
			q := p
			q.Path = append([]sumtree.ProofStep(nil), p.Path...)
			f(&q)
			_, err := sumtree.Verify(q)
			return err
		}
		other := strings.Repeat("ab", 32)
		require.Error(t, mut(func(q *sumtree.Proof) { q.Leaf.IDHash = other }))
		require.Error(t, mut(func(q *sumtree.Proof) { q.Leaf.Hash = other }))
		require.Error(t, mut(func(q *sumtree.Proof) { q.Leaf.Balance = incr(q.Leaf.Balance) }))
		require.Error(t, mut(func(q *sumtree.Proof) { q.Root.Hash = other }))
		require.Error(t, mut(func(q *sumtree.Proof) { q.Root.Total = incr(q.Root.Total) }))
		require.Error(t, mut(func(q *sumtree.Proof) { q.ExternalUserID += "x" }))
		require.Error(t, mut(func(q *sumtree.Proof) { q.Asset = "BTC" }))
		require.Error(t, mut(func(q *sumtree.Proof) { q.Salt = other }))
		require.Error(t, mut(func(q *sumtree.Proof) { q.Path = q.Path[:len(q.Path)-1] }))
		for k := range p.Path {
			require.Error(t, mut(func(q *sumtree.Proof) { q.Path[k].Hash = other }))
			require.Error(t, mut(func(q *sumtree.Proof) { q.Path[k].Sum = incr(q.Path[k].Sum) }))
			require.Error(t, mut(func(q *sumtree.Proof) {
				q.Path[k].Side = map[string]string{"left": "right", "right": "left"}[q.Path[k].Side]
			}))
		}
	}
}

func incr(s string) string {
	n, _ := strconv.ParseUint(s, 10, 64)
	return strconv.FormatUint(n+1, 10)
}

// naiveParent is a sum tree node as a careless operator would make it:
// wrapping unsigned (or signed) additions, no range check.
func naiveParent(l, r sumtree.Node) sumtree.Node {
	var buf [81]byte
	buf[0] = 0x02
	copy(buf[1:], l.Hash[:])
	binary.BigEndian.PutUint64(buf[33:], l.Sum)
	copy(buf[41:], r.Hash[:])
	binary.BigEndian.PutUint64(buf[73:], r.Sum)
	return sumtree.Node{Hash: sha256.Sum256(buf[:]), Sum: l.Sum + r.Sum}
}

// TestNegativeSumAttackIsRejected: the operator owes alice 1000 and bob
// 5000, and adds a fake account with -4000 (two's complement) next to bob
// so that the published total is 2000. Each hash is computed honestly;
// alice's proof carries the node over bob and the fake account, whose sum
// (1000) looks fine, but bob's proof carries the fake leaf's sum, and the
// tree's own arithmetic wraps: the verifier must refuse both the negative
// sum as such and any sum above 2^63-1.
func TestNegativeSumAttackIsRejected(t *testing.T) {
	t.Parallel()
	salt := func(s string) [32]byte { return sha256.Sum256([]byte(s)) }
	leafOf := func(id string, bal uint64) (sumtree.Node, sumtree.Hash) {
		h, err := sumtree.IDHash(salt(id), "BTC", id)
		require.NoError(t, err)
		var buf [41]byte
		buf[0] = 0x01
		copy(buf[1:], h[:])
		binary.BigEndian.PutUint64(buf[33:], bal)
		return sumtree.Node{Hash: sha256.Sum256(buf[:]), Sum: bal}, h
	}
	alice, aliceID := leafOf("alice", 1000)
	bob, bobID := leafOf("bob", 5000)
	var zero uint64
	negative := zero - 4000 // -4000 as a 64-bit two's complement
	fake, _ := leafOf("fake", negative)
	filler, _ := leafOf("filler", 0)
	left := naiveParent(alice, filler)
	right := naiveParent(bob, fake) // sum wraps to 1000
	require.Equal(t, uint64(1000), right.Sum)
	root := naiveParent(left, right)
	require.Equal(t, uint64(2000), root.Sum, "the naive tree hides 4000 of liabilities")

	bobProof := sumtree.NewProof("BTC", 1, "2026-01-01T00:00:00+00:00", "bob", salt("bob"), bobID, bob,
		[]sumtree.Step{{Side: sumtree.SiblingRight, Sibling: fake}, {Side: sumtree.SiblingLeft, Sibling: left}}, root)
	_, err := sumtree.Verify(bobProof)
	require.ErrorContains(t, err, "path[0].sum")
	// The same with the sum written as a negative number.
	bobProof.Path[0].Sum = "-4000"
	_, err = sumtree.Verify(bobProof)
	require.ErrorContains(t, err, "negative")
	// Alice's path has only non-negative sums (1000 over bob and the fake),
	// but the node her path ends in is built from them: her proof does
	// verify against the operator's root, which is why the node hashes
	// both children's sums: whoever sits next to the fake leaf sees it.
	aliceProof := sumtree.NewProof("BTC", 1, "2026-01-01T00:00:00+00:00", "alice", salt("alice"), aliceID, alice,
		[]sumtree.Step{{Side: sumtree.SiblingRight, Sibling: filler}, {Side: sumtree.SiblingRight, Sibling: right}}, root)
	_, err = sumtree.Verify(aliceProof)
	require.NoError(t, err)

	// And the tree's builder refuses such a leaf or sum outright.
	_, err = sumtree.Leaf(bobID, negative)
	require.ErrorIs(t, err, sumtree.ErrOverflow)
	big, err := sumtree.Leaf(bobID, sumtree.MaxSum)
	require.NoError(t, err)
	_, err = sumtree.Parent(big, alice)
	require.ErrorIs(t, err, sumtree.ErrOverflow)
}

func TestParseProofIsStrict(t *testing.T) {
	t.Parallel()
	tree, users := build(t, "BTC", 3)
	data, err := json.Marshal(proofOf(t, tree, "BTC", users, 1))
	require.NoError(t, err)
	_, err = sumtree.ParseProof(data)
	require.NoError(t, err)
	for _, bad := range []string{
		strings.Replace(string(data), `"hash"`, `"Hash"`, 1),
		strings.Replace(string(data), `"version":1,`, ``, 1),
		strings.Replace(string(data), `"version":1,`, `"version":1,"extra":2,`, 1),
		string(data) + "{}",
	} {
		_, err := sumtree.ParseProof([]byte(bad))
		require.Error(t, err, bad)
	}
	for _, bad := range []string{"", "01", "+1", "1.0", "1e3", "9223372036854775808", "18446744073709551615", "-0"} {
		_, err := sumtree.ParseAmount(bad, "x")
		require.Error(t, err, bad)
	}
	_, err = sumtree.ParseHash(strings.Repeat("AB", 32), "x")
	require.Error(t, err)
}

// TestKnownAnswer pins the worked example of docs/provable-custody.md: a
// change to the encoding fails here before any published proof stops
// verifying.
func TestKnownAnswer(t *testing.T) {
	t.Parallel()
	fill := func(b byte) (s [sumtree.SaltSize]byte) {
		for i := range s {
			s[i] = b
		}
		return s
	}
	users := []user{{id: "alice", salt: fill(1), balance: 1000}, {id: "bob", salt: fill(2), balance: 2500}, {id: "carol", salt: fill(3), balance: 0}}
	ids := make([]sumtree.Hash, len(users))
	for i, u := range users {
		h, err := sumtree.IDHash(u.salt, "BTC", u.id)
		require.NoError(t, err)
		ids[i] = h
	}
	require.Equal(t, "24495d245393008e016f5b97479abf35579bff4f039408e5c46dc022f31c0af0", sumtree.HexOf(ids[0]))
	sumtree.SortLeaves(ids, users)
	require.Equal(t, []string{"alice", "carol", "bob"}, []string{users[0].id, users[1].id, users[2].id})
	leaves := make([]sumtree.Node, len(users))
	for i, u := range users {
		l, err := sumtree.Leaf(ids[i], u.balance)
		require.NoError(t, err)
		leaves[i] = l
	}
	require.Equal(t, "90d1b0e6d4bbdc54768818cdc50424762729f3061095751d18e81d1f06ab6477", sumtree.HexOf(leaves[0].Hash))
	tree, err := sumtree.Build(leaves)
	require.NoError(t, err)
	require.Equal(t, "d361046b0690dfa0dad08d3cdc62d200f8250d3866965dfaa620b72bcdf395cc", sumtree.HexOf(tree.Levels[1][0].Hash))
	require.Equal(t, leaves[2], tree.Levels[1][1], "the odd last node is carried up")
	require.Equal(t, "ff9f1acb820ef20f1d4b733d7a21fe6a829f87411a293c419d86ecc3737810fc", sumtree.HexOf(tree.Root().Hash))
	require.Equal(t, uint64(3500), tree.Root().Sum)
}
