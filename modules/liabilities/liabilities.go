// Package liabilities owns the proof of liabilities: per asset, a Merkle
// sum tree (platform/sumtree) over every user's obligation (available +
// held) at one consistent snapshot of the ledger, whose root commits to
// the total the service owes its users. The roots are published (GET
// /v1/admin/liabilities and the reconciliation report), and each user can
// be shown a proof that their balance is included (GET
// /v1/users/{external_user_id}/liabilities-proof), which anyone can check
// without the service (svc ledger verify-proof, or the algorithm of
// docs/provable-custody.md).
//
// # Snapshots
//
// A snapshot reads every user account of every asset in one REPEATABLE
// READ transaction: it sees one consistent state of the ledger and blocks
// no writer. Each user (external_user_id) with an account in an asset is
// one leaf with its own 32-byte salt, so the published tree reveals
// neither ids nor balances. The salt is HMAC-SHA-256, keyed by a random
// secret of the snapshot and asset (stored, never published), of the asset
// and the user's id: new for every user, asset and snapshot, and derived
// again when the user asks for a proof. The trees are built and every
// asset's header, leaf id hashes and nodes written in the same
// transaction. The header (liabilities_snapshots, append-only) is written
// by the database function liabilities_record_snapshot (migration 0033),
// the runtime role's only way to write one: it stamps the snapshot with
// the transaction's time and refuses a total that is not the sum of the
// asset's user balances in that snapshot. Readers ignore a snapshot dated
// in the future (believable). Snapshots are taken on demand (svc admin
// liabilities snapshot) and with each hourly reconciliation.
//
// The proof endpoint answers from the latest snapshot of the asset; the
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

// Salt derives a user's salt from the snapshot's secret key:
// HMAC-SHA-256(key, u8(len(asset)) || asset || external_user_id).
func Salt(key [32]byte, asset, user string) [sumtree.SaltSize]byte {
	return newSalter(key, asset).salt(user)
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
	Users       int64
	Root        sumtree.Hash
	Total       int64
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
