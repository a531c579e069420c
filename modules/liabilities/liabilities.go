// Package liabilities owns the proof of liabilities: per asset, a Merkle
// sum tree (platform/sumtree) over everything the service owes at one
// consistent snapshot of the ledger, whose root commits to the total: one
// leaf per user (available + held + reserved) and one per platform account
// (its own available + held + reserved). The roots are published (GET
// /v1/admin/liabilities and the reconciliation report), and each user can
// be shown a proof that their balance is included (GET
// /v1/users/{external_user_id}/liabilities-proof), as the platform can for
// each of its own accounts (GET
// /v1/platform-accounts/{platform_account}/liabilities-proof); anyone can
// check one without the service (svc ledger verify-proof, or the algorithm
// of docs/provable-custody.md).
//
// # Leaves and their identities
//
// A leaf commits to the salted hash of an identity (sumtree.IDHash): a
// user's identity is their external_user_id, as its UTF-8 bytes; a
// platform account's is the byte 0xFF followed by its name
// (PlatformIdentity). No valid UTF-8 string starts with 0xFF, and the
// ledger refuses an owner that is not valid UTF-8 (as does the UTF8
// database), so no user can have a platform account's identity, even a
// user whose id is the account's name: the two are different leaves with
// different salts and id hashes. A platform account's proof names it
// (platform_account in place of external_user_id, PlatformAccountProof);
// a verifier hashes 0xFF || name where a user's proof has the user's id.
//
// A snapshot's users counts the users alone;
// platform_accounts counts the platform accounts' leaves. The tree has
// users + platform_accounts leaves. The header stores users; the number of
// leaves is read from the stored leaves (leavesColumn).
//
// # Snapshots
//
// A snapshot reads every owned account of every asset (a user's
// user_available, user_hold and user_escrow, a platform account's
// platform_available, platform_hold and platform_escrow: every account
// with a materialized balance) in one REPEATABLE READ transaction: it sees
// one consistent state of the ledger and blocks no writer. Each user
// (external_user_id) and each platform account with an account in an
// asset is one leaf with its own 32-byte salt, so the published tree
// reveals neither ids nor balances. The salt is HMAC-SHA-256, keyed by a
// random secret of the snapshot and asset (stored, never published), of
// the asset and the leaf's identity: new for every leaf, asset and
// snapshot, and derived again when a proof is asked for. The trees are
// built and every asset's header, leaf id hashes and nodes written in the
// same transaction. The header (liabilities_snapshots, append-only) is
// written by the database function liabilities_record_snapshot
// (migrations 0033 and 0038), the runtime role's only way to write one: it
// stamps the snapshot with the transaction's time and refuses a total that
// is not the sum of the asset's materialized balances (users' and
// platform accounts') in that snapshot. Readers ignore a snapshot dated in
// the future (believable). Snapshots are taken on demand (svc admin
// liabilities snapshot) and with each hourly reconciliation.
//
// The proof endpoints answer from the latest snapshot of the asset; the
// leaves and nodes of older ones are pruned after ProofRetention.
package liabilities

import (
	"crypto/hmac"
	"crypto/sha256"
	"fmt"
	"hash"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"svc/modules/ledger"
	"svc/platform/logging"
	"svc/platform/sumtree"
)

// Triggers of a snapshot.
const (
	TriggerHourly   = "hourly"
	TriggerOnDemand = "on_demand"
)

// ProofRetention is how long the leaves and nodes of a snapshot that is no
// longer its asset's latest are kept (its header is kept for ever).
const ProofRetention = 24 * time.Hour

// blockSize is the number of nodes in one liabilities_nodes row, and of
// id hashes in one liabilities_leaves row.
const blockSize = 1024

// nodeSize is one stored node: hash and big-endian sum.
const nodeSize = 40

// Salt derives a leaf's salt from the snapshot's secret key:
// HMAC-SHA-256(key, u8(len(asset)) || asset || identity), where identity
// is a user's external_user_id or a platform account's PlatformIdentity.
func Salt(key [32]byte, asset, identity string) [sumtree.SaltSize]byte {
	return newSalter(key, asset).salt(identity)
}

// platformTag opens a platform account's identity: a byte that no valid
// UTF-8 string, and so no user's id, starts with.
const platformTag = "\xff"

// PlatformIdentity is the identity a platform account's leaf is salted and
// hashed with: the byte 0xFF, then the account's name.
func PlatformIdentity(name string) string { return platformTag + name }

// Identity is the identity of a holder's leaf: a user's id, or a platform
// account's PlatformIdentity.
func Identity(h ledger.Holder) string {
	if h.Platform {
		return PlatformIdentity(h.ID)
	}
	return h.ID
}

// salter derives the salts of one asset's users; one per goroutine.
type salter struct {
	mac    hash.Hash
	prefix []byte
}

func newSalter(key [32]byte, asset string) *salter {
	return &salter{mac: hmac.New(sha256.New, key[:]), prefix: append([]byte{byte(len(asset))}, asset...)}
}

func (s *salter) salt(user string) (salt [sumtree.SaltSize]byte) {
	s.mac.Reset()
	s.mac.Write(s.prefix)
	s.mac.Write([]byte(user))
	s.mac.Sum(salt[:0])
	return salt
}

// Service takes snapshots and answers proofs.
type Service struct {
	Pool *pgxpool.Pool
	Log  *slog.Logger
	// Nice is the scheduling priority of the thread that reads, hashes
	// and stores a snapshot (platform/background): 0 is a goroutine like
	// any other; the service takes its snapshots at background.Nice, the
	// lowest, so that they take the CPU the writers leave.
	Nice int
	// Workers bounds the goroutines that hash the trees: 0 is one per
	// CPU; the service uses 1, so a snapshot never takes more than one
	// core from the writers (and all of it runs at Nice).
	Workers int
}

func (s *Service) log() *slog.Logger { return logging.Or(s.Log) }

// Published is one asset's snapshot: what is published of it.
type Published struct {
	ID          int64
	Asset       string
	TakenAt     time.Time
	Trigger     string
	RequestedBy *string
	Users       int64 // the users' leaves
	// PlatformAccounts is the platform accounts' leaves: the tree has
	// Users + PlatformAccounts leaves.
	PlatformAccounts int64
	Root             sumtree.Hash
	Total            int64
}

func encodeNodes(nodes []sumtree.Node) []byte {
	b := make([]byte, 0, len(nodes)*nodeSize)
	for _, n := range nodes {
		b = append(b, n.Hash[:]...)
		b = append(b, byte(n.Sum>>56), byte(n.Sum>>48), byte(n.Sum>>40), byte(n.Sum>>32),
			byte(n.Sum>>24), byte(n.Sum>>16), byte(n.Sum>>8), byte(n.Sum))
	}
	return b
}

func decodeNode(b []byte, i int) (sumtree.Node, error) {
	if (i+1)*nodeSize > len(b) {
		return sumtree.Node{}, fmt.Errorf("node %d is beyond its block of %d bytes", i, len(b))
	}
	var n sumtree.Node
	copy(n.Hash[:], b[i*nodeSize:])
	for _, c := range b[i*nodeSize+32 : (i+1)*nodeSize] {
		n.Sum = n.Sum<<8 | uint64(c)
	}
	return n, nil
}
