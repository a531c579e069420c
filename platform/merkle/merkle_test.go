package merkle_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"svc/platform/merkle"
)

// The inputs and tree heads of RFC 6962's reference implementation
// (certificate-transparency's merkle tree tests): the root of the first n
// inputs, for n from 1 to 8.
var (
	vectorInputs = []string{"", "00", "10", "2021", "3031", "40414243", "5051525354555657", "606162636465666768696a6b6c6d6e6f"}
	vectorRoots  = []string{
		"6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
		"fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
		"aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
		"d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
		"4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
		"76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
		"ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
		"5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
	}
)

func leaves(t testing.TB, n int) []merkle.Hash {
	out := make([]merkle.Hash, n)
	for i := range out {
		b, err := hex.DecodeString(vectorInputs[i%len(vectorInputs)])
		require.NoError(t, err)
		out[i] = merkle.LeafHash(append(b, byte(i/len(vectorInputs))))
		if i < len(vectorInputs) {
			out[i] = merkle.LeafHash(b)
		}
	}
	return out
}

// mth is RFC 6962's recursive definition, word for word.
func mth(l []merkle.Hash) merkle.Hash {
	switch n := len(l); n {
	case 0:
		return sha256.Sum256(nil)
	case 1:
		return l[0]
	default:
		k := 1
		for k*2 < n {
			k *= 2
		}
		return merkle.NodeHash(mth(l[:k]), mth(l[k:]))
	}
}

func TestKnownVectors(t *testing.T) {
	empty := merkle.Root(nil)
	require.Equal(t, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", hex.EncodeToString(empty[:]))
	for n := 1; n <= len(vectorRoots); n++ {
		r := merkle.Root(leaves(t, n))
		require.Equal(t, vectorRoots[n-1], hex.EncodeToString(r[:]), "root of %d leaves", n)
	}
}

func TestRootIsTheRecursiveDefinition(t *testing.T) {
	for n := 0; n <= 70; n++ {
		l := leaves(t, n)
		require.Equal(t, mth(l), merkle.Root(l), "n=%d", n)
	}
}

// Every proof of every leaf of trees of 1 to 70 leaves verifies, equals the
// per-leaf Proof, and fails with any changed byte of the leaf, of the path
// or of the root, with another index, or with a path one hash shorter or
// longer. (A size is not always pinned by a path alone: leaf 0 of 3 and of
// 4 leaves take the same path; the checkpoint's hash commits to the size.)
func TestProofs(t *testing.T) {
	for n := 1; n <= 70; n++ {
		l := leaves(t, n)
		root := merkle.Root(l)
		all := merkle.Proofs(l)
		for i := range l {
			p, err := merkle.Proof(l, i)
			require.NoError(t, err)
			require.Equal(t, len(p), len(all[i]), "n=%d i=%d", n, i)
			for j := range p {
				require.Equal(t, p[j], all[i][j])
			}
			name := fmt.Sprintf("n=%d i=%d", n, i)
			require.True(t, merkle.Verify(l[i], i, n, p, root), name)

			if n > 20 && i%7 != 0 { // the exhaustive byte flips on the small trees
				continue
			}
			for b := 0; b < merkle.Size; b++ {
				leaf := l[i]
				leaf[b] ^= 0x01
				require.False(t, merkle.Verify(leaf, i, n, p, root), name+" leaf byte %d", b)
				r := root
				r[b] ^= 0x80
				require.False(t, merkle.Verify(l[i], i, n, p, r), name+" root byte %d", b)
				for k := range p {
					q := append([]merkle.Hash(nil), p...)
					q[k][b] ^= 0x01
					require.False(t, merkle.Verify(l[i], i, n, q, root), name+" path %d byte %d", k, b)
				}
			}
			if n > 1 {
				require.False(t, merkle.Verify(l[i], (i+1)%n, n, p, root), name+" other index")
			}
			require.False(t, merkle.Verify(l[i], i, n, append(p, root), root), name+" longer path")
			if len(p) > 0 {
				require.False(t, merkle.Verify(l[i], i, n, p[:len(p)-1], root), name+" shorter path")
			}
		}
	}
	_, err := merkle.Proof(leaves(t, 3), 3)
	require.Error(t, err)
	require.False(t, merkle.Verify(merkle.Hash{}, 0, 0, nil, merkle.Root(nil)))
}

func BenchmarkRootMillion(b *testing.B) {
	l := make([]merkle.Hash, 1_000_000)
	for i := range l {
		l[i] = merkle.LeafHash([]byte(fmt.Sprint(i)))
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		merkle.Root(l)
	}
}
